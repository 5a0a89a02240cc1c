//! The receive side of a queue pair.
//!
//! Each wake-up reads what the socket holds in one system call. While the
//! engine waits for payload whose place is known (a registered region at a
//! validated STag and TO, or a posted receive buffer), the read goes
//! *straight into that place* through [`MrTable::place_direct`] (RFC 5041
//! §3, direct data placement) and, in the same vectored read, on into a
//! staging buffer of `SoftConfig::rx_stage` bytes; otherwise it goes into
//! the staging buffer alone. Everything staged — trailers, headers, whole
//! later FPDUs, the first part of the next one's payload — is deframed by
//! the engine and its payload copied to its place; an FPDU cut by the end of
//! the read stays with the deframer, and the rest of its payload is read
//! straight into its place on the next wake-up.
//!
//! Before, each FPDU cost its own read (one `readv` per 64 KiB of a bulk
//! transfer); now a read takes as much of a run of FPDUs as the socket has,
//! at the price of copying the payload that lands in the staging buffer.
//! While tagged payload (RDMA Writes) arrives, though, a read stops about
//! [`TAGGED_TAIL`] bytes past the payload it places ([`Tail`]): one read per
//! FPDU again, and the payload of the next goes straight into its region
//! instead of through the staging buffer.
//!
//! [`MrTable::place_direct`]: rnic::MrTable::place_direct

use std::io::{self, IoSliceMut};
use std::sync::Arc;

use iwarp::conn::{PlaceTarget, Placement};
use iwarp::wire::{ddp, fpdu};
use rnic::{Access, CloseReason, QpEvent, Stag, TaggedAccess};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

use crate::core::Core;
use crate::outbox::would_block;
use crate::shared::{Guard, Locked, Shared};
use crate::tx;

/// Why the receive loop stopped.
pub(crate) enum RxEnd {
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
    sh.lock_rx().core.finish(&sh.ctx, reason, &[event]);
    sh.tx_wake.notify_one();
}

/// The shortest FPDU header (length field and tagged DDP header).
pub(crate) const LOOKAHEAD: usize = fpdu::LEN_FIELD + ddp::TAGGED_HEADER_LEN;

/// An untagged FPDU with 4 KiB of payload (an RPC-over-RDMA v2 inline
/// message): the staging buffer takes at least one whole, with the next
/// header, so a small Send costs one read.
pub(crate) const SMALL_FPDU: usize = fpdu::fpdu_len(ddp::UNTAGGED_HEADER_LEN + 4096);

/// How much of the staging buffer a read takes while the stream carries
/// tagged payload (RDMA Writes): the trailer, a reply's Send (an NFS READ
/// reply's is about 200 bytes) and the next FPDU's header, so the next
/// FPDU's payload is read straight into its place by the next read instead
/// of being staged and copied (`MrTable::place_copy`), at most this much
/// of it staged. See [`Tail`].
pub(crate) const TAGGED_TAIL: usize = 1024;

/// How far past the payload being placed a read goes (RFC 5041 §3: tagged
/// payload is placed directly). A read into the whole staging buffer takes
/// every FPDU the socket holds in one system call, but over loopback it
/// ends on an FPDU boundary, so the tagged payload of every FPDU after the
/// first is staged and copied: a client reading 1 MiB replies copied about
/// three quarters of them a second time. While FPDUs with tagged payload
/// arrive the reads stop just past the next header ([`TAGGED_TAIL`]):
/// one read per FPDU, as before "One read per wake-up"
/// (docs/softrnic.md), and no copy. Small messages (Sends alone) keep the
/// whole staging buffer, so many of them still cost one read.
#[derive(Debug, Default)]
struct Tail {
    /// Tagged payload was placed lately and no run of untagged messages
    /// has been seen since.
    tagged: bool,
}

impl Tail {
    /// The part of `stage` the next read may fill.
    fn len(&self, stage: usize) -> usize {
        if self.tagged {
            TAGGED_TAIL.min(stage)
        } else {
            stage
        }
    }

