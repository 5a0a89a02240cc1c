#!/bin/bash
# interop/guest/coherence.sh [MOUNTPORT] [WAIT] [LAT_FILES] [LAT_ROUNDS] [LAT_BASE] [LAT_VERS] [CHECKS]
# Runs INSIDE the kpeer guest (via interop/kpeer/run.sh, started by
# scripts/interop.sh, phase "coherence"; issue 19, docs/interop.md). One
# `nfsrdma serve --transports tcp,rdma` runs on the host; the guest reaches
# it at $HOST_IP: NFS over RDMA on :20049 (guest siw0 -> our softrnic), NFS
# over TCP on :2049, MOUNT on :MOUNTPORT (TCP).
#
# Part 1, two kernel mounts of the one export, each following close-to-open:
#   fwd: A = NFSv4.1 over RDMA (/mnt/a), B = NFSv3 over TCP (/mnt/b)
#   rev: A = NFSv3 over RDMA,           B = NFSv4.1 over TCP
# A and B are two superblocks (different NFS version and transport, so
# different nfs_client and nfs_server, plus nosharecache); the script
# checks their st_dev differ and prints /proc/fs/nfsfs/servers.
# Checks in each direction, in one directory of the export:
#   A writes and closes a 3 MiB file; B opens it and reads it byte-exact.
#   B overwrites 64 KiB in the middle, appends 100 KiB, truncates to 1 MiB+5,
#   closing (and syncing) after each; after each, A opens the file and
#   reads the new bytes and size.
#   B renames the file; A opens the new name (never looked up before) and
#   finds the data; opening the old name fails.
#   B creates a file and removes another; A sees both at its next open.
#   The host writes into the export directly (not through NFS, after the
#   host-write handshake), once while A holds a write delegation and once a
#   read delegation; A opens the file and reads the host's bytes.
# Each check first tries once ("at the next open"); if that fails it keeps
# trying for up to WAIT seconds (default 70: the directory attribute cache
# is acdirmin 30 s .. acdirmax 60 s) so the log says how long the stale view
# lasted, and the check FAILs unless it allows the attribute cache time.
# Only two do: A opening a name B renamed away or removed, when A has that
# name in its dentry cache. The kernel keeps a cached positive dentry until
# the directory's attributes time out (NFSv3, and NFSv4.1, which opens a
# cached dentry by file handle, CLAIM_FH); the server cannot shorten that
# without directory delegations, which the 6.1 client never asks for. What
# the server owes (recall the delegation on the renamed or removed file, so
# the dentry is no longer trusted because of it, and change the directory's
# change attribute) is checked; the log marks these "(attribute cache)".
# Sizes are read through open (wc -c <), not stat: stat uses the attribute
# cache, close-to-open applies to open.
# Before and after each direction the script asks the host to note the
# server's delegation counters (mark-<name> / marked-<name>); the host
# prints grants and recalls per direction.
#
# Part 2, small-file READ latency: LAT_ROUNDS rounds (default 3); each
# round mounts, for each server (ours; and the "before" binary on guest
# ports 20050/2050/20047 when LAT_BASE=1) and each transport (rdma, tcp)
# and each version in LAT_VERS (default "3"), a fresh mount (cold cache),
# cats the LAT_FILES 4 KiB files lat/f<i> the host created, and prints one
# "LAT server proto vers files seconds ms_per_file read_ops read_rtt_ms
# read_exe_ms" line from mountstats (average READ RTT and execute time),
# and one "LATOPS server proto vers op ops rtt_ms exe_ms" line for each of
# LOOKUP, ACCESS, GETATTR and READ.
# CHECKS=0 (default 1) skips part 1: only the latency passes run.
# Each pass also prints what the guest kernel did per file ("LATSYS server
# proto vers ctxt/file ipi/file intr/file busy_ms/file sys_ms/file
# softirq_ms/file idle_ms/file": context switches, rescheduling and
# function-call IPIs, interrupts, CPU time from /proc/stat and
# /proc/interrupts) and the xprt line of mountstats ("LATXPRT ..."; over
# RDMA it counts local_inv_needed, the LOCAL_INVs a missing or wrong Send
# With Invalidate costs the client).
# KNFSD=1 (default 0) adds a third server, "knfsd": the guest's own knfsd
# (tmpfs /kexport, the same files) mounted over siw and TCP from inside the
# guest, so the floor any server has in this guest is measured in the same
# run. INLINE8K=1 (default 0) adds passes "ours-i8k" with the client's
# sunrpc.rdma_max_inline_read at 8192 (a 4 KiB READ reply then fits inline
# when the server advertises an 8 KiB send size, RFC 8797 §3.1, §4.2). TRACE=1
# (default 0) records the guest scheduler's context switches during each
# cat (ftrace sched_switch) and prints "LATSW server proto vers" with the
# threads switched to per file (siw_tx, kworker, cat, ...).
#
# Prints PASS/FAIL/INFO lines and exits 1 if a check failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
MPORT=${1:-20048}; WAIT=${2:-70}; LAT_FILES=${3:-200}; LAT_ROUNDS=${4:-3}; LAT_BASE=${5:-0}
LAT_VERS=${6:-3}; CHECKS=${7:-1}; KNFSD=${8:-0}; INLINE8K=${9:-0}; TRACE=${10:-0}
SRV=$HOST_IP
A=/mnt/a
B=/mnt/b
FAILS=0
DIR=
pass() { echo "PASS $DIR/$*"; echo "PASS $DIR/$*" >> summary.txt; }
fail() { echo "FAIL $DIR/$*"; echo "FAIL $DIR/$*" >> summary.txt; FAILS=$((FAILS + 1)); }
info() { echo "INFO $DIR/$*"; }
check() { # name command... : PASS if the command succeeds
    local name=$1; shift
    if "$@" > check.out 2>&1; then pass "$name"; else fail "$name: $(tail -3 check.out | tr '\n' ' ')"; fi
}
# seen NAME MODE command... : the command must succeed at its first try
# (MODE strict) or within the attribute cache time (MODE attrcache); either
# way it is retried for up to WAIT s to report how long the old view lasted.
seen() {
    local name=$1 mode=$2 t0 n=0 el; shift 2
    t0=$(now)
    while :; do
        if "$@" > check.out 2>&1; then
            el=$(awk "BEGIN{printf \"%.1f\", $(now) - $t0}")
            if [ "$n" = 0 ]; then
                pass "$name (at the next open)"
            elif [ "$mode" = attrcache ]; then
                pass "$name (after $el s, $n retries: attribute cache)"
            else
                fail "$name: stale for $el s ($n retries), expected at the next open"
            fi
            return
        fi
        [ "$n" = 0 ] && info "$name: first try: $(tail -2 check.out | tr '\n' ' ')"
        n=$((n + 1))
        if awk "BEGIN{exit !($(now) - $t0 > $WAIT)}"; then
            fail "$name: still stale after $WAIT s: $(tail -2 check.out | tr '\n' ' ')"; return
        fi
        sleep 1
    done
}
handshake() { # ask the host for something and wait up to 30 s for its answer
    rm -f "$2"; : > "$1"
    for _ in $(seq 150); do [ -e "$2" ] && { rm -f "$1" "$2"; return 0; }; sleep 0.2; done
    echo "INFO host did not answer $1"; return 1
}
: > summary.txt

