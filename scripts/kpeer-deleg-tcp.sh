#!/bin/bash
# scripts/kpeer-deleg-tcp.sh — kernel check of the NFSv4.1 back channel over
# TCP (issue 14 item 2; docs/conformance.md "Back channel"): the Linux
# kernel client in the kpeer VM mounts `nfsrdma serve` with vers=4.1,
# proto=tcp and holds a file open for writing (interop/kpeer/guest/deleg-tcp.sh);
# the host changes the file locally once the server has granted the
# delegation, which recalls it. PASS when the server probed the back
# channel on the client's TCP connection (CB_NULL), granted a write
# delegation, the kernel answered CB_RECALL, and its mountstats count a
# DELEGRETURN.
#
# Env: BIN (default target/release/nfsrdma, else target/debug/nfsrdma),
# OUT (default /tmp/kpeer-deleg-tcp-<time>), NFS_PORT / MOUNT_PORT (host
# ports, default 13049 / 13048), KPEER (default interop/kpeer). Needs the
# kpeer VM image (interop/kpeer/build.sh). Wall time: about 2 minutes (TCG).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KPEER=${KPEER:-$ROOT/interop/kpeer}
BIN=${BIN:-$ROOT/target/release/nfsrdma}
[ -x "$BIN" ] || BIN=$ROOT/target/debug/nfsrdma
OUT=${OUT:-/tmp/kpeer-deleg-tcp-$(date +%Y%m%d-%H%M%S)}
NFS_PORT=${NFS_PORT:-13049}
MOUNT_PORT=${MOUNT_PORT:-13048}
mkdir -p "$OUT/export" "$OUT/state"
chmod 777 "$OUT/export"
LOG=$OUT/serve.log
RUST_LOG=info "$BIN" serve "$OUT/export" --addr 127.0.0.1 --port "$NFS_PORT" \
    --mount-port "$MOUNT_PORT" --transports tcp --state-dir "$OUT/state" > "$LOG" 2>&1 &
SP=$!
sleep 2
# Once the delegation is out, change the file on the host: a conflicting
# local access, which the server answers with CB_RECALL.
( for _ in $(seq 1 600); do
    if grep -q "delegation granted" "$LOG"; then
        sleep 3; echo from-host >> "$OUT/export/d.txt"; break
    fi
    sleep 1
  done ) &
HP=$!
KPEER_TIMEOUT=600 KPEER_HOSTFWD=none KPEER_GUESTFWD="2049:$NFS_PORT 20048:$MOUNT_PORT" \
    "$KPEER/run.sh" "$KPEER/guest/deleg-tcp.sh" "$OUT/vm" -- 2049 "$OUT/export"
rc=$?
kill $HP 2>/dev/null
kill $SP 2>/dev/null; wait $SP 2>/dev/null
plain() { sed 's/\x1b\[[0-9;]*m//g' "$LOG"; }
fail=0
check() {
    if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fail=1; fi
}
check "guest script ran" '[ $rc = 0 ]'
check "CB_NULL probe on the client's TCP connection" 'plain | grep -q "CB_NULL probe.*transport=Tcp ok=true"'
check "write delegation granted" 'plain | grep -q "delegation granted.*write=true"'
check "CB_RECALL answered by the kernel" 'plain | grep -q "CB_RECALL answered NFS4_OK"'
check "kernel sent DELEGRETURN" 'grep -qE "DELEGRETURN: [1-9]" "$OUT/vm/guest.log"'
plain | grep -E "CB_|delegation" | head -20
exit $fail
