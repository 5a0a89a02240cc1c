#!/bin/sh
# Instructions per 4 KiB random NFSv3 READ, client and server, over RDMA
# (softrnic) and over TCP, counted by valgrind's callgrind: deterministic
# whatever the machine's load (issue 15).
#
#   scripts/callgrind-call-cost.sh BIN [CALLS_A CALLS_B]
#
# Starts `BIN serve` under callgrind on 127.0.0.1 (ports from PORT_BASE,
# default 22049: NFS, RDMA = +1, MOUNT = +2), runs `BIN bench --pattern
# random --calls CALLS_A`, then `--calls CALLS_B` against it (the client
# under callgrind too), dumping the server's counts after each bench run
# (`callgrind_control -d`; one dump before, so start-up is apart). The per-call figure is the difference of the
# two runs divided by CALLS_B - CALLS_A, so mount, file lookup and start-up
# cancel. Profiles stay in OUT (default /tmp/callgrind-call-cost) for
# callgrind_annotate. Env: TRANSPORTS (default "rdma tcp"), SIZE (16M),
# IN_FLIGHT (32), READ_SIZE (4k).
set -eu
BIN=$(readlink -f "$1")
A=${2:-1000}
B=${3:-3000}
OUT=${OUT:-/tmp/callgrind-call-cost}
PORT_BASE=${PORT_BASE:-22049}
SIZE=${SIZE:-16M}
IN_FLIGHT=${IN_FLIGHT:-32}
READ_SIZE=${READ_SIZE:-4k}
NFS_PORT=$PORT_BASE
RDMA_PORT=$((PORT_BASE + 1))
MOUNT_PORT=$((PORT_BASE + 2))
rm -rf "$OUT"
mkdir -p "$OUT/export"
# The bench reuses a read file of the right size: no WRITEs in the counts.
head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom > "$OUT/export/nfsrdma-bench-read.bin"

total() { grep -m1 '^summary:\|^totals:' "$1" | awk '{print $2}'; }

for t in ${TRANSPORTS:-rdma tcp}; do
    valgrind --tool=callgrind --callgrind-out-file="$OUT/server-$t.%p" \
        "$BIN" serve "$OUT/export" --state-dir "$OUT/state-$t" --addr 127.0.0.1 \
        --rdma-device soft --port $NFS_PORT --rdma-port $RDMA_PORT \
        --mount-port $MOUNT_PORT --no-root-squash > "$OUT/server-$t.log" 2>&1 &
    spid=$!
    # Wait for the listeners (valgrind is slow to start).
    i=0
    until ss -ltn | grep -q ":$MOUNT_PORT "; do
        i=$((i + 1)); [ $i -lt 120 ] || { echo "server did not start" >&2; kill $spid; exit 1; }
        sleep 0.5
    done
    sleep 1
    # Zero the server's counts: start-up goes into dump .1.
    callgrind_control -d started $spid > /dev/null 2>&1
    case $t in
        rdma) url="nfs+rdma://127.0.0.1:$RDMA_PORT$OUT/export?mountport=$MOUNT_PORT" ;;
        tcp) url="nfs://127.0.0.1:$NFS_PORT$OUT/export?mountport=$MOUNT_PORT" ;;
    esac
    for n in $A $B; do
        valgrind --tool=callgrind --callgrind-out-file="$OUT/client-$t-$n" \
            "$BIN" bench --url "$url" --transports $t --pattern random \
            --read-sizes "$READ_SIZE" --in-flight "$IN_FLIGHT" --repeat 1 \
            --calls $n --size "$SIZE" > "$OUT/client-$t-$n.log" 2>&1
        callgrind_control -d "after-$n" $spid > /dev/null 2>&1
        sleep 1
    done
    kill -INT $spid
    wait $spid || true
    # Dumps (each counts since the one before): .1 start-up, .2 the
    # bench of A calls, .3 of B calls, the last one the shutdown.
    s1=$(ls "$OUT"/server-$t.$spid.2); s2=$(ls "$OUT"/server-$t.$spid.3)
    ca=$(total "$OUT/client-$t-$A"); cb=$(total "$OUT/client-$t-$B")
    sa=$(total "$s1"); sb=$(total "$s2")
    echo "$t: client $(( (cb - ca) / (B - A) )) instructions per call, server $(( (sb - sa) / (B - A) )) (client $ca / $cb, server $sa / $sb, $A / $B calls)"
done
