#!/bin/bash
# scripts/interop.sh — the interop tier: real peers against our code.
#
# Phases (PHASES, default "tcp rdma knfsd"; one VM boot each; docs/interop.md):
#   tcp   the kernel NFSv3/TCP client against nfsrdma serve (below);
#   rdma  issue 9 check 2: the kernel NFSv3, NFSv4.1 and NFSv4.2 clients
#         mount nfsrdma serve over RDMA by the export's path (v4 through the
#         pseudo file system, which is also mounted at "/"), guest siw ->
#         our softrnic (rdma_phase);
#   knfsd issue 9 checks 1 and 3: our iwarp/softrnic initiators and our NFS
#         client against knfsd over siw in the guest (knfsd_phase);
#   coherence  issue 19: two kernel mounts of one export (v4.1/RDMA + v3/TCP
#         and the reverse) and small-file READ latency RDMA vs TCP
#         (coherence_phase; not in the default PHASES).
#   conformance  issue 14 item 8: the kernel client over TCP and over RDMA
#         against one export mounted by its path: v4.0 and v4.2 (listing,
#         files byte-exact after a remount), user xattrs and a
#         copy_file_range that becomes COPY (v4.2), v3 without `nolock`
#         (NLM found through the server's rpcbind, statd in the guest) with
#         fcntl locks contending with a v4.2 mount's (conformance_phase;
#         not in the default list).
#   krb5  issue 17: the kernel client with rpc.gssd mounts nfsrdma serve
#         with sec=krb5/krb5i/krb5p, v3 and v4.1, TCP and RDMA, against a
#         throw-away KDC on the host (scripts/interop-krb5.sh; not in the
#         default list).
#   pnfs  issue 18: the kernel's flex-files client mounts an nfsrdma pNFS
#         metadata server (v4.1, v4.2) over two nfsrdma data servers
#         (scripts/interop-pnfs.sh; not in the default list).
#   verbs issue 13: nfsrdma on the guest kernel's verbs (the verbs crate) over
#         siw and over rxe: the kernel client mounts our server, our client
#         copies to and from knfsd, perftest figures (verbs_phase; not in the
#         default list).
#   verbs-bench issue 13 item 4: guest benchmarks on siw and rxe, ours vs
#         knfsd, vs ib_read_bw, RDMA vs TCP with CPU per GiB
#         (verbs_bench_phase; not in the default list).
#
# Phase tcp (NFSv3 over TCP, Linux kernel client): builds nfsrdma (release),
# runs `nfsrdma serve` on a fresh temporary export on the host, boots the kpeer
# VM (interop/kpeer: Debian 6.1 kernel under qemu) and runs
# interop/guest/nfs3-tcp.sh in it: the kernel client mounts our server with
# vers=3,proto=tcp and checks listing, 8 MiB / 10 B / 100 KiB files byte-exact
# after a remount, overwrite/append/truncate, READDIRPLUS of 50 and 1000
# files, rm -rf of 1000 files, rename, symlink, hard link, chmod/chown/utimes,
# mkfifo, exclusive create, 255/256-byte and UTF-8 names, a 5 GB offset,
# O_SYNC and O_DIRECT I/O, parallel writers, a BULK_MIB (default 100) copy
# both ways, and mountstats (xprt tcp, no retransmissions). The host
# captures the traffic on lo (tcpdump) for every phase except the bulk
# copies and checks it with tshark (interop/peers/check-pcap.sh: no
# malformed frames).
#
# How the kernel reaches the server: slirp guestfwd. The guest mounts
# 10.0.2.100:/export with port=2049,mountport=20048,mountproto=tcp; run.sh
# forwards guest 10.0.2.100:2049 and :20048 to host 127.0.0.1:$NFS_PORT and
# :$MOUNT_PORT, where `nfsrdma serve` listens. Giving both ports means neither
# mount.nfs nor the kernel queries rpcbind, so no rpcbind is needed; `nolock`
# because the server has no NLM. The kernel's NFSACL probe (program 100227 on
# the NFS port) gets PROG_UNAVAIL and the client carries on without ACLs.
# A last phase mounts without port options: mount.nfs and the kernel then ask
# the server's own rpcbind (`serve --rpcbind-port $RPCBIND_PORT`, forwarded
# as guest :111) and connect to the ports it returns, which are forwarded
# 1:1 (guest 10.0.2.100:$NFS_PORT -> host 127.0.0.1:$NFS_PORT). That phase
# is captured into a second pcap. The guest also checks AUTH_SYS identities
# (uid 1000 vs mode bits), a MOUNT of a subdirectory, a second server run
# with --read-only on the same directory (EROFS), and a restart of the
# server under the live mount (handles of open files stay valid).
#
# Prints PASS/FAIL per check and exits non-zero if any check fails.
# Wall time on the 2-core dev VM (TCG guest, other jobs running): 3-10
# minutes: build 0-30 s, VM 3 min (boot 10-26 s), tshark checks the rest.
#
# Env: OUT (result dir, default /tmp/interop-<time>), NFS_PORT / MOUNT_PORT /
# RPCBIND_PORT (host ports, default 12049 / 12048 / 12111), BULK_MIB (default
# 100), KPEER (default interop/kpeer in this repository), CAPTURE=0 to skip the pcaps,
# NO_BUILD=1 to use the existing target/release/nfsrdma (NFSRDMA_BIN names
# another binary). Phase rdma:
# RDMA_PORT / RDMA_MOUNT_PORT / RDMA_TCP_PORT (12050 / 12051 / 12052),
# RDMA_VERS ("3 4.1 4.2"); phase knfsd: KNFSD_BULK_MIB (100); phase coherence:
# COH_RDMA_PORT / COH_TCP_PORT / COH_MOUNT_PORT (12070 / 12071 / 12072; the
# baseline server +10), COH_WAIT (70 s), COH_LAT_FILES (200), COH_LAT_ROUNDS
# (3, 0 skips the latency part), COH_LAT_VERS ("3"), COH_BASE_BIN (the
# "before" binary for the latency part; empty for none), COH_RUST_LOG (info),
# COH_CHECKS (1; 0 runs only the latency part), COH_GUEST_PCAP (0; 1 also
# captures the guest's eth0 with qemu's filter-dump and splits each call's
# time into guest work, wire and server with scripts/latency-split.sh),
# COH_KNFSD (0; 1 also measures the guest's own knfsd over siw and TCP from
# inside the guest: the floor any server has there), COH_INLINE8K (0; 1
# serves with --rdma-inline-size 8192 and adds RDMA passes with the
# client's sunrpc.rdma_max_inline_read at 8192, so 4 KiB READs come inline),
# COH_TRACE (0; 1 counts the guest's context switches per file by thread
# and the time from each wake-up to running, with ftrace; it slows the
# guest, so compare its passes only with each other);
# phase verbs: VERBS_DEVS ("siw0 rxe0"), VERBS_BULK_MIB (100), VERBS_XDEV_MIB
# (16, 0 skips the cross-device checks), VERBS_SOFT_PORT /
# VERBS_SOFT_MOUNT_PORT / VERBS_SOFT_TCP_PORT (12090 / 12091 / 12092: the
# host's softrnic server), VERBS_FWD_PORT / VERBS_FWD_MOUNT_PORT (12093 /
# 12094: host forwards to the guest's server); phase verbs-bench:
# VERBS_BENCH_MIB (128), VERBS_BENCH_OPS (1000), VERBS_BENCH_TIMEOUT (2400 s).
# Phase conformance: CONF_TCP_PORT / CONF_RDMA_PORT / CONF_MOUNT_PORT /
# CONF_RPCBIND_PORT / CONF_METRICS_PORT (12080 / 12081 / 12082 / 12083 /
# 12084), CONF_SMNOTIFY_PORT (12085, host -> guest rpcbind for SM_NOTIFY),
# CONF_STATD_PORT (12086, the guest statd's port, forwarded 1:1),
# CONF_LOCKD_PORT (12087, the guest lockd's port for GRANTED, forwarded 1:1),
# CONF_GRACE (15 s, the server's --grace-time), CONF_PROTOS ("tcp rdma"),
# CONF_RUST_LOG (info).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# Where cargo puts binaries: CARGO_TARGET_DIR when set, else target/ in the checkout.
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
KPEER=${KPEER:-$ROOT/interop/kpeer}
PEERS=${PEERS:-$ROOT/interop/peers}
OUT=${OUT:-/tmp/interop-$(date +%Y%m%d-%H%M%S)}
NFS_PORT=${NFS_PORT:-12049}
MOUNT_PORT=${MOUNT_PORT:-12048}
RPCBIND_PORT=${RPCBIND_PORT:-12111}
RO_PORT=${RO_PORT:-12059}
RO_MOUNT_PORT=${RO_MOUNT_PORT:-12058}
BULK_MIB=${BULK_MIB:-100}
CAPTURE=${CAPTURE:-1}
PHASES=${PHASES:-tcp rdma knfsd}
RDMA_PORT=${RDMA_PORT:-12050}
RDMA_MOUNT_PORT=${RDMA_MOUNT_PORT:-12051}
RDMA_TCP_PORT=${RDMA_TCP_PORT:-12052}
RDMA_VERS=${RDMA_VERS:-3 4.1 4.2}
KNFSD_BULK_MIB=${KNFSD_BULK_MIB:-100}
COH_RDMA_PORT=${COH_RDMA_PORT:-12070}
COH_TCP_PORT=${COH_TCP_PORT:-12071}
COH_MOUNT_PORT=${COH_MOUNT_PORT:-12072}
COH_WAIT=${COH_WAIT:-70}
COH_LAT_FILES=${COH_LAT_FILES:-200}
COH_LAT_ROUNDS=${COH_LAT_ROUNDS:-3}
COH_LAT_VERS=${COH_LAT_VERS:-3}
COH_CHECKS=${COH_CHECKS:-1}
COH_GUEST_PCAP=${COH_GUEST_PCAP:-0}
COH_KNFSD=${COH_KNFSD:-0}
COH_INLINE8K=${COH_INLINE8K:-0}
COH_TRACE=${COH_TRACE:-0}
COH_BASE_BIN=${COH_BASE_BIN-/tmp/own/nfsrdma-baseline}
VERBS_DEVS=${VERBS_DEVS:-siw0 rxe0}
CONF_TCP_PORT=${CONF_TCP_PORT:-12080}
CONF_RDMA_PORT=${CONF_RDMA_PORT:-12081}
CONF_MOUNT_PORT=${CONF_MOUNT_PORT:-12082}
CONF_RPCBIND_PORT=${CONF_RPCBIND_PORT:-12083}
CONF_METRICS_PORT=${CONF_METRICS_PORT:-12084}
CONF_SMNOTIFY_PORT=${CONF_SMNOTIFY_PORT:-12085}
CONF_STATD_PORT=${CONF_STATD_PORT:-12086}
CONF_LOCKD_PORT=${CONF_LOCKD_PORT:-12087}
CONF_GRACE=${CONF_GRACE:-15}
CONF_PROTOS=${CONF_PROTOS:-tcp rdma}
VERBS_BULK_MIB=${VERBS_BULK_MIB:-100}
VERBS_XDEV_MIB=${VERBS_XDEV_MIB:-16}
VERBS_BENCH_MIB=${VERBS_BENCH_MIB:-128}
VERBS_BENCH_OPS=${VERBS_BENCH_OPS:-1000}
VERBS_BENCH_TIMEOUT=${VERBS_BENCH_TIMEOUT:-2400}
VERBS_SOFT_PORT=${VERBS_SOFT_PORT:-12090}
VERBS_SOFT_MOUNT_PORT=${VERBS_SOFT_MOUNT_PORT:-12091}
VERBS_SOFT_TCP_PORT=${VERBS_SOFT_TCP_PORT:-12092}
VERBS_FWD_PORT=${VERBS_FWD_PORT:-12093}
VERBS_FWD_MOUNT_PORT=${VERBS_FWD_MOUNT_PORT:-12094}
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
mkdir -p "$OUT/guest"; OUT=$(cd "$OUT" && pwd)
T0=$(date +%s)
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }

