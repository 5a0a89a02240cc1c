//! The transmit side of a queue pair: [`flush`] drains the engine's FPDUs,
//! gathers their payload (the posted work request's buffers, or the RDMA
//! Read source region, written under the table lock) and writes them
//! without waiting, in one vectored write where they fit; the transmit task
//! waits for room when the socket is full and ends the stream.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use iwarp::segment::{PayloadRef, Transmit};
use iwarp::wire::fpdu::{self, Crc};
use rnic::{Access, CloseReason, QpEvent, Stag, TaggedAccess, WriteFileWr};
use rustix::fd::OwnedFd;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::tcp::OwnedWriteHalf;

use crate::core::Core;
use crate::outbox::{would_block, Outbox};
use crate::shared::{Locked, Shared};

/// Transmits what the engine has queued from the task that changed the
/// engine (the consumer posting to an idle queue pair): gathers the FPDUs
/// and writes them straight away, without waking the transmit task.
/// Returns whether the transmit task must run: the socket is full, or the
/// stream is closing.
pub(crate) fn flush(st: &mut Locked, sh: &Shared) -> bool {
    let Locked { core, out, wr, .. } = st;
    let mut failed = false;
    loop {
        let mut more = false;
        if !core.local_closed {
            // A transmit taken from the engine is always gathered, even
            // past the cap (by one FPDU at most).
            let mut next = None;
            while next.is_some() || !out.full() {
                let Some(t) = next.take().or_else(|| core.conn.poll_transmit()) else {
                    break;
                };
                match gather(sh, core, &t, out, wr.as_deref()) {
                    Ok(left) => next = left,
                    Err(()) => {
                        failed = true;
                        break;
                    }
                }
            }
            more = out.full();
            core.pump(&sh.ctx);
        }
        if !failed && !out.is_empty() {
            if let Some(wr) = wr {
                failed = out.try_flush(wr, &sh.io).is_err();
            }
        }
        // Gather again only when the cap stopped gathering and the socket
        // took everything.
        if failed || !more || !out.is_empty() {
            break;
        }
    }
    if failed {
        // After a failed write nothing more goes out.
        *out = Outbox::default();
        core.finish(&sh.ctx, CloseReason::ConnectionLost, &[QpEvent::LlpError]);
    }
    failed || !out.is_empty() || core.local_closed || core.finished || !core.conn.is_open()
}

/// Queues one FPDU: head, payload (the work request's buffers, or the RDMA
/// Read source region), then pad and CRC (RFC 5044 §4.4: CRC32c over length
/// field, ULPDU and pad; zero when CRC is off).
///
/// A Read Response goes to the socket straight from its source region when
/// everything queued before it is written, together with the FPDUs that
/// follow it in the same region (see [`send_region`]); the first transmit
/// taken from the engine that is not one of them is returned, to be
/// gathered next.
fn gather(
    sh: &Shared,
    core: &mut Core,
    t: &Transmit,
    out: &mut Outbox,
    wr: Option<&OwnedWriteHalf>,
) -> Result<Option<Transmit>, ()> {
    let mut crc = Crc::new();
    if sh.ctx.crc {
        crc.update(&t.head);
    }
    let pieces: Vec<Bytes> = match t.payload {
        None => Vec::new(),
        Some(PayloadRef::Wr { wr_id, offset, len }) => {
            let entry = core.sends.get(&wr_id).ok_or(())?;
            match &entry.file {
                None => slice_gather(&entry.data, offset, len).ok_or(())?,
                Some(f) => match wr {
                    // No CRC to compute over the bytes: they go from the
                    // page cache.
                    Some(wr) if !sh.ctx.crc => {
                        let f = f.clone();
                        if let Some(pipe) = sh.pipe.get_or_init(FilePipe::new) {
                            let (run, left) = file_run(core, t, pipe.fpdus);
                            send_file_run(sh, wr, pipe, t, &run, &f, out)?;
                            return Ok(left);
                        }
                        send_file(sh, wr, t, &f, offset, len, out)?;
                        return Ok(None);
                    }
                    _ => vec![f.read_part(offset, len).map_err(drop)?],
                },
            }
        }
        Some(PayloadRef::Region { stag, to, len }) => {
            // The Read Response source (RFC 5040 §5.2), checked again now.
            let a = TaggedAccess {
                pd: sh.ctx.pd,
                stag: Stag(stag),
                to,
                len: len as u64,
                need: Access::REMOTE_READ,
            };
            if let Some(wr) = wr {
                out.try_flush(wr, &sh.io).map_err(drop)?;
                if out.is_empty() {
                    let (run, left) = read_response_run(core, t);
                    send_region(sh, wr, t, &run, a, out)?;
                    return Ok(left);
                }
            }
            let mut copy = BytesMut::with_capacity(len);
            sh.ctx
                .table
                .fetch(a, |src| copy.extend_from_slice(src))
                .map_err(drop)?;
            vec![copy.freeze()]
        }
    };
    out.push_small(&t.head);
    for p in pieces {
        if sh.ctx.crc {
            crc.update(&p);
        }
        out.push_shared(p);
    }
    let pad = [0u8; 3];
    let pad = pad.get(..fpdu::pad_len(t.ulpdu_len())).ok_or(())?;
    out.push_small(pad);
    if sh.ctx.crc {
        crc.update(pad);
        out.push_small(&crc.to_wire());
    } else {
        out.push_small(&[0u8; fpdu::CRC_LEN]);
    }
    Ok(None)
}

