#!/usr/bin/env bash
# The whole-system simulation (tests/sim_whole_system.rs): seeded random operations on the real
# sink, emitter, nats-server and a durable consumer, checked by an oracle after each seed.
#
#   scripts/sim.sh [--short|--long] [--seed N] [--switches all|none|s1,..,s6]
#
#   --short      CI's seeds (the default): what `cargo test` runs
#   --long       DLQ_SIM_SEEDS seeds (default 300, ~15 min on 2 cores) from a random first
#                seed (DLQ_SIM_FIRST_SEED to choose it), DLQ_SIM_OPS operations each (default 60)
#   --seed N     replays seed N alone, with its trace
#   --switches   the generator's scenario switches (default: CI's; see tests/sim/ops.rs and
#                docs/testing.md); `all` once the fixes of issue 33 are merged
#
# A failing seed prints its violations, the scenario it looks like, the command that replays
# it and its operations. Exits non-zero if any seed failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode=short
while [[ $# -gt 0 ]]; do
    case "$1" in
        --short) mode=short ;;
        --long) mode=long ;;
        --seed)
            export DLQ_SIM_SEED="$2"
            shift
            ;;
        --switches)
            export DLQ_SIM_SWITCHES="$2"
            shift
            ;;
        -h | --help)
            sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "sim.sh: unknown argument $1 (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done
if [[ $mode == long && -z ${DLQ_SIM_SEED:-} ]]; then
    export DLQ_SIM_SEEDS=${DLQ_SIM_SEEDS:-300}
    export DLQ_SIM_OPS=${DLQ_SIM_OPS:-60}
    export DLQ_SIM_FIRST_SEED=${DLQ_SIM_FIRST_SEED:-$((RANDOM * 32768 + RANDOM))}
    echo "sim.sh: ${DLQ_SIM_SEEDS} seeds from ${DLQ_SIM_FIRST_SEED}, ${DLQ_SIM_OPS} operations each"
fi
exec cargo test -p dlq-ops --test sim_whole_system -- --nocapture seeds_keep_every_promise
