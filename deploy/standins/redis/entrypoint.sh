#!/bin/sh
# redis-server as the redis user, reachable from other containers (protected mode off).
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid=redis --regid=redis --init-groups redis-server "$@" --protected-mode no
  fi
  exec redis-server "$@" --protected-mode no
fi
exec "$@"
