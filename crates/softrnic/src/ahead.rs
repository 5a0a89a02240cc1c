//! Read Responses read straight into the Read's sink, headers and all.
//!
//! The receive task reads what the socket holds into its staging buffer
//! and copies each payload to its place (`rx.rs`); over loopback nearly
//! every byte of a bulk transfer takes that copy, because the sender
//! writes whole FPDUs and the reads end on their boundaries. While one of
//! our RDMA Reads is outstanding, the next FPDUs are most likely the rest
//! of its Read Responses, whose layout the engine predicts
//! ([`iwarp::conn::ReadAhead`]): then one vectored read puts each
//! predicted head and trailer in a small buffer and each payload straight
//! into the sink (RFC 5041 §3, direct placement), and the rest into the
//! staging buffer. Each head read is compared with the predicted one; the
//! heads and trailers that match go to the engine, which checks them as
//! ever, with the payload between them reported placed. From the first
//! head that differs on (a Send of the peer between two responses, a
//! different segment length), the bytes read are handed to the engine as
//! a stream, as if read into the staging buffer: the payload bytes that
//! went into the sink by a wrong guess stay there until the Read's own
//! responses overwrite them (the sink is undefined until the Read
//! completes, RFC 5040 §5.2), and only inside the head Read's sink.
//!
//! This is the server side of an NFS WRITE over RDMA: the server pulls the
//! data by RDMA Read, so its bytes now cross user space once (socket to
//! sink) where they were read into the staging buffer and copied again.

use std::io::IoSliceMut;

use iwarp::conn::{AheadSegment, PlaceTarget, Placement, AHEAD_HEAD_LEN};
use rnic::{Access, Stag, TaggedAccess};
use tokio::net::tcp::OwnedReadHalf;

use crate::core::Core;
use crate::outbox::would_block;
use crate::rx::RxEnd;
use crate::shared::Shared;

/// At most this many FPDUs are predicted per read (a 1 MiB Read in
/// 64 KiB segments).
const MAX_SEGMENTS: usize = 16;

/// At most this much payload is read ahead per read.
const MAX_BYTES: usize = 1 << 20;

/// At most this much is read on into the staging buffer behind the
/// predicted FPDUs: what follows the Read is most likely the next Read's
/// responses (into another sink, read ahead on the next wake-up) or a few
/// Sends, so a large staging read there would copy most of the next Read.
const TAIL: usize = 16 * 1024;

/// What a read ahead left for the receive loop.
pub(crate) enum Ahead {
    /// The predicted FPDUs were handed to the engine; this many bytes
    /// followed them into the staging buffer.
    Staged(usize),
    /// A head differed from the prediction: these stream bytes, from that
    /// head on, go to the engine as if staged.
    Spill(Vec<u8>),
}

/// What the vectored read gave.
struct Got {
    /// Bytes read in all.
    n: usize,
    /// Leading predicted FPDUs (or the part of one the read ended in)
    /// whose heads matched.
    good: usize,
    /// The stream bytes from the first differing head on.
    spill: Option<Vec<u8>>,
}

