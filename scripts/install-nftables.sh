#!/usr/bin/env bash
# Makes sure `nft` (nftables) is installed: the net-partition chaos drill drops packets with it
# inside its own network namespace (chaos/README.md). Idempotent; installs Debian's nftables
# package with apt-get when it is missing (as root), and never loads a ruleset itself.
set -euo pipefail

if command -v nft >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-nftables.sh: nft is missing; install nftables (Debian: 'apt-get install nftables')" >&2
  echo "as root, or the net-partition chaos test fails." >&2
  exit 1
fi
echo "install-nftables.sh: installing Debian package nftables"
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables
command -v nft >/dev/null 2>&1
