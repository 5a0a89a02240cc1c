//! The responder's protocol state for one connection, sans IO: credits
//! granted and calls outstanding (RFC 8166 §3.3.1), what the version 2
//! peer said of itself (v2 draft §4.2), and every decision about a
//! received message: answer it at once (an error, the properties), hand
//! it on as a call (with the RDMA Reads that rebuild it), or pass a reply
//! to a reverse-direction call on. The IO shell
//! (`transport::RdmaListener`) posts what it is told and reports back.
//!
//! Events: [`Responder::on_receive`] (a message arrived; its receive
//! buffer was replaced), [`Responder::answer`] / [`Responder::bad`] (the
//! RPC server replied to a call, or its chunks could not be pulled),
//! [`Responder::on_answered`] (a call's answer is about to be posted, or
//! the call was dropped). Actions: [`Received`] and [`Answer`].

use bytes::Bytes;
use xdr::XdrBuf;

use super::encode;
use super::message::{classify, Kind, Message, Role, Rpc};
use super::reads::{plan_reads, read_total, ReadPlan};
use crate::credits::ResponderCredits;
use crate::plan::{plan_reply, Pieces, Version, WritePlan};
use crate::wire::v1::Proc;
use crate::wire::v2::{self, Properties, RvReqSup};
use crate::wire::{ChunkLists, Limits};

/// What the responder is configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Receive buffers posted for calls, hence the largest grant and the
    /// most calls a requester may have outstanding.
    pub credits: u32,
    /// Our inline receive size, advertised in RDMA2_CONNPROP.
    pub inline_size: u32,
    /// Reply with Send With Invalidate when the requester allows it.
    pub send_with_invalidate: bool,
    /// Decode limits for incoming headers.
    pub limits: Limits,
    /// Highest version served (1 or 2).
    pub max_version: u32,
    /// Most bytes one call may ask us to pull by RDMA Read.
    pub max_read_bytes: u64,
    /// Reverse-direction calls we may have outstanding (0: no
    /// backchannel); sets the Reverse Request Support we advertise.
    pub backchannel_credits: u32,
}

/// The protocol state of one connection's responder.
#[derive(Debug, Clone)]
pub struct Responder {
    settings: Settings,
    credits: ResponderCredits,
    /// Calls received and not answered.
    in_flight: u32,
    /// The requester has sent a version 2 header.
    v2: bool,
    /// Inline send threshold; a version 2 peer's Receive Buffer Size may
    /// lower it (v2 draft §4.2.1).
    send_threshold: usize,
    /// The requester's Reverse Request Support (v2 draft §4.2.2): INLINE
    /// until an RDMA2_CONNPROP says otherwise.
    peer_rvreqsup: RvReqSup,
    /// Version 1: the requester's private data allows Send With
    /// Invalidate (RFC 8797 §4).
    peer_send_inv: bool,
}

/// What to do with a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Send this header alone (an RDMA_ERROR, RDMA2_ERROR or the answer
    /// to RDMA2_CONNPROP); the message counts as a call until
    /// [`Responder::on_answered`].
    Answer(Bytes),
    /// Refused with this ERR_CHUNK / RDMA2_ERR_BAD_XDR (counted as a call
    /// like [`Received::Answer`]): it asks us to pull `total` bytes, more
    /// than `max`.
    TooLarge {
        /// The answer.
        answer: Bytes,
        /// Bytes the peer's read chunks add up to.
        total: u64,
        /// The bound.
        max: u64,
    },
    /// A call to pull (when it has read chunks) and hand to the RPC
    /// server, then answer with [`Responder::answer`] or
    /// [`Responder::bad`].
    Call(Call),
    /// A reply to one of our reverse-direction calls (not a call: no
    /// credit is involved).
    ReverseReply {
        /// Its rdma_xid.
        xid: u32,
        /// Its rdma_credits: the requester's backchannel grant.
        credits: u32,
        /// Header length.
        len: usize,
        /// The reply's chunks, or the RDMA2_ERROR.
        reply: Result<Rpc, v2::ErrorBody>,
    },
    /// Nothing to do (an error from the requester, which is never
    /// answered).
    Nothing,
    /// The requester has more calls outstanding than it was ever granted
    /// (RFC 8166 §3.3.1): close the connection.
    OverCredit,
}

