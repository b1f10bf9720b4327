#!/bin/sh
# What the official postgres entrypoint does, for the parts this project uses: as root,
# own the data folder and drop to the postgres user; on an empty data folder, initdb with
# POSTGRES_USER as superuser (password POSTGRES_PASSWORD, scram-sha-256 over TCP) and
# create POSTGRES_DB; then run the server listening on all addresses.
set -eu
if [ "${1:-}" = postgres ]; then
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
  fi
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    user=${POSTGRES_USER:-postgres}
    db=${POSTGRES_DB:-$user}
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --no-locale \
      --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$db" != postgres ]; then
      psql -v ON_ERROR_STOP=1 -q -U "$user" -d postgres -c "CREATE DATABASE \"$db\" OWNER \"$user\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "database $db initialised"
  fi
  shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
