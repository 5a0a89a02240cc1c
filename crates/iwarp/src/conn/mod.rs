//! The sans-IO RDMAP/DDP engine of one established connection
//! (RFC 5040 §5–7, RFC 5041 §5–7), quinn-proto style:
//!
//! - inputs: [`Connection::handle_bytes`] for stream bytes, the `post_*`
//!   methods for work requests;
//! - placement: when a segment carries tagged or Send payload,
//!   `handle_bytes` stops and [`Connection::poll_placement`] says "the next N
//!   stream bytes go to (STag, TO)" or "to receive buffer W at offset O"; the
//!   shell copies (or reads straight from the socket into memory) and calls
//!   [`Connection::placed`], which keeps the CRC;
//! - outputs: [`Connection::poll_transmit`] yields FPDUs in gather form
//!   ([`Transmit`]), [`Connection::poll_event`] yields completions and
//!   Terminate reports.
//!
//! Ordering: Read Response payload is fetched when the response is
//! transmitted, so a Write that arrives after a Read Request of the same
//! bytes may show in the response (a consumer that needs otherwise fences
//! the Write behind the Read's completion; this engine has no fence flag).
//!
//! Remote access is validated through [`RemoteAccess`], which the shell
//! implements over `rnic::MrTable`. A protocol or access error queues a
//! Terminate (RFC 5040 §4.8) as the last FPDU, flushes all work requests
//! and closes the stream.

use std::collections::VecDeque;

mod ahead;
mod close;
mod types;

use rnic::{Access, Stag, WcOpcode, WcStatus, WrId};

use crate::deframe::{Deframer, RxEvent};
use crate::negotiation::{Rtr, RtrKind};
use crate::segment::{PayloadRef, SegmentError, Segmenter, Target, Transmit};
use crate::wire::ddp::{self, Buffer, Repr as DdpRepr};
use crate::wire::fpdu;
use crate::wire::rdmap::{self, Opcode, ReadRequest, QN_READ_REQUEST, QN_SEND};
use crate::wire::terminate::TermError;

pub use ahead::{AheadSegment, ReadAhead, HEAD_LEN as AHEAD_HEAD_LEN};
use types::{ddp_tagged_error, deframe_error, rdmap_protection_error};
pub use types::{
    Completion, Config, ConnError, Event, PlaceTarget, Placement, PostError, RemoteAccess,
    SendKind, DEFAULT_MULPDU,
};

#[derive(Debug)]
struct RecvBuf {
    wr_id: WrId,
    len: usize,
}

#[derive(Debug)]
struct OutRead {
    wr_id: Option<WrId>,
    req: ReadRequest,
    got: u64,
}

#[derive(Debug)]
enum Job {
    /// A Send or Write work request (or an RTR when `wr_id` is None).
    Message {
        wr_id: Option<WrId>,
        opcode: WcOpcode,
        seg: Segmenter,
        total: usize,
    },
    /// A Read Response to an inbound Read Request.
    ReadResponse {
        seg: Segmenter,
        source: Stag,
        source_to: u64,
    },
    /// A single FPDU with inline body (Read Request, Terminate).
    Single(Transmit),
}

/// What the current inbound segment is doing.
#[derive(Debug, Clone, Copy)]
enum Rx {
    /// Between segments or in a trailer.
    Idle,
    /// Payload to be placed by the shell.
    Place { target: PlaceTarget, left: usize },
    /// Payload buffered here (Read Request or Terminate body).
    Inline,
    /// A zero-length RTR message being skipped.
    Skip,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Open,
    Closed,
}

