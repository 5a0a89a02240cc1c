#!/bin/bash
# interop/guest/krb5.sh MOUNTPORT ALL_PATH KRB5P_PATH MIB PROTOS VERS SECS
# Runs INSIDE the kpeer guest (interop/kpeer/run.sh, started by
# scripts/interop-krb5.sh, phase "krb5" of scripts/interop.sh; issue 17,
# docs/security.md). The kernel NFS client, with rpc.gssd, mounts the
# host's `nfsrdma serve --keytab` with sec=krb5, krb5i and krb5p.
#
# The host left in this directory (the guest's $KPEER_OUT):
#   krb5.conf   the realm (NFSRDMA.TEST); its KDC is 10.0.2.100:88, which
#               run.sh's guestfwd carries to the host's krb5kdc (TCP only:
#               slirp guestfwd forwards TCP, so udp_preference_limit = 1)
#   krb5.keytab nfs/kpeer@NFSRDMA.TEST: the guest's machine credential,
#               which rpc.gssd uses for uid 0 (mount and root's I/O)
#   server-name the name the server's keytab has (nfs/<name>): the guest
#               maps it to 10.0.2.100 in /etc/hosts and mounts <name>:PATH,
#               so gssd asks for nfs@<name> (it takes the mount's host name
#               as given, no DNS)
# ALL_PATH is exported with sec=krb5p:krb5i:krb5, KRB5P_PATH with sec=krb5p.
# For each PROTO (tcp, rdma: siw0 -> host softrnic) x VERS (3, 4.1) x SEC:
# mount ALL_PATH, write an MIB MiB file and a small one holding a marker
# (listed in markers.txt for the host's capture check), remount, read them
# back byte-exact, check the mount's sec= and the transport, check that a
# user without a ticket (uid 1000) reads nothing, that daemon (uid 1, whose
# ticket for daemon@NFSRDMA.TEST the host left as cc_daemon) writes a file
# the server gives uid 1, and that neither daemon nor root (the machine
# credential nfs/kpeer, which the server maps to its anonymous id) reads
# secret-root (the host made it root's, mode 0600), umount. Then the refusals:
# sec=krb5 on the krb5p-only export and sec=sys on both must fail to mount.
# Prints "PASS <case>/<check>" or "FAIL <case>/<check>: why" per check; exit
# 1 if any failed. gssd's log is gssd.log here. The host may keep the
# guest up for experiments with a file "hold" (see the end).
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
MPORT=${1:-20048}; ALL=$2; ONLYP=$3; MIB=${4:-4}
PROTOS=${5:-tcp rdma}; VERSIONS=${6:-3 4.1}; SECS=${7:-krb5 krb5i krb5p}
M=/mnt/k
FAILS=0
C=setup
pass() { echo "PASS $C/$*"; }
fail() { echo "FAIL $C/$*"; FAILS=$((FAILS + 1)); }
check() { # name command... : PASS if the command succeeds
    local name=$1; shift
    if "$@" > check.out 2>&1; then pass "$name"; else fail "$name: $(tail -3 check.out | tr '\n' ' ')"; fi
}

# ---- Kerberos and gssd
SRVNAME=$(cat server-name)
install -m 644 krb5.conf /etc/krb5.conf
install -m 600 krb5.keytab /etc/krb5.keytab
echo "$HOST_IP	$SRVNAME" >> /etc/hosts
# daemon (uid 1 on the guest and the host) holds a ticket for
# daemon@NFSRDMA.TEST, got on the host: gssd finds it as /tmp/krb5cc_1
install -m 600 -o 1 -g 1 cc_daemon /tmp/krb5cc_1
: > markers.txt
modprobe sunrpc; modprobe auth_rpcgss; modprobe rpcsec_gss_krb5
modprobe nfs; modprobe nfsv3; modprobe nfsv4
mkdir -p /run/rpc_pipefs
mountpoint -q /run/rpc_pipefs || mount -t rpc_pipefs sunrpc /run/rpc_pipefs
check rpcsec_gss_krb5-loaded grep -q '^rpcsec_gss_krb5 ' /proc/modules
# -f: stay in the foreground (its log goes to gssd.log); root's calls use
# the machine credential from /etc/krb5.keytab (gssd's default).
rpc.gssd -f -vvv -rrr > gssd.log 2>&1 &
GSSD=$!
sleep 1
check rpc.gssd-running kill -0 $GSSD
if echo " $PROTOS " | grep -q ' rdma '; then
    setup_siw > siw-setup.txt 2>&1 || fail "siw-setup: $(tail -3 siw-setup.txt | tr '\n' ' ')"
    modprobe rpcrdma
