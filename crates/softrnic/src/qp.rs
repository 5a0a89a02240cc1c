//! Queue pairs of the software device: the `iwarp` engine of one stream, the
//! work requests it refers to by id, and the translation of its events into
//! [`rnic`] completions and close reasons.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use iwarp::conn::{
    Completion, Config, Connection, Event, PostError as EnginePostError, RemoteAccess, SendKind,
};
use iwarp::negotiation::Established;
use iwarp::wire::terminate::TermError;
use rnic::{
    Access, AccessError, ChainWr, CloseReason, CompletionQueue, MrTable, PdId, PostError,
    ProtectionDomain, QpAttrs, QpConfig, QpEvent, QpNum, QpState, QueuePair, ReadWr, RecvWr,
    SendWr, Stag, TaggedAccess, TerminateCause, WcOpcode, WcStatus, WorkCompletion, WrId, WriteWr,
};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::io::{flush, IoCounters, Outbox};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::SoftDevice;

/// A posted Send or RDMA Write, kept until it completes: the transmit side
/// gathers its payload from here.
pub(crate) struct SendEntry {
    pub(crate) wr_id: WrId,
    pub(crate) data: Vec<Bytes>,
}

/// Mutable state of one queue pair, behind [`Shared::core`].
pub(crate) struct Core {
    pub(crate) conn: Connection,
    pub(crate) state: QpState,
    pub(crate) reason: Option<CloseReason>,
    /// Posted receives by internal id (the engine knows them by that id).
    pub(crate) recvs: BTreeMap<u64, (WrId, BytesMut)>,
    /// Posted Sends and Writes by internal id.
    pub(crate) sends: BTreeMap<u64, SendEntry>,
    /// Posted RDMA Reads by internal id.
    pub(crate) reads: BTreeMap<u64, WrId>,
    next_id: u64,
    /// The last access-check failure the engine saw (for the close reason).
    access_err: Cell<Option<AccessError>>,
    inval_err: Option<AccessError>,
    /// Closed by this side: transmit nothing more.
    pub(crate) local_closed: bool,
    /// The connection is over: the receive side must stop.
    pub(crate) finished: bool,
    /// Gathered FPDU bytes the socket did not take yet.
    pub(crate) out: Outbox,
    /// The socket's write half, once launched; written only under this
    /// lock, so FPDUs never interleave.
    pub(crate) wr: Option<Arc<OwnedWriteHalf>>,
}

/// What both IO tasks and the consumer's handle share.
pub(crate) struct Shared {
    pub(crate) core: Mutex<Core>,
    pub(crate) table: Arc<MrTable>,
    pub(crate) io: Arc<IoCounters>,
    pub(crate) pd: PdId,
    pub(crate) qpn: QpNum,
    pub(crate) attrs: QpAttrs,
    pub(crate) crc: bool,
    pub(crate) send_cq: CompletionQueue,
    pub(crate) recv_cq: CompletionQueue,
    pub(crate) tx_wake: Notify,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // Every update of the core completes between statements; a poisoned
        // lock still guards a consistent state.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The engine's view of the device's access-check table (RFC 5040 §6.4).
pub(crate) struct MemAccess<'a> {
    pub(crate) table: &'a MrTable,
    pub(crate) pd: PdId,
    pub(crate) access_err: &'a Cell<Option<AccessError>>,
    pub(crate) inval_err: &'a mut Option<AccessError>,
}

impl RemoteAccess for MemAccess<'_> {
    fn check(&self, stag: Stag, to: u64, len: u64, need: Access) -> Result<(), AccessError> {
        let r = self.table.check(TaggedAccess {
            pd: self.pd,
            stag,
            to,
            len,
            need,
        });
        if let Err(e) = r {
            self.access_err.set(Some(e));
        }
        r
    }

    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError> {
        let r = self.table.invalidate_remote(self.pd, stag);
        if let Err(e) = r {
            *self.inval_err = Some(e);
        }
        r
    }
}

fn complete(cq: &CompletionQueue, wc: WorkCompletion) {
    // An overflow is recorded by the queue and reported to its consumer on
    // every later poll.
    let _ = cq.push(wc);
}

