#!/bin/bash
# interop/guest/conformance.sh EXPORT STATD_PORT LOCKD_PORT [PROTOS...]
# Runs INSIDE the kpeer guest (via interop/kpeer/run.sh, started by
# scripts/interop.sh, phase "conformance"; issue 14 item 8). The Linux
# kernel client against `nfsrdma serve` on the host, for each transport of
# PROTOS (default "tcp rdma"; tcp: guest $HOST_IP:2049, rdma: guest siw0 ->
# $HOST_IP:20049, the host's softrnic; MOUNT on :20048; the server's rpcbind
# on :111):
#   v4.0 and v4.2 mounts of EXPORT by its path on the server (the NFSv4
#       pseudo file system): listing, a 1 MiB and a 10-byte file byte-exact
#       after a remount;
#   v4.2: user.* extended attributes set, read, listed, replaced and removed
#       through the mount (RFC 8276; python3's os.*xattr: the image has no
#       attr package, the system calls are the same), kept across a remount;
#       copy_file_range within the mount (python3 os.copy_file_range) turned
#       into COPY (RFC 7862 §15.2): the copy is byte-exact and the mount's
#       mountstats count COPY calls without errors (the host also checks the
#       server's own COPY counter);
#   v3 WITHOUT nolock: mount.nfs and the kernel's lockd find NLM through the
#       server's rpcbind (host `serve --rpcbind-port`, guest :111); rpc.statd
#       and rpcbind run in the guest. A process holds an fcntl lock
#       (python3 fcntl.lockf, F_SETLK) on a file; a process on a second
#       mount of the same export, NFSv4.2, cannot lock the same range
#       (NLM lock vs NFSv4 LOCK, NFS4ERR_DENIED); after the v3 holder
#       releases, the v4 process gets it; while the v4 process holds it the
#       v3 process is refused (NLM4_DENIED), and gets it after the release.
#       A blocking fcntl lock (F_SETLKW) on the v3 mount waits while a v3
#       and then a v4.2 process holds the range, and is granted by the
#       server's GRANTED call (to lockd on LOCKD_PORT) once it is released.
#       Then the host restarts the server (restart-server-N in the output
#       dir; it answers with server-restarted-N) while each mount holds a
#       lock: the v3 one is reclaimed after the server's SM_NOTIFY (reaching
#       this statd on STATD_PORT through a host forward), the v4.2 one in
#       the NFSv4 grace period; each mount is refused the other's lock
#       after the restart and gets it after the release.
# Prints one "PASS <proto>/<vers>/<check>" or "FAIL ...: why" line per check,
# "INFO" lines with mountstats, and exits 1 if any check failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
EXPORT=${1:?export path}; STATD_PORT=${2:?statd port}; LOCKD_PORT=${3:?lockd port}; shift 3
PROTOS=${*:-tcp rdma}
RS=0
SRV=$HOST_IP
FAILS=0
TAG=
pass() { echo "PASS $TAG/$*"; }
fail() { echo "FAIL $TAG/$*"; FAILS=$((FAILS + 1)); }
check() { # name command... : PASS if the command succeeds
    local name=$1; shift
    if "$@" > check.out 2>&1; then pass "$name"; else fail "$name: $(tail -3 check.out | tr '\n' ' ')"; fi
}
expect() { # name want command... : PASS if the command prints want
    local name=$1 want=$2 got; shift 2
    got=$("$@" 2>&1 | tail -1)
    if [ "$got" = "$want" ]; then pass "$name ($got)"; else fail "$name: want '$want', got '$got'"; fi
}