/// A call to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Header version, answered in kind.
    pub version: Version,
    /// rdma_xid.
    pub xid: u32,
    /// rdma_credits the requester asked for.
    pub asked: u32,
    /// Its chunk lists.
    pub lists: ChunkLists,
    /// Version 2 rdma_inv_handle.
    pub inv_handle: u32,
    /// The bytes after the header (the RPC message of an RDMA_MSG).
    pub inline: Bytes,
    /// The Reads that rebuild it, `None` when it has no read chunks (the
    /// call is `inline`).
    pub reads: Option<ReadPlan>,
    /// Bytes the Reads pull (at most [`Settings::max_read_bytes`]).
    pub read_bytes: u32,
}

/// The answer to a call: RDMA Writes, then one Send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// RDMA Writes of its write or reply chunks, in order.
    pub writes: Vec<WritePlan>,
    /// Its transport header.
    pub header: Bytes,
    /// What follows the header in the Send, in pieces.
    pub inline: Pieces,
    /// The STag to name in a Send With Invalidate.
    pub invalidate: Option<u32>,
}

impl Responder {
    /// A connection whose negotiated inline send threshold is
    /// `send_threshold` (RFC 8797 §4) and whose requester allows Send
    /// With Invalidate when `peer_send_inv` (RFC 8797 §4), with
    /// `posted` receive buffers posted.
    pub fn new(
        settings: Settings,
        send_threshold: usize,
        peer_send_inv: bool,
        posted: u32,
    ) -> Self {
        let mut credits = ResponderCredits::new(settings.credits);
        credits.on_receives_posted(posted);
        Self {
            settings,
            credits,
            in_flight: 0,
            v2: false,
            send_threshold,
            peer_rvreqsup: RvReqSup::RDMA2_RVREQSUP_INLINE,
            peer_send_inv,
        }
    }

    /// Calls received and not yet answered.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The version reverse-direction calls are sent in: 2 once the
    /// requester has spoken it (v2 draft §3.2).
    pub fn peer_version(&self) -> Version {
        if self.v2 {
            Version::V2
        } else {
            Version::V1
        }
    }

    /// The inline send threshold now.
    pub fn send_threshold(&self) -> usize {
        self.send_threshold
    }

    /// The requester's Reverse Request Support.
    pub fn peer_rvreqsup(&self) -> RvReqSup {
        self.peer_rvreqsup
    }

    /// The grant for a reply to a message that asked for `asked`
    /// (RFC 8166 §3.3.1: never more than the posted receives).
    pub fn grant(&self, asked: u32) -> u32 {
        self.credits.grant(asked)
    }

    /// Event: message `msg` arrived and its receive buffer was replaced
    /// by a fresh one (so every grant is backed by posted receives,
    /// RFC 8166 §3.3.1). Decodes it once and decides.
    pub fn on_receive(&mut self, msg: &Bytes) -> Received {
        self.credits.on_receive();
        self.credits.on_receives_posted(1);
        let max = self.settings.max_version;
        let decoded = classify(msg, &self.settings.limits, max, Role::Responder);
        if let Ok(Message {
            xid,
            credits,
            len,
            kind: Kind::ReverseReply(reply),
            ..
        }) = decoded
        {
            return Received::ReverseReply {
                xid,
                credits,
                len,
                reply,
            };
        }
        // RFC 8166 §3.3.1: "A requester MUST NOT send more RPC Calls than
        // the number of credits granted"; every message not yet answered
        // is one it holds a credit for.
        if self.in_flight >= self.settings.credits.max(1) {
            return Received::OverCredit;
        }
        self.in_flight += 1;
        let r = match decoded {
            Ok(m) => self.on_message(msg, m),
            // RFC 8166 §4.4 / v2 draft §5.3.3: ERR_VERS, ERR_CHUNK or the
            // specific v2 code, if there is an XID to answer.
            Err(e) => encode::encode_decode_error(msg, &e, |c| self.credits.grant(c), max)
                .map_or(Received::Nothing, Received::Answer),
        };
        if r == Received::Nothing {
            self.in_flight -= 1;
        }
        r
    }

