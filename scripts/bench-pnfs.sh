#!/bin/bash
# scripts/bench-pnfs.sh — the pNFS scaling benchmark (issue 18 item 5,
# docs/pnfs.md "Scaling"). Needs root (network namespaces, tc).
#
# Every server runs in its own network namespace behind a veth pair on a
# bridge (pbbr0, 10.77.0.0/24), and each veth end has a tc token bucket
# (tbf) of RATE in both directions, so every server's link is capped at
# the same rate: a pNFS metadata server (MDS) with DS data servers, and
# one plain `nfsrdma serve`. The client (the pnfs_bench example) runs in
# the root namespace and moves FILES files of MIB MiB in parallel, write
# then read (checked), through the MDS's layouts to the DSes, then
# straight to the plain server; ROUNDS rounds, interleaved. Reported: each
# side's aggregate MiB/s and their ratio, the bytes on each server's link
# (from the veth counters) and the MDS's share of all bytes.
#
#   sudo scripts/bench-pnfs.sh            # DS=4 FILES=8 MIB=8 RATE=100mbit ROUNDS=2
#
# Build first: cargo build --release -p nfsrdma && cargo build --release -p nfs-server --example pnfs_bench
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NFSRDMA_BIN:-$ROOT/target/release/nfsrdma}
BENCH=${PNFS_BENCH_BIN:-$ROOT/target/release/examples/pnfs_bench}
DS=${DS:-4}; FILES=${FILES:-8}; MIB=${MIB:-8}; RATE=${RATE:-100mbit}; ROUNDS=${ROUNDS:-2}
OUT=${OUT:-/tmp/pnfs-bench}
NET=10.77.0
NS=(); PIDS=()

cleanup() {
    local p n
    for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; ip link del "$n-h" 2>/dev/null; done
    ip link del pbbr0 2>/dev/null
}
trap cleanup EXIT

# netns NAME IP: a namespace on the bridge at IP, its link capped at RATE
# both ways.
netns() {
    ip netns add "$1" || exit 1
    NS+=("$1")
    ip link add "$1-h" type veth peer name eth0 netns "$1"
    ip link set "$1-h" master pbbr0 up
    ip netns exec "$1" ip addr add "$2/24" dev eth0
    ip netns exec "$1" ip link set eth0 up
    ip netns exec "$1" ip link set lo up
    ip netns exec "$1" tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 200ms
    tc qdisc add dev "$1-h" root tbf rate "$RATE" burst 256kb latency 200ms
}

# serve NS IP DIR ARGS...: nfsrdma serve DIR on IP:2049 (MOUNT 20048) in NS
serve() {
    local ns=$1 ip=$2 dir=$3; shift 3
    mkdir -p "$dir"
    RUST_LOG=warn ip netns exec "$ns" "$BIN" serve "$dir" --transports tcp --addr "$ip" \
        --port 2049 --mount-port 20048 --allow "$NET.0/24" --no-root-squash --state-dir "$dir.state" "$@" \
        > "$dir.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do
        ip netns exec "$ns" ss -Hltn "sport = :2049" | grep -q . && return 0
        sleep 0.1
    done
    echo "no server in $ns (log: $dir.log)"; exit 1
}

# bytes NS: bytes both ways on NS's link so far
bytes() {
    echo $(( $(cat "/sys/class/net/$1-h/statistics/rx_bytes") + $(cat "/sys/class/net/$1-h/statistics/tx_bytes") ))
}

[ -x "$BIN" ] && [ -x "$BENCH" ] || { echo "build $BIN and $BENCH first"; exit 1; }
rm -rf "$OUT"; mkdir -p "$OUT"
ip link add pbbr0 type bridge || exit 1
ip addr add "$NET.1/24" dev pbbr0
ip link set pbbr0 up

ds_args=()
for i in $(seq "$DS"); do
    netns "pb-ds$i" "$NET.$((10 + i))"
    serve "pb-ds$i" "$NET.$((10 + i))" "$OUT/ds$i"
    ds_args+=(--data-server "nfs://$NET.$((10 + i)):2049$OUT/ds$i?mountport=20048")
done
netns pb-mds "$NET.10"
serve pb-mds "$NET.10" "$OUT/mds" "${ds_args[@]}"
netns pb-one "$NET.30"
serve pb-one "$NET.30" "$OUT/one"

echo "== $DS DSes + MDS vs one server, every link capped at $RATE; $FILES files x $MIB MiB in parallel, $ROUNDS rounds ($(uptime | sed 's/.*load/load/'))"
declare -A before
for n in "${NS[@]}"; do before[$n]=$(bytes "$n"); done
for r in $(seq "$ROUNDS"); do
    "$BENCH" plain "$NET.30:2049" 20048 "$OUT/one" "$FILES" "$MIB" > "$OUT/plain-$r.txt" || { echo "plain run failed"; cat "$OUT/plain-$r.txt"; exit 1; }
    "$BENCH" pnfs "$NET.10:2049" "$OUT/mds" "$FILES" "$MIB" > "$OUT/pnfs-$r.txt" || { echo "pnfs run failed"; cat "$OUT/pnfs-$r.txt"; exit 1; }
    pw=$(awk '$1 == "write" {print $2}' "$OUT/plain-$r.txt"); pr=$(awk '$1 == "read" {print $2}' "$OUT/plain-$r.txt")
    fw=$(awk '$1 == "write" {print $2}' "$OUT/pnfs-$r.txt"); fr=$(awk '$1 == "read" {print $2}' "$OUT/pnfs-$r.txt")
    echo "round $r: one server write $pw read $pr MiB/s; pNFS write $fw read $fr MiB/s; ratio write $(awk -v a="$fw" -v b="$pw" 'BEGIN {printf "%.2f", a / b}') read $(awk -v a="$fr" -v b="$pr" 'BEGIN {printf "%.2f", a / b}')"
done
total=0
for i in $(seq "$DS"); do
    b=$(( $(bytes "pb-ds$i") - ${before[pb-ds$i]} )); total=$((total + b)); echo "DS $i link: $b bytes"
done
mds=$(( $(bytes pb-mds) - ${before[pb-mds]} ))
one=$(( $(bytes pb-one) - ${before[pb-one]} ))
echo "MDS link: $mds bytes ($(awk -v m="$mds" -v t="$total" 'BEGIN {printf "%.3f", 100 * m / (m + t)}')% of the pNFS side's bytes); plain server link: $one bytes"
awk -v t="$total" -v n="$DS" 'BEGIN {m = t / n} {d = ($1 - m) / m * 100; if (d < 0) d = -d; if (d > w) w = d} END {printf "per-DS bytes within %.1f%% of the mean\n", w}' \
    < <(for i in $(seq "$DS"); do echo $(( $(bytes "pb-ds$i") - ${before[pb-ds$i]} )); done)
grep -hE 'ERROR|panicked' "$OUT"/*.log | head -5