fi
mkdir -p $M
head -c $((MIB * 1048576)) /dev/urandom > /tmp/big
printf 0123456789 > /tmp/small

no_ticket_reads_nothing() { # FILE: uid 1000 (no ticket) gets an error and no byte
    setpriv --reuid 1000 --regid 1000 --clear-groups cat "$1" > nt.out 2> nt.err
    local rc=$?
    echo "uid 1000: rc $rc: $(cat nt.err)"
    [ "$rc" -ne 0 ] && ! [ -s nt.out ]
}
# user_checks: a user with a ticket acts as its principal's user; the
# principals with no local user on the server (the machine credential root
# uses) act as the anonymous id: neither reads root's 0600 file.
user_checks() {
    local f=$M/daemon-$C
    check daemon-with-ticket-writes setpriv --reuid 1 --regid 1 --clear-groups sh -c "printf daemon > '$f'"
    check daemon-reads-back setpriv --reuid 1 --regid 1 --clear-groups sh -c "test \"\$(cat '$f')\" = daemon"
    if [ "$V" = 3 ]; then
        check daemon-owns-its-file sh -c "test \$(stat -c %u '$f') = 1"
    else
        echo "INFO $C/daemon's file owner as the client maps it: $(stat -c %U:%G "$f")"
    fi
    check daemon-cannot-read-root-0600 sh -c "! setpriv --reuid 1 --regid 1 --clear-groups cat $M/secret-root > /dev/null"
    check machine-cred-cannot-read-root-0600 sh -c "! cat $M/secret-root > /dev/null"
    rm -f "$f"
}
opts() { # PROTO VERS SEC -> mount options
    local port=2049
    [ "$1" = rdma ] && port=20049
    if [ "$2" = 3 ]; then
        echo "vers=3,proto=$1,port=$port,mountport=$MPORT,mountproto=tcp,nolock,sec=$3"
    else
        echo "vers=$2,proto=$1,port=$port,sec=$3"
    fi
}
do_mount() { # PATH OPTS
    echo "+ mount -t nfs -o $2 $SRVNAME:$1 $M"
    timeout 120 mount -t nfs -o "$2" "$SRVNAME:$1" $M
}

for P in $PROTOS; do
    for V in $VERSIONS; do
        for S in $SECS; do
            C=$P-v$V-$S
            O=$(opts "$P" "$V" "$S")
            if ! do_mount "$ALL" "$O" > check.out 2>&1; then
                fail "mount: $(tail -3 check.out | tr '\n' ' ')"
                dmesg | grep -iE 'nfs|rpc|gss' | tail -5 | sed 's/^/  dmesg: /'
                continue
            fi
            mo=$(grep " $M " /proc/mounts | cut -d' ' -f4)
            pass "mount ($SRVNAME:$ALL $mo)"
            check sec-in-effect sh -c "echo '$mo' | tr ',' '\n' | grep -qx 'sec=$S'"
            check proto-in-effect sh -c "echo '$mo' | tr ',' '\n' | grep -qx 'proto=$P'"
            D=$M/$C
            rm -rf "$D"
            check mkdir mkdir "$D"
            check "write-${MIB}MiB" cp /tmp/big "$D/big"
            # a marker the host looks for in its capture: in the clear under
            # krb5 and krb5i, never under krb5p
            mark="KRB5MARK-$C-qz"
            printf %s "$mark" > /tmp/small
            echo "$C $mark" >> markers.txt
            check write-marker cp /tmp/small "$D/small"
            check sync sync
            check remount sh -c "umount $M && echo 3 > /proc/sys/vm/drop_caches && timeout 120 mount -t nfs -o '$O' '$SRVNAME:$ALL' $M"
            check "read-${MIB}MiB-byte-exact" cmp /tmp/big "$D/big"
            check read-marker-byte-exact cmp /tmp/small "$D/small"
            user_checks
            # uid 1000 has no ticket: gssd finds no credential for it and
            # the kernel refuses the call (EACCES or EKEYEXPIRED).
            echo 3 > /proc/sys/vm/drop_caches
            check no-ticket-reads-nothing no_ticket_reads_nothing "$D/small"
            check rm rm -rf "$D"
            grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:' | sed "s/^/INFO $C /"
            check umount umount $M
        done
    done
