//! The `Device` trait and its companions: what an RDMA device offers its
//! consumers (the contract is documented on [`Device`]).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use crate::cq::CompletionQueue;
use crate::error::{AccessError, CmError, PostError, TerminateCause};
use crate::mr::{MrTable, ProtectionDomain};
use crate::qp::{QpAttrs, QpConfig, QpState};
use crate::stag::{PdId, QpNum};
use crate::wr::{ChainWr, ReadWr, RecvWr, SendWr, WriteWr};

/// An RDMA device: a memory-region table, connection management, queue pairs.
///
/// Every upper layer (RPC-over-RDMA in particular) is written generic over
/// [`Device`], so that the in-memory [`loopback`](crate::loopback) device and the
/// TCP-based `softrnic` device are interchangeable. Both share
/// [`MrTable`](crate::MrTable) for every access check.
///
/// # Contract
///
/// - Memory: registration is not a device method; it goes through
///   [`ProtectionDomain`] (from [`Device::alloc_pd`]) on the device's own table.
/// - Connection management (RFC 5044 §7, RFC 6581): [`Device::listen`] gives a
///   [`Listener`]; each [`Listener::accept_request`] yields a [`ConnectRequest`]
///   whose [`private_data`](ConnectRequest::private_data) can be read *before*
///   [`accept`](ConnectRequest::accept) or [`reject`](ConnectRequest::reject),
///   each with private data of its own. [`Device::connect`] returns the queue
///   pair with the acceptor's private data, or [`CmError::Rejected`] with the
///   rejecter's.
/// - Receive buffers given in [`QpConfig::initial_recvs`] are posted before the
///   queue pair reaches RTS, so the peer's first Send always finds them.
/// - Learning of a close: every posted receive completes with `FlushError`
///   when the connection ends, so a consumer that keeps receives posted (as
///   RPC-over-RDMA does for its credits) sees the close on its receive
///   completion queue; [`QueuePair::close_reason`] then says why.
/// - Posting never blocks. Send-queue work runs in order; every request
///   produces exactly one [`WorkCompletion`](crate::WorkCompletion) on its queue's
///   completion queue, flushed ([`WcStatus::FlushError`](crate::WcStatus)) if the
///   connection ends first.
/// - Completion handlers: a device whose completions are produced with none
///   of its own locks held (on its receive or transmit task, or at the end
///   of a post call) hands them to [`CompletionQueue::deliver`], so a
///   consumer's [`CompletionHandler`](crate::CompletionHandler) runs there,
///   one queue pair's completions at a time and in order; a device that
///   cannot (the loopback device executes under its link's lock) pushes
///   them to the queue, and consumers poll as before.
/// - Completion timing (RFC 5040 §5): iWARP has no acknowledgements, so a
///   Send or RDMA Write completes successfully once handed to the transport;
///   an RDMA Read completes when its response has been placed. Until then a
///   request counts against [`QpAttrs::max_send_wr`](crate::QpAttrs) and
///   posting beyond it fails with [`PostError::QueueFull`] (the loopback device
///   executes at post time, so only its receive queue ever fills).
/// - RNIC behaviour (RFC 5040 §5, §7): a tagged access that fails the
///   [`MrTable`](crate::MrTable) checks touches no memory; the side that found
///   it sends a Terminate and closes with
///   [`CloseReason::TerminateSent`], the other side closes with
///   [`CloseReason::TerminateReceived`], and every outstanding request on both
///   sides is flushed. A refused RDMA Read completes with `RemoteAccessError`.
///   A Send that finds no receive buffer, or one too small, terminates the
///   connection the same way (the too-small buffer completes with
///   `LocalLengthError`). A Send With Invalidate invalidates the named STag of
///   the receiver before the receive completes and reports it in
///   [`WorkCompletion::invalidated`](crate::WorkCompletion).
pub trait Device: Send + Sync + 'static {
    /// How peers are addressed (`SocketAddr` for TCP, a name for loopback).
    type Addr: Clone + Debug + Send + Sync + 'static;
    /// The device's queue pairs.
    type Qp: QueuePair;
    /// The device's listeners.
    type Listener: Listener<Addr = Self::Addr, Qp = Self::Qp>;

    /// The device's access-check table.
    fn mr_table(&self) -> &Arc<MrTable>;

    /// Creates a protection domain on this device.
    fn alloc_pd(&self) -> ProtectionDomain {
        self.mr_table().alloc_pd()
    }

    /// Listens for connection requests at `addr`.
    fn listen(
        &self,
        addr: &Self::Addr,
    ) -> impl Future<Output = Result<Self::Listener, CmError>> + Send;

    /// Connects to a listener at `addr`, offering `config.private_data`.
    /// Returns the queue pair (in RTS) and the acceptor's private data.
    fn connect(
        &self,
        pd: &ProtectionDomain,
        addr: &Self::Addr,
        config: QpConfig,
    ) -> impl Future<Output = Result<Connected<Self::Qp>, CmError>> + Send;
}

/// The result of a successful [`Device::connect`].
#[derive(Debug)]
pub struct Connected<Q> {
    /// The connected queue pair, in RTS.
    pub qp: Q,
    /// The private data the acceptor sent with its accept.
    pub private_data: Vec<u8>,
}

