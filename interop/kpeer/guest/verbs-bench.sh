#!/bin/bash
# verbs-bench.sh DEV [SIZE_MIB] [IOPS_OPS] — issue 13 item 4, run by
# scripts/interop.sh (PHASES=verbs-bench), one VM boot per device (siw0 or
# rxe0 on eth0). One run of each measurement, all on the guest's own DEV
# (in-guest loopback), with the same kernel NFSv3 client:
#   - perftest ceiling: ib_read_bw and ib_write_bw, 1 MiB messages, timed
#     from outside (the wall time of N2 iterations minus that of N1, so
#     connection set-up cancels): perftest's own cycle-counter figures are
#     meaningless under an emulated CPU (its CPU-MHz estimate fails, r^2 <
#     0.9, and ib_read_bw printed 0.00 MB/s), so both are printed;
#   - our server (`nfsrdma serve --rdma-device DEV`, tmpfs export) and knfsd
#     (tmpfs export, svcrdma on DEV), proto=rdma: sequential write (dd bs=1M
#     conv=fsync, so COMMIT is included) and read (fresh mount, caches
#     dropped) of a SIZE_MIB (default 128) file, and 4 KiB IOPS at queue
#     depth 1 (dd bs=4k iflag=direct / oflag=direct, IOPS_OPS operations,
#     default 1000; each is one READ or WRITE RPC);
#   - the same for our server and knfsd over TCP (proto=tcp, the same eth0);
#   - CPU per GiB moved: our server process's utime+stime (/proc/PID/stat;
#     the client's work and the kernel's softirq/iWARP/RoCE work outside the
#     process are not in it, which is the point of an RNIC), knfsd's nfsd
#     threads' utime+stime likewise, and the whole guest's busy CPU
#     (/proc/stat; tick-sampled, it undercounts under an emulated CPU).
# Prints INFO lines, `RESULT key value` lines, and at the end the ratios.
# MB/s = 10^6 B/s. Exits 1 if a transfer failed.
. "$KPEER_IN/guest/lib.sh"
cd "$KPEER_OUT" || exit 1
DEV=${1:-siw0}; SIZE=${2:-128}; OPS=${3:-1000}
IP=$GUEST_IP
M=/mnt/b
ERR=0
HZ=$(getconf CLK_TCK)
res() { echo "RESULT $*"; echo "$*" >> results.txt; }
: > results.txt

case $DEV in
    siw*) setup_siw > dev-setup.txt 2>&1 ;;
    rxe*) setup_rxe "$DEV" > dev-setup.txt 2>&1 ;;
    *) echo "FAIL unknown device $DEV"; exit 1 ;;
esac || { cat dev-setup.txt; echo "FAIL $DEV setup"; exit 1; }
modprobe rpcrdma; modprobe nfs
install -m 0755 "$KPEER_OUT/bin/nfsrdma" /usr/local/bin/nfsrdma || { echo "FAIL no nfsrdma binary"; exit 1; }

# ---- the device's ceiling ------------------------------------------------
perf_wall() { # tool iterations -> wall seconds of the client (empty on failure)
    local tool=$1 n=$2 t0 t1
    "$tool" -d "$DEV" -F -R -s 1048576 -n "$n" > "perf-$tool-$n-srv.txt" 2>&1 &
    local srv=$!
    sleep 2
    t0=$(now)
    if timeout 300 "$tool" -d "$DEV" -F -R -s 1048576 -n "$n" "$IP" > "perf-$tool-$n.txt" 2>&1; then
        t1=$(now); wait "$srv"
        awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}'
    else
        kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
    fi
}
for tool in ib_read_bw ib_write_bw; do
    w1=$(perf_wall $tool 20); w2=$(perf_wall $tool 220)
    own=$(grep -E '^ *1048576 +220' "perf-$tool-220.txt" | tr -s ' ' | cut -d' ' -f5)
    if [ -n "$w1" ] && [ -n "$w2" ]; then
        mbps=$(awk -v a="$w1" -v b="$w2" 'BEGIN{d=b-a; if (d <= 0) d=b; printf "%.1f", 200*1048576/d/1e6}')
        res "perftest_${tool}_MBps $mbps"
        echo "INFO $tool: 200 MiB in $(awk -v a="$w1" -v b="$w2" 'BEGIN{printf "%.2f", b-a}') s beyond set-up = $mbps MB/s (perftest's own average: ${own:-none} MB/s)"
    else
        echo "INFO $tool failed: $(tail -2 "perf-$tool-220.txt" | tr '\n' ' ')"
    fi