    /// Before a read that places pending payload.
    fn placing(&mut self, p: &Placement) {
        if matches!(p.target, PlaceTarget::Tagged { .. }) {
            self.tagged = true;
        }
    }

    /// After a read between FPDUs of `read` bytes out of `asked`, and the
    /// engine's next placement once it was fed: untagged payload still
    /// pending (a Send longer than the tail), or a full read with nothing
    /// tagged pending (a run of small messages), ends the tagged mode.
    fn between(&mut self, read: usize, asked: usize, next: Option<&Placement>) {
        match next.map(|p| p.target) {
            Some(PlaceTarget::Tagged { .. }) => {}
            Some(PlaceTarget::Recv { .. }) => self.tagged = false,
            None if read >= asked => self.tagged = false,
            None => {}
        }
    }
}

async fn rx_loop(sh: &Shared, rd: &mut OwnedReadHalf) -> RxEnd {
    let mut stage = vec![0u8; sh.ctx.rx_stage];
    let mut tail = Tail::default();
    loop {
        let (placement, boundary, ahead) = {
            let st = sh.lock_rx();
            if st.core.finished {
                return RxEnd::Closed;
            }
            (
                st.core.conn.poll_placement(),
                st.core.conn.at_fpdu_boundary(),
                st.core.conn.read_ahead().is_some(),
            )
        };
        if ahead && placement.is_some_and(|p| matches!(p.target, PlaceTarget::Tagged { .. })) {
            // Inside a Read Response: its rest and the next ones (`ahead.rs`).
            match read_ahead(sh, rd, &mut stage, false).await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return e,
            }
        }
        let mut between = None;
        let staged = match placement {
            Some(p) => {
                tail.placing(&p);
                let end = tail.len(stage.len());
                match place(sh, rd, p, &mut stage[..end]).await {
                    Ok(extra) => extra,
                    Err(e) => return e,
                }
            }
            None => {
                if boundary {
                    // Between FPDUs: let the consumers woken by the last
                    // completions run (and post their answers) before this
                    // task asks the socket again; what they post meanwhile
                    // is written together afterwards.
                    sh.lock_rx().hold_tx = true;
                    tokio::task::yield_now().await;
                    let ahead = {
                        let mut st = sh.lock_rx();
                        st.hold_tx = false;
                        st.core.conn.read_ahead().is_some()
                    };
                    sh.write_held(true);
                    if ahead {
                        match read_ahead(sh, rd, &mut stage, true).await {
                            Ok(true) => continue,
                            Ok(false) => {}
                            Err(e) => return e,
                        }
                    }
                }
                let end = tail.len(stage.len());
                match rd.read(&mut stage[..end]).await {
                    Ok(0) if boundary => return RxEnd::Eof,
                    Ok(0) | Err(_) => return RxEnd::Lost,
                    Ok(n) => {
                        between = Some(end);
                        n
                    }
                }
            }
        };
        if staged > 0 {
            if let Err(e) = feed(sh, &stage[..staged]) {
                return e;
            }
        }
        if let Some(asked) = between.filter(|_| tail.tagged) {
            let next = sh.lock_rx().core.conn.poll_placement();
            tail.between(staged, asked, next.as_ref());
        }
    }
}

/// A read ahead (`ahead.rs`; `between`: the stream sits between FPDUs)
/// and what it left handed to the engine: `true` when it read, `false`
/// when the engine predicted nothing or the next head was not the
/// predicted one (read into the staging buffer as usual then).
async fn read_ahead(
    sh: &Shared,
    rd: &mut OwnedReadHalf,
    stage: &mut [u8],
    between: bool,
) -> Result<bool, RxEnd> {
    let Some(a) = crate::ahead::read(sh, rd, stage, between).await? else {
        return Ok(false);
    };
    match a {
        crate::ahead::Ahead::Staged(0) => {}
        crate::ahead::Ahead::Staged(n) => feed(sh, &stage[..n])?,
        crate::ahead::Ahead::Spill(v) => feed(sh, &v)?,
    }
    Ok(true)
}