    fn on_message(&mut self, msg: &Bytes, m: Message) -> Received {
        let (ver, xid, asked) = (m.version, m.xid, m.credits);
        if ver == Version::V2 {
            self.v2 = true;
        }
        let bad = |s: &Self| encode::encode_bad(ver, xid, s.credits.grant(asked));
        match m.kind {
            Kind::Call(rpc) => self.on_call(msg.slice(m.len..), ver, xid, asked, rpc),
            Kind::Obsolete => Received::Answer(bad(self)),
            Kind::ConnProp(Ok(props)) => {
                // Our send threshold never exceeds the peer's receive
                // buffers (v2 draft §4.2.1); answer with our properties.
                self.send_threshold = self.send_threshold.min(props.receive_buffer_size as usize);
                self.peer_rvreqsup = props.reverse_request_support;
                let ours = Properties {
                    receive_buffer_size: self.settings.inline_size,
                    reverse_request_support: server_level(self.settings.backchannel_credits),
                };
                let h = encode::encode_connprop(xid, self.credits.grant(asked), true, &ours);
                Received::Answer(h)
            }
            // v2 draft §4.1: an ill-typed property value is BAD_XDR.
            Kind::ConnProp(Err(_)) => Received::Answer(bad(self)),
            // Errors from a requester are not answered; replies and
            // reverse calls are classified for a requester only.
            Kind::Error(_) | Kind::Reply(_) | Kind::ReverseCall(_) | Kind::ReverseReply(_) => {
                Received::Nothing
            }
        }
    }

    /// A call: the RPC message is inline (RDMA_MSG) or in read chunks
    /// (RDMA_NOMSG with a Position-Zero Read chunk, or DDP items);
    /// reassembly handles both. The read segment lengths come from the
    /// peer: their sum is checked against the bound before anything is
    /// planned.
    fn on_call(
        &mut self,
        inline: Bytes,
        version: Version,
        xid: u32,
        asked: u32,
        rpc: Rpc,
    ) -> Received {
        let mut call = Call {
            version,
            xid,
            asked,
            lists: rpc.lists,
            inv_handle: rpc.inv_handle,
            inline,
            reads: None,
            read_bytes: 0,
        };
        if call.lists.reads.is_empty() {
            return Received::Call(call);
        }
        let total = read_total(&call.lists.reads);
        let max = self.settings.max_read_bytes;
        let Some(n) = u32::try_from(total).ok().filter(|t| u64::from(*t) <= max) else {
            let answer = self.bad(&call);
            return Received::TooLarge { answer, total, max };
        };
        match plan_reads(&call.inline, &call.lists.reads) {
            Some(plan) => {
                call.reads = Some(plan);
                call.read_bytes = n;
                Received::Call(call)
            }
            // The chunks do not fit the inline stream: ERR_CHUNK.
            None => Received::Answer(self.bad(&call)),
        }
    }

    /// ERR_CHUNK (version 1) or RDMA2_ERR_BAD_XDR (version 2) for `call`:
    /// its chunks could not be pulled.
    pub fn bad(&self, call: &Call) -> Bytes {
        encode::encode_bad(call.version, call.xid, self.credits.grant(call.asked))
    }

    /// Event: the RPC server replied `reply` to `call`. Plans its
    /// conveyance (RFC 8166 §3.5) into the call's write and reply chunks;
    /// a reply that fits none is answered with ERR_CHUNK or the version 2
    /// resource error (v2 draft §5.3.3).
    pub fn answer(&self, call: &Call, reply: &XdrBuf) -> Answer {
        let (ver, xid) = (call.version, call.xid);
        let grant = self.credits.grant(call.asked);
        let plan = match plan_reply(reply, &call.lists, self.send_threshold, ver) {
            Ok(p) => p,
            Err(e) => return Answer::header(encode::encode_plan_error(ver, xid, grant, &e)),
        };
        let nomsg = plan.proc_ == Proc::RDMA_NOMSG;
        let header = encode::encode_rpc(ver, xid, grant, true, nomsg, plan.chunks, 0);
        Answer {
            writes: plan.writes,
            header,
            inline: plan.inline,
            invalidate: self.invalidate(call),
        }
    }