done

# ---- the two servers ---------------------------------------------------------
EXPORT_SIZE=$((SIZE + 300))m start_nfsd > nfsd-start.txt 2>&1 || { cat nfsd-start.txt; echo "FAIL knfsd start"; exit 1; }
mkdir -p /srv/ours $M
mount -t tmpfs -o size=$((SIZE + 300))m tmpfs /srv/ours
nfsrdma serve /srv/ours --addr "$IP" --rdma-device "$DEV" \
    --port 2050 --rdma-port 20050 --mount-port 20058 --no-root-squash \
    --allow 10.0.2.0/24 --state-dir /tmp/ours-state > server.log 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q '^serving' server.log && break; sleep 0.2; done
grep -q "nfs over rdma $IP:20050" server.log || { cat server.log; echo "FAIL our server did not start"; exit 1; }
# srv_ticks ours|knfsd: the server's CPU ticks so far (utime+stime): our
# process, or the sum over knfsd's nfsd kernel threads
srv_ticks() {
    if [ "$1" = ours ]; then awk '{print $14 + $15}' "/proc/$SRV/stat"
    else for p in $(pgrep -x nfsd); do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s + 0}'
    fi
}

opts() { # server proto -> mount options and path
    case $1/$2 in
        ours/rdma) echo "vers=3,proto=rdma,port=20050,mountport=20058,mountproto=tcp,nolock /srv/ours" ;;
        ours/tcp) echo "vers=3,proto=tcp,port=2050,mountport=20058,mountproto=tcp,nolock /srv/ours" ;;
        knfsd/rdma) echo "vers=3,proto=rdma,port=20049,mountport=20048,mountproto=tcp,nolock $EXPORT_DIR" ;;
        knfsd/tcp) echo "vers=3,proto=tcp,port=2049,mountport=20048,mountproto=tcp,nolock $EXPORT_DIR" ;;
    esac
}
mnt() { # server proto
    local o p; read -r o p <<< "$(opts "$1" "$2")"
    umount $M 2>/dev/null; drop_caches
    timeout 120 mount -t nfs -o "$o" "$IP:$p" $M
}
# measure NAME server proto command...: wall time, our server's CPU ticks and
# the guest's busy CPU around the command; records NAME_s, NAME_srv_s, NAME_guest_s
measure() {
    local name=$1 s=$2 p=$3; shift 3
    local c0 c1 k0 k1 t0 t1
    c0=$(cpu_snap); k0=$(srv_ticks "$s"); t0=$(now)
    if ! timeout 600 "$@" > "cmd-$name.txt" 2>&1; then
        echo "INFO $name failed: $(tail -2 "cmd-$name.txt" | tr '\n' ' ')"; ERR=$((ERR + 1)); return 1
    fi
    t1=$(now); k1=$(srv_ticks "$s"); c1=$(cpu_snap)
    set -- $(cpu_delta "$c0" "$c1")
    res "${name}_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')"
    res "${name}_srv_cpu_s $(awk -v a="$k0" -v b="$k1" -v hz="$HZ" 'BEGIN{printf "%.2f", (b-a)/hz}')"
    res "${name}_guest_cpu_s $1"
}
for s in ours knfsd; do
    for p in rdma tcp; do
        n=$s-$p
        if ! mnt "$s" "$p"; then echo "INFO $n: mount failed"; ERR=$((ERR + 1)); continue; fi
        rm -f $M/seq.dat $M/small.dat
        measure "${n}_write" "$s" "$p" dd if=/dev/zero of=$M/seq.dat bs=1M count="$SIZE" conv=fsync
        mnt "$s" "$p" || { ERR=$((ERR + 1)); continue; }
        measure "${n}_read" "$s" "$p" dd if=$M/seq.dat of=/dev/null bs=1M
        grep -A200 " mounted on $M " /proc/self/mountstats | grep -m1 'xprt:' | sed "s/^/INFO $n xprt after read: /"
        measure "${n}_write4k" "$s" "$p" dd if=/dev/zero of=$M/small.dat bs=4k count="$OPS" oflag=direct
        mnt "$s" "$p" || { ERR=$((ERR + 1)); continue; }
        measure "${n}_read4k" "$s" "$p" dd if=$M/small.dat of=/dev/null bs=4k count="$OPS" iflag=direct
        rm -f $M/seq.dat $M/small.dat
        umount $M
    done