/// The cause of a Terminate the peer sent us (RFC 5040 §4.8 codes).
fn received_cause(e: TermError) -> TerminateCause {
    match e {
        TermError::DDP_NO_BUFFER => TerminateCause::NoReceiveBuffer,
        TermError::DDP_MSG_TOO_LONG => TerminateCause::MessageTooLong,
        other => TerminateCause::Other {
            layer: other.layer.0,
            etype: other.etype,
            code: other.code,
        },
    }
}

impl Core {
    /// Runs the engine against the access table: `f` gets the engine and a
    /// [`MemAccess`] recording failures for the close reason.
    pub(crate) fn with_engine<R>(
        &mut self,
        sh: &Shared,
        f: impl FnOnce(&mut Connection, &mut MemAccess<'_>) -> R,
    ) -> R {
        let Core {
            conn,
            access_err,
            inval_err,
            ..
        } = self;
        let mut mem = MemAccess {
            table: &sh.table,
            pd: sh.pd,
            access_err,
            inval_err,
        };
        f(conn, &mut mem)
    }

    /// The cause of a Terminate we sent, with the access error the engine's
    /// check returned when there is one.
    fn sent_cause(&mut self, e: TermError) -> TerminateCause {
        let access = self.access_err.take();
        match e {
            TermError::DDP_NO_BUFFER => TerminateCause::NoReceiveBuffer,
            TermError::DDP_MSG_TOO_LONG => TerminateCause::MessageTooLong,
            TermError::RDMAP_CANNOT_INVALIDATE | TermError::RDMAP_CANNOT_INVALIDATE_PROT => {
                match self.inval_err.take() {
                    Some(a) => TerminateCause::CannotInvalidate(a),
                    None => received_cause(e),
                }
            }
            _ if e.etype == 1 && access.is_some() => {
                access.map_or(received_cause(e), TerminateCause::Access)
            }
            _ => received_cause(e),
        }
    }

    fn transition(&mut self, events: &[QpEvent]) {
        for e in events {
            self.state = self.state.on(*e).unwrap_or(QpState::Error);
        }
    }

    /// Turns every pending engine event into completions and state.
    pub(crate) fn pump(&mut self, sh: &Shared) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::Ready => {}
                Event::Completion(c) => self.complete(sh, c),
                Event::TerminateSent(e) => {
                    let cause = self.sent_cause(e);
                    if self.reason.is_none() {
                        self.reason = Some(CloseReason::TerminateSent(cause));
                        self.transition(&[QpEvent::TerminateSent, QpEvent::CloseComplete]);
                    }
                }
                Event::TerminateReceived(e) => {
                    if self.reason.is_none() {
                        self.reason = Some(CloseReason::TerminateReceived(received_cause(e)));
                        self.transition(&[QpEvent::TerminateReceived, QpEvent::CloseComplete]);
                    }
                }
            }
        }
    }

    fn complete(&mut self, sh: &Shared, c: Completion) {
        match c.opcode {
            WcOpcode::Recv => {
                let Some((wr_id, mut buf)) = self.recvs.remove(&c.wr_id) else {
                    return;
                };
                let status = c.status;
                let ok = status.is_success();
                if ok {
                    buf.truncate(c.byte_len as usize);
                } else {
                    buf.clear();
                }
                let wc = WorkCompletion {
                    wr_id,
                    qp: sh.qpn,
                    opcode: WcOpcode::Recv,
                    status,
                    byte_len: if ok { c.byte_len } else { 0 },
                    invalidated: c.invalidated,
                    solicited: c.solicited,
                    buf: Some(buf),
                };
                complete(&sh.recv_cq, wc);
            }
            WcOpcode::RdmaRead => {
                if let Some(wr_id) = self.reads.remove(&c.wr_id) {
                    complete(
                        &sh.send_cq,
                        WorkCompletion::send_side(sh.qpn, wr_id, c.opcode, c.status, c.byte_len),
                    );
                }
            }
            _ => {
                if let Some(e) = self.sends.remove(&c.wr_id) {
                    complete(
                        &sh.send_cq,
                        WorkCompletion::send_side(sh.qpn, e.wr_id, c.opcode, c.status, c.byte_len),
                    );
                }
            }
        }
    }

    /// Ends the connection: records `reason` (unless one is known), moves to
    /// Error and has the engine flush every request still outstanding
    /// ([`Connection::abort`], RFC 5040 §7); send-queue flushes complete in
    /// posting order.
    pub(crate) fn finish(&mut self, sh: &Shared, reason: CloseReason, events: &[QpEvent]) {
        self.pump(sh);
        if self.reason.is_none() {
            self.reason = Some(reason);
            self.transition(events);
        }
        self.transition(&[QpEvent::CloseComplete]);
        self.finished = true;
        self.conn.abort();
        let mut flushed = Vec::new();
        while let Some(ev) = self.conn.poll_event() {
            if let Event::Completion(c) = ev {
                flushed.push(c);
            }
        }
        // The engine flushes Reads before Sends and Writes; internal ids
        // grow with posting, so sorting restores the posting order. Receives
        // keep theirs (the sort is stable and keys them after the sends).
        flushed.sort_by_key(|c| (c.opcode == WcOpcode::Recv, c.wr_id));
        for c in flushed {
            self.complete(sh, c);
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// A queue pair ready to be connected to its socket.
pub(crate) struct Prepared {
    shared: Arc<Shared>,
}

/// Builds the engine from the MPA result and posts the initial receives.
pub(crate) fn prepare(
    dev: &SoftDevice,
    pd: &ProtectionDomain,
    est: &Established,
    config: QpConfig,
) -> Prepared {
    let cfg = dev.inner.cfg;
    let mut ecfg = Config::from_established(est);
    ecfg.mulpdu = cfg.mulpdu;
    let attrs = QpAttrs {
        ird: u32::from(est.ird),
        ord: u32::from(est.ord),
        max_message_size: cfg.max_message_size,
        max_send_wr: config.max_send_wr,
        max_recv_wr: config.max_recv_wr,
    };
    let core = Core {
        conn: Connection::new(ecfg),
        state: QpState::Idle,
        reason: None,
        recvs: BTreeMap::new(),
        sends: BTreeMap::new(),
        reads: BTreeMap::new(),
        next_id: 0,
        access_err: Cell::new(None),
        inval_err: None,
        local_closed: false,
        finished: false,
        out: Outbox::default(),
        wr: None,
    };
    let shared = Arc::new(Shared {
        core: Mutex::new(core),
        table: Arc::clone(&dev.inner.table),
        io: Arc::clone(&dev.inner.io),
        pd: pd.id(),
        qpn: QpNum(dev.inner.next_qp.fetch_add(1, Ordering::Relaxed)),
        attrs,
        crc: est.crc,
        send_cq: config.send_cq,
        recv_cq: config.recv_cq,
        tx_wake: Notify::new(),
    });
    {
        let mut core = shared.lock();
        for wr in config.initial_recvs {
            // Idle accepts receives; the engine is open: this cannot fail
            // except for a buffer over 4 GiB, which is dropped with a flush.
            if let Err(e) = post_recv_locked(&mut core, &shared, wr) {
                tracing::debug!(error = %e, "initial receive refused");
            }
        }
        core.transition(&[QpEvent::Established]);
    }
    Prepared { shared }
}

/// Connects a prepared queue pair to its socket and starts its IO tasks.
pub(crate) fn launch(p: Prepared, stream: TcpStream) -> SoftQp {
    let (rd, wr) = stream.into_split();
    let wr = Arc::new(wr);
    p.shared.lock().wr = Some(Arc::clone(&wr));
    let rx = tokio::spawn(crate::io::rx_task(Arc::clone(&p.shared), rd));
    tokio::spawn(crate::io::tx_task(Arc::clone(&p.shared), wr));
    p.shared.tx_wake.notify_one();
    SoftQp {
        shared: p.shared,
        rx: rx.abort_handle(),
    }
}

/// [`prepare`] then [`launch`], for the connecting side.
pub(crate) fn start(
    dev: &SoftDevice,
    pd: &ProtectionDomain,
    stream: TcpStream,
    est: &Established,
    config: QpConfig,
) -> SoftQp {
    launch(prepare(dev, pd, est, config), stream)
}

fn post_recv_locked(core: &mut Core, sh: &Shared, wr: RecvWr) -> Result<(), PostError> {
    if !core.state.accepts_recv_work() || core.finished {
        return Err(PostError::InvalidState(core.state));
    }
    if core.recvs.len() >= sh.attrs.max_recv_wr as usize {
        return Err(PostError::QueueFull);
    }
    let id = core.next_id();
    core.conn
        .post_recv(id, wr.buf.capacity())
        .map_err(|e| engine_error(e, core.state, wr.buf.capacity() as u64, sh))?;
    core.recvs.insert(id, (wr.wr_id, wr.buf));
    Ok(())
}

fn engine_error(e: EnginePostError, state: QpState, len: u64, sh: &Shared) -> PostError {
    match e {
        EnginePostError::Closed => PostError::InvalidState(state),
        _ => PostError::TooLong {
            len,
            max: u64::from(sh.attrs.max_message_size),
        },
    }
}

/// Whether a request just posted is the only work in flight (the consumer
/// has reaped every send completion, at most this one Read is outstanding):
/// then it is written at once, from the posting task, for latency; otherwise
/// the transmit task writes it together with the requests posted meanwhile.
fn idle(core: &Core, sh: &Shared) -> bool {
    sh.send_cq.is_empty() && core.reads.len() <= 1 && core.out.is_empty()
}

/// A queue pair of the software device. Dropping it disconnects.
pub struct SoftQp {
    shared: Arc<Shared>,
    rx: AbortHandle,
}

impl std::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftQp")
            .field("qpn", &self.shared.qpn)
            .field("state", &self.state())
            .finish()
    }
}

