//! MPA connection set-up for both roles (RFC 5044 §7.1, RFC 6581), as
//! typestates: an [`Initiator`] sends the Request and becomes
//! [`AwaitingReply`]; a responder reads the Request into a
//! [`RequestReceived`] and either accepts or rejects it. Both end in an
//! [`Established`] with the negotiated CRC use, IRD/ORD and RTR duty.
//!
//! Markers are never used: a Request asking for them is refused, a Reply
//! turning them on is an error. Frames are read with a bounded
//! [`FrameReader`] (at most 20 + 512 bytes), so a peer cannot make us
//! allocate more.

use crate::wire::mpa::{self, FrameKind, IrdOrd, MpaError, Repr};

/// Errors of the MPA exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NegotiationError {
    /// The frame is malformed.
    #[error("malformed MPA frame: {0}")]
    Frame(#[from] MpaError),
    /// A Reply where a Request was expected, or the reverse.
    #[error("expected an MPA {expected:?}")]
    WrongKind {
        /// The frame kind expected.
        expected: FrameKind,
    },
    /// A revision this side does not speak (RFC 5044 §7.1: 1; RFC 6581: 2).
    #[error("unsupported MPA revision {0}")]
    Revision(u8),
    /// The peer asked for (Request) or turned on (Reply) markers.
    #[error("MPA markers are not supported")]
    Markers,
    /// Our private data does not fit the frame (512 bytes minus the IRD/ORD
    /// words, RFC 5044 §7.1).
    #[error("private data of {0} bytes is too long")]
    PrivateDataTooLong(usize),
    /// The responder's ORD exceeds our IRD (RFC 6581 IRD/ORD negotiation).
    #[error("peer ORD {peer_ord} exceeds our IRD {ird}")]
    OrdExceedsIrd {
        /// The responder's ORD.
        peer_ord: u16,
        /// Our IRD.
        ird: u16,
    },
    /// Peer-to-peer mode without an RTR type both sides support (RFC 6581).
    #[error("no matching RTR message type")]
    NoMatchingRtr,
    /// The Reply contradicts the Request (e.g. peer-to-peer when not asked).
    #[error("MPA Reply inconsistent with the Request: {0}")]
    Inconsistent(&'static str),
}

/// The zero-length message that serves as ready-to-receive (RTR) in
/// peer-to-peer mode, RFC 6581.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// Zero-length Send (consumes a receive at the responder).
    Send,
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read Request.
    Read,
}

/// What each side must do about the RTR message after the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rtr {
    /// No RTR (client-server mode, e.g. Linux NFS/RDMA).
    None,
    /// The initiator must send this RTR as its first FPDU.
    Send(RtrKind),
    /// The responder must receive this RTR before it sends any FPDU.
    Expect(RtrKind),
}

/// The result of a successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// The MPA revision in use.
    pub revision: u8,
    /// CRC32c on FPDUs, RFC 5044 §7.1: used when either side set C.
    pub crc: bool,
    /// Our inbound RDMA Read depth (Read Requests we accept at once).
    pub ird: u16,
    /// Our outbound RDMA Read depth (Read Requests we may have outstanding).
    pub ord: u16,
    /// The RTR duty of this side.
    pub rtr: Rtr,
    /// The peer's upper-layer private data (without IRD/ORD words).
    pub peer_private_data: Vec<u8>,
    /// The peer's frame carried [`mpa::flags::LARGE_FPDU`]: it takes
    /// ULPDUs up to 65535 bytes, beyond what siw sends by default.
    pub peer_large_fpdu: bool,
}

/// Reads one MPA frame from a byte stream, never past its end and never
/// buffering more than 20 + 512 bytes.
#[derive(Debug, Default, Clone)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes still needed before the frame is complete (at least 1 until it is).
    pub fn needed(&self) -> Result<usize, MpaError> {
        if self.buf.len() < mpa::HEADER_LEN {
            return Ok(mpa::HEADER_LEN - self.buf.len());
        }
        let total = self.total()?;
        Ok(total - self.buf.len())
    }

    fn total(&self) -> Result<usize, MpaError> {
        let pd = self
            .buf
            .get(18..20)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
            .unwrap_or(0);
        if pd > mpa::MAX_PRIVATE_DATA {
            return Err(MpaError::PrivateDataTooLong(pd));
        }
        Ok(mpa::HEADER_LEN + pd)
    }

    /// Takes bytes from `input`; returns how many were consumed and, once the
    /// frame is complete, its bytes. A PD_Length over 512 is an error as soon
    /// as the header is in.
    pub fn feed(&mut self, input: &[u8]) -> Result<(usize, Option<Vec<u8>>), MpaError> {
        let mut used = 0;
        loop {
            let need = self.needed()?;
            if need == 0 {
                return Ok((used, Some(core::mem::take(&mut self.buf))));
            }
            let rest = input.get(used..).unwrap_or(&[]);
            if rest.is_empty() {
                return Ok((used, None));
            }
            let n = need.min(rest.len());
            self.buf.extend_from_slice(&rest[..n]);
            used += n;
        }
    }
}