done

# ---- refusals: a flavor the export does not list
for P in $PROTOS; do
    for V in $VERSIONS; do
        for pair in "$ONLYP:krb5" "$ONLYP:krb5i" "$ONLYP:sys" "$ALL:sys"; do
            path=${pair%:*}; S=${pair##*:}
            C=$P-v$V-refused
            name=$S-on-$(basename "$path")
            if do_mount "$path" "$(opts "$P" "$V" "$S")" > check.out 2>&1; then
                fail "$name: the mount succeeded ($(grep " $M " /proc/mounts | cut -d' ' -f4))"
                umount $M
            else
                pass "$name: $(grep -v '^+' check.out | tail -1)"
            fi
        done
        # and the export's own flavor still mounts
        C=$P-v$V-krb5p-only-export
        if do_mount "$ONLYP" "$(opts "$P" "$V" krb5p)" > check.out 2>&1; then
            pass "mount-krb5p"
            check ls ls $M
            check umount umount $M
        else
            fail "mount-krb5p: $(tail -3 check.out | tr '\n' ' ')"
        fi
    done
done

# ---- the reverse (with a file "reverse" from the host): knfsd in the guest
# exports /export (tmpfs) with sec=krb5p:krb5i:krb5, rpc.svcgssd accepting
# with nfs/kpeer; first the guest's own kernel client mounts it in each
# service (the control: knfsd-control.txt, "SEC ok|failed"), then
# rpc.svcgssd is restarted to accept nfs/127.0.0.1 (the name the host's
# client uses: it reaches knfsd through hostfwd at 127.0.0.1) and the guest
# creates knfsd-ready and waits (up to 600 s) for the host's knfsd-done.
if [ -e reverse ]; then
    C=knfsd
    if start_nfsd "rw,no_root_squash,insecure,no_subtree_check,fsid=0,sec=krb5p:krb5i:krb5" > knfsd-setup.txt 2>&1; then
        pass "start"
    else
        fail "start: $(tail -3 knfsd-setup.txt | tr '\n' ' ')"
    fi
    echo "written by the guest" > /export/guest.txt
    mkdir -m 1777 /export/dir
    rpc.svcgssd -f -vvv > svcgssd-control.log 2>&1 &
    SVCGSSD=$!
    wait_grace
    : > knfsd-control.txt
    for S in krb5 krb5i krb5p; do
        if timeout 120 mount -t nfs -o "vers=3,sec=$S,nolock" kpeer:/export $M > check.out 2>&1 &&
            grep -q 'written by the guest' $M/guest.txt; then
            echo "$S ok" >> knfsd-control.txt
            echo "INFO knfsd/control-kernel-client-$S: mounts and reads"
        else
            echo "$S failed" >> knfsd-control.txt
            echo "INFO knfsd/control-kernel-client-$S: fails against knfsd: $(tail -1 check.out)"
        fi
        umount $M 2>/dev/null
    done
    kill $SVCGSSD; wait $SVCGSSD 2>/dev/null
    rpc.svcgssd -f -vvv -p "nfs/127.0.0.1@$(sed -n 's/^ *default_realm *= *//p' /etc/krb5.conf)" > svcgssd.log 2>&1 &
    SVCGSSD=$!
    sleep 1
    touch knfsd-ready
    for _ in $(seq 600); do [ -e knfsd-done ] && break; sleep 1; done
    [ -e knfsd-done ] || fail "host-done: the host never finished"
    kill $SVCGSSD 2>/dev/null
fi

# Debugging aid: with a file "hold" in this directory (made by the host
# before or during the run) the guest stays up and runs each cmd-N.sh that
# appears here (output in cmd-N.out) until a file "stop" appears.
while [ -e hold ] && [ ! -e stop ]; do
    for f in cmd-*.sh; do
        [ -e "$f" ] && [ ! -e "${f%.sh}.out" ] && bash "$f" > "${f%.sh}.out" 2>&1
    done
    sleep 1
done
kill $GSSD 2>/dev/null
echo "INFO $FAILS failed"
[ "$FAILS" -eq 0 ]