# lk try|wait|hold PATH [RELEASE_FILE]: an exclusive fcntl (POSIX) lock on
# bytes 0-99 of PATH. try: prints "got" (and unlocks) or "busy". wait: the
# same, blocking (F_SETLKW) until it gets it. hold: takes it,
# creates RELEASE_FILE.held, waits for RELEASE_FILE, unlocks, prints
# "released".
cat > /tmp/lk.py <<'EOF'
import errno, fcntl, os, sys, time
mode, path = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if mode == "try":
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
    except OSError as e:
        print("busy" if e.errno in (errno.EAGAIN, errno.EACCES) else "error " + errno.errorcode.get(e.errno, str(e.errno)))
        sys.exit(0)
    fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
    print("got")
elif mode == "wait":
    t = time.time()
    fcntl.lockf(fd, fcntl.LOCK_EX, 100, 0)
    print("waited %.1f s" % (time.time() - t), file=sys.stderr)
    fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
    print("got")
else:
    rel = sys.argv[3]
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
    except OSError as e:
        open(rel + ".failed", "w").write(str(e))
        sys.exit(1)
    open(rel + ".held", "w").close()
    for _ in range(3000):
        if os.path.exists(rel):
            break
        time.sleep(0.1)
    fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
    print("released")
EOF
lk() { python3 /tmp/lk.py "$@"; }
# hold_lock PATH NAME: starts a holder in the background; 0 once it holds
hold_lock() {
    rm -f "/tmp/$2" "/tmp/$2.held" "/tmp/$2.failed"
    lk hold "$1" "/tmp/$2" > "/tmp/$2.out" 2>&1 &
    for _ in $(seq 300); do
        [ -e "/tmp/$2.held" ] && return 0
        [ -e "/tmp/$2.failed" ] && { cat "/tmp/$2.failed"; return 1; }
        sleep 0.1
    done
    echo "holder did not take the lock: $(cat "/tmp/$2.out")"; return 1
}
# release_lock NAME: tells the holder to unlock; 0 once it did
release_lock() {
    touch "/tmp/$1"
    for _ in $(seq 100); do grep -q released "/tmp/$1.out" 2>/dev/null && return 0; sleep 0.1; done
    echo "holder did not release: $(cat "/tmp/$1.out")"; return 1
}
xattrs() { # PATH: set, get, list, replace, remove user.* attributes
    python3 - "$1" <<'EOF'
import errno, os, sys
p = sys.argv[1]
os.setxattr(p, "user.kpeer", b"value-1")
os.setxattr(p, "user.other", b"x" * 300)
assert os.getxattr(p, "user.kpeer") == b"value-1", os.getxattr(p, "user.kpeer")
names = sorted(os.listxattr(p))
assert names == ["user.kpeer", "user.other"], names
os.setxattr(p, "user.kpeer", b"value-2", os.XATTR_REPLACE)
try:
    os.setxattr(p, "user.kpeer", b"v", os.XATTR_CREATE)
    raise SystemExit("XATTR_CREATE of an existing name succeeded")
except OSError as e:
    assert e.errno == errno.EEXIST, e
os.removexattr(p, "user.other")
try:
    os.getxattr(p, "user.other")
    raise SystemExit("removed attribute still there")
except OSError as e:
    assert e.errno == errno.ENODATA, e
print("ok")
EOF
}
copy_range() { # SRC DST: copy_file_range of the whole SRC into DST
    python3 - "$1" "$2" <<'EOF'
import os, sys
src = os.open(sys.argv[1], os.O_RDONLY)
dst = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left = os.fstat(src).st_size
while left:
    n = os.copy_file_range(src, dst, left)
    if n == 0:
        raise SystemExit("copy_file_range returned 0 with %d bytes left" % left)
    left -= n
os.close(dst)
print("ok")
EOF
}
# opstat MNT OP: "ops errors" of OP from the mount's mountstats
opstat() {
    grep -A300 " mounted on $1 " /proc/self/mountstats | awk -v op="$2:" '$1 == op {print $2, ($10 == "" ? 0 : $10); exit}'
}

modprobe nfs; modprobe nfsv3; modprobe nfsv4 2>/dev/null
if [[ " $PROTOS " == *" rdma "* ]]; then
    if ! setup_siw > siw-setup.txt 2>&1; then
        cat siw-setup.txt; echo "FAIL siw setup"; exit 1
    fi
    modprobe rpcrdma
