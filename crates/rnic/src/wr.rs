//! Work requests posted to a queue pair and the completions they produce.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::error::WcStatus;
use crate::stag::{QpNum, Stag};

/// Caller-chosen identifier returned in the completion of a work request.
pub type WrId = u64;

/// A Send, Send With Solicited Event, Send With Invalidate, or Send With
/// Solicited Event and Invalidate.
///
/// RFC 5040 §5.3 (Send operations) and §6.7: the payload is untagged and
/// consumes the next posted receive buffer at the peer. With `invalidate` set,
/// the peer invalidates that STag of its own before the receive completes, and
/// reports it in the receive completion.
#[derive(Clone, Debug, Default)]
pub struct SendWr {
    /// Identifier returned in the completion.
    pub wr_id: WrId,
    /// Gather list: the message is the concatenation of these buffers.
    pub data: Vec<Bytes>,
    /// Ask the peer to raise a solicited event (RFC 5040 §5.3, SE bit).
    pub solicited: bool,
    /// STag of the peer to invalidate (Send With Invalidate, RFC 5040 §5.3).
    pub invalidate: Option<Stag>,
}

impl SendWr {
    /// Total length of the gather list.
    pub fn len(&self) -> u64 {
        self.data.iter().map(|b| b.len() as u64).sum()
    }

    /// Whether the gather list carries no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An RDMA Write: local gather list into the peer's region at `remote_stag` +
/// `remote_to`.
///
/// RFC 5040 §5.1: the peer checks the STag, its access rights (remote write),
/// protection domain and bounds before placing a byte.
#[derive(Clone, Debug)]
pub struct WriteWr {
    /// Identifier returned in the completion.
    pub wr_id: WrId,
    /// Gather list: the bytes written are the concatenation of these buffers.
    pub data: Vec<Bytes>,
    /// The peer's region.
    pub remote_stag: Stag,
    /// Tagged offset in the peer's region where the first byte goes.
    pub remote_to: u64,
}

impl WriteWr {
    /// Total length of the gather list.
    pub fn len(&self) -> u64 {
        self.data.iter().map(|b| b.len() as u64).sum()
    }

    /// Whether the gather list carries no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open file whose bytes a [`WriteFileWr`] sends.
pub trait FileData: Send + Sync + fmt::Debug {
    /// The open file, for a device that moves the bytes from the page
    /// cache to its socket itself (`sendfile`).
    fn fd(&self) -> BorrowedFd<'_>;
    /// Reads up to `buf.len()` bytes at `offset` (`pread`): 0 at the end
    /// of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

/// An RDMA Write whose source is `len` bytes of an open file at `offset`
/// instead of a gather list in memory: the same operation on the wire as
/// a [`WriteWr`] of those bytes (RFC 5040 §5.1). A device that cannot send
/// from a file reads the range in when it is posted ([`Self::read`]); the
/// software device sends it from the page cache. If the file is shorter
/// than the range by the time it is sent, the missing bytes go as zeros,
/// so the Write keeps the length it was posted with.
#[derive(Clone, Debug)]
pub struct WriteFileWr {
    /// Identifier returned in the completion.
    pub wr_id: WrId,
    /// The file.
    pub file: Arc<dyn FileData>,
    /// Where the bytes start in the file.
    pub offset: u64,
    /// How many bytes.
    pub len: usize,
    /// The peer's region.
    pub remote_stag: Stag,
    /// Tagged offset in the peer's region where the first byte goes.
    pub remote_to: u64,
}

impl WriteFileWr {
    /// Reads `len` bytes at `at` (relative to the range) into a new buffer,
    /// zeros where the file ends early.
    pub fn read_part(&self, at: usize, len: usize) -> io::Result<Bytes> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            match self.file.read_at(rest, self.offset + (at + done) as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Bytes::from(buf))
    }

