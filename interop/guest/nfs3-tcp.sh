#!/bin/bash
# interop/guest/nfs3-tcp.sh [PORT] [MOUNTPORT] [PATH] [BULK_MIB] [RPCBIND] [RO_PORT RO_MOUNTPORT]
# Runs INSIDE the kpeer guest (via interop/kpeer/run.sh, started by
# scripts/interop.sh). The Linux kernel NFSv3 client mounts the nfsrdma server
# running on the HOST over TCP through slirp guestfwd: the guest connects to
# $HOST_IP:PORT (NFS) and $HOST_IP:MOUNTPORT (MOUNT v3), which run.sh forwards
# to host 127.0.0.1. port= and mountport= (with mountproto=tcp) are given, so
# neither mount.nfs nor the kernel asks a portmapper; nolock because the
# server has no NLM.
# With RPCBIND=1 a last phase mounts again with neither port= nor mountport=,
# so mount.nfs and the kernel ask the server's rpcbind on $HOST_IP:111 (the
# host maps that to `nfsrdma serve --rpcbind-port`) for MOUNT and NFS.
#
# Prints one "PASS <check>" or "FAIL <check>: why" line per check and exits 1
# if any check failed. Files written: mountstats.txt, summary.txt.
# Handshake with the host: before the bulk copy the script creates
# capture-stop in its output dir and waits (up to 20 s) for the host to create
# capture-stopped, so the host's pcap holds every phase but the 100 MiB
# copies; before the rpcbind phase it creates capture2-start and waits for
# capture2-started (second pcap). In the middle it creates restart-server
# and waits for server-restarted: the host restarts `nfsrdma serve` under the
# live mount (same export, new process: new write verifier, empty handle
# cache). RO_PORT/RO_MOUNTPORT name a second server run with --read-only on
# the same directory.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
PORT=${1:-2049}; MPORT=${2:-20048}; RPATH=${3:-/export}; BULK=${4:-100}; RPCBIND=${5:-0}
RO_PORT=${6:-}; RO_MPORT=${7:-}
SRV=$HOST_IP
M=/mnt/h
OPTS="vers=3,proto=tcp,port=$PORT,mountport=$MPORT,mountproto=tcp,nolock"
FAILS=0
pass() { echo "PASS $*"; echo "PASS $*" >> summary.txt; }
fail() { echo "FAIL $*"; echo "FAIL $*" >> summary.txt; FAILS=$((FAILS + 1)); }
check() { # name command... : PASS if the command succeeds
    local name=$1; shift
    if "$@" > check.out 2>&1; then pass "$name"; else fail "$name: $(tail -3 check.out | tr '\n' ' ')"; fi
}
: > summary.txt
do_mount() { timeout 120 mount -t nfs -o "$OPTS" "$SRV:$RPATH" $M; }
remount() { umount $M && sync && echo 3 > /proc/sys/vm/drop_caches && do_mount; }

modprobe nfs
mkdir -p $M
echo "+ mount -t nfs -o $OPTS $SRV:$RPATH $M"
if ! do_mount; then
    fail "mount: mount.nfs failed"
    dmesg | grep -iE 'nfs|rpc' | tail -20
    exit 1
fi
pass "mount ($(grep " $M " /proc/mounts | cut -d' ' -f4))"

# --- listing and attributes
check "ls-root" ls -la $M
check "df-fsstat" df -k $M
check "stat-root" stat $M

# --- small and medium files, byte-exact after a remount (no client cache)
head -c 8388608 /dev/urandom > /tmp/f8m
printf 0123456789 > /tmp/f10
head -c 102400 /dev/urandom > /tmp/f100k
check "write-8MiB" cp /tmp/f8m $M/kp-8m.bin
check "write-10B" cp /tmp/f10 $M/kp-10b.bin
check "write-100KiB" cp /tmp/f100k $M/kp-100k.bin
check "sync" sync
check "remount" remount
check "read-8MiB-byte-exact" cmp /tmp/f8m $M/kp-8m.bin
check "read-10B-byte-exact" cmp /tmp/f10 $M/kp-10b.bin
check "read-100KiB-byte-exact" cmp /tmp/f100k $M/kp-100k.bin
check "size-8MiB" test "$(stat -c %s $M/kp-8m.bin)" = 8388608