impl SoftQp {
    /// Checks state, size and depth for send-queue work.
    fn admit(&self, core: &Core, len: u64) -> Result<(), PostError> {
        let sh = &self.shared;
        if !core.state.accepts_send_work() || core.finished {
            return Err(PostError::InvalidState(core.state));
        }
        let max = u64::from(sh.attrs.max_message_size);
        if len > max {
            return Err(PostError::TooLong { len, max });
        }
        if core.sends.len() + core.reads.len() >= sh.attrs.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        Ok(())
    }

    /// Hands a Send to the engine (RFC 5040 §5.3: Send, Send with
    /// Solicited Event, with Invalidate); nothing is transmitted yet.
    fn queue_send(&self, core: &mut Core, wr: SendWr) -> Result<(), PostError> {
        let sh = &self.shared;
        let len = total_len(&wr.data);
        self.admit(core, len)?;
        let kind = match (wr.solicited, wr.invalidate) {
            (false, None) => SendKind::Send,
            (false, Some(s)) => SendKind::Invalidate(s),
            (true, None) => SendKind::Solicited,
            (true, Some(s)) => SendKind::SolicitedInvalidate(s),
        };
        let id = core.next_id();
        core.conn
            .post_send(id, kind, len as usize)
            .map_err(|e| engine_error(e, core.state, len, sh))?;
        core.sends.insert(
            id,
            SendEntry {
                wr_id: wr.wr_id,
                data: wr.data,
            },
        );
        Ok(())
    }

