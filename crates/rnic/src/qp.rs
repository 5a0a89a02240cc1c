//! Queue-pair states, their transition table, and queue-pair attributes.

use crate::cq::CompletionQueue;
use crate::wr::RecvWr;

/// State of a reliable-connected queue pair.
///
/// The iWARP verbs states (RDMAC verbs §6.2; Linux `siw_qp_state`). RFC 5040 §7
/// and §8 fix what happens on errors and close: an error terminates the stream
/// with a Terminate message, and outstanding work requests are flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QpState {
    /// Created, not connected. Receives may be posted.
    Idle,
    /// Ready to send: connected, all operations allowed.
    Rts,
    /// A graceful close is under way; no new send-queue work is accepted.
    Closing,
    /// A Terminate was sent or received; the stream is being torn down.
    Terminate,
    /// Final state: the connection is gone and every outstanding request was
    /// flushed. New work requests are refused.
    Error,
}

/// An event that moves a queue pair between states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpEvent {
    /// Connection set-up finished (MPA negotiation done).
    Established,
    /// Connection set-up failed.
    ConnectFailed,
    /// The consumer asked for a disconnect.
    LocalClose,
    /// The peer closed its half of the connection gracefully.
    PeerClose,
    /// The lower-layer connection is fully closed.
    CloseComplete,
    /// This side detected an error and sent a Terminate (RFC 5040 §7.2).
    TerminateSent,
    /// A Terminate message arrived from the peer (RFC 5040 §7.1).
    TerminateReceived,
    /// The lower-layer connection failed (reset, timeout, dropped).
    LlpError,
}

/// A transition the table does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no transition from {from:?} on {event:?}")]
pub struct InvalidTransition {
    /// The state the queue pair was in.
    pub from: QpState,
    /// The event that has no transition from it.
    pub event: QpEvent,
}

impl QpState {
    /// Every state, in declaration order.
    pub const ALL: [QpState; 5] = [
        QpState::Idle,
        QpState::Rts,
        QpState::Closing,
        QpState::Terminate,
        QpState::Error,
    ];

    /// The transition table.
    ///
    /// RFC 5040 §7 and §8: an error moves RTS to Terminate, a close to Closing,
    /// and every path ends in Error, where outstanding work requests are flushed.
    /// Error absorbs late close and failure events.
    pub fn on(self, event: QpEvent) -> Result<QpState, InvalidTransition> {
        use QpEvent as E;
        use QpState as S;
        let next = match (self, event) {
            (S::Idle, E::Established) => S::Rts,
            (S::Idle, E::ConnectFailed | E::LlpError | E::LocalClose) => S::Error,
            (S::Rts, E::LocalClose | E::PeerClose) => S::Closing,
            (S::Rts, E::TerminateSent | E::TerminateReceived) => S::Terminate,
            (S::Rts, E::LlpError | E::CloseComplete) => S::Error,
            (S::Closing, E::LocalClose | E::PeerClose) => S::Closing,
            (S::Closing, E::TerminateSent | E::TerminateReceived) => S::Terminate,
            (S::Closing, E::CloseComplete | E::LlpError) => S::Error,
            (
                S::Terminate,
                E::LocalClose | E::PeerClose | E::TerminateSent | E::TerminateReceived,
            ) => S::Terminate,
            (S::Terminate, E::CloseComplete | E::LlpError) => S::Error,
            (S::Error, E::LocalClose | E::PeerClose | E::CloseComplete | E::LlpError) => S::Error,
            (S::Error, E::TerminateSent | E::TerminateReceived) => S::Error,
            (from, event) => return Err(InvalidTransition { from, event }),
        };
        Ok(next)
    }

    /// Whether send-queue work (Send, RDMA Write, RDMA Read) may be posted.
    pub fn accepts_send_work(self) -> bool {
        self == QpState::Rts
    }

    /// Whether receive buffers may be posted (before and while connected).
    pub fn accepts_recv_work(self) -> bool {
        matches!(self, QpState::Idle | QpState::Rts)
    }
}

/// Attributes of a connected queue pair, fixed at connection set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttrs {
    /// Inbound RDMA Read queue depth: Read Requests from the peer this side
    /// serves concurrently (RFC 5040 §5.2; exchanged in MPA private data by
    /// RFC 6581 §4).
    pub ird: u32,
    /// Outbound RDMA Read queue depth: this side's concurrent RDMA Reads
    /// (RFC 5040 §5.2), at most the peer's IRD (RFC 6581 §4).
    pub ord: u32,
    /// Largest message (Send payload, RDMA Write or Read length) in bytes.
    pub max_message_size: u32,
    /// Send-queue depth: outstanding Send/Write/Read requests at most.
    pub max_send_wr: u32,
    /// Receive-queue depth: posted receive buffers at most.
    pub max_recv_wr: u32,
}

