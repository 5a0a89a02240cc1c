#!/usr/bin/env python3
"""pnfs-relay.py: the cuttable TCP relay of the pNFS VM phase (issue 18,
scripts/interop-pnfs.sh, docs/pnfs.md).

Sits between the kpeer guest and the nfsrdma data servers (DSes): each
LISTEN:TARGET pair accepts on 127.0.0.1:LISTEN and carries the byte
stream to 127.0.0.1:TARGET unchanged (NFSv3 over TCP). On the way it
reads the RPC record marks (RFC 5531 §11) and the first bytes of each
record: the NFSv3 procedure of each call and the status of each reply
(RFC 1813 nfsstat3), so the guest can see what the DSes answered (after
fencing, the kernel's stale WRITEs must be refused). The guest drives it
over a control port, one command a line, one reply a line:

  freeze         stop forwarding, keep every connection (a DS whose I/O
                 hangs: the client's WRITE is stuck); what the client
                 sends is still read (and counted) and held until the
                 thaw; new connections wait
  thaw           forward again (what was held goes on)
  down           drop every connection and what it held, and close new
                 ones at once (a DS gone, as the client sees it)
  up             accept and forward again
  count TEXT     the number of lines of the watched log (the MDS's)
                 holding TEXT: "ok N"
  waitfor SECS MIN TEXT
                 wait up to SECS seconds for MIN such lines: "ok N"
  mdsio          the READ and WRITE calls the MDS served so far (NFSv3
                 procedures 6 and 7 plus NFSv4 operations, from its
                 --metrics-url): "ok READS WRITES"
  mdsop OP       NFSv4 operation OP at the MDS (nfs4_ops_total):
                 "ok ALL NFS4_OK" (every answer, the successful ones)
  dscalls PROC   the NFSv3 calls of procedure PROC the client sent the
                 DSes so far (held ones too): "ok N"
  dscreds PROC   those calls by AUTH_SYS identity: "ok UID:GID=N ..."
  dsreplies PROC the DSes' NFSv3 replies to procedure PROC (6 READ,
                 7 WRITE) so far, by status: "ok OK ACCES_OR_PERM OTHER"
  state          the state and the bytes forwarded so far

Usage: pnfs-relay.py --control PORT --log FILE --metrics-url URL
       LISTEN:TARGET...
"""

import argparse
import asyncio
import signal
import socket
import struct
import sys
import urllib.request


def mds_io(metrics):
    """(READ, WRITE) calls in a Prometheus text body: NFSv3 procedures 6
    and 7 of rpc_calls_total, NFSv4 READ and WRITE of nfs4_ops_total."""
    reads = writes = 0
    for line in metrics.splitlines():
        name, _, rest = line.partition("{")
        try:
            value = int(float(line.rsplit(None, 1)[-1]))
        except (ValueError, IndexError):
            continue
        if name == "rpc_calls_total" and 'program="nfs"' in rest and 'version="3"' in rest:
            reads += value if 'procedure="6"' in rest else 0
            writes += value if 'procedure="7"' in rest else 0
        elif name == "nfs4_ops_total":
            reads += value if 'op="READ"' in rest else 0
            writes += value if 'op="WRITE"' in rest else 0
    return reads, writes


def mds_op(metrics, op):
    """(all, NFS4_OK) answers of NFSv4 operation `op` in a Prometheus text
    body (nfs4_ops_total{minor,op,status})."""
    every = ok = 0
    for line in metrics.splitlines():
        name, _, rest = line.partition("{")
        if name != "nfs4_ops_total" or f'op="{op}"' not in rest:
            continue
        try:
            value = int(float(line.rsplit(None, 1)[-1]))
        except (ValueError, IndexError):
            continue
        every += value
        ok += value if 'status="NFS4_OK"' in rest else 0
    return every, ok


NFS_PROGRAM = 100003
# nfsstat3 (RFC 1813 §2.6): NFS3ERR_PERM and NFS3ERR_ACCES, what a DS
# answers I/O under credentials the fencing replaced.
NFS3ERR_PERM = 1
NFS3ERR_ACCES = 13
# The first bytes of a record kept: enough for a call's procedure and
# AUTH_SYS uid and gid behind a machine name of up to 64 bytes, and a
# reply's status behind a verifier of up to 100 bytes.
PEEK = 128
# Bytes read and not yet forwarded, per direction of a connection
# (frozen: held until the thaw).
MAX_HELD = 64 << 20
# Calls awaiting their reply, per connection: the oldest are dropped
# beyond this (the kernel keeps far fewer outstanding).
MAX_PENDING = 4096