/// Initiator settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitiatorConfig {
    /// Ask for CRC32c on FPDUs.
    pub crc: bool,
    /// Our IRD (14 bits).
    pub ird: u16,
    /// Our ORD (14 bits).
    pub ord: u16,
    /// Ask for peer-to-peer mode offering these RTR types (empty: no P2P).
    pub rtr_offer: Vec<RtrKind>,
    /// Upper-layer private data (e.g. the RFC 8797 message).
    pub private_data: Vec<u8>,
    /// Tell the responder we take large FPDUs ([`mpa::flags::LARGE_FPDU`]).
    pub large_fpdu: bool,
}

/// The reserved flag bits a frame carries to say it takes large FPDUs.
fn large_flag(large: bool, revision: u8) -> u8 {
    if large && revision == 2 {
        mpa::flags::LARGE_FPDU
    } else {
        0
    }
}

/// The initiator before it sent its Request.
#[derive(Debug)]
pub struct Initiator;

impl Initiator {
    /// Builds the revision 2 enhanced MPA Request (RFC 6581) and moves to
    /// [`AwaitingReply`]. The request bytes are to be sent as they are.
    pub fn start(config: InitiatorConfig) -> Result<(AwaitingReply, Vec<u8>), NegotiationError> {
        let max = mpa::MAX_PRIVATE_DATA - mpa::IRD_ORD_LEN;
        if config.private_data.len() > max {
            return Err(NegotiationError::PrivateDataTooLong(
                config.private_data.len(),
            ));
        }
        let p2p = !config.rtr_offer.is_empty();
        let words = IrdOrd {
            ird: config.ird,
            ord: config.ord,
            peer_to_peer: p2p,
            rtr_send: config.rtr_offer.contains(&RtrKind::Send),
            rtr_write: config.rtr_offer.contains(&RtrKind::Write),
            rtr_read: config.rtr_offer.contains(&RtrKind::Read),
        };
        let repr = Repr {
            kind: FrameKind::Request,
            markers: false,
            crc: config.crc,
            reject: false,
            enhanced: true,
            reserved: large_flag(config.large_fpdu, 2),
            revision: 2,
            ird_ord: Some(words),
            private_data: &config.private_data,
        };
        let bytes = repr.to_vec()?;
        Ok((AwaitingReply { config }, bytes))
    }
}

/// The initiator after sending its Request.
#[derive(Debug)]
pub struct AwaitingReply {
    config: InitiatorConfig,
}

/// How the responder answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyOutcome {
    /// Accepted: start FPDU mode.
    Accepted(Established),
    /// Rejected with R=1 (RFC 5044 §7.1), with the peer's private data.
    Rejected {
        /// The revision of the reject.
        revision: u8,
        /// The peer's private data (without IRD/ORD words).
        private_data: Vec<u8>,
    },
}