/// Reads the next FPDUs with predicted Read Response payload straight into
/// the sink. `None` when the engine predicts nothing, or (`between`: the
/// stream sits between FPDUs) when the next head waiting in the socket is
/// not the predicted one (most often a Send of the peer ahead of the
/// responses): the caller then reads into the staging buffer as usual,
/// rather than hand every byte read ahead over as a stream.
pub(crate) async fn read(
    sh: &Shared,
    rd: &mut OwnedReadHalf,
    stage: &mut [u8],
    between: bool,
) -> Result<Option<Ahead>, RxEnd> {
    let mut next = [0u8; AHEAD_HEAD_LEN];
    loop {
        rd.readable().await.map_err(|_| RxEnd::Lost)?;
        // One `recv(MSG_PEEK)` of the next head, before any byte is taken.
        let peeked = if between {
            match rd.peek(&mut next).await {
                Ok(0) | Err(_) => return Ok(None),
                Ok(k) => k,
            }
        } else {
            0
        };
        let mut st = sh.lock_rx();
        let core = &mut st.core;
        if core.finished {
            return Err(RxEnd::Closed);
        }
        let Some(ra) = core.conn.read_ahead() else {
            return Ok(None);
        };
        let segs = ra.segments(MAX_SEGMENTS, MAX_BYTES);
        if let Some(h) = segs.first().and_then(|s| s.header) {
            if next[..peeked] != h[..peeked] {
                return Ok(None);
            }
        }
        let payload: usize = segs.iter().map(|s| s.len).sum();
        let a = TaggedAccess {
            pd: sh.ctx.pd,
            stag: ra.stag,
            to: ra.to,
            len: payload as u64,
            // The sink of our own Read: written only with local write access.
            need: Access::LOCAL_WRITE,
        };
        // The read (up to 1 MiB copied) runs without the queue pair's lock,
        // so the consumer's posts (a server's replies, its next Reads) go
        // out meanwhile instead of sleeping on it. Only this task feeds the
        // engine received bytes, so the prediction still holds when the
        // lock is taken again; a queue pair that finished meanwhile ends
        // the loop, and an engine that no longer expects the payload loses
        // the connection (`hand_over`). The sink stays locked throughout.
        drop(st);
        let mut heads = [[0u8; AHEAD_HEAD_LEN]; MAX_SEGMENTS];
        let mut trailers = [[0u8; 8]; MAX_SEGMENTS];
        let mut got = None;
        let placed = sh.ctx.table.place_direct(a, |sink| {
            let g = read_segments(rd, &segs, sink, &mut heads, &mut trailers, stage)?;
            let direct = g.good;
            got = Some(g);
            Ok::<usize, std::io::Error>(direct)
        });
        let g = match placed {
            // The sink is gone or not ours to write: read as usual, and let
            // the engine judge the responses when they arrive.
            Err(_) => return Ok(None),
            Ok(Err(e)) if would_block(&e) => continue,
            Ok(Err(_)) => return Err(RxEnd::Lost),
            Ok(Ok(_)) => match got {
                Some(g) => g,
                None => return Err(RxEnd::Lost),
            },
        };
        if g.n == 0 {
            // Between FPDUs an orderly end of the stream, inside one a loss.
            return Err(if segs[0].header.is_some() {
                RxEnd::Eof
            } else {
                RxEnd::Lost
            });
        }
        let mut st = sh.lock_rx();
        if st.core.finished {
            return Err(RxEnd::Closed);
        }
        let staged = hand_over(sh, &mut st.core, ra.stag, &segs, &heads, &trailers, &g);
        // Completions, the next queued Read Request, a Terminate: out now.
        crate::rx::pump_and_wake(sh, st);
        let staged = staged?;
        return Ok(Some(match g.spill {
            Some(v) => Ahead::Spill(v),
            None => Ahead::Staged(staged),
        }));
    }
}

/// One vectored read: for each predicted FPDU its head into `heads`, its
/// payload into its place in `sink`, its trailer into `trailers`; then on
/// into `stage`. Compares the heads read with the predicted ones; from the
/// first that differs, copies the stream bytes out (they must go to the
/// engine as a stream). Runs under the sink's lock (not the queue pair's),
/// so it never blocks.
fn read_segments(
    rd: &OwnedReadHalf,
    segs: &[AheadSegment],
    sink: &mut [u8],
    heads: &mut [[u8; AHEAD_HEAD_LEN]; MAX_SEGMENTS],
    trailers: &mut [[u8; 8]; MAX_SEGMENTS],
    stage: &mut [u8],
) -> std::io::Result<Got> {
    let n = {
        let mut iov = Vec::with_capacity(segs.len() * 3 + 1);
        let mut rest = &mut *sink;
        for ((s, h), t) in segs.iter().zip(heads.iter_mut()).zip(trailers.iter_mut()) {
            let (p, r) = std::mem::take(&mut rest).split_at_mut(s.len);
            rest = r;
            if s.header.is_some() {
                iov.push(IoSliceMut::new(h));
            }
            iov.push(IoSliceMut::new(p));
            iov.push(IoSliceMut::new(&mut t[..s.trailer]));
        }
        let tail = stage.len().min(TAIL);
        iov.push(IoSliceMut::new(&mut stage[..tail]));
        rd.try_read_vectored(&mut iov)?
    };
    // Walk the stream: head, payload, trailer per segment.
    let mut left = n;
    let mut good = 0;
    let mut sink_off = 0;
    for (i, s) in segs.iter().enumerate() {
        let want = s.header.unwrap_or([0; AHEAD_HEAD_LEN]);
        let h = if s.header.is_some() {
            left.min(AHEAD_HEAD_LEN)
        } else {
            0
        };
        if heads[i][..h] != want[..h] {
            let spill = spill(i, left, segs, sink, sink_off, heads, trailers, stage);
            return Ok(Got {
                n,
                good,
                spill: Some(spill),
            });
        }
        left -= h;
        let p = left.min(s.len);
        left -= p;
        good += p;
        let t = left.min(s.trailer);
        left -= t;
        sink_off += s.len;
        if left == 0 {
            break;
        }
    }
    Ok(Got {
        n,
        good,
        spill: None,
    })
}