def auth_sys(cred):
    """"UID:GID" of an AUTH_SYS credential (RFC 5531 Appendix A: flavor 1,
    body of stamp, machine name, uid, gid, gids), None for another
    flavor or one cut short."""
    if len(cred) < 16:
        return None
    flavor, _len, _stamp, name = struct.unpack(">4I", cred[:16])
    at = 16 + (name + 3) // 4 * 4
    if flavor != 1 or len(cred) < at + 8:
        return None
    uid, gid = struct.unpack(">2I", cred[at : at + 8])
    return f"{uid}:{gid}"


class Records:
    """Splits one direction of an RPC-over-TCP stream at its record marks
    (RFC 5531 §11) and hands the first PEEK bytes of each record to
    `on_record`; never holds more than that."""

    def __init__(self, on_record):
        self.on_record = on_record
        self.mark = b""
        self.left = 0
        self.last = False
        self.head = b""

    def feed(self, data):
        i, n = 0, len(data)
        while i < n:
            if self.left == 0:
                take = min(4 - len(self.mark), n - i)
                self.mark += data[i : i + take]
                i += take
                if len(self.mark) < 4:
                    return
                word = struct.unpack(">I", self.mark)[0]
                self.mark = b""
                self.last = bool(word & 0x80000000)
                self.left = word & 0x7FFFFFFF
                if self.left == 0:
                    if self.last:
                        self.end()
                    continue
            take = min(self.left, n - i)
            if len(self.head) < PEEK:
                self.head += data[i : i + min(take, PEEK - len(self.head))]
            i += take
            self.left -= take
            if self.left == 0 and self.last:
                self.end()

    def end(self):
        head, self.head = self.head, b""
        self.on_record(head)


class Rpc:
    """The NFSv3 calls and replies of one relayed connection: each call of
    procedure P is counted in `calls[P]` (when it reaches the relay, held
    or not), each reply to one in `replies[(P, status)]`."""

    def __init__(self, calls, replies):
        self.seen = calls
        self.replies = replies
        self.pending = {}
        self.calls = Records(self.call)
        self.answers = Records(self.reply)

    def call(self, head):
        if len(head) < 24:
            return
        xid, mtype, _rpcvers, prog, vers, proc = struct.unpack(">6I", head[:24])
        if mtype != 0 or prog != NFS_PROGRAM or vers != 3:
            return
        self.seen[proc] = self.seen.get(proc, 0) + 1
        who = auth_sys(head[24:])
        if who is not None:
            self.seen[(proc, who)] = self.seen.get((proc, who), 0) + 1
        if len(self.pending) >= MAX_PENDING:
            self.pending.pop(next(iter(self.pending)))
        self.pending[xid] = proc

    def reply(self, head):
        if len(head) < 12:
            return
        xid, mtype, stat = struct.unpack(">3I", head[:12])
        proc = self.pending.pop(xid, None) if mtype == 1 else None
        if proc is None:
            return
        status = "denied"
        if stat == 0 and len(head) >= 20:
            vlen = struct.unpack(">I", head[16:20])[0]
            at = 20 + (vlen + 3) // 4 * 4
            if len(head) >= at + 8:
                accept, nfs = struct.unpack(">2I", head[at : at + 8])
                status = nfs if accept == 0 else f"accept_stat {accept}"
        self.replies[(proc, status)] = self.replies.get((proc, status), 0) + 1