# --- partial overwrite, append, truncate (WRITE at offsets, SETATTR size)
sz_ok() { test "$(stat -c %s "$1")" = "$2"; }
check "overwrite-middle" dd if=/tmp/f10 of=$M/kp-100k.bin bs=1 seek=5000 conv=notrunc status=none
dd if=/tmp/f10 of=/tmp/f100k bs=1 seek=5000 conv=notrunc status=none
check "append" sh -c "cat /tmp/f10 >> $M/kp-100k.bin && cat /tmp/f10 >> /tmp/f100k"
check "truncate-grow" sh -c "truncate -s 200000 $M/kp-100k.bin && truncate -s 200000 /tmp/f100k"
check "truncate-shrink" sh -c "truncate -s 7 $M/kp-10b.bin"
check "remount-2" remount
check "read-after-overwrite-byte-exact" cmp /tmp/f100k $M/kp-100k.bin
check "size-after-truncate" sz_ok $M/kp-10b.bin 7
check "content-after-truncate" test "$(cat $M/kp-10b.bin)" = 0123456

# --- namespace operations
check "mkdir" mkdir $M/kp-dir
check "create-50-files" sh -c "for i in \$(seq 1 50); do echo file\$i > $M/kp-dir/f\$i; done"
check "remount-3" remount
check "readdirplus-50-files" test "$(ls -l $M/kp-dir | grep -c '^-')" = 50
check "readdir-names" test "$(ls $M/kp-dir | sort -V | tr '\n' ' ')" = "$(seq -f 'f%g' 1 50 | tr '\n' ' ')"
check "read-file-37" test "$(cat $M/kp-dir/f37)" = file37
check "rename" mv $M/kp-dir/f1 $M/kp-dir/renamed
check "rename-result" sh -c "test -e $M/kp-dir/renamed && ! test -e $M/kp-dir/f1"
check "symlink" ln -s kp-dir/renamed $M/kp-link
check "readlink" test "$(readlink $M/kp-link)" = kp-dir/renamed
check "read-via-symlink" test "$(cat $M/kp-link)" = file1
check "hardlink" ln $M/kp-dir/f2 $M/kp-hard
check "nlink-2" test "$(stat -c %h $M/kp-dir/f2)" = 2
check "chmod" chmod 0600 $M/kp-dir/f3
check "mode-0600" test "$(stat -c %a $M/kp-dir/f3)" = 600
check "chown" chown 1234:5678 $M/kp-dir/f4
check "owner-1234-5678" test "$(stat -c %u:%g $M/kp-dir/f4)" = 1234:5678
check "set-mtime" touch -m -d '2001-02-03 04:05:06 UTC' $M/kp-dir/f5
check "mtime-value" test "$(stat -c %Y $M/kp-dir/f5)" = 981173106
check "mknod-fifo" mkfifo $M/kp-fifo
check "fifo-type" test -p $M/kp-fifo
check "exclusive-create-existing-fails" sh -c "! (set -C; echo x > $M/kp-dir/f6) 2>/dev/null"
check "rmdir-nonempty-fails" sh -c "! rmdir $M/kp-dir 2>/dev/null"
check "remove-tree" rm -rf $M/kp-dir $M/kp-link $M/kp-hard $M/kp-fifo
check "removed" sh -c "! test -e $M/kp-dir"

