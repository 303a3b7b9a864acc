#!/usr/bin/env bash
# The whole benchmark suite of issue 7 in one command, and its one results table.
#
#   benches/suite.sh [--quick] [--data-1m DIR] [--no-1m]
#
# Runs durable_emit, baselines, operator_queries (10,000 / 100,000 / 1,000,000 items) and
# sink_footprint (100,000 / 1,000,000 items), then consumer_rebuild, consumer_lag and
# runner_overhead (issues 5 and 3) and peers (issue 37's K = 1 targets), each with `--json`, and merges their rows with the
# `suite_table` bench into benches/results/suite.md and suite.json. Each bench's own table
# (stdout) and progress (stderr) are kept beside them in benches/results/suite-raw/.
#
#   --quick        a few minutes: quick modes, 10,000-item queries only, no 1M data
#                  set; results go to $CARGO_TARGET_DIR/suite-quick/ (the committed ones stay).
#   --data-1m DIR  the 1,000,000-item data set: reused if DIR holds one, else generated there
#                  (~7 min, ~5.5 GiB; failure times over the last 25 days) and kept. Default:
#                  $CARGO_TARGET_DIR/bench-data/1m. The benches run on a copy of it (they write:
#                  sled recovery, retention in `dlq serve`, sink_footprint's emits), removed at
#                  the end, so DIR is never changed; the copy needs another ~5.5 GiB.
#   --no-1m        skip the 1,000,000-item queries, footprint and drain.
#
# Needs nats-server (see benches/README.md). Full run: ~20-30 min on 2 cores, plus 3-8 min once
# to generate the 1,000,000-item data set.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
shown="benches/suite.sh${*:+ $*}"

quick=0
one_m=1
data_1m="$CARGO_TARGET_DIR/bench-data/1m"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --no-1m) one_m=0 ;;
        --data-1m) data_1m="$2"; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ "$quick" = 1 ]; then
    one_m=0
    out="$CARGO_TARGET_DIR/suite-quick"
    mode=(--quick)
    drain=()
else
    out="benches/results"
    mode=()
    drain=(--drain 100000,1000000)
    [ "$one_m" = 1 ] || drain=(--drain 100000)
fi
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain -- . ':!benches/results' 2>/dev/null)" ] ||
    commit="$commit (with uncommitted changes)"
raw="$out/suite-raw"
rm -rf "$raw"
mkdir -p "$raw"

echo "building the benches (release) ..."
cargo bench --no-run --bench durable_emit --bench baselines --bench operator_queries \
    --bench sink_footprint --bench suite_table --bench consumer_rebuild --bench consumer_lag \
    --bench runner_overhead --bench peers

# run NAME BENCH ARGS...: stdout to suite-raw/NAME.md, stderr to suite-raw/NAME.log.
run() {
    local name="$1" bench="$2"
    shift 2
    echo "$(date -u +%H:%M:%S) $name: cargo bench --bench $bench -- $*"
    local t0=$SECONDS load0
    load0=$(cut -d' ' -f1 /proc/loadavg)
    cargo bench -q --bench "$bench" -- "$@" --json "$raw/$name.json" \
        >"$raw/$name.md" 2>"$raw/$name.log"
    echo "$(date -u +%H:%M:%S) $name: done in $((SECONDS - t0)) s"
    loads="${loads:+$loads, }$name $load0 → $(cut -d' ' -f1 /proc/loadavg)"
}
loads=""

run 01-durable_emit durable_emit "${mode[@]}" "${drain[@]}"
run 02-baselines baselines "${mode[@]}"
run 03-queries-10k operator_queries --items 10000
if [ "$quick" = 0 ]; then
    run 04-queries-100k operator_queries --items 100000
    run 06-footprint-100k sink_footprint --items 100000
fi
if [ "$one_m" = 1 ]; then
    if [ ! -e "$data_1m/db" ]; then
        echo "$(date -u +%H:%M:%S) generating 1,000,000 items in $data_1m (~7 min, ~5.5 GiB) ..."
        mkdir -p "$data_1m"
        RUST_LOG=error "$CARGO_TARGET_DIR/release/dlq" --data-dir "$data_1m" \
            --nats-url nats://127.0.0.1:1 generate --items 1000000 --jobs 100 --spread-hours 600
    fi
    # The benches write to the data set (sled recovery, retention, emits): they get a copy, so
    # every suite run starts from the same one.
    work_1m="$CARGO_TARGET_DIR/bench-data/1m-work"
    echo "$(date -u +%H:%M:%S) copying $data_1m to $work_1m ..."
    rm -rf "$work_1m"
    mkdir -p "$(dirname "$work_1m")"
    cp -a "$data_1m" "$work_1m"
    run 05-queries-1m operator_queries --items 1000000 --dir "$work_1m"
    run 07-footprint-1m sink_footprint --items 1000000 --dir "$work_1m"
    rm -rf "$work_1m"
fi
# Not part of issue 7, in the table for completeness (issues 3 and 5).
if [ "$quick" = 1 ]; then
    run 08-consumer_rebuild consumer_rebuild --events 20000 --runs 1
else
    run 08-consumer_rebuild consumer_rebuild
fi
run 09-consumer_lag consumer_lag "${mode[@]}"
run 10-runner_overhead runner_overhead "${mode[@]}"
# Issue 37's K = 1 targets: dlq beside the serial ceiling and its peers (Redis + JetStream,
# RabbitMQ quorum queue with confirms: the machine's services).
run 11-peers peers "${mode[@]}"

cargo bench -q --bench suite_table -- --in "$raw" --md "$out/suite.md" --json "$out/suite.json" \
    --note "command: \`$shown\`, commit $commit, started $started, ended $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --note "disk: $(df -h --output=source,fstype,size,avail "$CARGO_TARGET_DIR" | tail -1 | tr -s ' ')" \
    --note "load average (1 min) when each bench started → ended, on $(nproc) cores (other processes share them): $loads" \
    --note "each bench's own table and progress: \`suite-raw/\` beside this file"
echo "written: $out/suite.md, $out/suite.json"
