#!/bin/bash
# verbs.sh DEV [BULK_MIB] [VERSIONS...] — issue 13, run by scripts/interop.sh
# (PHASES=verbs), one VM boot per device: DEV is siw0 (soft-iWARP) or rxe0
# (soft-RoCE), both on eth0 (only one per boot: rdma_cm binds 10.0.2.15 to
# one device, and two on one netdev make the choice arbitrary).
#
# Inside the guest, with the host-built nfsrdma at $KPEER_OUT/bin/nfsrdma:
#   - `nfsrdma devices` lists DEV;
#   - `nfsrdma serve --rdma-device DEV` (our server on the kernel's verbs,
#     the verbs crate) on 10.0.2.15:20050; the kernel NFS client mounts it
#     over RDMA (proto=rdma, in-guest loopback through DEV) with NFSv3 and
#     NFSv4.1: listing, 10 B / 100 KiB / 8 MiB files byte-exact after a
#     remount, 50 files listed, BULK_MIB both ways byte-exact, mountstats
#     `xprt: rdma` with read, write and reply chunks used;
#   - knfsd (rdma 20049): `nfsrdma cp` and `ls` with `?device=DEV` (our
#     client on verbs) write and read back a BULK_MIB file byte-exact;
#   - perftest on DEV (ib_write_bw, ib_read_bw, ib_send_lat) for the
#     device's own ceiling, as INFO lines;
#   - cross-device, when the host wrote $KPEER_OUT/xdev (iWARP devices): the
#     host's softrnic client against this server on DEV, and this client on
#     DEV against the host's `nfsrdma serve` on softrnic, with the file the
#     host put in $KPEER_OUT/xdev-src.bin.
# Prints PASS/FAIL/INFO lines; exits 1 if any check failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
DEV=${1:-siw0}; BULK=${2:-100}; shift 2 2>/dev/null
VERSIONS=${*:-3 4.1}
IP=$GUEST_IP
M=/mnt/ours
FAILS=0
V=$DEV
pass() { echo "PASS $V/$*"; }
fail() { echo "FAIL $V/$*"; FAILS=$((FAILS + 1)); }
within() { # seconds command... : run it, killed after the time (hard NFS mounts hang)
    local t=$1; shift
    ( "$@" ) & local p=$!
    ( sleep "$t"; kill -9 "$p" 2>/dev/null ) & local w=$!
    wait "$p"; local rc=$?
    kill "$w" 2>/dev/null; wait "$w" 2>/dev/null
    return $rc
}
check() { # name command... : PASS if the command succeeds within 240 s
    local name=$1; shift
    if within 240 "$@" > check.out 2>&1; then pass "$name"; else
        fail "$name: $(tail -3 check.out | tr '\n' ' ')"
        [ "$FAILS" = 1 ] && dmesg | tail -15 | sed 's/^/INFO dmesg: /'
    fi
}

case $DEV in
    siw*) setup_siw > dev-setup.txt 2>&1 ;;
    rxe*) setup_rxe "$DEV" > dev-setup.txt 2>&1 ;;
    *) echo "FAIL unknown device $DEV"; exit 1 ;;
esac || { cat dev-setup.txt; echo "FAIL $DEV setup"; exit 1; }
modprobe rpcrdma; modprobe nfs; modprobe nfsv4 2>/dev/null
install -m 0755 "$KPEER_OUT/bin/nfsrdma" /usr/local/bin/nfsrdma || { echo "FAIL no nfsrdma binary"; exit 1; }

check "devices-lists-$DEV" sh -c "nfsrdma devices | tee devices.txt | grep -q '^$DEV '"
sed 's/^/INFO devices: /' devices.txt

# perftest first (nothing else running): the device's own ceiling.
perf() { # name tool args...
    local name=$1; shift
    "$@" -d "$DEV" -F -R > "perf-$name-srv.txt" 2>&1 &
    local srv=$!
    sleep 2
    timeout 120 "$@" -d "$DEV" -F -R "$IP" > "perf-$name.txt" 2>&1
    local rc=$?
    wait "$srv"
    if [ $rc = 0 ]; then
        # the last numeric line: bytes iterations peak avg (MB/s or usec)
        echo "INFO perftest $name: $(grep -E '^ *[0-9]+ +[0-9]+' "perf-$name.txt" | tail -1 | tr -s ' ')"
    else
        echo "INFO perftest $name failed (rc $rc): $(tail -2 "perf-$name.txt" | tr '\n' ' ')"
    fi
}
if [ ! -e "$KPEER_OUT/noperf" ]; then
    perf write_bw ib_write_bw -s 1048576 -n 200
    perf read_bw ib_read_bw -s 1048576 -n 200
    perf send_lat ib_send_lat -s 64 -n 1000