fi
# NLM on the client side: the kernel's lockd registers with the local
# rpcbind, and rpc.statd monitors the server (mount.nfs refuses a v3 mount
# without nolock when statd is not running).
mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak
# The kernel's lockd on a fixed TCP port, forwarded from the host, so that
# the server's GRANTED calls for blocked locks reach it. The client's lockd
# takes GRANTED only from the address it sent the LOCK to ($SRV), while the
# host's connections arrive from slirp's 10.0.2.2: a stateless NAT on eth0
# (tc act_nat) makes those to the lockd port come from $SRV, and their
# replies go back to 10.0.2.2.
modprobe lockd 2>/dev/null
echo "$LOCKD_PORT" > /proc/sys/fs/nfs/nlm_tcpport
if modprobe -a sch_ingress cls_flower act_nat 2>/dev/null &&
    tc qdisc add dev eth0 clsact &&
    tc filter add dev eth0 ingress protocol ip flower ip_proto tcp src_ip "$SLIRP_HOST_IP" dst_port "$LOCKD_PORT" \
        action nat egress "$SLIRP_HOST_IP/32" "$SRV" &&
    tc filter add dev eth0 egress protocol ip flower ip_proto tcp dst_ip "$SRV" src_port "$LOCKD_PORT" \
        action nat ingress "$SRV/32" "$SLIRP_HOST_IP"; then
    echo "INFO lockd on :$LOCKD_PORT, host connections to it NATed to come from $SRV"
else
    echo "INFO tc NAT for lockd not set up: GRANTED calls will be refused (the client polls every 30 s)"
fi
pidof rpcbind > /dev/null || rpcbind -w
# statd on a fixed port, forwarded from the host, so that the server's
# SM_NOTIFY after its restart reaches it (host -> guest :111 -> this port).
pidof rpc.statd > /dev/null || rpc.statd --no-notify --port "$STATD_PORT"
sleep 0.5
if pidof rpc.statd > /dev/null; then echo "PASS statd-running ($(rpcinfo -p 127.0.0.1 | grep -c status) registrations)"; else echo "FAIL statd-running"; FAILS=$((FAILS + 1)); fi

head -c 1048576 /dev/urandom > /tmp/f1m
printf 0123456789 > /tmp/f10
head -c 3000000 /dev/urandom > /tmp/fcopy
M=/mnt/c; M2=/mnt/c2
mkdir -p $M $M2