class Relay:
    def __init__(self, args):
        self.args = args
        self.running = asyncio.Event()
        self.running.set()
        self.down = False
        self.conns = set()
        self.bytes = 0
        self.calls = {}
        self.replies = {}

    async def pump(self, reader, writer, watch):
        """Carries one direction of a connection. It reads on while frozen
        (so the sender's calls are out of its hands and counted here),
        holding what it read until the thaw: at most MAX_HELD bytes, then
        it stops reading."""
        queue = asyncio.Queue()
        held = 0

        async def read():
            nonlocal held
            try:
                while True:
                    while held >= MAX_HELD:
                        await asyncio.sleep(0.05)
                    data = await reader.read(65536)
                    if not data or self.down:
                        break
                    try:
                        watch.feed(data)
                    except Exception as e:  # the counts are lost, never the bytes
                        print(f"relay: RPC parsing stopped: {e!r}", flush=True)
                        watch.feed = lambda _data: None
                    held += len(data)
                    queue.put_nowait(data)
            except (ConnectionError, OSError):
                pass
            finally:
                queue.put_nowait(None)

        async def write():
            nonlocal held
            half = False
            try:
                while True:
                    data = await queue.get()
                    if data is None:
                        # The sender closed: pass the end on but keep the
                        # other direction open, so the replies to what it
                        # sent last (held calls) are still read and counted.
                        if writer.can_write_eof():
                            writer.write_eof()
                            half = True
                        break
                    await self.running.wait()
                    if self.down:
                        break
                    writer.write(data)
                    held -= len(data)
                    self.bytes += len(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    if not half:
                        writer.close()
                except OSError:
                    pass

        await asyncio.gather(read(), write())

    async def serve(self, target, reader, writer):
        if self.down:
            writer.close()
            return
        await self.running.wait()
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        pair = (writer, tw)
        self.conns.add(pair)
        rpc = Rpc(self.calls, self.replies)
        try:
            await asyncio.gather(self.pump(reader, tw, rpc.calls), self.pump(tr, writer, rpc.answers))
        finally:
            self.conns.discard(pair)
            for w in pair:
                try:
                    w.close()
                except OSError:
                    pass

    def drop_all(self):
        for a, b in list(self.conns):
            for w in (a, b):
                sock = w.get_extra_info("socket")
                try:
                    # Reset, so nothing held is delivered later.
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    w.transport.abort()
                except OSError:
                    pass
        self.conns.clear()

    def log_count(self, text):
        try:
            with open(self.args.log, errors="replace") as f:
                return sum(1 for line in f if text in line)
        except OSError:
            return 0

    async def command(self, line):
        words = line.split()
        if not words:
            return "err empty"
        cmd = words[0]
        if cmd == "freeze":
            self.running.clear()
        elif cmd == "thaw":
            self.running.set()
        elif cmd == "down":
            self.down = True
            self.drop_all()
            self.running.set()
        elif cmd == "up":
            self.down = False
        elif cmd == "waitfor" and len(words) >= 4:
            secs, least, text = float(words[1]), int(words[2]), " ".join(words[3:])
            loop = asyncio.get_running_loop()
            end = loop.time() + secs
            n = self.log_count(text)
            while n < least and loop.time() < end:
                await asyncio.sleep(0.5)
                n = self.log_count(text)
            return f"ok {n}"
        elif cmd == "count" and len(words) >= 2:
            return f"ok {self.log_count(' '.join(words[1:]))}"
        elif cmd in ("mdsio", "mdsop"):
            if cmd == "mdsop" and len(words) != 2:
                return "err usage: mdsop OP"
            try:
                with urllib.request.urlopen(self.args.metrics_url, timeout=10) as r:
                    body = r.read().decode(errors="replace")
            except OSError as e:
                return f"err {e}"
            if cmd == "mdsop":
                return "ok %d %d" % mds_op(body, words[1])
            return "ok %d %d" % mds_io(body)
        elif cmd == "dscalls" and len(words) == 2 and words[1].isdigit():
            return f"ok {self.calls.get(int(words[1]), 0)}"
        elif cmd == "dscreds" and len(words) == 2 and words[1].isdigit():
            proc = int(words[1])
            who = sorted((k[1], n) for k, n in self.calls.items() if isinstance(k, tuple) and k[0] == proc)
            return "ok " + " ".join(f"{w}={n}" for w, n in who)
        elif cmd == "dsreplies" and len(words) == 2 and words[1].isdigit():
            proc, ok, refused, other = int(words[1]), 0, 0, 0
            for (p, status), n in self.replies.items():
                if p != proc:
                    continue
                if status == 0:
                    ok += n
                elif status in (NFS3ERR_ACCES, NFS3ERR_PERM):
                    refused += n
                else:
                    other += n
            return f"ok {ok} {refused} {other}"
        elif cmd != "state":
            return "err unknown command"
        state = "down" if self.down else ("frozen" if not self.running.is_set() else "running")
        return f"ok {state} {self.bytes} bytes {len(self.conns)} connections"

    async def control(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                reply = await self.command(line.decode(errors="replace").strip())
                print(f"relay: {line.decode(errors='replace').strip()} -> {reply}", flush=True)
                writer.write((reply + "\n").encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--control", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--metrics-url", required=True)
    p.add_argument("pairs", nargs="+")
    args = p.parse_args()
    relay = Relay(args)
    servers = [await asyncio.start_server(relay.control, "127.0.0.1", args.control)]
    for pair in args.pairs:
        listen, target = (int(x) for x in pair.split(":"))
        servers.append(
            await asyncio.start_server(
                lambda r, w, t=target: relay.serve(t, r, w), "127.0.0.1", listen
            )
        )
    print(f"relay: control :{args.control}, {' '.join(args.pairs)}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    # Started in the background by a non-interactive shell, SIGINT
    # arrives ignored; interop-pnfs.sh stops its servers with it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
