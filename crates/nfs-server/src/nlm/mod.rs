//! The NLM version 4 lock manager (RFC 1813 Appendix II; the XNFS NLM
//! protocol) for NFSv3 clients, on the files of an export table.
//!
//! - TEST, LOCK (and NM_LOCK), CANCEL, UNLOCK and FREE_ALL, synchronous,
//!   over every transport the server listens on (TCP). A lock is owned by
//!   (`caller_name`, `svid`, `oh`); the table is [`locks::LockTable`].
//! - Locks exclude NFSv4 byte-range locks on the same file and are
//!   excluded by them ([`crate::v4::V4Locks`]).
//! - A blocking LOCK (`block` set) that conflicts answers NLM4_BLOCKED
//!   and waits ([`blocked`]); once the conflicting lock (NLM or NFSv4)
//!   goes the lock is taken for it and its host gets a GRANTED call
//!   ([`granted`]); CANCEL removes a waiting LOCK.
//! - Reboot recovery ([`restart`]): with a state directory, hosts that
//!   lock are recorded; after a restart they get SM_NOTIFY and a grace
//!   period in which only `reclaim` LOCKs are granted (others, and TEST,
//!   NLM4_DENIED_GRACE_PERIOD); outside it a `reclaim` LOCK answers
//!   NLM4_DENIED_GRACE_PERIOD (as Linux's lockd).
//! - The asynchronous `_MSG`/`_RES` procedures (GRANTED_MSG included:
//!   the server calls GRANTED, synchronous, as Linux's lockd does over
//!   TCP), GRANTED (a client-side procedure) and the DOS share
//!   reservations SHARE/UNSHARE are not served: PROC_UNAVAIL.
//! - NFSv4 delegations: a client holding a delegation caches its locks
//!   without telling the server (RFC 8881 §10.4; Linux's client does), so
//!   TEST and LOCK first recall the delegations they conflict with (any
//!   write delegation; a read one for an exclusive lock) and wait for
//!   their return like an NFSv3 access ([`crate::v4::Delegations`]);
//!   while one is still out they answer NLM4_DENIED_GRACE_PERIOD, which
//!   clients retry (Linux's lockd drops such a call instead, for its
//!   client to resend). The NFSv4 side grants no delegation on a file
//!   with NLM locks (as Linux's nfsd, whose lockd holds the file open).
//! - The file handle is checked like an NFSv3 call's: it must belong to
//!   an export that lists the caller (else NLM4_STALE_FH / NLM4_FAILED)
//!   and name a regular file; an exclusive LOCK on a read-only grant is
//!   NLM4_ROFS.

pub mod blocked;
mod granted;
pub mod locks;
pub mod restart;

use std::ops::RangeInclusive;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use nfs::nlm::*;
use nfs::v3::{Ftype3, NfsFh3, Nfsstat3};
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Bounded, Decoder, XdrBuf};

pub use blocked::BlockedLimits;
pub use granted::RETRY as BLOCKED_RETRY;
pub use locks::{NlmLimits, NlmLocks};
pub use restart::{NlmRecovery, Restart};

use crate::access::{peer_ip, ExportTable};
use crate::storage::Storage;
use crate::v4::{Delegations, V4Locks};
use blocked::Waiter;
use granted::Granter;
use locks::{Owner, Refused, Span};

/// Serves NLM program 100021 version 4.
#[derive(Debug)]
pub struct NlmService<S> {
    table: Arc<ExportTable<S>>,
    locks: NlmLocks,
    v4: Option<V4Locks>,
    delegs: Option<Delegations>,
    rec: Arc<NlmRecovery>,
    /// The rpcbind port of client hosts, for GRANTED (111).
    client_rpcbind_port: u16,
    /// Grants blocked LOCKs; started with the first one.
    granter: OnceLock<Arc<Granter>>,
}

/// A checked file: its handle, the lock table key and whether the grant
/// is read-only.
struct File {
    fh: NfsFh3,
    key: Bytes,
    read_only: bool,
}

fn owner(l: &Nlm4Lock) -> Owner {
    Owner {
        host: l.caller_name.0.clone(),
        svid: l.svid,
        oh: l.oh.0.clone(),
    }
}

fn holder(exclusive: bool, svid: i32, oh: Bytes, span: &Span) -> Nlm4Holder {
    let (l_offset, l_len) = span.offset_len();
    Nlm4Holder {
        exclusive,
        svid,
        oh: Bounded(oh),
        l_offset,
        l_len,
    }
}

