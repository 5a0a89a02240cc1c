//! Transmit-side IO state of a queue pair: FPDUs gathered for the socket
//! and not yet written, and the device's socket-write counter.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::Interest;
use tokio::net::tcp::OwnedWriteHalf;

/// Counters of a device's socket IO, shared by its queue pairs.
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Write system calls made (vectored or not), counted before each
    /// call so a peer that got the bytes never sees an older count.
    pub(crate) socket_writes: AtomicU64,
}

impl IoCounters {
    pub(crate) fn wrote(&self) {
        self.socket_writes.fetch_add(1, Ordering::Relaxed);
    }
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
    pub(crate) fn push_small(&mut self, b: &[u8]) {
        self.small.extend_from_slice(b);
        self.len += b.len();
    }

    pub(crate) fn push_shared(&mut self, b: Bytes) {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
        self.len += b.len();
        self.chunks.push_back(b);
    }

    /// Whether it holds as much as it may before the socket takes some.
    pub(crate) fn full(&self) -> bool {
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
    pub(crate) fn try_flush(&mut self, wr: &OwnedWriteHalf, io: &IoCounters) -> io::Result<()> {
        self.flush_with(wr, io, false)
    }

    /// [`Self::try_flush`] with `MSG_MORE`: the kernel holds the bytes to
    /// put them in front of the next write (a payload sent by `sendfile`)
    /// instead of sending them as a segment of their own.
    pub(crate) fn try_flush_more(
        &mut self,
        wr: &OwnedWriteHalf,
        io: &IoCounters,
    ) -> io::Result<()> {
        self.flush_with(wr, io, true)
    }

    fn flush_with(&mut self, wr: &OwnedWriteHalf, io: &IoCounters, more: bool) -> io::Result<()> {
        self.seal();
        while !self.chunks.is_empty() {
            let mut slices = [IoSlice::new(&[]); 128];
            let mut k = 0;
            for (slot, c) in slices.iter_mut().zip(self.chunks.iter()) {
                *slot = IoSlice::new(c);
                k += 1;
            }
            io.wrote();
            let written = if more {
                let sock: &tokio::net::TcpStream = wr.as_ref();
                sock.try_io(Interest::WRITABLE, || {
                    Ok(rustix::net::sendmsg(
                        sock,
                        &slices[..k],
                        &mut rustix::net::SendAncillaryBuffer::default(),
                        rustix::net::SendFlags::MORE,
                    )?)
                })
            } else {
                wr.try_write_vectored(&slices[..k])
            };
            let mut n = match written {
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

pub(crate) fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}
