#!/bin/bash
# interop/guest/pnfs.sh [PROTOS] [VERS] [FILES] [FILE_MIB] [KNFSD_PORT]
# Runs INSIDE the kpeer guest (via interop/kpeer/run.sh, started by
# scripts/interop.sh, phase "pnfs"; issue 18, docs/pnfs.md). On the host an
# `nfsrdma serve --data-server ...` metadata server (MDS) runs over two
# nfsrdma data servers (DSes); the guest reaches the MDS at $HOST_IP:2049
# (TCP) and :20049 (RDMA), and each DS at the address GETDEVICEINFO gives
# ($HOST_IP and the DS's own ports, forwarded 1:1).
#
# For each protocol of PROTOS (default "tcp") and each version of VERS
# (default "4.1 4.2"): mount the MDS with the kernel's flex-files layout
# driver (nfs_layout_flexfiles); write FILES (default 8) files of FILE_MIB
# (default 4) MiB of random bytes, an 8 MiB one and a 10-byte one; remount
# (cold cache) and compare every file byte-exact; record the MDS mount's
# per-operation counts from /proc/self/mountstats (LAYOUTGET,
# GETDEVICEINFO, READ, WRITE) and its application bytes ("bytes:" line);
# truncate a file (the host counts the CB_LAYOUTRECALL it caused) and check
# the size and bytes after a remount; write into it again. A host-side
# check (scripts/interop.sh) then compares the bytes each DS holds.
#
# With KNFSD_PORT the guest's knfsd is a third DS first: NFSv3 export
# /srv/pnfs-ds (rw, no_root_squash for the MDS's control path, insecure
# for slirp's ports) on NFS port KNFSD_PORT and MOUNT KNFSD_PORT+1, which
# the host forwards 1:1; at the end the guest reports the bytes and files
# it holds ("INFO knfsd-ds bytes N files M").
#
# Prints PASS/FAIL/INFO lines (and "STATS proto vers op count" lines for
# the host) and exits 1 if a check failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
PROTOS=${1:-tcp}; VERSIONS=${2:-4.1 4.2}; FILES=${3:-8}; FILE_MIB=${4:-4}; KNFSD_PORT=${5:-}
CASES=${6:-basic}; CTL_PORT=${7:-}; RECALL_TIMEOUT=${8:-90}
SRV=$HOST_IP
M=/mnt/pnfs
FAILS=0
pass() { echo "PASS $*"; echo "PASS $*" >> summary.txt; }
fail() { echo "FAIL $*"; echo "FAIL $*" >> summary.txt; FAILS=$((FAILS + 1)); }
info() { echo "INFO $*"; }

run modprobe nfs_layout_flexfiles || fail "modprobe nfs_layout_flexfiles"
if [[ " $PROTOS " == *" rdma "* ]]; then setup_siw || fail "setup_siw"; modprobe rpcrdma; fi

# The knfsd DS: a tmpfs export on KNFSD_PORT (NFSv3 only is needed).
if [ -n "$KNFSD_PORT" ]; then
    mkdir -p /srv/pnfs-ds
    mountpoint -q /srv/pnfs-ds || mount -t tmpfs -o size=1g tmpfs /srv/pnfs-ds
    chmod 0755 /srv/pnfs-ds
    modprobe nfsd
    mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
    mkdir -p /run/rpc_pipefs /var/lib/nfs/v4recovery
    mountpoint -q /run/rpc_pipefs || mount -t rpc_pipefs sunrpc /run/rpc_pipefs
    echo "/srv/pnfs-ds *(rw,no_root_squash,insecure,no_subtree_check,fsid=77)" > /etc/exports
    pidof rpcbind > /dev/null || run rpcbind -w
    run exportfs -ra
    pidof rpc.mountd > /dev/null || run rpc.mountd -p $((KNFSD_PORT + 1))
    if run rpc.nfsd -p "$KNFSD_PORT" 8 && grep -q "$KNFSD_PORT" /proc/fs/nfsd/portlist; then
        pass "knfsd-ds: NFSv3 on :$KNFSD_PORT ($(cat /proc/fs/nfsd/versions))"
    else
        fail "knfsd-ds: rpc.nfsd on :$KNFSD_PORT"
    fi