/// One established iWARP stream.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    state: State,
    deframer: Deframer,
    rx: Rx,
    header: Option<DdpRepr>,
    /// Payload length of the current (or last) inbound segment.
    seg_len: usize,
    inline: Vec<u8>,
    /// Expected MSN per untagged queue (RFC 5041 §5.1: starts at 1).
    msn_in: [u32; 3],
    /// Next MSN per untagged queue.
    msn_out: [u32; 3],
    recvs: VecDeque<RecvBuf>,
    /// The receive consumed by the Send in progress: (buffer, bytes so far).
    cur_recv: Option<(RecvBuf, usize)>,
    out_reads: VecDeque<OutRead>,
    pending_reads: VecDeque<(WrId, ReadRequest)>,
    in_reads: usize,
    jobs: VecDeque<Job>,
    events: VecDeque<Event>,
    awaiting_rtr: Option<RtrKind>,
    /// Payload length of the peer's last Read Response segment that was
    /// not the last of its response (0: none yet), for [`Connection::read_ahead`].
    rr_seg: usize,
}

impl Connection {
    /// A connection in FPDU mode. An initiator with an RTR duty queues the
    /// zero-length RTR message first (RFC 6581); a responder expecting one
    /// sends nothing until it arrives.
    pub fn new(cfg: Config) -> Self {
        let mut c = Connection {
            deframer: Deframer::new(cfg.crc, cfg.max_rx_ulpdu),
            state: State::Open,
            rx: Rx::Idle,
            header: None,
            seg_len: 0,
            inline: Vec::new(),
            msn_in: [1; 3],
            msn_out: [1; 3],
            recvs: VecDeque::new(),
            cur_recv: None,
            out_reads: VecDeque::new(),
            pending_reads: VecDeque::new(),
            in_reads: 0,
            jobs: VecDeque::new(),
            events: VecDeque::new(),
            awaiting_rtr: None,
            rr_seg: 0,
            cfg,
        };
        match c.cfg.rtr {
            Rtr::None => c.events.push_back(Event::Ready),
            Rtr::Send(kind) => {
                c.queue_rtr(kind);
                c.events.push_back(Event::Ready);
            }
            Rtr::Expect(kind) => c.awaiting_rtr = Some(kind),
        }
        c
    }

    fn queue_rtr(&mut self, kind: RtrKind) {
        let job = match kind {
            RtrKind::Write => Segmenter::new(
                Opcode::Write,
                Target::Tagged { stag: 0, to: 0 },
                0,
                self.cfg.mulpdu,
            ),
            RtrKind::Send => {
                let msn = self.next_msn(QN_SEND);
                let t = Target::Untagged {
                    qn: QN_SEND,
                    msn,
                    inv_stag: 0,
                };
                Segmenter::new(Opcode::Send, t, 0, self.cfg.mulpdu)
            }
            RtrKind::Read => {
                self.send_read(None, ReadRequest::default());
                return;
            }
        };
        if let Ok(seg) = job {
            self.jobs.push_back(Job::Message {
                wr_id: None,
                opcode: WcOpcode::RdmaWrite,
                seg,
                total: 0,
            });
        }
    }

    fn next_msn(&mut self, qn: u32) -> u32 {
        let slot = &mut self.msn_out[qn as usize];
        let m = *slot;
        *slot = slot.wrapping_add(1);
        m
    }

    /// Whether the stream is still open.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Read Requests we have outstanding (at most ORD).
    pub fn outstanding_reads(&self) -> usize {
        self.out_reads.len()
    }