opts() { # PROTO VERS -> mount options
    local o="vers=$2,proto=$1,nosharecache"
    if [ "$1" = rdma ]; then o+=",port=20049"; else o+=",port=2049"; fi
    [ "$2" = 3 ] && o+=",mountport=$MPORT,mountproto=tcp,nolock"
    echo "$o"
}
# mount_at DIR OPTS VERS: NFSv4 tries /export (a pseudo file system) and
# then / (the export as the root); the export's root holds .coherence-root.
mount_at() {
    local d=$1 o=$2 p
    mkdir -p "$d"
    for p in /export /; do
        [ "$3" = 3 ] && [ "$p" = / ] && break
        if timeout 120 mount -t nfs -o "$o" "$SRV:$p" "$d" 2> mount.err; then
            [ -e "$d/.coherence-root" ] && { echo "+ mount -o $o $SRV:$p $d"; return 0; }
            umount "$d"
        fi
    done
    cat mount.err; return 1
}

if ! setup_siw > siw-setup.txt 2>&1; then
    cat siw-setup.txt; echo "FAIL siw setup"; exit 1
fi
modprobe rpcrdma; modprobe nfs; modprobe nfsv4 2>/dev/null
head -c 3145728 /dev/urandom > /tmp/f3m
head -c 65536 /dev/urandom > /tmp/patch
head -c 102400 /dev/urandom > /tmp/tail

