#!/usr/bin/env bash
# The project's single test command (CI runs it through .ci/run): installs nats-server if
# needed (and a recent one for the TLS-first test, scripts/install-nats-server-recent.sh), then checks formatting and lints, then runs every test of the workspace (dlq,
# dlq-testkit, dlq-chaos).
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step="install nats-server"
trap 'echo; echo "scripts/test.sh: FAILED during: $step" >&2' ERR

scripts/install-nats-server.sh
step="install nftables"
scripts/install-nftables.sh
# The tests look for NATS_SERVER_BIN, then PATH, then /usr/sbin; make the choice explicit.
if [ -z "${NATS_SERVER_BIN:-}" ] && ! command -v nats-server >/dev/null 2>&1 \
  && [ -x /usr/sbin/nats-server ]; then
  export NATS_SERVER_BIN=/usr/sbin/nats-server
fi
# A recent nats-server besides, for what Debian's 2.9.10 lacks (the TLS-first handshake).
step="install a recent nats-server"
NATS_SERVER_RECENT_BIN="$(scripts/install-nats-server-recent.sh | tail -n 1)"
export NATS_SERVER_RECENT_BIN
# Chromium and chromedriver for the web page's browser test (tests/web_page.rs).
step="install chromium"
scripts/install-chromium.sh

announce() {
  step="$*"
  echo
  echo "==> $step"
}
run() {
  announce "$@"
  "$@"
}

run cargo fmt --all -- --check
run cargo clippy --workspace --all-targets -- -D warnings
# The embeddable core (`dlq`, core/) builds alone and lint-clean without the test features
# (as a release build has it), and its dependency tree holds none of the operator side's
# crates (HTTP server, command line, job runner, query language).
run cargo clippy -p dlq --lib -- -D warnings
announce "cargo tree -p dlq holds no operator-side crate"
front="$(cargo tree -p dlq -e normal --prefix none | grep -E '^(axum|clap|cel|csv|indicatif|serde_json_path|nix|dlq-ops) ' || true)"
if [ -n "$front" ]; then
  echo "the core library depends on operator-side crates:" >&2
  echo "$front" >&2
  false
fi
# The two libraries' documentation builds with every link resolving to a public item.
announce "cargo doc -p dlq -p dlq-ops (no broken or private links)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p dlq -p dlq-ops

# Test output is also kept in a log so the totals can be summed for the closing line, which is
# printed whether the tests passed or not.
log="$(mktemp "${TMPDIR:-/tmp}/dlq-test.XXXXXX")"
trap 'rm -f "$log"' EXIT
# Every test binary runs under a time limit, so a hung test fails its own binary instead of
# eating CI's time; --no-fail-fast runs the others anyway.
host="$(rustc -vV | sed -n 's/^host: //p')"
export "CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER=timeout --kill-after=30s ${DLQ_TEST_BINARY_TIMEOUT:-20m}"
status=0
announce cargo test --workspace --doc
cargo test --workspace --doc --no-fail-fast 2>&1 | tee -a "$log" || status=1
announce cargo test --workspace --all-targets
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee -a "$log" || status=1

# A binary that crashed or timed out prints no result line: count it as one failure.
totals="$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log" \
  | awk -v status="$status" '{p += $1; f += $2; i += $3}
      END {if (status != 0 && f == 0) f = 1; printf "%d passed, %d failed, %d skipped", p, f, i}')"
echo
if [ "$status" -eq 0 ]; then
  echo "scripts/test.sh: fmt, clippy and all tests OK"
else
  echo "scripts/test.sh: some tests FAILED (their output is above)"
fi
echo "tests: $totals"
exit "$status"
