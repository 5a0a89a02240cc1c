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

for proto in $PROTOS; do
    for vers in $VERSIONS; do
        T="$proto-v$vers"
        say "$T"
        if ! do_mount "$proto" "$vers"; then fail "$T/mount"; continue; fi
        pass "$T/mount"
        d=$M/$T
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
        if ! do_mount "$proto" "$vers"; then fail "$T/remount"; continue; fi
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
        umount "$M"; do_mount "$proto" "$vers" || { fail "$T/remount after truncate"; continue; }
        sz=$(stat -c %s "$d/big")
        if [ "$sz" = 1000 ] && cmp -s <(head -c 1000 /tmp/src/big) "$d/big"; then
            pass "$T/truncate to 1000 bytes"
        else
            fail "$T/truncate: size $sz"
        fi
        # write after the recall: a new layout
        cat /tmp/src/small >> "$d/big" && sync
        umount "$M"; do_mount "$proto" "$vers" || { fail "$T/remount after append"; continue; }
        if cmp -s <(head -c 1000 /tmp/src/big; cat /tmp/src/small) "$d/big"; then
            pass "$T/append after the recall"
        else
            fail "$T/append after the recall"
        fi
        wr=$(opcount WRITE)
        echo "STATS $T final WRITE $wr"
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