# --- edge cases: big directories, long names, large offsets, sync/direct I/O
check "mkdir-big" mkdir $M/kp-big
check "create-1000-files" sh -c "cd $M/kp-big && for i in \$(seq 1 1000); do : > file-with-a-fairly-long-name-to-fill-readdir-pages-\$i; done"
check "remount-4" remount
check "readdir-1000" test "$(ls $M/kp-big | wc -l)" = 1000
check "readdirplus-1000" test "$(ls -l $M/kp-big | grep -c '^-')" = 1000
check "rm-rf-1000-while-reading-dir" rm -rf $M/kp-big
check "rm-rf-1000-gone" sh -c "! test -e $M/kp-big"
check "name-255-bytes" touch "$M/$(printf 'n%.0s' $(seq 255))"
check "name-256-bytes-rejected" sh -c "! touch $M/$(printf 'n%.0s' $(seq 256)) 2>/dev/null"
check "remove-255" rm "$M/$(printf 'n%.0s' $(seq 255))"
U=$(printf 'kp-\303\251t\303\251-\346\227\245')
check "utf8-name" sh -c "echo u > '$M/$U' && test \"\$(ls $M | grep -c '^$U\$')\" = 1 && test \"\$(cat '$M/$U')\" = u && rm '$M/$U'"
check "exclusive-create-new" sh -c "set -C; echo new > $M/kp-excl"
check "exclusive-create-mode-size" test "$(stat -c '%a %s' $M/kp-excl)" = "644 4"
check "exclusive-create-mtime-is-now" sh -c "d=\$(( \$(date +%s) - \$(stat -c %Y $M/kp-excl) )); [ \$d -lt 300 ] && [ \$d -gt -300 ]"
check "rename-over-existing" sh -c "echo a > $M/kp-ra && echo b > $M/kp-rb && mv -f $M/kp-ra $M/kp-rb && test \"\$(cat $M/kp-rb)\" = a && ! test -e $M/kp-ra"
check "rename-dir-across" sh -c "mkdir -p $M/kp-d1/sub $M/kp-d2 && echo z > $M/kp-d1/sub/z && mv $M/kp-d1/sub $M/kp-d2/ && test \"\$(cat $M/kp-d2/sub/z)\" = z"
check "deep-tree" sh -c "mkdir -p $M/kp-deep/$(seq -s/ 1 20) && echo deep > $M/kp-deep/$(seq -s/ 1 20)/f"
check "remount-5" remount
check "deep-tree-read" test "$(cat $M/kp-deep/$(seq -s/ 1 20)/f)" = deep
check "sparse-5GB-offset" dd if=/tmp/f10 of=$M/kp-sparse bs=1 seek=5000000000 conv=notrunc status=none
check "sparse-size" test "$(stat -c %s $M/kp-sparse)" = 5000000010
check "sparse-tail" test "$(tail -c 10 $M/kp-sparse)" = 0123456789
check "sparse-hole-zero" test "$(dd if=$M/kp-sparse bs=4096 skip=600000 count=1 status=none | tr -d '\000' | wc -c)" = 0
check "cp-preserve" sh -c "touch -d '2010-01-01 00:00:00 UTC' /tmp/f10 && chmod 0640 /tmp/f10 && cp -p /tmp/f10 $M/kp-cpp && test \"\$(stat -c '%a %Y' $M/kp-cpp)\" = '640 1262304000'"
check "atime-set" sh -c "touch -a -d '2005-05-05 05:05:05 UTC' $M/kp-cpp && test \"\$(stat -c %X $M/kp-cpp)\" = 1115269505"
check "write-oflag-sync" dd if=/tmp/f8m of=$M/kp-sync bs=64k count=32 oflag=sync status=none
check "write-oflag-direct" dd if=/tmp/f8m of=$M/kp-direct bs=64k count=32 oflag=direct status=none
check "read-iflag-direct" sh -c "dd if=$M/kp-direct bs=64k iflag=direct status=none | cmp - $M/kp-sync"
check "parallel-writers" sh -c "for i in 1 2 3 4 5 6; do dd if=/tmp/f8m of=$M/kp-par\$i bs=256k skip=\$i count=8 status=none & done; wait"
check "remount-6" remount
check "parallel-byte-exact" sh -c "for i in 1 2 3 4 5 6; do dd if=/tmp/f8m bs=256k skip=\$i count=8 status=none | cmp - $M/kp-par\$i || exit 1; done"
check "truncate-to-zero" sh -c ": > $M/kp-sync && test \"\$(stat -c %s $M/kp-sync)\" = 0"
check "statfs" sh -c "stat -f -c '%b %a %c' $M | awk '{exit !(\$1 > 0 && \$2 <= \$1)}'"
check "remove-edge-files" rm -rf $M/kp-excl $M/kp-rb $M/kp-d1 $M/kp-d2 $M/kp-deep $M/kp-sparse $M/kp-cpp $M/kp-sync $M/kp-direct $M/kp-par1 $M/kp-par2 $M/kp-par3 $M/kp-par4 $M/kp-par5 $M/kp-par6
check "root-empty-but-test-files" test "$(ls -A $M | sort | tr '\n' ' ')" = "kp-100k.bin kp-10b.bin kp-8m.bin "

