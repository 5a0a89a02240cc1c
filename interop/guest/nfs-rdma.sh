#!/bin/bash
# interop/guest/nfs-rdma.sh [MOUNTPORT] [PATH] [BULK_MIB] [VERS...]
# Runs INSIDE the kpeer guest (via interop/kpeer/run.sh, started by
# scripts/interop.sh, phase "rdma"). The Linux kernel NFS client mounts the
# nfsrdma server running on the HOST over RPC-over-RDMA: the guest's siw0 is
# the active iWARP side and connects to $HOST_IP:20049, which run.sh's slirp
# guestfwd carries to host 127.0.0.1:<rdma port> where `nfsrdma serve
# --transports tcp,rdma` listens with its software iWARP device (softrnic).
# For each version in VERS (default "3 4.1 4.2"):
#   vers=3:   proto=rdma,port=20049,mountport=MOUNTPORT,mountproto=tcp,nolock
#             (MOUNT v3 goes over TCP, NFS over RDMA; no portmapper query)
#   vers=4.x: proto=rdma,port=20049, the same PATH: the server's NFSv4
#             pseudo file system has each export at its path and aliases;
#             "/" (the pseudo root) is mounted too and must list the way
#             down to PATH and refuse a mkdir (read-only)
# and then: directory listing, an 8 MiB, a 10-byte and a 100 KiB file written
# and read back byte-exact after a remount (the 100 KiB WRITE is larger than
# the 4 KiB inline threshold, so it goes in a read chunk; READs come back in
# write chunks), `ls -l` of 50 files (READDIRPLUS / READDIR+GETATTR in a reply
# chunk), a BULK_MIB MiB copy both ways, and mountstats: the transport must be
# `xprt: rdma` and the read, write and reply chunk counters (fields 10, 11, 12
# after "rdma", see interop/kpeer/README.md) must each be non-zero, which
# proves each chunk type was used.
#
# Before each bulk copy the script creates capture-stop-<vers> and waits (up
# to 20 s) for capture-stopped-<vers>, so the host's pcap holds every phase
# but the bulk copies; before each mount it creates capture-start-<vers> and
# waits for capture-started-<vers>.
# Prints one "PASS <vers>/<check>" or "FAIL <vers>/<check>: why" line per
# check and exits 1 if any check failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
MPORT=${1:-20048}; RPATH=${2:-/export}; BULK=${3:-100}; shift 3 2>/dev/null
VERSIONS=${*:-3 4.1 4.2}
SRV=$HOST_IP
M=/mnt/r
FAILS=0
V=
pass() { echo "PASS $V/$*"; echo "PASS $V/$*" >> summary.txt; }
fail() { echo "FAIL $V/$*"; echo "FAIL $V/$*" >> summary.txt; FAILS=$((FAILS + 1)); }
check() { # name command... : PASS if the command succeeds
    local name=$1; shift
    if "$@" > check.out 2>&1; then pass "$name"; else fail "$name: $(tail -3 check.out | tr '\n' ' ')"; fi
}
handshake() { # ask the host for something and wait up to 20 s for its answer
    touch "$1"
    for _ in $(seq 100); do [ -e "$2" ] && return 0; sleep 0.2; done
    echo "INFO host did not answer $1"
}
: > summary.txt

if ! setup_siw > siw-setup.txt 2>&1; then
    cat siw-setup.txt; echo "FAIL siw setup"; exit 1
fi
modprobe rpcrdma; modprobe nfs; modprobe nfsv4 2>/dev/null
mkdir -p $M
head -c 8388608 /dev/urandom > /tmp/f8m
printf 0123456789 > /tmp/f10
head -c 102400 /dev/urandom > /tmp/f100k
head -c $((BULK * 1048576)) /dev/urandom > /tmp/bulk

