#!/bin/bash
# scripts/bench-nfs-server.sh [SIZE_MIB] [RUNS]
#
# nfsrdma serve vs NFS-Ganesha 4.3 (FSAL VFS, interop/peers/ganesha-up.sh)
# serving the SAME directory, NFSv3 over TCP on 127.0.0.1, in one run.
# Workloads (PHASES, default "cp bench random list meta"), each run RUNS
# (default 3) times per server with the servers alternating run by run
# (ours, ganesha, ganesha, ours, ...), so load from other jobs lands on both:
#   cp      libnfs nfs-cp sequential read of a SIZE_MIB (default 1024) file
#           to /dev/shm; MB/s and the server's CPU seconds per GiB
#   bench   our client, `nfsrdma bench --url` sequential read of the same
#           size, 1 MiB READs x 4 in flight; MiB/s and server CPU s/GiB
#   write   `nfsrdma bench --url --ops write`: WRITE_MIB (default 256) MiB
#           of UNSTABLE 1 MiB WRITEs x 4 in flight to a file in BENCH_DIR,
#           then COMMIT (so the disk's write-back is in the figure); MiB/s
#           and server CPU s/GiB (not in the default PHASES)
#   random  `nfsrdma bench --url --pattern random`, 4 KiB READs x 32 in
#           flight for RAND_SECS (default 3) s; IOPS, p50 and p99 latency
#   list    50,000-entry directory listed with READDIRPLUS by libnfs nfs-ls
#           and by `nfsrdma ls -l`; seconds (every entry must be listed)
#   meta    `nfsrdma bench --url --pattern meta` in that directory: LOOKUP
#           of a random name + GETATTR, 32 in flight for RAND_SECS s; calls/s
# cp and bench also give the server's context switches per GiB, random its
# CPU microseconds and context switches per READ (summed over the server's
# threads from /proc/PID/task/*/status).
# Server CPU is utime+stime of the server process, all threads, from
# /proc/PID/stat around each client run. cp, bench and write also split
# the CPU per GiB (cpu_sample): the server's user and system time, the
# ksoftirqd threads', the client's (`times`), their sum, and the whole
# machine's busy ticks outside nice (comparable for both servers: on
# loopback the receiver's TCP work runs in whichever task's softirq
# delivers the segment), with the softirq ticks and NET_RX per MiB. Prints every run with the 1-minute
# load average after it, then a table of medians and the ratios ours/Ganesha.
#
# Isolation: the benchmark re-executes itself under `unshare --net --mount`
# with a private loopback and a private /run. Ganesha then gets port 2049 and
# its own rpcbind (it refuses to start without one) even when another Ganesha
# or rpcbind runs on this machine, and nothing outside is disturbed. Our
# server listens on 12049 (MOUNT 12048) in the same namespace and needs no
# rpcbind: the URLs carry the ports.
#
# nfs-cp copies to a new file in /dev/shm (tmpfs; deleted after each run),
# after `sync`; the source file is in the page cache (hot), so this measures
# the server's RPC/XDR/read path, not the disk. The first nfs-cp of each
# server is checked byte-exact (cmp).
#
# Env: OUT (default /tmp/bench-nfs-server-<time>), BENCH_DIR (the exported
# directory, default /var/tmp/nfs-bench; files kept for later runs), NFSCP,
# NFSLS (default /usr/bin/nfs-cp, nfs-ls), CARGO_TARGET_DIR (where the
# release binary is built), BIN (an nfsrdma binary to use instead of
# building one), PHASES, RAND_SECS, PERF (set: `perf record -g` of each
# server during the first run of each phase, in $OUT/perf-PHASE-SERVER.data;
# read with `perf report -i FILE --no-children`; PERF=all: every run, in
# $OUT/perf-PHASE-SERVER-RUN.data), BIN_B (a second nfsrdma
# binary, e.g. the build before a change: served as "oursb" on 12149/12148,
# its handle index in $OUT/state-b, beside the first and alternated with both in every phase, its medians
# and ratio to Ganesha in two more columns), PERFSTAT (set: `perf stat`
# of each server's system calls, context switches and CPU migrations during
# the first run of each phase, in $OUT/perfstat-PHASE-SERVER.txt; for
# `random` the counts per READ are printed after the table), NSTAT (set: the
# namespace's network counters over each run, `nstat`, in
# $OUT/nstat-PHASE-SERVER-RUN.txt).
# Wall time on the 2-core dev VM: about 1 minute for 256 MiB x 3 runs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE_MIB=${1:-1024}
RUNS=${2:-3}
PEERS=${PEERS:-$ROOT/interop/peers}
NFSCP=${NFSCP:-/usr/bin/nfs-cp}
NFSLS=${NFSLS:-/usr/bin/nfs-ls}
BENCH_DIR=${BENCH_DIR:-/var/tmp/nfs-bench}
PHASES=${PHASES:-cp bench random list meta}
RAND_SECS=${RAND_SECS:-3}
WRITE_MIB=${WRITE_MIB:-256}
LIST_N=50000
OUR_PORT=12049
OUR_MOUNT_PORT=12048
B_PORT=12149
B_MOUNT_PORT=12148