# direction NAME A_PROTO A_VERS B_PROTO B_VERS
direction() {
    DIR=$1
    local ap=$2 av=$3 bp=$4 bv=$5 D=coh-$1
    handshake "mark-$DIR-start" "marked-$DIR-start"
    if ! mount_at $A "$(opts "$ap" "$av")" "$av"; then fail "mount-A $ap v$av"; return; fi
    if ! mount_at $B "$(opts "$bp" "$bv")" "$bv"; then fail "mount-B $bp v$bv"; umount $A; return; fi
    pass "mount A: $(grep " $A " /proc/mounts | cut -d' ' -f3,4 | cut -c1-90)"
    pass "mount B: $(grep " $B " /proc/mounts | cut -d' ' -f3,4 | cut -c1-90)"
    check "two-superblocks (st_dev $(stat -c %d $A) vs $(stat -c %d $B))" \
        test "$(stat -c %d $A)" != "$(stat -c %d $B)"
    sed "s|^|INFO $DIR/nfsfs servers: |" /proc/fs/nfsfs/servers 2>/dev/null
    rm -rf "${A:?}/$D"; mkdir "$A/$D" && sync
    cp /tmp/f3m /tmp/exp

    # 1. A writes and closes 3 MiB; B opens and reads it.
    check "A-writes-3MiB" cp /tmp/f3m "$A/$D/f"
    seen "B-reads-A's-3MiB-byte-exact" strict cmp /tmp/exp "$B/$D/f"
    # A opens it again (a read delegation for a v4.1 A)
    check "A-reads-its-file" cmp /tmp/exp "$A/$D/f"
    # 2. B overwrites, appends, truncates; A sees each at its next open.
    dd if=/tmp/patch of=/tmp/exp bs=65536 seek=10 conv=notrunc status=none
    check "B-overwrites-64KiB" sh -c "dd if=/tmp/patch of=$B/$D/f bs=65536 seek=10 conv=notrunc status=none && sync"
    seen "A-reads-B's-overwrite" strict cmp /tmp/exp "$A/$D/f"
    cat /tmp/tail >> /tmp/exp
    check "B-appends-100KiB" sh -c "cat /tmp/tail >> $B/$D/f && sync"
    seen "A-reads-B's-append-size-$(stat -c %s /tmp/exp)" strict \
        sh -c "test \$(wc -c < $A/$D/f) = $(stat -c %s /tmp/exp) && cmp /tmp/exp $A/$D/f"
    truncate -s 1048581 /tmp/exp
    check "B-truncates-to-1MiB+5" sh -c "truncate -s 1048581 $B/$D/f && sync"
    seen "A-reads-B's-truncate" strict \
        sh -c "test \$(wc -c < $A/$D/f) = 1048581 && cmp /tmp/exp $A/$D/f"
    # 3. B renames; A opens the new name, and the old name is gone.
    check "A-holds-f-open-once-more" cmp /tmp/exp "$A/$D/f"
    check "B-renames-f-to-g" mv "$B/$D/f" "$B/$D/g"
    seen "A-opens-new-name-g" strict cmp /tmp/exp "$A/$D/g"
    seen "A-old-name-f-gone" attrcache sh -c "! cat $A/$D/f > /dev/null 2>&1"
    # 4. B creates and removes names; A sees both.
    check "A-opens-r" sh -c "echo r > $A/$D/r && cat $A/$D/r > /dev/null"
    check "B-creates-c-removes-r" sh -c "echo created > $B/$D/c && rm $B/$D/r && sync"
    seen "A-opens-created-c" strict sh -c "test \"\$(cat $A/$D/c)\" = created"
    seen "A-removed-r-gone" attrcache sh -c "! cat $A/$D/r > /dev/null 2>&1"
    # 5. The host writes into the export directly: A holds a write
    #    delegation (it created the file), then a read delegation.
    check "A-writes-l" sh -c "echo from-A > $A/$D/l && sync"
    printf 'host-1 %s\n' "$DIR" > host-data; echo "$D/l" > host-path
    handshake "host-write" "host-wrote" || fail "host-write-1: no answer"
    seen "A-reads-host-write-after-A-wrote-it (fwd: A holds a write delegation)" strict \
        sh -c "test \"\$(cat $A/$D/l)\" = 'host-1 $DIR'"
    check "A-reads-l-again" cat "$A/$D/l"
    printf 'host-2 %s, longer\n' "$DIR" > host-data
    handshake "host-write" "host-wrote" || fail "host-write-2: no answer"
    seen "A-reads-host-write-after-A-read-it (fwd: A holds a read delegation)" strict \
        sh -c "test \"\$(cat $A/$D/l)\" = 'host-2 $DIR, longer'"
    seen "B-reads-host-write" strict sh -c "test \"\$(cat $B/$D/l)\" = 'host-2 $DIR, longer'"
    grep -A200 " mounted on $A " /proc/self/mountstats | grep -m1 'xprt:' | sed "s|^|INFO $DIR/A |"
    grep -A200 " mounted on $B " /proc/self/mountstats | grep -m1 'xprt:' | sed "s|^|INFO $DIR/B |"
    check "rm-rf" rm -rf "${A:?}/$D"
    check "umount-A" umount $A
    check "umount-B" umount $B
    handshake "mark-$DIR-end" "marked-$DIR-end"
}