    /// Event: a call's answer is about to be posted, or the call gets
    /// none. Called before the post, so a requester that sends its next
    /// call on receiving the reply always finds the credit free.
    pub fn on_answered(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The STag a reply's Send With Invalidate names
    /// (draft-cel-nfsv4-reminv-design §4.2): in version 2 only the handle
    /// the requester named in rdma_inv_handle (v2 draft §3.3); in version 1
    /// one of the call's STags when the requester's private data allows
    /// it (RFC 8797 §4).
    fn invalidate(&self, call: &Call) -> Option<u32> {
        let chunks = &call.lists;
        match call.version {
            _ if !self.settings.send_with_invalidate => None,
            Version::V2 => (call.inv_handle != 0).then_some(call.inv_handle),
            Version::V1 if self.peer_send_inv => chunks
                .reply
                .iter()
                .chain(chunks.writes.iter())
                .flat_map(|c| c.segments.first())
                .map(|s| s.handle)
                .chain(chunks.reads.first().map(|r| r.target.handle))
                .next(),
            Version::V1 => None,
        }
    }
}

impl Answer {
    /// A transport header alone.
    pub fn header(header: Bytes) -> Self {
        Self {
            writes: Vec::new(),
            header,
            inline: Pieces::default(),
            invalidate: None,
        }
    }
}

/// The Reverse Request Support a responder advertises (v2 draft §4.2.2):
/// GENL when it issues reverse-direction calls (it takes their replies
/// inline or in the reply chunk it provides), NONE otherwise.
pub fn server_level(backchannel_credits: u32) -> RvReqSup {
    if backchannel_credits > 0 {
        RvReqSup::RDMA2_RVREQSUP_GENL
    } else {
        RvReqSup::RDMA2_RVREQSUP_NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::message::ErrorBody;
    use crate::wire::v2::{ChunkLists2, Flags};
    use crate::wire::{v1, RdmaSegment, ReadSegment, WriteChunk};
    use xdr::Encoder;

    fn settings() -> Settings {
        Settings {
            credits: 4,
            inline_size: 4096,
            send_with_invalidate: true,
            limits: Limits::default(),
            max_version: 2,
            max_read_bytes: 1 << 20,
            backchannel_credits: 0,
        }
    }

    fn responder() -> Responder {
        Responder::new(settings(), 4096, true, 4)
    }

    /// An RDMA_MSG call: the header, then an RPC call's XID and msg_type.
    fn v1_call(xid: u32, lists: ChunkLists, rpc: &[u8]) -> Bytes {
        let mut m = xdr::to_bytes(&v1::Header {
            xid,
            credits: 32,
            body: v1::Body::Msg(lists),
        })
        .to_vec();
        m.extend_from_slice(&xid.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        m.extend_from_slice(rpc);
        Bytes::from(m)
    }

    fn v2_msg(flags: Flags, body: v2::Body) -> Bytes {
        xdr::to_bytes(&v2::Header {
            xid: 8,
            credits: 32,
            flags,
            body,
        })
    }

    /// What a requester makes of an answer's header.
    fn seen(h: &[u8]) -> Message {
        classify(h, &Limits::default(), 2, Role::Requester).unwrap()
    }

    fn call(r: Received) -> Call {
        match r {
            Received::Call(c) => c,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn more_calls_than_credits_close_the_connection() {
        let mut r = responder();
        for xid in 0..4 {
            assert!(matches!(
                r.on_receive(&v1_call(xid, ChunkLists::default(), &[])),
                Received::Call(_)
            ));
        }
        assert_eq!(r.in_flight(), 4);
        assert_eq!(
            r.on_receive(&v1_call(9, ChunkLists::default(), &[])),
            Received::OverCredit
        );
        // One answered: the next call is within the grant again.
        r.on_answered();
        assert!(matches!(
            r.on_receive(&v1_call(10, ChunkLists::default(), &[])),
            Received::Call(_)
        ));
    }

    #[test]
    fn inline_call_is_answered_inline_with_a_grant_backed_by_receives() {
        let mut r = responder();
        let c = call(r.on_receive(&v1_call(5, ChunkLists::default(), &[1, 2, 3, 4])));
        assert_eq!((c.xid, c.version, c.reads.clone()), (5, Version::V1, None));
        assert_eq!(&c.inline[8..], &[1, 2, 3, 4]);
        let mut reply = XdrBuf::new();
        reply.put_u32(5);
        reply.put_u32(1);
        let a = r.answer(&c, &reply);
        let m = seen(&a.header);
        assert_eq!((m.xid, m.credits), (5, 4));
        assert!(matches!(m.kind, Kind::Reply(ref rpc) if rpc.lists.is_empty()));
        assert_eq!(&a.inline.to_bytes()[..], &[0, 0, 0, 5, 0, 0, 0, 1]);
        assert!(a.writes.is_empty());
        assert_eq!(a.invalidate, None);
    }

    #[test]
    fn reads_beyond_the_bound_are_refused_before_planning() {
        let mut r = responder();
        let lists = ChunkLists {
            reads: vec![ReadSegment {
                position: 0,
                target: RdmaSegment {
                    handle: 1,
                    length: u32::MAX,
                    offset: 0,
                },
            }],
            ..ChunkLists::default()
        };
        let m = xdr::to_bytes(&v1::Header {
            xid: 3,
            credits: 1,
            body: v1::Body::NoMsg(lists.clone()),
        });
        let Received::TooLarge { answer, total, max } = r.on_receive(&m) else {
            panic!("not refused");
        };
        assert_eq!((total, max), (u64::from(u32::MAX), 1 << 20));
        assert_eq!(
            seen(&answer).kind,
            Kind::Error(ErrorBody::V1(v1::ErrorBody::Chunk))
        );
        // A Position-Zero chunk within the bound is planned.
        let mut small = lists;
        small.reads[0].target.length = 600;
        let m = xdr::to_bytes(&v1::Header {
            xid: 4,
            credits: 1,
            body: v1::Body::NoMsg(small),
        });
        let c = call(r.on_receive(&m));
        assert_eq!(c.read_bytes, 600);
        assert_eq!(c.reads.unwrap().layout.len, 600);
    }

    #[test]
    fn unknown_version_is_answered_err_vers_in_version_1() {
        let mut r = Responder::new(
            Settings {
                max_version: 1,
                ..settings()
            },
            4096,
            true,
            4,
        );
        let m = v2_msg(Flags::default(), v2::Body::Msg(ChunkLists2::default()));
        let Received::Answer(h) = r.on_receive(&m) else {
            panic!("not answered");
        };
        let got = seen(&h);
        assert_eq!(got.version, Version::V1);
        assert_eq!(
            got.kind,
            Kind::Error(ErrorBody::V1(v1::ErrorBody::Vers { low: 1, high: 1 }))
        );
        // Answered messages count as calls until answered.
        assert_eq!(r.in_flight(), 1);
        // An error from the requester is not answered and does not count.
        let e = xdr::to_bytes(&v1::Header::error_reply(1, 1, v1::ErrorBody::Chunk));
        assert_eq!(r.on_receive(&e), Received::Nothing);
        assert_eq!(r.in_flight(), 1);
    }

    #[test]
    fn connprop_lowers_the_threshold_and_is_answered_with_ours() {
        let mut r = Responder::new(
            Settings {
                backchannel_credits: 2,
                ..settings()
            },
            4096,
            true,
            4,
        );
        let props = Properties {
            receive_buffer_size: 1024,
            reverse_request_support: RvReqSup::RDMA2_RVREQSUP_GENL,
        };
        let m = v2_msg(Flags::default(), v2::Body::ConnProp(props.to_propset()));
        let Received::Answer(h) = r.on_receive(&m) else {
            panic!("not answered");
        };
        assert_eq!(r.send_threshold(), 1024);
        assert_eq!(r.peer_rvreqsup(), RvReqSup::RDMA2_RVREQSUP_GENL);
        assert_eq!(r.peer_version(), Version::V2);
        let ours = Properties {
            receive_buffer_size: 4096,
            reverse_request_support: RvReqSup::RDMA2_RVREQSUP_GENL,
        };
        assert_eq!(seen(&h).kind, Kind::ConnProp(Ok(ours)));
    }

    #[test]
    fn reverse_replies_do_not_count_as_calls() {
        let mut r = responder();
        let m = v2_msg(Flags::RESPONSE, v2::Body::Error(v2::ErrorBody::BadXdr));
        assert!(matches!(
            r.on_receive(&m),
            Received::ReverseReply {
                xid: 8,
                reply: Err(_),
                ..
            }
        ));
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn send_with_invalidate_names_the_right_stag() {
        let write = ChunkLists {
            writes: vec![WriteChunk {
                segments: vec![RdmaSegment {
                    handle: 77,
                    length: 100,
                    offset: 0,
                }],
            }],
            ..ChunkLists::default()
        };
        let mut reply = XdrBuf::new();
        reply.put_u32(1);
        // Version 1: the first STag of the call, when the peer allows it.
        let mut r = responder();
        let c = call(r.on_receive(&v1_call(1, write.clone(), &[])));
        assert_eq!(r.answer(&c, &reply).invalidate, Some(77));
        let mut no = Responder::new(settings(), 4096, false, 4);
        let c = call(no.on_receive(&v1_call(1, write.clone(), &[])));
        assert_eq!(no.answer(&c, &reply).invalidate, None);
        // Version 2: only rdma_inv_handle, never zero.
        for (inv, want) in [(55, Some(55)), (0, None)] {
            let m = v2_msg(
                Flags::default(),
                v2::Body::Msg(ChunkLists2 {
                    inv_handle: inv,
                    lists: write.clone(),
                }),
            );
            let mut m = m.to_vec();
            m.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
            let c = call(r.on_receive(&Bytes::from(m)));
            assert_eq!(r.answer(&c, &reply).invalidate, want);
            r.on_answered();
        }
    }
}
