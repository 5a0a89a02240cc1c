# scripts/interop-pnfs.sh — phase "pnfs" of scripts/interop.sh (sourced by
# it; issue 18, docs/pnfs.md): the kernel's flex-files layout driver
# against an nfsrdma pNFS metadata server (MDS) over two nfsrdma NFSv3 data
# servers (DSes), all on the host.
#
# The MDS serves TCP :$PNFS_MDS_PORT, RDMA :$PNFS_MDS_RDMA_PORT and MOUNT
# :$PNFS_MDS_MOUNT_PORT (guest 10.0.2.100:2049, :20049, :20048); DS i
# (1, 2) serves TCP :$PNFS_DS_PORT+10(i-1), MOUNT +1, RDMA +2 and metrics
# +3, forwarded 1:1 so that the addresses GETDEVICEINFO gives
# (`advertise=10.0.2.100`, the DS's own ports) reach it from the guest.
# The guest runs interop/guest/pnfs.sh (PNFS_PROTOS, default "tcp";
# PNFS_VERS "4.1 4.2"; PNFS_FILES 8 of PNFS_FILE_MIB 4 MiB). Afterwards
# the host reports: the bytes each DS holds (data files' sizes) and its
# NFSv3 READ/WRITE calls (`serve --metrics`), the MDS's own READ/WRITE
# calls, and the CB_LAYOUTRECALLs the truncations caused (MDS log).
#
# With PNFS_KNFSD=1 (default) a third DS is the guest's own knfsd: an
# NFSv3 export /srv/pnfs-ds on NFS port PNFS_DS_PORT+20 and MOUNT +21
# (23030, 23031), forwarded 1:1 from the host so the MDS's control path
# (TCP) reaches it at 127.0.0.1 and clients at 10.0.2.15 (advertise=),
# the same ports. The guest reports the bytes it holds.
#
# Ports: PNFS_MDS_PORT / PNFS_MDS_RDMA_PORT / PNFS_MDS_MOUNT_PORT /
# PNFS_MDS_METRICS_PORT (23000 / 23001 / 23002 / 23003), PNFS_DS_PORT
# (23010: DS 1 uses 23010-23013, DS 2 23020-23023, the knfsd DS
# 23030-23031).
PNFS_MDS_PORT=${PNFS_MDS_PORT:-23000}
PNFS_MDS_RDMA_PORT=${PNFS_MDS_RDMA_PORT:-23001}
PNFS_MDS_MOUNT_PORT=${PNFS_MDS_MOUNT_PORT:-23002}
PNFS_MDS_METRICS_PORT=${PNFS_MDS_METRICS_PORT:-23003}
PNFS_DS_PORT=${PNFS_DS_PORT:-23010}
PNFS_PROTOS=${PNFS_PROTOS:-tcp}
PNFS_VERS=${PNFS_VERS:-4.1 4.2}
PNFS_FILES=${PNFS_FILES:-8}
PNFS_FILE_MIB=${PNFS_FILE_MIB:-4}
PNFS_KNFSD=${PNFS_KNFSD:-1}
# PNFS_MIRRORS=2: every file mirrored on two DSes (RFC 8435 §8, serve
# --mds-mirrors); with PNFS_KNFSD=0 the host then checks that each data
# file is on both nfsrdma DSes, byte-exact (the kernel wrote both).
PNFS_MIRRORS=${PNFS_MIRRORS:-1}
# PNFS_CASES: what the guest runs per protocol and version (in order):
# basic (write, read cold, truncate, append), chmod (chmod and chown of a
# file with a layout out: recalls), fence (the kernel's WRITE stuck at a
# frozen DS, a recall it cannot answer, fencing after
# PNFS_RECALL_TIMEOUT seconds, `serve --mds-recall-timeout`; then the
# DS thaws), dslost (the DSes vanish for the client while it writes).
# fence and dslost run over TCP only: they need the relay.
PNFS_CASES=${PNFS_CASES:-basic chmod fence dslost}
PNFS_RECALL_TIMEOUT=${PNFS_RECALL_TIMEOUT:-15}
# The relay (scripts/pnfs-relay.py) between the guest and the nfsrdma
# DSes' TCP ports: DS i's at PNFS_RELAY_PORT+i-1 (23040, 23041), its
# control port (the guest drives it) at PNFS_RELAY_PORT+9 (23049).
PNFS_RELAY_PORT=${PNFS_RELAY_PORT:-23040}
P_PIDS=; P_DIRS=
pnfs_cleanup() {
    local p
    for p in $P_PIDS; do kill -INT "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    for p in $P_DIRS; do rm -rf "$p"; done
    P_PIDS=; P_DIRS=
}
# pnfs_calls PORT PROC: NFSv3 calls of procedure number PROC (6 READ, 7
# WRITE) a server counted
pnfs_calls() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk -v p="$2" '/^rpc_calls_total\{/ && /program="nfs"/ && /version="3"/ && $0 ~ "procedure=\"" p "\"" {n += $NF} END {print n + 0}'
}
# pnfs_metric PORT NAME: the value of the unlabelled series NAME (an
# rpcrdma_* transport total) a server exports
pnfs_metric() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk -v m="$2" '$1 == m {n += $NF} END {printf "%d\n", n}'
}
# pnfs_v4ops PORT OP: NFSv4 operations OP a server counted
pnfs_v4ops() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk -v o="$2" '/^nfs4_ops_total\{/ && $0 ~ "op=\"" o "\"" {n += $NF} END {print n + 0}'
}
pnfs_phase() {
    local G=$OUT/guest-pnfs rc t0 i p base ports log=$OUT/server-pnfs-mds.log n_pass n_fail
    local ctl=$((PNFS_RELAY_PORT + 9)) relay_pairs=""
    ports="$PNFS_MDS_PORT $PNFS_MDS_RDMA_PORT $PNFS_MDS_MOUNT_PORT $PNFS_MDS_METRICS_PORT $ctl $PNFS_RELAY_PORT $((PNFS_RELAY_PORT + 1))"
    for i in 1 2; do
        base=$((PNFS_DS_PORT + 10 * (i - 1)))
        ports+=" $base $((base + 1)) $((base + 2)) $((base + 3))"
    done
    for p in $ports; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then fail "pnfs: host port $p is in use; set PNFS_*_PORT"; return; fi
    done
    mkdir -p "$G"
    local mds_dir ds_args="" fwd
    mds_dir=$(mktemp -d /tmp/pnfs-mds.XXXXXX); chmod 0777 "$mds_dir"; P_DIRS="$mds_dir"
    fwd="2049:$PNFS_MDS_PORT 20049:$PNFS_MDS_RDMA_PORT 20048:$PNFS_MDS_MOUNT_PORT"
    local ds_dir=()
    for i in 1 2; do
        base=$((PNFS_DS_PORT + 10 * (i - 1)))
        ds_dir[$i]=$(mktemp -d /tmp/pnfs-ds$i.XXXXXX); P_DIRS+=" ${ds_dir[$i]}"
        echo "== DS $i: nfsrdma serve ${ds_dir[$i]}: TCP :$base, MOUNT :$((base + 1)), RDMA :$((base + 2))"
        RUST_LOG=warn "$BIN" serve "${ds_dir[$i]}" --transports tcp,rdma --addr 127.0.0.1 \
            --port "$base" --mount-port $((base + 1)) --rdma-port $((base + 2)) \
            --metrics "127.0.0.1:$((base + 3))" --no-root-squash --state-dir "$OUT/state-pnfs-ds$i" \
            > "$OUT/server-pnfs-ds$i.log" 2>&1 &
        P_PIDS+=" $!"
        ds_args+=" --data-server nfs://127.0.0.1:$base${ds_dir[$i]}?mountport=$((base + 1))&rdmaport=$((base + 2))&advertise=10.0.2.100"
        # The guest reaches the DS's TCP port through the relay, its RDMA
        # port directly.
        fwd+=" $base:$((PNFS_RELAY_PORT + i - 1)) $((base + 2)):$((base + 2))"
        relay_pairs+=" $((PNFS_RELAY_PORT + i - 1)):$base"
    done
    fwd+=" $ctl:$ctl"
    local kp=$((PNFS_DS_PORT + 20)) hostfwd=none
    if [ "$PNFS_KNFSD" = 1 ]; then
        for p in $kp $((kp + 1)); do
            if [ -n "$(ss -Hltn "sport = :$p")" ]; then fail "pnfs: host port $p is in use; set PNFS_DS_PORT"; pnfs_cleanup; return; fi
        done
        ds_args+=" --data-server nfs://127.0.0.1:$kp/srv/pnfs-ds?mountport=$((kp + 1))&advertise=10.0.2.15"
        hostfwd="$kp:$kp $((kp + 1)):$((kp + 1))"
    fi
    for i in 1 2; do # the DSes up before the MDS (its control path)
        p=$((PNFS_DS_PORT + 10 * (i - 1)))
        for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$p")" ] && break; sleep 0.1; done
    done
    echo "== MDS: nfsrdma serve $mds_dir: TCP :$PNFS_MDS_PORT, RDMA :$PNFS_MDS_RDMA_PORT, MOUNT :$PNFS_MDS_MOUNT_PORT$ds_args"
    # shellcheck disable=SC2086
    RUST_LOG=${PNFS_RUST_LOG:-info,nfs_server::v4::pnfs=debug} "$BIN" serve "$mds_dir" --transports tcp,rdma --addr 127.0.0.1 \
        --port "$PNFS_MDS_PORT" --rdma-port "$PNFS_MDS_RDMA_PORT" --mount-port "$PNFS_MDS_MOUNT_PORT" \
        --metrics "127.0.0.1:$PNFS_MDS_METRICS_PORT" --alias /export --no-root-squash \
        --state-dir "$OUT/state-pnfs-mds" --mds-mirrors "$PNFS_MIRRORS" \
        --mds-recall-timeout "$PNFS_RECALL_TIMEOUT" $ds_args \
        > "$log" 2>&1 &
    P_PIDS+=" $!"
    echo "== relay: control :$ctl,$relay_pairs (guest -> DS TCP)"
    # shellcheck disable=SC2086
    python3 "$ROOT/scripts/pnfs-relay.py" --control "$ctl" --log "$log" \
        --metrics-url "http://127.0.0.1:$PNFS_MDS_METRICS_PORT/metrics" $relay_pairs \
        > "$OUT/relay-pnfs.log" 2>&1 &
    P_PIDS+=" $!"
    for p in $ports; do
        for _ in $(seq 50); do [ -n "$(ss -Hltn "sport = :$p")" ] && break; sleep 0.1; done
        [ -n "$(ss -Hltn "sport = :$p")" ] || { fail "pnfs: no server on :$p (logs: $OUT/server-pnfs-*.log)"; pnfs_cleanup; return; }
    done
    echo "== kpeer: the kernel's flex-files client over $PNFS_PROTOS, NFS $PNFS_VERS"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    KPEER_HOSTFWD="$hostfwd" KPEER_GUESTFWD="$fwd" \
        bash "$KPEER/run.sh" "$ROOT/interop/guest/pnfs.sh" "$G" -- "$PNFS_PROTOS" "$PNFS_VERS" \
        "$PNFS_FILES" "$PNFS_FILE_MIB" "$([ "$PNFS_KNFSD" = 1 ] && echo "$kp")" \
        "$PNFS_CASES" "$ctl" "$PNFS_RECALL_TIMEOUT" > "$OUT/run-pnfs.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|INFO|STATS)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-pnfs: $n_pass guest checks passed (VM $(( $(date +%s) - t0 )) s)"
    else
        fail "kernel-pnfs: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log)"
    fi
    # Where the bytes went: each DS's data files, its READ/WRITE calls;
    # the MDS's own READ/WRITE calls.
    local b1 b2 mr mw
    b1=$(find "${ds_dir[1]}" -type f -printf '%s\n' | awk '{n += $1} END {print n + 0}')
    b2=$(find "${ds_dir[2]}" -type f -printf '%s\n' | awk '{n += $1} END {print n + 0}')
    # The DSes' RPC-over-RDMA totals: bytes of calls received (inline
    # and pulled from read chunks: WRITE data) and of replies pushed into
    # write chunks (READ data). The control path from the MDS is TCP.
    local rin=0 rout=0 ri ro
    for i in 1 2; do
        base=$((PNFS_DS_PORT + 10 * (i - 1)))
        ri=$(( $(pnfs_metric $((base + 3)) rpcrdma_inline_bytes_received) + $(pnfs_metric $((base + 3)) rpcrdma_read_chunk_bytes) ))
        ro=$(( $(pnfs_metric $((base + 3)) rpcrdma_inline_bytes_sent) + $(pnfs_metric $((base + 3)) rpcrdma_write_chunk_bytes) ))
        rin=$((rin + ri)); rout=$((rout + ro))
        echo "  DS $i: $(find "${ds_dir[$i]}" -type f | wc -l) data files, $( [ "$i" = 1 ] && echo "$b1" || echo "$b2") bytes; NFSv3 READ $(pnfs_calls $((base + 3)) 6) WRITE $(pnfs_calls $((base + 3)) 7) calls; RPC-over-RDMA $ri bytes in, $ro out ($(pnfs_metric $((base + 3)) rpcrdma_messages_received) messages)"
    done
    if [ "$PNFS_PROTOS" = rdma ]; then
        # Every byte the data files hold came in at least once; over RDMA
        # the DSes must have received at least that much by RDMA.
        if [ "$rin" -ge $((b1 + b2)) ] && [ "$rout" -gt 0 ]; then
            pass "pnfs-DS-data-over-RDMA: DSes received $rin bytes and sent $rout by RPC-over-RDMA (data files $((b1 + b2)) bytes)"
        else
            fail "pnfs-DS-data-over-RDMA: DSes received $rin bytes and sent $rout by RPC-over-RDMA (data files $((b1 + b2)) bytes)"
        fi
    fi
    if [ "$PNFS_MIRRORS" -ge 2 ] && [ "$PNFS_KNFSD" != 1 ]; then
        # Two DSes, two mirrors: every data file on both, the same bytes.
        local same=0 differ=0 f
        for f in "${ds_dir[1]}"/* "${ds_dir[2]}"/*; do
            [ -f "$f" ] || continue
            local o="${ds_dir[1]}/$(basename "$f")"
            [ "$o" = "$f" ] && o="${ds_dir[2]}/$(basename "$f")"
            if cmp -s "$f" "$o"; then same=$((same + 1)); else differ=$((differ + 1)); fi
        done
        if [ "$same" -gt 0 ] && [ "$differ" = 0 ]; then
            pass "pnfs-mirrors: $((same / 2)) data files on both DSes, byte-exact"
        else
            fail "pnfs-mirrors: $((same / 2)) data files on both DSes, $differ copies missing or different"
        fi
    fi
    mr=$(( $(pnfs_calls "$PNFS_MDS_METRICS_PORT" 6) + $(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" READ) ))
    mw=$(( $(pnfs_calls "$PNFS_MDS_METRICS_PORT" 7) + $(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" WRITE) ))
    echo "  MDS: LAYOUTGET $(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" LAYOUTGET), GETDEVICEINFO $(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" GETDEVICEINFO), LAYOUTRETURN $(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" LAYOUTRETURN); READ $mr, WRITE $mw (v3 + v4)"
    # The fence and dslost cases send I/O through the MDS on purpose: the
    # guest counts the MDS's READ + WRITE around each basic case (from
    # the relay), which must stay at most 8.
    local basic_io
    basic_io=$(awk '$1 == "STATS" && $2 == "mds-io-basic" {n += $3; k++} END {if (k) print n}' "$G/guest.log" 2>/dev/null)
    if [ -n "$basic_io" ]; then
        if [ "$(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" LAYOUTGET)" -gt 0 ] && [ "$basic_io" -le 8 ]; then
            pass "pnfs-data-not-through-the-MDS: layouts granted, MDS READ + WRITE $basic_io during the basic cases (all cases: READ $mr WRITE $mw)"
        else
            fail "pnfs-data-not-through-the-MDS: MDS READ + WRITE $basic_io during the basic cases"
        fi
    elif [ "$(pnfs_v4ops "$PNFS_MDS_METRICS_PORT" LAYOUTGET)" -gt 0 ] && [ "$mr" -le 4 ] && [ "$mw" -le 4 ]; then
        pass "pnfs-data-not-through-the-MDS: layouts granted, MDS READ $mr WRITE $mw"
    else
        fail "pnfs-data-not-through-the-MDS: MDS READ $mr WRITE $mw"
    fi
    local all="$b1 $b2" b3
    if [ "$PNFS_KNFSD" = 1 ]; then
        b3=$(awk '$1 == "INFO" && $2 == "knfsd-ds" {print $4}' "$G/guest.log" 2>/dev/null | tail -1)
        echo "  DS 3 (knfsd in the guest): ${b3:-?} bytes in $(awk '$1 == "INFO" && $2 == "knfsd-ds" {print $6}' "$G/guest.log" 2>/dev/null | tail -1) data files"
        all+=" ${b3:-0}"
    fi
    if ! echo "$all" | grep -qw 0; then
        pass "pnfs-bytes-on-every-DS: $all bytes"
    else
        fail "pnfs-bytes-on-every-DS: $all bytes"
    fi
    # Placement (docs/pnfs.md): files go to the DS with the fewest, so
    # equal files split evenly; within 25% of the mean (the kernel may
    # ask for layouts in another order than it created the files).
    if echo "$all" | awk '{for (i = 1; i <= NF; i++) t += $i; m = t / NF; for (i = 1; i <= NF; i++) {d = $i - m; if (d < 0) d = -d; if (d > w) w = d}} END {exit !(m > 0 && w <= 0.25 * m)}'; then
        pass "pnfs-even-spread: $all bytes"
    else
        fail "pnfs-even-spread: $all bytes (more than 25% off the mean)"
    fi
    local recalls
    recalls=$(grep -c 'CB_LAYOUTRECALL' "$log")
    if [ "$recalls" -gt 0 ]; then pass "pnfs-layout-recalls: $recalls recall events in the MDS log"; else fail "pnfs-layout-recalls: none in the MDS log"; fi
    echo "  MDS log: $(grep -c 'CB_LAYOUTRECALL answered' "$log") CB_LAYOUTRECALL answers; $(grep -c 'data file fenced' "$log") fencings; $(grep -c 'data server error' "$log") data server error reports from clients"
    # What the recalls came to (answers, fencings, error reports), colours off.
    grep -E 'CB_LAYOUTRECALL answered|data file fenced|data file not fenced|data server error' "$log" |
        sed 's/\x1b\[[0-9;]*m//g' | head -24 | cut -c1-240 | sed 's/^/  mds: /'
    sed 's/^/  /' "$OUT/relay-pnfs.log" 2>/dev/null | head -60
    grep -E 'panicked| ERROR | WARN ' "$log" | head -5 | sed 's/^/  mds: /'
    pnfs_cleanup
}
