# scripts/interop-krb5.sh — phase "krb5" of scripts/interop.sh (sourced by
# it; issue 17, docs/security.md "The Linux kernel client"): the kernel NFS
# client with rpc.gssd mounts `nfsrdma serve --keytab` with sec=krb5,
# krb5i and krb5p, NFSv3 and NFSv4.1, over TCP and over RPC-over-RDMA
# (guest siw0 -> our softrnic).
#
# The host runs a throw-away MIT realm NFSRDMA.TEST (as testkit::krb5 does:
# kdb5_util create -s, krb5kdc -n) in $OUT/krb5 with its KDC on
# 127.0.0.1:$KRB5_KDC_PORT, and two principals: nfs/$KRB5_SERVER_NAME (the
# server's key, given to `serve --keytab`) and nfs/kpeer (the guest's
# machine credential, left in the guest's directory as krb5.keytab with a
# krb5.conf whose KDC is 10.0.2.100:88). The server exports two
# directories: all/ with sec=krb5p:krb5i:krb5 and krb5p/ with sec=krb5p.
# Guest 10.0.2.100:2049, :20048, :20049 and :88 reach host :$KRB5_NFS_PORT,
# :$KRB5_MOUNT_PORT, :$KRB5_RDMA_PORT and :$KRB5_KDC_PORT (slirp
# guestfwd). The guest runs interop/guest/krb5.sh (its header lists the
# checks); the host reports them and the server's GSS log lines.
#
# Env: KRB5_NFS_PORT / KRB5_MOUNT_PORT / KRB5_RDMA_PORT / KRB5_KDC_PORT
# (22049 / 22048 / 22050 / 22088), KRB5_SERVER_NAME (nfsrdma-host: the name
# the guest mounts the server by), KRB5_MIB (4: the file written and read
# back per case), KRB5_PROTOS ("tcp rdma"), KRB5_VERS ("3 4.1"), KRB5_SECS
# ("krb5 krb5i krb5p"), KRB5_RUST_LOG (info).
KRB5_NFS_PORT=${KRB5_NFS_PORT:-22049}
KRB5_MOUNT_PORT=${KRB5_MOUNT_PORT:-22048}
KRB5_RDMA_PORT=${KRB5_RDMA_PORT:-22050}
KRB5_KDC_PORT=${KRB5_KDC_PORT:-22088}
KRB5_SERVER_NAME=${KRB5_SERVER_NAME:-nfsrdma-host}
KRB5_MIB=${KRB5_MIB:-4}
KRB5_PROTOS=${KRB5_PROTOS:-tcp rdma}
KRB5_VERS=${KRB5_VERS:-3 4.1}
KRB5_SECS=${KRB5_SECS:-krb5 krb5i krb5p}
KRB5_REVERSE=${KRB5_REVERSE:-1}
KRB5_KNFSD_PORT=${KRB5_KNFSD_PORT:-22060}
KRB5_KNFSD_MOUNT_PORT=${KRB5_KNFSD_MOUNT_PORT:-22061}
KRB5_KNFSD_RDMA_PORT=${KRB5_KNFSD_RDMA_PORT:-22062}
KRB5_REALM=NFSRDMA.TEST
K5_KDC_PID=; K5_SRV_PID=; K5_EXPORT=; K5_TCPDUMP_PID=; K5_REVERSE_PID=
krb5_cleanup() {
    [ -n "$K5_REVERSE_PID" ] && kill "$K5_REVERSE_PID" 2>/dev/null
    [ -n "$K5_TCPDUMP_PID" ] && kill -INT "$K5_TCPDUMP_PID" 2>/dev/null
    [ -n "$K5_SRV_PID" ] && kill -INT "$K5_SRV_PID" 2>/dev/null && wait "$K5_SRV_PID" 2>/dev/null
    [ -n "$K5_KDC_PID" ] && kill "$K5_KDC_PID" 2>/dev/null && wait "$K5_KDC_PID" 2>/dev/null
    [ -n "$K5_EXPORT" ] && rm -rf "$K5_EXPORT"
    K5_KDC_PID=; K5_SRV_PID=; K5_EXPORT=; K5_TCPDUMP_PID=; K5_REVERSE_PID=
}
# krb5_reverse G D (in the background while the VM runs): once the guest's
# knfsd is ready, our client (`nfsrdma cp`, root@REALM's ticket) writes a
# 1 MiB file and reads it back byte-exact over NFSv3/TCP in each service,
# NFSv4.1/TCP with krb5i and NFSv3/RDMA (softrnic -> siw) with krb5i.
# Results go to G/reverse-host.txt ("PASS|FAIL name: why"), then
# G/knfsd-done for the guest.
krb5_reverse() {
    local G=$1 d=$2 r=$1/reverse-host.txt kp mp rp name url src=$2/reverse-src.bin
    : > "$r"
    for _ in $(seq 900); do [ -e "$G/knfsd-ready" ] && break; [ -e "$G/rc" ] && return; sleep 1; done
    [ -e "$G/knfsd-ready" ] || { echo "FAIL knfsd-ready: the guest's knfsd never came up" >> "$r"; return; }
    kp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:2049$/\1/p' "$G/hostfwd.txt")
    mp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20048$/\1/p' "$G/hostfwd.txt")
    rp=$(sed -n 's/^127.0.0.1:\([0-9]*\) -> 10.0.2.15:20049$/\1/p' "$G/hostfwd.txt")
    head -c 1048576 /dev/urandom > "$src"
    local cc=FILE:$d/cc_root
    KRB5CCNAME=$cc kinit -k -t "$d/root.keytab" "root@$KRB5_REALM" 2> /dev/null ||
        { echo "FAIL reverse: no ticket for root" >> "$r"; touch "$G/knfsd-done"; return; }
    for name in tcp-v3-krb5 tcp-v3-krb5i tcp-v3-krb5p tcp-v4.1-krb5i tcp-v4.1-krb5p rdma-v3-krb5i rdma-v3-krb5p; do
        local sec=${name##*-} path=/export/ours-$name.bin q
        case $name in
            rdma-*) url="nfs+rdma://127.0.0.1:$rp"; q="?mountport=$mp&sec=$sec" ;;
            # knfsd's fsid=0 export is the NFSv4 root; the guest made dir/ in it
            *v4.1*) url="nfs://127.0.0.1:$kp"; q="?version=4.1&sec=$sec"; path=/dir/ours-$name.bin ;;
            *) url="nfs://127.0.0.1:$kp"; q="?mountport=$mp&sec=$sec" ;;
        esac
        if RUST_BACKTRACE=0 KRB5CCNAME=$cc timeout 120 "$BIN" cp "$src" "$url$path$q" > "$G/reverse-$name.log" 2>&1 &&
            RUST_BACKTRACE=0 KRB5CCNAME=$cc timeout 120 "$BIN" cp "$url$path$q" "$src.back" >> "$G/reverse-$name.log" 2>&1 &&
            cmp -s "$src" "$src.back"; then
            echo "PASS $name: 1 MiB written and read back byte-exact" >> "$r"
        else
            echo "FAIL $name: $(tail -2 "$G/reverse-$name.log" | tr '\n' ' ')" >> "$r"
        fi
        rm -f "$src.back"
    done
    rm -f "$src"
    touch "$G/knfsd-done"
}
# krb5_reverse_report G: our client's results; a failure in a service the
# guest's own kernel client also fails against knfsd (the control) is
# reported as knfsd's, not counted.
krb5_reverse_report() {
    local G=$1 l name sec
    [ -s "$G/reverse-host.txt" ] || { fail "krb5-reverse: no results"; return; }
    while read -r l; do
        name=${l#* }; name=${name%%:*}; sec=${name##*-}
        case $l in
            PASS*) pass "krb5-reverse/${l#PASS }" ;;
            *) if grep -qx "$sec failed" "$G/knfsd-control.txt" 2>/dev/null; then
                   echo "KNOWN krb5-reverse/${l#FAIL } (the guest's own kernel client fails $sec against this knfsd too)"
               else fail "krb5-reverse/${l#FAIL }"; fi ;;
        esac
    done < "$G/reverse-host.txt"
}
# krb5_capture_checks G PCAP: each case's marker (G/markers.txt) is in the
# capture of the small messages under krb5 and krb5i (in the clear: the
# capture did see the file's WRITE and READ) and absent under krb5p; and
# the flavor of the kernel's NFSv4.1 lease operations (EXCHANGE_ID,
# CREATE_SESSION) over TCP, for the record.
krb5_capture_checks() {
    local G=$1 pcap=$2 c mark n
    [ -s "$G/markers.txt" ] || { fail "krb5-capture: the guest listed no markers"; return; }
    while read -r c mark; do
        n=$(grep -a -o "$mark" "$pcap" | wc -l)
        case $c in
            *-krb5p) if [ "$n" -eq 0 ]; then pass "krb5-capture/$c: the file's bytes never in the clear"
                     else fail "krb5-capture/$c: the file's bytes in the clear $n times"; fi ;;
            *) if [ "$n" -gt 0 ]; then pass "krb5-capture/$c: the file's bytes seen in the clear $n times (no privacy, as asked)"
               else fail "krb5-capture/$c: marker not in the capture (the capture check cannot tell)"; fi ;;
        esac
    done < "$G/markers.txt"
    # The kernel asks SP4_MACH_CRED (state protection by its machine
    # credential, RFC 8881 §18.35.3) under krb5i and falls back to SP4_NONE
    # when refused: every EXCHANGE_ID must be answered NFS4_OK.
    local mach bad
    mach=$(tshark -n -r "$pcap" -d "tcp.port==$KRB5_NFS_PORT,rpc" -Y 'rpc.msgtyp == 0 && nfs.opcode == 42' \
        -T fields -E occurrence=f -e nfs.exchange_id.state_protect 2>/dev/null | grep -cx 1)
    bad=$(tshark -n -r "$pcap" -d "tcp.port==$KRB5_NFS_PORT,rpc" -Y 'rpc.msgtyp == 1 && nfs.opcode == 42' \
        -T fields -E occurrence=f -e nfs.nfsstat4 2>/dev/null | grep -cvx 0)
    if [ "$mach" -gt 0 ] && [ "$bad" -eq 0 ]; then
        pass "krb5-capture/sp4-mach-cred: $mach EXCHANGE_IDs asked SP4_MACH_CRED over TCP, none refused"
    elif [ "$mach" -eq 0 ]; then
        echo "INFO krb5-capture/sp4-mach-cred: no EXCHANGE_ID asked SP4_MACH_CRED over TCP"
    else
        fail "krb5-capture/sp4-mach-cred: $bad of the EXCHANGE_IDs refused ($mach asked SP4_MACH_CRED)"
    fi
    tshark -n -r "$pcap" -d "tcp.port==$KRB5_NFS_PORT,rpc" -Y 'rpc.msgtyp == 0 && (nfs.opcode == 42 || nfs.opcode == 43)' \
        -T fields -E occurrence=f -e nfs.opcode -e rpc.auth.flavor -e rpc.authgss.service 2>/dev/null | sort | uniq -c |
        sed 's/^/  krb5 capture: NFSv4.1 lease calls (count, op 42 EXCHANGE_ID or 43 CREATE_SESSION, flavor, GSS service): /'
}
# krb5_realm DIR: the realm's configuration, database and keytabs in DIR
# (server.keytab, guest.keytab), and the guest's krb5.conf in DIR/guest.conf
krb5_realm() {
    local d=$1 r=$KRB5_REALM
    cat > "$d/krb5.conf" <<EOF
[libdefaults]
 default_realm = $r
 dns_lookup_kdc = false
 dns_lookup_realm = false
 rdns = false
 dns_canonicalize_hostname = false
 udp_preference_limit = 1
[realms]
 $r = {
  kdc = 127.0.0.1:$KRB5_KDC_PORT
 }
[domain_realm]
 $KRB5_SERVER_NAME = $r
 kpeer = $r
EOF
    sed "s/127.0.0.1:$KRB5_KDC_PORT/$KRB5_GUEST_KDC/" "$d/krb5.conf" > "$d/guest.conf"
    cat > "$d/kdc.conf" <<EOF
[kdcdefaults]
 kdc_ports = $KRB5_KDC_PORT
 kdc_tcp_ports = $KRB5_KDC_PORT
[realms]
 $r = {
  database_name = $d/principal
  key_stash_file = $d/stash
  acl_file = $d/kadm5.acl
  kdc_ports = $KRB5_KDC_PORT
  kdc_tcp_ports = $KRB5_KDC_PORT
 }
[logging]
 kdc = FILE:$d/kdc.log
EOF
    export KRB5_CONFIG=$d/krb5.conf KRB5_KDC_PROFILE=$d/kdc.conf
    kdb5_util create -s -r "$r" -P master-password > "$d/setup.log" 2>&1 || return 1
    local q
    for q in "addprinc -randkey nfs/$KRB5_SERVER_NAME" "ktadd -k $d/server.keytab nfs/$KRB5_SERVER_NAME" \
        "addprinc -randkey nfs/kpeer" "ktadd -k $d/guest.keytab nfs/kpeer" \
        "addprinc -randkey daemon" "ktadd -k $d/daemon.keytab daemon" \
        "addprinc -randkey root" "ktadd -k $d/root.keytab root" \
        "addprinc -randkey nfs/127.0.0.1" "ktadd -k $d/guest.keytab nfs/127.0.0.1"; do
        kadmin.local -r "$r" -q "$q" >> "$d/setup.log" 2>&1 || return 1
    done
}
krb5_phase() {
    local G=$OUT/guest-krb5 d=$OUT/krb5 p rc t0 n_pass n_fail
    KRB5_GUEST_KDC=10.0.2.100:88
    for p in "$KRB5_NFS_PORT" "$KRB5_MOUNT_PORT" "$KRB5_RDMA_PORT" "$KRB5_KDC_PORT"; do
        if [ -n "$(ss -Hltn "sport = :$p")" ]; then
            fail "krb5: host port $p is in use; set KRB5_NFS_PORT/KRB5_MOUNT_PORT/KRB5_RDMA_PORT/KRB5_KDC_PORT"; return
        fi
    done
    for p in krb5kdc kdb5_util kadmin.local kinit; do
        command -v "$p" > /dev/null || { fail "krb5: $p is not installed (scripts/install-deps.sh)"; return; }
    done
    rm -rf "$d"; mkdir -p "$d" "$G"
    rm -f "$G/rc" "$G/markers.txt" "$G/knfsd-ready" "$G/knfsd-done" "$G/reverse-host.txt" "$G/knfsd-control.txt"
    if ! krb5_realm "$d"; then fail "krb5: realm setup failed (log: $d/setup.log)"; return; fi
    krb5kdc -n -r "$KRB5_REALM" > "$d/krb5kdc.out" 2>&1 &
    K5_KDC_PID=$!
    for _ in $(seq 100); do
        KRB5CCNAME=FILE:$d/cc_probe kinit -k -t "$d/server.keytab" "nfs/$KRB5_SERVER_NAME" 2> /dev/null && break
        sleep 0.1
    done
    if ! KRB5CCNAME=FILE:$d/cc_probe klist -s; then fail "krb5: the KDC does not answer (log: $d/kdc.log)"; krb5_cleanup; return; fi
    pass "krb5-kdc: realm $KRB5_REALM on 127.0.0.1:$KRB5_KDC_PORT issues tickets"
    K5_EXPORT=$(mktemp -d /tmp/gss-krb5-export.XXXXXX)
    mkdir -p "$K5_EXPORT/all" "$K5_EXPORT/krb5p"
    chmod 0777 "$K5_EXPORT/all" "$K5_EXPORT/krb5p"
    cat > "$d/exports" <<EOF
$K5_EXPORT/all *(rw,no_root_squash,sec=krb5p:krb5i:krb5)
$K5_EXPORT/krb5p *(rw,no_root_squash,sec=krb5p)
EOF
    echo "== nfsrdma serve --exports $d/exports --keytab: TCP :$KRB5_NFS_PORT, RDMA :$KRB5_RDMA_PORT, MOUNT :$KRB5_MOUNT_PORT"
    RUST_LOG=${KRB5_RUST_LOG:-info} "$BIN" serve --exports "$d/exports" --keytab "$d/server.keytab" \
        --transports tcp,rdma --addr 127.0.0.1 --port "$KRB5_NFS_PORT" --rdma-port "$KRB5_RDMA_PORT" \
        --mount-port "$KRB5_MOUNT_PORT" --grace-time 5 --state-dir "$d/state" > "$OUT/server-krb5.log" 2>&1 &
    K5_SRV_PID=$!
    for _ in $(seq 100); do
        [ -n "$(ss -Hltn "sport = :$KRB5_RDMA_PORT")" ] && [ -n "$(ss -Hltn "sport = :$KRB5_MOUNT_PORT")" ] && break
        sleep 0.1
    done
    if [ -z "$(ss -Hltn "sport = :$KRB5_MOUNT_PORT")" ]; then
        fail "krb5: server did not start (log: $OUT/server-krb5.log)"; krb5_cleanup; return
    fi
    # root's file no principal of the guest may read
    printf 'root only\n' > "$K5_EXPORT/all/secret-root"; chmod 0600 "$K5_EXPORT/all/secret-root"
    cp "$d/guest.conf" "$G/krb5.conf"; cp "$d/guest.keytab" "$G/krb5.keytab"
    if ! KRB5CCNAME=FILE:$G/cc_daemon kinit -k -t "$d/daemon.keytab" "daemon@$KRB5_REALM"; then
        fail "krb5: no ticket for daemon"; krb5_cleanup; return
    fi
    local filter="(tcp port $KRB5_NFS_PORT or tcp port $KRB5_RDMA_PORT or tcp port $KRB5_MOUNT_PORT) and less 1200"
    if [ "$CAPTURE" = 1 ]; then
        # the small messages only: the marker files, not the MiB files
        tcpdump -i lo -s 0 -B 65536 -U -w "$OUT/krb5-small.pcap" "$filter" > /dev/null 2> "$OUT/tcpdump-krb5.log" &
        K5_TCPDUMP_PID=$!
        for _ in $(seq 50); do grep -q 'listening on' "$OUT/tcpdump-krb5.log" && break; sleep 0.1; done
    fi
    echo "$KRB5_SERVER_NAME" > "$G/server-name"
    local hostfwd=none
    if [ "$KRB5_REVERSE" = 1 ]; then
        touch "$G/reverse"
        hostfwd="$KRB5_KNFSD_PORT:2049 $KRB5_KNFSD_MOUNT_PORT:20048 $KRB5_KNFSD_RDMA_PORT:20049"
        krb5_reverse "$G" "$d" & K5_REVERSE_PID=$!
    else
        rm -f "$G/reverse"
    fi
    echo "== kpeer: kernel client + rpc.gssd, sec=$KRB5_SECS, vers $KRB5_VERS, $KRB5_PROTOS"
    t0=$(date +%s)
    KPEER_HOSTFWD=$hostfwd KPEER_TIMEOUT=${KPEER_TIMEOUT:-1800} \
        KPEER_GUESTFWD="2049:$KRB5_NFS_PORT 20048:$KRB5_MOUNT_PORT 20049:$KRB5_RDMA_PORT 88:$KRB5_KDC_PORT" \
        bash "$KPEER/run.sh" "$ROOT/interop/guest/krb5.sh" "$G" \
        -- 20048 "$K5_EXPORT/all" "$K5_EXPORT/krb5p" "$KRB5_MIB" "$KRB5_PROTOS" "$KRB5_VERS" "$KRB5_SECS" \
        > "$OUT/run-krb5.log" 2>&1
    rc=$?
    rm -f "$G/krb5.keytab" "$G/cc_daemon"
    if [ -n "$K5_TCPDUMP_PID" ]; then kill -INT "$K5_TCPDUMP_PID"; wait "$K5_TCPDUMP_PID" 2>/dev/null; K5_TCPDUMP_PID=; fi
    grep -E '^(PASS|FAIL|INFO)' "$G/guest.log" 2>/dev/null | sed 's/^/  guest: /'
    n_pass=$(grep -c '^PASS' "$G/guest.log" 2>/dev/null)
    n_fail=$(grep -c '^FAIL' "$G/guest.log" 2>/dev/null)
    if [ "$rc" = 0 ]; then
        pass "kernel-krb5: $n_pass guest checks passed (VM $(( $(date +%s) - t0 )) s)"
    else
        fail "kernel-krb5: guest rc $rc, $n_fail of $((n_pass + n_fail)) guest checks failed (log: $G/guest.log, $G/gssd.log)"
    fi
    if [ -n "$K5_REVERSE_PID" ]; then
        wait "$K5_REVERSE_PID"; K5_REVERSE_PID=
        krb5_reverse_report "$G"
    fi
    [ "$CAPTURE" = 1 ] && krb5_capture_checks "$G" "$OUT/krb5-small.pcap"
    if kill -0 "$K5_SRV_PID" 2>/dev/null; then pass "krb5-server-alive"
    else fail "krb5-server-alive: nfsrdma serve exited (log: $OUT/server-krb5.log)"; fi
    grep -iE 'panic|error|gss\.' "$OUT/server-krb5.log" | head -10 | sed 's/^/  server: /'
    unset KRB5_CONFIG KRB5_KDC_PROFILE
    krb5_cleanup
}
