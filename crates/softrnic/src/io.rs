//! The two IO tasks of a queue pair.
//!
//! Receive: reads each FPDU in pieces — length field and DDP header into a
//! small header buffer, then the payload *straight from the socket into its
//! destination* (the registered region through [`MrTable::place_direct`], or
//! the posted receive buffer), then pad and CRC — so payload never passes
//! through a staging buffer (RFC 5041 §3, direct data placement).
//!
//! The last payload piece of an FPDU is read with one vectored read together
//! with pad, CRC and the next FPDU's first 16 bytes (a whole tagged header).
//!
//! Transmit ([`flush`]): drains the engine's FPDUs, gathers their payload
//! (the posted work request's buffers, or the RDMA Read source region,
//! written under the table lock) and writes them without waiting; the
//! transmit task waits for room when the socket is full.
//!
//! [`MrTable::place_direct`]: rnic::MrTable::place_direct

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};

use bytes::{Buf, Bytes, BytesMut};
use iwarp::conn::{PlaceTarget, Placement};
use iwarp::segment::{PayloadRef, Transmit};
use iwarp::wire::fpdu::Crc;
use iwarp::wire::{ddp, fpdu};
use rnic::{Access, CloseReason, QpEvent, Stag, TaggedAccess};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::qp::{Core, Shared};

/// Counters of a device's socket IO, shared by its queue pairs.
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Write system calls made (vectored or not), counted before each
    /// call so a peer that got the bytes never sees an older count.
    pub(crate) socket_writes: AtomicU64,
}