/// Queues one FPDU of an RDMA Write from a file (RFC 5040 §5.1) and
/// sends its payload from the page cache: the head (and whatever was
/// queued before it) is written with `MSG_MORE`, so the kernel puts it in
/// front of the payload in one segment, then the payload goes by
/// `sendfile`, with no copy through user space. The FPDU's bytes are the
/// same as from memory (CRC off: the CRC field is zero, RFC 5044 §4.4),
/// so a peer cannot tell. What the socket does not take at once — all of
/// the payload when it is already full — is read in (`pread`) and queued
/// in `out` as before; the pad and CRC field always are.
fn send_file(
    sh: &Shared,
    wr: &OwnedWriteHalf,
    t: &Transmit,
    f: &WriteFileWr,
    offset: usize,
    len: usize,
    out: &mut Outbox,
) -> Result<(), ()> {
    out.push_small(&t.head);
    out.try_flush_more(wr, &sh.io).map_err(drop)?;
    let mut done = 0;
    if out.is_empty() {
        let sock: &tokio::net::TcpStream = wr.as_ref();
        let mut at = f.offset + offset as u64;
        while done < len {
            sh.io.wrote();
            let sent = sock.try_io(Interest::WRITABLE, || {
                Ok(rustix::fs::sendfile(
                    sock,
                    f.file.fd(),
                    Some(&mut at),
                    len - done,
                )?)
            });
            match sent {
                Ok(n) if n > 0 => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Full (the rest is queued), the file ended early (the
                // rest is zeros) or it cannot be sent from (read in).
                _ => break,
            }
        }
    }
    queue_rest(out, t, f, offset, len, done)
}

/// A queue pair's pipe for runs of FPDUs from a file (see
/// [`send_file_run`]): non-blocking both ends, empty between runs.
pub(crate) struct FilePipe {
    r: OwnedFd,
    w: OwnedFd,
    /// FPDUs of a run that surely fit: each takes a slot for its head (and
    /// the previous trailer) and one per page its payload touches.
    fpdus: usize,
}

/// The pipe's size: 256 page slots, Linux's default `pipe-max-size`.
const PIPE_BYTES: usize = 1 << 20;

impl FilePipe {
    fn new() -> Option<Self> {
        let (r, w) = rustix::pipe::pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).ok()?;
        let size = rustix::pipe::fcntl_setpipe_size(&w, PIPE_BYTES).ok()?;
        // A payload of up to 64 KiB touches at most 17 pages.
        let per_fpdu = 1 + 17;
        let fpdus = (size / 4096).saturating_sub(1) / per_fpdu;
        (fpdus >= 2).then_some(Self { r, w, fpdus })
    }
}

/// The FPDUs queued right behind `first` that continue its payload in the
/// same Write from a file, at most `max` in all, and the first transmit
/// taken that does not, if any.
fn file_run(core: &mut Core, first: &Transmit, max: usize) -> (Vec<Transmit>, Option<Transmit>) {
    let Some(PayloadRef::Wr {
        wr_id, offset, len, ..
    }) = first.payload
    else {
        return (Vec::new(), None);
    };
    let mut end = offset + len;
    let mut run = Vec::new();
    while run.len() + 1 < max {
        let Some(t) = core.conn.poll_transmit() else {
            break;
        };
        match t.payload {
            Some(PayloadRef::Wr {
                wr_id: w,
                offset,
                len,
            }) if w == wr_id && offset == end => {
                end += len;
                run.push(t);
            }
            _ => return (run, Some(t)),
        }
    }
    (run, None)
}