/// The `left` stream bytes read from segment `i`'s head on, in order.
#[allow(clippy::too_many_arguments)]
fn spill(
    i: usize,
    mut left: usize,
    segs: &[AheadSegment],
    sink: &[u8],
    mut sink_off: usize,
    heads: &[[u8; AHEAD_HEAD_LEN]; MAX_SEGMENTS],
    trailers: &[[u8; 8]; MAX_SEGMENTS],
    stage: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(left);
    for (j, s) in segs.iter().enumerate().skip(i) {
        let head = if s.header.is_some() {
            &heads[j][..]
        } else {
            &[][..]
        };
        for part in [
            head,
            &sink[sink_off..sink_off + s.len],
            &trailers[j][..s.trailer],
        ] {
            let k = left.min(part.len());
            v.extend_from_slice(&part[..k]);
            left -= k;
        }
        sink_off += s.len;
    }
    v.extend_from_slice(&stage[..left.min(stage.len())]);
    v
}

/// Hands the matching heads and trailers to the engine and reports the
/// payload between them placed; returns the bytes that went on into the
/// staging buffer (none when a head differed: those are in the spill).
fn hand_over(
    sh: &Shared,
    core: &mut Core,
    stag: Stag,
    segs: &[AheadSegment],
    heads: &[[u8; AHEAD_HEAD_LEN]; MAX_SEGMENTS],
    trailers: &[[u8; 8]; MAX_SEGMENTS],
    g: &Got,
) -> Result<usize, RxEnd> {
    let mut left = g.n - g.spill.as_ref().map_or(0, Vec::len);
    for (i, s) in segs.iter().enumerate() {
        if left == 0 {
            return Ok(0);
        }
        if s.header.is_some() {
            let h = left.min(AHEAD_HEAD_LEN);
            engine_bytes(sh, core, &heads[i][..h])?;
            left -= h;
            if h < AHEAD_HEAD_LEN {
                return Ok(0);
            }
        }
        let want = Placement {
            target: PlaceTarget::Tagged { stag, to: s.to },
            len: s.len,
        };
        // The head matched the prediction byte for byte (or was read
        // before), so the engine, which checked it, access included,
        // expects this payload.
        if s.len > 0 && core.conn.poll_placement() != Some(want) {
            return Err(RxEnd::Lost);
        }
        let p = left.min(s.len);
        core.conn.placed_unseen(p).map_err(|_| RxEnd::Closed)?;
        left -= p;
        if p < s.len {
            return Ok(0);
        }
        let t = left.min(s.trailer);
        engine_bytes(sh, core, &trailers[i][..t])?;
        left -= t;
    }
    Ok(left)
}

/// Feeds head or trailer bytes (no payload) to the engine.
fn engine_bytes(sh: &Shared, core: &mut Core, bytes: &[u8]) -> Result<(), RxEnd> {
    if bytes.is_empty() {
        return Ok(());
    }
    match core.with_engine(&sh.ctx, |conn, mem| conn.handle_bytes(bytes, mem)) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(RxEnd::Lost),
        Err(_) => Err(RxEnd::Closed),
    }
}
