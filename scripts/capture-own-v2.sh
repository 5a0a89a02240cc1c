#!/bin/bash
# capture-own-v2.sh OUT.pcap
#
# Captures this project's own RPC-over-RDMA version 2 traffic on loopback:
# `nfsrdma serve` (software iWARP) and the CLI client with ?version=2, NFSv3
# and NFSv4.1 each doing a WRITE of 40 KiB (read chunk), a READ of it back
# (write chunk), a directory listing and a small inline READ. Also one
# NFSv3 listing over TCP. Needs root (tcpdump on lo). The result is the
# test vector crates/dump/testdata/nfsrdma-own-v2.pcap (docs/dump.md).
set -euo pipefail
OUT=${1:?usage: capture-own-v2.sh OUT.pcap}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NFSRDMA:-$root/target/debug/nfsrdma}
[ -x "$bin" ] || (cd "$root" && cargo build -q -p nfsrdma)
work=$(mktemp -d)
trap 'kill $spid $tpid 2>/dev/null || true; cat "$work/serve.log" >&2; rm -rf "$work"' EXIT
mkdir -p "$work/export" "$work/state"
head -c 40960 /dev/urandom >"$work/data.bin"
echo "hello v2" >"$work/export/small.txt"
base=$((30000 + $$ % 20000))
tcp=$base; rdma=$((base + 1)); mnt=$((base + 2)); rpcb=$((base + 3))
tcpdump -i lo -U -s 0 -w "$OUT" "tcp port $tcp or tcp port $rdma or tcp port $mnt or tcp port $rpcb" 2>/dev/null &
tpid=$!
"$bin" serve "$work/export" --addr 127.0.0.1 --port $tcp --rdma-port $rdma \
  --mount-port $mnt --rpcbind-port $rpcb --state-dir "$work/state" --no-root-squash \
  >"$work/serve.log" 2>&1 &
spid=$!
# Wait for the server's start line (no probe connection into the capture).
for _ in $(seq 200); do
  grep -q "nfs over rdma" "$work/serve.log" && break
  sleep 0.1
done
u="nfs+rdma://127.0.0.1:$rdma$work/export"
q="mountport=$mnt&version=2"
"$bin" cp "$work/data.bin" "$u/v3.bin?$q"
"$bin" cat "$u/v3.bin?$q" | cmp - "$work/data.bin"
"$bin" ls "$u?$q" >/dev/null
"$bin" cat "$u/small.txt?$q" >/dev/null
"$bin" cp "$work/data.bin" "$u/v41.bin?$q&version=4.1"
"$bin" cat "$u/v41.bin?$q&version=4.1" | cmp - "$work/data.bin"
"$bin" ls "$u?$q&version=4.1" >/dev/null
"$bin" ls "nfs://127.0.0.1:$tcp$work/export?mountport=$mnt" >/dev/null
sleep 1
kill $spid
wait $spid 2>/dev/null || true
sleep 1
kill $tpid
wait $tpid 2>/dev/null || true
ls -l "$OUT"