# --- AUTH_SYS identities: the server checks mode bits for the caller's uid
as1000() { setpriv --reuid 1000 --regid 1000 --clear-groups "$@"; }
check "uid1000-create-in-0777-root" as1000 sh -c "echo mine > $M/kp-u1000"
check "uid1000-owns-new-file" test "$(stat -c %u:%g $M/kp-u1000)" = 1000:1000
check "root-private-dir-0700" sh -c "mkdir -m 0700 $M/kp-private && echo secret > $M/kp-private/s && chmod 0600 $M/kp-private/s"
check "uid1000-denied-in-0700-dir" sh -c "! setpriv --reuid 1000 --regid 1000 --clear-groups touch $M/kp-private/x 2>/dev/null"
check "uid1000-denied-reading-0600" sh -c "chmod 0755 $M/kp-private && ! setpriv --reuid 1000 --regid 1000 --clear-groups cat $M/kp-private/s 2>/dev/null"
check "uid1000-cannot-chown" sh -c "! setpriv --reuid 1000 --regid 1000 --clear-groups chown 0 $M/kp-u1000 2>/dev/null"
check "uid1000-can-chmod-own" as1000 chmod 0640 $M/kp-u1000
check "remove-identity-files" rm -rf $M/kp-u1000 $M/kp-private

# --- MOUNT of a subdirectory of the export
check "subdir-prepare" sh -c "mkdir -p $M/kp-sub/inner && echo sub > $M/kp-sub/inner/f && sync"
S=/mnt/sub; mkdir -p $S
check "subdir-mount" timeout 120 mount -t nfs -o "$OPTS" "$SRV:$RPATH/kp-sub" $S
check "subdir-read" test "$(cat $S/inner/f 2>&1)" = sub
check "subdir-umount" umount $S
check "subdir-missing-refused" sh -c "! timeout 60 mount -t nfs -o $OPTS,retry=0 $SRV:$RPATH/kp-no-such $S 2>/dev/null"
check "subdir-cleanup" rm -rf $M/kp-sub

# --- the read-only export (a second server, `serve --read-only`)
if [ -n "$RO_PORT" ]; then
    R=/mnt/ro; mkdir -p $R
    check "ro-mount" timeout 120 mount -t nfs -o "vers=3,proto=tcp,port=$RO_PORT,mountport=$RO_MPORT,mountproto=tcp,nolock" "$SRV:$RPATH" $R
    check "ro-read" test "$(cat $R/kp-10b.bin)" = 0123456
    check "ro-write-refused-erofs" sh -c "! sh -c 'echo x > $R/kp-ro-new' 2> ro.err && grep -q 'Read-only file system' ro.err"
    check "ro-remove-refused" sh -c "! rm -f $R/kp-10b.bin 2>/dev/null && test -e $M/kp-10b.bin"
    check "ro-umount" umount $R
fi

