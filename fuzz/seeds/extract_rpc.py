#!/usr/bin/env python3
"""Print every ONC RPC message in the kpeer captures as one line:
`pcap frame call|reply prog vers hex`, where hex is the RPC message (header
plus the bytes tshark attributes to the program layer after it).

Usage: python3 extract_rpc.py /work/shared/kpeer/pcaps/*.pcap > rpc-messages.txt
Needs tshark (4.0 was used)."""
import json
import subprocess
import sys


def raw_hex(layers, name):
    v = layers.get(name + "_raw")
    if isinstance(v, list) and v and isinstance(v[0], str):
        return v[0]
    if isinstance(v, list) and v and isinstance(v[0], list):
        return "".join(x[0] for x in v)
    return None


def main():
    for pcap in sys.argv[1:]:
        out = subprocess.run(
            ["tshark", "-r", pcap, "-Y", "rpc", "-T", "json", "-x"],
            check=True, capture_output=True, text=True).stdout
        for pkt in json.loads(out):
            layers = pkt["_source"]["layers"]
            rpc = raw_hex(layers, "rpc")
            if rpc is None:
                continue
            keys = [k for k in layers if not k.endswith("_raw")]
            after = keys[keys.index("rpc") + 1:] if "rpc" in keys else []
            body = "".join(raw_hex(layers, k) or "" for k in after)
            info = layers["rpc"]
            kind = "call" if info.get("rpc.msgtyp") == "0" else "reply"
            prog = info.get("rpc.program", "-")
            vers = info.get("rpc.programversion", "-")
            frame = layers["frame"]["frame.number"]
            name = pcap.rsplit("/", 1)[-1]
            # Cut at 8 KiB (bulk WRITE/READ data adds nothing to a seed).
            print(name, frame, kind, prog, vers, (rpc + body)[:16384])


if __name__ == "__main__":
    main()
