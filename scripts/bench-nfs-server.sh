#!/bin/bash
# scripts/bench-nfs-server.sh [SIZE_MIB] [RUNS]
#
# Sequential read of a SIZE_MIB (default 1024) file with libnfs's nfs-cp over
# TCP (NFSv3) from our server (`nfsrdma serve`, release build) and from
# NFS-Ganesha 4.3 (FSAL VFS, interop/peers/ganesha-up.sh) serving the SAME
# directory. RUNS (default 3) runs each, alternating servers; prints every run,
# then median throughput, median server CPU seconds per GiB (utime+stime of
# the server process, all threads, from /proc/PID/stat), and the ratios.
#
# Isolation: the benchmark re-executes itself under `unshare --net --mount`
# with a private loopback and a private /run. Ganesha then gets port 2049 and
# its own rpcbind (it refuses to start without one) even when another Ganesha
# or rpcbind runs on this machine, and nothing outside is disturbed. Our
# server listens on 12049 (MOUNT 12048) in the same namespace and needs no
# rpcbind: the libnfs URLs carry nfsport= and mountport=.
#
# nfs-cp copies to a new file in /dev/shm (tmpfs; deleted after each run),
# after `sync`; the source file is in the page cache (hot), so this measures
# the server's RPC/XDR/read path, not the disk. The first run of each server
# is checked byte-exact (cmp).
#
# Env: OUT (default /tmp/bench-nfs-server-<time>), BENCH_DIR (the exported
# directory, default /var/tmp/nfs-bench), NFSCP (default /usr/bin/nfs-cp).
# Wall time on the 2-core dev VM: about 1-2 minutes for 1 GiB x 3 x 2.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE_MIB=${1:-1024}
RUNS=${2:-3}
PEERS=${PEERS:-$ROOT/interop/peers}
NFSCP=${NFSCP:-/usr/bin/nfs-cp}
BENCH_DIR=${BENCH_DIR:-/var/tmp/nfs-bench}
OUR_PORT=12049
OUR_MOUNT_PORT=12048