# --- server restart under a live mount: handles must stay valid
check "restart-prepare" sh -c "mkdir -p $M/kp-rs && echo before > $M/kp-rs/f && sync"
exec 7< $M/kp-rs/f   # an open file: its handle must survive the restart
touch restart-server
for _ in $(seq 300); do [ -e server-restarted ] && break; sleep 0.1; done
check "server-restarted" test -e server-restarted
echo 3 > /proc/sys/vm/drop_caches
check "restart-read-open-file" test "$(cat <&7)" = before
check "restart-read-by-path" test "$(cat $M/kp-rs/f)" = before
check "restart-listdir" test "$(ls $M/kp-rs)" = f
check "restart-write" sh -c "echo after >> $M/kp-rs/f && sync && test \"\$(cat $M/kp-rs/f)\" = \"\$(printf 'before\nafter')\""
exec 7<&-
check "restart-cleanup" rm -rf $M/kp-rs

# --- stop the host capture before the bulk copies (see header)
touch capture-stop
for _ in $(seq 200); do [ -e capture-stopped ] && break; sleep 0.1; done

# --- bulk copy both ways
head -c $((BULK * 1048576)) /dev/urandom > /tmp/bulk
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(now)
check "bulk-write-${BULK}MiB" sh -c "cp /tmp/bulk $M/kp-bulk.bin && sync"
t1=$(now)
check "remount-bulk" remount
t2=$(now)
check "bulk-read-${BULK}MiB" cp $M/kp-bulk.bin /tmp/bulk.back
t3=$(now)
check "bulk-byte-exact" cmp /tmp/bulk /tmp/bulk.back
rate() { awk -v a="$1" -v b="$2" -v m="$BULK" 'BEGIN{printf "%.1f", m*1.048576/(b-a)}'; }
echo "INFO bulk write ${BULK} MiB: $(rate "$t0" "$t1") MB/s; read: $(rate "$t2" "$t3") MB/s" | tee -a summary.txt
rm -f /tmp/bulk /tmp/bulk.back

# --- mountstats: the transport line and per-op counters
awk -v m=" $M " 'index($0, "mounted on" m) {p=1} p && /^device / && !index($0, "mounted on" m) {p=0} p' \
    /proc/self/mountstats > mountstats.txt
grep -m1 'xprt:' mountstats.txt | sed 's/^/INFO mountstats /'
# per-op lines: "OP: ops trans timeouts bytes_sent bytes_recv queue rtt execute [errors]"
awk '/^[[:space:]]*[A-Z_]+: [0-9]/ {op=$1; if ($2 > 0) printf "INFO op %s ops=%s trans=%s timeouts=%s errors=%s\n", op, $2, $3, $4, ($10==""?"-":$10)}' mountstats.txt
check "mountstats-xprt-tcp" grep -q 'xprt:[[:space:]]*tcp' mountstats.txt
check "no-retransmissions-or-timeouts" awk '/^[[:space:]]*[A-Z_]+: [0-9]/ {if ($3 > $2 || $4 > 0) bad=1} END {exit bad}' mountstats.txt

check "cleanup" rm -f $M/kp-8m.bin $M/kp-10b.bin $M/kp-100k.bin $M/kp-bulk.bin
check "umount" umount $M

# --- ports from the server's rpcbind (GETADDR/GETPORT over TCP)
if [ "$RPCBIND" = 1 ]; then
    touch capture2-start   # the host captures this phase into a second pcap
    for _ in $(seq 200); do [ -e capture2-started ] && break; sleep 0.1; done
    echo "+ mount -t nfs -o vers=3,proto=tcp,nolock $SRV:$RPATH $M"
    if timeout 120 mount -t nfs -o vers=3,proto=tcp,nolock "$SRV:$RPATH" $M; then
        pass "rpcbind-mount ($(grep " $M " /proc/mounts | cut -d' ' -f4 | grep -o 'port=[0-9]*,.*mountport=[0-9]*'))"
        check "rpcbind-write-read" sh -c "cp /tmp/f8m $M/kp-rpcb && cmp /tmp/f8m $M/kp-rpcb && rm $M/kp-rpcb"
        check "rpcbind-umount" umount $M
    else
        fail "rpcbind-mount: mount.nfs failed"
    fi
fi
dmesg | grep -iE 'nfs:|rpc|server .* not responding' | tail -10 | sed 's/^/INFO dmesg /'
echo "RESULT: $FAILS failed"
[ "$FAILS" -eq 0 ]
