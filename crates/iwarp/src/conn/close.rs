//! Ending a stream: sending a Terminate (RFC 5040 §4.8) for a peer error,
//! handling a received one, and flushing every work request.

use std::collections::VecDeque;

use rnic::{WcOpcode, WcStatus, WrId};

use super::{Completion, ConnError, Connection, Event, Job, Rx, State};
use crate::segment::Transmit;
use crate::wire::ddp::{Buffer, Repr as DdpRepr};
use crate::wire::rdmap::{self, Opcode, QN_TERMINATE};
use crate::wire::terminate::{Repr as TerminateRepr, TermError};

impl Connection {
    pub(super) fn on_terminate(&mut self) {
        let error = TerminateRepr::parse(&self.inline)
            .map(|t| t.error)
            .unwrap_or(TermError::RDMAP_OP_UNSPECIFIED);
        self.events.push_back(Event::TerminateReceived(error));
        // Protection errors (RDMAP type 1, DDP tagged type 1) fail the
        // outstanding access; anything else is an operation error.
        let status = if error.etype == 1 {
            WcStatus::RemoteAccessError
        } else {
            WcStatus::RemoteOperationError
        };
        self.close(status);
    }

    /// Queues a Terminate with `error` (copying the offending segment's
    /// headers when `copy` is set, RFC 5040 §4.8), flushes everything and
    /// closes the stream.
    pub(super) fn terminate(&mut self, error: TermError, copy: bool) -> ConnError {
        let raw: Vec<u8> = self.deframer.raw_header().to_vec();
        let rreq = self
            .header
            .filter(|h| h.opcode == Opcode::ReadRequest)
            .and_then(|_| {
                (self.inline.len() == rdmap::READ_REQUEST_LEN).then(|| self.inline.clone())
            });
        let copy = copy && raw.len() >= 2 + crate::wire::ddp::TAGGED_HEADER_LEN;
        let body = TerminateRepr {
            layout: crate::wire::terminate::Layout::Rfc,
            error,
            segment_length_valid: copy,
            segment_length: copy.then(|| u16::from_be_bytes([raw[0], raw[1]])),
            ddp_header: if copy { raw.get(2..) } else { None },
            rdma_header: if copy { rreq.as_deref() } else { None },
        }
        .to_vec()
        .or_else(|_| TerminateRepr::bare(error).to_vec())
        .unwrap_or_default();
        let msn = self.next_msn(QN_TERMINATE);
        let h = DdpRepr {
            last: true,
            opcode: Opcode::Terminate,
            buffer: Buffer::Untagged {
                inv_stag: 0,
                qn: QN_TERMINATE,
                msn,
                mo: 0,
            },
        };
        self.jobs
            .push_back(Job::Single(Transmit::new(&h, &body, None, self.cfg.crc)));
        self.awaiting_rtr = None;
        self.events.push_back(Event::TerminateSent(error));
        self.close(WcStatus::FlushError);
        ConnError::Terminated(error)
    }

    /// Closes the stream from this side without a Terminate (a local
    /// disconnect or a lost connection): every outstanding work request —
    /// RDMA Reads in flight or waiting for ORD, Sends and Writes not yet fully
    /// transmitted, posted receives — completes with `FlushError`, in that
    /// order, as [`Event::Completion`]s (RFC 5040 §6.2: the stream moves to
    /// Error and the queues are flushed). Afterwards nothing is transmitted
    /// and posting fails with `PostError::Closed`. Does nothing on a stream
    /// already closed.
    pub fn abort(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.close(WcStatus::FlushError);
        self.jobs.clear();
        self.awaiting_rtr = None;
    }

    /// Closes the stream: outstanding reads end with `status`, everything
    /// else is flushed.
    pub(super) fn close(&mut self, status: WcStatus) {
        self.state = State::Closed;
        self.rx = Rx::Idle;
        let mut first = true;
        for r in self.out_reads.drain(..) {
            if let Some(id) = r.wr_id {
                let st = if first { status } else { WcStatus::FlushError };
                first = false;
                self.events
                    .push_back(Event::Completion(flushed(id, WcOpcode::RdmaRead, st)));
            }
        }
        for (id, _) in self.pending_reads.drain(..) {
            self.events.push_back(Event::Completion(flushed(
                id,
                WcOpcode::RdmaRead,
                WcStatus::FlushError,
            )));
        }
        let mut keep = VecDeque::new();
        for j in self.jobs.drain(..) {
            match j {
                Job::Message {
                    wr_id: Some(id),
                    opcode,
                    ..
                } => self.events.push_back(Event::Completion(flushed(
                    id,
                    opcode,
                    WcStatus::FlushError,
                ))),
                Job::Single(t)
                    if t.head
                        .get(3)
                        .is_some_and(|b| b & 0x0f == Opcode::Terminate as u8) =>
                {
                    keep.push_back(Job::Single(t));
                }
                _ => {}
            }
        }
        self.jobs = keep;
        if let Some((r, _)) = self.cur_recv.take() {
            self.events.push_back(Event::Completion(flushed(
                r.wr_id,
                WcOpcode::Recv,
                WcStatus::FlushError,
            )));
        }
        for r in self.recvs.drain(..) {
            self.events.push_back(Event::Completion(flushed(
                r.wr_id,
                WcOpcode::Recv,
                WcStatus::FlushError,
            )));
        }
    }
}

fn flushed(wr_id: WrId, opcode: WcOpcode, status: WcStatus) -> Completion {
    Completion {
        wr_id,
        opcode,
        status,
        byte_len: 0,
        invalidated: None,
        solicited: false,
    }
}