done
kill -0 "$SRV" 2>/dev/null || { echo "FAIL our server exited"; ERR=$((ERR + 1)); }
grep -iE 'panic|error|warn' server.log | head -5 | sed 's/^/INFO server: /'
kill -INT "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null

# ---- figures -------------------------------------------------------------------
echo "INFO summary ($DEV, NFSv3, ${SIZE} MiB sequential, $OPS x 4 KiB at queue depth 1, one run each, emulated CPU)"
awk -v size="$SIZE" -v ops="$OPS" -v dev="$DEV" '
    { v[$1] = $2 }
    function mb(k) { return (k in v && v[k] > 0) ? size * 1048576 / v[k] / 1e6 : 0 }
    function io(k) { return (k in v && v[k] > 0) ? ops / v[k] : 0 }
    function r(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "n/a" }
    function gib(k) { return (k in v) ? sprintf("%.2f", v[k] / (size / 1024)) : "n/a" }
    END {
        for (p = 0; p < 2; p++) {
            pr = p ? "tcp" : "rdma"
            printf "SUMMARY %s %s ours vs knfsd: write %.1f vs %.1f MB/s (%s), read %.1f vs %.1f MB/s (%s), 4k write %.0f vs %.0f IOPS (%s), 4k read %.0f vs %.0f IOPS (%s)\n", dev, pr,
                mb("ours-" pr "_write_s"), mb("knfsd-" pr "_write_s"), r(mb("ours-" pr "_write_s"), mb("knfsd-" pr "_write_s")),
                mb("ours-" pr "_read_s"), mb("knfsd-" pr "_read_s"), r(mb("ours-" pr "_read_s"), mb("knfsd-" pr "_read_s")),
                io("ours-" pr "_write4k_s"), io("knfsd-" pr "_write4k_s"), r(io("ours-" pr "_write4k_s"), io("knfsd-" pr "_write4k_s")),
                io("ours-" pr "_read4k_s"), io("knfsd-" pr "_read4k_s"), r(io("ours-" pr "_read4k_s"), io("knfsd-" pr "_read4k_s"))
        }
        printf "SUMMARY %s our NFS read over rdma / ib_read_bw: %.1f / %.1f MB/s = %s; knfsd: %s\n", dev,
            mb("ours-rdma_read_s"), v["perftest_ib_read_bw_MBps"], r(mb("ours-rdma_read_s"), v["perftest_ib_read_bw_MBps"]),
            r(mb("knfsd-rdma_read_s"), v["perftest_ib_read_bw_MBps"])
        printf "SUMMARY %s our server rdma vs tcp: write %.1f vs %.1f MB/s (%s), read %.1f vs %.1f MB/s (%s)\n", dev,
            mb("ours-rdma_write_s"), mb("ours-tcp_write_s"), r(mb("ours-rdma_write_s"), mb("ours-tcp_write_s")),
            mb("ours-rdma_read_s"), mb("ours-tcp_read_s"), r(mb("ours-rdma_read_s"), mb("ours-tcp_read_s"))
        printf "SUMMARY %s our server process CPU s/GiB rdma vs tcp: write %s vs %s, read %s vs %s (guest busy CPU s/GiB: write %s vs %s, read %s vs %s)\n", dev,
            gib("ours-rdma_write_srv_cpu_s"), gib("ours-tcp_write_srv_cpu_s"), gib("ours-rdma_read_srv_cpu_s"), gib("ours-tcp_read_srv_cpu_s"),
            gib("ours-rdma_write_guest_cpu_s"), gib("ours-tcp_write_guest_cpu_s"), gib("ours-rdma_read_guest_cpu_s"), gib("ours-tcp_read_guest_cpu_s")
        printf "SUMMARY %s knfsd nfsd threads CPU s/GiB rdma vs tcp: write %s vs %s, read %s vs %s (guest busy CPU s/GiB: write %s vs %s, read %s vs %s)\n", dev,
            gib("knfsd-rdma_write_srv_cpu_s"), gib("knfsd-tcp_write_srv_cpu_s"), gib("knfsd-rdma_read_srv_cpu_s"), gib("knfsd-tcp_read_srv_cpu_s"),
            gib("knfsd-rdma_write_guest_cpu_s"), gib("knfsd-tcp_write_guest_cpu_s"), gib("knfsd-rdma_read_guest_cpu_s"), gib("knfsd-tcp_read_guest_cpu_s")
    }' results.txt
echo "INFO $ERR errors"
[ "$ERR" -eq 0 ]
