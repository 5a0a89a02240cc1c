//! The Network Lock Manager, version 4 (RFC 1813 Appendix II, which
//! defines NLM version 4 as the Open Group XNFS NLM protocol with 64-bit
//! offsets and lengths): the byte-range locking side protocol of NFSv3.
//!
//! Every type of the synchronous procedures (NULL, TEST, LOCK, CANCEL,
//! UNLOCK, GRANTED, SHARE, UNSHARE, NM_LOCK, FREE_ALL) with
//! [`xdr::Encode`]/[`xdr::Decode`]; strings and `netobj`s are bounded by
//! [`LM_MAXSTRLEN`] before their bodies are read.

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error};

/// The NLM program number (RFC 1813 Appendix II).
pub const NLM_PROGRAM: u32 = 100_021;
/// NLM version 4, the one paired with NFSv3 (RFC 1813 Appendix II).
pub const NLM_V4: u32 = 4;
/// Longest `caller_name` and `netobj` (RFC 1813 Appendix II,
/// `LM_MAXSTRLEN`; XNFS `MAXNETOBJ_SZ` is the same 1024).
pub const LM_MAXSTRLEN: usize = 1024;
/// Longest host name of `nlm4_notify` (`MAXNAMELEN = LM_MAXSTRLEN + 1`).
pub const MAXNAMELEN: usize = LM_MAXSTRLEN + 1;

/// `netobj` (XNFS NLM): opaque bytes up to [`LM_MAXSTRLEN`].
pub type Netobj = Bounded<Bytes, LM_MAXSTRLEN>;

xdr::open_code! {
    /// NLM version 4 procedure numbers (RFC 1813 Appendix II).
    pub struct Nlm4Proc {
        /// Do nothing.
        NULL = 0,
        /// Would this lock be granted?
        TEST = 1,
        /// Take a lock.
        LOCK = 2,
        /// Cancel a blocked LOCK.
        CANCEL = 3,
        /// Release a lock.
        UNLOCK = 4,
        /// Server to client: a blocked lock is now held.
        GRANTED = 5,
        /// Asynchronous TEST.
        TEST_MSG = 6,
        /// Asynchronous LOCK.
        LOCK_MSG = 7,
        /// Asynchronous CANCEL.
        CANCEL_MSG = 8,
        /// Asynchronous UNLOCK.
        UNLOCK_MSG = 9,
        /// Asynchronous GRANTED.
        GRANTED_MSG = 10,
        /// Result of TEST_MSG.
        TEST_RES = 11,
        /// Result of LOCK_MSG.
        LOCK_RES = 12,
        /// Result of CANCEL_MSG.
        CANCEL_RES = 13,
        /// Result of UNLOCK_MSG.
        UNLOCK_RES = 14,
        /// Result of GRANTED_MSG.
        GRANTED_RES = 15,
        /// DOS-style share reservation.
        SHARE = 20,
        /// Release a share reservation.
        UNSHARE = 21,
        /// LOCK from a host that does not run NSM.
        NM_LOCK = 22,
        /// Release every lock of a host.
        FREE_ALL = 23,
    }
}

xdr::open_code! {
    /// `nlm4_stats` (RFC 1813 Appendix II).
    pub struct Nlm4Stats {
        /// Granted (or no conflict, for TEST).
        NLM4_GRANTED = 0,
        /// Conflicting lock held.
        NLM4_DENIED = 1,
        /// Out of lock resources.
        NLM4_DENIED_NOLOCKS = 2,
        /// Blocked; GRANTED will follow.
        NLM4_BLOCKED = 3,
        /// In the grace period after a restart.
        NLM4_DENIED_GRACE_PERIOD = 4,
        /// Would deadlock.
        NLM4_DEADLCK = 5,
        /// Read-only file system.
        NLM4_ROFS = 6,
        /// Stale file handle.
        NLM4_STALE_FH = 7,
        /// Offset or length too big.
        NLM4_FBIG = 8,
        /// Failed for another reason.
        NLM4_FAILED = 9,
    }
}

xdr_struct! {
    /// `nlm4_lock` (RFC 1813 Appendix II): who locks (host, process
    /// `svid`, owner handle `oh`), which file and which range. A length of
    /// 0 means "to the end of the file and beyond".
    pub struct Nlm4Lock {
        /// The client's host name.
        pub caller_name: Bounded<Bytes, LM_MAXSTRLEN>,
        /// The NFSv3 file handle.
        pub fh: Netobj,
        /// The lock owner.
        pub oh: Netobj,
        /// The owning process.
        pub svid: i32,
        /// First byte.
        pub l_offset: u64,
        /// Bytes (0: to the end).
        pub l_len: u64,
    }
}