impl AwaitingReply {
    /// Handles the complete Reply frame (see [`FrameReader`]).
    pub fn handle_reply(self, frame: &[u8]) -> Result<ReplyOutcome, NegotiationError> {
        let (r, _) = Repr::parse_bytes(frame)?;
        if r.kind != FrameKind::Reply {
            return Err(NegotiationError::WrongKind {
                expected: FrameKind::Reply,
            });
        }
        if r.revision == 0 || r.revision > 2 {
            return Err(NegotiationError::Revision(r.revision));
        }
        if r.reject {
            return Ok(ReplyOutcome::Rejected {
                revision: r.revision,
                private_data: r.private_data.to_vec(),
            });
        }
        if r.markers {
            return Err(NegotiationError::Markers);
        }
        let c = &self.config;
        let (ird, ord, rtr) = match r.ird_ord {
            // RFC 6581: our ORD is bounded by the responder's IRD; its ORD
            // must not exceed our IRD.
            Some(w) => {
                if w.ord > c.ird {
                    return Err(NegotiationError::OrdExceedsIrd {
                        peer_ord: w.ord,
                        ird: c.ird,
                    });
                }
                let rtr = if w.peer_to_peer {
                    if c.rtr_offer.is_empty() {
                        return Err(NegotiationError::Inconsistent("peer-to-peer not requested"));
                    }
                    let chosen = [
                        (w.rtr_write, RtrKind::Write),
                        (w.rtr_read, RtrKind::Read),
                        (w.rtr_send, RtrKind::Send),
                    ]
                    .into_iter()
                    .find(|(set, k)| *set && c.rtr_offer.contains(k))
                    .map(|(_, k)| k)
                    .ok_or(NegotiationError::NoMatchingRtr)?;
                    Rtr::Send(chosen)
                } else {
                    Rtr::None
                };
                (c.ird, c.ord.min(w.ird), rtr)
            }
            // Revision 1 (or no words): no IRD/ORD exchange; keep ours.
            None => (c.ird, c.ord, Rtr::None),
        };
        Ok(ReplyOutcome::Accepted(Established {
            revision: r.revision,
            crc: c.crc || r.crc,
            ird,
            ord,
            rtr,
            peer_private_data: r.private_data.to_vec(),
            peer_large_fpdu: r.reserved & mpa::flags::LARGE_FPDU != 0,
        }))
    }
}

/// Responder settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Require CRC even if the initiator did not ask.
    pub crc: bool,
    /// Our largest IRD.
    pub ird: u16,
    /// Our largest ORD.
    pub ord: u16,
    /// RTR types we can receive in peer-to-peer mode (preference: Write,
    /// Read, Send).
    pub rtr_support: Vec<RtrKind>,
    /// Upper-layer private data for the Reply.
    pub private_data: Vec<u8>,
    /// Tell the initiator we take large FPDUs ([`mpa::flags::LARGE_FPDU`]).
    pub large_fpdu: bool,
}

/// A parsed MPA Request waiting for the responder's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestReceived {
    /// The revision asked for (1 or 2).
    pub revision: u8,
    /// C flag.
    pub crc: bool,
    /// M flag.
    pub markers: bool,
    /// The enhanced bit.
    pub enhanced: bool,
    /// The RFC 6581 words, if sent.
    pub ird_ord: Option<IrdOrd>,
    /// The initiator's upper-layer private data.
    pub private_data: Vec<u8>,
    /// The initiator takes large FPDUs ([`mpa::flags::LARGE_FPDU`]).
    pub large_fpdu: bool,
}

impl RequestReceived {
    /// Parses the complete Request frame. Revisions other than 1 and 2 are an
    /// error (Linux siw closes the connection without a Reply for them).
    pub fn parse(frame: &[u8]) -> Result<Self, NegotiationError> {
        let (r, _) = Repr::parse_bytes(frame)?;
        if r.kind != FrameKind::Request {
            return Err(NegotiationError::WrongKind {
                expected: FrameKind::Request,
            });
        }
        if r.revision == 0 || r.revision > 2 {
            return Err(NegotiationError::Revision(r.revision));
        }
        Ok(RequestReceived {
            revision: r.revision,
            crc: r.crc,
            markers: r.markers,
            enhanced: r.enhanced,
            ird_ord: r.ird_ord,
            private_data: r.private_data.to_vec(),
            large_fpdu: r.reserved & mpa::flags::LARGE_FPDU != 0,
        })
    }