for P in $PROTOS; do
    if [ "$P" = rdma ]; then PORT=20049; else PORT=2049; fi
    for V in 4.0 4.2; do
        TAG=$P/v$V
        OPTS="vers=$V,proto=$P,port=$PORT"
        do_mount() { timeout 120 mount -t nfs -o "$OPTS" "$SRV:$EXPORT" $M; }
        remount() { umount $M && sync && echo 3 > /proc/sys/vm/drop_caches && do_mount; }
        echo "+ mount -t nfs -o $OPTS $SRV:$EXPORT $M"
        if ! do_mount; then
            fail "mount-by-path: mount.nfs failed"
            dmesg | grep -iE 'nfs|rpc|siw' | tail -10
            continue
        fi
        pass "mount-by-path ($(grep " $M " /proc/mounts | cut -d' ' -f4 | cut -c1-60))"
        check "listing" sh -c "ls -la $M | grep -q ' marker\$'"
        D=$M/c-$P-v$V
        rm -rf "$D"
        check "mkdir" mkdir "$D"
        check "write-1MiB" cp /tmp/f1m "$D/f1m"
        check "write-10B" cp /tmp/f10 "$D/f10"
        if [ "$V" = 4.2 ]; then
            touch "$D/x"
            expect "xattrs-set-get-list-replace-remove" ok xattrs "$D/x"
            check "write-3MB" cp /tmp/fcopy "$D/src"
        fi
        check "remount" remount
        check "read-1MiB-byte-exact" cmp /tmp/f1m "$D/f1m"
        check "read-10B-byte-exact" cmp /tmp/f10 "$D/f10"
        check "listing-after-remount" sh -c "test \"\$(ls $D | tr '\n' ' ')\" = '$( [ "$V" = 4.2 ] && echo 'f10 f1m src x ' || echo 'f10 f1m ')'"
        if [ "$V" = 4.2 ]; then
            expect "xattr-kept-across-remount" "b'value-2'" python3 -c "import os; print(os.getxattr('$D/x', 'user.kpeer'))"
            before=$(opstat $M COPY)
            expect "copy_file_range" ok copy_range "$D/src" "$D/dst"
            after=$(opstat $M COPY)
            echo "INFO $TAG mountstats COPY (ops errors) before: ${before:-none}, after: ${after:-none}"
            check "copy-is-COPY (mountstats COPY ops up, no errors)" sh -c "test -n '$after' && test \"\$(echo $after | cut -d' ' -f1)\" -gt \"\$(echo ${before:-0 0} | cut -d' ' -f1)\" && test \"\$(echo $after | cut -d' ' -f2)\" = 0"
            check "remount-2" remount
            check "copy-byte-exact" cmp /tmp/fcopy "$D/dst"
        fi
        check "rm-rf" rm -rf "$D"
        check "umount" umount $M
        echo "INFO $TAG done at ${SECONDS} s"
    done

    # NFSv3 without nolock: NLM through the server's rpcbind; locks against
    # a second (NFSv4.2) mount of the same export.
    TAG=$P/v3-nlm
    OPTS3="vers=3,proto=$P,port=$PORT,mountport=20048,mountproto=tcp"
    echo "+ mount -t nfs -o $OPTS3 $SRV:$EXPORT $M"
    if ! timeout 120 mount -t nfs -o "$OPTS3" "$SRV:$EXPORT" $M; then
        fail "mount-without-nolock: mount.nfs failed"
        dmesg | grep -iE 'nfs|rpc|lockd|statd' | tail -10
        continue
    fi
    pass "mount-without-nolock ($(grep " $M " /proc/mounts | cut -d' ' -f4 | grep -o 'vers=3.*' | cut -c1-60))"
    if grep " $M " /proc/mounts | grep -q nolock; then fail "lock-option: mounted with nolock"; fi
    check "mount-v4.2-second" timeout 120 mount -t nfs -o "vers=4.2,proto=$P,port=$PORT" "$SRV:$EXPORT" $M2
    F=lk-$P
    check "create-lock-file" sh -c "echo lockme > $M/$F"
    check "v3-lock-held" hold_lock "$M/$F" v3hold
    expect "v4-refused-while-v3-holds" busy lk try "$M2/$F"
    check "v3-lock-released" release_lock v3hold
    expect "v4-gets-it-after-release" got lk try "$M2/$F"
    check "v4-lock-held" hold_lock "$M2/$F" v4hold
    expect "v3-refused-while-v4-holds" busy lk try "$M/$F"
    check "v4-lock-released" release_lock v4hold
    expect "v3-gets-it-after-release" got lk try "$M/$F"
    wait

    # Blocking locks (F_SETLKW) on the v3 mount: the server answers
    # NLM4_BLOCKED, and when the holder (another process on the v3 mount,
    # then one on the v4.2 mount) releases, it takes the lock for the
    # waiter and calls the guest's lockd with GRANTED (XNFS NLM). The wait
    # ends within a few seconds of the release; without the GRANTED call
    # the kernel would find out only at its next poll (30 s).
    for H in "$M" "$M2"; do
        HT=$([ "$H" = "$M" ] && echo v3 || echo v4)
        check "$HT-holder-for-blocking-waiter" hold_lock "$H/$F" bhold
        rm -f /tmp/bwait.out /tmp/bwait.err
        timeout 120 python3 /tmp/lk.py wait "$M/$F" > /tmp/bwait.out 2> /tmp/bwait.err &
        wpid=$!
        sleep 3
        check "v3-F_SETLKW-waits-while-$HT-holds" sh -c "kill -0 $wpid && ! grep -q got /tmp/bwait.out"
        t0=$SECONDS
        check "$HT-holder-released" release_lock bhold
        wait $wpid
        expect "v3-F_SETLKW-granted-after-$HT-release" got cat /tmp/bwait.out
        echo "INFO $TAG blocking lock after a $HT holder: $(tail -1 /tmp/bwait.err) (release to grant: $((SECONDS - t0)) s)"
        check "v3-granted-by-callback-not-poll-after-$HT-release" sh -c "grep -q got /tmp/bwait.out && test $((SECONDS - t0)) -lt 20"
    done

    # A server restart under held locks (issue 14 item 8): the v3 mount's
    # lock comes back through NSM (the restarted server's SM_NOTIFY to this
    # statd, XNFS SM; the kernel's lockd reclaims with `reclaim` set in the
    # NLM grace period), the v4.2 mount's through the NFSv4 grace period
    # (RFC 8881 §8.4.2.1: LOCK with `reclaim`). Each mount then sees the
    # other's lock still held, and gets it once the holder releases.
    RS=$((RS + 1))
    check "create-restart-files" sh -c "echo a > $M/rs3-$P && echo b > $M/rs4-$P"
    check "restart-v3-lock-held" hold_lock "$M/rs3-$P" rs3hold
    check "restart-v4-lock-held" hold_lock "$M2/rs4-$P" rs4hold
    t0=$SECONDS
    touch "restart-server-$RS"
    for _ in $(seq 600); do [ -e "server-restarted-$RS" ] && break; sleep 0.1; done
    check "server-restarted" test -e "server-restarted-$RS"
    t1=$SECONDS
    # The v4.2 mount learns of the restart at its next call (BADSESSION,
    # then STALE_CLIENTID: a new client id, then its reclaims).
    check "v4-call-after-restart" timeout 120 sh -c "echo c > $M2/rs-poke-$P"
    t2=$SECONDS
    expect "v4-refused-v3-lock-reclaimed-via-SM_NOTIFY" busy timeout 120 python3 /tmp/lk.py try "$M2/rs3-$P"
    expect "v3-refused-v4-lock-reclaimed-in-grace" busy timeout 120 python3 /tmp/lk.py try "$M/rs4-$P"
    t3=$SECONDS
    echo "INFO $TAG restart: server back after $((t1 - t0)) s, first v4 call done after $((t2 - t1)) s, both reclaimed locks seen held $((t3 - t1)) s after the restart"
    echo "INFO $TAG statd: $(grep -c . /var/lib/nfs/sm/* 2>/dev/null | tr '\n' ' ')"
    check "restart-v3-lock-released" release_lock rs3hold
    check "restart-v4-lock-released" release_lock rs4hold
    expect "v4-gets-v3-lock-after-release" got timeout 60 python3 /tmp/lk.py try "$M2/rs3-$P"
    expect "v3-gets-v4-lock-after-release" got timeout 60 python3 /tmp/lk.py try "$M/rs4-$P"
    wait
    rm -f "$M/rs3-$P" "$M/rs4-$P" "$M/rs-poke-$P"
    echo "INFO $TAG lockd/statd: $(rpcinfo -p 127.0.0.1 2>/dev/null | awk '$5 ~ /nlockmgr|status/ {print $5"/"$2"/"$3}' | sort -u | tr '\n' ' ')"
    check "rm-lock-file" rm -f "$M/$F"
    check "umount-v4.2-second" umount $M2
    check "umount" umount $M
    echo "INFO $TAG done at ${SECONDS} s"
done
echo "INFO $FAILS failed"
[ "$FAILS" -eq 0 ]