xdr_struct! {
    /// `nlm4_holder` (RFC 1813 Appendix II): the lock a TEST conflicts with.
    pub struct Nlm4Holder {
        /// A write (exclusive) lock.
        pub exclusive: bool,
        /// The owning process.
        pub svid: i32,
        /// The lock owner.
        pub oh: Netobj,
        /// First byte.
        pub l_offset: u64,
        /// Bytes (0: to the end).
        pub l_len: u64,
    }
}

xdr_struct! {
    /// `nlm4_testargs` (RFC 1813 Appendix II); also GRANTED's arguments.
    pub struct Nlm4TestArgs {
        /// Echoed in the reply.
        pub cookie: Netobj,
        /// Test for a write lock.
        pub exclusive: bool,
        /// The lock.
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_lockargs` (RFC 1813 Appendix II).
    pub struct Nlm4LockArgs {
        /// Echoed in the reply.
        pub cookie: Netobj,
        /// Wait for a conflicting lock to go (GRANTED callback).
        pub block: bool,
        /// A write lock.
        pub exclusive: bool,
        /// The lock.
        pub alock: Nlm4Lock,
        /// Reclaiming after a server restart.
        pub reclaim: bool,
        /// The client's NSM state number.
        pub state: i32,
    }
}

xdr_struct! {
    /// `nlm4_cancargs` (RFC 1813 Appendix II).
    pub struct Nlm4CancArgs {
        /// Echoed in the reply.
        pub cookie: Netobj,
        /// The LOCK being cancelled was blocking.
        pub block: bool,
        /// A write lock.
        pub exclusive: bool,
        /// The lock.
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_unlockargs` (RFC 1813 Appendix II).
    pub struct Nlm4UnlockArgs {
        /// Echoed in the reply.
        pub cookie: Netobj,
        /// The range to release.
        pub alock: Nlm4Lock,
    }
}

xdr_struct! {
    /// `nlm4_res` (RFC 1813 Appendix II): LOCK, CANCEL, UNLOCK, GRANTED.
    pub struct Nlm4Res {
        /// The call's cookie.
        pub cookie: Netobj,
        /// The outcome.
        pub stat: Nlm4Stats,
    }
}

/// `nlm4_testrply` (RFC 1813 Appendix II): the holder on NLM4_DENIED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nlm4TestReply {
    /// NLM4_DENIED with the conflicting lock.
    Denied(Nlm4Holder),
    /// Any other status, without a body.
    Other(Nlm4Stats),
}

/// RFC 1813 Appendix II `union nlm4_testrply switch (nlm4_stats stat)`.
impl Encode for Nlm4TestReply {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::Denied(h) => {
                Nlm4Stats::NLM4_DENIED.encode(enc);
                h.encode(enc);
            }
            Self::Other(s) => s.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Nlm4TestReply {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match Nlm4Stats::decode(dec)? {
            Nlm4Stats::NLM4_DENIED => Ok(Self::Denied(dec.decode()?)),
            s => Ok(Self::Other(s)),
        }
    }
}

xdr_struct! {
    /// `nlm4_testres` (RFC 1813 Appendix II).
    pub struct Nlm4TestRes {
        /// The call's cookie.
        pub cookie: Netobj,
        /// The outcome.
        pub stat: Nlm4TestReply,
    }
}

xdr_struct! {
    /// `nlm4_share` (RFC 1813 Appendix II): a DOS share reservation.
    pub struct Nlm4Share {
        /// The client's host name.
        pub caller_name: Bounded<Bytes, LM_MAXSTRLEN>,
        /// The NFSv3 file handle.
        pub fh: Netobj,
        /// The owner.
        pub oh: Netobj,
        /// `fsh4_mode`: what others are denied.
        pub mode: u32,
        /// `fsh4_access`: what the owner does.
        pub access: u32,
    }
}

xdr_struct! {
    /// `nlm4_shareargs` (RFC 1813 Appendix II).
    pub struct Nlm4ShareArgs {
        /// Echoed in the reply.
        pub cookie: Netobj,
        /// The reservation.
        pub share: Nlm4Share,
        /// Reclaiming after a server restart.
        pub reclaim: bool,
    }
}

