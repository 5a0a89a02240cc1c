//! A connected queue pair on the NIC: posting, and the tokio task that turns
//! the hardware completion queue into `rnic` work completions.
//!
//! Receives land in a registered arena, one slot per posted receive, and are
//! copied into the consumer's buffer at completion (receives are inline
//! messages, a few KiB). Sends and Writes up to [`SEND_SLOT`] bytes are
//! copied into a registered send arena; larger ones are registered in place
//! (`ibv_reg_mr` on the consumer's `Bytes`) until they complete. RDMA Read
//! sinks are the consumer's own regions of the device's table. The
//! completion queue wakes its task through its completion channel's file
//! descriptor (`AsyncFd`): no polling while idle.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use rnic::{
    AccessError, CloseReason, CompletionQueue, PdId, PostError, QpAttrs, QpNum, QpState, ReadWr,
    RecvWr, SendWr, Stag, TerminateCause, WcOpcode, WcStatus, WorkCompletion, WriteWr,
};
use tokio::io::unix::AsyncFd;

use crate::sys::{self, CmEventKind, CmId, Cq, EventChannel, Mr, Opcode, Pd, SendDesc, Sge};
use crate::DevInner;

/// Bytes of one send-staging slot: Sends and Writes up to this size are
/// copied into registered memory instead of registered in place.
pub const SEND_SLOT: usize = 8192;
/// Largest receive slot (the largest inline message accepted).
const MAX_RECV_SLOT: usize = 1 << 20;
const RECV_BIT: u64 = 1 << 63;
/// The largest gather list used; longer ones are coalesced.
const MAX_SGE: u32 = 8;

struct PendingSend {
    wr_id: u64,
    opcode: WcOpcode,
    _keep: Vec<Mr>,
}

struct State {
    qp_state: QpState,
    reason: Option<CloseReason>,
    recvs: Vec<Option<RecvWr>>,
    free_recv: Vec<usize>,
    sends: Vec<Option<PendingSend>>,
    free_send: Vec<usize>,
    send_arena: Mr,
}

/// One connection. Field order is drop order: the queue pair and id go
/// first, then the completion queue, then the memory the NIC used.
pub(crate) struct Conn {
    pub(crate) id: CmId,
    cq: AsyncFd<Cq>,
    pub(crate) cm: AsyncFd<EventChannel>,
    recv_arena: Mr,
    st: Mutex<State>,
    pd: Arc<Pd>,
    dev: Arc<DevInner>,
    qpn: QpNum,
    pd_id: PdId,
    recv_slot: usize,
    send_sges: u32,
    attrs: QpAttrs,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
}

fn io_err(e: impl std::fmt::Display) -> rnic::CmError {
    rnic::CmError::Setup(e.to_string())
}

