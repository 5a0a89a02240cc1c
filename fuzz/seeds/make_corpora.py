#!/usr/bin/env python3
"""Write seed inputs taken from real Linux peers (the kpeer captures) into
fuzz/corpus/<target>/seed-*: RPC-over-RDMA headers from
crates/rpcrdma/testdata/kpeer-headers.txt and RPC messages from
fuzz/seeds/rpc-messages.txt (see extract_rpc.py). Run from fuzz/:
    python3 seeds/make_corpora.py
Each target's input layout is described in its fuzz_targets/<name>.rs."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ = os.path.dirname(HERE)
ROOT = os.path.dirname(FUZZ)


def write(target, name, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def rpcrdma_headers():
    path = os.path.join(ROOT, "crates", "rpcrdma", "testdata", "kpeer-headers.txt")
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        pcap, frame, _dirn, hexs = line.split()
        yield pcap.split(".pcap")[0] + "-" + frame, bytes.fromhex(hexs)


def rpc_messages():
    for line in open(os.path.join(HERE, "rpc-messages.txt")):
        pcap, frame, kind, prog, vers, hexs = line.split()
        yield pcap.split(".pcap")[0] + "-" + frame, kind, prog, vers, bytes.fromhex(hexs)


def tcp_streams(pcap):
    """Each TCP direction's payload in sequence order: {(stream, sport): bytes}."""
    import subprocess
    out = subprocess.run(
        ["tshark", "-r", pcap, "-Y", "tcp.len > 0", "-T", "fields",
         "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.seq_raw", "-e", "tcp.payload"],
        check=True, capture_output=True, text=True).stdout
    segs = {}
    for line in out.splitlines():
        stream, sport, seq, payload = line.split("\t")
        segs.setdefault((int(stream), int(sport)), {})[int(seq)] = bytes.fromhex(payload)
    return {k: b"".join(v[s] for s in sorted(v)) for k, v in segs.items()}


def iwarp_seeds():
    """FPDU streams after the MPA Request/Reply of the kernel captures, with
    the iwarp_engine selector (bit 0: the receiver is the initiator, i.e.
    the bytes come from port 20049; bit 1: CRC as negotiated)."""
    for name in ("nfsrdma-v3", "nfsrdma-v4.1"):
        pcap = os.path.join(ROOT, "crates", "iwarp", "testdata", name + ".pcap")
        for (stream, sport), data in tcp_streams(pcap).items():
            if len(data) < 20 or data[:15] not in (b"MPA ID Req Fram", b"MPA ID Rep Fram"):
                continue
            crc = data[16] & 0x40 != 0
            pd_len = struct.unpack(">H", data[18:20])[0]
            fpdus = data[20 + pd_len:]
            sel = (1 if sport == 20049 else 0) | (2 if crc else 0)
            for i in range(0, min(len(fpdus), 64 * 1024), 4000):
                yield "%s-%d-%d-%d" % (name, stream, sport, i), bytes([sel, 255]) + fpdus[i:i + 4000]


def rpcrdma_server_seeds():
    """Each client-to-server transport header followed by its RPC call, as
    one Send record of the rpcrdma_server target; and one input with every
    call of a capture in order."""
    msgs = {n: m for n, kind, _p, _v, m in rpc_messages() if kind == "call"}
    per_pcap = {}
    for name, hdr in rpcrdma_headers():
        pcap = name.rsplit("-", 1)[0]
        send = hdr + msgs.get(name, b"")
        send = send[:0xffff]
        rec = struct.pack(">H", len(send)) + send
        per_pcap.setdefault(pcap, []).append(rec)
        yield name, rec
    for pcap, recs in per_pcap.items():
        yield pcap + "-all", b"".join(recs)[:64 * 1024]