SRV_PID=; RO_PID=; TCPDUMP_PID=; WATCH_PID=; RESTART_PID=; EXPORT=
cleanup() {
    [ -n "$RESTART_PID" ] && kill "$RESTART_PID" 2>/dev/null
    [ -s "$OUT/server.pid" ] && SRV_PID=$(cat "$OUT/server.pid")
    [ -n "$RO_PID" ] && kill -INT "$RO_PID" 2>/dev/null
    [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null
    [ -n "$TCPDUMP_PID" ] && kill -INT "$TCPDUMP_PID" 2>/dev/null
    [ -s "$OUT/tcpdump2.pid" ] && kill -INT "$(cat "$OUT/tcpdump2.pid")" 2>/dev/null
    [ -n "$SRV_PID" ] && kill -INT "$SRV_PID" 2>/dev/null && wait "$SRV_PID" 2>/dev/null
    [ -n "$EXPORT" ] && rm -rf "$EXPORT"
    rdma_cleanup
    knfsd_cleanup
    coherence_cleanup
    verbs_cleanup
    conformance_cleanup
    pnfs_cleanup
    krb5_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# phase pnfs (issue 18) lives beside this script
. "$ROOT/scripts/interop-pnfs.sh"
# phase krb5 (issue 17) too
. "$ROOT/scripts/interop-krb5.sh"

# pcap_iwarp_check NAME PCAP RDMA_PORT MOUNT_PORT TXT [server|client]: scripts/tshark-iwarp-check.sh
# (MPA/DDP/RDMAP decode, malformed frames, MPA CRC and length errors) over
# the whole capture, then the malformed frames below RPC split by direction.
# Our side (server: the RDMA_PORT end, client: the other end) must send
# none. The peer's side arrives re-segmented by slirp (socat or hostfwd), and
# tshark's iwarp_mpa dissector does not reassemble an FPDU that starts in
# one TCP segment and ends in another ("Unreassembled Packet"): those frames
# are counted and reported, not failed.
pcap_iwarp_check() {
    local name=$1 pcap=$2 port=$3 mport=$4 txt=$5 side=${6:-server} ours theirs
    bash "$ROOT/scripts/tshark-iwarp-check.sh" "$pcap" -d "tcp.port==$mport,rpc" > "$txt" 2>&1
    local rc=$?
    tshark -n -r "$pcap" -d "tcp.port==$mport,rpc" -Y '_ws.malformed && !rpc' \
        -T fields -e frame.number -e tcp.srcport > "$txt.malformed" 2>/dev/null
    ours=$(awk -v p="$port" -v s="$side" '($2 == p) == (s == "server")' "$txt.malformed" | wc -l)
    theirs=$(awk -v p="$port" -v s="$side" '($2 == p) != (s == "server")' "$txt.malformed" | wc -l)
    if [ "$rc" -eq 2 ] || ! grep -q 'iwarp_ddp_rdmap' "$txt"; then
        fail "pcap-iwarp-$name: tshark could not decode $pcap (see $txt)"
    elif [ "$ours" -ne 0 ] || grep -qE 'FAIL: [1-9][0-9]* FPDU.s. with a bad MPA CRC' "$txt"; then
        fail "pcap-iwarp-$name: $ours malformed frame(s) below RPC sent by our side (see $txt.malformed, $txt)"
    else
        pass "pcap-iwarp-$name: $(head -1 "$txt" | sed 's/^[^:]*: //'); our side: no malformed frame below RPC; peer side (re-segmented by slirp): $theirs unreassembled"
    fi
    # nfsrdma dump (docs/dump.md) reassembles TCP itself: every frame decodes,
    # none unknown or malformed (issue 16 item 3).
    if "$BIN" dump --strict --summary "$pcap" > "$txt.dump" 2>&1; then
        pass "dump-$name: $(head -1 "$txt.dump")"
    else
        fail "dump-$name: nfsrdma dump found unknown or malformed frames in $pcap (see $txt.dump)"
    fi
}

# ---- phase rdma (issue 9 check 2): the kernel NFS client mounts `nfsrdma
# serve --transports tcp,rdma` over RPC-over-RDMA. The guest's siw0 is the
# active iWARP side: it connects to 10.0.2.100:20049, which slirp forwards to
# host 127.0.0.1:$RDMA_PORT, where our softrnic listens. vers=3 takes MOUNT
# over TCP (guest :20048 -> host :$RDMA_MOUNT_PORT). One VM boot runs every
# version in RDMA_VERS (interop/guest/nfs-rdma.sh). Each version's traffic up
# to its bulk copies is captured on lo into nfs-rdma-v<vers>.pcap and checked
# with scripts/tshark-iwarp-check.sh (MPA/DDP/RDMAP/RPC-over-RDMA decode, no
# malformed frame below RPC, no CRC or length error); check-pcap.sh adds the
# per-procedure summary (its malformed count includes tshark's known
# write-chunk READ reply caveat, so it is informational here).
R_PID=; R_WATCH_PID=; R_EXPORT=
rdma_cleanup() {
    [ -n "$R_WATCH_PID" ] && kill "$R_WATCH_PID" 2>/dev/null
    [ -s "$OUT/tcpdump-rdma.pid" ] && kill -INT "$(cat "$OUT/tcpdump-rdma.pid")" 2>/dev/null
    [ -n "$R_PID" ] && kill -INT "$R_PID" 2>/dev/null && wait "$R_PID" 2>/dev/null
    [ -n "$R_EXPORT" ] && rm -rf "$R_EXPORT"
}
rdma_phase() {
    local p v rc n_pass n_fail G=$OUT/guest-rdma
    for p in "$RDMA_PORT" "$RDMA_MOUNT_PORT" "$RDMA_TCP_PORT"; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            fail "kernel-nfs-rdma: host port $p is in use; set RDMA_PORT/RDMA_MOUNT_PORT/RDMA_TCP_PORT"; return
        fi
    done
    mkdir -p "$G"
    R_EXPORT=$(mktemp -d /tmp/interop-rdma-export.XXXXXX)
    chmod 0777 "$R_EXPORT"
    echo "== nfsrdma serve $R_EXPORT: RDMA on 127.0.0.1:$RDMA_PORT, MOUNT :$RDMA_MOUNT_PORT, TCP :$RDMA_TCP_PORT"
    RUST_LOG=${RUST_LOG:-warn} "$BIN" serve "$R_EXPORT" --transports tcp,rdma --addr 127.0.0.1 \
        --port "$RDMA_TCP_PORT" --rdma-port "$RDMA_PORT" --mount-port "$RDMA_MOUNT_PORT" --alias /export --no-root-squash \
        --state-dir "$OUT/state-rdma" > "$OUT/server-rdma.log" 2>&1 &
    R_PID=$!
    for _ in $(seq 50); do
        [ -n "$(ss -Hltn "sport = :$RDMA_PORT")" ] && [ -n "$(ss -Hltn "sport = :$RDMA_MOUNT_PORT")" ] && break
        sleep 0.1
    done
    if [ -z "$(ss -Hltn "sport = :$RDMA_PORT")" ]; then
        fail "kernel-nfs-rdma: server did not start (log: $OUT/server-rdma.log)"; return
    fi
    local filter="tcp port $RDMA_PORT or tcp port $RDMA_MOUNT_PORT"
    if [ "$CAPTURE" = 1 ]; then
        ( # one capture per version, from before its mount to before its bulk copies
            for v in $RDMA_VERS; do
                while [ ! -e "$G/capture-start-$v" ]; do [ -e "$G/rc" ] && exit 0; sleep 0.2; done
                tcpdump -i lo -s 0 -B 262144 -U -w "$OUT/nfs-rdma-v$v.pcap" "$filter" > /dev/null 2> "$OUT/tcpdump-rdma-v$v.log" &
                echo $! > "$OUT/tcpdump-rdma.pid"
                for _ in $(seq 50); do grep -q 'listening on' "$OUT/tcpdump-rdma-v$v.log" && break; sleep 0.1; done
                touch "$G/capture-started-$v"
                while [ ! -e "$G/capture-stop-$v" ]; do [ -e "$G/rc" ] && break; sleep 0.2; done
                sleep 0.5
                kill -INT "$(cat "$OUT/tcpdump-rdma.pid")"; rm -f "$OUT/tcpdump-rdma.pid"
                touch "$G/capture-stopped-$v"
            done
        ) &
        R_WATCH_PID=$!
    else
        for v in $RDMA_VERS; do touch "$G/capture-started-$v" "$G/capture-stopped-$v"; done
    fi
    echo "== kpeer: kernel NFS client over RDMA (siw) -> our server (vers $RDMA_VERS)"
    local t0; t0=$(date +%s)
    # shellcheck disable=SC2086
    KPEER_HOSTFWD=none KPEER_GUESTFWD="20049:$RDMA_PORT 20048:$RDMA_MOUNT_PORT" \
        bash "$KPEER/run.sh" "$ROOT/interop/guest/nfs-rdma.sh" "$G" \
        -- 20048 /export "$BULK_MIB" $RDMA_VERS > "$OUT/run-rdma.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|INFO)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-nfs-rdma: $n_pass guest checks passed (vers $RDMA_VERS, VM $(( $(date +%s) - t0 )) s)"
    else
        fail "kernel-nfs-rdma: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log)"
    fi
    if [ "$CAPTURE" = 1 ]; then
        kill "$R_WATCH_PID" 2>/dev/null; wait "$R_WATCH_PID" 2>/dev/null; R_WATCH_PID=
        [ -s "$OUT/tcpdump-rdma.pid" ] && kill -INT "$(cat "$OUT/tcpdump-rdma.pid")" 2>/dev/null
        rm -f "$OUT/tcpdump-rdma.pid"; sleep 1
        for v in $RDMA_VERS; do
            local pcap=$OUT/nfs-rdma-v$v.pcap txt=$OUT/check-nfs-rdma-v$v.txt
            if [ ! -s "$pcap" ]; then fail "pcap-iwarp-v$v: no capture"; continue; fi
            pcap_iwarp_check "v$v" "$pcap" "$RDMA_PORT" "$RDMA_MOUNT_PORT" "$txt"
            # check 1, kernel siw active: our softrnic answered the kernel's MPA
            # Request and its RPC NULL (xprtrdma's first call on a connection)
            local reps nulls
            reps=$(tshark -n -r "$pcap" -Y "tcp.srcport==$RDMA_PORT && iwarp_mpa.rep" 2>/dev/null | wc -l)
            nulls=$(tshark -n -r "$pcap" -Y "tcp.srcport==$RDMA_PORT && rpcordma && rpc.msgtyp==1 && rpc.program==100003 && rpc.procedure==0" 2>/dev/null | wc -l)
            if [ "$reps" -gt 0 ] && [ "$nulls" -gt 0 ]; then
                pass "kernel-siw-to-softrnic-v$v: $reps MPA Replies and $nulls NFS NULL replies over RPC-over-RDMA from our side"
            else
                fail "kernel-siw-to-softrnic-v$v: $reps MPA Replies, $nulls NULL replies from our side in $pcap"
            fi
            bash "$PEERS/check-pcap.sh" "$pcap" -d "tcp.port==$RDMA_MOUNT_PORT,rpc" > "$OUT/summary-nfs-rdma-v$v.txt" 2>&1
            grep -m1 -E 'malformed frames' "$OUT/summary-nfs-rdma-v$v.txt" | sed "s/^/  v$v check-pcap: /"
        done
    fi
    if kill -0 "$R_PID" 2>/dev/null; then
        pass "rdma-server-alive"
    else
        fail "rdma-server-alive: nfsrdma serve exited (log: $OUT/server-rdma.log)"
    fi
    grep -iE 'panic|error' "$OUT/server-rdma.log" | head -5 | sed 's/^/  server: /'
    rdma_cleanup; R_PID=; R_EXPORT=
}

# ---- phase knfsd (issue 9 checks 1 and 3): our code as the active side
# against the guest's knfsd over siw. One VM boot runs
# interop/kpeer/guest/serve-knfsd.sh (knfsd on tcp:2049 and rdma:20049,
# rpc.mountd on 20048; run.sh's hostfwd maps them to host 127.0.0.1 ports,
# read back from hostfwd.txt). The host then runs, captured on lo:
#   check 1: crates/rpcrdma/examples/knfsd_interop (softrnic + RdmaClient:
#            NULL calls inline, in read chunks, with a reply chunk; RPC-over-
#            RDMA v1) without and with MPA CRC, and crates/iwarp/examples/
#            mpa_peer_interop connect (bare iwarp initiator, MPA rev 2, one
#            NULL round trip; --delay-ms 200 for siw's RTS race) without and
#            with CRC. The other direction of check 1 (the kernel's siw
#            connecting to a softrnic listener, MPA exchange and NULL) is the
#            rdma phase's mount.
#   check 3: the project's client (`nfsrdma ls/cat/cp`) on
#            nfs+rdma://127.0.0.1:P/export?mountport=M: listing, 8 MiB, 10 B
#            and 100 KiB files written and read back byte-exact, and a
#            KNFSD_BULK_MIB copy both ways.
K_RUN_PID=; K_TCPDUMP_PID=; K_DIR=
knfsd_cleanup() {
    [ -n "$K_TCPDUMP_PID" ] && kill -INT "$K_TCPDUMP_PID" 2>/dev/null
    [ -n "$K_RUN_PID" ] && touch "$OUT/guest-knfsd/stop" && wait "$K_RUN_PID" 2>/dev/null
    [ -n "$K_DIR" ] && rm -rf "$K_DIR"
}
kcheck() { # name command... : PASS if the command succeeds within 180 s
    local name=$1; shift
    local log=$OUT/knfsd-$name.log
    if timeout 180 "$@" > "$log" 2>&1; then pass "$name"; else fail "$name: rc $?: $(tail -2 "$log" | tr '\n' ' ')"; fi
}
knfsd_phase() {
    local G=$OUT/guest-knfsd rp mp t0
    mkdir -p "$G"
    if ! (cd "$ROOT" && cargo build -q -p rpcrdma --example knfsd_interop && cargo build -q -p iwarp --example mpa_peer_interop) \
        > "$OUT/build-examples.log" 2>&1; then
        fail "knfsd: examples did not build (log: $OUT/build-examples.log)"; return
    fi
    echo "== kpeer: knfsd over siw in the guest <- our client and examples"
    t0=$(date +%s)
    KPEER_HOSTFWD="20049 2049 20048" bash "$KPEER/run.sh" "$KPEER/guest/serve-knfsd.sh" "$G" -- 900 \
        > "$OUT/run-knfsd.log" 2>&1 &
    K_RUN_PID=$!
    for _ in $(seq 300); do [ -e "$G/ready" ] && break; kill -0 "$K_RUN_PID" 2>/dev/null || break; sleep 1; done
    if [ ! -e "$G/ready" ]; then fail "knfsd: guest not ready (log: $G/guest.log)"; knfsd_cleanup; K_RUN_PID=; return; fi
    rp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20049$/\1/p' "$G/hostfwd.txt")
    mp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20048$/\1/p' "$G/hostfwd.txt")
    echo "   knfsd ready after $(( $(date +%s) - t0 )) s: rdma 127.0.0.1:$rp, MOUNT 127.0.0.1:$mp"
    if [ "$CAPTURE" = 1 ]; then
        tcpdump -i lo -s 0 -B 262144 -U -w "$OUT/knfsd-rdma.pcap" "tcp port $rp or tcp port $mp" > /dev/null 2> "$OUT/tcpdump-knfsd.log" &
        K_TCPDUMP_PID=$!
        for _ in $(seq 50); do grep -q 'listening on' "$OUT/tcpdump-knfsd.log" && break; sleep 0.1; done
    fi
    local ex=$TARGET_DIR/debug/examples
    kcheck knfsd-null-rpcrdma-v1 "$ex/knfsd_interop" "127.0.0.1:$rp"
    kcheck knfsd-null-rpcrdma-v1-crc "$ex/knfsd_interop" "127.0.0.1:$rp" crc
    kcheck knfsd-null-iwarp "$ex/mpa_peer_interop" connect "$rp" --delay-ms 200
    kcheck knfsd-null-iwarp-crc "$ex/mpa_peer_interop" connect "$rp" --crc --delay-ms 200
    K_DIR=$(mktemp -d /tmp/interop-knfsd.XXXXXX)
    local u="nfs+rdma://127.0.0.1:$rp/export" q="?mountport=$mp" d=$K_DIR
    head -c 8388608 /dev/urandom > "$d/f8m"; printf 0123456789 > "$d/f10"; head -c 102400 /dev/urandom > "$d/f100k"
    kcheck client-ls "$BIN" ls "$u/$q"
    kcheck client-cat-hello sh -c "'$BIN' cat '$u/hello.txt$q' | grep -q 'hello from the kpeer guest knfsd'"
    for f in f8m f10 f100k; do
        kcheck "client-write-$f" "$BIN" cp "$d/$f" "$u/k-$f$q"
        kcheck "client-read-$f-byte-exact" sh -c "'$BIN' cp '$u/k-$f$q' '$d/$f.back' && cmp '$d/$f' '$d/$f.back'"
    done
    kcheck client-ls-lists-files sh -c "'$BIN' ls '$u/$q' | grep -c k-f > '$d/n' && test \$(cat '$d/n') = 3"
    if [ -n "$K_TCPDUMP_PID" ]; then sleep 0.5; kill -INT "$K_TCPDUMP_PID"; K_TCPDUMP_PID=; fi
    head -c $((KNFSD_BULK_MIB * 1048576)) /dev/urandom > "$d/bulk"
    kcheck "client-bulk-${KNFSD_BULK_MIB}MiB-to-knfsd" "$BIN" cp "$d/bulk" "$u/k-bulk$q"
    kcheck "client-bulk-${KNFSD_BULK_MIB}MiB-from-knfsd-byte-exact" sh -c "'$BIN' cp '$u/k-bulk$q' '$d/bulk.back' && cmp '$d/bulk' '$d/bulk.back'"
    grep -h 'MiB/s' "$OUT"/knfsd-client-bulk*.log | sed 's/^/  /'
    touch "$G/stop"; wait "$K_RUN_PID"; K_RUN_PID=
    rm -rf "$K_DIR"; K_DIR=
    echo "   knfsd phase VM wall $(( $(date +%s) - t0 )) s"
    if [ "$CAPTURE" = 1 ]; then
        pcap_iwarp_check knfsd "$OUT/knfsd-rdma.pcap" "$rp" "$mp" "$OUT/check-knfsd-rdma.txt" client
        bash "$PEERS/check-pcap.sh" "$OUT/knfsd-rdma.pcap" -d "tcp.port==$mp,rpc" > "$OUT/summary-knfsd-rdma.txt" 2>&1
        grep -m1 -E 'malformed frames' "$OUT/summary-knfsd-rdma.txt" | sed 's/^/  knfsd check-pcap: /'
    fi
}

# ---- phase coherence (issue 19): two kernel mounts of one `nfsrdma serve`
# export in the guest, v4.1/RDMA + v3/TCP and the reverse, following
# close-to-open (interop/guest/coherence.sh), plus the kernel client's
# small-file READ latency over RDMA vs TCP. The host answers the guest's
# handshakes: host-write (a host process writes guest-provided bytes into the
# export directly, not through NFS) and mark-<name> (notes the server's
# delegation counters from its log: grants, answered CB_RECALLs, recalls
# for local changes, revocations). With COH_BASE_BIN (default
# /tmp/own/nfsrdma-baseline when it exists: a build from before the one-write
# RDMA reply framing) a second server serves a copy of the latency files on
# guest ports 20050/2050/20047, interleaved with ours in each round.
C_PID=; C_BASE_PID=; C_WATCH_PID=; C_EXPORT=; C_BASE_EXPORT=; C_TCPDUMP_PID=
coherence_cleanup() {
    [ -n "$C_WATCH_PID" ] && kill "$C_WATCH_PID" 2>/dev/null
    [ -n "$C_TCPDUMP_PID" ] && kill -INT "$C_TCPDUMP_PID" 2>/dev/null
    [ -n "$C_PID" ] && kill -INT "$C_PID" 2>/dev/null && wait "$C_PID" 2>/dev/null
    [ -n "$C_BASE_PID" ] && kill -INT "$C_BASE_PID" 2>/dev/null && wait "$C_BASE_PID" 2>/dev/null
    [ -n "$C_EXPORT" ] && rm -rf "$C_EXPORT"
    [ -n "$C_BASE_EXPORT" ] && rm -rf "$C_BASE_EXPORT"
}
# deleg_counts LOG: "granted=N recalled=N local=N revoked=N" from the server's log lines
deleg_counts() {
    printf 'granted=%s recalled=%s inotify=%s revoked=%s lease_breaks=%s\n' "$(grep -c 'delegation granted' "$1")" \
        "$(grep -c 'CB_RECALL answered NFS4_OK' "$1")" "$(grep -c 'local change to a delegated file' "$1")" \
        "$(grep -c 'delegation revoked' "$1")" "$(grep -c 'kernel lease break' "$1")"
}
coherence_export() { # DIR: the marker and LAT_FILES 4 KiB files in lat/
    mkdir -p "$1/lat"; chmod 0777 "$1"; touch "$1/.coherence-root"
    for i in $(seq 1 "$COH_LAT_FILES"); do head -c 4096 /dev/urandom > "$1/lat/f$i"; done
}
coherence_phase() {
    local G=$OUT/guest-coherence p rc t0 base=0 log=$OUT/server-coherence.log
    local ports="$COH_RDMA_PORT $COH_TCP_PORT $COH_MOUNT_PORT"
    [ -x "$COH_BASE_BIN" ] && base=1 && ports+=" $((COH_RDMA_PORT + 10)) $((COH_TCP_PORT + 10)) $((COH_MOUNT_PORT + 10))"
    for p in $ports; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            fail "coherence: host port $p is in use; set COH_RDMA_PORT/COH_TCP_PORT/COH_MOUNT_PORT"; return
        fi
    done
    mkdir -p "$G"; rm -f "$G"/mark* "$G"/host-* "$G/rc" "$G"/latency*.txt
    C_EXPORT=$(mktemp -d /tmp/interop-coh-export.XXXXXX)
    coherence_export "$C_EXPORT"
    echo "== nfsrdma serve $C_EXPORT: RDMA :$COH_RDMA_PORT, TCP :$COH_TCP_PORT, MOUNT :$COH_MOUNT_PORT"
    local inl=; [ "$COH_INLINE8K" = 1 ] && inl="--rdma-inline-size 8192"
    # shellcheck disable=SC2086
    RUST_LOG=${COH_RUST_LOG:-info} "$BIN" serve "$C_EXPORT" --transports tcp,rdma --addr 127.0.0.1 \
        --port "$COH_TCP_PORT" --rdma-port "$COH_RDMA_PORT" --mount-port "$COH_MOUNT_PORT" --alias /export \
        --no-root-squash --state-dir "$OUT/state-coherence" $inl > "$log" 2>&1 &
    C_PID=$!
    local fwd="20049:$COH_RDMA_PORT 2049:$COH_TCP_PORT 20048:$COH_MOUNT_PORT"
    if [ "$base" = 1 ]; then
        C_BASE_EXPORT=$(mktemp -d /tmp/interop-coh-base.XXXXXX)
        coherence_export "$C_BASE_EXPORT"
        echo "== baseline $COH_BASE_BIN serve $C_BASE_EXPORT: RDMA :$((COH_RDMA_PORT + 10)), TCP :$((COH_TCP_PORT + 10))"
        RUST_LOG=warn "$COH_BASE_BIN" serve "$C_BASE_EXPORT" --transports tcp,rdma --addr 127.0.0.1 \
            --port $((COH_TCP_PORT + 10)) --rdma-port $((COH_RDMA_PORT + 10)) --mount-port $((COH_MOUNT_PORT + 10)) \
            --alias /export > "$OUT/server-coherence-base.log" 2>&1 &
        C_BASE_PID=$!
        fwd+=" 20050:$((COH_RDMA_PORT + 10)) 2050:$((COH_TCP_PORT + 10)) 20047:$((COH_MOUNT_PORT + 10))"
    fi
    for p in $ports; do
        for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$p")" ] && break; sleep 0.1; done
        [ -n "$(ss -Hltn "sport = :$p")" ] || { fail "coherence: no server on :$p (logs: $OUT/server-coherence*.log)"; coherence_cleanup; return; }
    done
    ( # the guest's handshakes
        while [ ! -e "$G/rc" ]; do
            for m in "$G"/mark-*; do
                [ -e "$m" ] || continue
                m=${m##*/mark-}
                echo "$m $(deleg_counts "$log")" >> "$G/marks.txt"
                rm -f "$G/mark-$m"; touch "$G/marked-$m"
            done
            if [ -e "$G/host-write" ]; then
                rm -f "$G/host-write"
                # a process on the host writes into the export, not through NFS
                cp "$G/host-data" "$C_EXPORT/$(cat "$G/host-path")"
                touch "$G/host-wrote"
            fi
            sleep 0.1
        done
    ) &
    C_WATCH_PID=$!
    local pcap=$OUT/coherence.pcap
    if [ "$CAPTURE" = 1 ]; then
        local filter; filter=$(printf 'tcp port %s or ' $ports); filter=${filter% or }
        tcpdump -i lo -s 0 -B 262144 -U -w "$pcap" "$filter" > /dev/null 2> "$OUT/tcpdump-coherence.log" &
        C_TCPDUMP_PID=$!
        for _ in $(seq 50); do grep -q 'listening on' "$OUT/tcpdump-coherence.log" && break; sleep 0.1; done
    fi
    echo "== kpeer: two kernel mounts (v4.1/RDMA + v3/TCP, and the reverse), small-file READ latency"
    t0=$(date +%s)
    local gpcap=$OUT/coherence-guest.pcap qextra=${KPEER_QEMU_EXTRA:-}
    [ "$COH_GUEST_PCAP" = 1 ] && qextra+=" -object filter-dump,id=cohdump,netdev=n0,file=$gpcap,maxlen=256"
    KPEER_QEMU_EXTRA=$qextra KPEER_HOSTFWD=none KPEER_GUESTFWD="$fwd" bash "$KPEER/run.sh" "$ROOT/interop/guest/coherence.sh" "$G" \
        -- 20048 "$COH_WAIT" "$COH_LAT_FILES" "$COH_LAT_ROUNDS" "$base" "$COH_LAT_VERS" "$COH_CHECKS" "$COH_KNFSD" "$COH_INLINE8K" "$COH_TRACE" > "$OUT/run-coherence.log" 2>&1
    rc=$?
    [ -n "$C_TCPDUMP_PID" ] && { sleep 0.5; kill -INT "$C_TCPDUMP_PID"; wait "$C_TCPDUMP_PID" 2>/dev/null; C_TCPDUMP_PID=; }
    grep -E '^(PASS|FAIL|INFO)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    local n_pass n_fail
    n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-two-mounts-coherence: $n_pass guest checks passed (VM $(( $(date +%s) - t0 )) s)"
    else
        fail "kernel-two-mounts-coherence: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log)"
    fi
    # delegations granted and recalled per direction, from the marks
    local d s e dirs="fwd rev"
    [ "$COH_CHECKS" = 0 ] && dirs=
    for d in $dirs; do
        s=$(grep "^$d-start " "$G/marks.txt" 2>/dev/null | cut -d' ' -f2-)
        e=$(grep "^$d-end " "$G/marks.txt" 2>/dev/null | cut -d' ' -f2-)
        if [ -z "$s" ] || [ -z "$e" ]; then fail "coherence-delegations-$d: no marks (see $G/marks.txt)"; continue; fi
        local diff
        diff=$(printf '%s\n%s\n' "$s" "$e" | tr ' ' '\n' | awk -F= 'NF==2{if($1 in a){printf "%s=%d ", $1, $2-a[$1]}else{a[$1]=$2}}')
        echo "  delegations $d: $diff"
        if [ "$d" = fwd ]; then
            # A (v4.1 over RDMA) must have held delegations and had them recalled
            if echo "$diff" | awk '{split($1,g,"=");split($2,r,"=");exit !(g[2] > 0 && r[2] > 0)}'; then
                pass "coherence-delegations-$d: $diff"
            else
                fail "coherence-delegations-$d: no delegation granted or none recalled: $diff"
            fi
        else
            pass "coherence-delegations-$d (B = NFSv4.1 over TCP: delegations need the TCP back channel): $diff"
        fi
    done
    if [ -s "$G/latency.txt" ]; then
        echo "  small-file READ latency, medians over $COH_LAT_ROUNDS rounds of $COH_LAT_FILES x 4 KiB (ms/file, READ RTT ms, READ execute ms):"
        awk '{k=$2" "$3" v"$4; n[k]++; f[k]=f[k]" "$7; r[k]=r[k]" "$9; x[k]=x[k]" "$10}
             function med(s,  a,m,i,j,t){m=split(s,a," ");for(i=1;i<=m;i++)for(j=i+1;j<=m;j++)if(a[j]+0<a[i]+0){t=a[i];a[i]=a[j];a[j]=t};return (m%2)?a[(m+1)/2]:(a[m/2]+a[m/2+1])/2}
             END{for(k in n) printf "    %-16s %6.2f %6.2f %6.2f\n", k, med(f[k]), med(r[k]), med(x[k])}' "$G/latency.txt" | sort
    fi
    if [ -s "$G/latency-ops.txt" ]; then
        echo "  per operation, medians over the rounds (ops, RTT ms, execute ms):"
        awk '{k=$2" "$3" v"$4" "$5; n[k]++; o[k]=o[k]" "$6; r[k]=r[k]" "$7; x[k]=x[k]" "$8}
             function med(s,  a,m,i,j,t){m=split(s,a," ");for(i=1;i<=m;i++)for(j=i+1;j<=m;j++)if(a[j]+0<a[i]+0){t=a[i];a[i]=a[j];a[j]=t};return (m%2)?a[(m+1)/2]:(a[m/2]+a[m/2+1])/2}
             END{for(k in n) printf "    %-24s %5d %7.3f %7.3f\n", k, med(o[k]), med(r[k]), med(x[k])}' "$G/latency-ops.txt" | sort
    fi
    if [ -s "$G/latency-sys.txt" ]; then
        echo "  guest kernel per file, medians over the rounds (context switches, IPIs, interrupts, CPU busy / sys / softirq / idle ms):"
        awk '{k=$2" "$3" v"$4; for(i=5;i<=11;i++) v[k,i]=v[k,i]" "$i; n[k]++}
             function med(s,  a,m,i,j,t){m=split(s,a," ");for(i=1;i<=m;i++)for(j=i+1;j<=m;j++)if(a[j]+0<a[i]+0){t=a[i];a[i]=a[j];a[j]=t};return (m%2)?a[(m+1)/2]:(a[m/2]+a[m/2+1])/2}
             END{for(k in n){printf "    %-16s", k; for(i=5;i<=11;i++) printf " %6.2f", med(v[k,i]); printf "\n"}}' "$G/latency-sys.txt" | sort
    fi
    if [ -s "$G/latency-xprt.txt" ]; then
        # xprtrdma's counters over our RDMA passes (mountstats xprt: line,
        # net/sunrpc/xprtrdma/transport.c): write chunks registered and
        # LOCAL_INVs the client had to post itself. Each READ reply's Send
        # With Invalidate must name the write chunk's rkey (RFC 8797 §3.2),
        # or the client falls back to LOCAL_INV.
        local wc li
        read -r wc li < <(awk '$2 ~ /^ours/ && $6 == "rdma" {w += $18; l += $31} END {print w + 0, l + 0}' "$G/latency-xprt.txt")
        if [ "$wc" -gt 0 ] && [ "$li" = 0 ]; then
            pass "coherence-remote-invalidation: $wc write chunks, local_inv_needed 0"
        else
            fail "coherence-remote-invalidation: $wc write chunks, local_inv_needed $li (see $G/latency-xprt.txt)"
        fi
    fi
    if [ -s "$G/latency-sw.txt" ]; then
        echo "  guest context switches per file by the thread switched to (COH_TRACE=1):"
        sed 's/^LATSW /    /' "$G/latency-sw.txt"
        echo "  guest wake-up to running per file by thread (ms/file, and wake-ups over 20 ms):"
        [ -s "$G/latency-wake.txt" ] && sed 's/^LATWAKE /    /' "$G/latency-wake.txt"
    fi
    if [ -s "$pcap" ]; then
        # our side of each READ, seen on the host's lo between slirp's socat
        # and the server: call to reply (rpc.time), per server port
        echo "  NFSv3 READ call-to-reply time on the host (ms: calls, median, p90), from $pcap:"
        local dd="-d tcp.port==$COH_TCP_PORT,rpc -d tcp.port==$COH_MOUNT_PORT,rpc"
        [ "$base" = 1 ] && dd+=" -d tcp.port==$((COH_TCP_PORT + 10)),rpc -d tcp.port==$((COH_MOUNT_PORT + 10)),rpc"
        # shellcheck disable=SC2086
        tshark -n -r "$pcap" $dd -Y 'rpc.msgtyp==1 && nfs.procedure_v3==6' \
            -T fields -e tcp.srcport -e rpc.time 2>/dev/null |
            awk -v r="$COH_RDMA_PORT" -v t="$COH_TCP_PORT" '{n=($1==r)?"ours rdma":($1==t)?"ours tcp":($1==r+10)?"base rdma":($1==t+10)?"base tcp":"other "$1;
                 split($2,a,","); v[n]=v[n]" "a[1]*1000}
                 function st(s,  x,m,i,j,tt){m=split(s,x," ");for(i=1;i<=m;i++)for(j=i+1;j<=m;j++)if(x[j]+0<x[i]+0){tt=x[i];x[i]=x[j];x[j]=tt};
                   return sprintf("%d %.3f %.3f", m, x[int((m+1)/2)], x[int(m*0.9)>0?int(m*0.9):1])}
                 END{for(k in v) printf "    %-10s %s\n", k, st(v[k])}' | sort
    fi
    if [ "$COH_GUEST_PCAP" = 1 ] && [ -s "$gpcap" ]; then
        echo "  per call (ms; guest = the guest's eth0, host = lo at our server): RDMA (guest :20049)"
        bash "$ROOT/scripts/latency-split.sh" "$gpcap" "$pcap" 20049 "$COH_RDMA_PORT"
        echo "  TCP (guest :2049)"
        bash "$ROOT/scripts/latency-split.sh" "$gpcap" "$pcap" 2049 "$COH_TCP_PORT"
    fi
    if kill -0 "$C_PID" 2>/dev/null; then pass "coherence-server-alive"; else fail "coherence-server-alive: nfsrdma serve exited (log: $log)"; fi
    echo "  server delegation log totals: $(deleg_counts "$log")"
    grep -iE 'panic|error' "$log" | head -5 | sed 's/^/  server: /'
    coherence_cleanup; C_PID=; C_BASE_PID=; C_WATCH_PID=; C_EXPORT=; C_BASE_EXPORT=
}

# ---- phase conformance (issue 14 item 8): the kernel client against one
# `nfsrdma serve --transports tcp,rdma --rpcbind-port` export, mounted by
# its path on the host, over TCP and over RDMA (guest siw -> softrnic):
# interop/guest/conformance.sh. The guest reaches NFS/TCP at :2049,
# NFS/RDMA at :20049, MOUNT at :20048 and the server's rpcbind at :111; the
# NFS and MOUNT TCP ports are also forwarded 1:1, since the rpcbind answers
# (NLM for the v3 mount without nolock) name the host ports. Afterwards the
# server's own COPY counter (`serve --metrics`, nfs4_ops_total) must
# have counted a successful COPY per transport.
F_PID=; F_EXPORT=; F_TCPDUMP_PID=; F_VM_PID=
conformance_cleanup() {
    [ -n "$F_VM_PID" ] && kill "$F_VM_PID" 2>/dev/null && wait "$F_VM_PID" 2>/dev/null
    [ -n "$F_TCPDUMP_PID" ] && kill -INT "$F_TCPDUMP_PID" 2>/dev/null
    if [ -n "$F_PID" ] && kill -INT "$F_PID" 2>/dev/null; then
        for _ in $(seq 100); do kill -0 "$F_PID" 2>/dev/null || break; sleep 0.1; done
    fi
    [ -n "$F_EXPORT" ] && rm -rf "$F_EXPORT"
}
# conf_copies: successful COPYs the running conformance server counted
conf_copies() {
    curl -s "http://127.0.0.1:$CONF_METRICS_PORT/metrics" |
        awk '/^nfs4_ops_total\{/ && /op="COPY"/ && /status="NFS4_OK"/ {n += $NF} END {print n + 0}'
}
conformance_phase() {
    local G=$OUT/guest-conformance p rc t0 log=$OUT/server-conformance.log n_pass n_fail
    local ports="$CONF_TCP_PORT $CONF_RDMA_PORT $CONF_MOUNT_PORT $CONF_RPCBIND_PORT $CONF_METRICS_PORT"
    for p in $ports $CONF_SMNOTIFY_PORT $CONF_STATD_PORT $CONF_LOCKD_PORT; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            fail "conformance: host port $p is in use; set CONF_*_PORT"; return
        fi
    done
    mkdir -p "$G"
    # Not under /tmp on hosts where /tmp is a tmpfs without user xattrs.
    F_EXPORT=$(mktemp -d "$OUT/conformance-export.XXXXXX")
    chmod 0777 "$F_EXPORT"; touch "$F_EXPORT/marker"
    echo "== nfsrdma serve $F_EXPORT: TCP :$CONF_TCP_PORT, RDMA :$CONF_RDMA_PORT, MOUNT :$CONF_MOUNT_PORT, rpcbind :$CONF_RPCBIND_PORT"
    # SM_NOTIFY after a restart goes to the guest's rpcbind (host
    # :$CONF_SMNOTIFY_PORT -> guest :111) naming the server as the guest
    # mounted it (10.0.2.100), and from there to the guest's statd on
    # :$CONF_STATD_PORT (forwarded 1:1).
    conf_start() {
        RUST_LOG=${CONF_RUST_LOG:-info} "$BIN" serve "$F_EXPORT" --transports tcp,rdma --addr 127.0.0.1 \
            --port "$CONF_TCP_PORT" --rdma-port "$CONF_RDMA_PORT" --mount-port "$CONF_MOUNT_PORT" \
            --rpcbind-port "$CONF_RPCBIND_PORT" --metrics "127.0.0.1:$CONF_METRICS_PORT" --no-root-squash \
            --grace-time "$CONF_GRACE" --sm-notify-port "$CONF_SMNOTIFY_PORT" --nsm-name 10.0.2.100 \
            --state-dir "$OUT/state-conformance" >> "$log" 2>&1 &
        F_PID=$!
    }
    conf_listening() {
        for p in $ports; do
            for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$p")" ] && break; sleep 0.1; done
            [ -n "$(ss -Hltn "sport = :$p")" ] || return 1
        done
    }
    : > "$log"; : > "$OUT/conformance-copies"
    conf_start
    conf_listening || { fail "conformance: no server on :$p (log: $log)"; conformance_cleanup; F_PID=; F_EXPORT=; return; }
    if [ "$CAPTURE" = 1 ]; then # NFS, NLM and rpcbind over TCP (RDMA traffic is not decoded here)
        tcpdump -i lo -s 0 -B 262144 -U -w "$OUT/conformance-tcp.pcap" \
            "tcp port $CONF_TCP_PORT or tcp port $CONF_RPCBIND_PORT" > /dev/null 2> "$OUT/tcpdump-conformance.log" &
        F_TCPDUMP_PID=$!
        for _ in $(seq 50); do grep -q 'listening on' "$OUT/tcpdump-conformance.log" && break; sleep 0.1; done
    fi
    echo "== kpeer: kernel client conformance over $CONF_PROTOS (v4.0, v4.2, v3 with NLM)"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    KPEER_HOSTFWD="$CONF_SMNOTIFY_PORT:111 $CONF_STATD_PORT:$CONF_STATD_PORT $CONF_LOCKD_PORT:$CONF_LOCKD_PORT" \
    KPEER_GUESTFWD="2049:$CONF_TCP_PORT 20049:$CONF_RDMA_PORT 20048:$CONF_MOUNT_PORT 111:$CONF_RPCBIND_PORT $CONF_TCP_PORT:$CONF_TCP_PORT $CONF_MOUNT_PORT:$CONF_MOUNT_PORT" \
        bash "$KPEER/run.sh" "$ROOT/interop/guest/conformance.sh" "$G" -- "$F_EXPORT" "$CONF_STATD_PORT" "$CONF_LOCKD_PORT" $CONF_PROTOS \
        > "$OUT/run-conformance.log" 2>&1 &
    F_VM_PID=$!
    local n=1
    # The guest asks for a server restart under held locks (restart-server-N
    # in its output dir): same export and state directory, new process.
    while kill -0 "$F_VM_PID" 2>/dev/null; do
        if [ -e "$G/restart-server-$n" ]; then
            conf_copies >> "$OUT/conformance-copies" # the counters restart with it
            kill -INT "$F_PID"
            for _ in $(seq 100); do kill -0 "$F_PID" 2>/dev/null || break; sleep 0.1; done
            wait "$F_PID" 2>/dev/null
            echo "--- restart $n at $(date +%T.%N)" >> "$log"
            conf_start
            conf_listening && touch "$G/server-restarted-$n"
            n=$((n + 1))
        fi
        sleep 0.2
    done
    wait "$F_VM_PID"; rc=$?; F_VM_PID=
    [ -n "$F_TCPDUMP_PID" ] && { sleep 0.5; kill -INT "$F_TCPDUMP_PID"; wait "$F_TCPDUMP_PID" 2>/dev/null; F_TCPDUMP_PID=; }
    grep -E '^(PASS|FAIL|INFO)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    grep -E 'restart [0-9]|SM_NOTIFY|grace period' "$log" | sed 's/^/  server: /'
    n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-conformance: $n_pass guest checks passed ($CONF_PROTOS, VM $(( $(date +%s) - t0 )) s)"
    else
        fail "kernel-conformance: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log)"
    fi
    local copies want
    want=$(echo $CONF_PROTOS | wc -w)
    copies=$( (cat "$OUT/conformance-copies"; conf_copies) | awk '{n += $1} END {print n + 0}')
    if [ "$copies" -ge "$want" ]; then
        pass "conformance-server-counted-COPY: $copies successful COPY operations (nfs4_ops_total)"
    else
        fail "conformance-server-counted-COPY: $copies successful COPY operations, want at least $want"
    fi
    if kill -0 "$F_PID" 2>/dev/null; then pass "conformance-server-alive"; else fail "conformance-server-alive: nfsrdma serve exited (log: $log)"; fi
    grep -E 'panicked| ERROR | WARN ' "$log" | head -5 | sed 's/^/  server: /'
    conformance_cleanup; F_PID=; F_EXPORT=
}

