#!/bin/bash
# check-lua-dissector.sh [PCAP]
#
# Checks contrib/rpcrdma2.lua with tshark on a capture of RPC-over-RDMA
# version 2 traffic (default: crates/dump/testdata/nfsrdma-own-v2.pcap):
# every Send that `nfsrdma dump` decodes as a v2 header must show as
# rpcrdma2 (150 in the default capture), none may carry the dissector's
# malformed-header expert info, and the only malformed frames allowed are
# NFS messages whose bulk data travelled in a chunk (tshark does not splice
# chunks back, as with version 1). Exit 2 when tshark is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PCAP=${1:-$root/crates/dump/testdata/nfsrdma-own-v2.pcap}
command -v tshark >/dev/null || { echo "tshark not installed (apt-get install tshark)" >&2; exit 2; }
TS=(tshark -n -X "lua_script:$root/contrib/rpcrdma2.lua" -r "$PCAP")
v2=$("${TS[@]}" -Y rpcrdma2 -T fields -e frame.number 2>/dev/null | wc -l)
bad=$("${TS[@]}" -Y rpcrdma2.malformed -T fields -e frame.number 2>/dev/null | wc -l)
other=$("${TS[@]}" -Y '_ws.malformed && !(nfs.procedure_v3 == 6 || nfs.procedure_v3 == 7 || nfs.opcode == 25 || nfs.opcode == 38)' -T fields -e frame.number 2>/dev/null | wc -l)
echo "$PCAP: $v2 frames with an RPC-over-RDMA v2 header, $bad malformed v2 headers, $other other malformed frames"
fail=0
if [ -z "${1:-}" ] && [ "$v2" -ne 150 ]; then echo "FAIL: expected 150 rpcrdma2 frames" >&2; fail=1; fi
if [ "$v2" -eq 0 ]; then echo "FAIL: no rpcrdma2 frame" >&2; fail=1; fi
if [ "$bad" -ne 0 ]; then echo "FAIL: malformed v2 headers" >&2; fail=1; fi
if [ "$other" -ne 0 ]; then echo "FAIL: malformed frames beyond chunk-carried NFS data" >&2; fail=1; fi
exit $fail
