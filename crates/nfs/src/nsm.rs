//! The Network Status Monitor, version 1 (the Open Group XNFS "SM"
//! protocol, program 100024): how NLM peers learn that a host restarted
//! and its locks are gone.
//!
//! Every type of its procedures (SM_NULL, SM_STAT, SM_MON, SM_UNMON,
//! SM_UNMON_ALL, SM_SIMU_CRASH, SM_NOTIFY) with
//! [`xdr::Encode`]/[`xdr::Decode`]; names are bounded by
//! [`SM_MAXSTRLEN`] before their bodies are read.

use bytes::Bytes;
use xdr::{Bounded, FixedOpaque};

/// The NSM program number (XNFS SM).
pub const SM_PROGRAM: u32 = 100_024;
/// The NSM version.
pub const SM_V1: u32 = 1;
/// Longest host name (XNFS `SM_MAXSTRLEN`).
pub const SM_MAXSTRLEN: usize = 1024;

/// A host name.
pub type SmName = Bounded<Bytes, SM_MAXSTRLEN>;

xdr::open_code! {
    /// NSM procedure numbers (XNFS SM).
    pub struct SmProc {
        /// Do nothing.
        SM_NULL = 0,
        /// This host's state number (deprecated; answered anyway).
        SM_STAT = 1,
        /// Start monitoring a host.
        SM_MON = 2,
        /// Stop monitoring a host.
        SM_UNMON = 3,
        /// Stop monitoring every host for a caller.
        SM_UNMON_ALL = 4,
        /// Simulate a crash.
        SM_SIMU_CRASH = 5,
        /// A monitored host restarted.
        SM_NOTIFY = 6,
    }
}

xdr::open_code! {
    /// `res` (XNFS SM).
    pub struct SmRes {
        /// Done.
        STAT_SUCC = 0,
        /// Could not be done.
        STAT_FAIL = 1,
    }
}

xdr_struct! {
    /// `sm_name` (XNFS SM): SM_STAT's argument.
    pub struct SmNameArgs {
        /// The host asked about.
        pub mon_name: SmName,
    }
}

xdr_struct! {
    /// `sm_stat_res` (XNFS SM).
    pub struct SmStatRes {
        /// Outcome.
        pub res_stat: SmRes,
        /// This host's state number (odd while up).
        pub state: i32,
    }
}

xdr_struct! {
    /// `sm_stat` (XNFS SM).
    pub struct SmStat {
        /// This host's state number.
        pub state: i32,
    }
}

xdr_struct! {
    /// `my_id` (XNFS SM): whom to call back, and how.
    pub struct MyId {
        /// The caller's host name.
        pub my_name: SmName,
        /// Program to call.
        pub my_prog: i32,
        /// Its version.
        pub my_vers: i32,
        /// Its procedure.
        pub my_proc: i32,
    }
}

xdr_struct! {
    /// `mon_id` (XNFS SM).
    pub struct MonId {
        /// The host to monitor.
        pub mon_name: SmName,
        /// Who asks.
        pub my_id: MyId,
    }
}

xdr_struct! {
    /// `mon` (XNFS SM): SM_MON's argument.
    pub struct Mon {
        /// What to monitor, for whom.
        pub mon_id: MonId,
        /// Handed back in the callback.
        pub priv_: FixedOpaque<16>,
    }
}

xdr_struct! {
    /// `stat_chge` (XNFS SM): SM_NOTIFY's argument.
    pub struct StatChge {
        /// The host that restarted.
        pub mon_name: SmName,
        /// Its new state number.
        pub state: i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::{Decode, Encode};

    fn round_trip<T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug>(v: T) {
        let wire = xdr::to_bytes(&v);
        assert_eq!(xdr::from_slice::<T>(&wire), Ok(v));
    }

    #[test]
    fn nsm_types_round_trip() {
        let id = MyId {
            my_name: Bounded(Bytes::from_static(b"localhost")),
            my_prog: 100_021,
            my_vers: 4,
            my_proc: 16,
        };
        round_trip(Mon {
            mon_id: MonId {
                mon_name: Bounded(Bytes::from_static(b"client.example")),
                my_id: id.clone(),
            },
            priv_: FixedOpaque([7; 16]),
        });
        round_trip(id);
        round_trip(SmStatRes {
            res_stat: SmRes::STAT_FAIL,
            state: 3,
        });
        round_trip(SmStat { state: 5 });
        round_trip(StatChge {
            mon_name: Bounded(Bytes::from_static(b"h")),
            state: 7,
        });
        round_trip(SmNameArgs {
            mon_name: Bounded(Bytes::new()),
        });
    }

    #[test]
    fn mon_has_the_wire_layout_of_xnfs() {
        let m = Mon {
            mon_id: MonId {
                mon_name: Bounded(Bytes::from_static(b"ab")),
                my_id: MyId {
                    my_name: Bounded(Bytes::from_static(b"c")),
                    my_prog: 1,
                    my_vers: 2,
                    my_proc: 3,
                },
            },
            priv_: FixedOpaque([9; 16]),
        };
        let wire = xdr::to_bytes(&m);
        let mut expect = vec![0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 1, b'c', 0, 0, 0];
        expect.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        expect.extend_from_slice(&[9; 16]);
        assert_eq!(&wire[..], &expect[..]);
    }
}