fi

mkdir -p /tmp/src
for i in $(seq 1 "$FILES"); do head -c $((FILE_MIB << 20)) /dev/urandom > /tmp/src/f$i; done
head -c $((8 << 20)) /dev/urandom > /tmp/src/big
printf '0123456789' > /tmp/src/small

do_mount() { # PROTO VERS
    local port=2049
    [ "$1" = rdma ] && port=20049
    mkdir -p "$M"
    timeout 120 mount -t nfs -o "vers=$2,proto=$1,port=$port" "$SRV:/export" "$M"
}

# opcount OP: the MDS mount's count of OP from mountstats (per-op stats)
opcount() {
    awk -v mnt="$M" -v op="$1:" '
        $1 == "device" { on = ($5 == mnt) }
        on && $1 == op { print $2; exit }' /proc/self/mountstats
}
# appbytes: the mount's "bytes:" line (normal read, normal write, direct
# read, direct write, server read, server write, pages read, pages written)
appbytes() {
    awk -v mnt="$M" '$1 == "device" { on = ($5 == mnt) } on && $1 == "bytes:" { print; exit }' \
        /proc/self/mountstats
}

# case_basic PROTO VERS: write, read back cold, truncate (a recall), append.
case_basic() {
    local proto=$1 vers=$2 d=$M/$T ok bad lg rd wr gd sz f op
    rm -rf "$d"; mkdir -p "$d"
    ok=1
    for f in /tmp/src/*; do cp "$f" "$d/" || ok=0; done
    sync
    [ "$ok" = 1 ] && pass "$T/write $((FILES + 2)) files" || fail "$T/write"
    for op in LAYOUTGET GETDEVICEINFO LAYOUTCOMMIT READ WRITE COMMIT; do
        echo "STATS $T write-phase $op $(opcount $op)"
    done
    info "$T/bytes after writing: $(appbytes)"
    umount "$M" || fail "$T/umount"
    if ! do_mount "$proto" "$vers"; then fail "$T/remount"; return; fi
    # A cold cache: the reads below go to the DSes.
    sync; echo 3 > /proc/sys/vm/drop_caches
    bad=
    for f in /tmp/src/*; do cmp -s "$f" "$d/${f##*/}" || bad="$bad ${f##*/}"; done
    [ -z "$bad" ] && pass "$T/byte-exact after remount" || fail "$T/byte-exact:$bad"
    lg=$(opcount LAYOUTGET); rd=$(opcount READ); wr=$(opcount WRITE)
    for op in LAYOUTGET GETDEVICEINFO READ WRITE; do
        echo "STATS $T read-phase $op $(opcount $op)"
    done
    info "$T/bytes after reading: $(appbytes)"
    # The flex-files driver counts its I/O to the DSes in the MDS
    # mount's per-op stats too (READ/WRITE below are DS calls); the
    # host checks the MDS's own counters.
    gd=$(opcount GETDEVICEINFO)
    [ "${gd:-0}" -gt 0 ] && pass "$T/GETDEVICEINFO at the MDS: $gd (layouts used)" || fail "$T/no GETDEVICEINFO: layouts not used"
    info "$T/mountstats LAYOUTGET $lg READ $rd WRITE $wr"
    # Truncation: the MDS recalls the layout (the host counts it).
    truncate -s 1000 "$d/big" || fail "$T/truncate"
    sleep 1
    umount "$M"; do_mount "$proto" "$vers" || { fail "$T/remount after truncate"; return; }
    sz=$(stat -c %s "$d/big")
    if [ "$sz" = 1000 ] && cmp -s <(head -c 1000 /tmp/src/big) "$d/big"; then
        pass "$T/truncate to 1000 bytes"
    else
        fail "$T/truncate: size $sz"
    fi
    # write after the recall: a new layout
    cat /tmp/src/small >> "$d/big" && sync
    umount "$M"; do_mount "$proto" "$vers" || { fail "$T/remount after append"; return; }
    if cmp -s <(head -c 1000 /tmp/src/big; cat /tmp/src/small) "$d/big"; then
        pass "$T/append after the recall"
    else
        fail "$T/append after the recall"
    fi
    echo "STATS $T final WRITE $(opcount WRITE)"
}

