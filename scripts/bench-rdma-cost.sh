#!/bin/sh
# System calls, context switches and CPU time per GiB moved by
# `nfsrdma bench` (the client and its `nfsrdma serve` child together), by
# transport and operation, for one or more builds, interleaved.
#
# Each figure is `perf stat` of a `--repeat 5` run minus a `--repeat 1` run
# of the same point (4 x SIZE more data moved; start-up, the local file
# write and mounting cancel), scaled to one GiB. The bench's median MiB/s
# of the longer run is printed beside it. Needs perf and the
# raw_syscalls tracepoint (root, or perf_event_paranoid <= -1).
#
# Usage: scripts/bench-rdma-cost.sh BIN [BIN ...]
# Environment: SIZE (256M), SIZES (1m: READ/WRITE sizes, one per row),
# IN_FLIGHT (4), OPS ("read write"), TRANSPORTS ("rdma tcp"), ROUNDS (1),
# OUT (a directory for the raw perf outputs, default a temporary one).
#
# Output, one line per build, round, size, operation and transport:
#   bin round size op transport syscalls/GiB cs/GiB cpu_s/GiB MiB/s load1
set -eu

[ $# -ge 1 ] || { sed -n '2,20p' "$0"; exit 2; }
SIZE=${SIZE:-256M}
SIZES=${SIZES:-1m}
IN_FLIGHT=${IN_FLIGHT:-4}
OPS=${OPS:-read write}
TRANSPORTS=${TRANSPORTS:-rdma tcp}
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-$(mktemp -d /tmp/bench-rdma-cost.XXXXXX)}
mkdir -p "$OUT"

# Bytes of SIZE, for the per-GiB scale.
bytes=$(echo "$SIZE" | awk '{
    n = $0 + 0; u = tolower(substr($0, length($0)));
    if (u == "k") n *= 1024; else if (u == "m") n *= 1048576; else if (u == "g") n *= 1073741824;
    print n }')

# run BIN TRANSPORT OP RSIZE REPEAT FILE: perf stat of one bench run.
run() {
    perf stat -x, -e raw_syscalls:sys_enter,context-switches,task-clock -o "$6.perf" -- \
        "$1" bench --size "$SIZE" --read-sizes "$4" --in-flight "$IN_FLIGHT" \
        --transports "$2" --ops "$3" --repeat "$5" >"$6.out" 2>&1
}

# ev FILE EVENT: the counter's value.
ev() { awk -F, -v e="$2" '$3 ~ e { print $1 }' "$1.perf"; }

printf '%-28s %5s %5s %5s %5s %12s %10s %10s %9s %6s\n' \
    bin round size op tport syscalls/GiB cs/GiB cpu_s/GiB MiB/s load1
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for rs in $(echo "$SIZES" | tr , ' '); do
        for op in $OPS; do
            for t in $TRANSPORTS; do
                i=0
                for bin in "$@"; do
                    i=$((i + 1))
                    f1="$OUT/$i-$r-$rs-$op-$t-1"
                    f5="$OUT/$i-$r-$rs-$op-$t-5"
                    run "$bin" "$t" "$op" "$rs" 1 "$f1"
                    run "$bin" "$t" "$op" "$rs" 5 "$f5"
                    load=$(cut -d' ' -f1 /proc/loadavg)
                    mibs=$(awk -v t="$t" '$1 == t { print $4; exit }' "$f5.out")
                    awk -v b="$bytes" -v n="$(basename "$bin")" -v r="$r" -v rs="$rs" \
                        -v op="$op" -v t="$t" -v m="${mibs:--}" -v l="$load" \
                        -v s1="$(ev "$f1" sys_enter)" -v s5="$(ev "$f5" sys_enter)" \
                        -v c1="$(ev "$f1" context-switches)" -v c5="$(ev "$f5" context-switches)" \
                        -v k1="$(ev "$f1" task-clock)" -v k5="$(ev "$f5" task-clock)" \
                        'BEGIN { g = 4 * b / 1073741824;
                            printf "%-28s %5s %5s %5s %5s %12.0f %10.0f %10.3f %9s %6s\n",
                                n, r, rs, op, t, (s5 - s1) / g, (c5 - c1) / g,
                                (k5 - k1) / 1000 / g, m, l }'
                done
            done
        done
    done
    r=$((r + 1))
done