impl Conn {
    /// Creates the queue pair on `id` and posts `config.initial_recvs`.
    pub(crate) fn create(
        dev: &Arc<DevInner>,
        pd: &rnic::ProtectionDomain,
        mut id: CmId,
        cm: EventChannel,
        config: &mut rnic::QpConfig,
        ird: u32,
        ord: u32,
    ) -> Result<Arc<Conn>, rnic::CmError> {
        let hw_pd = dev
            .backend
            .pd(pd.id())
            .map_err(|e| io_err(format!("ibv_alloc_pd: errno {e}")))?;
        let send_wr = config.max_send_wr.max(1);
        let recv_wr = config
            .max_recv_wr
            .max(config.initial_recvs.len() as u32)
            .max(1);
        let cq = Cq::new(dev.ctx, send_wr + recv_wr).map_err(io_err)?;
        let send_sges = dev.info.max_sge.clamp(1, MAX_SGE);
        let qpn = id
            .create_qp(&hw_pd, &cq, send_wr, recv_wr, send_sges)
            .map_err(io_err)?;
        let recv_slot = config
            .initial_recvs
            .iter()
            .map(|r| r.buf.capacity())
            .max()
            .unwrap_or(4096)
            .clamp(1024, MAX_RECV_SLOT);
        let recv_arena = Mr::arena(&hw_pd, recv_slot * recv_wr as usize)
            .map_err(|e| io_err(format!("registering receive buffers: errno {e}")))?;
        let send_arena = Mr::arena(&hw_pd, SEND_SLOT * send_wr as usize)
            .map_err(|e| io_err(format!("registering send buffers: errno {e}")))?;
        let st = State {
            qp_state: QpState::Idle,
            reason: None,
            recvs: (0..recv_wr).map(|_| None).collect(),
            free_recv: (0..recv_wr as usize).rev().collect(),
            sends: (0..send_wr).map(|_| None).collect(),
            free_send: (0..send_wr as usize).rev().collect(),
            send_arena,
        };
        let conn = Arc::new(Conn {
            id,
            cq: crate::sys::async_fd(cq).map_err(io_err)?,
            cm: crate::sys::async_fd(cm).map_err(io_err)?,
            recv_arena,
            st: Mutex::new(st),
            pd: hw_pd,
            dev: Arc::clone(dev),
            qpn: QpNum(qpn),
            pd_id: pd.id(),
            recv_slot,
            send_sges,
            attrs: QpAttrs {
                ird,
                ord,
                max_message_size: 1 << 30,
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
            },
            send_cq: config.send_cq.clone(),
            recv_cq: config.recv_cq.clone(),
        });
        for r in std::mem::take(&mut config.initial_recvs) {
            conn.post_recv(r)
                .map_err(|e| io_err(format!("posting a receive: {e}")))?;
        }
        Ok(conn)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection is up: start serving completions and CM events.
    pub(crate) fn established(self: &Arc<Self>) {
        self.lock().qp_state = QpState::Rts;
        tokio::spawn(Arc::clone(self).run_cq());
        tokio::spawn(Arc::clone(self).run_cm());
    }

    pub(crate) fn qp_num(&self) -> QpNum {
        self.qpn
    }

    pub(crate) fn pd(&self) -> PdId {
        self.pd_id
    }

    pub(crate) fn state(&self) -> QpState {
        self.lock().qp_state
    }

    pub(crate) fn close_reason(&self) -> Option<CloseReason> {
        self.lock().reason
    }

    pub(crate) fn attrs(&self) -> QpAttrs {
        self.attrs
    }

    pub(crate) fn send_cq(&self) -> &CompletionQueue {
        &self.send_cq
    }

    pub(crate) fn recv_cq(&self) -> &CompletionQueue {
        &self.recv_cq
    }

    /// Moves to Error for `reason` (the first reason sticks) and has the
    /// NIC flush every outstanding request.
    pub(crate) fn close(&self, reason: CloseReason) {
        {
            let mut st = self.lock();
            if st.reason.is_none() {
                st.reason = Some(reason);
            }
            st.qp_state = QpState::Error;
        }
        self.id.disconnect();
    }

    pub(crate) fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let mut st = self.lock();
        if !st.qp_state.accepts_recv_work() {
            return Err(PostError::InvalidState(st.qp_state));
        }
        let slot = st.free_recv.pop().ok_or(PostError::QueueFull)?;
        let sge = Sge {
            addr: self.recv_arena.addr() + (slot * self.recv_slot) as u64,
            len: wr.buf.capacity().min(self.recv_slot) as u32,
            lkey: self.recv_arena.lkey(),
        };
        match self.id.post_recv(RECV_BIT | slot as u64, sge) {
            Err(e) => {
                tracing::warn!(qp = self.qpn.0, errno = e, "ibv_post_recv failed");
                st.free_recv.push(slot);
                Err(PostError::QueueFull)
            }
            Ok(()) => {
                if let Some(s) = st.recvs.get_mut(slot) {
                    *s = Some(wr);
                }
                Ok(())
            }
        }
    }