# ---- phase verbs (issue 13): nfsrdma on the kernel's verbs in the guest.
# One VM boot per device of VERBS_DEVS (default "siw0 rxe0"); each runs
# interop/kpeer/guest/verbs.sh with the host-built release binary (the guest
# is Debian bookworm like the host), which prints PASS/FAIL/INFO lines: our
# server on the device under the kernel client (v3 and v4.1), our client on
# the device against knfsd, perftest figures. VERBS_BULK_MIB (default 100).
#
# Cross-device (iWARP devices, siw*; softrnic is iWARP, so rxe's RoCE cannot
# reach it): the host runs `nfsrdma serve --rdma-device soft` on
# 127.0.0.1:$VERBS_SOFT_PORT (MOUNT :$VERBS_SOFT_MOUNT_PORT, TCP
# :$VERBS_SOFT_TCP_PORT), guestfwd as guest 10.0.2.100:20049/:20048, and
# the guest's verbs client copies a VERBS_XDEV_MIB (default 16) file to it
# and back (v3) and reads it with v4.1; the guest's server on the device is
# hostfwd from host :$VERBS_FWD_PORT/:$VERBS_FWD_MOUNT_PORT and the host's
# softrnic client (verbs_xdev_host) lists it, copies the file to it and
# back. Both sides check the bytes: the host its export's copy, the guest
# its server's copy. VERBS_XDEV_MIB=0 skips this part.
V_PID=; V_EXPORT=; V_WATCH_PID=
verbs_cleanup() {
    [ -n "$V_WATCH_PID" ] && kill "$V_WATCH_PID" 2>/dev/null
    [ -n "$V_PID" ] && kill -INT "$V_PID" 2>/dev/null && wait "$V_PID" 2>/dev/null
    [ -n "$V_EXPORT" ] && rm -rf "$V_EXPORT"
    V_PID=; V_EXPORT=; V_WATCH_PID=
}
# verbs_xdev_host G: waits for the guest's xdev-ready, then the host's
# softrnic client against the guest's server on verbs; PASS/FAIL lines into
# G/xdev-host.txt, then G/xdev-done for the guest.
verbs_xdev_host() {
    local G=$1 rp mp u q r=$G/xdev-host.txt
    while [ ! -e "$G/xdev-ready" ]; do [ -e "$G/rc" ] && return; sleep 0.5; done
    rp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20050$/\1/p' "$G/hostfwd.txt")
    mp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20058$/\1/p' "$G/hostfwd.txt")
    u="nfs+rdma://127.0.0.1:$rp/srv/ours" q="?mountport=$mp&device=soft"
    xcheck() { # name command...
        local name=$1; shift
        if timeout 300 "$@" > "$G/xdev-$name.log" 2>&1; then echo "PASS host/xdev-softrnic-client/$name" >> "$r"
        else echo "FAIL host/xdev-softrnic-client/$name: rc $?: $(tail -2 "$G/xdev-$name.log" | tr '\n' ' ')" >> "$r"; fi
    }
    xcheck ls "$BIN" ls "$u/$q"
    xcheck cp-to-guest "$BIN" cp "$G/xdev-src.bin" "$u/xdev-from-host.bin$q"
    xcheck cp-from-guest-byte-exact sh -c "'$BIN' cp '$u/xdev-from-host.bin$q' '$G/xdev.back' && cmp '$G/xdev-src.bin' '$G/xdev.back'"
    rm -f "$G/xdev.back"
    touch "$G/xdev-done"
}
verbs_phase() {
    local dev G rc n_pass n_fail t0 xdev hostfwd guestfwd
    for dev in $VERBS_DEVS; do
        G=$OUT/guest-verbs-$dev
        mkdir -p "$G/bin"
        rm -f "$G/xdev" "$G/xdev-ready" "$G/xdev-done" "$G/xdev-host.txt" "$G/rc"
        cp "$BIN" "$G/bin/nfsrdma"
        xdev=0; hostfwd=none; guestfwd=none
        if [ "$VERBS_XDEV_MIB" -gt 0 ] && [[ $dev == siw* ]]; then
            verbs_xdev_server && xdev=1
        fi
        if [ "$xdev" = 1 ]; then
            head -c $((VERBS_XDEV_MIB * 1048576)) /dev/urandom > "$G/xdev-src.bin"
            echo "$VERBS_XDEV_MIB" > "$G/xdev"
            hostfwd="$VERBS_FWD_PORT:20050 $VERBS_FWD_MOUNT_PORT:20058"
            guestfwd="20049:$VERBS_SOFT_PORT 20048:$VERBS_SOFT_MOUNT_PORT"
            verbs_xdev_host "$G" & V_WATCH_PID=$!
        fi
        echo "== kpeer: nfsrdma on verbs ($dev) in the guest"
        t0=$(date +%s)
        KPEER_HOSTFWD=$hostfwd KPEER_GUESTFWD=$guestfwd \
            bash "$KPEER/run.sh" "$KPEER/guest/verbs.sh" "$G" -- "$dev" "$VERBS_BULK_MIB" \
            > "$OUT/run-verbs-$dev.log" 2>&1
        rc=$?
        rm -f "$G/bin/nfsrdma"
        grep -E '^(PASS|FAIL|INFO)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
        n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
        n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
        if [ "$rc" = 0 ] && [ "$n_pass" -gt 0 ]; then
            pass "verbs-$dev: $n_pass guest checks passed (VM $(( $(date +%s) - t0 )) s)"
        else
            fail "verbs-$dev: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log)"
        fi
        if [ "$xdev" = 1 ]; then
            wait "$V_WATCH_PID" 2>/dev/null; V_WATCH_PID=
            verbs_xdev_report "$G" "$dev"
            rm -f "$G/xdev-src.bin"
            verbs_cleanup
        fi
    done
}
# verbs_xdev_server: the host's softrnic server for the guest's verbs client.
verbs_xdev_server() {
    local p
    for p in "$VERBS_SOFT_PORT" "$VERBS_SOFT_MOUNT_PORT" "$VERBS_SOFT_TCP_PORT"; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            fail "verbs-xdev: host port $p is in use; set VERBS_SOFT_PORT/VERBS_SOFT_MOUNT_PORT/VERBS_SOFT_TCP_PORT"; return 1
        fi
    done
    V_EXPORT=$(mktemp -d /tmp/interop-verbs-export.XXXXXX)
    chmod 0777 "$V_EXPORT"
    RUST_LOG=${RUST_LOG:-warn} "$BIN" serve "$V_EXPORT" --transports tcp,rdma --addr 127.0.0.1 --rdma-device soft \
        --port "$VERBS_SOFT_TCP_PORT" --rdma-port "$VERBS_SOFT_PORT" --mount-port "$VERBS_SOFT_MOUNT_PORT" \
        --alias /export --no-root-squash --state-dir "$OUT/state-verbs" > "$OUT/server-verbs-soft.log" 2>&1 &
    V_PID=$!
    for _ in $(seq 50); do
        [ -n "$(ss -Hltn "sport = :$VERBS_SOFT_PORT")" ] && [ -n "$(ss -Hltn "sport = :$VERBS_SOFT_MOUNT_PORT")" ] && return 0
        sleep 0.1
    done
    fail "verbs-xdev: the host's softrnic server did not start (log: $OUT/server-verbs-soft.log)"
    verbs_cleanup; return 1
}
# verbs_xdev_report G DEV: the host's checks (its client's, and its export's
# copy of the guest's file) and the host server's fate.
verbs_xdev_report() {
    local G=$1 dev=$2 l
    if [ -s "$G/xdev-host.txt" ]; then
        while read -r l; do
            case $l in PASS*) pass "verbs-$dev: ${l#PASS }" ;; *) fail "verbs-$dev: ${l#FAIL }" ;; esac
        done < "$G/xdev-host.txt"
    else
        fail "verbs-$dev: host/xdev-softrnic-client: the guest's server was never ready"
    fi
    if cmp -s "$G/xdev-src.bin" "$V_EXPORT/xdev-from-guest.bin"; then
        pass "verbs-$dev: host/xdev-softrnic-server/host-has-guest-bytes"
    else
        fail "verbs-$dev: host/xdev-softrnic-server/host-has-guest-bytes: the export's copy differs or is missing"
    fi
    if kill -0 "$V_PID" 2>/dev/null; then pass "verbs-$dev: host/xdev-softrnic-server/alive"
    else fail "verbs-$dev: host/xdev-softrnic-server/alive: exited (log: $OUT/server-verbs-soft.log)"; fi
    grep -iE 'panic|error' "$OUT/server-verbs-soft.log" | head -5 | sed 's/^/  host server: /'
}