fn res(cookie: Netobj, stat: Nlm4Stats) -> XdrBuf {
    xdr::to_xdr_buf(&Nlm4Res { cookie, stat })
}

impl<S: Storage> NlmService<S> {
    /// NLM on the files of `table`, keeping locks in `locks`.
    pub fn new(table: Arc<ExportTable<S>>, locks: NlmLocks) -> Self {
        Self {
            table,
            locks,
            v4: None,
            rec: Arc::new(NlmRecovery::none()),
            delegs: None,
            client_rpcbind_port: 111,
            granter: OnceLock::new(),
        }
    }

    /// The rpcbind port of client hosts, asked for their lock manager when
    /// a blocked LOCK is granted (111; tests use their own).
    pub fn with_client_rpcbind_port(mut self, port: u16) -> Self {
        self.client_rpcbind_port = port;
        self
    }

    /// Queues a blocking LOCK that conflicts (XNFS NLM: NLM4_BLOCKED, a
    /// GRANTED call follows once the lock is taken for it), past the
    /// bounds NLM4_DENIED_NOLOCKS.
    fn block(&self, a: &Nlm4LockArgs, key: &Bytes, span: Span, ctx: &CallContext) -> Nlm4Stats {
        let w = Waiter {
            key: key.clone(),
            owner: owner(&a.alock),
            span,
            cookie: a.cookie.0.clone(),
            alock: a.alock.clone(),
            addr: peer_ip(&ctx.peer),
        };
        if self.locks.table().block(w).is_err() {
            return Nlm4Stats::NLM4_DENIED_NOLOCKS;
        }
        self.granter.get_or_init(|| {
            let g = Arc::new(Granter {
                locks: self.locks.clone(),
                v4: self.v4.clone(),
                rec: Arc::clone(&self.rec),
                rpcbind_port: self.client_rpcbind_port,
            });
            Granter::spawn(&g);
            g
        });
        // The conflicting lock may have gone since the check.
        self.locks.released();
        Nlm4Stats::NLM4_BLOCKED
    }

    /// Makes TEST and LOCK recall the NFSv4 delegations of `delegs` they
    /// conflict with first.
    pub fn with_delegations(mut self, delegs: Delegations) -> Self {
        self.delegs = Some(delegs);
        self
    }

    /// Recalls the delegations on `f` a lock (`exclusive` or not)
    /// conflicts with and waits for their return; `false` while some are
    /// still out (RFC 8881 §10.4.1; the caller answers
    /// NLM4_DENIED_GRACE_PERIOD).
    async fn break_delegations(&self, f: &File, exclusive: bool) -> bool {
        match &self.delegs {
            Some(d) => d.break_for(&f.fh, exclusive).await,
            None => true,
        }
    }

    /// Records locking hosts and keeps the grace period of `rec` (which
    /// NFSv4 LOCK and LOCKT sharing the lock table respect too).
    pub fn with_recovery(mut self, rec: Arc<NlmRecovery>) -> Self {
        self.locks.set_grace_until(rec.grace_until());
        self.rec = rec;
        self
    }

    /// Whether NFSv4 is in its grace period: its clients are reclaiming
    /// locks, so no new NLM lock nor TEST answer (one grace for both
    /// protocols, as Linux's `locks_in_grace`; XNFS NLM crash recovery).
    fn v4_in_grace(&self) -> bool {
        self.v4.as_ref().is_some_and(|v| v.guard().in_grace())
    }

    /// Makes NLM locks respect the NFSv4 locks of `v4` (and, with
    /// [`crate::v4::Nfs4Service::with_nlm_locks`] on the same table, the
    /// other way round).
    pub fn with_v4_locks(mut self, v4: V4Locks) -> Self {
        self.v4 = Some(v4);
        self
    }

    /// The lock table.
    pub fn locks(&self) -> &NlmLocks {
        &self.locks
    }

