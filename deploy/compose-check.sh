#!/usr/bin/env bash
# The docker-compose deployment, checked end to end (called by .ci/run; runnable alone):
# installs docker.io / docker-compose / debootstrap / chromium when absent, starts dockerd
# when none runs (and stops it again), builds local stand-ins for the official images
# when they cannot be pulled (deploy/standins/), then runs deploy/compose_check.py against
# a deployment with a project name and API port of its own. Non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
say() { printf '[compose-check %5ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

export DEBIAN_FRONTEND=noninteractive
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  say "apt-get install ${need[*]}"
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rlvr-compose-check.XXXXXX")
project="rlvrcheck$(date +%s)$$"
project_b="${project}restore"
dockerd_pid=""
cleanup() {
  rc=$?
  set +e
  for p in "$project_b" "$project"; do
    docker-compose -p "$p" -f docker-compose.yml -f deploy/compose-check.yml down -v --remove-orphans >/dev/null 2>&1
  done
  if [ -n "$dockerd_pid" ]; then
    say "stopping the dockerd this check started (pid $dockerd_pid)"
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 1; done
  fi
  [ $rc -eq 0 ] && rm -rf "$work" || say "kept $work (logs, backup)"
  say "done, exit $rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! docker info >/dev/null 2>&1; then
  say "no Docker engine running: starting dockerd (log: $work/dockerd.log)"
  dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log"; exit 1; }
fi
say "docker engine $(docker version -f '{{.Server.Version}}'), $(docker-compose version --short 2>/dev/null || docker-compose --version)"

say "images: official ones, else local stand-ins"
deploy/standins/build.sh 2>"$work/standins.log" || { cat "$work/standins.log"; exit 1; }

free_port() {  # the first port from $1 that nothing listens on
  python3 - "$1" <<'PY'
import socket, sys
port = int(sys.argv[1])
while True:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            break
        except OSError:
            port += 1
print(port)
PY
}
port=$(free_port 18000)
port_b=$(free_port $((port + 1)))
say "project $project on port $port; restore project $project_b on port $port_b"

CHECK_T0=$t0 CHECK_PROJECT=$project CHECK_PORT=$port CHECK_PROJECT_B=$project_b CHECK_PORT_B=$port_b CHECK_WORKDIR=$work \
  python3 deploy/compose_check.py
say "compose check passed in $(( $(date +%s) - t0 ))s"
