//! NFSv4.0 COMPOUNDs (RFC 7530): no sessions; the client is named by
//! each operation (a client id, or a stateid whose first eight bytes are
//! its client id) and every such operation renews its lease (§9.6).
//!
//! - Operations: the 4.0 set (3 to 39); any other number, 4.1 and 4.2
//!   operations included, is NFS4ERR_OP_ILLEGAL (RFC 7530 §15.2).
//!   SETCLIENTID, SETCLIENTID_CONFIRM, RENEW, OPEN_CONFIRM and
//!   RELEASE_LOCKOWNER are served here; the rest run as in 4.1.
//! - Open and lock owners ([`super::seqids`]): OPEN, OPEN_CONFIRM,
//!   OPEN_DOWNGRADE, CLOSE, LOCK and LOCKU carry the owner's seqid; the
//!   next one runs, the last one replays the cached reply, anything else
//!   is NFS4ERR_BAD_SEQID (§9.1.7). A new open owner's first OPEN asks
//!   for OPEN_CONFIRM (OPEN4_RESULT_CONFIRM, §9.1.11); until then its
//!   stateid is NFS4ERR_BAD_STATEID.
//! - No delegations: the server does not call 4.0 clients back on the
//!   address SETCLIENTID gives, so OPEN answers OPEN_DELEGATE_NONE.
//! - A COMPOUND of more than [`NFS4_MAX_OPS`] operations is
//!   NFS4ERR_RESOURCE (§15.2).

use std::sync::Arc;
use std::time::Duration;

use nfs::v4::*;
use oncrpc::{CallContext, ServiceError};
use xdr::{Decode, Decoder, XdrBuf};

use super::fileops::{cur, key};
use super::seqids::{OwnerKey, SeqCheck};
use super::{Cx, Nfs4Service};
use crate::storage::Storage;

/// The client id a non-special stateid belongs to.
fn sid_client(sid: &Stateid4) -> Option<u64> {
    if sid.is_special() {
        return None;
    }
    let mut c = [0u8; 8];
    c.copy_from_slice(&sid.other.0[..8]);
    Some(u64::from_be_bytes(c))
}

/// The stateid an operation acts on, if it names one.
fn op_stateid(op: &NfsArgop4) -> Option<&Stateid4> {
    use NfsArgop4 as A;
    match op {
        A::Close(a) => Some(&a.open_stateid),
        A::OpenDowngrade(a) => Some(&a.open_stateid),
        A::OpenConfirm(a) => Some(&a.open_stateid),
        A::Locku(a) => Some(&a.lock_stateid),
        A::Read(a) => Some(&a.stateid),
        A::Write(a) => Some(&a.stateid),
        A::Setattr(a) => Some(&a.stateid),
        A::Lock(a) => match &a.locker {
            Locker4::New(n) => Some(&n.open_stateid),
            Locker4::Existing(e) => Some(&e.lock_stateid),
        },
        _ => None,
    }
}

/// The client an operation acts for, and whether it came from a stateid.
fn op_client(op: &NfsArgop4) -> Option<(u64, bool)> {
    use NfsArgop4 as A;
    match op {
        A::Open(a) => Some((a.owner.clientid, false)),
        A::Lockt(a) => Some((a.owner.clientid, false)),
        A::ReleaseLockowner(a) => Some((a.lock_owner.clientid, false)),
        A::Lock(Lock4Args {
            locker: Locker4::New(n),
            ..
        }) => Some((n.lock_owner.clientid, false)),
        op => op_stateid(op).and_then(sid_client).map(|c| (c, true)),
    }
}

/// The principal a client id is bound to (RFC 7530 §16.33.5).
fn principal(ctx: &CallContext) -> super::principal::Principal {
    super::principal::Principal::of(&ctx.credential)
}

impl<S: Storage> Nfs4Service<S> {
    /// RFC 7530 §15.2: one minor version 0 COMPOUND, whose header is read.
    pub(super) async fn compound_v40(
        &self,
        ctx: &CallContext,
        hdr: &CompoundHeader,
        mut dec: Decoder<'_>,
        mut res: Compound4Res,
    ) -> Result<XdrBuf, ServiceError> {
        if hdr.numops > NFS4_MAX_OPS {
            res.status = Nfsstat4::NFS4ERR_RESOURCE;
            return Ok(xdr::to_xdr_buf(&res));
        }
        let now = self.clock.now();
        if let Ok(mut st) = self.state() {
            st.expire(now);
        }
        let mut cx = self.new_cx(ctx);
        for i in 0..hdr.numops {
            cx.last = i + 1 == hdr.numops;
            let started = std::time::Instant::now();
            let opnum = dec.peek_u32().unwrap_or(0);
            let r = match NfsArgop4::decode(&mut dec) {
                Ok(op) if !is_v40_op(op.opnum().0) || matches!(op, NfsArgop4::Illegal(_)) => {
                    NfsResop4::Other(Opnum4::OP_ILLEGAL, Nfsstat4::NFS4ERR_OP_ILLEGAL)
                }
                Ok(NfsArgop4::Delegreturn(a)) => {
                    self.delegreturn_v40(&a.deleg_stateid, &mut cx, now).await
                }
                Ok(op) => self.run_v40(&op, &mut cx, ctx, now).await,
                Err(_) => NfsResop4::error(Opnum4(opnum), Nfsstat4::NFS4ERR_BADXDR),
            };
            let status = r.status();
            super::opstats::record(0, r.opnum(), status, started.elapsed());
            res.resarray.push(r);
            if !status.is_ok() {
                res.status = status;
                break;
            }
        }
        Ok(xdr::to_xdr_buf(&res))
    }

