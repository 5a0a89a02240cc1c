//! The socket-free core of a queue pair: the `iwarp` engine of one stream,
//! the work requests it refers to by id, and the translation of its events
//! into [`rnic`] completions, state and close reasons.
//!
//! Nothing here touches a socket or a runtime; the IO tasks (`rx`, `tx`)
//! and the consumer's handle (`qp`) drive it under the queue pair's lock.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use iwarp::conn::{
    Completion, Connection, Event, PostError as EnginePostError, RemoteAccess, SendKind,
};
use iwarp::wire::terminate::TermError;
use rnic::{
    Access, AccessError, CloseReason, CompletionQueue, MrTable, PdId, PostError, QpAttrs, QpEvent,
    QpNum, QpState, ReadWr, RecvWr, SendWr, Stag, TaggedAccess, TerminateCause, WcOpcode, WcStatus,
    WorkCompletion, WrId, WriteFileWr, WriteWr,
};

/// What a queue pair's core needs of its device and consumer: fixed for
/// the queue pair's life.
pub(crate) struct QpCtx {
    pub(crate) table: Arc<MrTable>,
    pub(crate) pd: PdId,
    pub(crate) qpn: QpNum,
    pub(crate) attrs: QpAttrs,
    pub(crate) crc: bool,
    /// The receive side's staging buffer size (`SoftConfig::rx_stage`).
    pub(crate) rx_stage: usize,
    pub(crate) send_cq: CompletionQueue,
    pub(crate) recv_cq: CompletionQueue,
}

/// A posted Send or RDMA Write, kept until it completes: the transmit side
/// gathers its payload from here.
pub(crate) struct SendEntry {
    pub(crate) wr_id: WrId,
    pub(crate) data: Vec<Bytes>,
    /// An RDMA Write from a file range: its payload is the range, not
    /// `data` (which is empty).
    pub(crate) file: Option<WriteFileWr>,
}

/// The engine and work-request tables of one queue pair.
pub(crate) struct Core {
    pub(crate) conn: Connection,
    pub(crate) state: QpState,
    pub(crate) reason: Option<CloseReason>,
    /// Posted receives by internal id (the engine knows them by that id).
    pub(crate) recvs: Posted<(WrId, BytesMut)>,
    /// Posted Sends and Writes by internal id.
    pub(crate) sends: Posted<SendEntry>,
    /// Posted RDMA Reads by internal id.
    pub(crate) reads: Posted<WrId>,
    next_id: u64,
    /// The last access-check failure the engine saw (for the close reason).
    access_err: Cell<Option<AccessError>>,
    inval_err: Option<AccessError>,
    /// Closed by this side: transmit nothing more.
    pub(crate) local_closed: bool,
    /// The connection is over: the receive side must stop.
    pub(crate) finished: bool,
    /// Send-queue completions (Sends, Writes, Reads) produced under the
    /// queue pair's lock, delivered to their queue once it is released
    /// ([`crate::shared::Guard`]), so a consumer's completion handler may
    /// post to this queue pair.
    pub(crate) done_send: Vec<WorkCompletion>,
    /// Receive completions, likewise.
    pub(crate) done_recv: Vec<WorkCompletion>,
}

/// The engine's view of the device's access-check table (RFC 5040 §6.4).
pub(crate) struct MemAccess<'a> {
    table: &'a MrTable,
    pd: PdId,
    access_err: &'a Cell<Option<AccessError>>,
    inval_err: &'a mut Option<AccessError>,
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