def rpc_call_header(msg):
    """(prog, vers, proc, args) of an RPC call message, or None."""
    try:
        xid, mtype, rpcvers, prog, vers, proc = struct.unpack(">6I", msg[:24])
        off = 24
        for _ in range(2):  # credential, verifier
            _flavor, n = struct.unpack(">2I", msg[off:off + 8])
            off += 8 + ((n + 3) & ~3)
    except struct.error:
        return None
    if mtype != 0 or off > len(msg):
        return None
    return prog, vers, proc, msg[off:]


def main():
    for name, data in rpcrdma_server_seeds():
        write("rpcrdma_server", name, data)
    for name, data in iwarp_seeds():
        write("iwarp_engine", name, data)
        write("iwarp_fpdu", name, data[1:])
    calls = {}
    for name, hdr in rpcrdma_headers():
        write("rpcrdma_v1_header", name, hdr)
        write("rpcrdma_v2_header", name, hdr)
        write("rpcrdma_chunks", name, hdr + bytes(64))
    for name, kind, prog, vers, msg in rpc_messages():
        write("oncrpc_msg", name, msg)
        write("oncrpc_record", name, bytes([7]) + struct.pack(">I", 0x80000000 | len(msg)) + msg)
        if kind == "call":
            calls[name] = msg
    # nfs_server_rpc: a flag byte, then records `[kind 0][len u16 BE][RPC record]`.
    def rec(m):
        m = m[:0xffff]
        return bytes([0]) + struct.pack(">H", len(m)) + m
    for name, msg in calls.items():
        write("nfs_server_rpc", name, bytes([0]) + rec(msg))
    # Harness-built kinds: the call's arguments after the RPC header; an
    # NFSv3 call's first file handle replaced by the harness's (kind 1),
    # a COMPOUND's arguments as they are (kind 2).
    def rec_kind(kind, body):
        body = body[:0xffff]
        return bytes([kind]) + struct.pack(">H", len(body)) + body
    k5 = []
    for name, msg in calls.items():
        hdr = rpc_call_header(msg)
        if hdr is None:
            continue
        prog, vers, proc, args = hdr
        if (prog, vers) == (100003, 3) and len(args) >= 4:
            fhlen = struct.unpack(">I", args[:4])[0]
            rest = args[4 + ((fhlen + 3) & ~3):]
            write("nfs_server_rpc", name + "-k1", bytes([0]) + rec_kind(1, bytes([proc, 0]) + rest))
        if (prog, vers, proc) == (100003, 4, 1):
            write("nfs_server_rpc", name + "-k2", bytes([0]) + rec_kind(2, args))
            # Kind 5: the ops after the kernel's SEQUENCE, in our session.
            try:
                taglen = struct.unpack(">I", args[:4])[0]
                off = 4 + ((taglen + 3) & ~3)
                _minor, nops, first = struct.unpack(">3I", args[off:off + 12])
            except struct.error:
                continue
            if first == 53 and nops >= 1:
                ops = args[off + 8 + 4 + 36:]
                k5.append(rec_kind(5, bytes([0, nops - 1]) + ops))
                write("nfs_server_rpc", name + "-k5", bytes([0]) + k5[-1])
    write("nfs_server_rpc", "v4.1-session-k5", bytes([0]) + b"".join(k5)[:32768])
    for pcap in ("nfsrdma-v3", "nfsrdma-v4.1"):
        stream = b"".join(rec(m) for n, m in calls.items() if n.startswith(pcap + "-"))
        write("nfs_server_rpc", pcap + "-session", bytes([0]) + stream)

    dump_seeds()


def dump_seeds():
    """dump_capture: whole pcap files (kpeer captures and our own v2
    traffic), cut to 64 KiB so the fuzzer mutates their framing early."""
    for d in (("interop", "kpeer", "pcaps"), ("crates", "dump", "testdata"),
              ("crates", "iwarp", "testdata")):
        path = os.path.join(ROOT, *d)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith(".pcap"):
                with open(os.path.join(path, name), "rb") as f:
                    write("dump_capture", name[:-5], f.read(64 * 1024))


if __name__ == "__main__":
    main()