    /// Accepts: builds the Reply (same revision; RFC 6581 words when the
    /// Request had them) and the negotiated parameters. A Request with
    /// markers is refused with [`NegotiationError::Markers`]; answer it
    /// with [`RequestReceived::reject`].
    pub fn accept(
        self,
        config: &ResponderConfig,
    ) -> Result<(Vec<u8>, Established), NegotiationError> {
        if self.markers {
            return Err(NegotiationError::Markers);
        }
        let max = mpa::MAX_PRIVATE_DATA - mpa::IRD_ORD_LEN;
        if config.private_data.len() > max {
            return Err(NegotiationError::PrivateDataTooLong(
                config.private_data.len(),
            ));
        }
        let crc = self.crc || config.crc;
        let (words, ird, ord, rtr) = match self.ird_ord {
            Some(w) => {
                // RFC 6581: our IRD need not exceed the initiator's ORD, our
                // ORD must not exceed its IRD (knfsd answers 16/16 to 16/16
                // and 0/128 to 128/0).
                let ird = config.ird.min(w.ord);
                let ord = config.ord.min(w.ird);
                let mut reply = IrdOrd {
                    ird,
                    ord,
                    ..IrdOrd::default()
                };
                let rtr = if w.peer_to_peer {
                    let offered = [
                        (w.rtr_write, RtrKind::Write),
                        (w.rtr_read, RtrKind::Read),
                        (w.rtr_send, RtrKind::Send),
                    ];
                    let chosen = offered
                        .into_iter()
                        .find(|(set, k)| *set && config.rtr_support.contains(k))
                        .map(|(_, k)| k)
                        .ok_or(NegotiationError::NoMatchingRtr)?;
                    reply.peer_to_peer = true;
                    match chosen {
                        RtrKind::Write => reply.rtr_write = true,
                        RtrKind::Read => reply.rtr_read = true,
                        RtrKind::Send => reply.rtr_send = true,
                    }
                    Rtr::Expect(chosen)
                } else {
                    Rtr::None
                };
                (Some(reply), ird, ord, rtr)
            }
            None => (None, config.ird, config.ord, Rtr::None),
        };
        let repr = Repr {
            kind: FrameKind::Reply,
            markers: false,
            crc,
            reject: false,
            enhanced: words.is_some(),
            reserved: large_flag(config.large_fpdu, self.revision),
            revision: self.revision,
            ird_ord: words,
            private_data: &config.private_data,
        };
        let bytes = repr.to_vec()?;
        Ok((
            bytes,
            Established {
                revision: self.revision,
                crc,
                ird,
                ord,
                rtr,
                peer_private_data: self.private_data,
                peer_large_fpdu: self.large_fpdu,
            },
        ))
    }