# ---- phase verbs-bench (issue 13 item 4): one run of the guest benchmarks
# per device of VERBS_DEVS (interop/kpeer/guest/verbs-bench.sh): our server
# on the device vs knfsd on the same device with the same kernel client
# (sequential write/read of VERBS_BENCH_MIB, default 128, and
# VERBS_BENCH_OPS, default 1000, 4 KiB direct I/Os), our NFS read as a
# fraction of ib_read_bw, RDMA vs TCP with our server's CPU per GiB. Under
# TCG one device takes ~15 min at 256 MiB / 2000 ops, more than run.sh's
# default VM time limit: the VM gets VERBS_BENCH_TIMEOUT (2400 s).
# Not in .ci/run (figures, not checks); docs/verbs.md has the results.
verbs_bench_phase() {
    local dev G rc t0
    for dev in $VERBS_DEVS; do
        G=$OUT/guest-verbs-bench-$dev
        mkdir -p "$G/bin"
        cp "$BIN" "$G/bin/nfsrdma"
        echo "== kpeer: guest benchmarks on verbs ($dev)"
        t0=$(date +%s)
        KPEER_HOSTFWD=none KPEER_GUESTFWD=none KPEER_TIMEOUT=$VERBS_BENCH_TIMEOUT \
            bash "$KPEER/run.sh" "$KPEER/guest/verbs-bench.sh" "$G" -- "$dev" "$VERBS_BENCH_MIB" "$VERBS_BENCH_OPS" \
            > "$OUT/run-verbs-bench-$dev.log" 2>&1
        rc=$?
        rm -f "$G/bin/nfsrdma"
        grep -E '^(FAIL|INFO|SUMMARY)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
        if [ "$rc" = 0 ]; then
            pass "verbs-bench-$dev: every measurement ran (VM $(( $(date +%s) - t0 )) s; figures: $G/results.txt)"
        else
            fail "verbs-bench-$dev: guest rc $rc (log: $G/guest.log)"
        fi
    done
}

