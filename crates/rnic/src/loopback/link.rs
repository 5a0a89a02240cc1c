//! The loopback connection: both queue pairs of one connection behind one lock,
//! executing work requests at post time with the RNIC semantics of
//! RFC 5040 §5 and §7.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::cq::CompletionQueue;
use crate::device::{CloseReason, QueuePair};
use crate::error::{AccessError, PostError, TerminateCause, WcStatus};
use crate::mr::{MrTable, TaggedAccess, TransferError};
use crate::qp::{QpAttrs, QpEvent, QpState};
use crate::stag::{Access, PdId, QpNum};
use crate::wr::{ReadWr, RecvWr, SendWr, WcOpcode, WorkCompletion, WrId, WriteWr};

use super::FaultConfig;

/// One end of a loopback connection.
pub(crate) struct Side {
    pub(crate) qpn: QpNum,
    pub(crate) pd: PdId,
    pub(crate) table: Arc<MrTable>,
    pub(crate) state: QpState,
    pub(crate) reason: Option<CloseReason>,
    pub(crate) attrs: QpAttrs,
    pub(crate) send_cq: CompletionQueue,
    pub(crate) recv_cq: CompletionQueue,
    pub(crate) recvs: VecDeque<RecvWr>,
}

/// Seeded fault injection state of one connection.
pub(crate) struct FaultState {
    cfg: FaultConfig,
    rng: u64,
    ops: u64,
}

impl FaultState {
    pub(crate) fn new(cfg: FaultConfig, seed: u64) -> Self {
        FaultState {
            cfg,
            rng: seed,
            ops: 0,
        }
    }

    /// Counts one send-queue operation; true if the connection drops now.
    fn tick(&mut self) -> bool {
        self.ops += 1;
        if self.cfg.drop_after_ops.is_some_and(|n| self.ops > n) {
            return true;
        }
        if let Some(one_in) = self.cfg.drop_one_in.filter(|n| *n > 0) {
            self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            return z % u64::from(one_in) == 0;
        }
        false
    }
}

/// Both ends of one connection.
pub(crate) struct Link {
    pub(crate) sides: [Side; 2],
    pub(crate) faults: FaultState,
}

fn complete(cq: &CompletionQueue, wc: WorkCompletion) {
    // An overflow is recorded by the queue itself and reported to its consumer
    // on every later poll; nothing else is to be done here.
    let _ = cq.push(wc);
}

fn byte_len(len: u64) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl Side {
    fn apply(&mut self, events: &[QpEvent], reason: CloseReason) {
        for e in events {
            self.state = self.state.on(*e).unwrap_or(QpState::Error);
        }
        self.reason.get_or_insert(reason);
        // RFC 5040 §7: on close every outstanding work request is flushed.
        while let Some(wr) = self.recvs.pop_front() {
            complete(&self.recv_cq, WorkCompletion::recv_flushed(self.qpn, wr));
        }
    }
}