if [ -z "${BENCH_IN_NS:-}" ]; then
    export OUT=${OUT:-/tmp/bench-nfs-server-$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$OUT"
    echo "== building nfsrdma (release)" >&2
    (cd "$ROOT" && cargo build --release -p nfsrdma 2>&1 | tail -1) >&2
    command -v ganesha.nfsd > /dev/null || { echo "ganesha.nfsd missing: run $PEERS/install-peers.sh" >&2; exit 2; }
    [ -x "$NFSCP" ] || { echo "$NFSCP missing (Debian libnfs-utils)" >&2; exit 2; }
    T0=$(date +%s)
    BENCH_IN_NS=1 unshare --net --mount --propagation private bash "$0" "$@"
    rc=$?
    echo "wall time: $(( $(date +%s) - T0 )) s; logs in $OUT" >&2
    exit $rc
fi

# ---- inside the private network + mount namespace
ip link set lo up
# glibc getaddrinfo(AI_ADDRCONFIG), which Ganesha uses for Bind_addr, wants an
# IPv4 address other than 127.0.0.1 on some interface.
ip addr add 10.254.0.1/32 dev lo
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/rpcbind /run/lock
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/nfsrdma
TICK=$(getconf CLK_TCK)
mkdir -p "$BENCH_DIR"
FILE=bench-${SIZE_MIB}M.bin
SRC=$BENCH_DIR/$FILE
if [ ! -f "$SRC" ] || [ "$(stat -c %s "$SRC")" -ne $((SIZE_MIB * 1048576)) ]; then
    echo "creating $SRC ($SIZE_MIB MiB of random data)" >&2
    head -c $((SIZE_MIB * 1048576)) /dev/urandom > "$SRC"
fi
cat "$SRC" > /dev/null
BYTES=$(stat -c %s "$SRC")

GPID=; OPID=
cleanup() {
    [ -n "$OPID" ] && kill -INT "$OPID" 2>/dev/null && wait "$OPID" 2>/dev/null
    PEERS_STATE=$OUT/ganesha "$PEERS/ganesha-down.sh" 2>/dev/null
    rm -f /dev/shm/nfs-bench-*.out
}
trap cleanup EXIT

GPID=$(PEERS_STATE=$OUT/ganesha "$PEERS/ganesha-up.sh" "$BENCH_DIR" 2> "$OUT/ganesha-up.log") ||
    { cat "$OUT/ganesha-up.log" >&2; exit 1; }
RUST_LOG=warn "$BIN" serve "$BENCH_DIR" --transports tcp --addr 127.0.0.1 --port $OUR_PORT \
    --mount-port $OUR_MOUNT_PORT --alias /export --no-root-squash > "$OUT/nfsrdma-serve.log" 2>&1 &
OPID=$!
for _ in $(seq 50); do ss -Hltn "sport = :$OUR_MOUNT_PORT" | grep -q . && break; sleep 0.1; done
ss -Hltn "sport = :$OUR_MOUNT_PORT" | grep -q . || { cat "$OUT/nfsrdma-serve.log" >&2; exit 1; }

URL_ours="nfs://127.0.0.1/export/$FILE?version=3&nfsport=$OUR_PORT&mountport=$OUR_MOUNT_PORT"
URL_ganesha="nfs://127.0.0.1/export/$FILE?version=3"
PID_ours=$OPID
PID_ganesha=$GPID

ticks() { local f; f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f; echo $((${12} + ${13})); }
one() { # server run -> "wall_s srv_cpu_s"
    local name=$1 i=$2 url pid dst t0 t1 c0 c1
    url=URL_$name; url=${!url}; pid=PID_$name; pid=${!pid}
    dst=/dev/shm/nfs-bench-$name-$i.out
    rm -f "$dst"; sync
    c0=$(ticks "$pid"); t0=$(date +%s.%N)
    "$NFSCP" "$url" "$dst" > "$OUT/nfs-cp-$name-$i.log" 2>&1 ||
        { echo "nfs-cp from $name failed:" >&2; cat "$OUT/nfs-cp-$name-$i.log" >&2; exit 1; }
    t1=$(date +%s.%N); c1=$(ticks "$pid")
    if [ "$i" = 1 ]; then
        cmp "$SRC" "$dst" > /dev/null || { echo "$name: copy differs from the source" >&2; exit 1; }
    fi
    rm -f "$dst"
    awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v h="$TICK" 'BEGIN{printf "%.3f %.2f\n", b-a, (d-c)/h}'
}

printf '# nfs-cp sequential read, %d bytes, %d runs per server, NFSv3/TCP on 127.0.0.1\n' "$BYTES" "$RUNS"
printf '# ours: %s (pid %s)   ganesha: %s (pid %s)\n' "$URL_ours" "$OPID" "$URL_ganesha" "$GPID"
printf '%-8s %-3s %8s %9s %11s\n' server run wall_s MB/s srv_cpu_s
declare -A R
for i in $(seq "$RUNS"); do
    for name in ours ganesha; do
        r=$(one "$name" "$i")
        R[$name]+="$r"$'\n'
        set -- $r
        printf '%-8s %-3s %8.2f %9.1f %11.2f\n' "$name" "$i" "$1" "$(awk -v b="$BYTES" -v w="$1" 'BEGIN{print b/w/1e6}')" "$2"
    done
done

median() { sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
declare -A MBS CPU
for name in ours ganesha; do
    MBS[$name]=$(printf '%s' "${R[$name]}" | awk -v b="$BYTES" 'NF{print b/$1/1e6}' | median)
    CPU[$name]=$(printf '%s' "${R[$name]}" | awk -v b="$BYTES" 'NF{print $2/(b/1073741824)}' | median)
done
echo
echo "| server | read MB/s (median of $RUNS) | server CPU s/GiB (median) |"
echo "|---|---|---|"
printf '| nfsrdma serve | %.1f | %.2f |\n' "${MBS[ours]}" "${CPU[ours]}"
printf '| NFS-Ganesha 4.3 (VFS) | %.1f | %.2f |\n' "${MBS[ganesha]}" "${CPU[ganesha]}"
awk -v a="${MBS[ours]}" -v b="${MBS[ganesha]}" -v c="${CPU[ours]}" -v d="${CPU[ganesha]}" \
    'BEGIN{printf "| ratio ours/ganesha | %.2f | %.2f |\n", a/b, (d > 0 ? c/d : 0)}'
