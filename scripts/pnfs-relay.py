#!/usr/bin/env python3
"""pnfs-relay.py: the cuttable TCP relay of the pNFS VM phase (issue 18,
scripts/interop-pnfs.sh, docs/pnfs.md).

Sits between the kpeer guest and the nfsrdma data servers (DSes): each
LISTEN:TARGET pair accepts on 127.0.0.1:LISTEN and carries the byte
stream to 127.0.0.1:TARGET unchanged (NFSv3 over TCP, or iWARP/MPA: it
never looks inside). The guest drives it over a control port, one
command a line, one reply a line:

  freeze         stop forwarding, keep every connection (a DS whose I/O
                 hangs: the client's WRITE is stuck); new connections
                 wait
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


class Relay:
    def __init__(self, args):
        self.args = args
        self.running = asyncio.Event()
        self.running.set()
        self.down = False
        self.conns = set()
        self.bytes = 0

    async def pump(self, reader, writer):
        try:
            while True:
                await self.running.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self.running.wait()
                if self.down:
                    break
                writer.write(data)
                self.bytes += len(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except OSError:
                pass

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
        try:
            await asyncio.gather(self.pump(reader, tw), self.pump(tr, writer))
        finally:
            self.conns.discard(pair)

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
        elif cmd == "mdsio":
            try:
                with urllib.request.urlopen(self.args.metrics_url, timeout=10) as r:
                    body = r.read().decode(errors="replace")
            except OSError as e:
                return f"err {e}"
            return "ok %d %d" % mds_io(body)
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
