#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder of outside data (fuzz/, cargo fuzz + libFuzzer).
#
#   scripts/fuzz.sh [--short|--long] [target...]
#
#   --short   about 20 s per target (FUZZ_SHORT_SECONDS), the default: a smoke run for CI
#   --long    FUZZ_SECONDS per target (default 600)
#   target    only these targets (default: all, see `cargo fuzz list` in fuzz/)
#
# Needs only a stable toolchain: cargo fuzz's nightly flags are allowed with RUSTC_BOOTSTRAP=1.
# Installs cargo-fuzz if it is missing. Each target starts from the committed seeds in
# fuzz/corpus/<target>/ plus what earlier runs found (kept in $CARGO_TARGET_DIR/fuzz/corpus,
# never in the repository). Prints the executions per target. Exits non-zero if any target
# crashed or broke an invariant; the crashing input stays in fuzz/artifacts/<target>/: add it
# to fuzz/regressions/<target>/ once fixed (tests/fuzz_regressions.rs replays those).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=short
targets=()
for arg in "$@"; do
    case "$arg" in
        --short) mode=short ;;
        --long) mode=long ;;
        -h | --help)
            sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*)
            echo "fuzz.sh: unknown option $arg (see --help)" >&2
            exit 2
            ;;
        *) targets+=("$arg") ;;
    esac
done
if [[ $mode == short ]]; then
    seconds=${FUZZ_SHORT_SECONDS:-20}
else
    seconds=${FUZZ_SECONDS:-600}
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

export RUSTC_BOOTSTRAP=1
root=$PWD
target_dir=${CARGO_TARGET_DIR:-$root/target}/fuzz
cd fuzz
mapfile -t all < <(cargo fuzz list)
if [[ ${#targets[@]} -eq 0 ]]; then
    targets=("${all[@]}")
fi
for target in "${targets[@]}"; do
    if ! printf '%s\n' "${all[@]}" | grep -qx "$target"; then
        echo "fuzz.sh: no target '$target' (targets: ${all[*]})" >&2
        exit 2
    fi
done

started=$SECONDS
cargo fuzz build --target-dir "$target_dir"
built=$((SECONDS - started))
echo "fuzz.sh: built in ${built}s; fuzzing ${#targets[@]} targets for ${seconds}s each"

failed=()
summary=()
for target in "${targets[@]}"; do
    work="$target_dir/corpus/$target"
    log="$target_dir/logs/$target.log"
    mkdir -p "$work" "$(dirname "$log")" "artifacts/$target"
    began=$SECONDS
    status=0
    # -timeout: one input running 10 s is a hang; -rss_limit_mb: runaway memory is a finding.
    cargo fuzz run --target-dir "$target_dir" "$target" "$work" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    line=$(printf '%-16s %12s executions %5ss' "$target" "${runs:-?}" "$((SECONDS - began))")
    if [[ $status -ne 0 ]]; then
        failed+=("$target")
        line+="  FAILED (exit $status): see $log and fuzz/artifacts/$target/"
        grep -E "panicked at|ERROR: libFuzzer|Test unit written to|SUMMARY" "$log" | head -5 >&2 || true
    fi
    echo "$line"
    summary+=("$line")
done

echo
echo "fuzz.sh: $mode run, ${seconds}s per target, build ${built}s, total $((SECONDS - started))s"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz.sh: findings in: ${failed[*]}" >&2
    exit 1
fi