    /// The local pieces of `data`: staged in the send arena's `slot` when
    /// small, else registered in place (kept until completion).
    fn gather(
        &self,
        st: &mut State,
        slot: usize,
        data: &[Bytes],
    ) -> Result<(Vec<Sge>, Vec<Mr>), PostError> {
        let total: usize = data.iter().map(Bytes::len).sum();
        if total <= SEND_SLOT {
            let base = slot * SEND_SLOT;
            let mut off = base;
            for b in data {
                if !st.send_arena.arena_write(off, b) {
                    return Err(PostError::TooLong {
                        len: total as u64,
                        max: SEND_SLOT as u64,
                    });
                }
                off += b.len();
            }
            let sges = if total == 0 {
                Vec::new()
            } else {
                vec![Sge {
                    addr: st.send_arena.addr() + base as u64,
                    len: total as u32,
                    lkey: st.send_arena.lkey(),
                }]
            };
            return Ok((sges, Vec::new()));
        }
        let pieces: Vec<Bytes> =
            if data.iter().filter(|b| !b.is_empty()).count() > self.send_sges as usize {
                let mut all = BytesMut::with_capacity(total);
                for b in data {
                    all.extend_from_slice(b);
                }
                vec![all.freeze()]
            } else {
                data.iter().filter(|b| !b.is_empty()).cloned().collect()
            };
        let mut sges = Vec::with_capacity(pieces.len());
        let mut keep = Vec::with_capacity(pieces.len());
        for b in pieces {
            let len = b.len() as u32;
            let mr = Mr::register_bytes(&self.pd, b).map_err(|_| PostError::QueueFull)?;
            sges.push(Sge {
                addr: mr.addr(),
                len,
                lkey: mr.lkey(),
            });
            keep.push(mr);
        }
        Ok((sges, keep))
    }