# ctl CMD...: one command to the host's relay (scripts/pnfs-relay.py),
# which sits between this guest and the nfsrdma DSes and watches the MDS
# log; prints its one-line reply.
ctl() {
    local r=
    [ -n "$CTL_PORT" ] || { echo "err no relay"; return 1; }
    exec 9<> "/dev/tcp/$SRV/$CTL_PORT" || { echo "err relay unreachable"; return 1; }
    printf '%s\n' "$*" >&9
    IFS= read -r -t 900 r <&9
    exec 9>&-
    echo "$r"
}
# logcount TEXT: MDS log lines holding TEXT
logcount() { local r; r=$(ctl count "$@"); r=${r#ok }; echo "${r:-0}"; }
# mdsio: READ + WRITE calls the MDS served (NFSv3 and v4)
mdsio() { local r; r=$(ctl mdsio); set -- $r; echo $(( ${2:-0} + ${3:-0} )); }
# layout_file NAME: write 1 MiB of /tmp/src/big into $d/NAME through a
# layout on an nfsrdma DS (the relayed ones: a file that landed on the
# guest's knfsd DS is left and another tried); prints the name used
layout_file() {
    local n ino hex
    for n in "$1" "$1-b" "$1-c" "$1-d"; do
        head -c $((1 << 20)) /tmp/src/big > "$d/$n" && sync
        ino=$(stat -c %i "$d/$n"); hex=$(printf '%x' "$ino")
        if [ -n "$KNFSD_PORT" ] && ls /srv/pnfs-ds 2>/dev/null | grep -q "\.$hex\$"; then continue; fi
        echo "$n"; return 0
    done
    return 1
}
# check_cold FILE EXPECTED_FILE LABEL: remount, drop caches, compare
check_cold() {
    umount "$M"; do_mount "$proto" "$vers" || { fail "$3: remount"; return 1; }
    sync; echo 3 > /proc/sys/vm/drop_caches
    if cmp -s "$2" "$1"; then pass "$3"; else fail "$3 ($(stat -c %s "$1") bytes, $(cmp "$2" "$1" 2>&1 | head -1))"; fi
}

# case_chmod: chmod and chown of a file the client holds a layout on
# (its data just written through it): the MDS recalls the layout
# (counted in its log), the kernel returns it, the bytes stay.
case_chmod() {
    local d=$M/$T/chmod f c0 c1
    mkdir -p "$d"
    f=$(layout_file f) || { fail "$T/chmod: no file on an nfsrdma DS"; return; }
    c0=$(logcount CB_LAYOUTRECALL)
    chmod 0600 "$d/$f" || fail "$T/chmod: chmod"
    c1=$(ctl waitfor 30 $((c0 + 1)) CB_LAYOUTRECALL); c1=${c1#ok }
    # The kernel returned the layout: write again (a new layout) before
    # the chown.
    head -c $((2 << 20)) /tmp/src/big | tail -c $((1 << 20)) >> "$d/$f" && sync
    chown 4242:4243 "$d/$f" || fail "$T/chmod: chown"
    local c2; c2=$(ctl waitfor 30 $((c1 + 1)) CB_LAYOUTRECALL); c2=${c2#ok }
    if [ "${c1:-0}" -gt "$c0" ] && [ "${c2:-0}" -gt "${c1:-0}" ]; then
        pass "$T/chmod and chown each recalled the layout (MDS log CB_LAYOUTRECALL $c0 -> $c1 -> $c2)"
    else
        fail "$T/chmod/chown recall: MDS log CB_LAYOUTRECALL $c0 -> $c1 -> $c2"
    fi
    # Written again through a new layout after the recalls.
    head -c $((3 << 20)) /tmp/src/big | tail -c $((1 << 20)) >> "$d/$f" && sync
    check_cold "$d/$f" <(head -c $((3 << 20)) /tmp/src/big) "$T/chmod: bytes exact after the recalls and new layouts"
    local m; m=$(stat -c '%a %u %g' "$d/$f")
    [ "$m" = "600 4242 4243" ] && pass "$T/chmod: mode and owner $m" || fail "$T/chmod: mode and owner $m"
    rm -rf "$d"
}

# case_fence: the kernel's WRITEs to the DS hang (the relay freezes and
# holds what the kernel sends: the connection stays, nothing reaches the
# DS), another client changes the file's mode (this guest's NFSv3 mount
# of the MDS), so the MDS recalls the layout. The Linux client returns a
# recalled layout at once even with WRITEs in flight (seen in the VM), so
# the MDS fences the data file when it recalls a read-write layout for a
# change of mode, owner, group or size (RFC 8435 §2.2: the next synthetic
# ids; its log says "data file fenced"), and a recall left unanswered is
# fenced again at the recall timeout. Then the relay thaws: the held
# WRITEs reach the DS under the old ids and must be refused (the relay
# counts the DS's NFSv3 WRITE replies by status: ACCES or PERM), and the
# kernel must recover with a new layout (a successful LAYOUTGET at the MDS
# after the fencing, WRITEs the DS accepts: one more MiB is written after
# dd), the file byte-exact.
case_fence() {
    local d=$M/$T/fence f v3=/mnt/pnfs3 f0 n dd_pid rc t0 lg0 io0 io1 w0 w1 g0 g1 c0 c1=0
    mkdir -p "$d" "$v3"
    f=$(layout_file f) || { fail "$T/fence: no file on an nfsrdma DS"; return; }
    if ! timeout 120 mount -t nfs -o vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock "$SRV:/export" "$v3"; then
        fail "$T/fence: NFSv3 mount of the MDS (the second client)"; return
    fi
    f0=$(logcount 'data file fenced'); lg0=$(opcount LAYOUTGET); io0=$(mdsio)
    c0=$(ctl dscalls 7); c0=${c0#ok }
    info "$T/fence: relay $(ctl freeze)"
    t0=$(date +%s)
    # 3 MiB more, then fsync: the WRITEs go to the DS and hang (the relay
    # holds them). The recall must find them in flight: the kernel
    # returns an idle layout at once (seen in the VM).
    dd if=/tmp/src/big of="$d/$f" bs=1M skip=1 seek=1 count=3 conv=notrunc,fsync status=none &
    dd_pid=$!
    for _ in $(seq 60); do
        c1=$(ctl dscalls 7); c1=${c1#ok }
        [ "${c1:-0}" -gt "${c0:-0}" ] && break
        sleep 1
    done
    info "$T/fence: $((c1 - c0)) WRITEs held at the relay after $(( $(date +%s) - t0 )) s"
    # What the DSes answered and the MDS granted before the recall (the
    # kernel asks for a new layout within a second of returning the
    # recalled one, before the relay thaws).
    w0=$(ctl dsreplies 7); g0=$(ctl mdsop LAYOUTGET)
    info "$T/fence: before the chmod: DS WRITE replies (ok refused other) ${w0#ok }; MDS LAYOUTGET (all ok) ${g0#ok }; WRITEs by uid:gid $(ctl dscreds 7 | sed 's/^ok //')"
    chmod 0640 "$v3/$T/fence/$f" || fail "$T/fence: chmod through NFSv3"
    n=$(ctl waitfor $((RECALL_TIMEOUT * 3 + 60)) $((f0 + 1)) 'data file fenced'); n=${n#ok }
    if [ "${n:-0}" -gt "$f0" ]; then
        pass "$T/fence: the layout recalled with WRITEs in flight; the MDS fenced the data file $(( $(date +%s) - t0 )) s after the freeze"
    else
        fail "$T/fence: no fencing in the MDS log within $((RECALL_TIMEOUT * 3 + 60)) s"
    fi
    kill -0 "$dd_pid" 2>/dev/null && info "$T/fence: dd still waiting on its WRITEs when the relay thaws"
    sleep 2
    info "$T/fence: before the thaw: DS WRITE replies (ok refused other) $(ctl dsreplies 7 | sed 's/^ok //'); MDS LAYOUTGET (all ok) $(ctl mdsop LAYOUTGET | sed 's/^ok //'); WRITEs by uid:gid $(ctl dscreds 7 | sed 's/^ok //')"
    info "$T/fence: relay $(ctl thaw)"
    rc=timeout
    for _ in $(seq 300); do kill -0 "$dd_pid" 2>/dev/null || { wait "$dd_pid"; rc=$?; break; }; sleep 1; done
    info "$T/fence: when dd ended: DS WRITE replies (ok refused other) $(ctl dsreplies 7 | sed 's/^ok //'); MDS LAYOUTGET (all ok) $(ctl mdsop LAYOUTGET | sed 's/^ok //')"
    # One more MiB after the recovery: through a new layout.
    dd if=/tmp/src/big of="$d/$f" bs=1M skip=4 seek=4 count=1 conv=notrunc,fsync status=none || fail "$T/fence: the write after the recovery"
    w1=$(ctl dsreplies 7); g1=$(ctl mdsop LAYOUTGET)
    info "$T/fence: the WRITE calls to the DSes by AUTH_SYS uid:gid so far: $(ctl dscreds 7 | sed 's/^ok //')"
    info "$T/fence: dd exit $rc after $(( $(date +%s) - t0 )) s; LAYOUTGET $lg0 -> $(opcount LAYOUTGET), LAYOUTRETURN $(opcount LAYOUTRETURN), LAYOUTERROR $(opcount LAYOUTERROR)"
    info "$T/fence: after: DS WRITE replies (ok refused other) ${w1#ok }; MDS LAYOUTGET (all ok) ${g1#ok }"
    io1=$(mdsio)
    info "$T/fence: MDS READ+WRITE $io0 -> $io1; MDS log: $(logcount 'data server error') data server error reports"
    [ "$rc" = 0 ] && pass "$T/fence: the writer finished without an error" || fail "$T/fence: the writer got rc $rc"
    # shellcheck disable=SC2086
    set -- ${w0#ok } ${w1#ok } ${g0#ok } ${g1#ok }
    if [ "$#" = 10 ] && [ "$5" -gt "$2" ]; then
        pass "$T/fence: stale I/O failed: the DS refused $(($5 - $2)) WRITEs sent under the fenced ids once the relay thawed"
    else
        fail "$T/fence: no WRITE refused by the DS after the fencing (replies ok/refused/other ${w0#ok } -> ${w1#ok })"
    fi
    # The 3 MiB of dd and the MiB after it, under a layout taken after
    # the recall: at least 4 WRITEs the DS accepted.
    if [ "$#" = 10 ] && [ "${10}" -gt "$8" ] && [ "$4" -ge $(($1 + 4)) ]; then
        pass "$T/fence: recovered with a new layout: $((${10} - $8)) LAYOUTGET granted after the recall, $(($4 - $1)) WRITEs accepted by the DS"
    else
        fail "$T/fence: no recovery through a new layout (MDS LAYOUTGET ok ${g0#ok } -> ${g1#ok }, DS WRITE ok ${w0#ok } -> ${w1#ok })"
    fi
    umount "$v3"
    check_cold "$d/$f" <(head -c $((5 << 20)) /tmp/src/big) "$T/fence: bytes exact after fencing and recovery"
    dmesg | grep -iE 'nfs|layout|flexfile' | tail -5 | sed "s|^|INFO $T/fence dmesg: |"
    rm -rf "$d"
}

# case_dslost: the DSes go away (the relay drops every connection and
# closes new ones) while the kernel writes: it must fall back (report
# the error, I/O through the MDS, whose control path still reaches the
# DSes) and the bytes stay exact; then the DSes come back.
case_dslost() {
    local d=$M/$T/dslost f rc t0 io0 io1 e0 e1 w_pid timeo=/sys/module/nfs_layout_flexfiles/parameters/dataserver_timeo
    # The flex-files driver's DS timeout (tenths of a second, 600 by
    # default) is taken when it first connects to a DS: 10 s here, on a
    # fresh mount (the fence case needs the default).
    umount "$M"
    [ -w "$timeo" ] && echo "${DSLOST_TIMEO:-100}" > "$timeo"
    do_mount "$proto" "$vers" || { fail "$T/dslost: remount"; return; }
    info "$T/dslost: dataserver_timeo $(cat "$timeo" 2>/dev/null)"
    mkdir -p "$d"
    f=$(layout_file f) || { fail "$T/dslost: no file on an nfsrdma DS"; return; }
    e0=$(logcount 'data server error'); io0=$(mdsio)
    info "$T/dslost: relay $(ctl down)"
    t0=$(date +%s)
    dd if=/tmp/src/big of="$d/$f" bs=1M skip=1 seek=1 count=3 conv=notrunc,fsync status=none &
    w_pid=$!
    rc=timeout
    for _ in $(seq 300); do kill -0 "$w_pid" 2>/dev/null || { wait "$w_pid"; rc=$?; break; }; sleep 1; done
    io1=$(mdsio); e1=$(logcount 'data server error')
    info "$T/dslost: dd exit $rc after $(( $(date +%s) - t0 )) s; MDS READ+WRITE $io0 -> $io1; MDS log data server error reports $e0 -> $e1; LAYOUTGET $(opcount LAYOUTGET), LAYOUTRETURN $(opcount LAYOUTRETURN), LAYOUTERROR $(opcount LAYOUTERROR)"
    [ "$rc" = 0 ] && pass "$T/dslost: the writer finished without an error" || fail "$T/dslost: the writer got rc $rc"
    [ "$io1" -gt "$io0" ] && pass "$T/dslost: I/O went through the MDS ($((io1 - io0)) READ+WRITE)" || fail "$T/dslost: no I/O through the MDS"
    [ "${e1:-0}" -gt "${e0:-0}" ] && pass "$T/dslost: the kernel reported the DS error to the MDS" || info "$T/dslost: no DS error report in the MDS log"
    # Read back while the DSes are still gone (through the MDS), then
    # with them back.
    check_cold "$d/$f" <(head -c $((4 << 20)) /tmp/src/big) "$T/dslost: bytes exact while the DSes are gone"
    info "$T/dslost: relay $(ctl up)"
    check_cold "$d/$f" <(head -c $((4 << 20)) /tmp/src/big) "$T/dslost: bytes exact with the DSes back"
    dmesg | grep -iE 'nfs|layout|flexfile' | tail -5 | sed "s|^|INFO $T/dslost dmesg: |"
    rm -rf "$d"
    umount "$M"; [ -w "$timeo" ] && echo 600 > "$timeo"
}

for proto in $PROTOS; do
    for vers in $VERSIONS; do
        T="$proto-v$vers"
        say "$T"
        if ! do_mount "$proto" "$vers"; then fail "$T/mount"; continue; fi
        pass "$T/mount"
        for c in $CASES; do
            case "$c" in
                basic) io0=$(mdsio 2>/dev/null || echo 0)
                       case_basic "$proto" "$vers"
                       [ -n "$CTL_PORT" ] && echo "STATS mds-io-basic $(( $(mdsio) - io0 ))" ;;
                chmod) case_chmod ;;
                fence|dslost)
                    # The relay carries the DSes' TCP ports; over RDMA
                    # the kernel reaches them directly.
                    if [ "$proto" != tcp ] || [ -z "$CTL_PORT" ]; then info "$T/$c: skipped (TCP with the relay only)"; continue; fi
                    "case_$c" ;;
                *) fail "unknown case $c" ;;
            esac
            mountpoint -q "$M" || do_mount "$proto" "$vers" || { fail "$T/remount after $c"; break; }
        done
        umount "$M"
    done
done
if [ -n "$KNFSD_PORT" ]; then
    echo "INFO knfsd-ds bytes $(find /srv/pnfs-ds -type f -printf '%s\n' | awk '{n += $1} END {print n + 0}') files $(find /srv/pnfs-ds -type f | wc -l)"
    ls -ln /srv/pnfs-ds | head -5 | sed 's/^/INFO knfsd-ds: /'
fi
grep -i -E 'flexfiles|pnfs|layout' /proc/kallsyms > /dev/null 2>&1 && info "flexfiles loaded: $(lsmod | grep -c nfs_layout_flexfiles)"
dmesg | grep -iE 'nfs|pnfs|flexfile|rpcrdma' | tail -20 | sed 's/^/DMESG /'
[ "$FAILS" = 0 ]
