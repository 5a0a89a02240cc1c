//! Drives `rpcrdma::endpoint::responder::Responder` with an arbitrary
//! sequence of events read from bytes: messages received (raw, or built
//! from a template so they pass the header decode), calls answered with
//! replies of arbitrary shape, answered with ERR_CHUNK, or dropped.
//! Shared by the `rpcrdma_endpoint` fuzz target and the default-suite
//! test `tests/endpoint_events.rs`.
//!
//! Checked after every event, besides "no panic":
//! - calls outstanding never exceed the credits, and equal the calls and
//!   answers the driver holds (each message is counted once, and only
//!   until it is answered);
//! - every header the responder sends decodes at the requester, carries
//!   the call's XID and grants between 1 and the credits;
//! - a call's Reads stay inside its rebuilt message, add up to its
//!   `read_bytes`, which never exceed the bound;
//! - every RDMA Write of an answer goes inside a segment the call offered.

use bytes::Bytes;
use rpcrdma::endpoint::message::{classify, Kind, Role};
use rpcrdma::endpoint::responder::{Answer, Call, Received, Responder, Settings};
use rpcrdma::wire::v2::{self, ChunkLists2, Flags, Properties, RvReqSup};
use rpcrdma::wire::{v1, ChunkLists, Limits, RdmaSegment, ReadSegment, WriteChunk};
use xdr::{Encoder, XdrBuf};

/// Reads the input a byte at a time; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a.to_vec()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the driver holds for the responder: a call being served or an
/// answer waiting to be posted.
enum Held {
    Call(Call),
    Answer,
}

/// Runs the events in `data`.
pub(crate) fn drive(data: &[u8]) {
    let mut input = Input(data);
    let b = input.u8();
    let credits = u32::from(b % 8) + 1;
    let settings = Settings {
        credits,
        inline_size: 1024 << (b >> 6),
        send_with_invalidate: b & 8 != 0,
        limits: Limits::default(),
        max_version: 1 + u32::from(b & 16 != 0),
        max_read_bytes: 1 << (input.u8() % 24),
        backchannel_credits: u32::from(b & 32 != 0),
    };
    let threshold = 256 + usize::from(input.u8()) * 16;
    let posted = credits + settings.backchannel_credits;
    let mut r = Responder::new(settings, threshold, b & 4 != 0, posted);
    let mut held: Vec<Held> = Vec::new();
    let mut steps = 0;
    while !input.is_empty() && steps < 256 {
        steps += 1;
        match input.u8() % 6 {
            0 => {
                let n = usize::from(input.u8());
                let msg = Bytes::from(input.bytes(n));
                on_received(&mut r, &settings, &mut held, &msg);
            }
            1 | 2 => {
                let msg = template(&mut input);
                on_received(&mut r, &settings, &mut held, &msg);
            }
            3 if !held.is_empty() => {
                let k = usize::from(input.u8()) % held.len();
                if let Held::Call(c) = held.swap_remove(k) {
                    let reply = reply(&mut input);
                    check_answer(&r, &settings, &c, &r.answer(&c, &reply));
                }
                r.on_answered();
            }
            4 if !held.is_empty() => {
                let k = usize::from(input.u8()) % held.len();
                if let Held::Call(c) = held.swap_remove(k) {
                    check_header(&settings, c.xid, &r.bad(&c));
                }
                r.on_answered();
            }
            5 if !held.is_empty() => {
                let k = usize::from(input.u8()) % held.len();
                held.swap_remove(k);
                r.on_answered();
            }
            _ => {}
        }
        assert!(r.in_flight() <= credits);
        assert_eq!(r.in_flight() as usize, held.len());
    }
}

fn on_received(r: &mut Responder, s: &Settings, held: &mut Vec<Held>, msg: &Bytes) {
    let before = r.in_flight();
    match r.on_receive(msg) {
        Received::Answer(h) => {
            // The XID is the message's own when there is one.
            let xid = msg
                .get(..4)
                .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
            check_header(s, xid, &h);
            held.push(Held::Answer);
        }
        Received::TooLarge { answer, total, max } => {
            assert!(total > max);
            assert_eq!(max, s.max_read_bytes);
            let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
            check_header(s, xid, &answer);
            held.push(Held::Answer);
        }
        Received::Call(c) => {
            check_call(s, &c);
            held.push(Held::Call(c));
        }
        Received::OverCredit => assert_eq!(before, s.credits),
        Received::ReverseReply { .. } | Received::Nothing => assert_eq!(r.in_flight(), before),
    }
}

fn check_call(s: &Settings, c: &Call) {
    let Some(plan) = &c.reads else {
        assert!(c.lists.reads.is_empty());
        assert_eq!(c.read_bytes, 0);
        return;
    };
    assert!(u64::from(c.read_bytes) <= s.max_read_bytes);
    let mut sum = 0u64;
    for op in &plan.reads {
        assert!(op.dst + u64::from(op.len) <= plan.layout.len as u64);
        sum += u64::from(op.len);
    }
    assert_eq!(sum, u64::from(c.read_bytes));
}