    /// The export file `fh` names, for this caller.
    async fn file(&self, fh: &Netobj, ctx: &CallContext) -> Result<File, Nlm4Stats> {
        let fh = NfsFh3::new(&fh.0).ok_or(Nlm4Stats::NLM4_STALE_FH)?;
        let export = self
            .table
            .exports()
            .iter()
            .find(|e| e.fs().owns(&fh))
            .ok_or(Nlm4Stats::NLM4_STALE_FH)?;
        let grant = self
            .table
            .admit(export, &ctx.peer, &ctx.credential)
            .map_err(|_| Nlm4Stats::NLM4_FAILED)?;
        match export.fs().getattr(&fh).await {
            Ok(a) if a.ftype == Ftype3::NF3REG => Ok(File {
                key: Bytes::copy_from_slice(fh.as_bytes()),
                fh,
                read_only: grant.read_only,
            }),
            Ok(_) => Err(Nlm4Stats::NLM4_FAILED),
            Err(Nfsstat3::NFS3ERR_STALE | Nfsstat3::NFS3ERR_BADHANDLE) => {
                Err(Nlm4Stats::NLM4_STALE_FH)
            }
            Err(_) => Err(Nlm4Stats::NLM4_FAILED),
        }
    }

    /// The lock of another owner `span` conflicts with, NFSv4's first.
    /// Takes the NFSv4 state lock, then the NLM table's.
    fn conflict(&self, key: &Bytes, who: &Owner, span: &Span) -> Option<Nlm4Holder> {
        let v4 = self.v4.as_ref().map(V4Locks::guard);
        if let Some(h) = v4.as_ref().and_then(|g| g.conflict(key, span)) {
            return Some(holder(h.span.write, 0, h.owner, &h.span));
        }
        let t = self.locks.table();
        t.conflict(key, Some(who), span)
            .map(|h| holder(h.span.write, h.owner.svid, h.owner.oh.clone(), &h.span))
    }

    /// NLMPROC4_TEST (RFC 1813 Appendix II).
    async fn test(&self, a: Nlm4TestArgs, ctx: &CallContext) -> Nlm4TestRes {
        let stat = match self.file(&a.alock.fh, ctx).await {
            Err(s) => Nlm4TestReply::Other(s),
            // XNFS NLM: no test answers until locks are reclaimed.
            Ok(_) if self.rec.in_grace() || self.v4_in_grace() => {
                Nlm4TestReply::Other(Nlm4Stats::NLM4_DENIED_GRACE_PERIOD)
            }
            Ok(f) if !self.break_delegations(&f, a.exclusive).await => {
                Nlm4TestReply::Other(Nlm4Stats::NLM4_DENIED_GRACE_PERIOD)
            }
            Ok(f) => {
                let span = Span::of(a.alock.l_offset, a.alock.l_len, a.exclusive);
                match self.conflict(&f.key, &owner(&a.alock), &span) {
                    Some(h) => Nlm4TestReply::Denied(h),
                    None => Nlm4TestReply::Other(Nlm4Stats::NLM4_GRANTED),
                }
            }
        };
        Nlm4TestRes {
            cookie: a.cookie,
            stat,
        }
    }

    /// NLMPROC4_LOCK and NLMPROC4_NM_LOCK (RFC 1813 Appendix II).
    async fn lock(&self, a: &Nlm4LockArgs, ctx: &CallContext) -> Nlm4Stats {
        // XNFS NLM crash recovery: reclaims only in the grace period after
        // a restart, new locks only after it (and after NFSv4's).
        let refused = match a.reclaim {
            true => !self.rec.in_grace(),
            false => self.rec.in_grace() || self.v4_in_grace(),
        };
        if refused {
            return Nlm4Stats::NLM4_DENIED_GRACE_PERIOD;
        }
        let f = match self.file(&a.alock.fh, ctx).await {
            Ok(f) => f,
            Err(s) => return s,
        };
        if a.exclusive && f.read_only {
            return Nlm4Stats::NLM4_ROFS;
        }
        if !self.break_delegations(&f, a.exclusive).await {
            return Nlm4Stats::NLM4_DENIED_GRACE_PERIOD;
        }
        let span = Span::of(a.alock.l_offset, a.alock.l_len, a.exclusive);
        let v4 = self.v4.as_ref().map(V4Locks::guard);
        // A delegation granted since the recall above: try again later.
        if v4
            .as_ref()
            .is_some_and(|g| g.delegated(&f.key, a.exclusive))
        {
            return Nlm4Stats::NLM4_DENIED_GRACE_PERIOD;
        }
        let r = match v4.as_ref().and_then(|g| g.conflict(&f.key, &span)) {
            Some(_) => Err(Refused::Denied),
            None => {
                let addr = Some(peer_ip(&ctx.peer));
                let mut t = self.locks.table();
                t.lock(&f.key, &owner(&a.alock), span, addr)
            }
        };
        drop(v4);
        match r {
            Ok(()) => {
                self.rec.record(&a.alock.caller_name.0, peer_ip(&ctx.peer));
                Nlm4Stats::NLM4_GRANTED
            }
            Err(Refused::Denied) if a.block => self.block(a, &f.key, span, ctx),
            Err(Refused::Denied) => Nlm4Stats::NLM4_DENIED,
            Err(Refused::NoLocks) => Nlm4Stats::NLM4_DENIED_NOLOCKS,
        }
    }