fi

head -c 8388608 /dev/urandom > /tmp/f8m
printf 0123456789 > /tmp/f10
head -c 102400 /dev/urandom > /tmp/f100k
head -c $((BULK * 1048576)) /dev/urandom > /tmp/bulk

# ---- our server on DEV, the kernel client ------------------------------
mkdir -p /srv/ours $M
mount -t tmpfs -o size=$((BULK * 3 + 200))m tmpfs /srv/ours
RUST_LOG=info,verbs=debug nfsrdma serve /srv/ours --addr "$IP" --rdma-device "$DEV" \
    --port 2050 --rdma-port 20050 --mount-port 20058 --no-root-squash \
    --allow 10.0.2.0/24 --state-dir /tmp/ours-state > server.log 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q '^serving' server.log && break; sleep 0.2; done
check "serve-on-$DEV" grep -q "nfs over rdma $IP:20050" server.log
grep -m1 'RDMA device' server.log | sed 's/^/INFO server: /'

for v in $VERSIONS; do
    V=$DEV/ours-v$v
    if [ "$v" = 3 ]; then
        OPTS="vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock"; P=/srv/ours
    else
        OPTS="vers=$v,proto=rdma,port=20050"; P=/srv/ours  # the export at its path (pseudo root at /)
    fi
    do_mount() { timeout 120 mount -t nfs -o "$OPTS" "$IP:$P" $M; }
    remount() { umount $M && sync && echo 3 > /proc/sys/vm/drop_caches && do_mount; }
    if ! do_mount; then
        fail "mount: mount.nfs failed"
        dmesg | grep -iE 'nfs|rpc|siw|rxe' | tail -10 | sed 's/^/INFO dmesg: /'
        continue
    fi
    pass "mount ($(grep " $M " /proc/mounts | cut -d' ' -f4))"
    D=$M/v$v
    rm -rf "$D"
    check "mkdir" mkdir "$D"
    check "ls-root" ls -la $M
    check "write-8MiB" cp /tmp/f8m "$D/f8m.bin"
    check "write-10B" cp /tmp/f10 "$D/f10.bin"
    check "write-100KiB" cp /tmp/f100k "$D/f100k.bin"
    check "create-50-files" sh -c "mkdir $D/many && for i in \$(seq 1 50); do echo \$i > $D/many/file-\$i; done"
    check "sync" sync
    check "remount" remount
    check "read-8MiB-byte-exact" cmp /tmp/f8m "$D/f8m.bin"
    check "read-10B-byte-exact" cmp /tmp/f10 "$D/f10.bin"
    check "read-100KiB-byte-exact" cmp /tmp/f100k "$D/f100k.bin"
    check "listing-50" sh -c "ls -l $D/many > ls.out && test \$(grep -c file- ls.out) = 50"
    check "server-has-bytes" cmp /tmp/f8m "/srv/ours/v$v/f8m.bin"
    t0=$(date +%s.%N)
    check "bulk-${BULK}MiB-to-server" sh -c "cp /tmp/bulk $D/bulk.bin && sync"
    t1=$(date +%s.%N)
    # The bulk write ran on this mount: read chunks (server RDMA Reads).
    # "xprt: rdma port bind conn conn_time idle sends recvs bad_xids req_u
    # bklog_u read_chunk write_chunk reply_chunk ...": fields $13 $14 $15.
    st=$(grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:')
    echo "INFO $V mountstats after write $st"
    check "mountstats-xprt-rdma" sh -c "echo '$st' | awk '{exit !(\$2 == \"rdma\")}'"
    check "read-chunks-used" sh -c "echo '$st' | awk '{exit !(\$13 > 0)}'"
    check "remount-2" remount
    t2=$(date +%s.%N)
    check "bulk-${BULK}MiB-from-server" cp "$D/bulk.bin" /tmp/bulk.back
    t3=$(date +%s.%N)
    check "bulk-byte-exact" cmp /tmp/bulk /tmp/bulk.back
    rm -f /tmp/bulk.back
    echo "INFO $V bulk ${BULK} MiB write $(awk "BEGIN{printf \"%.1f\", $t1-$t0}") s, read $(awk "BEGIN{printf \"%.1f\", $t3-$t2}") s (emulated CPU)"
    # The bulk read ran on this mount: write chunks (server RDMA Writes).
    st=$(grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:')
    echo "INFO $V mountstats after read $st"
    check "write-chunks-used" sh -c "echo '$st' | awk '{exit !(\$14 > 0)}'"
    check "rm-rf" rm -rf "$D"
    check "umount" umount $M
done
# ---- cross-device, reverse: the host's softrnic client -> this server ----
# With $KPEER_OUT/xdev (written by scripts/interop.sh for iWARP devices),
# the host's `nfsrdma cp` on softrnic reaches this server through run.sh's
# hostfwd (host 127.0.0.1 -> 10.0.2.15:20050 and :20058); the host records
# its own checks in xdev-host.txt and touches xdev-done. Here: the server's
# copy of the host's file is byte-exact.
V=$DEV/xdev-softrnic-client
if [ -e "$KPEER_OUT/xdev" ] && kill -0 "$SRV" 2>/dev/null; then
    touch "$KPEER_OUT/xdev-ready"
    for _ in $(seq 600); do [ -e "$KPEER_OUT/xdev-done" ] && break; sleep 0.5; done
    if [ -e "$KPEER_OUT/xdev-done" ]; then
        check "server-has-host-bytes" cmp "$KPEER_OUT/xdev-src.bin" /srv/ours/xdev-from-host.bin
    else
        fail "host-client: the host did not finish within 300 s"
    fi
fi
V=$DEV
if kill -0 "$SRV" 2>/dev/null; then pass "server-alive"; else fail "server-alive: exited"; fi
grep -iE 'panic|error|warn' server.log | head -8 | sed 's/^/INFO server: /'
kill -INT "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

# ---- knfsd, our client on DEV ---------------------------------------------
V=$DEV/knfsd
if start_nfsd > nfsd.txt 2>&1; then
    wait_grace 2
    URL="nfs+rdma://$IP/export/ours-$DEV.bin?device=$DEV"
    t0=$(date +%s.%N)
    check "cp-${BULK}MiB-to-knfsd" timeout 600 nfsrdma cp /tmp/bulk "$URL"
    t1=$(date +%s.%N)
    check "knfsd-has-bytes" cmp /tmp/bulk "/export/ours-$DEV.bin"
    t2=$(date +%s.%N)
    check "cp-${BULK}MiB-from-knfsd" timeout 600 nfsrdma cp "$URL" /tmp/bulk.back
    t3=$(date +%s.%N)
    check "from-knfsd-byte-exact" cmp /tmp/bulk /tmp/bulk.back
    check "ls-knfsd" sh -c "nfsrdma ls 'nfs+rdma://$IP/export/?device=$DEV' | grep -q ours-$DEV.bin"
    echo "INFO $V nfsrdma cp ${BULK} MiB write $(awk "BEGIN{printf \"%.1f\", $t1-$t0}") s, read $(awk "BEGIN{printf \"%.1f\", $t3-$t2}") s (emulated CPU)"
else
    fail "knfsd-start: $(tail -3 nfsd.txt | tr '\n' ' ')"
fi

# ---- cross-device, forward: this client on DEV -> softrnic on the host ----
# nfs+rdma://$HOST_IP (10.0.2.100) is run.sh's guestfwd to the host's
# `nfsrdma serve --rdma-device soft` (MOUNT on :20048), export /export.
if [ -e "$KPEER_OUT/xdev" ]; then
    V=$DEV/xdev-softrnic-server
    H="nfs+rdma://$HOST_IP/export"
    Q="device=$DEV&mountport=20048"
    check "ls" nfsrdma ls "$H/?$Q"
    check "cp-to-host" timeout 300 nfsrdma cp "$KPEER_OUT/xdev-src.bin" "$H/xdev-from-guest.bin?$Q"
    check "cp-from-host-byte-exact" sh -c "timeout 300 nfsrdma cp '$H/xdev-from-guest.bin?$Q' /tmp/xdev.back && cmp '$KPEER_OUT/xdev-src.bin' /tmp/xdev.back"
    rm -f /tmp/xdev.back
    check "v4.1-read-byte-exact" sh -c "timeout 300 nfsrdma cp '$H/xdev-from-guest.bin?device=$DEV&version=4.1' /tmp/xdev.back && cmp '$KPEER_OUT/xdev-src.bin' /tmp/xdev.back"
    rm -f /tmp/xdev.back
fi

echo "INFO $FAILS failed"
[ "$FAILS" -eq 0 ]
