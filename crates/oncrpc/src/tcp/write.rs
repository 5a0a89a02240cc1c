//! Writing records to a TCP connection (record marking, RFC 5531 §11).
//!
//! What is queued together goes out together: a writer takes every
//! message waiting (up to [`WRITE_BATCH`]) and writes them with as few
//! vectored writes as their slices allow, so a connection with many
//! small replies in flight makes one system call, and one wakeup of its
//! writer, for several of them. Bulk data held by reference is never
//! copied into a staging buffer; a reply's file ranges
//! ([`xdr::XdrBuf::put_file`]) go from the file to a plain TCP socket
//! with `sendfile` (the page-cache pages are handed to the socket, no
//! copy through user space), and are read in (`pread`) on a stream that
//! cannot (TLS).

use std::io;

use rustix::net::SendFlags;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use xdr::{FileItem, Segment, XdrBuf};

use super::reverse::Outgoing;
use crate::record::{fragment_headers, framed_slices, MAX_FRAGMENT_LEN};

/// Messages one writer sends in one go at most.
const WRITE_BATCH: usize = 32;

/// Slices handed to one `writev` at most (Linux's `UIO_MAXIOV` is 1024).
const MAX_IOVECS: usize = 512;

const ZEROS: [u8; 4] = [0; 4];