/// The payload span of a transmit from a work request.
fn wr_span(t: &Transmit) -> Result<(usize, usize), ()> {
    match t.payload {
        Some(PayloadRef::Wr { offset, len, .. }) => Ok((offset, len)),
        _ => Err(()),
    }
}

/// Pad and CRC field of an FPDU sent with CRC off (RFC 5044 §4.4: zero).
fn blank_trailer(t: &Transmit) -> Result<&'static [u8], ()> {
    const ZEROS: [u8; 3 + fpdu::CRC_LEN] = [0; 3 + fpdu::CRC_LEN];
    ZEROS
        .get(..fpdu::pad_len(t.ulpdu_len()) + fpdu::CRC_LEN)
        .ok_or(())
}

/// Queues what is left of an FPDU from a file once `done` of its payload
/// (`len` bytes at `offset` of the work request) went out: the rest of the
/// payload read in (`pread`), then its pad and CRC field.
fn queue_rest(
    out: &mut Outbox,
    t: &Transmit,
    f: &WriteFileWr,
    offset: usize,
    len: usize,
    done: usize,
) -> Result<(), ()> {
    if done < len {
        out.push_shared(f.read_part(offset + done, len - done).map_err(drop)?);
    }
    out.push_small(blank_trailer(t)?);
    Ok(())
}

/// Queues one FPDU from a file with its payload read in (`pread`).
fn queue_file(out: &mut Outbox, t: &Transmit, f: &WriteFileWr) -> Result<(), ()> {
    let (offset, len) = wr_span(t)?;
    out.push_small(&t.head);
    queue_rest(out, t, f, offset, len, 0)
}

