#!/bin/bash
# scripts/bench-listing.sh [--million] [RUNS]
#
# Directory listing time (issue 20): directories of 1,000 and 50,000 empty
# files (and 1,000,000 with --million: creating it takes a few minutes and
# ~250 MB of inodes) listed by
#   - libnfs `nfs-ls` (NFSv3 READDIRPLUS with its own page size, long format)
#   - `nfsrdma ls -l` (the project's client, READDIRPLUS pages of >= 64 KiB,
#     streamed output)
# against `nfsrdma serve` (release build) and NFS-Ganesha 4.3 (FSAL VFS,
# interop/peers/ganesha-up.sh) exporting the SAME directory, over TCP, and
# `nfsrdma ls -l` over RPC-over-RDMA (software iWARP) against our server
# (Ganesha has no RDMA here). RUNS (default 3) runs of each, alternating
# servers; every run's output must have one line per entry. Prints each run
# (wall seconds, the server process's CPU seconds, all threads, from
# /proc/PID/stat, and the 1-minute load average after it), then a table
# of the medians per entry, and the ratios ours/Ganesha for each client and
# size. Each run lists every combination twice in a row: "first" (our
# attribute cache cold unless the same directory was listed within its TTL,
# `--attr-cache-ttl`, default 3 s; Ganesha's cache warm after its first
# run) and "again" (both caches warm), reported separately.
#
# Isolation as in scripts/bench-nfs-server.sh: the script re-executes itself
# under `unshare --net --mount` with a private loopback and /run, so Ganesha
# gets port 2049 and its own rpcbind; our server listens on 12049 (RDMA
# 12050, MOUNT 12048).
#
# Env: OUT (default /tmp/bench-listing-<time>), BENCH_DIR (default
# /var/tmp/nfs-listing; the directories are kept for later runs), NFSLS
# (default /usr/bin/nfs-ls), CARGO_TARGET_DIR (where the release binary is),
# BIN (an nfsrdma binary to use instead of building one), ATTR_TTL (our
# server's --attr-cache-ttl, default its own default).
# Wall time on the 2-core dev VM: about 2 minutes without --million.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MILLION=${MILLION:-0}
if [ "${1:-}" = "--million" ]; then MILLION=1; shift; fi
RUNS=${1:-3}
PEERS=${PEERS:-$ROOT/interop/peers}
NFSLS=${NFSLS:-/usr/bin/nfs-ls}
BENCH_DIR=${BENCH_DIR:-/var/tmp/nfs-listing}
OUR_PORT=12049
OUR_RDMA_PORT=12050
OUR_MOUNT_PORT=12048
SIZES="1000 50000"
[ "$MILLION" = 1 ] && SIZES="$SIZES 1000000"

if [ -z "${BENCH_IN_NS:-}" ]; then
    export OUT=${OUT:-/tmp/bench-listing-$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$OUT"
    if [ -z "${BIN:-}" ]; then
        echo "== building nfsrdma (release)" >&2
        (cd "$ROOT" && cargo build --release -p nfsrdma 2>&1 | tail -1) >&2
    fi
    command -v ganesha.nfsd > /dev/null || { echo "ganesha.nfsd missing: run $PEERS/install-peers.sh" >&2; exit 2; }
    [ -x "$NFSLS" ] || { echo "$NFSLS missing (Debian libnfs-utils)" >&2; exit 2; }
    T0=$(date +%s)
    BENCH_IN_NS=1 MILLION=$MILLION unshare --net --mount --propagation private bash "$0" "$@"
    rc=$?
    echo "wall time: $(( $(date +%s) - T0 )) s; logs in $OUT" >&2
    exit $rc
fi

# ---- inside the private network + mount namespace
ip link set lo up
ip addr add 10.254.0.1/32 dev lo
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/rpcbind /run/lock
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/nfsrdma}

