//! A minimal NSM status monitor (XNFS SM, program 100024 version 1) for
//! the NLM service: what a client's lock manager and status monitor need
//! from the server's.
//!
//! - SM_NULL; SM_STAT answers STAT_SUCC with this instance's state
//!   number (odd, from the start time, so it grows across restarts).
//! - SM_MON, SM_UNMON, SM_UNMON_ALL keep the list of monitored hosts,
//!   only for callers on loopback (as Linux's rpc.statd takes them only
//!   from the local lock manager; others get STAT_FAIL), at most
//!   `max` entries (`nsm.monitored` trip and STAT_FAIL past it).
//! - SM_NOTIFY from a client that restarted drops its NLM locks: those
//!   taken from the notifier's address (whatever name they were taken
//!   under), or, from loopback, those of the host named `mon_name`.
//! - SM_SIMU_CRASH is PROC_UNAVAIL. After a restart with a state
//!   directory the state number is the next odd one kept there, and
//!   the server's clients get SM_NOTIFY ([`crate::nlm::restart`]).

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use bytes::Bytes;
use nfs::nsm::*;
use oncrpc::limits::Limit;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, XdrBuf};

use crate::access::peer_ip;
use crate::nlm::NlmLocks;

static MONITORED: Limit = Limit::new("nsm.monitored");

/// Default bound on monitored (host, caller) pairs.
pub const NSM_MAX_MONITORED: usize = 4096;

/// Serves NSM program 100024 version 1.
#[derive(Debug)]
pub struct NsmService {
    locks: NlmLocks,
    /// (monitored host, caller) → the callback to make.
    monitored: Mutex<HashMap<(Bytes, Bytes), MyId>>,
    max: usize,
    state: i32,
    rec: Option<std::sync::Arc<crate::nlm::NlmRecovery>>,
}

/// This instance's NSM state number: odd (up), from the start time.
fn state_number() -> i32 {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    i32::try_from(secs & 0x7fff_fffe).unwrap_or(0) | 1
}

impl NsmService {
    /// NSM for the NLM locks of `locks`, monitoring at most `max` pairs.
    pub fn new(locks: NlmLocks, max: usize) -> Self {
        Self {
            locks,
            monitored: Mutex::new(HashMap::new()),
            max,
            state: state_number(),
            rec: None,
        }
    }

    /// Takes the state number of `restart` and forgets the records of
    /// hosts that notify their restart.
    pub fn with_recovery(
        mut self,
        rec: std::sync::Arc<crate::nlm::NlmRecovery>,
        restart: &crate::nlm::Restart,
    ) -> Self {
        self.state = restart.state;
        self.rec = Some(rec);
        self
    }

    /// This instance's state number.
    pub fn state(&self) -> i32 {
        self.state
    }

    /// How many (host, caller) pairs are monitored.
    pub fn monitored(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<(Bytes, Bytes), MyId>> {
        self.monitored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// SM_MON (XNFS SM).
    fn mon(&self, m: Mon) -> SmRes {
        let mut t = self.table();
        let k = (
            m.mon_id.mon_name.0.clone(),
            m.mon_id.my_id.my_name.0.clone(),
        );
        if !t.contains_key(&k) && t.len() >= self.max {
            MONITORED.trip(format_args!(
                "SM_MON refused (STAT_FAIL): {} hosts monitored",
                self.max
            ));
            return SmRes::STAT_FAIL;
        }
        t.insert(k, m.mon_id.my_id);
        SmRes::STAT_SUCC
    }

    fn sm_stat(&self) -> SmStat {
        SmStat { state: self.state }
    }

    fn stat_res(&self, res_stat: SmRes) -> SmStatRes {
        SmStatRes {
            res_stat,
            state: self.state,
        }
    }
}

/// XNFS SM, program 100024 version 1.
impl RpcService for NsmService {
    fn program(&self) -> u32 {
        SM_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        SM_V1..=SM_V1
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut dec = Decoder::from_bytes(&args);
        let peer = peer_ip(&ctx.peer);
        let local = peer.is_loopback();
        let out = match SmProc(ctx.proc_) {
            SmProc::SM_NULL => XdrBuf::new(),
            SmProc::SM_STAT => {
                let _: SmNameArgs = dec.decode()?;
                xdr::to_xdr_buf(&self.stat_res(SmRes::STAT_SUCC))
            }
            SmProc::SM_MON => {
                let m: Mon = dec.decode()?;
                let r = if local { self.mon(m) } else { SmRes::STAT_FAIL };
                xdr::to_xdr_buf(&self.stat_res(r))
            }
            SmProc::SM_UNMON => {
                let id: MonId = dec.decode()?;
                if local {
                    self.table().remove(&(id.mon_name.0, id.my_id.my_name.0));
                }
                xdr::to_xdr_buf(&self.sm_stat())
            }
            SmProc::SM_UNMON_ALL => {
                let id: MyId = dec.decode()?;
                if local {
                    self.table().retain(|(_, me), _| *me != id.my_name.0);
                }
                xdr::to_xdr_buf(&self.sm_stat())
            }
            SmProc::SM_NOTIFY => {
                let c: StatChge = dec.decode()?;
                let freed = self.locks.table().free_host(&c.mon_name.0, peer, !local);
                self.locks.released();
                if let Some(r) = &self.rec {
                    r.forget(&c.mon_name.0);
                }
                // Debug: any client may send SM_NOTIFY as often as it likes.
                tracing::debug!(
                    host = %String::from_utf8_lossy(&c.mon_name.0),
                    %peer,
                    state = c.state,
                    freed,
                    "SM_NOTIFY: NLM locks of a restarted client dropped"
                );
                XdrBuf::new()
            }
            _ => return Err(ServiceError::ProcUnavail),
        };
        Ok(out)
    }
}
