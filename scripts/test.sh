#!/usr/bin/env bash
# The project's single test command (CI runs it through .ci/run): installs nats-server if
# needed, then checks formatting and lints, then runs every test of the workspace (dlq,
# dlq-testkit, dlq-chaos).
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step="install nats-server"
trap 'echo; echo "scripts/test.sh: FAILED during: $step" >&2' ERR

scripts/install-nats-server.sh
# The tests look for NATS_SERVER_BIN, then PATH, then /usr/sbin; make the choice explicit.
if [ -z "${NATS_SERVER_BIN:-}" ] && ! command -v nats-server >/dev/null 2>&1 \
  && [ -x /usr/sbin/nats-server ]; then
  export NATS_SERVER_BIN=/usr/sbin/nats-server
fi

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
# The embeddable core (no CLI, admin API, runner or query language) must keep building alone.
run cargo check -p dlq --no-default-features --lib

# Test output is also kept in a log so the totals can be summed for the closing line.
log="$(mktemp "${TMPDIR:-/tmp}/dlq-test.XXXXXX")"
trap 'rm -f "$log"' EXIT
announce cargo test --workspace --doc
cargo test --workspace --doc 2>&1 | tee -a "$log"
announce cargo test --workspace --all-targets
cargo test --workspace --all-targets 2>&1 | tee -a "$log"

totals="$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 \2 \3/p' "$log" \
  | awk '{p += $1; f += $2; i += $3} END {printf "%d passed, %d failed, %d skipped", p, f, i}')"
echo
echo "scripts/test.sh: fmt, clippy and all tests OK"
echo "tests: $totals"
