#!/usr/bin/env bash
# Makes sure nats-server (needed by the integration tests) is installed. Idempotent.
# Installs Debian's `nats-server` package with apt-get when it is missing, and never starts
# or enables its system service: the tests start their own servers on private ports.
set -euo pipefail

find_nats() {
  if command -v nats-server >/dev/null 2>&1; then
    command -v nats-server
  elif [ -x /usr/sbin/nats-server ]; then
    echo /usr/sbin/nats-server
  else
    return 1
  fi
}

if bin="$(find_nats)"; then
  echo "nats-server: $bin ($("$bin" --version 2>&1))"
  exit 0
fi

fail() {
  echo "install-nats-server.sh: $*" >&2
  echo "Install nats-server yourself (Debian: 'apt-get install nats-server') and put it on" >&2
  echo "PATH, or set NATS_SERVER_BIN to the binary's path." >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "nats-server is missing and apt-get is not available."

if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1; then
  # No password prompt when nobody can answer it (CI has no stdin).
  if [ -t 0 ]; then as_root() { sudo "$@"; }; else as_root() { sudo -n "$@"; }; fi
else
  fail "nats-server is missing, and installing it needs root or sudo."
fi

# policy-rc.d exit code 101 = "action forbidden": keeps the package from starting a service.
policy=/usr/sbin/policy-rc.d
created_policy=no
cleanup() {
  if [ "$created_policy" = yes ]; then as_root rm -f "$policy"; fi
}
trap cleanup EXIT
if ! as_root test -e "$policy"; then
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
  as_root chmod 755 "$policy"
  created_policy=yes
fi

echo "install-nats-server.sh: installing Debian package nats-server"
as_root apt-get update
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nats-server
# The package's postinst enables its unit on a fresh install; undo that (no-op without systemd).
if command -v deb-systemd-helper >/dev/null 2>&1; then
  as_root deb-systemd-helper disable nats-server.service >/dev/null 2>&1 || true
fi

bin="$(find_nats)" || fail "apt-get finished but nats-server is still not found."
echo "nats-server: $bin ($("$bin" --version 2>&1))"