/// The sending half of a connection.
pub(super) trait RecordWrite: AsyncWrite + Unpin + Send {
    /// The plain TCP socket beneath, which file ranges are sent to with
    /// `sendfile`; `None` (the default) reads them in and writes them.
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl RecordWrite for OwnedWriteHalf {
    fn socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl RecordWrite for Box<dyn AsyncWrite + Send + Unpin> {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> RecordWrite for tokio::io::WriteHalf<T> {}

/// One piece of a batch, in stream order.
#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    Bytes(&'a [u8]),
    File(&'a FileItem),
}

/// The pieces of `msg` framed as one record, with `headers` from
/// [`fragment_headers`]. A message holding file ranges is one fragment
/// ([`write_records`] reads in the ranges of any longer one).
fn push_parts<'a>(msg: &'a XdrBuf, headers: &'a [[u8; 4]], out: &mut Vec<Part<'a>>) {
    if !msg.has_files() {
        let slices = framed_slices(msg, headers, MAX_FRAGMENT_LEN);
        out.extend(slices.into_iter().map(Part::Bytes));
        return;
    }
    out.extend(headers.first().map(|h| Part::Bytes(&h[..])));
    for seg in msg.segments() {
        let (part, pad) = match seg {
            Segment::Inline(b) => (Part::Bytes(b), 0),
            Segment::Bulk(i) => (Part::Bytes(&i.data), i.pad()),
            Segment::File(i) => (Part::File(i), i.pad()),
        };
        out.push(part);
        out.extend((pad > 0).then(|| Part::Bytes(ZEROS.get(..pad).unwrap_or_default())));
    }
}

/// Writes `msgs`, each as one record, in order.
async fn write_records<W: RecordWrite>(w: &mut W, msgs: &mut [&mut XdrBuf]) -> io::Result<()> {
    for m in msgs.iter_mut() {
        if m.has_files() && m.len() > MAX_FRAGMENT_LEN {
            m.load_files()?;
        }
    }
    let headers: Vec<Vec<[u8; 4]>> = msgs
        .iter()
        .map(|m| fragment_headers(m.len(), MAX_FRAGMENT_LEN))
        .collect();
    let mut parts = Vec::new();
    for (m, h) in msgs.iter().zip(&headers) {
        push_parts(m, h, &mut parts);
    }
    let mut rest = parts.as_slice();
    while !rest.is_empty() {
        let run = rest
            .iter()
            .position(|p| matches!(p, Part::File(_)))
            .unwrap_or(rest.len());
        let (bytes, after) = rest.split_at(run);
        let mut slices: Vec<&[u8]> = bytes
            .iter()
            .filter_map(|p| match p {
                Part::Bytes(b) if !b.is_empty() => Some(*b),
                _ => None,
            })
            .collect();
        match w.socket() {
            // A file range of no bytes would leave the held bytes unsent.
            Some(sock) if matches!(after.first(), Some(Part::File(f)) if f.len > 0) => {
                write_slices_more(sock, &mut slices).await?;
            }
            _ => write_slices(w, &mut slices).await?,
        }
        rest = match after.split_first() {
            Some((Part::File(f), after)) => {
                send_file(w, f).await?;
                after
            }
            _ => &[],
        };
    }
    Ok(())
}

/// Writes every byte of `slices`, which a file range follows, with
/// `sendmsg(MSG_MORE)`: the bytes (a READ reply's headers) are held and
/// leave in the first segment of the file's data instead of in a small
/// segment of their own, which the socket's `TCP_NODELAY` would send at
/// once, costing a segment and a wakeup of the receiver per reply.
async fn write_slices_more(sock: &TcpStream, slices: &mut [&[u8]]) -> io::Result<()> {
    let mut first = 0usize;
    let mut io: Vec<io::IoSlice<'_>> = Vec::new();
    while first < slices.len() {
        fill_iovecs(&mut io, slices, first);
        let sent = sock.try_io(Interest::WRITABLE, || {
            Ok(rustix::net::sendmsg(
                sock,
                &io,
                &mut rustix::net::SendAncillaryBuffer::default(),
                SendFlags::MORE | SendFlags::NOSIGNAL,
            )?)
        });
        match sent {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => first = advance(slices, first, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Refills `io` with up to [`MAX_IOVECS`] of `slices[first..]`.
fn fill_iovecs<'a>(io: &mut Vec<io::IoSlice<'a>>, slices: &[&'a [u8]], first: usize) {
    io.clear();
    io.extend(
        slices
            .get(first..)
            .unwrap_or(&[])
            .iter()
            .take(MAX_IOVECS)
            .map(|s| io::IoSlice::new(s)),
    );
}

/// Drops the first `n` bytes written from `slices[first..]`; returns the
/// index of the first slice with bytes left.
fn advance(slices: &mut [&[u8]], mut first: usize, mut n: usize) -> usize {
    while n > 0 {
        let Some(s) = slices.get_mut(first) else {
            break;
        };
        if n >= s.len() {
            n -= s.len();
            first += 1;
        } else {
            *s = s.get(n..).unwrap_or(&[]);
            n = 0;
        }
    }
    while slices.get(first).is_some_and(|s| s.is_empty()) {
        first += 1;
    }
    first
}

/// Writes every byte of `slices` with vectored writes.
async fn write_slices<W: AsyncWrite + Unpin>(w: &mut W, slices: &mut [&[u8]]) -> io::Result<()> {
    let mut first = 0usize;
    let mut io: Vec<io::IoSlice<'_>> = Vec::new();
    while first < slices.len() {
        fill_iovecs(&mut io, slices, first);
        let n = w.write_vectored(&io).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        first = advance(slices, first, n);
    }
    Ok(())
}

/// Sends a file range: `sendfile` to a plain socket, else read in and
/// written. A file that ends early is made up with zeros, so the record
/// keeps the length its header announced.
async fn send_file<W: RecordWrite>(w: &mut W, f: &FileItem) -> io::Result<()> {
    let Some(sock) = w.socket() else {
        let data = f.read()?;
        return w.write_all(&data).await;
    };
    let mut offset = f.offset;
    let mut left = f.len;
    while left > 0 {
        let sent = sock.try_io(Interest::WRITABLE, || {
            Ok(rustix::fs::sendfile(
                sock,
                f.file.fd(),
                Some(&mut offset),
                left,
            )?)
        });
        match sent {
            Ok(0) => break,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => sock.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    while left > 0 {
        let n = left.min(ZEROS_CHUNK.len());
        w.write_all(ZEROS_CHUNK.get(..n).unwrap_or_default())
            .await?;
        left -= n;
    }
    Ok(())
}

/// Zeros standing for the bytes of a file that shrank.
static ZEROS_CHUNK: [u8; 4096] = [0; 4096];

/// Writes records and, when nothing else is queued, flushes (a TLS
/// stream holds what was written until then; plain TCP flushes nothing).
async fn send<W: RecordWrite>(w: &mut W, msgs: &mut [&mut XdrBuf], more: bool) -> io::Result<()> {
    write_records(w, msgs).await?;
    if !more {
        w.flush().await?;
    }
    Ok(())
}

/// Writes a client connection's calls, those queued together in one go.
pub(super) async fn writer_task<W: RecordWrite>(mut w: W, mut rx: mpsc::Receiver<XdrBuf>) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let mut msgs: Vec<&mut XdrBuf> = batch.iter_mut().collect();
        if let Err(e) = send(&mut w, &mut msgs, !rx.is_empty()).await {
            tracing::debug!(error = %e, "write failed");
            return;
        }
        batch.clear();
    }
    let _ = w.shutdown().await;
}

/// Writes a server connection's replies and its own calls, those queued
/// together in one go; a reply's call slot and budget are freed once it
/// is written.
pub(super) async fn reply_writer<W: RecordWrite>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while rx.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let mut msgs: Vec<&mut XdrBuf> = batch
            .iter_mut()
            .map(|out| match out {
                Outgoing::Reply((msg, _, _)) | Outgoing::Call(msg) => msg,
            })
            .collect();
        if let Err(e) = send(&mut w, &mut msgs, !rx.is_empty()).await {
            tracing::debug!(error = %e, "write failed");
            return;
        }
        batch.clear();
    }
    let _ = w.shutdown().await;
}
