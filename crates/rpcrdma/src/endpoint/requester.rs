//! The requester's rules for a reply, sans IO: what a reply (or error)
//! to a call in flight asks of the requester before the call completes —
//! send it again as version 1 (v2 draft §7.2), send it again with larger
//! reply resources (v2 draft §5.3.3), or complete it. The IO shell
//! (`transport::RdmaClient`) keeps the call's registered memory and does
//! what the step says.

use super::message::{ErrorBody, Rpc};
use crate::plan::Version;
use crate::wire::v2;

/// How many times one call is sent again with larger reply resources
/// before its resource error is returned to the caller: one for the write
/// chunk and one for the reply chunk, so a responder that keeps asking
/// for more cannot make the requester loop.
pub const MAX_RESIZES: u8 = 2;

/// A DDP-eligible item the reply may carry: where its data starts in the
/// results, and its largest size (RFC 8166 §3.4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ddp {
    /// Offset of the item's data in the results.
    pub position: usize,
    /// Largest size of the item.
    pub max_len: usize,
}

/// The reply resources a call was sent with (the caller's reply hint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    /// Largest reply, DDP data included.
    pub max_reply_len: usize,
    /// The DDP-eligible item, if any.
    pub ddp: Option<Ddp>,
}

/// A call in flight, as far as the rules need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The version it was last sent with.
    pub version: Version,
    /// The reply resources it offered.
    pub resources: Resources,
    /// Times it was already sent again with larger resources.
    pub resizes: u8,
    /// The call is kept so it can be sent again (version 2 calls).
    pub kept: bool,
}

/// What to do with a call whose reply arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The responder speaks only version 1 (ERR_VERS): send the call again
    /// as version 1, same XID and chunks (v2 draft §7.2).
    FallBack,
    /// RDMA2_ERR_WRITE_RESOURCE / REPLY_RESOURCE: send the call again,
    /// same XID, with these resources (v2 draft §5.3.3).
    Enlarge(Resources),
    /// Fence the call's memory and complete it with the reply, or with
    /// the error.
    Complete,
}

/// The step for a call `sent` whose reply is `reply`: the reply's chunk
/// lists, or the error (`None`: a message of no use as a reply).
pub fn on_reply(reply: &Result<Rpc, Option<ErrorBody>>, sent: &Sent) -> Step {
    let Err(Some(e)) = reply else {
        return Step::Complete;
    };
    if e.refuses_v2() && sent.version == Version::V2 {
        return Step::FallBack;
    }
    match e {
        ErrorBody::V2(e) if sent.kept && sent.resizes < MAX_RESIZES => {
            enlarged(sent.resources, e).map_or(Step::Complete, Step::Enlarge)
        }
        _ => Step::Complete,
    }
}

