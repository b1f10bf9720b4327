#!/usr/bin/env bash
# Build local stand-ins for the official images docker-compose.yml uses (python:3.11-slim,
# postgres:16, redis:7) from Debian packages, for machines where those images cannot be
# pulled. An image that is present (or can be pulled) is left alone. See README.md here.
#
# The Debian root (debootstrap --variant=minbase) is cached as a tarball in
# $RLVR_STANDIN_CACHE (default ~/.cache/rlvr-explorer) and imported as
# rlvr-standin-base:bookworm; with that image present a rerun only checks the tags.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
base=rlvr-standin-base:bookworm
cache=${RLVR_STANDIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlvr-explorer}
declare -A folder=([python:3.11-slim]=python [postgres:16]=postgres [redis:7]=redis)

missing=()
for image in "${!folder[@]}"; do
  docker image inspect "$image" >/dev/null 2>&1 && continue
  timeout 120 docker pull -q "$image" >/dev/null 2>&1 && continue
  missing+=("$image")
done
[ ${#missing[@]} -eq 0 ] && { echo "stand-ins: not needed (official or earlier images present)"; exit 0; }
echo "stand-ins: cannot pull ${missing[*]}; building them from Debian packages"

if ! docker image inspect "$base" >/dev/null 2>&1; then
  tarball=$cache/bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
    root=$(mktemp -d /tmp/rlvr-standin-root.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    echo "stand-ins: debootstrap --variant=minbase bookworm (once; cached in $cache)"
    debootstrap --variant=minbase bookworm "$root" >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
    rm -f "$root.log"
    # The host's package sources, CA certificates and pip configuration, so apt and pip
    # inside image builds reach the same mirrors and indexes through the same proxies.
    cp -a /etc/apt/sources.list "$root/etc/apt/" 2>/dev/null || true
    [ -d /etc/apt/sources.list.d ] && cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/"
    mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
    [ -d /usr/local/share/ca-certificates ] && cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
    cp -aL /etc/ssl/certs/. "$root/etc/ssl/certs/" 2>/dev/null || true
    [ -f /etc/pip.conf ] && cp -a /etc/pip.conf "$root/etc/pip.conf"
    [ -d /etc/xdg/pip ] && mkdir -p "$root/etc/xdg" && cp -a /etc/xdg/pip "$root/etc/xdg/"
    # No services start during image builds; no recommends; no apt caches in layers.
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$root/etc/apt/apt.conf.d/90standin"
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
    mkdir -p "$cache"
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
    trap - EXIT
  fi
  echo "stand-ins: docker import $tarball as $base"
  docker import "$tarball" "$base" >/dev/null
fi

for image in "${missing[@]}"; do
  echo "stand-ins: building $image from deploy/standins/${folder[$image]}"
  docker build -q --build-arg BASE="$base" -t "$image" "$here/${folder[$image]}" >/dev/null 2>"${TMPDIR:-/tmp}/rlvr-standin-build.log" \
    || { cat "${TMPDIR:-/tmp}/rlvr-standin-build.log"; exit 1; }
done