    /// Posts a receive buffer of `len` bytes for incoming Sends.
    pub fn post_recv(&mut self, wr_id: WrId, len: usize) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::Closed);
        }
        if u32::try_from(len).is_err() {
            return Err(PostError::TooLong(len as u64));
        }
        self.recvs.push_back(RecvBuf { wr_id, len });
        Ok(())
    }

    /// Posts a Send of `len` bytes (RFC 5040 §5.3) on queue 0.
    pub fn post_send(&mut self, wr_id: WrId, kind: SendKind, len: usize) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::Closed);
        }
        let (opcode, inv) = match kind {
            SendKind::Send => (Opcode::Send, 0),
            SendKind::Invalidate(s) => (Opcode::SendInvalidate, s.0),
            SendKind::Solicited => (Opcode::SendSolicited, 0),
            SendKind::SolicitedInvalidate(s) => (Opcode::SendSolicitedInvalidate, s.0),
        };
        let msn = self.msn_out[QN_SEND as usize];
        let t = Target::Untagged {
            qn: QN_SEND,
            msn,
            inv_stag: inv,
        };
        let seg = Segmenter::new(opcode, t, len, self.cfg.mulpdu)?;
        self.next_msn(QN_SEND);
        self.jobs.push_back(Job::Message {
            wr_id: Some(wr_id),
            opcode: WcOpcode::Send,
            seg,
            total: len,
        });
        Ok(())
    }

    /// Posts an RDMA Write of `len` bytes to the peer's (`stag`, `to`),
    /// RFC 5040 §5.1.
    pub fn post_write(
        &mut self,
        wr_id: WrId,
        stag: Stag,
        to: u64,
        len: usize,
    ) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::Closed);
        }
        let seg = Segmenter::new(
            Opcode::Write,
            Target::Tagged { stag: stag.0, to },
            len,
            self.cfg.mulpdu,
        )?;
        self.jobs.push_back(Job::Message {
            wr_id: Some(wr_id),
            opcode: WcOpcode::RdmaWrite,
            seg,
            total: len,
        });
        Ok(())
    }

    /// Posts an RDMA Read of `len` bytes from the peer's (`source`,
    /// `source_to`) into our (`sink`, `sink_to`), RFC 5040 §5.2. At most ORD
    /// Read Requests are outstanding; later ones wait here.
    pub fn post_read(
        &mut self,
        wr_id: WrId,
        sink: Stag,
        sink_to: u64,
        source: Stag,
        source_to: u64,
        len: u64,
    ) -> Result<(), PostError> {
        if !self.is_open() {
            return Err(PostError::Closed);
        }
        let size = u32::try_from(len).map_err(|_| PostError::TooLong(len))?;
        if sink_to.checked_add(len).is_none() || source_to.checked_add(len).is_none() {
            return Err(PostError::Segment(SegmentError::ToWrap));
        }
        let req = ReadRequest {
            sink_stag: sink.0,
            sink_to,
            size,
            source_stag: source.0,
            source_to,
        };
        if self.out_reads.len() < usize::from(self.cfg.ord) {
            self.send_read(Some(wr_id), req);
        } else {
            self.pending_reads.push_back((wr_id, req));
        }
        Ok(())
    }

    fn send_read(&mut self, wr_id: Option<WrId>, req: ReadRequest) {
        let msn = self.next_msn(QN_READ_REQUEST);
        let h = DdpRepr {
            last: true,
            opcode: Opcode::ReadRequest,
            buffer: Buffer::Untagged {
                inv_stag: 0,
                qn: QN_READ_REQUEST,
                msn,
                mo: 0,
            },
        };
        self.jobs.push_back(Job::Single(Transmit::new(
            &h,
            &req.to_bytes(),
            None,
            self.cfg.crc,
        )));
        self.out_reads.push_back(OutRead { wr_id, req, got: 0 });
    }

    /// The next FPDU to send, if any. Nothing is sent while a responder
    /// waits for the RTR.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if self.awaiting_rtr.is_some() && self.state == State::Open {
            return None;
        }
        loop {
            let job = self.jobs.front_mut()?;
            match job {
                Job::Single(_) => {
                    let Some(Job::Single(t)) = self.jobs.pop_front() else {
                        return None;
                    };
                    return Some(t);
                }
                Job::Message {
                    wr_id,
                    opcode,
                    seg,
                    total,
                } => {
                    let Some(s) = seg.next() else {
                        self.jobs.pop_front();
                        continue;
                    };
                    let payload = wr_id.map(|id| PayloadRef::Wr {
                        wr_id: id,
                        offset: s.payload.start,
                        len: s.payload.len(),
                    });
                    let t = Transmit::for_segment(
                        &s.header,
                        payload.unwrap_or(PayloadRef::Wr {
                            wr_id: 0,
                            offset: 0,
                            len: 0,
                        }),
                        self.cfg.crc,
                    );
                    if s.header.last {
                        if let Some(id) = *wr_id {
                            let c = Completion {
                                wr_id: id,
                                opcode: *opcode,
                                status: WcStatus::Success,
                                byte_len: *total as u32,
                                invalidated: None,
                                solicited: false,
                            };
                            self.events.push_back(Event::Completion(c));
                        }
                        self.jobs.pop_front();
                    }
                    return Some(t);
                }
                Job::ReadResponse {
                    seg,
                    source,
                    source_to,
                } => {
                    let (source, source_to) = (*source, *source_to);
                    let Some(s) = seg.next() else {
                        self.jobs.pop_front();
                        continue;
                    };
                    let p = PayloadRef::Region {
                        stag: source.0,
                        to: source_to.wrapping_add(s.payload.start as u64),
                        len: s.payload.len(),
                    };
                    let t = Transmit::for_segment(&s.header, p, self.cfg.crc);
                    if s.header.last {
                        self.in_reads = self.in_reads.saturating_sub(1);
                        self.jobs.pop_front();
                    }
                    return Some(t);
                }
            }
        }
    }

    /// Whether [`Connection::poll_transmit`] has an FPDU to give (so a shell
    /// wakes its transmitter only when there is work).
    pub fn has_transmit(&self) -> bool {
        !self.jobs.is_empty() && (self.awaiting_rtr.is_none() || self.state != State::Open)
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Stream bytes to read next so that payload is never read into a staging
    /// buffer: the rest of a header or trailer, or, while a placement is
    /// pending, its length (read those straight into the target).
    pub fn bytes_wanted(&self) -> usize {
        self.deframer.bytes_wanted()
    }

    /// Whether the stream sits between FPDUs (no partial FPDU taken): a
    /// close of the stream here is an orderly end, elsewhere a loss.
    pub fn at_fpdu_boundary(&self) -> bool {
        self.deframer.at_boundary()
    }

    /// Payload the shell must place before `handle_bytes` continues.
    pub fn poll_placement(&self) -> Option<Placement> {
        match self.rx {
            Rx::Place { target, left } if left > 0 => Some(Placement { target, len: left }),
            _ => None,
        }
    }

    /// Reports `data` placed at the current placement (the next stream bytes,
    /// copied from input or read straight into memory); updates the CRC.
    pub fn placed(&mut self, data: &[u8]) -> Result<(), ConnError> {
        self.placed_inner(data.len(), Some(data))
    }

    fn placed_inner(&mut self, n: usize, data: Option<&[u8]>) -> Result<(), ConnError> {
        let Rx::Place { target, left } = self.rx else {
            return Err(ConnError::Overplaced { got: n, allowed: 0 });
        };
        if n > left {
            return Err(ConnError::Overplaced {
                got: n,
                allowed: left,
            });
        }
        let r = match data {
            Some(d) => self.deframer.placed(d),
            None => self.deframer.placed_unseen(n),
        };
        if let Err(e) = r {
            let tagged = matches!(target, PlaceTarget::Tagged { .. });
            return Err(self.terminate(deframe_error(e, tagged), false));
        }
        let target = match target {
            PlaceTarget::Tagged { stag, to } => PlaceTarget::Tagged {
                stag,
                to: to.wrapping_add(n as u64),
            },
            PlaceTarget::Recv { wr_id, offset } => PlaceTarget::Recv {
                wr_id,
                offset: offset + n,
            },
        };
        self.rx = Rx::Place {
            target,
            left: left - n,
        };
        Ok(())
    }

    /// The rest of the Read Response at the head of the queue, predicted
    /// from the peer's earlier segments (see [`ReadAhead`]): only between
    /// FPDUs, without CRC, and once a Read Response segment that was not
    /// the last of its response has shown the peer's segment length.
    pub fn read_ahead(&self) -> Option<ReadAhead> {
        if !self.is_open() || self.cfg.crc || self.awaiting_rtr.is_some() || self.rr_seg == 0 {
            return None;
        }
        let head = self.out_reads.front()?;
        let (to, pending) = match self.rx {
            Rx::Idle if self.deframer.at_boundary() => (head.req.sink_to.wrapping_add(head.got), 0),
            // Inside a Read Response's payload (the engine checked its
            // header against this Read).
            Rx::Place {
                target: PlaceTarget::Tagged { to, .. },
                left,
            } if left > 0
                && self
                    .header
                    .is_some_and(|h| h.opcode == Opcode::ReadResponse) =>
            {
                (to, left)
            }
            _ => return None,
        };
        // Bytes of the Read placed: `got` counts finished segments, and
        // the one in progress has placed all but `pending` of its own.
        let done = match pending {
            0 => head.got,
            _ => head.got + self.seg_len.saturating_sub(pending) as u64,
        };
        let left = u64::from(head.req.size).checked_sub(done)?;
        (left > 0).then_some(ReadAhead {
            stag: Stag(head.req.sink_stag),
            to,
            left,
            seg: self.rr_seg,
            pending,
            pending_trailer: fpdu::pad_len(ddp::TAGGED_HEADER_LEN + self.seg_len) + fpdu::CRC_LEN,
        })
    }

    /// Reports `n` bytes of the current placement placed without showing
    /// them (read ahead into a Read's sink, [`ReadAhead`]). Without CRC only:
    /// with it the payload must be shown to [`Connection::placed`].
    pub fn placed_unseen(&mut self, n: usize) -> Result<(), ConnError> {
        if self.cfg.crc {
            return Err(ConnError::Overplaced { got: n, allowed: 0 });
        }
        self.placed_inner(n, None)
    }

    /// Consumes stream bytes; returns how many. Stops early when payload is
    /// to be placed (see [`Connection::poll_placement`]).
    pub fn handle_bytes<M: RemoteAccess>(
        &mut self,
        input: &[u8],
        mem: &mut M,
    ) -> Result<usize, ConnError> {
        if !self.is_open() {
            return Err(ConnError::Closed);
        }
        let mut used = 0;
        while used < input.len() {
            if self.poll_placement().is_some() {
                break;
            }
            let rest = &input[used..];
            let (n, ev) = match self.deframer.advance(rest) {
                Ok(x) => x,
                Err(e) => {
                    let tagged = self
                        .deframer
                        .raw_header()
                        .get(2)
                        .is_some_and(|b| b & 0x80 != 0);
                    return Err(self.terminate(deframe_error(e, tagged), true));
                }
            };
            if let Some(RxEvent::Payload { len }) = ev {
                if matches!(self.rx, Rx::Inline) && self.inline.len() < 64 {
                    let keep = len.min(64 - self.inline.len());
                    self.inline.extend_from_slice(&rest[..keep]);
                }
            }
            used += n;
            match ev {
                Some(RxEvent::Segment {
                    header,
                    payload_len,
                }) => self.on_segment(header, payload_len, mem)?,
                Some(RxEvent::End) => self.on_end(mem)?,
                Some(RxEvent::Payload { .. }) | None => {}
            }
        }
        Ok(used)
    }

    fn on_segment<M: RemoteAccess>(
        &mut self,
        h: DdpRepr,
        len: usize,
        mem: &mut M,
    ) -> Result<(), ConnError> {
        self.header = Some(h);
        self.seg_len = len;
        self.inline.clear();
        if let Some(kind) = self.awaiting_rtr {
            let ok = match (kind, h.opcode, h.buffer) {
                (RtrKind::Write, Opcode::Write, _) | (RtrKind::Send, Opcode::Send, _) => len == 0,
                (RtrKind::Read, Opcode::ReadRequest, _) => true,
                _ => false,
            };
            if !ok {
                return Err(self.terminate(TermError::LLP_NO_MATCHING_RTR, true));
            }
            if kind != RtrKind::Read {
                self.rx = Rx::Skip;
                return Ok(());
            }
        }
        match (h.opcode, h.buffer) {
            (Opcode::Write, Buffer::Tagged { stag, to }) => {
                if len > 0 {
                    if let Err(e) = mem.check(Stag(stag), to, len as u64, Access::REMOTE_WRITE) {
                        return Err(self.terminate(ddp_tagged_error(e), true));
                    }
                }
                self.rx = Rx::Place {
                    target: PlaceTarget::Tagged {
                        stag: Stag(stag),
                        to,
                    },
                    left: len,
                };
            }
            (Opcode::ReadResponse, Buffer::Tagged { stag, to }) => {
                let Some(head) = self.out_reads.front() else {
                    return Err(self.terminate(TermError::RDMAP_UNEXPECTED_OPCODE, true));
                };
                let expect_to = head.req.sink_to.wrapping_add(head.got);
                let fits = head.got + len as u64 <= u64::from(head.req.size);
                if stag != head.req.sink_stag || to != expect_to || !fits {
                    return Err(self.terminate(TermError::DDP_BASE_BOUNDS, true));
                }
                if len > 0 {
                    if let Err(e) = mem.check(Stag(stag), to, len as u64, Access::LOCAL_WRITE) {
                        return Err(self.terminate(ddp_tagged_error(e), true));
                    }
                    if !h.last {
                        self.rr_seg = len;
                    }
                }
                self.rx = Rx::Place {
                    target: PlaceTarget::Tagged {
                        stag: Stag(stag),
                        to,
                    },
                    left: len,
                };
            }
            (op, Buffer::Untagged { qn, msn, mo, .. }) => self.on_untagged(op, qn, msn, mo, len)?,
            _ => return Err(self.terminate(TermError::RDMAP_UNEXPECTED_OPCODE, true)),
        }
        Ok(())
    }

    /// Untagged segment checks, RFC 5041 §5.1: the queue of the opcode, the
    /// expected MSN, a contiguous MO, and a posted receive large enough.
    fn on_untagged(
        &mut self,
        op: Opcode,
        qn: u32,
        msn: u32,
        mo: u32,
        len: usize,
    ) -> Result<(), ConnError> {
        if op.queue() != Some(qn) {
            return Err(self.terminate(TermError::DDP_INVALID_QN, true));
        }
        if msn != self.msn_in[qn as usize] {
            return Err(self.terminate(TermError::DDP_MSN_RANGE, true));
        }
        if qn != QN_SEND {
            if op == Opcode::ReadRequest && len != rdmap::READ_REQUEST_LEN {
                return Err(self.terminate(TermError::RDMAP_OP_UNSPECIFIED, true));
            }
            if mo != 0 {
                return Err(self.terminate(TermError::DDP_INVALID_MO, true));
            }
            self.rx = Rx::Inline;
            return Ok(());
        }
        if mo == 0 && self.cur_recv.is_none() {
            match self.recvs.pop_front() {
                Some(r) => self.cur_recv = Some((r, 0)),
                None => return Err(self.terminate(TermError::DDP_NO_BUFFER, true)),
            }
        }
        let Some((buf, got)) = &self.cur_recv else {
            return Err(self.terminate(TermError::DDP_INVALID_MO, true));
        };
        if mo as usize != *got {
            return Err(self.terminate(TermError::DDP_INVALID_MO, true));
        }
        if got + len > buf.len {
            // RFC 5041 §7.2 (DDP untagged "message too long"): the buffer the
            // Send consumed completes with a local length error, the rest of
            // the queue is flushed by the Terminate.
            if let Some((r, _)) = self.cur_recv.take() {
                self.events.push_back(Event::Completion(Completion {
                    wr_id: r.wr_id,
                    opcode: WcOpcode::Recv,
                    status: WcStatus::LocalLengthError,
                    byte_len: 0,
                    invalidated: None,
                    solicited: false,
                }));
            }
            return Err(self.terminate(TermError::DDP_MSG_TOO_LONG, true));
        }
        self.rx = Rx::Place {
            target: PlaceTarget::Recv {
                wr_id: buf.wr_id,
                offset: *got,
            },
            left: len,
        };
        Ok(())
    }

    fn on_end<M: RemoteAccess>(&mut self, mem: &mut M) -> Result<(), ConnError> {
        let rx = core::mem::replace(&mut self.rx, Rx::Idle);
        let Some(h) = self.header else {
            return Ok(());
        };
        if let Some(kind) = self.awaiting_rtr.take() {
            self.events.push_back(Event::Ready);
            if kind != RtrKind::Read {
                if let Buffer::Untagged { qn, .. } = h.buffer {
                    self.msn_in[qn as usize] = self.msn_in[qn as usize].wrapping_add(1);
                }
                return Ok(());
            }
        }
        match (h.opcode, h.buffer) {
            (Opcode::Write, _) => {}
            (Opcode::ReadResponse, _) => {
                let n = match rx {
                    Rx::Place { .. } => self.seg_len,
                    _ => 0,
                };
                if let Some(head) = self.out_reads.front_mut() {
                    head.got += n as u64;
                }
                if h.last {
                    if let Some(done) = self.out_reads.pop_front() {
                        if let Some(id) = done.wr_id {
                            self.events.push_back(Event::Completion(Completion {
                                wr_id: id,
                                opcode: WcOpcode::RdmaRead,
                                status: WcStatus::Success,
                                byte_len: done.req.size,
                                invalidated: None,
                                solicited: false,
                            }));
                        }
                    }
                    if let Some((id, req)) = self.pending_reads.pop_front() {
                        self.send_read(Some(id), req);
                    }
                }
            }
            (op, Buffer::Untagged { qn, inv_stag, .. }) => {
                if h.last {
                    self.msn_in[qn as usize] = self.msn_in[qn as usize].wrapping_add(1);
                }
                match op {
                    Opcode::ReadRequest => self.on_read_request(mem)?,
                    Opcode::Terminate => self.on_terminate(),
                    _ => self.on_send_segment(h, op, inv_stag, mem)?,
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn on_send_segment<M: RemoteAccess>(
        &mut self,
        h: DdpRepr,
        op: Opcode,
        inv_stag: u32,
        mem: &mut M,
    ) -> Result<(), ConnError> {
        let n = self.seg_len;
        if let Some((_, got)) = &mut self.cur_recv {
            *got += n;
        }
        if !h.last {
            return Ok(());
        }
        if self.cur_recv.is_none() {
            return Ok(());
        }
        let mut invalidated = None;
        if op.invalidates() {
            // The receive stays current, so the Terminate flushes it.
            if mem.invalidate(Stag(inv_stag)).is_err() {
                return Err(self.terminate(TermError::RDMAP_CANNOT_INVALIDATE, true));
            }
            invalidated = Some(Stag(inv_stag));
        }
        let Some((buf, got)) = self.cur_recv.take() else {
            return Ok(());
        };
        self.events.push_back(Event::Completion(Completion {
            wr_id: buf.wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            byte_len: got as u32,
            invalidated,
            solicited: op.solicited(),
        }));
        Ok(())
    }

    /// An inbound RDMA Read Request, RFC 5040 §5.2: within IRD (else a
    /// Terminate "no buffer" on queue 1, as Linux siw reports it), source
    /// readable by the peer, then a Read Response is queued.
    fn on_read_request<M: RemoteAccess>(&mut self, mem: &mut M) -> Result<(), ConnError> {
        let Ok(req) = ReadRequest::parse_bytes(&self.inline) else {
            return Err(self.terminate(TermError::RDMAP_OP_UNSPECIFIED, true));
        };
        if self.in_reads >= usize::from(self.cfg.ird) {
            return Err(self.terminate(TermError::DDP_NO_BUFFER, true));
        }
        if req.size > 0 {
            let src = Stag(req.source_stag);
            if let Err(e) = mem.check(src, req.source_to, u64::from(req.size), Access::REMOTE_READ)
            {
                return Err(self.terminate(rdmap_protection_error(e), true));
            }
        }
        let t = Target::Tagged {
            stag: req.sink_stag,
            to: req.sink_to,
        };
        match Segmenter::new(Opcode::ReadResponse, t, req.size as usize, self.cfg.mulpdu) {
            Ok(seg) => {
                self.in_reads += 1;
                self.jobs.push_back(Job::ReadResponse {
                    seg,
                    source: Stag(req.source_stag),
                    source_to: req.source_to,
                });
                Ok(())
            }
            Err(_) => Err(self.terminate(TermError::RDMAP_TO_WRAP, true)),
        }
    }
}