impl Link {
    fn split(&mut self, me: usize) -> (&mut Side, &mut Side) {
        let [a, b] = &mut self.sides;
        if me == 0 {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// The side `detector` found an error: it sends a Terminate, the other side
    /// receives it, both close and flush (RFC 5040 §7.2, §7.1).
    fn terminate(&mut self, detector: usize, cause: TerminateCause, seen_by_peer: TerminateCause) {
        let (d, o) = self.split(detector);
        d.apply(
            &[QpEvent::TerminateSent, QpEvent::CloseComplete],
            CloseReason::TerminateSent(cause),
        );
        o.apply(
            &[QpEvent::TerminateReceived, QpEvent::CloseComplete],
            CloseReason::TerminateReceived(seen_by_peer),
        );
    }

    fn lose(&mut self) {
        for s in &mut self.sides {
            s.apply(&[QpEvent::LlpError], CloseReason::ConnectionLost);
        }
    }

    pub(crate) fn disconnect(&mut self, me: usize) {
        let (m, p) = self.split(me);
        if m.state != QpState::Rts {
            return;
        }
        m.apply(
            &[QpEvent::LocalClose, QpEvent::CloseComplete],
            CloseReason::LocalDisconnect,
        );
        p.apply(
            &[QpEvent::PeerClose, QpEvent::CloseComplete],
            CloseReason::PeerDisconnect,
        );
    }

    /// State and size checks common to the send queue, then fault injection.
    /// `Ok(false)`: the connection was dropped and the request flushed.
    fn prelude(
        &mut self,
        me: usize,
        wr_id: WrId,
        opcode: WcOpcode,
        len: u64,
    ) -> Result<bool, PostError> {
        let side = &self.sides[me];
        if !side.state.accepts_send_work() {
            return Err(PostError::InvalidState(side.state));
        }
        let max = u64::from(side.attrs.max_message_size);
        if len > max {
            return Err(PostError::TooLong { len, max });
        }
        if self.faults.tick() {
            let qpn = side.qpn;
            complete(
                &side.send_cq,
                WorkCompletion::send_side(qpn, wr_id, opcode, WcStatus::FlushError, 0),
            );
            self.lose();
            return Ok(false);
        }
        Ok(true)
    }

    /// RFC 5040 §5.3 (Send) and §6.7.2 (Send With Invalidate).
    pub(crate) fn send(&mut self, me: usize, wr: SendWr) -> Result<(), PostError> {
        let len = wr.len();
        if !self.prelude(me, wr.wr_id, WcOpcode::Send, len)? {
            return Ok(());
        }
        let peer_idx = 1 - me;
        // RFC 5041 §7.2 / RFC 5040 §5.3: no buffer, or one too small, is fatal.
        let verdict = {
            let p = &mut self.sides[peer_idx];
            match p.recvs.front() {
                None => Err(TerminateCause::NoReceiveBuffer),
                Some(front) if (front.buf.capacity() as u64) < len => {
                    if let Some(recv) = p.recvs.pop_front() {
                        let mut wc = WorkCompletion::recv_flushed(p.qpn, recv);
                        wc.status = WcStatus::LocalLengthError;
                        complete(&p.recv_cq, wc);
                    }
                    Err(TerminateCause::MessageTooLong)
                }
                Some(_) => match wr.invalidate {
                    Some(stag) => p
                        .table
                        .invalidate_remote(p.pd, stag)
                        .map(|()| Some(stag))
                        .map_err(TerminateCause::CannotInvalidate),
                    None => Ok(None),
                },
            }
        };
        let invalidated = match verdict {
            Ok(inv) => inv,
            Err(cause) => {
                // iWARP has no acknowledgements: the Send completed when it
                // was transmitted; the peer's verdict arrives as a Terminate.
                let m = &self.sides[me];
                let wc = WorkCompletion::send_side(
                    m.qpn,
                    wr.wr_id,
                    WcOpcode::Send,
                    WcStatus::Success,
                    byte_len(len),
                );
                complete(&m.send_cq, wc);
                // The wire carries the untagged-buffer codes as they are, and
                // only the code for a failed invalidation.
                let seen = match cause {
                    TerminateCause::CannotInvalidate(_) => {
                        TerminateCause::CANNOT_INVALIDATE_ON_WIRE
                    }
                    other => other,
                };
                self.terminate(peer_idx, cause, seen);
                return Ok(());
            }
        };
        let (m, p) = self.split(me);
        let Some(recv) = p.recvs.pop_front() else {
            return Ok(());
        };
        let mut buf = recv.buf;
        buf.clear();
        for piece in &wr.data {
            buf.extend_from_slice(piece);
        }
        complete(
            &p.recv_cq,
            WorkCompletion {
                wr_id: recv.wr_id,
                qp: p.qpn,
                opcode: WcOpcode::Recv,
                status: WcStatus::Success,
                byte_len: byte_len(len),
                invalidated,
                solicited: wr.solicited,
                buf: Some(buf),
            },
        );
        complete(
            &m.send_cq,
            WorkCompletion::send_side(
                m.qpn,
                wr.wr_id,
                WcOpcode::Send,
                WcStatus::Success,
                byte_len(len),
            ),
        );
        Ok(())
    }

    /// RFC 5040 §5.1: checked at the data sink before any byte is placed.
    pub(crate) fn write(&mut self, me: usize, wr: WriteWr) -> Result<(), PostError> {
        let len = wr.len();
        if !self.prelude(me, wr.wr_id, WcOpcode::RdmaWrite, len)? {
            return Ok(());
        }
        let (m, p) = self.split(me);
        if len == 0 {
            // A zero-length tagged message places nothing and its STag is not
            // validated (the RFC 6581 RTR is a zero-length Write to STag 0).
            let wc = WorkCompletion::send_side(
                m.qpn,
                wr.wr_id,
                WcOpcode::RdmaWrite,
                WcStatus::Success,
                0,
            );
            complete(&m.send_cq, wc);
            return Ok(());
        }
        let a = TaggedAccess {
            pd: p.pd,
            stag: wr.remote_stag,
            to: wr.remote_to,
            len,
            need: Access::REMOTE_WRITE,
        };
        let placed = p.table.place_direct(a, |dst| {
            let mut off = 0usize;
            for piece in &wr.data {
                let end = off + piece.len();
                if let Some(d) = dst.get_mut(off..end) {
                    d.copy_from_slice(piece);
                }
                off = end;
            }
            Ok::<_, Infallible>(off)
        });
        // iWARP has no acknowledgements: the Write completes once transmitted;
        // a refusal at the sink arrives as a Terminate (RFC 5040 §7.1).
        let wc = WorkCompletion::send_side(
            m.qpn,
            wr.wr_id,
            WcOpcode::RdmaWrite,
            WcStatus::Success,
            byte_len(len),
        );
        complete(&m.send_cq, wc);
        if let Err(e) = placed {
            self.terminate(
                1 - me,
                TerminateCause::Access(e),
                TerminateCause::ddp_tagged(e),
            );
        }
        Ok(())
    }

    /// RFC 5040 §5.2: the sink is checked locally, the source by the responder.
    pub(crate) fn read(&mut self, me: usize, wr: ReadWr) -> Result<(), PostError> {
        let len = u64::from(wr.len);
        if !self.prelude(me, wr.wr_id, WcOpcode::RdmaRead, len)? {
            return Ok(());
        }
        let (m, p) = self.split(me);
        let sink = TaggedAccess {
            pd: m.pd,
            stag: wr.local_stag,
            to: wr.local_to,
            len,
            need: Access::LOCAL_WRITE,
        };
        let src = TaggedAccess {
            pd: p.pd,
            stag: wr.remote_stag,
            to: wr.remote_to,
            len,
            need: Access::REMOTE_READ,
        };
        enum Outcome {
            Done,
            Local(AccessError),
            Remote(AccessError),
        }
        let outcome = match m.table.check(sink) {
            Err(e) => Outcome::Local(e),
            // Zero bytes to read: the responder validates nothing (as for a
            // zero-length Write).
            Ok(()) if len == 0 => Outcome::Done,
            Ok(()) => match MrTable::transfer(&p.table, src, &m.table, sink) {
                Ok(()) => Outcome::Done,
                Err(TransferError::Source(e)) => Outcome::Remote(e),
                Err(TransferError::Sink(e)) => Outcome::Local(e),
            },
        };
        let (status, n) = match outcome {
            Outcome::Done => (WcStatus::Success, byte_len(len)),
            Outcome::Local(_) => (WcStatus::LocalProtectionError, 0),
            Outcome::Remote(_) => (WcStatus::RemoteAccessError, 0),
        };
        complete(
            &m.send_cq,
            WorkCompletion::send_side(m.qpn, wr.wr_id, WcOpcode::RdmaRead, status, n),
        );
        match outcome {
            Outcome::Done => {}
            // The responder refuses the Read Request with a Terminate.
            Outcome::Remote(e) => self.terminate(
                1 - me,
                TerminateCause::Access(e),
                TerminateCause::rdmap_protection(e),
            ),
            // A local protection error moves the queue pair to Error and
            // closes the connection; the peer sees a close.
            Outcome::Local(e) => {
                let (m, p) = self.split(me);
                m.apply(
                    &[QpEvent::LocalClose, QpEvent::CloseComplete],
                    CloseReason::LocalAccessError(e),
                );
                p.apply(
                    &[QpEvent::PeerClose, QpEvent::CloseComplete],
                    CloseReason::PeerDisconnect,
                );
            }
        }
        Ok(())
    }

    pub(crate) fn recv(&mut self, me: usize, wr: RecvWr) -> Result<(), PostError> {
        let side = &mut self.sides[me];
        if !side.state.accepts_recv_work() {
            return Err(PostError::InvalidState(side.state));
        }
        if side.recvs.len() >= side.attrs.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        side.recvs.push_back(wr);
        Ok(())
    }
}

/// A queue pair of the loopback device.
///
/// Work requests execute at post time, so send-queue requests never stay
/// outstanding; receives stay posted until consumed or flushed. Dropping the
/// queue pair disconnects it.
pub struct LoopbackQp {
    pub(crate) link: Arc<Mutex<Link>>,
    pub(crate) me: usize,
    pub(crate) qpn: QpNum,
    pub(crate) pd: PdId,
    pub(crate) attrs: QpAttrs,
    pub(crate) send_cq: CompletionQueue,
    pub(crate) recv_cq: CompletionQueue,
}

impl std::fmt::Debug for LoopbackQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackQp")
            .field("qpn", &self.qpn)
            .field("state", &self.state())
            .finish()
    }
}

impl LoopbackQp {
    fn lock(&self) -> MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl QueuePair for LoopbackQp {
    fn qp_num(&self) -> QpNum {
        self.qpn
    }

    fn pd(&self) -> PdId {
        self.pd
    }

    fn state(&self) -> QpState {
        self.lock().sides[self.me].state
    }

    fn close_reason(&self) -> Option<CloseReason> {
        self.lock().sides[self.me].reason
    }

    fn attrs(&self) -> QpAttrs {
        self.attrs
    }

    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.lock().send(self.me, wr)
    }

    fn post_write(&self, wr: WriteWr) -> Result<(), PostError> {
        self.lock().write(self.me, wr)
    }

    fn post_read(&self, wr: ReadWr) -> Result<(), PostError> {
        self.lock().read(self.me, wr)
    }

    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.lock().recv(self.me, wr)
    }

    fn send_cq(&self) -> &CompletionQueue {
        &self.send_cq
    }

    fn recv_cq(&self) -> &CompletionQueue {
        &self.recv_cq
    }

    fn disconnect(&self) {
        self.lock().disconnect(self.me);
    }
}

impl Drop for LoopbackQp {
    fn drop(&mut self) {
        self.disconnect();
    }
}