/// What a consumer asks for when connecting or accepting.
#[derive(Debug)]
pub struct QpConfig {
    /// Completion queue for send-queue requests (may be shared).
    pub send_cq: CompletionQueue,
    /// Completion queue for receives (may be the same as `send_cq`).
    pub recv_cq: CompletionQueue,
    /// Send-queue depth.
    pub max_send_wr: u32,
    /// Receive-queue depth.
    pub max_recv_wr: u32,
    /// Inbound RDMA Read depth offered to the peer.
    pub ird: u32,
    /// Outbound RDMA Read depth wanted.
    pub ord: u32,
    /// Receive buffers posted before the connection reaches RTS, so that the
    /// peer's first Send finds one (RFC 8166 §3.3.1 asks receivers to post
    /// before the peer may send).
    pub initial_recvs: Vec<RecvWr>,
    /// Private data for the peer: at most [`MAX_PRIVATE_DATA`] bytes (RFC 5044 §7.1).
    pub private_data: Vec<u8>,
}

impl QpConfig {
    /// A configuration with the given completion queue for both queues, a depth
    /// of 32 for each work queue, IRD and ORD of 8, no initial receives and no
    /// private data.
    pub fn new(cq: CompletionQueue) -> Self {
        QpConfig {
            send_cq: cq.clone(),
            recv_cq: cq,
            max_send_wr: 32,
            max_recv_wr: 32,
            ird: 8,
            ord: 8,
            initial_recvs: Vec::new(),
            private_data: Vec::new(),
        }
    }
}

/// The longest upper-layer private data a connection request, reply or reject
/// carries: RFC 5044 §7.1 allows 512 bytes of MPA private data, of which the
/// RFC 6581 enhanced connection set-up takes 4 for the IRD/ORD words. (Linux
/// `siw` closes the connection on frames with more than 256 bytes of private
/// data; upper layers that talk to it must stay below that.)
pub const MAX_PRIVATE_DATA: usize = 508;

#[cfg(test)]
mod tests {
    use super::*;

    const EVENTS: [QpEvent; 8] = [
        QpEvent::Established,
        QpEvent::ConnectFailed,
        QpEvent::LocalClose,
        QpEvent::PeerClose,
        QpEvent::CloseComplete,
        QpEvent::TerminateSent,
        QpEvent::TerminateReceived,
        QpEvent::LlpError,
    ];

    /// Pins the whole transition table: any change must update this snapshot.
    #[test]
    fn transition_table_matches_snapshot() {
        let mut out = String::new();
        for s in QpState::ALL {
            for e in EVENTS {
                let next = match s.on(e) {
                    Ok(n) => format!("{n:?}"),
                    Err(_) => "-".to_string(),
                };
                out.push_str(&format!("{s:?} {e:?} {next}\n"));
            }
        }
        let expected = "\
Idle Established Rts
Idle ConnectFailed Error
Idle LocalClose Error
Idle PeerClose -
Idle CloseComplete -
Idle TerminateSent -
Idle TerminateReceived -
Idle LlpError Error
Rts Established -
Rts ConnectFailed -
Rts LocalClose Closing
Rts PeerClose Closing
Rts CloseComplete Error
Rts TerminateSent Terminate
Rts TerminateReceived Terminate
Rts LlpError Error
Closing Established -
Closing ConnectFailed -
Closing LocalClose Closing
Closing PeerClose Closing
Closing CloseComplete Error
Closing TerminateSent Terminate
Closing TerminateReceived Terminate
Closing LlpError Error
Terminate Established -
Terminate ConnectFailed -
Terminate LocalClose Terminate
Terminate PeerClose Terminate
Terminate CloseComplete Error
Terminate TerminateSent Terminate
Terminate TerminateReceived Terminate
Terminate LlpError Error
Error Established -
Error ConnectFailed -
Error LocalClose Error
Error PeerClose Error
Error CloseComplete Error
Error TerminateSent Error
Error TerminateReceived Error
Error LlpError Error
";
        assert_eq!(out, expected);
    }

    #[test]
    fn every_path_from_rts_reaches_error() {
        for e in EVENTS {
            let Ok(mut s) = QpState::Rts.on(e) else {
                continue;
            };
            // Closing/Terminate reach Error once the lower layer closes.
            if s != QpState::Error {
                s = s.on(QpEvent::CloseComplete).expect("close completes");
            }
            assert_eq!(s, QpState::Error, "from Rts on {e:?}");
        }
    }

    #[test]
    fn only_rts_accepts_send_work() {
        for s in QpState::ALL {
            assert_eq!(s.accepts_send_work(), s == QpState::Rts);
        }
        assert!(QpState::Idle.accepts_recv_work());
        assert!(!QpState::Error.accepts_recv_work());
    }
}