/// A header the responder sends: decodes at the requester, answers `xid`,
/// grants 1..=credits.
fn check_header(s: &Settings, xid: u32, h: &[u8]) {
    let m = classify(h, &Limits::default(), 2, Role::Requester).expect("answer decodes");
    assert_eq!(m.xid, xid);
    assert!((1..=s.credits).contains(&m.credits), "grant {}", m.credits);
    assert!(matches!(
        m.kind,
        Kind::Reply(_) | Kind::Error(_) | Kind::ConnProp(Ok(_))
    ));
}

fn check_answer(r: &Responder, s: &Settings, c: &Call, a: &Answer) {
    check_header(s, c.xid, &a.header);
    let offered: Vec<&RdmaSegment> = c
        .lists
        .writes
        .iter()
        .chain(c.lists.reply.iter())
        .flat_map(|w| w.segments.iter())
        .collect();
    for w in &a.writes {
        let inside = offered.iter().any(|seg| {
            seg.handle == w.target.handle
                && w.target.offset >= seg.offset
                && w.target.offset + w.data.len() as u64 <= seg.offset + u64::from(seg.length)
        });
        assert!(inside, "write outside the offered segments");
    }
    if a.writes.is_empty() && a.header.len() + a.inline.len() > r.send_threshold() {
        // Only an error header may stand alone beyond the threshold.
        assert!(a.inline.is_empty());
    }
}

/// A reply: some words, maybe a DDP-eligible item, some more words.
fn reply(input: &mut Input<'_>) -> XdrBuf {
    let mut x = XdrBuf::new();
    for _ in 0..input.u8() % 8 {
        x.put_u32(input.u32());
    }
    let n = usize::from(input.u8()) * 64;
    if n > 0 {
        x.put_bulk(Bytes::from(vec![0xab; n]), input.u8() % 2 == 0);
    }
    for _ in 0..input.u8() % 4 {
        x.put_u32(7);
    }
    x
}

fn segment(input: &mut Input<'_>) -> RdmaSegment {
    RdmaSegment {
        handle: u32::from(input.u8()),
        length: u32::from(input.u8()) << (input.u8() % 16),
        offset: u64::from(input.u32()),
    }
}

fn lists(input: &mut Input<'_>, inline_len: usize) -> ChunkLists {
    let mut l = ChunkLists::default();
    for _ in 0..input.u8() % 3 {
        let position = match input.u8() % 3 {
            0 => 0,
            // Often where an item's length word would leave it.
            1 => (inline_len as u32) & !3,
            _ => input.u32() % 4096,
        };
        l.reads.push(ReadSegment {
            position,
            target: segment(input),
        });
    }
    for _ in 0..input.u8() % 3 {
        let n = input.u8() % 3 + 1;
        l.writes.push(WriteChunk {
            segments: (0..n).map(|_| segment(input)).collect(),
        });
    }
    if input.u8() % 2 == 0 {
        l.reply = Some(WriteChunk {
            segments: vec![segment(input)],
        });
    }
    l
}

/// A message that passes the header decode: version 1 or 2, MSG, NOMSG,
/// ERROR, CONNPROP or DONE, with chunk lists and inline bytes from the
/// input.
fn template(input: &mut Input<'_>) -> Bytes {
    let xid = input.u32();
    let credits = u32::from(input.u8());
    let n = usize::from(input.u8());
    let inline = input.bytes(n);
    let inline_len = inline.len();
    let flags = if input.u8() % 2 == 0 {
        Flags::RESPONSE
    } else {
        Flags::default()
    };
    let kind = input.u8() % 8;
    let header = match kind {
        0 | 1 => xdr::to_bytes(&v1::Header {
            xid,
            credits,
            body: if kind == 0 {
                v1::Body::Msg(lists(input, inline_len))
            } else {
                v1::Body::NoMsg(lists(input, inline_len))
            },
        }),
        2 => xdr::to_bytes(&v1::Header::error_reply(xid, credits, v1::ErrorBody::Chunk)),
        3 => xdr::to_bytes(&v1::Header {
            xid,
            credits,
            body: v1::Body::Done,
        }),
        4 | 5 => {
            let c = ChunkLists2 {
                inv_handle: u32::from(input.u8()),
                lists: lists(input, inline_len),
            };
            xdr::to_bytes(&v2::Header {
                xid,
                credits,
                flags,
                body: if kind == 4 {
                    v2::Body::Msg(c)
                } else {
                    v2::Body::NoMsg(c)
                },
            })
        }
        6 => xdr::to_bytes(&v2::Header {
            xid,
            credits,
            flags,
            body: v2::Body::ConnProp(
                Properties {
                    receive_buffer_size: u32::from(input.u8()) << 4,
                    reverse_request_support: RvReqSup(u32::from(input.u8() % 4)),
                }
                .to_propset(),
            ),
        }),
        _ => xdr::to_bytes(&v2::Header::error_reply(
            xid,
            credits,
            v2::ErrorBody::ReplyResource {
                length_needed: input.u32(),
            },
        )),
    };
    let mut m = header.to_vec();
    m.extend_from_slice(&inline);
    Bytes::from(m)
}
