#!/usr/bin/env bash
# Builds every fuzz target, seeds the corpora from the kpeer captures and
# runs each target for SECONDS_PER_TARGET (default 60) seconds, one at a
# time, printing one line per target: name, executions, coverage, features,
# corpus size, peak RSS, result. See docs/fuzzing.md.
#
#   fuzz/run_all.sh                 # every target
#   fuzz/run_all.sh iwarp_engine    # some targets
set -u
cd "$(dirname "$0")/.."
secs=${SECONDS_PER_TARGET:-60}
RUSTC_BOOTSTRAP=1 cargo fuzz build || exit 1
python3 fuzz/seeds/make_corpora.py || echo "seeding skipped (needs python3; tshark for iwarp seeds)"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi
bin=fuzz/target/x86_64-unknown-linux-gnu/release
mkdir -p fuzz/logs
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    ASAN_OPTIONS=detect_odr_violation=0 "$bin/$t" -max_total_time="$secs" \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" \
        "fuzz/corpus/$t" >"fuzz/logs/$t.log" 2>&1
    rc=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "fuzz/logs/$t.log" | tail -1)
    execs=$(grep -o 'number_of_executed_units: *[0-9]*' "fuzz/logs/$t.log" | grep -o '[0-9]*$')
    cov=$(echo "$done_line" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
    ft=$(echo "$done_line" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
    corp=$(echo "$done_line" | grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' | cut -d' ' -f2)
    rss=$(grep -o 'peak_rss_mb: *[0-9]*' "fuzz/logs/$t.log" | grep -o '[0-9]*$')
    result=ok
    [ "$rc" -ne 0 ] && result="CRASH (see fuzz/logs/$t.log, fuzz/artifacts/$t/)"
    printf '%-20s execs=%-9s cov=%-6s ft=%-6s corpus=%-12s rss=%sMB %s\n' \
        "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" "$result"
done