# The directories: N empty files named f-000000.. (created once, kept).
mkdir -p "$BENCH_DIR"
for n in $SIZES; do
    d=$BENCH_DIR/list-$n
    if [ "$(find "$d" -maxdepth 1 -type f 2>/dev/null | wc -l)" != "$n" ]; then
        echo "creating $d ($n files)" >&2
        rm -rf "$d"; mkdir -p "$d"
        python3 -c 'import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(os.path.join(d, "f-%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))' "$d" "$n"
    fi
done
sync

GPID=; OPID=
cleanup() {
    [ -n "$OPID" ] && kill -INT "$OPID" 2>/dev/null && wait "$OPID" 2>/dev/null
    PEERS_STATE=$OUT/ganesha "$PEERS/ganesha-down.sh" 2>/dev/null
}
trap cleanup EXIT

GPID=$(PEERS_STATE=$OUT/ganesha "$PEERS/ganesha-up.sh" "$BENCH_DIR" 2> "$OUT/ganesha-up.log") ||
    { cat "$OUT/ganesha-up.log" >&2; exit 1; }
RUST_LOG=warn "$BIN" serve "$BENCH_DIR" --addr 127.0.0.1 --port $OUR_PORT \
    --rdma-port $OUR_RDMA_PORT --mount-port $OUR_MOUNT_PORT --alias /export \
    ${ATTR_TTL:+--attr-cache-ttl "$ATTR_TTL"} > "$OUT/nfsrdma-serve.log" 2>&1 &
OPID=$!
for _ in $(seq 50); do ss -Hltn "sport = :$OUR_MOUNT_PORT" | grep -q . && break; sleep 0.1; done
ss -Hltn "sport = :$OUR_MOUNT_PORT" | grep -q . || { cat "$OUT/nfsrdma-serve.log" >&2; exit 1; }

# url CLIENT SERVER TRANSPORT N
url() {
    local p=/export/list-$4
    case "$1/$2/$3" in
    libnfs/ours/tcp) echo "nfs://127.0.0.1$p?version=3&nfsport=$OUR_PORT&mountport=$OUR_MOUNT_PORT" ;;
    libnfs/ganesha/tcp) echo "nfs://127.0.0.1$p?version=3" ;;
    nfsrdma/ours/tcp) echo "nfs://127.0.0.1:$OUR_PORT$p?mountport=$OUR_MOUNT_PORT" ;;
    nfsrdma/ours/rdma) echo "nfs+rdma://127.0.0.1:$OUR_RDMA_PORT$p?mountport=$OUR_MOUNT_PORT" ;;
    nfsrdma/ganesha/tcp) echo "nfs://127.0.0.1$p?mountport=20048" ;;
    esac
}

TICK=$(getconf CLK_TCK)
ticks() { local f; f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f; echo $((${12} + ${13})); }

# one CLIENT SERVER TRANSPORT N RUN -> "seconds server_cpu_seconds"
one() {
    local u log t0 t1 c0 c1 pid lines
    u=$(url "$1" "$2" "$3" "$4")
    log=$OUT/$1-$2-$3-$4-$5
    if [ "$2" = ours ]; then pid=$OPID; else pid=$GPID; fi
    c0=$(ticks "$pid"); t0=$(date +%s.%N)
    if [ "$1" = libnfs ]; then
        "$NFSLS" "$u" > "$log.out" 2> "$log.err" || { echo "nfs-ls $u failed:" >&2; cat "$log.err" >&2; exit 1; }
    else
        "$BIN" ls -l "$u" > "$log.out" 2> "$log.err" || { echo "nfsrdma ls $u failed:" >&2; cat "$log.err" >&2; exit 1; }
    fi
    t1=$(date +%s.%N); c1=$(ticks "$pid")
    lines=$(grep -c ' f-[0-9]*$' "$log.out" || true)
    [ "$lines" = "$4" ] || { echo "$1 from $2/$3: $lines entries listed, want $4 ($log.out)" >&2; exit 1; }
    rm -f "$log.out"
    awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v h="$TICK" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN{printf "%.3f %.2f %s\n", b-a, (d-c)/h, l}'
}