    /// Probes the callback path of a just confirmed 4.0 client in the
    /// background (CB_NULL, RFC 7530 §10.2.1, [`super::cb40`]): its OPENs
    /// get delegations once the path answers.
    fn probe_v40(&self, clientid: u64) {
        let (cbs, state) = (self.cbs.clone(), Arc::clone(&self.state));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { cbs.usable(&state, clientid).await });
        }
    }

    /// DELEGRETURN (RFC 7530 §16.8) of a delegation granted to a 4.0
    /// client, after the stateid's client is admitted.
    async fn delegreturn_v40(&self, sid: &Stateid4, cx: &mut Cx, now: Duration) -> NfsResop4 {
        if let Some(c) = sid_client(sid) {
            if let Err(e) = self.admit_client(c, true, cx, now) {
                return NfsResop4::Delegreturn(e);
            }
        }
        self.delegreturn(sid, cx).await
    }

    /// Renews client `c` and makes it the one `cx` acts for (RFC 7530
    /// §9.6); an unknown client named by a stateid is
    /// NFS4ERR_STALE_STATEID (from an earlier server instance) or
    /// NFS4ERR_BAD_STATEID.
    fn admit_client(
        &self,
        c: u64,
        from_sid: bool,
        cx: &mut Cx,
        now: Duration,
    ) -> Result<(), Nfsstat4> {
        let mut st = self.state()?;
        match st.renew_v40(c, now) {
            Nfsstat4::NFS4_OK => {
                cx.client40 = Some(c);
                Ok(())
            }
            Nfsstat4::NFS4ERR_STALE_CLIENTID if from_sid => Err(if st.is_this_boot(c) {
                Nfsstat4::NFS4ERR_BAD_STATEID
            } else {
                Nfsstat4::NFS4ERR_STALE_STATEID
            }),
            e => Err(e),
        }
    }

    /// The owner whose seqid `op` carries, and that seqid.
    fn seq_owner(&self, op: &NfsArgop4) -> Option<(OwnerKey, u32)> {
        use NfsArgop4 as A;
        let (sid, seqid) = match op {
            A::Open(a) => {
                return Some(((a.owner.clientid, false, a.owner.owner.0.clone()), a.seqid))
            }
            A::OpenConfirm(a) => (&a.open_stateid, a.seqid),
            A::OpenDowngrade(a) => (&a.open_stateid, a.seqid),
            A::Close(a) => (&a.open_stateid, a.seqid),
            A::Locku(a) => (&a.lock_stateid, a.seqid),
            A::Lock(a) => match &a.locker {
                Locker4::New(n) => (&n.open_stateid, n.open_seqid),
                Locker4::Existing(e) => (&e.lock_stateid, e.lock_seqid),
            },
            _ => return None,
        };
        let owner = self.state().ok()?.ids.owner_of(&sid.other.0)?;
        Some((owner, seqid))
    }

    /// One operation of a minor version 0 COMPOUND.
    async fn run_v40(
        &self,
        op: &NfsArgop4,
        cx: &mut Cx,
        ctx: &CallContext,
        now: Duration,
    ) -> NfsResop4 {
        use NfsArgop4 as A;
        use NfsResop4 as Z;
        let st = || self.state();
        match op {
            A::Setclientid(a) => {
                return Z::Setclientid(match st() {
                    Ok(mut st) => st.setclientid(a, principal(ctx), now),
                    Err(e) => Setclientid4Res::Err(e),
                })
            }
            A::SetclientidConfirm(a) => {
                let s = match st() {
                    Ok(mut st) => st.setclientid_confirm(a, principal(ctx), now),
                    Err(e) => e,
                };
                if s.is_ok() {
                    self.probe_v40(a.clientid);
                }
                return Z::SetclientidConfirm(s);
            }
            A::Renew(a) => {
                return Z::Renew(match st() {
                    Ok(mut st) => st.renew_op(a.clientid, now),
                    Err(e) => e,
                })
            }
            // RFC 7530 §16.16: CLAIM_FH and the other 4.1 claims do not
            // exist in 4.0; nor does EXCLUSIVE4_1.
            A::Open(a)
                if !matches!(
                    a.claim,
                    OpenClaim4::Null(_)
                        | OpenClaim4::Previous(_)
                        | OpenClaim4::DelegateCur(..)
                        | OpenClaim4::DelegatePrev(_)
                ) || matches!(a.openhow.0, Some(Createhow4::Exclusive41(..))) =>
            {
                return NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_BADXDR)
            }
            _ => {}
        }
        if let Some((c, from_sid)) = op_client(op) {
            if let Err(e) = self.admit_client(c, from_sid, cx, now) {
                return NfsResop4::error(op.opnum(), e);
            }
        }
        if let Some(e) = self.unconfirmed_open(op) {
            return NfsResop4::error(op.opnum(), e);
        }
        // RFC 7530 §9.1.3: a stateid seqid of 0 means "current" only in
        // 4.1 (RFC 8881 §8.2.2); this server's seqids start at 1, so in
        // 4.0 it is out of date.
        if op_stateid(op).is_some_and(|s| !s.is_special() && s.seqid == 0) {
            return NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_OLD_STATEID);
        }
        let Some((owner, seqid)) = self.seq_owner(op) else {
            return self.exec_v40(op, cx, ctx, now).await;
        };
        match st().map(|s| {
            (
                s.seqs.check(&owner, seqid, op.opnum()),
                s.seqs.room_for(&owner),
            )
        }) {
            Err(e) | Ok((_, Err(e))) => return NfsResop4::error(op.opnum(), e),
            Ok((SeqCheck::Bad, _)) => {
                return NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_BAD_SEQID)
            }
            Ok((SeqCheck::Replay(r), _)) => return r,
            Ok((SeqCheck::Run, _)) => {}
        }
        let mut r = self.exec_v40(op, cx, ctx, now).await;
        let Ok(mut st) = st() else { return r };
        match (op, &mut r) {
            // RFC 7530 §9.1.11: a new open owner confirms its first open.
            (A::Open(_), Z::Open(Res4::Ok(ok))) if !st.seqs.confirmed(&owner) => {
                ok.rflags |= OPEN4_RESULT_CONFIRM;
            }
            (A::OpenConfirm(_), Z::OpenConfirm(Res4::Ok(_))) => st.seqs.confirm(&owner),
            // RFC 7530 §16.10.5: a new lock owner's sequence starts at
            // `lock_seqid`.
            (
                A::Lock(Lock4Args {
                    locker: Locker4::New(n),
                    ..
                }),
                Z::Lock(LockRes4::Ok(_)),
            ) => {
                let lk = (n.lock_owner.clientid, true, n.lock_owner.owner.0.clone());
                st.seqs.record(&lk, n.lock_seqid, &r);
            }
            _ => {}
        }
        st.seqs.record(&owner, seqid, &r);
        r
    }

    /// NFS4ERR_BAD_STATEID when `op` uses the open stateid of an open
    /// owner that has not confirmed yet (RFC 7530 §9.1.11), other than
    /// OPEN_CONFIRM itself.
    fn unconfirmed_open(&self, op: &NfsArgop4) -> Option<Nfsstat4> {
        if matches!(op, NfsArgop4::OpenConfirm(_)) {
            return None;
        }
        let sid = op_stateid(op)?;
        let st = self.state().ok()?;
        let owner = st.ids.owner_of(&sid.other.0)?;
        (!owner.1 && !st.seqs.confirmed(&owner)).then_some(Nfsstat4::NFS4ERR_BAD_STATEID)
    }

    /// Runs a 4.0 operation: OPEN_CONFIRM and RELEASE_LOCKOWNER here, the
    /// rest as in 4.1.
    async fn exec_v40(
        &self,
        op: &NfsArgop4,
        cx: &mut Cx,
        ctx: &CallContext,
        now: Duration,
    ) -> NfsResop4 {
        match op {
            NfsArgop4::OpenConfirm(a) => NfsResop4::OpenConfirm(self.open_confirm(a, cx).into()),
            NfsArgop4::ReleaseLockowner(a) => NfsResop4::ReleaseLockowner(match self.state() {
                Ok(mut st) => {
                    let o = &a.lock_owner;
                    let s = st.ids.release_lockowner(o.clientid, &o.owner.0);
                    if s.is_ok() {
                        st.seqs.forget(&(o.clientid, true, o.owner.0.clone()));
                    }
                    s
                }
                Err(e) => e,
            }),
            op => self.run(op, cx, ctx, now).await,
        }
    }

    /// OPEN_CONFIRM (RFC 7530 §16.18.4) of the open on the current file.
    fn open_confirm(&self, a: &OpenConfirm4Args, cx: &mut Cx) -> Result<Stateid4, Nfsstat4> {
        let fh = cur(cx)?;
        let c = cx.client40.ok_or(Nfsstat4::NFS4ERR_BAD_STATEID)?;
        let sid = self
            .state()?
            .ids
            .open_confirm(&a.open_stateid, c, &key(&fh))?;
        cx.cur_sid = Some(sid);
        Ok(sid)
    }
}