    /// NLMPROC4_UNLOCK (RFC 1813 Appendix II).
    async fn unlock(&self, a: &Nlm4UnlockArgs, ctx: &CallContext) -> Nlm4Stats {
        match self.file(&a.alock.fh, ctx).await {
            Ok(f) => {
                let span = Span::of(a.alock.l_offset, a.alock.l_len, false);
                self.locks.table().unlock(&f.key, &owner(&a.alock), &span);
                self.locks.released();
                Nlm4Stats::NLM4_GRANTED
            }
            Err(s) => s,
        }
    }

    /// NLMPROC4_CANCEL (RFC 1813 Appendix II; XNFS NLM "NLM_CANCEL"):
    /// the owner's blocked LOCK of that range no longer waits. NLM4_GRANTED
    /// whether one waited or not (as Linux's lockd answers: the client
    /// may cancel a LOCK that was granted meanwhile, and unlocks then).
    async fn cancel(&self, a: &Nlm4CancArgs, ctx: &CallContext) -> Nlm4Stats {
        match self.file(&a.alock.fh, ctx).await {
            Ok(f) => {
                let span = Span::of(a.alock.l_offset, a.alock.l_len, a.exclusive);
                let gone = self
                    .locks
                    .table()
                    .cancel_blocked(&f.key, &owner(&a.alock), &span);
                tracing::debug!(gone, "NLM CANCEL");
                Nlm4Stats::NLM4_GRANTED
            }
            Err(s) => s,
        }
    }

    /// NLMPROC4_FREE_ALL (RFC 1813 Appendix II): the host restarted; its
    /// locks go. Only the locks taken from the caller's address, or any
    /// of that name when the caller is on loopback (a local statd).
    fn free_all(&self, a: &Nlm4Notify, ctx: &CallContext) {
        let freed = self
            .locks
            .table()
            .free_host(&a.name.0, peer_ip(&ctx.peer), false);
        self.locks.released();
        self.rec.forget(&a.name.0);
        // Debug, not info: any client may send FREE_ALL as often as it
        // likes, and an unbounded stream of log lines is a peer-driven cost.
        tracing::debug!(
            host = %String::from_utf8_lossy(&a.name.0),
            peer = %peer_ip(&ctx.peer),
            freed,
            "NLM FREE_ALL"
        );
    }
}

/// RFC 1813 Appendix II, program 100021 version 4.
impl<S: Storage> RpcService for NlmService<S> {
    fn program(&self) -> u32 {
        NLM_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        NLM_V4..=NLM_V4
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut dec = Decoder::from_bytes(&args);
        let out = match Nlm4Proc(ctx.proc_) {
            Nlm4Proc::NULL => XdrBuf::new(),
            Nlm4Proc::TEST => {
                let a: Nlm4TestArgs = dec.decode()?;
                xdr::to_xdr_buf(&self.test(a, &ctx).await)
            }
            Nlm4Proc::LOCK | Nlm4Proc::NM_LOCK => {
                let a: Nlm4LockArgs = dec.decode()?;
                let s = self.lock(&a, &ctx).await;
                res(a.cookie, s)
            }
            Nlm4Proc::CANCEL => {
                let a: Nlm4CancArgs = dec.decode()?;
                let s = self.cancel(&a, &ctx).await;
                res(a.cookie, s)
            }
            Nlm4Proc::UNLOCK => {
                let a: Nlm4UnlockArgs = dec.decode()?;
                let s = self.unlock(&a, &ctx).await;
                res(a.cookie, s)
            }
            Nlm4Proc::FREE_ALL => {
                let a: Nlm4Notify = dec.decode()?;
                self.free_all(&a, &ctx);
                XdrBuf::new()
            }
            _ => return Err(ServiceError::ProcUnavail),
        };
        Ok(out)
    }
}