COMBOS="libnfs/ours/tcp libnfs/ganesha/tcp nfsrdma/ours/tcp nfsrdma/ganesha/tcp nfsrdma/ours/rdma"
printf '# directory listing, %d runs each, NFSv3 on 127.0.0.1; ours = nfsrdma serve, ganesha = NFS-Ganesha 4.3 (VFS)\n' "$RUNS"
PASSES="first again"
printf '%-8s %-8s %-8s %-5s %-4s %-6s %9s %9s %6s\n' entries client server trans run pass seconds srv_cpu_s load1
declare -A R
for n in $SIZES; do
    for i in $(seq "$RUNS"); do
        for c in $COMBOS; do
            IFS=/ read -r cl sv tr <<< "$c"
            for pass in $PASSES; do
                r=$(one "$cl" "$sv" "$tr" "$n" "$i-$pass")
                R[$n/$c/$pass]+="$r"$'\n'
                set -- $r
                printf '%-8s %-8s %-8s %-5s %-4s %-6s %9s %9s %6s\n' "$n" "$cl" "$sv" "$tr" "$i" "$pass" "$1" "$2" "$3"
            done
        done
    done
done

median() { sort -g | awk 'NF{v[++k]=$1} END{print (k%2) ? v[(k+1)/2] : (v[k/2]+v[k/2+1])/2}'; }
declare -A M C
echo
echo "| entries | client | server | transport | listing | median s | µs per entry | server CPU µs per entry |"
echo "|---|---|---|---|---|---|---|---|"
for n in $SIZES; do
    for c in $COMBOS; do
        IFS=/ read -r cl sv tr <<< "$c"
        for pass in $PASSES; do
            k=$n/$c/$pass
            M[$k]=$(printf '%s' "${R[$k]}" | awk 'NF{print $1}' | median)
            C[$k]=$(printf '%s' "${R[$k]}" | awk 'NF{print $2}' | median)
            printf '| %s | %s | %s | %s | %s | %.3f | %.2f | %.2f |\n' "$n" \
                "$([ "$cl" = libnfs ] && echo 'libnfs nfs-ls' || echo 'nfsrdma ls -l')" \
                "$([ "$sv" = ours ] && echo 'nfsrdma serve' || echo 'NFS-Ganesha')" \
                "$tr" "$pass" "${M[$k]}" "$(awk -v s="${M[$k]}" -v n="$n" 'BEGIN{print s/n*1e6}')" \
                "$(awk -v s="${C[$k]}" -v n="$n" 'BEGIN{print s/n*1e6}')"
        done
    done
done
echo
echo "| entries | listing | libnfs ours/ganesha (TCP) | nfsrdma ls ours/ganesha (TCP) | nfsrdma ls ours RDMA/TCP |"
echo "|---|---|---|---|---|"
for n in $SIZES; do
    for pass in $PASSES; do
        awk -v a="${M[$n/libnfs/ours/tcp/$pass]}" -v b="${M[$n/libnfs/ganesha/tcp/$pass]}" \
            -v c="${M[$n/nfsrdma/ours/tcp/$pass]}" -v d="${M[$n/nfsrdma/ganesha/tcp/$pass]}" \
            -v e="${M[$n/nfsrdma/ours/rdma/$pass]}" -v n="$n" -v p="$pass" \
            'BEGIN{printf "| %s | %s | %.2f | %.2f | %.2f |\n", n, p, a/b, c/d, e/c}'
    done
done
first=${SIZES%% *}; last=${SIZES##* }
echo
echo "time per entry, $last vs $first entries (flat = 1.0):"
for c in $COMBOS; do
    for pass in $PASSES; do
        awk -v a="${M[$first/$c/$pass]}" -v b="${M[$last/$c/$pass]}" -v f="$first" -v l="$last" -v c="$c/$pass" \
            'BEGIN{printf "  %-28s %.2f\n", c, (b/l)/(a/f)}'
    done
done