    fn post_sq(
        &self,
        wr_id: u64,
        opcode: WcOpcode,
        op: Opcode,
        data: &[Bytes],
        remote: (u64, u32),
        solicited: bool,
    ) -> Result<(), PostError> {
        let mut st = self.lock();
        if !st.qp_state.accepts_send_work() {
            return Err(PostError::InvalidState(st.qp_state));
        }
        let total: u64 = data.iter().map(|b| b.len() as u64).sum();
        if total > u64::from(self.attrs.max_message_size) {
            return Err(PostError::TooLong {
                len: total,
                max: u64::from(self.attrs.max_message_size),
            });
        }
        let slot = st.free_send.pop().ok_or(PostError::QueueFull)?;
        let (sges, keep) = match self.gather(&mut st, slot, data) {
            Ok(g) => g,
            Err(e) => {
                st.free_send.push(slot);
                return Err(e);
            }
        };
        self.post_desc(
            &mut st, slot, wr_id, opcode, op, &sges, keep, remote, solicited,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn post_desc(
        &self,
        st: &mut State,
        slot: usize,
        wr_id: u64,
        opcode: WcOpcode,
        op: Opcode,
        sges: &[Sge],
        keep: Vec<Mr>,
        remote: (u64, u32),
        solicited: bool,
    ) -> Result<(), PostError> {
        let desc = SendDesc {
            wr_id: slot as u64,
            opcode: op,
            sges,
            solicited,
            remote_addr: remote.0,
            rkey: remote.1,
        };
        tracing::debug!(
            qp = self.qpn.0,
            slot,
            ?op,
            len = sges.iter().map(|s| u64::from(s.len)).sum::<u64>(),
            sges = sges.len(),
            remote = ?remote,
            "post"
        );
        // Posted under the state lock, so requests reach the NIC in the
        // order they were posted.
        match self.id.post_send(&desc) {
            Ok(()) => {
                if let Some(s) = st.sends.get_mut(slot) {
                    *s = Some(PendingSend {
                        wr_id,
                        opcode,
                        _keep: keep,
                    });
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(qp = self.qpn.0, errno = e, op = ?op, "ibv_post_send failed");
                st.free_send.push(slot);
                Err(PostError::QueueFull)
            }
        }
    }

    pub(crate) fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        let op = match wr.invalidate {
            Some(s) => Opcode::SendInv(s.0),
            None => Opcode::Send,
        };
        self.post_sq(wr.wr_id, WcOpcode::Send, op, &wr.data, (0, 0), wr.solicited)
    }

    pub(crate) fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        self.post_sq(
            wr.wr_id,
            WcOpcode::RdmaWrite,
            Opcode::Write,
            &wr.data,
            (wr.remote_to, wr.remote_stag.0),
            false,
        )
    }

    pub(crate) fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        let len = u64::from(wr.len);
        let sink = self.dev.backend.local(wr.local_stag).filter(|r| {
            r.writable
                && wr.local_to >= r.base
                && wr
                    .local_to
                    .checked_add(len)
                    .is_some_and(|end| end <= r.base.saturating_add(r.len))
        });
        let Some(sink) = sink else {
            // RFC 5040 §5.2: the sink must be a local region this queue
            // pair may write; it is not, so the request fails locally.
            tracing::warn!(
                qp = self.qpn.0,
                stag = %wr.local_stag,
                to = wr.local_to,
                len,
                "RDMA Read sink is not a writable region of this device"
            );
            self.send_cq
                .push(WorkCompletion::send_side(
                    self.qpn,
                    wr.wr_id,
                    WcOpcode::RdmaRead,
                    WcStatus::LocalProtectionError,
                    0,
                ))
                .ok();
            self.close(CloseReason::LocalAccessError(
                AccessError::BoundsViolation {
                    stag: wr.local_stag,
                    to: wr.local_to,
                    len,
                },
            ));
            return Ok(());
        };
        let mut st = self.lock();
        if !st.qp_state.accepts_send_work() {
            return Err(PostError::InvalidState(st.qp_state));
        }
        let slot = st.free_send.pop().ok_or(PostError::QueueFull)?;
        let sges = [Sge {
            addr: wr.local_to,
            len: wr.len,
            lkey: sink.lkey,
        }];
        self.post_desc(
            &mut st,
            slot,
            wr.wr_id,
            WcOpcode::RdmaRead,
            Opcode::Read,
            if wr.len == 0 { &[] } else { &sges },
            Vec::new(),
            (wr.remote_to, wr.remote_stag.0),
            false,
        )
    }

    fn complete(&self, wc: sys::Wc) {
        let status = status(wc.status);
        tracing::debug!(
            qp = self.qpn.0,
            wr = wc.wr_id,
            status = wc.status,
            len = wc.byte_len,
            inv = ?wc.invalidated,
            "completion"
        );
        if !matches!(status, WcStatus::Success | WcStatus::FlushError) {
            tracing::warn!(
                qp = self.qpn.0,
                wr = wc.wr_id,
                status = wc.status,
                vendor_err = wc.vendor_err,
                "work completion error"
            );
        }
        let pushed = if wc.wr_id & RECV_BIT != 0 {
            let slot = (wc.wr_id & !RECV_BIT) as usize;
            let taken = {
                let mut st = self.lock();
                let r = st.recvs.get_mut(slot).and_then(Option::take);
                if r.is_some() {
                    st.free_recv.push(slot);
                }
                r
            };
            let Some(r) = taken else { return };
            let mut buf = r.buf;
            buf.clear();
            if status == WcStatus::Success {
                self.recv_arena
                    .arena_read(slot * self.recv_slot, wc.byte_len as usize, &mut buf);
            }
            // Delivered from the CQ task with no lock held, so a
            // consumer's completion handler runs here
            // (rnic::CompletionQueue::set_handler).
            self.recv_cq.deliver(WorkCompletion {
                wr_id: r.wr_id,
                qp: self.qpn,
                opcode: WcOpcode::Recv,
                status,
                byte_len: wc.byte_len,
                invalidated: wc.invalidated.map(Stag),
                solicited: false,
                buf: Some(buf),
            })
        } else {
            let slot = wc.wr_id as usize;
            let taken = {
                let mut st = self.lock();
                let p = st.sends.get_mut(slot).and_then(Option::take);
                if p.is_some() {
                    st.free_send.push(slot);
                }
                p
            };
            let Some(p) = taken else { return };
            self.send_cq.deliver(WorkCompletion::send_side(
                self.qpn,
                p.wr_id,
                p.opcode,
                status,
                wc.byte_len,
            ))
        };
        let _ = pushed;
        match status {
            WcStatus::Success | WcStatus::FlushError => {}
            WcStatus::RemoteAccessError => {
                self.close(CloseReason::TerminateReceived(TerminateCause::Other {
                    layer: 0,
                    etype: 1,
                    code: 0,
                }))
            }
            _ => self.close(CloseReason::ConnectionLost),
        }
    }