impl IoCounters {
    fn wrote(&self) {
        self.socket_writes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why the receive loop stopped.
enum RxEnd {
    /// The peer closed the TCP stream between FPDUs.
    Eof,
    /// The engine closed the stream (Terminate sent or received), or the
    /// consumer closed the queue pair.
    Closed,
    /// A socket error, a close inside an FPDU, or memory that vanished.
    Lost,
}

pub(crate) async fn rx_task(sh: Arc<Shared>, mut rd: OwnedReadHalf) {
    let end = rx_loop(&sh, &mut rd).await;
    {
        let mut core = sh.lock();
        match end {
            RxEnd::Eof => core.finish(&sh, CloseReason::PeerDisconnect, &[QpEvent::PeerClose]),
            RxEnd::Closed => core.finish(&sh, CloseReason::ConnectionLost, &[QpEvent::LlpError]),
            RxEnd::Lost => core.finish(&sh, CloseReason::ConnectionLost, &[QpEvent::LlpError]),
        }
    }
    sh.tx_wake.notify_one();
}

async fn read_exact(rd: &mut OwnedReadHalf, buf: &mut [u8]) -> Result<(), RxEnd> {
    rd.read_exact(buf).await.map(drop).map_err(|_| RxEnd::Lost)
}

/// Bytes of the next FPDU read together with the current trailer: the
/// shortest header (length field and tagged DDP header), so a read never takes
/// a payload byte before its destination is known; a tagged header arrives
/// whole with the previous FPDU's trailer.
const LOOKAHEAD: usize = fpdu::LEN_FIELD + ddp::TAGGED_HEADER_LEN;

/// Pad, CRC and the next FPDU's lookahead, read in the same system call as
/// the end of the payload.
const TAIL: usize = 3 + fpdu::CRC_LEN + LOOKAHEAD;

async fn rx_loop(sh: &Shared, rd: &mut OwnedReadHalf) -> RxEnd {
    let mut head = [0u8; iwarp::deframe::MAX_HEADER];
    let mut tail = [0u8; TAIL];
    let mut got = 0;
    loop {
        if got == 0 {
            // Between FPDUs with nothing of the next one read: let the
            // consumer woken by this FPDU's completion run (and post its
            // answer) before this task asks the socket again.
            tokio::task::yield_now().await;
        }
        // Length field and the DDP control octet, whose T bit sizes the header.
        while got < fpdu::LEN_FIELD + 1 {
            match rd.read(&mut head[got..LOOKAHEAD]).await {
                Ok(0) if got == 0 => return RxEnd::Eof,
                Ok(0) | Err(_) => return RxEnd::Lost,
                Ok(n) => got += n,
            }
        }
        let ulpdu = usize::from(u16::from_be_bytes([head[0], head[1]]));
        let ddp_len = if head[2] & 0x80 != 0 {
            ddp::TAGGED_HEADER_LEN
        } else {
            ddp::UNTAGGED_HEADER_LEN
        };
        let total = fpdu::fpdu_len(ulpdu);
        if ddp_len == ddp::UNTAGGED_HEADER_LEN
            && total <= SMALL_FPDU
            && total >= fpdu::LEN_FIELD + ddp_len
        {
            // A short untagged FPDU (a small Send, a Read Request, a
            // Terminate): the rest of it and the next one's lookahead in
            // one read.
            let mut small = [0u8; SMALL_FPDU + LOOKAHEAD];
            small[..got].copy_from_slice(&head[..got]);
            let mut filled = got;
            while filled < total {
                match rd.read(&mut small[filled..total + LOOKAHEAD]).await {
                    Ok(0) | Err(_) => return RxEnd::Lost,
                    Ok(n) => filled += n,
                }
            }
            if let Err(e) = feed_small(sh, &small[..total]) {
                return e;
            }
            got = filled - total;
            head[..got].copy_from_slice(&small[total..filled]);
            continue;
        }
        let head_len = (fpdu::LEN_FIELD + ddp_len).max(got);
        if let Err(e) = read_exact(rd, &mut head[got..head_len]).await {
            return e;
        }
        // The engine refuses a ULPDU shorter than its header.
        if let Err(e) = feed(sh, &head[..head_len]) {
            return e;
        }
        got = 0;
        let Some(mut remaining) = fpdu::fpdu_len(ulpdu).checked_sub(head_len) else {
            return RxEnd::Lost;
        };
        let trailer = fpdu::pad_len(ulpdu) + fpdu::CRC_LEN;
        while remaining > 0 {
            let placement = {
                let core = sh.lock();
                if core.finished {
                    return RxEnd::Closed;
                }
                core.conn.poll_placement()
            };
            match placement {
                Some(p) => {
                    // The last payload piece reads trailer and lookahead too.
                    let want = p.len.min(remaining);
                    let t = if want + trailer == remaining {
                        &mut tail[..trailer + LOOKAHEAD]
                    } else {
                        &mut tail[..0]
                    };
                    let (n, extra) = match place(sh, rd, p, want, t).await {
                        Ok(r) => r,
                        Err(e) => return e,
                    };
                    remaining -= n;
                    if extra > 0 {
                        let k = extra.min(remaining);
                        if let Err(e) = feed(sh, &tail[..k]) {
                            return e;
                        }
                        remaining -= k;
                        got = extra - k;
                        head[..got].copy_from_slice(&tail[k..extra]);
                    }
                }
                None => {
                    // Inline body or trailer. The last piece of the FPDU is
                    // read together with up to LOOKAHEAD bytes of the next one.
                    let mut buf = [0u8; 256 + LOOKAHEAD];
                    let want = remaining.min(256);
                    let limit = if want == remaining {
                        want + LOOKAHEAD
                    } else {
                        want
                    };
                    let mut filled = 0;
                    while filled < want {
                        match rd.read(&mut buf[filled..limit]).await {
                            Ok(0) | Err(_) => return RxEnd::Lost,
                            Ok(n) => filled += n,
                        }
                    }
                    if let Err(e) = feed(sh, &buf[..want]) {
                        return e;
                    }
                    got = filled - want;
                    head[..got].copy_from_slice(&buf[want..filled]);
                    remaining -= want;
                }
            }
        }
    }
}

/// The largest untagged FPDU read whole into the receive task's buffer: its
/// Send payload (up to 4 KiB, an RPC-over-RDMA v2 inline message) is then
/// copied into the receive buffer, which costs less than the two extra
/// system calls of reading it in place. Tagged payload is never copied.
const SMALL_FPDU: usize = fpdu::fpdu_len(ddp::UNTAGGED_HEADER_LEN + 4096);

/// Hands a whole short FPDU to the engine, copying Send payload into the
/// posted receive buffer.
fn feed_small(sh: &Shared, bytes: &[u8]) -> Result<(), RxEnd> {
    let mut core = sh.lock();
    if core.finished {
        return Err(RxEnd::Closed);
    }
    let mut off = 0;
    let mut result = Ok(());
    while off < bytes.len() {
        if let Some(p) = core.conn.poll_placement() {
            let PlaceTarget::Recv { wr_id, offset } = p.target else {
                result = Err(RxEnd::Lost);
                break;
            };
            let Some(data) = bytes.get(off..off + p.len.min(bytes.len() - off)) else {
                result = Err(RxEnd::Lost);
                break;
            };
            let Core { conn, recvs, .. } = &mut *core;
            let Some((_, buf)) = recvs.get_mut(&wr_id) else {
                result = Err(RxEnd::Lost);
                break;
            };
            // The engine admitted the segment only if it fits the buffer.
            buf.truncate(offset);
            if buf.len() < offset {
                buf.resize(offset, 0);
            }
            buf.extend_from_slice(data);
            if conn.placed(data).is_err() {
                result = Err(RxEnd::Closed);
                break;
            }
            off += data.len();
            continue;
        }
        match core.with_engine(sh, |conn, mem| conn.handle_bytes(&bytes[off..], mem)) {
            Ok(0) => {
                result = Err(RxEnd::Lost);
                break;
            }
            Ok(n) => off += n,
            Err(_) => {
                result = Err(RxEnd::Closed);
                break;
            }
        }
    }
    core.pump(sh);
    let wake = needs_tx(&core);
    drop(core);
    if wake {
        sh.tx_wake.notify_one();
    }
    result
}

/// Hands header, inline or trailer bytes to the engine.
fn feed(sh: &Shared, bytes: &[u8]) -> Result<(), RxEnd> {
    let mut core = sh.lock();
    if core.finished {
        return Err(RxEnd::Closed);
    }
    let mut off = 0;
    let mut result = Ok(());
    while off < bytes.len() {
        match core.with_engine(sh, |conn, mem| conn.handle_bytes(&bytes[off..], mem)) {
            Ok(0) => {
                // Only payload stops the engine, and payload is never fed here.
                result = Err(RxEnd::Lost);
                break;
            }
            Ok(n) => off += n,
            Err(_) => {
                result = Err(RxEnd::Closed);
                break;
            }
        }
    }
    core.pump(sh);
    let wake = needs_tx(&core);
    drop(core);
    // Responses (Read Responses, a Terminate) go out from the transmit task,
    // which batches those of several inbound FPDUs into one write.
    if wake {
        sh.tx_wake.notify_one();
    }
    result
}

/// Whether the transmit task has work: FPDUs to send, or a stream to end.
fn needs_tx(core: &Core) -> bool {
    core.conn.has_transmit() || !core.conn.is_open() || core.finished || !core.out.is_empty()
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// Reads up to `want` payload bytes from the socket straight into their
/// destination, and after them (when `tail` is not empty, for the end of the
/// payload) trailer and lookahead bytes into `tail`, in one system call;
/// returns the payload bytes placed and the `tail` bytes read.
async fn place(
    sh: &Shared,
    rd: &mut OwnedReadHalf,
    p: Placement,
    want: usize,
    tail: &mut [u8],
) -> Result<(usize, usize), RxEnd> {
    loop {
        rd.readable().await.map_err(|_| RxEnd::Lost)?;
        let mut core = sh.lock();
        if core.finished {
            return Err(RxEnd::Closed);
        }
        let read = match p.target {
            PlaceTarget::Tagged { stag, to } => {
                place_tagged(sh, &mut core, rd, stag, to, want, &mut *tail)?
            }
            PlaceTarget::Recv { wr_id, offset } => {
                place_recv(&mut core, rd, wr_id, offset, want, &mut *tail)?
            }
        };
        match read {
            Ok((0, _)) => return Err(RxEnd::Lost),
            Ok(n) => {
                core.pump(sh);
                return Ok(n);
            }
            Err(e) if would_block(&e) => continue,
            Err(_) => return Err(RxEnd::Lost),
        }
    }
}

/// One vectored read into `dest` then `tail`: (bytes in `dest`, in `tail`).
fn read_into(rd: &OwnedReadHalf, dest: &mut [u8], tail: &mut [u8]) -> io::Result<(usize, usize)> {
    let cap = dest.len();
    let n = rd.try_read_vectored(&mut [IoSliceMut::new(dest), IoSliceMut::new(tail)])?;
    let k = n.min(cap);
    Ok((k, n - k))
}

/// Tagged payload: the region slice is the read buffer (no staging copy).
fn place_tagged(
    sh: &Shared,
    core: &mut Core,
    rd: &OwnedReadHalf,
    stag: Stag,
    to: u64,
    want: usize,
    tail: &mut [u8],
) -> Result<io::Result<(usize, usize)>, RxEnd> {
    // The engine checked the access; the table checks again under its lock, so
    // a region invalidated since then is never written.
    let a = TaggedAccess {
        pd: sh.pd,
        stag,
        to,
        len: want as u64,
        need: Access::empty(),
    };
    let conn = &mut core.conn;
    let mut extra = 0;
    let placed = sh.table.place_direct(a, |slice| {
        let (k, e) = read_into(rd, slice, tail)?;
        extra = e;
        if k > 0 {
            conn.placed(&slice[..k]).map_err(io::Error::other)?;
        }
        Ok(k)
    });
    placed
        .map(|r| r.map(|k| (k, extra)))
        .map_err(|_| RxEnd::Lost)
}

/// Send payload: the posted receive buffer is the read buffer.
fn place_recv(
    core: &mut Core,
    rd: &OwnedReadHalf,
    wr_id: u64,
    offset: usize,
    want: usize,
    tail: &mut [u8],
) -> Result<io::Result<(usize, usize)>, RxEnd> {
    let Core { conn, recvs, .. } = core;
    let Some((_, buf)) = recvs.get_mut(&wr_id) else {
        return Err(RxEnd::Lost);
    };
    // The engine admitted the segment only if it fits the buffer's capacity.
    let end = offset + want;
    if buf.len() < end {
        buf.resize(end, 0);
    }
    let Some(slice) = buf.get_mut(offset..end) else {
        return Err(RxEnd::Lost);
    };
    let r = read_into(rd, slice, tail);
    if let Ok((k, _)) = r {
        buf.truncate(offset + k);
        if k > 0 {
            if let Some(done) = buf.get(offset..offset + k) {
                conn.placed(done).map_err(|_| RxEnd::Closed)?;
            }
        }
    }
    Ok(r)
}

/// FPDUs waiting to be written, in gather form: framing bytes (and Read
/// Response payload, copied from the region under its lock) accumulate in
/// `small`; Send and Write payload is queued as the consumer's own `Bytes`,
/// never copied.
#[derive(Default)]
pub(crate) struct Outbox {
    chunks: VecDeque<Bytes>,
    small: BytesMut,
    /// Bytes queued and not yet written.
    len: usize,
}

/// Unwritten bytes past which no more FPDUs are gathered: the rest wait in
/// the engine, their work requests incomplete, so a peer that stops reading
/// its socket holds the send queue (bounded by its depth) rather than an
/// ever-growing buffer, and its consumer sees no completions (a real RNIC's
/// send queue behaves the same). The socket's own buffer is the real queue.
const OUTBOX_CAP: usize = 1 << 20;

impl Outbox {
    fn push_small(&mut self, b: &[u8]) {
        self.small.extend_from_slice(b);
        self.len += b.len();
    }

    fn push_shared(&mut self, b: Bytes) {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
        self.len += b.len();
        self.chunks.push_back(b);
    }

    /// Whether it holds as much as it may before the socket takes some.
    fn full(&self) -> bool {
        self.len >= OUTBOX_CAP
    }

    fn seal(&mut self) {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.small.is_empty()
    }

    /// Writes as much as the socket takes now (vectored, never waiting);
    /// `Ok` with bytes left means the socket is full.
    fn try_flush(&mut self, wr: &OwnedWriteHalf, io: &IoCounters) -> io::Result<()> {
        self.seal();
        while !self.chunks.is_empty() {
            let mut slices = [IoSlice::new(&[]); 128];
            let mut k = 0;
            for (slot, c) in slices.iter_mut().zip(self.chunks.iter()) {
                *slot = IoSlice::new(c);
                k += 1;
            }
            io.wrote();
            let mut n = match wr.try_write_vectored(&slices[..k]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if would_block(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            self.len = self.len.saturating_sub(n);
            while n > 0 {
                let Some(front) = self.chunks.front_mut() else {
                    break;
                };
                if n >= front.len() {
                    n -= front.len();
                    self.chunks.pop_front();
                } else {
                    front.advance(n);
                    n = 0;
                }
            }
        }
        Ok(())
    }
}

/// Transmits what the engine has queued from the task that changed the
/// engine (the consumer posting to an idle queue pair): gathers the FPDUs
/// and writes them straight away, without waking the transmit task.
/// Returns whether the transmit task must run: the socket is full, or the
/// stream is closing.
pub(crate) fn flush(core: &mut Core, sh: &Shared) -> bool {
    let mut out = std::mem::take(&mut core.out);
    let mut failed = false;
    loop {
        let mut more = false;
        if !core.local_closed {
            while !out.full() {
                let Some(t) = core.conn.poll_transmit() else {
                    break;
                };
                if gather(sh, core, &t, &mut out, core.wr.as_deref()).is_err() {
                    failed = true;
                    break;
                }
            }
            more = out.full();
            core.pump(sh);
        }
        if !failed && !out.is_empty() {
            if let Some(wr) = &core.wr {
                failed = out.try_flush(wr, &sh.io).is_err();
            }
        }
        // Gather again only when the cap stopped gathering and the socket
        // took everything.
        if failed || !more || !out.is_empty() {
            break;
        }
    }
    // After a failed write nothing more goes out.
    core.out = if failed { Outbox::default() } else { out };
    if failed {
        core.finish(sh, CloseReason::ConnectionLost, &[QpEvent::LlpError]);
    }
    failed || !core.out.is_empty() || core.local_closed || core.finished || !core.conn.is_open()
}

/// Queues one FPDU: head, payload (the work request's buffers, or the RDMA
/// Read source region), then pad and CRC (RFC 5044 §4.4: CRC32c over length
/// field, ULPDU and pad; zero when CRC is off).
///
/// A Read Response goes to the socket straight from its source region when
/// everything queued before it is written (see [`send_region`]).
fn gather(
    sh: &Shared,
    core: &Core,
    t: &Transmit,
    out: &mut Outbox,
    wr: Option<&OwnedWriteHalf>,
) -> Result<(), ()> {
    let mut crc = Crc::new();
    if sh.crc {
        crc.update(&t.head);
    }
    let pieces: Vec<Bytes> = match t.payload {
        None => Vec::new(),
        Some(PayloadRef::Wr { wr_id, offset, len }) => {
            let entry = core.sends.get(&wr_id).ok_or(())?;
            slice_gather(&entry.data, offset, len).ok_or(())?
        }
        Some(PayloadRef::Region { stag, to, len }) => {
            // The Read Response source (RFC 5040 §5.2), checked again now.
            let a = TaggedAccess {
                pd: sh.pd,
                stag: Stag(stag),
                to,
                len: len as u64,
                need: Access::REMOTE_READ,
            };
            if let Some(wr) = wr {
                out.try_flush(wr, &sh.io).map_err(drop)?;
                if out.is_empty() {
                    return send_region(sh, wr, t, a, out);
                }
            }
            let mut copy = BytesMut::with_capacity(len);
            sh.table
                .fetch(a, |src| copy.extend_from_slice(src))
                .map_err(drop)?;
            vec![copy.freeze()]
        }
    };
    out.push_small(&t.head);
    for p in pieces {
        if sh.crc {
            crc.update(&p);
        }
        out.push_shared(p);
    }
    let pad = [0u8; 3];
    let pad = pad.get(..fpdu::pad_len(t.ulpdu_len())).ok_or(())?;
    out.push_small(pad);
    if sh.crc {
        crc.update(pad);
        out.push_small(&crc.to_wire());
    } else {
        out.push_small(&[0u8; fpdu::CRC_LEN]);
    }
    Ok(())
}

/// Writes a Read Response FPDU (RFC 5040 §5.2) with its payload taken from
/// the source region under the table lock, checked again now: no copy into
/// a transmit buffer. Only the bytes the socket does not take at once are
/// copied into `out`, which must be empty.
fn send_region(
    sh: &Shared,
    wr: &OwnedWriteHalf,
    t: &Transmit,
    a: TaggedAccess,
    out: &mut Outbox,
) -> Result<(), ()> {
    let pad = fpdu::pad_len(t.ulpdu_len());
    let tl = pad + fpdu::CRC_LEN;
    let written = sh.table.fetch(a, |src| {
        let mut trailer = [0u8; 3 + fpdu::CRC_LEN];
        if sh.crc {
            let mut crc = Crc::new();
            crc.update(&t.head);
            crc.update(src);
            crc.update(&trailer[..pad]);
            trailer[pad..tl].copy_from_slice(&crc.to_wire());
        }
        let trailer = &trailer[..tl];
        let pieces = [
            IoSlice::new(&t.head),
            IoSlice::new(src),
            IoSlice::new(trailer),
        ];
        sh.io.wrote();
        let n = match wr.try_write_vectored(&pieces) {
            Ok(n) => n,
            Err(e) if would_block(&e) => 0,
            Err(_) => return Err(()),
        };
        let mut skip = n;
        for piece in [&t.head[..], src, trailer] {
            if skip >= piece.len() {
                skip -= piece.len();
                continue;
            }
            out.push_small(&piece[skip..]);
            skip = 0;
        }
        Ok(())
    });
    written.map_err(drop)?
}

/// The bytes `offset..offset + len` of a gather list, as zero-copy slices.
fn slice_gather(data: &[Bytes], mut offset: usize, mut len: usize) -> Option<Vec<Bytes>> {
    let mut out = Vec::new();
    for b in data {
        if len == 0 {
            break;
        }
        if offset >= b.len() {
            offset -= b.len();
            continue;
        }
        let n = (b.len() - offset).min(len);
        out.push(b.slice(offset..offset + n));
        offset = 0;
        len -= n;
    }
    (len == 0).then_some(out)
}

/// How long a closing queue pair waits for the socket to take what is
/// still queued before it resets the stream.
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits for room in the socket when a direct write left bytes behind, and
/// ends the stream: FIN after the last FPDU (a Terminate, when one was
/// queued), when the last handle of the write half drops.
pub(crate) async fn tx_task(sh: Arc<Shared>, wr: Arc<OwnedWriteHalf>) {
    loop {
        let (pending, closing) = {
            let mut core = sh.lock();
            flush(&mut core, &sh);
            (
                !core.out.is_empty(),
                core.local_closed || core.finished || !core.conn.is_open(),
            )
        };
        if pending {
            // Closing with bytes the peer does not take: wait a little,
            // then reset the stream rather than hold it (and what is queued)
            // for as long as a peer that stopped reading keeps its window
            // shut.
            let room = if closing {
                match tokio::time::timeout(CLOSE_LINGER, wr.writable()).await {
                    Ok(r) => r,
                    Err(_) => {
                        let stream: &tokio::net::TcpStream = (*wr).as_ref();
                        let _ = stream.set_zero_linger();
                        break;
                    }
                }
            } else {
                // A close while waiting for room is seen at once.
                tokio::select! {
                    r = wr.writable() => r,
                    () = sh.tx_wake.notified() => Ok(()),
                }
            };
            if room.is_err() {
                sh.lock()
                    .finish(&sh, CloseReason::ConnectionLost, &[QpEvent::LlpError]);
                break;
            }
            continue;
        }
        if closing {
            break;
        }
        sh.tx_wake.notified().await;
    }
    sh.lock().wr = None;
}