if [ "$CHECKS" != 0 ]; then
    direction fwd rdma 4.1 tcp 3
    direction rev rdma 3 tcp 4.1
fi

# Part 2: small-file READ latency, cold cache, interleaved.
DIR=latency
# sys_snap: context switches, interrupts, IPIs (RES + CAL), /proc/stat cpu
sys_snap() {
    echo "$(awk '/^ctxt/{c=$2} /^intr/{i=$2} END{print c, i}' /proc/stat)" \
        "$(awk '$1=="RES:"||$1=="CAL:"{for(k=2;k<=NF&&$k~/^[0-9]+$/;k++)n+=$k} END{print n+0}' /proc/interrupts)" \
        "$(cpu_snap)"
}
# sys_delta SNAP1 SNAP2 FILES -> "ctxt ipi intr busy_ms sys_ms softirq_ms idle_ms", each per file
sys_delta() {
    awk -v a="$1" -v b="$2" -v n="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN{split(a,A," ");split(b,B," ");
        for(i=1;i<=11;i++)D[i]=B[i]-A[i]; t=1000/hz/n;
        printf "%.1f %.1f %.1f %.2f %.2f %.2f %.2f\n", D[1]/n, D[3]/n, D[2]/n,
            (D[4]+D[5]+D[6]+D[9]+D[10]+D[11])*t, D[6]*t, D[10]*t, (D[7]+D[8])*t}'
}
TR=/sys/kernel/tracing
trace_start() {
    [ "$TRACE" = 1 ] || return 0
    [ -e $TR/trace ] || mount -t tracefs nodev $TR 2>/dev/null || return 0
    echo 0 > $TR/tracing_on; echo 8192 > $TR/buffer_size_kb; : > $TR/trace
    echo 1 > $TR/events/sched/sched_switch/enable; echo 1 > $TR/events/sched/sched_wakeup/enable
    echo 1 > $TR/tracing_on
}
trace_stop() { # SERVER PROTO VERS: switches per file by the thread switched to
    [ "$TRACE" = 1 ] && [ -e $TR/trace ] || return 0
    echo 0 > $TR/tracing_on; echo 0 > $TR/events/sched/sched_switch/enable
    echo 0 > $TR/events/sched/sched_wakeup/enable
    echo "LATSW $1 $2 $3 $(sed -n 's/.*next_comm=\([^ ]*\) next_pid.*/\1/p' $TR/trace |
        sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -8 |
        awk -v n="$LAT_FILES" '{printf "%s:%.1f ", $2, $1/n}')" | tee -a latency-sw.txt
    # wake-up to running, per thread kind: ms per file, and wake-ups over 20 ms
    echo "LATWAKE $1 $2 $3 $(sed -n -e 's/.* \([0-9.]*\): sched_wakeup: comm=\([^ ]*\) pid=\([0-9]*\) .*/W \1 \3 \2/p' \
            -e 's/.* \([0-9.]*\): sched_switch: .* next_comm=\([^ ]*\) next_pid=\([0-9]*\) .*/S \1 \3 \2/p' $TR/trace |
        awk -v n="$LAT_FILES" '$1 == "W" && !($3 in w) {w[$3] = $2}
            $1 == "S" && ($3 in w) {c = $4; gsub(/[0-9]+/, "N", c); d = ($2 - w[$3]) * 1000; delete w[$3]
                t[c] += d; if (d > 20) l[c]++}
            END {for (c in t) printf "%s %.3f %d\n", c, t[c] / n, l[c]}' | sort -k2 -rn | head -6 |
        awk '{printf "%s:%s(%d>20ms) ", $1, $2, $3}')" | tee -a latency-wake.txt
    : > $TR/trace
}
# the kernel client's inline receive size (xprtrdma reads it per connection)
inline_read() { echo "$1" > /proc/sys/sunrpc/rdma_max_inline_read 2>/dev/null; }
KSRV_DIR=/kexport
knfsd_start() { # the guest's own knfsd on tmpfs, the same LAT_FILES files
    EXPORT_DIR=$KSRV_DIR start_nfsd "rw,no_root_squash,insecure,no_subtree_check,fsid=1" > knfsd-start.txt 2>&1 ||
        { cat knfsd-start.txt; fail "knfsd start"; return 1; }
    mkdir -p $KSRV_DIR/lat; touch $KSRV_DIR/.coherence-root
    for i in $(seq 1 "$LAT_FILES"); do head -c 4096 /dev/urandom > "$KSRV_DIR/lat/f$i"; done
}
lat_pass() { # SERVER PROTO VERS
    local m=/mnt/lat o t0 t1 st s0 s1
    o=$(opts "$2" "$3")
    if [ "$1" = base ]; then o=${o/port=20049/port=20050}; o=${o/port=2049/port=2050}; o=${o/mountport=$MPORT/mountport=20047}; fi
    [ "$1" = ours-i8k ] && inline_read 8192
    if [ "$1" = knfsd ]; then
        o=${o/mountport=$MPORT/mountport=20048}; mkdir -p $m
        if ! timeout 120 mount -t nfs -o "$o" "$GUEST_IP:$KSRV_DIR" $m 2> mount.err; then
            fail "lat-mount $1 $2 v$3: $(tail -1 mount.err)"; return
        fi
    elif ! mount_at $m "$o" "$3" > /dev/null; then
        fail "lat-mount $1 $2 v$3: $(tail -1 mount.err)"; inline_read 4096; return
    fi
    inline_read 4096 # read at connect time; later mounts get the default
    drop_caches
    local files; files=$(seq -f "$m/lat/f%g" 1 "$LAT_FILES")
    trace_start
    s0=$(sys_snap)
    t0=$(now)
    # one process opens and reads every file in turn (a fork per file costs
    # tens of ms under TCG): LOOKUP, ACCESS and READ per file, cold cache
    # shellcheck disable=SC2086
    cat $files > /dev/null || fail "lat-read $1 $2 v$3"
    t1=$(now)
    s1=$(sys_snap)
    trace_stop "$1" "$2" "$3"
    echo "LATSYS $1 $2 $3 $(sys_delta "$s0" "$s1" "$LAT_FILES")" | tee -a latency-sys.txt
    echo "LATXPRT $1 $2 $3 $(grep -A300 " mounted on $m " /proc/self/mountstats | grep -m1 -E '^[[:space:]]*xprt:' | sed 's/^[[:space:]]*//')" \
        | tee -a latency-xprt.txt
    st=$(grep -A300 " mounted on $m " /proc/self/mountstats | grep -m1 -E '^[[:space:]]*READ:')
    # "READ: ops trans timeouts bytes_sent bytes_recv queue rtt execute"
    echo "$st" | awk -v s="$1" -v p="$2" -v v="$3" -v n="$LAT_FILES" -v t="$(awk "BEGIN{print $t1-$t0}")" \
        '{ops=$2; printf "LAT %s %s %s %d %.2f %.2f %d %.2f %.2f\n", s, p, v, n, t, 1000*t/n, ops, (ops?$8/ops:0), (ops?$9/ops:0)}' \
        | tee -a latency.txt
    grep -A300 " mounted on $m " /proc/self/mountstats | grep -E '^[[:space:]]*(LOOKUP|ACCESS|GETATTR|READ):' | head -4 |
        awk -v s="$1" -v p="$2" -v v="$3" '{ops=$2; sub(":", "", $1); printf "LATOPS %s %s %s %s %d %.3f %.3f\n", s, p, v, $1, ops, (ops?$8/ops:0), (ops?$9/ops:0)}' \
        | tee -a latency-ops.txt
    umount $m
}
if [ "$LAT_ROUNDS" -gt 0 ]; then
    echo "INFO latency: server proto vers files seconds ms/file READ-ops READ-rtt-ms READ-exe-ms"
    servers=ours; [ "$LAT_BASE" = 1 ] && servers="ours base"
    [ "$INLINE8K" = 1 ] && servers+=" ours-i8k"
    [ "$KNFSD" = 1 ] && knfsd_start && servers+=" knfsd"
    echo "INFO latency servers: $servers"
    for r in $(seq 1 "$LAT_ROUNDS"); do
        for v in $LAT_VERS; do
            for s in $servers; do
                for p in rdma tcp; do
                    [ "$s" = ours-i8k ] && [ "$p" = tcp ] && continue # the setting is RDMA's
                    lat_pass "$s" "$p" "$v"
                done
            done
        done
    done
    [ -s latency.txt ] && pass "latency: $(wc -l < latency.txt) passes"
fi
echo "INFO $FAILS failed"
[ "$FAILS" -eq 0 ]
