#!/bin/bash
# scripts/interop.sh — the interop tier: real peers against our code.
#
# Check 1 (NFSv3 over TCP, Linux kernel client): builds nfsrdma (release),
# runs `nfsrdma serve` on a fresh temporary export on the host, boots the kpeer
# VM (/work/shared/kpeer: Debian 6.1 kernel under qemu) and runs
# interop/guest/nfs3-tcp.sh in it: the kernel client mounts our server with
# vers=3,proto=tcp and checks listing, 8 MiB / 10 B / 100 KiB files byte-exact
# after a remount, overwrite/append/truncate, READDIRPLUS of 50 and 1000
# files, rm -rf of 1000 files, rename, symlink, hard link, chmod/chown/utimes,
# mkfifo, exclusive create, 255/256-byte and UTF-8 names, a 5 GB offset,
# O_SYNC and O_DIRECT I/O, parallel writers, a BULK_MIB (default 100) copy
# both ways, and mountstats (xprt tcp, no retransmissions). The host
# captures the traffic on lo (tcpdump) for every phase except the bulk
# copies and checks it with tshark (/work/shared/peers/check-pcap.sh: no
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
# 100), KPEER (default /work/shared/kpeer), CAPTURE=0 to skip the pcaps,
# NO_BUILD=1 to use the existing target/release/nfsrdma.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KPEER=${KPEER:-/work/shared/kpeer}
PEERS=${PEERS:-/work/shared/peers}
OUT=${OUT:-/tmp/interop-$(date +%Y%m%d-%H%M%S)}
NFS_PORT=${NFS_PORT:-12049}
MOUNT_PORT=${MOUNT_PORT:-12048}
RPCBIND_PORT=${RPCBIND_PORT:-12111}
RO_PORT=${RO_PORT:-12059}
RO_MOUNT_PORT=${RO_MOUNT_PORT:-12058}
BULK_MIB=${BULK_MIB:-100}
CAPTURE=${CAPTURE:-1}
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
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for p in "$NFS_PORT" "$MOUNT_PORT" "$RPCBIND_PORT" "$RO_PORT" "$RO_MOUNT_PORT"; do
    if [ -n "$(ss -Hltn "sport = :$p")" ]; then
        echo "host port $p is in use; set NFS_PORT/MOUNT_PORT/RPCBIND_PORT/RO_PORT/RO_MOUNT_PORT" >&2; exit 2
    fi
done

if [ "${NO_BUILD:-0}" != 1 ]; then
    echo "== building nfsrdma (release)"
    if ! (cd "$ROOT" && cargo build --release -p nfsrdma > "$OUT/build.log" 2>&1); then
        tail -5 "$OUT/build.log" >&2
        echo "build failed (NO_BUILD=1 uses the last binary)" >&2; exit 2
    fi
fi
BIN=$ROOT/target/release/nfsrdma
[ -x "$BIN" ] || { echo "no $BIN" >&2; exit 2; }
bash "$KPEER/build.sh" > "$OUT/kpeer-build.log" 2>&1 ||
    { echo "kpeer build.sh failed: see $OUT/kpeer-build.log" >&2; exit 2; }

EXPORT=$(mktemp -d /tmp/interop-export.XXXXXX)
chmod 0777 "$EXPORT"
echo "== nfsrdma serve $EXPORT on 127.0.0.1:$NFS_PORT (MOUNT :$MOUNT_PORT, rpcbind :$RPCBIND_PORT)"
listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }
start_server() { # writes the pid to $OUT/server.pid; 0 once all listeners are up
    RUST_LOG=${RUST_LOG:-warn} "$BIN" serve "$EXPORT" --transports tcp --addr 127.0.0.1 --port "$NFS_PORT" \
        --mount-port "$MOUNT_PORT" --rpcbind-port "$RPCBIND_PORT" --alias /export \
        >> "$OUT/server.log" 2>&1 &
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
    --mount-port "$RO_MOUNT_PORT" --read-only --alias /export > "$OUT/server-ro.log" 2>&1 &
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
echo "wall time: $(( $(date +%s) - T0 )) s; results in $OUT"
[ "$FAILS" -eq 0 ]