    /// The same Write with the bytes read in, for a device that sends from
    /// memory.
    pub fn read(self) -> io::Result<WriteWr> {
        let data = self.read_part(0, self.len)?;
        Ok(WriteWr {
            wr_id: self.wr_id,
            data: vec![data],
            remote_stag: self.remote_stag,
            remote_to: self.remote_to,
        })
    }
}

/// One work request of a chain posted with [`QueuePair::post_chain`]: the
/// RDMA Writes and the Send that carry one message, such as an
/// RPC-over-RDMA reply and its write chunks (RFC 8166 §3.5).
///
/// [`QueuePair::post_chain`]: crate::QueuePair::post_chain
#[derive(Clone, Debug)]
pub enum ChainWr {
    /// An RDMA Write.
    Write(WriteWr),
    /// An RDMA Write from a file range.
    WriteFile(WriteFileWr),
    /// A Send.
    Send(SendWr),
}

/// An RDMA Read: `len` bytes of the peer's region at `remote_stag` +
/// `remote_to` into the local region `local_stag` at tagged offset `local_to`.
///
/// RFC 5040 §5.2: the local region is the data sink and needs
/// [`Access::LOCAL_WRITE`](crate::Access::LOCAL_WRITE) and the protection domain of
/// the queue pair; the peer's region needs remote read.
#[derive(Clone, Debug)]
pub struct ReadWr {
    /// Identifier returned in the completion.
    pub wr_id: WrId,
    /// Local data sink region.
    pub local_stag: Stag,
    /// Tagged offset in the local region where the first byte goes.
    pub local_to: u64,
    /// Number of bytes to read.
    pub len: u32,
    /// The peer's data source region.
    pub remote_stag: Stag,
    /// Tagged offset in the peer's region of the first byte.
    pub remote_to: u64,
}

/// A receive buffer for one incoming Send.
///
/// The buffer's *capacity* is the largest message it accepts; it is handed back,
/// cleared and then filled with the message, in the receive completion.
/// RFC 5040 §5.3: a Send larger than the buffer terminates the connection.
#[derive(Debug)]
pub struct RecvWr {
    /// Identifier returned in the completion.
    pub wr_id: WrId,
    /// The buffer; its capacity bounds the message size.
    pub buf: BytesMut,
}

/// The operation a work completion reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A Send (any variant) posted by this side.
    Send,
    /// An RDMA Write posted by this side.
    RdmaWrite,
    /// An RDMA Read posted by this side.
    RdmaRead,
    /// A receive buffer consumed by an incoming Send (or flushed).
    Recv,
}

/// The completion of one work request.
#[derive(Debug)]
pub struct WorkCompletion {
    /// The identifier given in the work request.
    pub wr_id: WrId,
    /// The queue pair the request was posted to.
    pub qp: QpNum,
    /// The operation.
    pub opcode: WcOpcode,
    /// How it ended.
    pub status: WcStatus,
    /// Bytes transferred (received message length for `Recv`).
    pub byte_len: u32,
    /// For `Recv`: the local STag the incoming Send With Invalidate invalidated
    /// (RFC 5040 §5.3, reported to the consumer).
    pub invalidated: Option<Stag>,
    /// For `Recv`: the incoming Send asked for a solicited event.
    pub solicited: bool,
    /// For `Recv`: the receive buffer handed back (filled on success).
    pub buf: Option<BytesMut>,
}

impl WorkCompletion {
    /// A completion of a request posted to the send queue.
    pub fn send_side(
        qp: QpNum,
        wr_id: WrId,
        opcode: WcOpcode,
        status: WcStatus,
        byte_len: u32,
    ) -> Self {
        WorkCompletion {
            wr_id,
            qp,
            opcode,
            status,
            byte_len,
            invalidated: None,
            solicited: false,
            buf: None,
        }
    }

    /// A flushed receive: the buffer comes back untouched (cleared).
    pub fn recv_flushed(qp: QpNum, wr: RecvWr) -> Self {
        let mut buf = wr.buf;
        buf.clear();
        WorkCompletion {
            wr_id: wr.wr_id,
            qp,
            opcode: WcOpcode::Recv,
            status: WcStatus::FlushError,
            byte_len: 0,
            invalidated: None,
            solicited: false,
            buf: Some(buf),
        }
    }
}