    /// Hands an RDMA Write (RFC 5040 §5.1) to the engine.
    fn queue_write(&self, core: &mut Core, wr: WriteWr) -> Result<(), PostError> {
        let sh = &self.shared;
        let len = total_len(&wr.data);
        self.admit(core, len)?;
        let id = core.next_id();
        core.conn
            .post_write(id, wr.remote_stag, wr.remote_to, len as usize)
            .map_err(|e| engine_error(e, core.state, len, sh))?;
        core.sends.insert(
            id,
            SendEntry {
                wr_id: wr.wr_id,
                data: wr.data,
            },
        );
        Ok(())
    }

    /// Transmits what was queued: from this task when the queue pair is
    /// idle, else by waking the transmit task.
    fn kick(&self, mut core: MutexGuard<'_, Core>) {
        let sh = &self.shared;
        let wake = !idle(&core, sh) || flush(&mut core, sh);
        drop(core);
        if wake {
            sh.tx_wake.notify_one();
        }
    }

    /// Closes the connection from this side with `reason`.
    fn close_local(&self, reason: CloseReason) {
        {
            let mut core = self.shared.lock();
            if core.finished {
                return;
            }
            core.local_closed = true;
            core.finish(&self.shared, reason, &[QpEvent::LocalClose]);
        }
        self.rx.abort();
        self.shared.tx_wake.notify_one();
    }
}