/// Hands staged stream bytes to the engine, copying payload to its place
/// (the posted receive buffer, or the registered region the engine
/// validated), then lets the engine's output go.
fn feed(sh: &Shared, bytes: &[u8]) -> Result<(), RxEnd> {
    let mut st = sh.lock_rx();
    let result = feed_locked(sh, &mut st.core, bytes);
    pump_and_wake(sh, st);
    result
}

fn feed_locked(sh: &Shared, core: &mut Core, bytes: &[u8]) -> Result<(), RxEnd> {
    if core.finished {
        return Err(RxEnd::Closed);
    }
    let mut off = 0;
    while off < bytes.len() {
        if let Some(p) = core.conn.poll_placement() {
            let data = &bytes[off..off + p.len.min(bytes.len() - off)];
            copy_payload(sh, core, p.target, data)?;
            core.conn.placed(data).map_err(|_| RxEnd::Closed)?;
            off += data.len();
            continue;
        }
        match core.with_engine(&sh.ctx, |conn, mem| conn.handle_bytes(&bytes[off..], mem)) {
            // Only pending payload stops the engine, and that is placed above.
            Ok(0) => return Err(RxEnd::Lost),
            Ok(n) => off += n,
            Err(_) => return Err(RxEnd::Closed),
        }
    }
    Ok(())
}

/// Copies staged payload to its place.
fn copy_payload(sh: &Shared, core: &mut Core, to: PlaceTarget, data: &[u8]) -> Result<(), RxEnd> {
    match to {
        PlaceTarget::Recv { wr_id, offset } => {
            let Some((_, buf)) = core.recvs.get_mut(&wr_id) else {
                return Err(RxEnd::Lost);
            };
            // The engine admitted the segment only if it fits the buffer.
            buf.truncate(offset);
            if buf.len() < offset {
                buf.resize(offset, 0);
            }
            buf.extend_from_slice(data);
            Ok(())
        }
        PlaceTarget::Tagged { stag, to } => {
            // The engine checked the access; the table checks again under
            // its lock, so a region invalidated since is never written.
            let a = TaggedAccess {
                pd: sh.ctx.pd,
                stag,
                to,
                len: data.len() as u64,
                need: Access::empty(),
            };
            sh.ctx.table.place_copy(a, data).map_err(|_| RxEnd::Lost)
        }
    }
}

/// Lets the engine post what the bytes just fed produced and sends the
/// responses (Read Responses, RFC 5040 §5.2; a Terminate) from this task,
/// as a consumer's post to an idle queue pair is, then releases the lock.
/// The transmit task is woken only when it has work left: the socket
/// did not take everything, bytes were already waiting for room, or the
/// stream ends. Before, every Read Request woke the transmit task (a task
/// hop, often a thread wake-up) to write its responses.
pub(crate) fn pump_and_wake(sh: &Shared, mut st: Guard<'_>) {
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

/// Reads the pending payload from the socket straight into its place and,
/// in the same system call, what follows it into `stage`; returns the bytes
/// staged.
async fn place(
    sh: &Shared,
    rd: &mut OwnedReadHalf,
    p: Placement,
    stage: &mut [u8],
) -> Result<usize, RxEnd> {
    loop {
        rd.readable().await.map_err(|_| RxEnd::Lost)?;
        let mut st = sh.lock_rx();
        let core = &mut st.core;
        if core.finished {
            return Err(RxEnd::Closed);
        }
        let read = match p.target {
            PlaceTarget::Tagged { stag, to } => {
                place_tagged(sh, core, rd, stag, to, p.len, &mut *stage)?
            }
            PlaceTarget::Recv { wr_id, offset } => {
                place_recv(core, rd, wr_id, offset, p.len, &mut *stage)?
            }
        };
        match read {
            Ok((0, _)) => return Err(RxEnd::Lost),
            Ok((_, extra)) => {
                core.pump(&sh.ctx);
                return Ok(extra);
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