/// Sends a run of FPDUs of an RDMA Write from a file (RFC 5040 §5.1; CRC
/// off, so the bytes are those [`send_file`] sends): each head (behind the
/// previous trailer) is written into the queue pair's pipe and each payload
/// spliced into it from the page cache, then the whole run goes to the
/// socket in one `splice`, so the socket is written once per run instead of
/// twice per FPDU. What the pipe or the socket does not take at once is
/// read back from the pipe (or from the file) and queued in `out`.
fn send_file_run(
    sh: &Shared,
    wr: &OwnedWriteHalf,
    pipe: &FilePipe,
    first: &Transmit,
    run: &[Transmit],
    f: &WriteFileWr,
    out: &mut Outbox,
) -> Result<(), ()> {
    let fpdus: Vec<&Transmit> = std::iter::once(first).chain(run).collect();
    out.try_flush_more(wr, &sh.io).map_err(drop)?;
    if !out.is_empty() {
        for t in fpdus {
            queue_file(out, t, f)?;
        }
        return Ok(());
    }
    let mut in_pipe = 0usize;
    // Bytes due before the next payload (a trailer and a head: less than
    // PIPE_BUF, so a pipe write takes all or nothing).
    let mut pending: Vec<u8> = Vec::with_capacity(64);
    // Where the pipe stopped taking: the FPDU and its payload bytes in.
    let mut stop = None;
    for (k, t) in fpdus.iter().enumerate() {
        let (offset, len) = wr_span(t)?;
        pending.extend_from_slice(&t.head);
        sh.io.wrote();
        match rustix::io::write(&pipe.w, &pending) {
            Ok(n) if n == pending.len() => {
                in_pipe += n;
                pending.clear();
            }
            _ => {
                stop = Some((k, 0));
                break;
            }
        }
        let mut at = f.offset + offset as u64;
        let mut done = 0;
        while done < len {
            sh.io.wrote();
            let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
            match rustix::pipe::splice(f.file.fd(), Some(&mut at), &pipe.w, None, len - done, flags)
            {
                Ok(n) if n > 0 => {
                    done += n;
                    in_pipe += n;
                }
                Err(rustix::io::Errno::INTR) => {}
                // Full, the file ended early (the rest is zeros) or it
                // cannot be spliced from (read in).
                _ => break,
            }
        }
        if done < len {
            stop = Some((k, done));
            break;
        }
        pending.extend_from_slice(blank_trailer(t)?);
    }
    if stop.is_none() {
        sh.io.wrote();
        if rustix::io::write(&pipe.w, &pending) == Ok(pending.len()) {
            in_pipe += pending.len();
            pending.clear();
        }
    }
    let sock: &tokio::net::TcpStream = wr.as_ref();
    let mut sent = 0;
    while sent < in_pipe {
        sh.io.wrote();
        let n = sock.try_io(Interest::WRITABLE, || {
            let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
            Ok(rustix::pipe::splice(
                &pipe.r,
                None,
                sock,
                None,
                in_pipe - sent,
                flags,
            )?)
        });
        match n {
            Ok(n) if n > 0 => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    if sent < in_pipe {
        // The socket is full: the rest comes back out of the pipe, which
        // is empty again for the next run.
        let mut rest = vec![0u8; in_pipe - sent];
        let mut got = 0;
        while got < rest.len() {
            match rustix::io::read(&pipe.r, &mut rest[got..]) {
                Ok(n) if n > 0 => got += n,
                Err(rustix::io::Errno::INTR) => {}
                _ => return Err(()),
            }
        }
        out.push_shared(Bytes::from(rest));
    }
    out.push_small(&pending);
    if let Some((k, done)) = stop {
        let t = fpdus[k];
        let (offset, len) = wr_span(t)?;
        queue_rest(out, t, f, offset, len, done)?;
        for t in &fpdus[k + 1..] {
            queue_file(out, t, f)?;
        }
    }
    Ok(())
}

/// Most Read Response FPDUs written by one system call.
const RUN: usize = 16;

/// The Read Responses queued right behind `first` whose payload continues
/// its payload in the same region (the rest of one RDMA Read, RFC 5040
/// §5.2), at most [`RUN`] in all, and the first transmit taken that does
/// not, if any.
fn read_response_run(core: &mut Core, first: &Transmit) -> (Vec<Transmit>, Option<Transmit>) {
    let Some(PayloadRef::Region { stag, to, len }) = first.payload else {
        return (Vec::new(), None);
    };
    let mut end = to + len as u64;
    let mut run = Vec::new();
    while run.len() + 1 < RUN {
        let Some(t) = core.conn.poll_transmit() else {
            break;
        };
        match t.payload {
            Some(PayloadRef::Region { stag: s, to, len }) if s == stag && to == end => {
                end += len as u64;
                run.push(t);
            }
            _ => return (run, Some(t)),
        }
    }
    (run, None)
}

/// Writes Read Response FPDUs (RFC 5040 §5.2) — `first` and the `run`
/// that continues it in the same region — in one vectored write, with
/// their payload taken from the source region under its lock, checked
/// again now (`a` covers `first`'s payload; the run's follows it): no
/// copy into a transmit buffer, one system call for up to [`RUN`] FPDUs
/// instead of one each. Only the bytes the socket does not take at once
/// are copied into `out`, which must be empty.
fn send_region(
    sh: &Shared,
    wr: &OwnedWriteHalf,
    first: &Transmit,
    run: &[Transmit],
    mut a: TaggedAccess,
    out: &mut Outbox,
) -> Result<(), ()> {
    let fpdus: Vec<&Transmit> = std::iter::once(first).chain(run).collect();
    a.len = fpdus
        .iter()
        .map(|t| t.payload.map_or(0, |p| p.len()) as u64)
        .sum();
    let written = sh.ctx.table.fetch(a, |src| {
        // Pad and CRC of each FPDU (RFC 5044 §4.4; zero when CRC is off).
        let mut trailers = vec![[0u8; 3 + fpdu::CRC_LEN]; fpdus.len()];
        let mut spans = Vec::with_capacity(fpdus.len());
        let mut off = 0;
        for (t, trailer) in fpdus.iter().zip(trailers.iter_mut()) {
            let len = t.payload.map_or(0, |p| p.len());
            let payload = src.get(off..off + len).ok_or(())?;
            off += len;
            let pad = fpdu::pad_len(t.ulpdu_len());
            let tl = pad + fpdu::CRC_LEN;
            if sh.ctx.crc {
                let mut crc = Crc::new();
                crc.update(&t.head);
                crc.update(payload);
                crc.update(&trailer[..pad]);
                trailer[pad..tl].copy_from_slice(&crc.to_wire());
            }
            spans.push((payload, tl));
        }
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(3 * fpdus.len());
        for ((t, (payload, tl)), trailer) in fpdus.iter().zip(&spans).zip(&trailers) {
            pieces.extend([&t.head[..], payload, &trailer[..*tl]]);
        }
        let slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        sh.io.wrote();
        let n = match wr.try_write_vectored(&slices) {
            Ok(n) => n,
            Err(e) if would_block(&e) => 0,
            Err(_) => return Err(()),
        };
        let mut skip = n;
        for piece in pieces {
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
            let mut st = sh.lock();
            flush(&mut st, &sh);
            let core = &st.core;
            (
                !st.out.is_empty(),
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
                    .core
                    .finish(&sh.ctx, CloseReason::ConnectionLost, &[QpEvent::LlpError]);
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