fn total_len(data: &[Bytes]) -> u64 {
    data.iter().map(|b| b.len() as u64).sum()
}

impl QueuePair for SoftQp {
    fn qp_num(&self) -> QpNum {
        self.shared.qpn
    }

    fn pd(&self) -> PdId {
        self.shared.pd
    }

    fn state(&self) -> QpState {
        self.shared.lock().state
    }

    fn close_reason(&self) -> Option<CloseReason> {
        self.shared.lock().reason
    }

    fn attrs(&self) -> QpAttrs {
        self.shared.attrs
    }

    /// RFC 5040 §5.3: Send, Send with Solicited Event, with Invalidate.
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        let mut core = self.shared.lock();
        self.queue_send(&mut core, wr)?;
        self.kick(core);
        Ok(())
    }

    /// RFC 5040 §5.1: RDMA Write.
    fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        let mut core = self.shared.lock();
        self.queue_write(&mut core, wr)?;
        self.kick(core);
        Ok(())
    }

    /// The whole chain is queued under one lock and transmitted together:
    /// one vectored socket write when it fits the socket and the gather
    /// limit, so the Writes and the Send of one reply never depend on the
    /// peer's ACK timing between them.
    fn post_chain(&self, wrs: Vec<ChainWr>) -> Result<(), PostError> {
        let mut core = self.shared.lock();
        let mut result = Ok(());
        for wr in wrs {
            result = match wr {
                ChainWr::Write(w) => self.queue_write(&mut core, w),
                ChainWr::Send(s) => self.queue_send(&mut core, s),
            };
            if result.is_err() {
                break;
            }
        }
        self.kick(core);
        result
    }

    /// RFC 5040 §5.2: RDMA Read. The local sink is checked here (local write
    /// right, domain, bounds); a failure completes the request with
    /// `LocalProtectionError` and closes the connection.
    fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        let sh = &self.shared;
        let len = u64::from(wr.len);
        let sink = TaggedAccess {
            pd: sh.pd,
            stag: wr.local_stag,
            to: wr.local_to,
            len,
            need: Access::LOCAL_WRITE,
        };
        {
            let mut core = sh.lock();
            self.admit(&core, len)?;
            if let Err(e) = sh.table.check(sink) {
                let wc = WorkCompletion::send_side(
                    sh.qpn,
                    wr.wr_id,
                    WcOpcode::RdmaRead,
                    WcStatus::LocalProtectionError,
                    0,
                );
                complete(&sh.send_cq, wc);
                drop(core);
                self.close_local(CloseReason::LocalAccessError(e));
                return Ok(());
            }
            let id = core.next_id();
            core.conn
                .post_read(
                    id,
                    wr.local_stag,
                    wr.local_to,
                    wr.remote_stag,
                    wr.remote_to,
                    len,
                )
                .map_err(|e| engine_error(e, core.state, len, sh))?;
            core.reads.insert(id, wr.wr_id);
            core.pump(sh);
            if idle(&core, sh) && !flush(&mut core, sh) {
                return Ok(());
            }
        }
        sh.tx_wake.notify_one();
        Ok(())
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let mut core = self.shared.lock();
        post_recv_locked(&mut core, &self.shared, wr)
    }

    fn send_cq(&self) -> &CompletionQueue {
        &self.shared.send_cq
    }

    fn recv_cq(&self) -> &CompletionQueue {
        &self.shared.recv_cq
    }

    fn disconnect(&self) {
        self.close_local(CloseReason::LocalDisconnect);
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.disconnect();
    }
}