/// The resources to send a call again with after the responder answered
/// RDMA2_ERR_WRITE_RESOURCE or RDMA2_ERR_REPLY_RESOURCE (v2 draft
/// §5.3.3: "the requester can retry the request with larger resources").
///
/// WRITE_RESOURCE names the 1-based write chunk and the bytes it needed:
/// the DDP item's bound grows to that. REPLY_RESOURCE names the bytes of
/// reply chunk needed: the bound on the rest of the reply grows to that.
/// `None` when the error is not a resource error, names a chunk this
/// requester did not offer, or asks for no more than was offered (a
/// resend would fail the same way).
pub fn enlarged(r: Resources, err: &v2::ErrorBody) -> Option<Resources> {
    let ddp_padded = r.ddp.map_or(0, |d| xdr::padded_len(d.max_len));
    match *err {
        v2::ErrorBody::WriteResource {
            chunk_index,
            length_needed,
        } => {
            // This requester offers at most one write chunk (index 1, or 0
            // when the responder could not say which).
            let d = r.ddp.filter(|_| chunk_index <= 1)?;
            let needed = length_needed as usize;
            if needed <= d.max_len {
                return None;
            }
            let rest = r.max_reply_len.saturating_sub(ddp_padded);
            Some(Resources {
                max_reply_len: rest + xdr::padded_len(needed),
                ddp: Some(Ddp {
                    max_len: needed,
                    ..d
                }),
            })
        }
        v2::ErrorBody::ReplyResource { length_needed } => {
            let needed = length_needed as usize;
            let rest = r.max_reply_len.saturating_sub(ddp_padded);
            if needed <= rest {
                return None;
            }
            Some(Resources {
                max_reply_len: needed + ddp_padded,
                ddp: r.ddp,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::v1;
    use v2::ErrorBody as E2;

    fn res(max_reply_len: usize, ddp: Option<usize>) -> Resources {
        Resources {
            max_reply_len,
            ddp: ddp.map(|max_len| Ddp {
                position: 4,
                max_len,
            }),
        }
    }

    fn sent(version: Version, resizes: u8) -> Sent {
        Sent {
            version,
            resources: res(1100, Some(1000)),
            resizes,
            kept: version == Version::V2,
        }
    }

    fn err2(e: E2) -> Result<Rpc, Option<ErrorBody>> {
        Err(Some(ErrorBody::V2(e)))
    }

    #[test]
    fn err_vers_makes_a_version_2_call_fall_back_once() {
        let vers = Err(Some(ErrorBody::V1(v1::ErrorBody::Vers { low: 1, high: 1 })));
        assert_eq!(on_reply(&vers, &sent(Version::V2, 0)), Step::FallBack);
        // Already version 1: the error completes the call.
        assert_eq!(on_reply(&vers, &sent(Version::V1, 0)), Step::Complete);
        // A range without version 1 is no fallback.
        let v3 = Err(Some(ErrorBody::V2(E2::Vers { low: 3, high: 3 })));
        assert_eq!(on_reply(&v3, &sent(Version::V2, 0)), Step::Complete);
        assert_eq!(
            on_reply(&Ok(Rpc::default()), &sent(Version::V2, 0)),
            Step::Complete
        );
        assert_eq!(on_reply(&Err(None), &sent(Version::V2, 0)), Step::Complete);
    }

    #[test]
    fn resource_errors_enlarge_at_most_max_resizes_times() {
        let e = err2(E2::WriteResource {
            chunk_index: 1,
            length_needed: 5001,
        });
        let Step::Enlarge(r) = on_reply(&e, &sent(Version::V2, 0)) else {
            panic!("not enlarged");
        };
        assert_eq!(r.ddp.unwrap().max_len, 5001);
        assert_eq!(r.ddp.unwrap().position, 4);
        assert_eq!(r.max_reply_len, 100 + 5004);
        assert!(matches!(
            on_reply(&e, &sent(Version::V2, 1)),
            Step::Enlarge(_)
        ));
        assert_eq!(
            on_reply(&e, &sent(Version::V2, MAX_RESIZES)),
            Step::Complete
        );
        // A call not kept cannot be sent again.
        let not_kept = Sent {
            kept: false,
            ..sent(Version::V2, 0)
        };
        assert_eq!(on_reply(&e, &not_kept), Step::Complete);
    }

    #[test]
    fn write_resource_for_an_unoffered_chunk_is_not_retried() {
        let e = E2::WriteResource {
            chunk_index: 2,
            length_needed: 5000,
        };
        assert_eq!(enlarged(res(1100, Some(1000)), &e), None);
        let e1 = E2::WriteResource {
            chunk_index: 1,
            length_needed: 5000,
        };
        assert_eq!(enlarged(res(1100, None), &e1), None);
    }

    #[test]
    fn resource_error_asking_no_more_is_not_retried() {
        let w = E2::WriteResource {
            chunk_index: 1,
            length_needed: 1000,
        };
        assert_eq!(enlarged(res(1100, Some(1000)), &w), None);
        let r = E2::ReplyResource { length_needed: 100 };
        assert_eq!(enlarged(res(1100, Some(1000)), &r), None);
    }

    #[test]
    fn reply_resource_grows_the_reply_bound() {
        let r = E2::ReplyResource {
            length_needed: 9000,
        };
        let g = enlarged(res(1100, Some(1000)), &r).unwrap();
        assert_eq!(g.max_reply_len, 9000 + 1000);
        assert_eq!(g.ddp.unwrap().max_len, 1000);
        let g = enlarged(res(200, None), &r).unwrap();
        assert_eq!(g.max_reply_len, 9000);
    }

    #[test]
    fn other_errors_are_not_retried() {
        for e in [E2::BadXdr, E2::System, E2::InvalHtype] {
            assert_eq!(enlarged(res(1100, Some(1000)), &e), None);
            assert_eq!(on_reply(&err2(e), &sent(Version::V2, 0)), Step::Complete);
        }
    }
}