    /// Closed and every request completed: nothing more will come.
    fn drained(&self) -> bool {
        let st = self.lock();
        st.qp_state == QpState::Error
            && st.recvs.iter().all(Option::is_none)
            && st.sends.iter().all(Option::is_none)
    }

    async fn run_cq(self: Arc<Self>) {
        Arc::clone(&self).serve_cq().await;
        release(self);
    }

    async fn serve_cq(self: Arc<Self>) {
        let mut wcs = Vec::new();
        loop {
            loop {
                wcs.clear();
                if self.cq.get_ref().poll(&mut wcs, 64).is_err() {
                    self.close(CloseReason::ConnectionLost);
                    return;
                }
                if wcs.is_empty() {
                    break;
                }
                for wc in wcs.drain(..) {
                    self.complete(wc);
                }
            }
            if self.drained() {
                return;
            }
            let Ok(mut guard) = self.cq.readable().await else {
                return;
            };
            let taken = guard.try_io(|cq| match cq.get_ref().take_events() {
                0 => Err(io::ErrorKind::WouldBlock.into()),
                n => Ok(n),
            });
            if taken.is_ok() && self.cq.get_ref().arm().is_err() {
                self.close(CloseReason::ConnectionLost);
            }
        }
    }

    async fn run_cm(self: Arc<Self>) {
        loop {
            let Some(ev) = next_event(&self.cm).await else {
                break;
            };
            if ev.kind == CmEventKind::Disconnected {
                self.close(CloseReason::PeerDisconnect);
                break;
            }
        }
        release(self);
    }
}

/// Lets go of a connection off the async runtime: destroying an rdma_cm id
/// and its queue pair can block (iWARP waits for the TCP teardown), and a
/// runtime worker blocked there could not accept the next connection.
pub(crate) fn release(conn: Arc<Conn>) {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => drop(h.spawn_blocking(move || drop(conn))),
        Err(_) => drop(conn),
    }
}

/// The next rdma_cm event of `ch`, waiting on its descriptor.
pub(crate) async fn next_event(ch: &AsyncFd<EventChannel>) -> Option<sys::CmEvent> {
    loop {
        let mut guard = ch.readable().await.ok()?;
        if let Ok(ev) = guard.try_io(|c| c.get_ref().next().ok_or(io::ErrorKind::WouldBlock.into()))
        {
            return ev.ok();
        }
    }
}

fn status(s: i32) -> WcStatus {
    match s {
        0 => WcStatus::Success,
        5 => WcStatus::FlushError,
        1 => WcStatus::LocalLengthError,
        4 | 8 => WcStatus::LocalProtectionError,
        10 => WcStatus::RemoteAccessError,
        _ => WcStatus::RemoteOperationError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_statuses_map_to_rnic_ones() {
        assert_eq!(status(0), WcStatus::Success);
        assert_eq!(status(5), WcStatus::FlushError);
        assert_eq!(status(1), WcStatus::LocalLengthError);
        assert_eq!(status(10), WcStatus::RemoteAccessError);
        assert_eq!(status(12), WcStatus::RemoteOperationError);
    }
}