if [ -z "${BENCH_IN_NS:-}" ]; then
    export OUT=${OUT:-/tmp/bench-nfs-server-$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$OUT"
    if [ -z "${BIN:-}" ]; then
        echo "== building nfsrdma (release) in ${CARGO_TARGET_DIR:-$ROOT/target}" >&2
        (cd "$ROOT" && cargo build --release -p nfsrdma 2>&1 | tail -1) >&2
    fi
    command -v ganesha.nfsd > /dev/null || { echo "ganesha.nfsd missing: run $PEERS/install-peers.sh" >&2; exit 2; }
    [ -x "$NFSCP" ] || { echo "$NFSCP missing (Debian libnfs-utils)" >&2; exit 2; }
    [ -x "$NFSLS" ] || { echo "$NFSLS missing (Debian libnfs-utils)" >&2; exit 2; }
    T0=$(date +%s)
    BENCH_IN_NS=1 PHASES=$PHASES RAND_SECS=$RAND_SECS WRITE_MIB=$WRITE_MIB unshare --net --mount --propagation private bash "$0" "$@"
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
BIN=${BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/nfsrdma}
[ -x "$BIN" ] || { echo "$BIN missing" >&2; exit 2; }
TICK=$(getconf CLK_TCK)
mkdir -p "$BENCH_DIR/client"
FILE=bench-${SIZE_MIB}M.bin
SRC=$BENCH_DIR/$FILE
BYTES=$((SIZE_MIB * 1048576))
if [ ! -f "$SRC" ] || [ "$(stat -c %s "$SRC")" -ne "$BYTES" ]; then
    echo "creating $SRC ($SIZE_MIB MiB of random data)" >&2
    head -c "$BYTES" /dev/urandom > "$SRC"
fi
# `nfsrdma bench --url` reads client/nfsrdma-bench-read.bin, reusing a file of
# the right size: the same data, linked.
ln -f "$SRC" "$BENCH_DIR/client/nfsrdma-bench-read.bin"
LIST_DIR=$BENCH_DIR/list-$LIST_N
if [ "$(find "$LIST_DIR" -maxdepth 1 -type f 2>/dev/null | wc -l)" != "$LIST_N" ]; then
    echo "creating $LIST_DIR ($LIST_N files)" >&2
    rm -rf "$LIST_DIR"; mkdir -p "$LIST_DIR"
    python3 -c 'import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(os.path.join(d, "f-%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))' "$LIST_DIR" "$LIST_N"
fi
sync
cat "$SRC" > /dev/null

GPID=; OPID=
cleanup() {
    [ -n "$OPID" ] && kill -INT "$OPID" 2>/dev/null && wait "$OPID" 2>/dev/null
    [ -n "${BPID:-}" ] && kill -INT "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null
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
PID_ours=$OPID
SERVERS="ours ganesha"
BPID=
if [ -n "${BIN_B:-}" ]; then
    RUST_LOG=warn "$BIN_B" serve "$BENCH_DIR" --transports tcp --addr 127.0.0.1 --port $B_PORT \
        --mount-port $B_MOUNT_PORT --alias /export --no-root-squash --state-dir "$OUT/state-b" \
        > "$OUT/nfsrdma-serve-b.log" 2>&1 &
    BPID=$!
    for _ in $(seq 50); do ss -Hltn "sport = :$B_MOUNT_PORT" | grep -q . && break; sleep 0.1; done
    ss -Hltn "sport = :$B_MOUNT_PORT" | grep -q . || { cat "$OUT/nfsrdma-serve-b.log" >&2; exit 1; }
    SERVERS="ours ganesha oursb"
fi
PID_oursb=$BPID
PID_ganesha=$GPID

# libnfs URL of PATH (under /export) on SERVER
libnfs_url() {
    if [ "$1" = ours ]; then echo "nfs://127.0.0.1/export/$2?version=3&nfsport=$OUR_PORT&mountport=$OUR_MOUNT_PORT"
    elif [ "$1" = oursb ]; then echo "nfs://127.0.0.1/export/$2?version=3&nfsport=$B_PORT&mountport=$B_MOUNT_PORT"
    else echo "nfs://127.0.0.1/export/$2?version=3"; fi
}
# nfsrdma URL of PATH (under /export) on SERVER
our_url() {
    if [ "$1" = ours ]; then echo "nfs://127.0.0.1:$OUR_PORT/export/$2?mountport=$OUR_MOUNT_PORT"
    elif [ "$1" = oursb ]; then echo "nfs://127.0.0.1:$B_PORT/export/$2?mountport=$B_MOUNT_PORT"
    else echo "nfs://127.0.0.1/export/$2?mountport=20048"; fi
}

ticks() { local f; f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f; echo $((${12} + ${13})); }
# The CPU of a bulk run, each figure in ticks: "SRV_UTIME SRV_STIME
# KSOFTIRQD MACHINE SOFTIRQ NET_RX STEAL SRV_MINFLT". SRV_* are the server process's (all
# threads); KSOFTIRQD the ksoftirqd threads' utime+stime; MACHINE the
# whole machine's user+system+irq+softirq from /proc/stat, i.e. every
# CPU tick not idle, not iowait, not steal and not run at a positive nice
# (builds run at nice 19 go to the nice column; only their system time
# lands here); SOFTIRQ the ticks that fell in softirq work in any task's
# context (/proc/stat softirq: this kernel has tick accounting without
# IRQ_TIME_ACCOUNTING, so such a tick is also charged to the task it
# interrupted); NET_RX the NET_RX softirqs raised (/proc/softirqs, all CPUs);
# STEAL the ticks the hypervisor ran something else on this VM's CPUs;
# SRV_MINFLT the server's minor page faults (/proc/PID/stat).
KSOFTIRQD_PIDS=$(for t in /proc/[0-9]*/comm; do
    [[ $(cat "$t" 2>/dev/null) == ksoftirqd/* ]] && { t=${t%/comm}; echo "${t#/proc/}"; }; done || true)
cpu_sample() {
    local f k=0 t
    f=$(sed 's/^.*) //' "/proc/$1/stat"); set -- $f
    for t in $KSOFTIRQD_PIDS; do k=$((k + $(ticks "$t"))); done
    echo "${12} ${13} $k $(awk '/^cpu /{print $2+$4+$7+$8, $8}' /proc/stat)" \
        "$(awk '/NET_RX:/{for(i=2;i<=NF;i++) n+=$i; print n}' /proc/softirqs)" \
        "$(awk '/^cpu /{print $9}' /proc/stat)" "${8}"
}
# CPU seconds per GiB of GIB gibibytes between two cpu_sample lines, and the
# client's (CLIENT_TICKS): "SRV_USER SRV_SYS KSOFTIRQD MACHINE SOFTIRQ
# NET_RX/MiB CLIENT SRV+CLIENT+KSOFTIRQD STEAL SRV_MINFLT/MiB"
cpu_per_gib() { # BEFORE AFTER CLIENT_TICKS GIB
    awk -v a="$1" -v b="$2" -v c="$3" -v g="$4" -v h="$TICK" 'BEGIN{
        split(a, x, " "); split(b, y, " "); for (i = 1; i <= 8; i++) d[i] = y[i] - x[i]
        printf "%.3f %.3f %.3f %.3f %.3f %.1f %.3f %.3f %.3f %.1f\n", d[1]/h/g, d[2]/h/g, d[3]/h/g, d[4]/h/g,
            d[5]/h/g, d[6]/(g*1024), c/h/g, (d[1]+d[2]+d[3]+c)/h/g, d[7]/h/g, d[8]/(g*1024)}'
}
# RUN COMMAND...: runs a client command, its output in LOG, and leaves its CPU
# (user+system of it and its children, from `times` in a subshell) in
# LOG.ticks as clock ticks.
client_run() {
    local log=$1; shift
    ( local rc=0; "$@" > "$log" 2>&1 || rc=$?; times > "$log.times"; exit $rc ) || return
    awk -v h="$TICK" 'NR==2{ # bash prints 0m1.234s 0m0.567s
        split($1, a, "m"); split($2, b, "m"); sub("s", "", a[2]); sub("s", "", b[2])
        printf "%.0f\n", (a[1]*60 + a[2] + b[1]*60 + b[2]) * h}' "$log.times" > "$log.ticks"
}
# Context switches (voluntary + involuntary) of every live thread of PID.
# A thread that ends between two readings takes its count with it, so a
# difference undercounts by what threads that ended had made (tokio's
# blocking threads live 10 s after their last task; Ganesha's threads
# live as long as the server).
cswitches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/{n+=$2} END{print n+0}'; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# csv_col FILE NAME: that column of the CSV's first data row
csv_col() { awk -F, -v n="$2" 'NR==1{for(i=1;i<=NF;i++) if($i==n) c=i} NR==2{print $c}' "$1"; }
fail() { echo "$1 failed:" >&2; cat "$2" >&2; exit 1; }

# Each phase: SERVER RUN -> "figure server_cpu_figure" on stdout.
phase_cp() {
    local dst=/dev/shm/nfs-bench-$1-$2.out log=$OUT/cp-$1-$2.log pid=PID_$1 t0 t1 c0 c1 s0 s1 u0 u1
    pid=${!pid}; rm -f "$dst"; sync
    s0=$(cswitches "$pid"); u0=$(cpu_sample "$pid"); c0=$(ticks "$pid"); t0=$(date +%s.%N)
    client_run "$log" "$NFSCP" "$(libnfs_url "$1" "$FILE")" "$dst" || fail "nfs-cp from $1" "$log"
    t1=$(date +%s.%N); c1=$(ticks "$pid"); u1=$(cpu_sample "$pid"); s1=$(cswitches "$pid")
    if [ "$2" = 1 ]; then cmp "$SRC" "$dst" > /dev/null || { echo "$1: copy differs from the source" >&2; exit 1; }; fi
    rm -f "$dst"
    echo "$(awk -v a="$t0" -v b="$t1" -v c="$c0" -v d="$c1" -v h="$TICK" -v n="$BYTES" -v s="$((s1 - s0))" \
        'BEGIN{g=n/1073741824; printf "%.1f %.3f %.0f\n", n/(b-a)/1e6, (d-c)/h/g, s/g}')" \
        "$(cpu_per_gib "$u0" "$u1" "$(cat "$log.ticks")" "$(awk -v n="$BYTES" 'BEGIN{print n/1073741824}')")"
}
# nfsrdma bench against SERVER: RUN ARGS... -> csv in $OUT; prints the
# server's CPU ticks and context switches used, then the 8 figures of
# cpu_per_gib for GIB (BENCH_GIB) gibibytes
bench_run() {
    local srv=$1 i=$2 name=$3 dir=$4 pid=PID_$1 c0 c1 s0 s1 u0 u1; shift 4
    pid=${!pid}
    s0=$(cswitches "$pid"); u0=$(cpu_sample "$pid"); c0=$(ticks "$pid")
    client_run "$OUT/$name-$srv-$i.log" "$BIN" bench --url "$(our_url "$srv" "$dir")" --transports tcp --repeat 1 \
        --csv "$OUT/$name-$srv-$i.csv" "$@" ||
        fail "nfsrdma bench ($name) against $srv" "$OUT/$name-$srv-$i.log"
    c1=$(ticks "$pid"); u1=$(cpu_sample "$pid"); s1=$(cswitches "$pid")
    echo $((c1 - c0)) $((s1 - s0)) "$(cpu_per_gib "$u0" "$u1" "$(cat "$OUT/$name-$srv-$i.log.ticks")" "${BENCH_GIB:-1}")"
}
phase_bench() {
    local t; t=$(BENCH_GIB=$(awk -v n="$BYTES" 'BEGIN{print n/1073741824}') \
        bench_run "$1" "$2" bench client/ --ops read --read-sizes 1m --in-flight 4 --size "${SIZE_MIB}m")
    set -- "$1" "$2" $t
    echo "$(awk -v m="$(csv_col "$OUT/bench-$1-$2.csv" mib_s)" -v t="$3" -v s="$4" -v h="$TICK" -v n="$BYTES" \
        'BEGIN{g=n/1073741824; printf "%.1f %.3f %.0f\n", m, t/h/g, s/g}')" "${*:5}"
}
phase_write() {
    local t; t=$(BENCH_GIB=$(awk -v n="$((WRITE_MIB * 1048576))" 'BEGIN{print n/1073741824}') \
        bench_run "$1" "$2" write client/ --ops write --read-sizes 1m --in-flight 4 --size "${WRITE_MIB}m")
    set -- "$1" "$2" $t
    echo "$(awk -v m="$(csv_col "$OUT/write-$1-$2.csv" mib_s)" -v t="$3" -v s="$4" -v h="$TICK" -v n="$((WRITE_MIB * 1048576))" \
        'BEGIN{g=n/1073741824; printf "%.1f %.3f %.0f\n", m, t/h/g, s/g}')" "${*:5}"
}
phase_random() {
    local t f=$OUT/random-$1-$2.csv; t=$(bench_run "$1" "$2" random client/ --pattern random --read-sizes 4k \
        --in-flight 32 --seconds "$RAND_SECS" --size "${SIZE_MIB}m")
    set -- $t
    # IOPS, p99 us, the server's CPU microseconds and context switches per
    # READ, p50 us
    awk -v i="$(csv_col "$f" iops)" -v p="$(csv_col "$f" p99_us)" -v r="$(csv_col "$f" reads)" \
        -v t="$1" -v s="$2" -v h="$TICK" -v m="$(csv_col "$f" p50_us)" \
        'BEGIN{printf "%s %s %.1f %.2f %s\n", i, p, (r > 0 ? t/h*1e6/r : 0), (r > 0 ? s/r : 0), m}'
}
phase_meta() {
    bench_run "$1" "$2" meta "list-$LIST_N/" --pattern meta --in-flight 32 --seconds "$RAND_SECS" > /dev/null
    echo "$(csv_col "$OUT/meta-$1-$2.csv" iops) $(csv_col "$OUT/meta-$1-$2.csv" p99_us)"
}
# Listing: "nfs-ls seconds" "nfsrdma ls seconds", each must list every entry.
phase_list() {
    local log=$OUT/list-$1-$2 t0 t1 t2 n
    t0=$(date +%s.%N)
    "$NFSLS" "$(libnfs_url "$1" "list-$LIST_N")" > "$log.libnfs" 2> "$log.err" || fail "nfs-ls from $1" "$log.err"
    t1=$(date +%s.%N)
    "$BIN" ls -l "$(our_url "$1" "list-$LIST_N")" > "$log.ours" 2> "$log.err" || fail "nfsrdma ls from $1" "$log.err"
    t2=$(date +%s.%N)
    for f in "$log.libnfs" "$log.ours"; do
        n=$(grep -c ' f-[0-9]*$' "$f" || true)
        [ "$n" = "$LIST_N" ] || { echo "$f: $n entries listed, want $LIST_N" >&2; exit 1; }
        rm -f "$f"
    done
    awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN{printf "%.3f %.3f\n", b-a, c-b}'
}

printf '# nfsrdma serve (pid %s) vs NFS-Ganesha (pid %s), NFSv3/TCP on 127.0.0.1, %d MiB file, %d runs, servers alternating\n' \
    "$OPID" "$GPID" "$SIZE_MIB" "$RUNS"
printf '%-7s %-8s %-3s %12s %12s %10s %8s %6s\n' phase server run figure1 figure2 figure3 figure4 load1
declare -A R
for phase in $PHASES; do
    for i in $(seq "$RUNS"); do
        # in SERVERS order on odd runs, reversed on even ones
        order=$SERVERS; [ $((i % 2)) = 0 ] && order=$(echo $SERVERS | tr ' ' '\n' | tac | tr '\n' ' ')
        for name in $order; do
            pid=PID_$name; perf_pid=
            if [ "${PERF:-}" = all ]; then
                perf record -q -g -p "${!pid}" -o "$OUT/perf-$phase-$name-$i.data" > /dev/null 2>&1 &
                perf_pid=$!; sleep 0.5
            elif [ -n "${PERF:-}" ] && [ "$i" = 1 ]; then
                perf record -q -g -p "${!pid}" -o "$OUT/perf-$phase-$name.data" > /dev/null 2>&1 &
                perf_pid=$!; sleep 0.5
            fi
            if [ -n "${PERFSTAT:-}" ] && [ "$i" = 1 ]; then
                perf stat -x, -e raw_syscalls:sys_enter,context-switches,cpu-migrations -p "${!pid}" \
                    -o "$OUT/perfstat-$phase-$name.txt" > /dev/null 2>&1 &
                perf_pid=$!; sleep 0.5
            fi
            [ -n "${NSTAT:-}" ] && nstat -n
            r=$("phase_$phase" "$name" "$i")
            [ -n "${NSTAT:-}" ] && nstat > "$OUT/nstat-$phase-$name-$i.txt"
            [ -n "$perf_pid" ] && { kill -INT "$perf_pid"; wait "$perf_pid" 2> /dev/null || true; }
            R[$phase/$name]+="$r"$'\n'
            set -- $r
            printf '%-7s %-8s %-3s %12s %12s %10s %8s %6s' "$phase" "$name" "$i" "$1" "$2" "${3:--}" "${4:--}" "$(load1)"
            # cp, bench, write: the CPU split (cpu_per_gib), s/GiB
            [ $# -ge 13 ] && printf '  usr %s sys %s ksoftirqd %s machine %s softirq %s netrx/MiB %s client %s sum %s steal %s minflt/MiB %s' "${@:4:10}"
            echo
        done
    done
done

median() { sort -g | awk 'NF{v[++k]=$1} END{print (k%2) ? v[(k+1)/2] : (v[k/2]+v[k/2+1])/2}'; }
# med PHASE SERVER FIELD
med() { printf '%s' "${R[$1/$2]}" | awk -v f="$3" 'NF{print $f}' | median; }
row() { # LABEL PHASE FIELD
    local a b c=; a=$(med "$2" ours "$3"); b=$(med "$2" ganesha "$3")
    [ -n "$BPID" ] && c=$(med "$2" oursb "$3")
    awk -v l="$1" -v a="$a" -v b="$b" -v c="$c" 'BEGIN{r = b > 0 ? sprintf("%.2f", a/b) : "-"
        if (c == "") printf "| %s | %s | %s | %s |\n", l, a, b, r
        else printf "| %s | %s | %s | %s | %s | %s |\n", l, a, b, r, c, (b > 0 ? sprintf("%.2f", c/b) : "-")}'
}
# The CPU split of a bulk phase (cpu_per_gib's figures, fields 4-11)
cpu_rows() { # LABEL PHASE
    row "$1 server user CPU s/GiB" "$2" 4; row "$1 server system CPU s/GiB" "$2" 5
    row "$1 ksoftirqd CPU s/GiB" "$2" 6; row "$1 client CPU s/GiB" "$2" 10
    row "$1 server+client+ksoftirqd CPU s/GiB" "$2" 11
    row "$1 machine CPU s/GiB (not nice, not idle)" "$2" 7
    row "$1 softirq ticks s/GiB (any task)" "$2" 8; row "$1 NET_RX softirqs/MiB" "$2" 9
    row "$1 steal s/GiB (hypervisor)" "$2" 12; row "$1 server page faults/MiB" "$2" 13
}
echo
if [ -n "$BPID" ]; then
    echo "| medians of $RUNS runs | nfsrdma serve (BIN) | NFS-Ganesha | ours/Ganesha | BIN_B | BIN_B/Ganesha |"
    echo "|---|---|---|---|---|---|"
else
    echo "| medians of $RUNS runs | nfsrdma serve | NFS-Ganesha | ours/Ganesha |"
    echo "|---|---|---|---|"
fi
for phase in $PHASES; do
    case $phase in
    cp) row "nfs-cp read MB/s" cp 1; row "nfs-cp server CPU s/GiB" cp 2
        row "nfs-cp server context switches/GiB" cp 3; cpu_rows "nfs-cp" cp ;;
    bench) row "nfsrdma bench read 1m x 4 MiB/s" bench 1; row "nfsrdma bench server CPU s/GiB" bench 2
        row "nfsrdma bench server context switches/GiB" bench 3; cpu_rows "bench read" bench ;;
    write) row "nfsrdma bench write 1m x 4 MiB/s" write 1; row "nfsrdma bench write server CPU s/GiB" write 2
        row "nfsrdma bench write server context switches/GiB" write 3; cpu_rows "bench write" write ;;
    random) row "4k random read x 32 IOPS" random 1; row "4k random read p50 us" random 5
        row "4k random read p99 us" random 2
        row "4k random read server CPU us/READ" random 3
        row "4k random read server context switches/READ" random 4 ;;
    list) row "$LIST_N-entry listing, nfs-ls s" list 1; row "$LIST_N-entry listing, nfsrdma ls -l s" list 2 ;;
    meta) row "LOOKUP+GETATTR x 32 calls/s" meta 1; row "LOOKUP+GETATTR p99 us" meta 2 ;;
    esac
done
if [ -n "${PERFSTAT:-}" ]; then
    echo
    echo "perf stat of the first run of each phase, system calls and context switches:"
    for phase in $PHASES; do
        for name in $SERVERS; do
            awk -F, -v p="$phase" -v n="$name" '$3 ~ /sys_enter|context-switches/ {
                printf "  %-7s %-8s %-26s %12d\n", p, n, $3, $1 }' "$OUT/perfstat-$phase-$name.txt" 2>/dev/null || true
        done
    done
fi
if [ -n "${PERFSTAT:-}" ] && [[ " $PHASES " == *" random "* ]]; then
    echo
    echo "perf stat of the first random run, per READ (reads from its csv):"
    for name in $SERVERS; do
        reads=$(csv_col "$OUT/random-$name-1.csv" reads)
        awk -F, -v n="$name" -v r="$reads" '$3 ~ /sys_enter|context-switches|cpu-migrations/ && r > 0 {
            printf "  %-8s %-26s %8.2f\n", n, $3, $1 / r }' "$OUT/perfstat-random-$name.txt"
    done
fi
echo
echo "(ours/Ganesha above 1 is better for MB/s, MiB/s, IOPS and calls/s; below 1 is better for seconds, CPU and latency)"