if [ "${NO_BUILD:-0}" != 1 ]; then
    echo "== building nfsrdma (release)"
    if ! (cd "$ROOT" && cargo build --release -p nfsrdma > "$OUT/build.log" 2>&1); then
        tail -5 "$OUT/build.log" >&2
        echo "build failed (NO_BUILD=1 uses the last binary)" >&2; exit 2
    fi
fi
BIN=${NFSRDMA_BIN:-$TARGET_DIR/release/nfsrdma}
[ -x "$BIN" ] || { echo "no $BIN" >&2; exit 2; }
bash "$KPEER/build.sh" > "$OUT/kpeer-build.log" 2>&1 ||
    { echo "kpeer build.sh failed: see $OUT/kpeer-build.log" >&2; exit 2; }


if has_phase tcp; then
# ---- phase tcp: the kernel NFSv3/TCP client against nfsrdma serve
    for p in "$NFS_PORT" "$MOUNT_PORT" "$RPCBIND_PORT" "$RO_PORT" "$RO_MOUNT_PORT"; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            echo "host port $p is in use; set NFS_PORT/MOUNT_PORT/RPCBIND_PORT/RO_PORT/RO_MOUNT_PORT" >&2; exit 2
        fi
    done


    EXPORT=$(mktemp -d /tmp/interop-export.XXXXXX)
    chmod 0777 "$EXPORT"
    echo "== nfsrdma serve $EXPORT on 127.0.0.1:$NFS_PORT (MOUNT :$MOUNT_PORT, rpcbind :$RPCBIND_PORT)"
    listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }
    start_server() { # writes the pid to $OUT/server.pid; 0 once all listeners are up
        RUST_LOG=${RUST_LOG:-warn} "$BIN" serve "$EXPORT" --transports tcp --addr 127.0.0.1 --port "$NFS_PORT" \
            --mount-port "$MOUNT_PORT" --rpcbind-port "$RPCBIND_PORT" --alias /export --no-root-squash \
            --state-dir "$OUT/state" >> "$OUT/server.log" 2>&1 &
        echo $! > "$OUT/server.pid"
        for _ in $(seq 50); do
            listening "$RPCBIND_PORT" && return 0
            kill -0 "$(cat "$OUT/server.pid")" 2>/dev/null || return 1
            sleep 0.1
        done
        return 1
    }
    start_server || { echo "server did not start:" >&2; cat "$OUT/server.log" >&2; exit 2; }
    SRV_PID=$(cat "$OUT/server.pid")
    RUST_LOG=${RUST_LOG:-warn} "$BIN" serve "$EXPORT" --transports tcp --addr 127.0.0.1 --port "$RO_PORT" \
        --mount-port "$RO_MOUNT_PORT" --read-only --alias /export --no-root-squash \
        --state-dir "$OUT/state-ro" > "$OUT/server-ro.log" 2>&1 &
    RO_PID=$!
    for _ in $(seq 50); do listening "$RO_MOUNT_PORT" && break; sleep 0.1; done
    listening "$RO_MOUNT_PORT" || { echo "read-only server did not start:" >&2; cat "$OUT/server-ro.log" >&2; exit 2; }

    # Restart the server when the guest asks (restart phase of the guest script).
    (
        while [ ! -e "$OUT/guest/restart-server" ]; do
            [ -e "$OUT/guest/rc" ] && exit 0
            sleep 0.2
        done
        p=$(cat "$OUT/server.pid")
        kill -INT "$p"
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        echo "--- restarted" >> "$OUT/server.log"
        start_server && touch "$OUT/guest/server-restarted"
    ) &
    RESTART_PID=$!

    PCAP=$OUT/nfs3-tcp.pcap
    PCAP2=$OUT/nfs3-tcp-rpcbind.pcap
    FILTER="tcp port $NFS_PORT or tcp port $MOUNT_PORT or tcp port $RPCBIND_PORT or tcp port $RO_PORT or tcp port $RO_MOUNT_PORT"
    start_capture() { # PCAP LOG -> prints tcpdump's pid once it listens
        tcpdump -i lo -s 0 -B 262144 -U -w "$1" "$FILTER" > /dev/null 2> "$2" &
        local pid=$!
        for _ in $(seq 50); do grep -q 'listening on' "$2" && break; sleep 0.1; done
        echo "$pid"
    }
    if [ "$CAPTURE" = 1 ]; then
        TCPDUMP_PID=$(start_capture "$PCAP" "$OUT/tcpdump.log")
        # Stop the capture when the guest reaches the bulk copies, then capture
        # the rpcbind phase into a second file (see the guest script's header).
        (
            while [ ! -e "$OUT/guest/capture-stop" ]; do
                [ -e "$OUT/guest/rc" ] && exit 0
                sleep 0.2
            done
            sleep 0.5
            kill -INT "$TCPDUMP_PID" 2>/dev/null
            touch "$OUT/guest/capture-stopped"
            while [ ! -e "$OUT/guest/capture2-start" ]; do
                [ -e "$OUT/guest/rc" ] && exit 0
                sleep 0.2
            done
            start_capture "$PCAP2" "$OUT/tcpdump2.log" > "$OUT/tcpdump2.pid"
            touch "$OUT/guest/capture2-started"
        ) &
        WATCH_PID=$!
    fi

    echo "== kpeer: kernel NFSv3/TCP client -> our server"
    KPEER_HOSTFWD=none \
    KPEER_GUESTFWD="2049:$NFS_PORT 20048:$MOUNT_PORT 111:$RPCBIND_PORT $NFS_PORT:$NFS_PORT $MOUNT_PORT:$MOUNT_PORT 2059:$RO_PORT 20058:$RO_MOUNT_PORT" \
        bash "$KPEER/run.sh" "$ROOT/interop/guest/nfs3-tcp.sh" "$OUT/guest" \
        -- 2049 20048 /export "$BULK_MIB" 1 2059 20058 > "$OUT/run.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|INFO)' "$OUT/guest/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    n_pass=$(grep -c '^PASS' "$OUT/guest/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$OUT/guest/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-nfs3-tcp: $n_pass guest checks passed"
    else
        fail "kernel-nfs3-tcp: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $OUT/guest/guest.log)"
    fi

    check_pcap() { # NAME PCAP
        local name=$1 pcap=$2 txt=$OUT/check-$1.txt
        if [ ! -s "$pcap" ]; then fail "$name: no capture ($pcap)"; return; fi
        if bash "$PEERS/check-pcap.sh" "$pcap" -d "tcp.port==$NFS_PORT,rpc" -d "tcp.port==$MOUNT_PORT,rpc" \
            -d "tcp.port==$RPCBIND_PORT,rpc" -d "tcp.port==$RO_PORT,rpc" -d "tcp.port==$RO_MOUNT_PORT,rpc" \
            > "$txt" 2>&1; then
            pass "$name: $(grep -m1 '^==' "$txt" | sed 's/.*: //'), no malformed frames"
        else
            fail "$name: $(grep -E 'malformed frames|RESULT|tshark failed' "$txt" | tr '\n' ' ') (see $txt)"
        fi
        sed -n '/RPC calls by program/,/NFSv3 procedures/p' "$txt" | grep -v 'NFSv3 procedures' | sed 's/^/  /'
        grep -E '^ +[0-9]+ +v3 NFS3ERR|RPC replies not' "$txt" | sort -u | sed 's/^/  /'
    }
    if [ "$CAPTURE" = 1 ]; then
        kill "$WATCH_PID" 2>/dev/null; wait "$WATCH_PID" 2>/dev/null; WATCH_PID=
        kill -INT "$TCPDUMP_PID" 2>/dev/null; TCPDUMP_PID=
        [ -s "$OUT/tcpdump2.pid" ] && kill -INT "$(cat "$OUT/tcpdump2.pid")" 2>/dev/null
        sleep 1
        rm -f "$OUT/tcpdump2.pid"
        grep -HE 'packets (captured|dropped by kernel)' "$OUT"/tcpdump*.log | sed "s|^$OUT/|  |"
        check_pcap pcap-tshark "$PCAP"
        check_pcap pcap-tshark-rpcbind-phase "$PCAP2"
    fi

    kill "$RESTART_PID" 2>/dev/null; RESTART_PID=
    SRV_PID=$(cat "$OUT/server.pid")
    if kill -0 "$SRV_PID" 2>/dev/null && kill -0 "$RO_PID" 2>/dev/null; then
        pass "servers-alive"
    else
        fail "servers-alive: an nfsrdma serve exited (logs: $OUT/server*.log)"
    fi
    grep -iE 'panic|error' "$OUT"/server*.log | head -5 | sed 's/^/  server: /'
fi

if has_phase rdma; then
    rdma_phase
fi
if has_phase verbs; then
    verbs_phase
fi
if has_phase verbs-bench; then
    verbs_bench_phase
fi
if has_phase knfsd; then
    knfsd_phase
fi
if has_phase coherence; then
    coherence_phase
fi
if has_phase conformance; then
    conformance_phase
fi
if has_phase pnfs; then
    pnfs_phase
fi
if has_phase krb5; then
    krb5_phase
fi
echo "wall time: $(( $(date +%s) - T0 )) s; results in $OUT"
[ "$FAILS" -eq 0 ]