    /// Rejects: an MPA Reply with R=1, the Request's revision, M cleared, and
    /// zero IRD/ORD words when the Request was enhanced (as Linux siw does).
    pub fn reject(self, private_data: &[u8]) -> Result<Vec<u8>, NegotiationError> {
        let max = mpa::MAX_PRIVATE_DATA - mpa::IRD_ORD_LEN;
        if private_data.len() > max {
            return Err(NegotiationError::PrivateDataTooLong(private_data.len()));
        }
        let words = self.ird_ord.map(|_| IrdOrd::default());
        let repr = Repr {
            kind: FrameKind::Reply,
            markers: false,
            crc: false,
            reject: true,
            enhanced: words.is_some(),
            reserved: 0,
            revision: self.revision,
            ird_ord: words,
            private_data,
        };
        Ok(repr.to_vec()?)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::testutil::hex;

    const RPCRDMA_PD: &str = "f6ab0e1801000303";

    fn initiator(crc: bool) -> InitiatorConfig {
        InitiatorConfig {
            crc,
            ird: 16,
            ord: 16,
            rtr_offer: vec![],
            private_data: hex(RPCRDMA_PD),
            large_fpdu: false,
        }
    }

    fn responder(crc: bool) -> ResponderConfig {
        ResponderConfig {
            crc,
            ird: 16,
            ord: 16,
            rtr_support: vec![RtrKind::Write, RtrKind::Read],
            private_data: hex(RPCRDMA_PD),
            large_fpdu: false,
        }
    }

    #[test]
    fn large_fpdus_are_offered_both_ways_with_siws_bit() {
        // Both sides offer: siw's MPA_RR_FLAG_GSO_EXP bit (0x0800 of the
        // 16-bit flags word) in Request and Reply; each side learns the
        // other's offer.
        let (wait, req) = Initiator::start(InitiatorConfig {
            large_fpdu: true,
            ..initiator(false)
        })
        .unwrap();
        assert_eq!(req[16], 0x18);
        let r = RequestReceived::parse(&req).unwrap();
        assert!(r.large_fpdu);
        let (reply, est_b) = r
            .accept(&ResponderConfig {
                large_fpdu: true,
                ..responder(false)
            })
            .unwrap();
        assert_eq!(reply[16], 0x18);
        assert!(est_b.peer_large_fpdu);
        let ReplyOutcome::Accepted(est_a) = wait.handle_reply(&reply).unwrap() else {
            panic!("not accepted");
        };
        assert!(est_a.peer_large_fpdu);
        // A peer that does not offer (knfsd/siw by default, try_gso off):
        // neither side learns an offer, whatever it offered itself.
        let (wait, req) = Initiator::start(InitiatorConfig {
            large_fpdu: true,
            ..initiator(false)
        })
        .unwrap();
        let (reply, est_b) = RequestReceived::parse(&req)
            .unwrap()
            .accept(&responder(false))
            .unwrap();
        assert_eq!(reply[16], 0x10);
        assert!(est_b.peer_large_fpdu);
        let ReplyOutcome::Accepted(est_a) = wait.handle_reply(&reply).unwrap() else {
            panic!("not accepted");
        };
        assert!(!est_a.peer_large_fpdu);
        let kreq = hex("4d504120494420526571204672616d65 10 02 000c 0080 0000 f6ab0e1801010303");
        let (_, est) = RequestReceived::parse(&kreq)
            .unwrap()
            .accept(&ResponderConfig {
                large_fpdu: true,
                ..responder(false)
            })
            .unwrap();
        assert!(!est.peer_large_fpdu);
    }

    #[test]
    fn builds_the_kpeer_5b_request_bytes() {
        let (_, req) = Initiator::start(initiator(false)).unwrap();
        assert_eq!(
            req,
            hex("4d504120494420526571204672616d65 10 02 000c 0010 0010 f6ab0e1801000303")
        );
        let (_, req) = Initiator::start(initiator(true)).unwrap();
        assert_eq!(req[16], 0x50);
    }

    #[test]
    fn responder_answers_like_knfsd() {
        // kpeer 5b: Request 16/16 gets Reply 16/16 with knfsd's private data.
        let (_, req) = Initiator::start(initiator(false)).unwrap();
        let r = RequestReceived::parse(&req).unwrap();
        let (reply, est) = r.accept(&responder(false)).unwrap();
        assert_eq!(
            reply,
            hex("4d504120494420526570204672616d65 10 02 000c 0010 0010 f6ab0e1801000303")
        );
        assert_eq!(
            (est.ird, est.ord, est.crc, est.rtr),
            (16, 16, false, Rtr::None)
        );
        // The kernel client's Request (IRD 128, ORD 0) gets IRD 0, ORD 16.
        let kreq = hex("4d504120494420526571204672616d65 10 02 000c 0080 0000 f6ab0e1801010303");
        let r = RequestReceived::parse(&kreq).unwrap();
        let (reply, est) = r.accept(&responder(false)).unwrap();
        assert_eq!(&reply[20..24], &[0, 0, 0, 16]);
        assert_eq!((est.ird, est.ord), (0, 16));
        assert_eq!(est.peer_private_data, hex("f6ab0e1801010303"));
    }

    #[test]
    fn initiator_accepts_knfsd_reply() {
        let (wait, _) = Initiator::start(initiator(false)).unwrap();
        let reply = hex("4d504120494420526570204672616d65 10 02 000c 0010 0010 f6ab0e1801000303");
        let ReplyOutcome::Accepted(est) = wait.handle_reply(&reply).unwrap() else {
            panic!("not accepted");
        };
        assert_eq!(
            est,
            Established {
                revision: 2,
                crc: false,
                ird: 16,
                ord: 16,
                rtr: Rtr::None,
                peer_private_data: hex(RPCRDMA_PD),
                peer_large_fpdu: false,
            }
        );
    }

    #[test]
    fn uses_crc_when_either_side_asks() {
        for (ic, rc) in [(false, false), (true, false), (false, true), (true, true)] {
            let (wait, req) = Initiator::start(initiator(ic)).unwrap();
            let (reply, est_r) = RequestReceived::parse(&req)
                .unwrap()
                .accept(&responder(rc))
                .unwrap();
            let ReplyOutcome::Accepted(est_i) = wait.handle_reply(&reply).unwrap() else {
                panic!("rejected");
            };
            assert_eq!(est_r.crc, ic || rc);
            assert_eq!(est_i.crc, ic || rc);
        }
    }

    #[test]
    fn refuses_markers_with_the_siw_reject_bytes() {
        let req = hex("4d504120494420526571204672616d65 90 02 000c 0010 0010 f6ab0e1801000303");
        let r = RequestReceived::parse(&req).unwrap();
        assert_eq!(
            r.clone().accept(&responder(false)),
            Err(NegotiationError::Markers)
        );
        assert_eq!(
            r.reject(&[]).unwrap(),
            hex("4d504120494420526570204672616d65 30 02 0004 0000 0000")
        );
    }

    #[test]
    fn accepts_revision_1_without_words() {
        let req = hex("4d504120494420526571204672616d65 00 01 0008 f6ab0e1801000303");
        let r = RequestReceived::parse(&req).unwrap();
        let (reply, est) = r.clone().accept(&responder(false)).unwrap();
        assert_eq!(&reply[16..20], &[0, 1, 0, 8]);
        assert_eq!((est.revision, est.ird, est.ord), (1, 16, 16));
        // and rejects it with the bytes siw/knfsd use
        assert_eq!(
            r.reject(&[]).unwrap(),
            hex("4d504120494420526570204672616d65 20 01 0000")
        );
    }

    #[test]
    fn refuses_unknown_revisions() {
        let req = hex("4d504120494420526571204672616d65 00 03 0008 f6ab0e1801000303");
        assert_eq!(
            RequestReceived::parse(&req),
            Err(NegotiationError::Revision(3))
        );
    }

    #[test]
    fn reports_a_rejecting_reply() {
        let (wait, _) = Initiator::start(initiator(false)).unwrap();
        let reply = hex("4d504120494420526570204672616d65 30 02 0004 0000 0000");
        assert_eq!(
            wait.handle_reply(&reply).unwrap(),
            ReplyOutcome::Rejected {
                revision: 2,
                private_data: vec![]
            }
        );
    }

    #[test]
    fn rejects_reply_with_markers_or_wrong_key() {
        let (wait, req) = Initiator::start(initiator(false)).unwrap();
        assert_eq!(
            wait.handle_reply(&req),
            Err(NegotiationError::WrongKind {
                expected: FrameKind::Reply
            })
        );
        let (wait, _) = Initiator::start(initiator(false)).unwrap();
        let reply = hex("4d504120494420526570204672616d65 90 02 0004 0010 0010");
        assert_eq!(wait.handle_reply(&reply), Err(NegotiationError::Markers));
    }

    #[test]
    fn rejects_peer_ord_above_our_ird() {
        let (wait, _) = Initiator::start(initiator(false)).unwrap();
        let reply = hex("4d504120494420526570204672616d65 10 02 0004 0010 0011");
        assert_eq!(
            wait.handle_reply(&reply),
            Err(NegotiationError::OrdExceedsIrd {
                peer_ord: 17,
                ird: 16
            })
        );
    }

    #[test]
    fn negotiates_a_write_rtr_in_peer_to_peer_mode() {
        let mut cfg = initiator(false);
        cfg.rtr_offer = vec![RtrKind::Read, RtrKind::Write];
        let (wait, req) = Initiator::start(cfg).unwrap();
        assert_eq!(&req[20..24], &[0x80, 0x10, 0xc0, 0x10]);
        let (reply, est_r) = RequestReceived::parse(&req)
            .unwrap()
            .accept(&responder(false))
            .unwrap();
        assert_eq!(&reply[20..24], &[0x80, 0x10, 0x80, 0x10]);
        assert_eq!(est_r.rtr, Rtr::Expect(RtrKind::Write));
        let ReplyOutcome::Accepted(est_i) = wait.handle_reply(&reply).unwrap() else {
            panic!("rejected");
        };
        assert_eq!(est_i.rtr, Rtr::Send(RtrKind::Write));
    }

    #[test]
    fn refuses_peer_to_peer_without_a_common_rtr() {
        let mut cfg = initiator(false);
        cfg.rtr_offer = vec![RtrKind::Send];
        let (_, req) = Initiator::start(cfg).unwrap();
        let r = RequestReceived::parse(&req).unwrap();
        assert_eq!(
            r.accept(&responder(false)),
            Err(NegotiationError::NoMatchingRtr)
        );
    }

    #[test]
    fn refuses_private_data_that_does_not_fit() {
        let mut cfg = initiator(false);
        cfg.private_data = vec![0; 509];
        assert_eq!(
            Initiator::start(cfg).err(),
            Some(NegotiationError::PrivateDataTooLong(509))
        );
    }

    #[test]
    fn frame_reader_stops_at_the_frame_end() {
        let mut stream =
            hex("4d504120494420526570204672616d65 10 02 000c 0010 0010 f6ab0e1801000303");
        stream.extend_from_slice(&[0xaa, 0xbb]);
        let mut rd = FrameReader::new();
        let (n, f) = rd.feed(&stream[..7]).unwrap();
        assert_eq!((n, f), (7, None));
        let (n, f) = rd.feed(&stream[7..]).unwrap();
        assert_eq!(n, 25);
        assert_eq!(f.map(|v| v.len()), Some(32));
    }

    #[test]
    fn frame_reader_rejects_oversized_pd_length_before_buffering() {
        let mut h = hex("4d504120494420526570204672616d65 10 02 0201");
        h.extend_from_slice(&[0; 600]);
        let mut rd = FrameReader::new();
        assert_eq!(rd.feed(&h), Err(MpaError::PrivateDataTooLong(513)));
    }
}
