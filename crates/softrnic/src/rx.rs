//! The receive side of a queue pair.
//!
//! It reads each FPDU in pieces — length field and DDP header into a small
//! header buffer (sized by [`deframe::shape`], the `iwarp` deframer's view
//! of the framing), then the payload *straight from the socket into its
//! destination* (the registered region through [`MrTable::place_direct`],
//! or the posted receive buffer), then pad and CRC — so payload never
//! passes through a staging buffer (RFC 5041 §3, direct data placement).
//!
//! The last payload piece of an FPDU is read with one vectored read together
//! with pad, CRC and the next FPDU's first 16 bytes (a whole tagged header).
//!
//! [`MrTable::place_direct`]: rnic::MrTable::place_direct

use std::io::{self, IoSliceMut};
use std::sync::{Arc, MutexGuard};

use iwarp::conn::{PlaceTarget, Placement};
use iwarp::deframe::{self, FpduShape};
use iwarp::wire::{ddp, fpdu};
use rnic::{Access, CloseReason, QpEvent, Stag, TaggedAccess};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

use crate::core::Core;
use crate::outbox::would_block;
use crate::shared::{Locked, Shared};
use crate::tx;

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
    let (reason, event) = match end {
        RxEnd::Eof => (CloseReason::PeerDisconnect, QpEvent::PeerClose),
        RxEnd::Closed | RxEnd::Lost => (CloseReason::ConnectionLost, QpEvent::LlpError),
    };
    sh.lock().core.finish(&sh.ctx, reason, &[event]);
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
        // The deframer's view of the FPDU's framing; a ULPDU shorter than
        // its header goes to the engine, which refuses it (Terminate).
        let shape = deframe::shape(&head[..got]);
        if let Some(FpduShape {
            tagged: false,
            fpdu_len: total,
            ..
        }) = shape.filter(|s| s.fpdu_len <= SMALL_FPDU)
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
        let Some(shape) = shape else {
            // Refused by the engine: it sends the Terminate.
            return feed(sh, &head[..got]).err().unwrap_or(RxEnd::Lost);
        };
        let head_len = shape.header_len.max(got);
        if let Err(e) = read_exact(rd, &mut head[got..head_len]).await {
            return e;
        }
        if let Err(e) = feed(sh, &head[..head_len]) {
            return e;
        }
        got = 0;
        let Some(mut remaining) = shape.fpdu_len.checked_sub(head_len) else {
            return RxEnd::Lost;
        };
        let trailer = shape.trailer_len;
        while remaining > 0 {
            let placement = {
                let st = sh.lock();
                if st.core.finished {
                    return RxEnd::Closed;
                }
                st.core.conn.poll_placement()
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
    let mut st = sh.lock();
    let core = &mut st.core;
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
        match core.with_engine(&sh.ctx, |conn, mem| conn.handle_bytes(&bytes[off..], mem)) {
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
    pump_and_wake(sh, st);
    result
}

/// Hands header, inline or trailer bytes to the engine.
fn feed(sh: &Shared, bytes: &[u8]) -> Result<(), RxEnd> {
    let mut st = sh.lock();
    let core = &mut st.core;
    if core.finished {
        return Err(RxEnd::Closed);
    }
    let mut off = 0;
    let mut result = Ok(());
    while off < bytes.len() {
        match core.with_engine(&sh.ctx, |conn, mem| conn.handle_bytes(&bytes[off..], mem)) {
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
    pump_and_wake(sh, st);
    result
}

/// Lets the engine post what the bytes just fed produced and sends the
/// responses (Read Responses, RFC 5040 §5.2; a Terminate) from this task,
/// as a consumer's post to an idle queue pair is, then releases the lock.
/// The transmit task is woken only when it has work left: the socket
/// did not take everything, bytes were already waiting for room, or the
/// stream ends. Before, every Read Request woke the transmit task (a task
/// hop, often a thread wake-up) to write its responses.
fn pump_and_wake(sh: &Shared, mut st: MutexGuard<'_, Locked>) {
    st.core.pump(&sh.ctx);
    let wake = if st.out.is_empty() && st.wr.is_some() && st.core.conn.has_transmit() {
        tx::flush(&mut st, sh)
    } else {
        needs_tx(&st)
    };
    drop(st);
    if wake {
        sh.tx_wake.notify_one();
    }
}

/// Whether the transmit task has work: FPDUs to send, or a stream to end.
fn needs_tx(st: &Locked) -> bool {
    let core = &st.core;
    core.conn.has_transmit() || !core.conn.is_open() || core.finished || !st.out.is_empty()
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
        let mut st = sh.lock();
        let core = &mut st.core;
        if core.finished {
            return Err(RxEnd::Closed);
        }
        let read = match p.target {
            PlaceTarget::Tagged { stag, to } => {
                place_tagged(sh, core, rd, stag, to, want, &mut *tail)?
            }
            PlaceTarget::Recv { wr_id, offset } => {
                place_recv(core, rd, wr_id, offset, want, &mut *tail)?
            }
        };
        match read {
            Ok((0, _)) => return Err(RxEnd::Lost),
            Ok(n) => {
                core.pump(&sh.ctx);
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
        pd: sh.ctx.pd,
        stag,
        to,
        len: want as u64,
        need: Access::empty(),
    };
    let conn = &mut core.conn;
    let mut extra = 0;
    let placed = sh.ctx.table.place_direct(a, |slice| {
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