/// Hands completions to `cq`, with the queue pair's lock released and in
/// the order they were produced: to the consumer's handler where it
/// registered one ([`CompletionQueue::deliver`]) when `direct`, else to the
/// queue for polling.
pub(crate) fn deliver(
    cq: &CompletionQueue,
    done: impl IntoIterator<Item = WorkCompletion>,
    direct: bool,
) {
    for wc in done {
        // An overflow is recorded by the queue and reported to its consumer
        // on every later poll.
        let _ = if direct { cq.deliver(wc) } else { cq.push(wc) };
    }
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

fn engine_error(e: EnginePostError, state: QpState, len: u64, ctx: &QpCtx) -> PostError {
    match e {
        EnginePostError::Closed => PostError::InvalidState(state),
        _ => PostError::TooLong {
            len,
            max: u64::from(ctx.attrs.max_message_size),
        },
    }
}

fn total_len(data: &[Bytes]) -> u64 {
    data.iter().map(|b| b.len() as u64).sum()
}

/// Work requests by internal id, oldest first. Ids grow with posting
/// ([`Core::next_id`]) and each table is filled in posting order, so it is
/// sorted; its requests complete in posting order too (a receive is
/// consumed in the order the receives were posted, RFC 5040 §5.3; Sends
/// and Writes complete in order, and so do Reads), so the one completing
/// is almost always the first: taken off the front, where an ordered map
/// (the `BTreeMap` this replaces) cost a search, node rebalancing and an
/// allocation now and then on every post and completion. A request found
/// elsewhere (a lookup by the transmit or receive side) is found by binary
/// search. Holds at most the queue's depth (`QpAttrs`), checked before
/// each insert.
pub(crate) struct Posted<T> {
    q: VecDeque<(u64, T)>,
}

impl<T> Default for Posted<T> {
    fn default() -> Self {
        Posted { q: VecDeque::new() }
    }
}

impl<T> Posted<T> {
    /// Adds a request; `id` is above every id already held.
    pub(crate) fn insert(&mut self, id: u64, v: T) {
        debug_assert!(self.q.back().is_none_or(|(last, _)| *last < id));
        self.q.push_back((id, v));
    }

    fn find(&self, id: u64) -> Option<usize> {
        match self.q.front() {
            Some((first, _)) if *first == id => Some(0),
            _ => self.q.binary_search_by_key(&id, |(k, _)| *k).ok(),
        }
    }

    pub(crate) fn get(&self, id: &u64) -> Option<&T> {
        let i = self.find(*id)?;
        self.q.get(i).map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut T> {
        let i = self.find(*id)?;
        self.q.get_mut(i).map(|(_, v)| v)
    }

    pub(crate) fn remove(&mut self, id: &u64) -> Option<T> {
        let i = self.find(*id)?;
        self.q.remove(i).map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }
}

/// What [`Core::queue_read`] decided.
pub(crate) enum ReadPosted {
    /// The engine has the Read Request to transmit.
    Queued,
    /// The local sink failed its check: the request completed with
    /// `LocalProtectionError`; the caller closes the queue pair.
    SinkRefused(AccessError),
}

impl Core {
    /// A core around a fresh engine, in state Idle.
    pub(crate) fn new(conn: Connection) -> Self {
        Core {
            conn,
            state: QpState::Idle,
            reason: None,
            recvs: Posted::default(),
            sends: Posted::default(),
            reads: Posted::default(),
            next_id: 0,
            access_err: Cell::new(None),
            inval_err: None,
            local_closed: false,
            finished: false,
            done_send: Vec::new(),
            done_recv: Vec::new(),
        }
    }

    /// Runs the engine against the access table: `f` gets the engine and a
    /// [`MemAccess`] recording failures for the close reason.
    pub(crate) fn with_engine<R>(
        &mut self,
        ctx: &QpCtx,
        f: impl FnOnce(&mut Connection, &mut MemAccess<'_>) -> R,
    ) -> R {
        let Core {
            conn,
            access_err,
            inval_err,
            ..
        } = self;
        let mut mem = MemAccess {
            table: &ctx.table,
            pd: ctx.pd,
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

    pub(crate) fn transition(&mut self, events: &[QpEvent]) {
        for e in events {
            self.state = self.state.on(*e).unwrap_or(QpState::Error);
        }
    }

    /// Turns every pending engine event into completions and state.
    pub(crate) fn pump(&mut self, ctx: &QpCtx) {
        while let Some(ev) = self.conn.poll_event() {
            match ev {
                Event::Ready => {}
                Event::Completion(c) => self.complete(ctx, c),
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

    fn complete(&mut self, ctx: &QpCtx, c: Completion) {
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
                    qp: ctx.qpn,
                    opcode: WcOpcode::Recv,
                    status,
                    byte_len: if ok { c.byte_len } else { 0 },
                    invalidated: c.invalidated,
                    solicited: c.solicited,
                    buf: Some(buf),
                };
                self.done_recv.push(wc);
            }
            WcOpcode::RdmaRead => {
                if let Some(wr_id) = self.reads.remove(&c.wr_id) {
                    self.done_send.push(WorkCompletion::send_side(
                        ctx.qpn, wr_id, c.opcode, c.status, c.byte_len,
                    ));
                }
            }
            _ => {
                if let Some(e) = self.sends.remove(&c.wr_id) {
                    self.done_send.push(WorkCompletion::send_side(
                        ctx.qpn, e.wr_id, c.opcode, c.status, c.byte_len,
                    ));
                }
            }
        }
    }

    /// Ends the connection: records `reason` (unless one is known), moves to
    /// Error and has the engine flush every request still outstanding
    /// ([`Connection::abort`], RFC 5040 §7); send-queue flushes complete in
    /// posting order.
    pub(crate) fn finish(&mut self, ctx: &QpCtx, reason: CloseReason, events: &[QpEvent]) {
        self.pump(ctx);
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
            self.complete(ctx, c);
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Hands a receive buffer to the engine.
    pub(crate) fn post_recv(&mut self, ctx: &QpCtx, wr: RecvWr) -> Result<(), PostError> {
        if !self.state.accepts_recv_work() || self.finished {
            return Err(PostError::InvalidState(self.state));
        }
        if self.recvs.len() >= ctx.attrs.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        let id = self.next_id();
        let cap = wr.buf.capacity();
        self.conn
            .post_recv(id, cap)
            .map_err(|e| engine_error(e, self.state, cap as u64, ctx))?;
        self.recvs.insert(id, (wr.wr_id, wr.buf));
        Ok(())
    }

    /// Checks state, size and depth for send-queue work.
    fn admit(&self, ctx: &QpCtx, len: u64) -> Result<(), PostError> {
        if !self.state.accepts_send_work() || self.finished {
            return Err(PostError::InvalidState(self.state));
        }
        let max = u64::from(ctx.attrs.max_message_size);
        if len > max {
            return Err(PostError::TooLong { len, max });
        }
        if self.sends.len() + self.reads.len() >= ctx.attrs.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        Ok(())
    }

    /// Hands a Send to the engine (RFC 5040 §5.3: Send, Send with
    /// Solicited Event, with Invalidate); nothing is transmitted yet.
    pub(crate) fn queue_send(&mut self, ctx: &QpCtx, wr: SendWr) -> Result<(), PostError> {
        let len = total_len(&wr.data);
        self.admit(ctx, len)?;
        let kind = match (wr.solicited, wr.invalidate) {
            (false, None) => SendKind::Send,
            (false, Some(s)) => SendKind::Invalidate(s),
            (true, None) => SendKind::Solicited,
            (true, Some(s)) => SendKind::SolicitedInvalidate(s),
        };
        let id = self.next_id();
        self.conn
            .post_send(id, kind, len as usize)
            .map_err(|e| engine_error(e, self.state, len, ctx))?;
        let entry = SendEntry {
            wr_id: wr.wr_id,
            data: wr.data,
            file: None,
        };
        self.sends.insert(id, entry);
        Ok(())
    }

    /// Hands an RDMA Write (RFC 5040 §5.1) to the engine.
    pub(crate) fn queue_write(&mut self, ctx: &QpCtx, wr: WriteWr) -> Result<(), PostError> {
        let len = total_len(&wr.data);
        self.admit(ctx, len)?;
        let id = self.next_id();
        self.conn
            .post_write(id, wr.remote_stag, wr.remote_to, len as usize)
            .map_err(|e| engine_error(e, self.state, len, ctx))?;
        let entry = SendEntry {
            wr_id: wr.wr_id,
            data: wr.data,
            file: None,
        };
        self.sends.insert(id, entry);
        Ok(())
    }

    /// Hands an RDMA Write (RFC 5040 §5.1) from a file range to the
    /// engine; the transmit side sends its payload from the file.
    pub(crate) fn queue_write_file(
        &mut self,
        ctx: &QpCtx,
        wr: WriteFileWr,
    ) -> Result<(), PostError> {
        let len = wr.len as u64;
        self.admit(ctx, len)?;
        let id = self.next_id();
        self.conn
            .post_write(id, wr.remote_stag, wr.remote_to, wr.len)
            .map_err(|e| engine_error(e, self.state, len, ctx))?;
        let entry = SendEntry {
            wr_id: wr.wr_id,
            data: Vec::new(),
            file: Some(wr),
        };
        self.sends.insert(id, entry);
        Ok(())
    }

    /// Hands an RDMA Read (RFC 5040 §5.2) to the engine after checking the
    /// local sink (local write right, domain, bounds).
    pub(crate) fn queue_read(&mut self, ctx: &QpCtx, wr: ReadWr) -> Result<ReadPosted, PostError> {
        let len = u64::from(wr.len);
        self.admit(ctx, len)?;
        let sink = TaggedAccess {
            pd: ctx.pd,
            stag: wr.local_stag,
            to: wr.local_to,
            len,
            need: Access::LOCAL_WRITE,
        };
        if let Err(e) = ctx.table.check(sink) {
            let wc = WorkCompletion::send_side(
                ctx.qpn,
                wr.wr_id,
                WcOpcode::RdmaRead,
                WcStatus::LocalProtectionError,
                0,
            );
            self.done_send.push(wc);
            return Ok(ReadPosted::SinkRefused(e));
        }
        let id = self.next_id();
        self.conn
            .post_read(
                id,
                wr.local_stag,
                wr.local_to,
                wr.remote_stag,
                wr.remote_to,
                len,
            )
            .map_err(|e| engine_error(e, self.state, len, ctx))?;
        self.reads.insert(id, wr.wr_id);
        self.pump(ctx);
        Ok(ReadPosted::Queued)
    }
}

#[cfg(test)]
mod tests {
    use super::Posted;

    #[test]
    fn posted_requests_are_found_and_taken_in_any_order() {
        let mut p = Posted::default();
        for id in [2u64, 3, 5, 8, 13] {
            p.insert(id, id * 10);
        }
        assert_eq!(p.len(), 5);
        // The usual case: the oldest completes first.
        assert_eq!(p.remove(&2), Some(20));
        // A lookup and a completion out of order (a flush, a receive
        // looked up by the receive side).
        assert_eq!(p.get(&8), Some(&80));
        if let Some(v) = p.get_mut(&5) {
            *v += 1;
        }
        assert_eq!(p.remove(&5), Some(51));
        assert_eq!(p.remove(&5), None, "taken once");
        assert_eq!(p.get(&4), None, "never posted");
        assert_eq!(p.remove(&99), None);
        assert_eq!(p.len(), 3);
        p.insert(21, 210);
        let left: Vec<u64> = [3u64, 8, 13, 21]
            .iter()
            .map(|id| p.remove(id).unwrap_or(0))
            .collect();
        assert_eq!(left, vec![30, 80, 130, 210]);
        assert_eq!(p.len(), 0);
    }
}
