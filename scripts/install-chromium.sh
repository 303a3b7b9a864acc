#!/usr/bin/env bash
# Makes sure Chromium and chromedriver (needed by tests/web_page.rs, which drives the web page
# of `dlq serve` in a real headless browser) are installed. Idempotent. Installs Debian's
# `chromium` and `chromium-driver` packages with apt-get when either is missing.
set -euo pipefail

chromium="${CHROMIUM_BIN:-/usr/bin/chromium}"
driver="${CHROMEDRIVER:-/usr/bin/chromedriver}"

if [ -x "$chromium" ] && [ -x "$driver" ]; then
  echo "chromium: $chromium ($("$driver" --version 2>&1 | head -n 1))"
  exit 0
fi

fail() {
  echo "install-chromium.sh: $*" >&2
  echo "Install them yourself (Debian: 'apt-get install chromium chromium-driver'), or set" >&2
  echo "CHROMIUM_BIN and CHROMEDRIVER to the binaries' paths." >&2
  exit 1
}

command -v apt-get >/dev/null 2>&1 || fail "chromium or chromedriver is missing and apt-get is not available."

if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
elif command -v sudo >/dev/null 2>&1; then
  # No password prompt when nobody can answer it (CI has no stdin).
  if [ -t 0 ]; then as_root() { sudo "$@"; }; else as_root() { sudo -n "$@"; }; fi
else
  fail "chromium or chromedriver is missing, and installing them needs root or sudo."
fi

echo "install-chromium.sh: installing Debian packages chromium and chromium-driver"
as_root apt-get update
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver

{ [ -x "$chromium" ] && [ -x "$driver" ]; } || fail "apt-get finished but $chromium or $driver is still missing."
echo "chromium: $chromium ($("$driver" --version 2>&1 | head -n 1))"