for V in $VERSIONS; do
    if [ "$V" = 3 ]; then
        OPTS="vers=3,proto=rdma,port=20049,mountport=$MPORT,mountproto=tcp,nolock"
    else
        OPTS="vers=$V,proto=rdma,port=20049"
    fi
    P=$RPATH
    do_mount() { timeout 120 mount -t nfs -o "$OPTS" "$SRV:$P" $M; }
    remount() { umount $M && sync && echo 3 > /proc/sys/vm/drop_caches && do_mount; }
    handshake "capture-start-$V" "capture-started-$V"
    echo "+ mount -t nfs -o $OPTS $SRV:$P $M"
    if ! do_mount; then
        fail "mount: mount.nfs failed"
        dmesg | grep -iE 'nfs|rpc|siw' | tail -20
        handshake "capture-stop-$V" "capture-stopped-$V"
        continue
    fi
    pass "mount ($(grep " $M " /proc/mounts | cut -d' ' -f4))"
    if [ "$V" != 3 ]; then
        # The pseudo root: read-only junctions leading to the export.
        first=${RPATH#/}; first=${first%%/*}
        mkdir -p /mnt/root
        check "pseudo-root-mount" timeout 120 mount -t nfs -o "$OPTS" "$SRV:/" /mnt/root
        check "pseudo-root-lists-export" sh -c "ls /mnt/root | grep -qx '$first'"
        check "pseudo-root-read-only" sh -c "! mkdir /mnt/root/kp-nope 2>/dev/null"
        umount /mnt/root 2>/dev/null
    fi
    D=$M/rdma-v$V
    rm -rf "$D"
    check "mkdir" mkdir "$D"
    check "ls-root" ls -la $M
    check "write-8MiB" cp /tmp/f8m "$D/f8m.bin"
    check "write-10B" cp /tmp/f10 "$D/f10.bin"
    check "write-100KiB" cp /tmp/f100k "$D/f100k.bin"
    check "sync" sync
    check "remount" remount
    check "read-8MiB-byte-exact" cmp /tmp/f8m "$D/f8m.bin"
    check "read-10B-byte-exact" cmp /tmp/f10 "$D/f10.bin"
    check "read-100KiB-byte-exact" cmp /tmp/f100k "$D/f100k.bin"
    check "create-50-files" sh -c "mkdir $D/many && for i in \$(seq 1 50); do echo \$i > $D/many/file-\$i; done"
    check "remount-2" remount
    check "readdirplus-50" sh -c "ls -l $D/many > ls.out && test \$(grep -c file- ls.out) = 50"
    check "read-back-small-files" sh -c "test \"\$(cat $D/many/file-37)\" = 37"
    # mountstats count from the last mount: after remount-2 the READDIRPLUS
    # above used a reply chunk; a READ of 100 KiB uses a write chunk and a
    # 100 KiB WRITE a read chunk.
    check "read-100KiB-after-remount-byte-exact" cmp /tmp/f100k "$D/f100k.bin"
    check "write-100KiB-read-chunk" sh -c "cp /tmp/f100k $D/f100k-2.bin && sync"
    # mountstats before the bulk copies (the bulk copies only add to the counters)
    st=$(grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:')
    echo "INFO mountstats $st"
    grep -A200 " mounted on $M " /proc/self/mountstats > "mountstats-v$V.txt"
    # "xprt: rdma port bind conn conn_time idle sends recvs bad_xids req_u bklog_u
    #  read_chunk write_chunk reply_chunk ..." -> awk fields $13 $14 $15
    check "mountstats-xprt-rdma" sh -c "echo '$st' | awk '{exit !(\$2 == \"rdma\")}'"
    check "read-chunks-used" sh -c "echo '$st' | awk '{exit !(\$13 > 0)}'"
    check "write-chunks-used" sh -c "echo '$st' | awk '{exit !(\$14 > 0)}'"
    check "reply-chunks-used" sh -c "echo '$st' | awk '{exit !(\$15 > 0)}'"

    handshake "capture-stop-$V" "capture-stopped-$V"
    t0=$(date +%s.%N)
    check "bulk-${BULK}MiB-to-server" sh -c "cp /tmp/bulk $D/bulk.bin && sync"
    t1=$(date +%s.%N)
    check "remount-3" remount
    t2=$(date +%s.%N)
    check "bulk-${BULK}MiB-from-server" cp "$D/bulk.bin" /tmp/bulk.back
    t3=$(date +%s.%N)
    check "bulk-byte-exact" cmp /tmp/bulk /tmp/bulk.back
    rm -f /tmp/bulk.back
    echo "INFO v$V bulk write $(awk "BEGIN{print $t1-$t0}") s, read $(awk "BEGIN{print $t3-$t2}") s"
    check "rm-rf" rm -rf "$D"
    grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:' | sed 's/^/INFO final /'
    check "umount" umount $M
done
echo "INFO $FAILS failed"
[ "$FAILS" -eq 0 ]