/// A passive endpoint receiving connection requests.
pub trait Listener: Send + 'static {
    /// Address type of the device.
    type Addr: Clone + Debug + Send + Sync + 'static;
    /// Queue pairs produced by accepting.
    type Qp: QueuePair;
    /// A pending connection request.
    type Request: ConnectRequest<Qp = Self::Qp>;

    /// The address connectors should use (with the port chosen, for TCP).
    fn local_addr(&self) -> Self::Addr;

    /// Waits for the next connection request.
    fn accept_request(&mut self) -> impl Future<Output = Result<Self::Request, CmError>> + Send;
}

/// A connection request awaiting the consumer's decision.
///
/// Dropping it without a decision rejects it with no private data.
pub trait ConnectRequest: Send + 'static {
    /// Queue pairs produced by accepting.
    type Qp: QueuePair;

    /// The connector's private data (RFC 5044 §7.1).
    fn private_data(&self) -> &[u8];

    /// The connector's offered inbound and outbound RDMA Read depths
    /// `(ird, ord)` (RFC 6581 §4).
    fn peer_ird_ord(&self) -> (u32, u32);

    /// The connector's network address, when the device knows one (an
    /// iWARP device's TCP peer). Upper layers key per-client state on its
    /// IP part, as the NFS duplicate-request cache does across reconnects.
    /// `None` by default.
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        None
    }

    /// Accepts, sending `config.private_data`; returns the queue pair in RTS.
    fn accept(
        self,
        pd: &ProtectionDomain,
        config: QpConfig,
    ) -> impl Future<Output = Result<Self::Qp, CmError>> + Send;

    /// Rejects, sending `private_data` (at most [`MAX_PRIVATE_DATA`](crate::MAX_PRIVATE_DATA) bytes) to the connector.
    fn reject(self, private_data: &[u8]) -> impl Future<Output = Result<(), CmError>> + Send;
}

/// Why a queue pair left RTS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// This side called [`QueuePair::disconnect`].
    LocalDisconnect,
    /// The peer disconnected gracefully.
    PeerDisconnect,
    /// This side detected an error and sent a Terminate (RFC 5040 §7.2).
    TerminateSent(TerminateCause),
    /// The peer sent a Terminate (RFC 5040 §7.1).
    TerminateReceived(TerminateCause),
    /// The lower-layer connection failed (reset, dropped, injected fault).
    ConnectionLost,
    /// A work request named local memory that failed the access checks (an
    /// RDMA Read sink): it completed with `LocalProtectionError`, the queue
    /// pair moved to Error and the connection was closed.
    LocalAccessError(AccessError),
}

/// A reliable-connected queue pair.
///
/// All methods take `&self`: a queue pair can be shared between the task that
/// posts and the task that reaps completions.
pub trait QueuePair: Send + Sync + 'static {
    /// The queue pair's number, carried by its completions.
    fn qp_num(&self) -> QpNum;

    /// The protection domain it was created in.
    fn pd(&self) -> PdId;

    /// Current state.
    fn state(&self) -> QpState;

    /// Why it left RTS, once it has.
    fn close_reason(&self) -> Option<CloseReason>;

    /// Attributes negotiated at connection set-up (IRD, ORD, sizes).
    fn attrs(&self) -> QpAttrs;

    /// Posts a Send (or Send With Invalidate / Solicited Event).
    fn post_send(&self, wr: SendWr) -> Result<(), PostError>;

    /// Posts an RDMA Write.
    fn post_write(&self, wr: WriteWr) -> Result<(), PostError>;

    /// Posts Writes and Sends in order as one chain, like a linked list
    /// of work requests handed to `ibv_post_send`: a device may put them
    /// on the wire together (the software device writes them to its socket
    /// in one vectored write when they fit). Stops at the first request
    /// that fails and returns its error; those before it stay posted.
    fn post_chain(&self, wrs: Vec<ChainWr>) -> Result<(), PostError> {
        for wr in wrs {
            match wr {
                ChainWr::Write(w) => self.post_write(w)?,
                ChainWr::WriteFile(w) => {
                    let w = w.read().map_err(|e| PostError::FileRead(e.kind()))?;
                    self.post_write(w)?
                }
                ChainWr::Send(s) => self.post_send(s)?,
            }
        }
        Ok(())
    }

    /// Whether a [`ChainWr::WriteFile`] goes from the file without being
    /// read into memory first (the software device's `sendfile`). Every
    /// device takes them; one that answers `false` reads each range in
    /// when it is posted, so a consumer may as well read it earlier.
    fn sends_files(&self) -> bool {
        false
    }

    /// Posts an RDMA Read.
    fn post_read(&self, wr: ReadWr) -> Result<(), PostError>;

    /// Posts a receive buffer.
    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError>;

    /// The completion queue of the send queue.
    fn send_cq(&self) -> &CompletionQueue;

    /// The completion queue of the receive queue.
    fn recv_cq(&self) -> &CompletionQueue;

    /// Closes the connection gracefully; every outstanding work request on both
    /// sides completes with `FlushError`.
    fn disconnect(&self);
}