xdr_struct! {
    /// `nlm4_shareres` (RFC 1813 Appendix II).
    pub struct Nlm4ShareRes {
        /// The call's cookie.
        pub cookie: Netobj,
        /// The outcome.
        pub stat: Nlm4Stats,
        /// Unused sequence number.
        pub sequence: i32,
    }
}

xdr_struct! {
    /// `nlm4_notify` (RFC 1813 Appendix II): FREE_ALL's argument.
    pub struct Nlm4Notify {
        /// The host whose locks go.
        pub name: Bounded<Bytes, MAXNAMELEN>,
        /// Its NSM state number.
        pub state: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Nlm4Lock {
        Nlm4Lock {
            caller_name: Bounded(Bytes::from_static(b"client")),
            fh: Bounded(Bytes::from_static(&[1, 2, 3, 4, 5])),
            oh: Bounded(Bytes::from_static(b"owner")),
            svid: -7,
            l_offset: 1 << 40,
            l_len: 0,
        }
    }

    fn round_trip<T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug>(v: T) {
        let wire = xdr::to_bytes(&v);
        assert_eq!(wire.len() % 4, 0);
        assert_eq!(xdr::from_slice::<T>(&wire), Ok(v));
    }

    #[test]
    fn arguments_and_results_round_trip() {
        let cookie: Netobj = Bounded(Bytes::from_static(b"ck"));
        round_trip(Nlm4LockArgs {
            cookie: cookie.clone(),
            block: true,
            exclusive: true,
            alock: lock(),
            reclaim: false,
            state: 3,
        });
        round_trip(Nlm4TestArgs {
            cookie: cookie.clone(),
            exclusive: false,
            alock: lock(),
        });
        round_trip(Nlm4CancArgs {
            cookie: cookie.clone(),
            block: false,
            exclusive: true,
            alock: lock(),
        });
        round_trip(Nlm4UnlockArgs {
            cookie: cookie.clone(),
            alock: lock(),
        });
        round_trip(Nlm4Res {
            cookie: cookie.clone(),
            stat: Nlm4Stats::NLM4_DENIED_NOLOCKS,
        });
        round_trip(Nlm4TestRes {
            cookie: cookie.clone(),
            stat: Nlm4TestReply::Other(Nlm4Stats::NLM4_GRANTED),
        });
        round_trip(Nlm4ShareArgs {
            cookie: cookie.clone(),
            share: Nlm4Share {
                caller_name: Bounded(Bytes::from_static(b"h")),
                fh: Bounded(Bytes::from_static(b"fh")),
                oh: Bounded(Bytes::new()),
                mode: 3,
                access: 1,
            },
            reclaim: true,
        });
        round_trip(Nlm4ShareRes {
            cookie,
            stat: Nlm4Stats::NLM4_FAILED,
            sequence: 0,
        });
        round_trip(Nlm4Notify {
            name: Bounded(Bytes::from_static(b"host")),
            state: 5,
        });
    }

    #[test]
    fn denied_test_reply_carries_the_holder_on_the_wire() {
        let r = Nlm4TestRes {
            cookie: Bounded(Bytes::from_static(b"c")),
            stat: Nlm4TestReply::Denied(Nlm4Holder {
                exclusive: true,
                svid: 9,
                oh: Bounded(Bytes::from_static(b"o")),
                l_offset: 10,
                l_len: 20,
            }),
        };
        let wire = xdr::to_bytes(&r);
        let mut expect = vec![0, 0, 0, 1, b'c', 0, 0, 0];
        expect.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9]);
        expect.extend_from_slice(&[0, 0, 0, 1, b'o', 0, 0, 0]);
        expect.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 20]);
        assert_eq!(&wire[..], &expect[..]);
        assert_eq!(xdr::from_slice::<Nlm4TestRes>(&wire), Ok(r));
    }

    #[test]
    fn oversized_names_are_refused_before_reading_them() {
        let mut wire = vec![0, 0, 0, 0];
        wire.extend_from_slice(&(LM_MAXSTRLEN as u32 + 1).to_be_bytes());
        assert!(xdr::from_slice::<Nlm4UnlockArgs>(&wire).is_err());
        let mut wire = Vec::new();
        wire.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(xdr::from_slice::<Nlm4Notify>(&wire).is_err());
    }
}
