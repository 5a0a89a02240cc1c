//! The stateful operations of a COMPOUND: OPEN, OPEN_DOWNGRADE, CLOSE,
//! LOCK, LOCKT, LOCKU, TEST_STATEID, FREE_STATEID and the client-id and
//! session operations.

use std::time::Duration;

use nfs::v3::{Createhow3, Ftype3, Nfsstat3, Sattr3, ACCESS3_MODIFY, ACCESS3_READ};
use nfs::v4::attr::Bitmap4;
use nfs::v4::session::{ChannelDir4, TestStateid4ResOk, CREATE_SESSION4_FLAG_CONN_BACK_CHAN};
use nfs::v4::*;
use xdr::Bounded;

use super::attrs::{st4, to_sattr};
use super::fileops::{cinfo, cur, key, name3, resolve_sid};
use super::{Cx, Nfs4Service};
use crate::perm::DIR_ADD;
use crate::storage::Storage;

type R<T> = Result<T, Nfsstat4>;

/// `open_delegation_type4` OPEN_DELEGATE_WRITE (RFC 8881 §18.16.1).
const OPEN_DELEGATE_WRITE_TYPE: u32 = 2;

fn clientid(cx: &Cx) -> R<u64> {
    cx.clientid().ok_or(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
}

impl<S: Storage> Nfs4Service<S> {
    pub(super) async fn exec_state(&self, op: &NfsArgop4, cx: &mut Cx, now: Duration) -> NfsResop4 {
        use NfsArgop4 as A;
        use NfsResop4 as Z;
        match op {
            A::Open(a) => Z::Open(self.open(a, cx).await.into()),
            A::OpenDowngrade(a) => Z::OpenDowngrade(self.open_downgrade(a, cx).into()),
            A::Close(a) => Z::Close(self.close(a, cx).into()),
            A::Lock(a) => Z::Lock(match self.lock(a, cx).await {
                Ok(r) => r,
                Err(e) => LockRes4::Err(e),
            }),
            A::Lockt(a) => Z::Lockt(match self.lockt(a, cx).await {
                Ok(r) => r,
                Err(e) => LockRes4::Err(e),
            }),
            A::Locku(a) => Z::Locku(self.locku(a, cx).await.into()),
            A::FreeStateid(a) => Z::FreeStateid(self.free_stateid(&a.stateid, cx)),
            A::TestStateid(a) => Z::TestStateid(
                (|| {
                    let c = clientid(cx)?;
                    let st = self.state()?;
                    Ok(TestStateid4ResOk {
                        status_codes: Bounded(
                            a.stateids.0.iter().map(|s| st.test_stateid(s, c)).collect(),
                        ),
                    })
                })()
                .into(),
            ),
            A::ReclaimComplete(a) => Z::ReclaimComplete(match (clientid(cx), self.state()) {
                (Ok(c), Ok(mut st)) => st.reclaim_complete(c, a.one_fs),
                (Err(e), _) | (_, Err(e)) => e,
            }),
            A::ExchangeId(a) => Z::ExchangeId(match self.state() {
                Ok(mut st) => {
                    st.expire(now);
                    let mut r =
                        st.exchange_id(a, &self.owner, &cx.principal, cx.gss_protected, now);
                    // RFC 8881 §13.1: a metadata server says so.
                    if let (Res4::Ok(ok), true) = (&mut r, self.mds.is_some()) {
                        ok.flags = (ok.flags & !nfs::v4::session::EXCHGID4_FLAG_USE_NON_PNFS)
                            | nfs::v4::session::EXCHGID4_FLAG_USE_PNFS_MDS;
                    }
                    r
                }
                Err(e) => Res4::Err(e),
            }),
            A::CreateSession(a) => Z::CreateSession(match self.state() {
                Ok(mut st) => {
                    st.expire(now);
                    let r =
                        st.create_session(a, &cx.principal, cx.gss_protected, cx.peer.conn_id, now);
                    if let Res4::Ok(ok) = &r {
                        let cb = st.cb_params(&ok.sessionid.0);
                        if let (true, Some(cb)) =
                            (ok.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0, cb)
                        {
                            st.delegs.bind(ok.sessionid.0, cx.peer, &cb, cx.minor);
                        }
                    }
                    r
                }
                Err(e) => Res4::Err(e),
            }),
            // RFC 8881 §18.37.3: in a COMPOUND whose SEQUENCE names the
            // same session, DESTROY_SESSION must be the last operation.
            A::DestroySession(a)
                if !cx.last && cx.sess.is_some_and(|s| s.sessionid == a.sessionid.0) =>
            {
                Z::DestroySession(Nfsstat4::NFS4ERR_NOT_ONLY_OP)
            }
            A::DestroySession(a) => Z::DestroySession(match self.state() {
                Ok(mut st) => st.destroy_session(
                    &a.sessionid.0,
                    cx.peer.conn_id,
                    (&cx.principal, cx.gss_protected),
                ),
                Err(e) => e,
            }),
            A::DestroyClientid(a) => Z::DestroyClientid(match self.state() {
                Ok(mut st) => st.destroy_clientid(a.clientid, (&cx.principal, cx.gss_protected)),
                Err(e) => e,
            }),
            A::BindConnToSession(a) => Z::BindConnToSession(match self.state() {
                Ok(mut st) => {
                    let r =
                        st.bind_conn(a, cx.peer.conn_id, (&cx.principal, cx.gss_protected), now);
                    if let Res4::Ok(ok) = &r {
                        if ok.dir != ChannelDir4::CDFC4_FORE {
                            if let Some(cb) = st.cb_params(&a.sessid.0) {
                                st.delegs.bind(a.sessid.0, cx.peer, &cb, cx.minor);
                            }
                        }
                    }
                    r
                }
                Err(e) => Res4::Err(e),
            }),
            A::BackchannelCtl(a) => Z::BackchannelCtl(match (cx.sess, self.state()) {
                (Some(s), Ok(mut st)) => st.backchannel_ctl(&s.sessionid, a),
                (None, _) => Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION,
                (_, Err(e)) => e,
            }),
            other => Box::pin(self.exec_pnfs(other, cx)).await,
        }
    }

    /// OPEN (RFC 8881 §18.16.4): CLAIM_NULL with or without create
    /// (UNCHECKED4, GUARDED4, EXCLUSIVE4, EXCLUSIVE4_1) and CLAIM_FH; the
    /// share reservation is taken last, after other clients' conflicting
    /// delegations are recalled (NFS4ERR_DELAY until they are returned);
    /// a delegation is offered when the back channel works (RFC 8881
    /// §10.4). CLAIM_DELEGATE_CUR and CLAIM_DELEG_CUR_FH need the caller's
    /// delegation on the file. CLAIM_PREVIOUS reclaims the open (and the
    /// delegation it names) of the current file during the grace period
    /// (RFC 8881 §8.4.2.1, §18.16.3; RFC 7530 §9.6.2), other claims then
    /// get NFS4ERR_GRACE ([`super::state::StateTable::may_take_state`]);
    /// CLAIM_DELEGATE_PREV/CLAIM_DELEG_PREV_FH are NFS4ERR_NOTSUPP.
    async fn open(&self, a: &Open4Args, cx: &mut Cx) -> R<Open4ResOk> {
        let cid = clientid(cx)?;
        let reclaim = match a.claim {
            OpenClaim4::Previous(t) => Some(t),
            _ => None,
        };
        {
            let st = self.state()?;
            match reclaim {
                Some(_) => st.may_reclaim(cid)?,
                None => st.may_take_state(cid, true)?,
            }
        }
        let access = a.share_access & !OPEN4_SHARE_WANT_MASK;
        if !(1..=3).contains(&access) || a.share_deny > 3 {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let mut attrset = Bitmap4::new();
        let mut created = false;
        let mut truncate = None;
        let (fh, change) = match &a.claim {
            OpenClaim4::Null(name) => {
                let dir = cur(cx)?;
                let n = name3(name)?;
                let before = self.dir(&dir).await?;
                let found = self.fs.lookup(&dir, &n).await;
                let fh = match (&a.openhow.0, found) {
                    (None, r) => r.map_err(st4)?,
                    (Some(Createhow4::Guarded(_)), Ok(_)) => return Err(Nfsstat4::NFS4ERR_EXIST),
                    (Some(Createhow4::Unchecked(f)), Ok(fh)) => {
                        truncate = to_sattr(f)?.0.size;
                        fh
                    }
                    (Some(how), Err(Nfsstat3::NFS3ERR_NOENT))
                    | (
                        Some(how @ (Createhow4::Exclusive(_) | Createhow4::Exclusive41(..))),
                        Ok(_),
                    ) => {
                        self.allow(&before, cx, DIR_ADD, false)?;
                        let (h3, post, s) = match how {
                            Createhow4::Unchecked(f) | Createhow4::Guarded(f) => {
                                let (s, m) = to_sattr(f)?;
                                attrset = m;
                                (Createhow3::Guarded(s.clone()), None, s)
                            }
                            Createhow4::Exclusive(v) => {
                                (Createhow3::Exclusive(*v), None, Sattr3::default())
                            }
                            Createhow4::Exclusive41(v, f) => {
                                let (s, m) = to_sattr(f)?;
                                if s.atime != Default::default() || s.mtime != Default::default() {
                                    return Err(Nfsstat4::NFS4ERR_INVAL);
                                }
                                attrset = m;
                                (Createhow3::Exclusive(*v), Some(s.clone()), s)
                            }
                        };
                        let fh = self.fs.create(&dir, &n, &h3).await.map_err(st4)?;
                        if let Some(s) = post {
                            self.fs.setattr(&fh, &s, None).await.map_err(st4)?;
                        }
                        self.give(&fh, cx, &s).await;
                        created = true;
                        fh
                    }
                    (Some(_), Err(e)) => return Err(st4(e)),
                };
                let after = self.attr(&dir).await?;
                (fh, cinfo(&before, &after))
            }
            OpenClaim4::Fh => (cur(cx)?, ChangeInfo4::default()),
            // RFC 8881 §10.4.3, §18.16.3: the holder of a delegation turns
            // opens it made locally into real ones (before DELEGRETURN).
            OpenClaim4::DelegCurFh(d) => {
                let fh = cur(cx)?;
                self.own_delegation(d, cid, &fh)?;
                (fh, ChangeInfo4::default())
            }
            OpenClaim4::DelegateCur(d, name) => {
                let dir = cur(cx)?;
                let fh = self.fs.lookup(&dir, &name3(name)?).await.map_err(st4)?;
                self.own_delegation(d, cid, &fh)?;
                (fh, ChangeInfo4::default())
            }
            OpenClaim4::Previous(_) => (cur(cx)?, ChangeInfo4::default()),
            _ => return Err(Nfsstat4::NFS4ERR_NOTSUPP),
        };
        let attr = self.regular(&fh).await?;
        if !created {
            if access & OPEN4_SHARE_ACCESS_READ != 0 {
                self.allow(&attr, cx, ACCESS3_READ, true)?;
            }
            if access & OPEN4_SHARE_ACCESS_WRITE != 0 || truncate.is_some() {
                self.allow(&attr, cx, ACCESS3_MODIFY, true)?;
            }
        }
        self.deleg_conflict(
            &fh,
            cx,
            access & OPEN4_SHARE_ACCESS_WRITE != 0 || truncate.is_some(),
        )?;
        let sid = self
            .state()?
            .ids
            .open(cid, &a.owner.owner.0, &key(&fh), access, a.share_deny)?;
        if let Some(size) = truncate {
            let s = Sattr3 {
                size: Some(size),
                ..Sattr3::default()
            };
            // The opener's own truncation: not a local change to a file
            // it holds a delegation on (super::watch).
            let own = self.watch.changing(&key(&fh));
            let r = self.fs.setattr(&fh, &s, None).await;
            drop(own);
            r.map_err(st4)?;
        }
        let delegation = match reclaim {
            // RFC 8881 §18.16.3: a reclaim names the delegation held
            // before the restart; it is granted again as the client's
            // back channel and the file's other opens allow.
            Some(0) => OpenDelegation4::None, // OPEN_DELEGATE_NONE
            Some(t) => {
                let want = if t == OPEN_DELEGATE_WRITE_TYPE {
                    access | OPEN4_SHARE_ACCESS_WRITE
                } else {
                    access
                };
                self.open_delegation(cid, &fh, want, 0).await
            }
            None => {
                self.open_delegation(cid, &fh, access, a.share_access & OPEN4_SHARE_WANT_MASK)
                    .await
            }
        };
        if cx.sess.is_none() {
            self.state()?.record_v40(cid);
        }
        cx.cur = Some(fh);
        cx.cur_sid = Some(sid);
        Ok(Open4ResOk {
            stateid: sid,
            cinfo: change,
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset,
            delegation,
        })
    }

    /// FREE_STATEID (RFC 8881 §18.38.3), with the current stateid
    /// substituted (§16.2.3.1.2).
    fn free_stateid(&self, sid: &Stateid4, cx: &Cx) -> Nfsstat4 {
        let r = (|| {
            let c = clientid(cx)?;
            let sid = resolve_sid(cx, sid)?;
            Ok(self.state()?.free_stateid(&sid, c))
        })();
        self.nlm_released();
        match r {
            Ok(s) | Err(s) => s,
        }
    }

    fn open_downgrade(&self, a: &OpenDowngrade4Args, cx: &mut Cx) -> R<Stateid4> {
        let fh = cur(cx)?;
        let sid = resolve_sid(cx, &a.open_stateid)?;
        let access = a.share_access & !OPEN4_SHARE_WANT_MASK;
        let new = self.state()?.ids.open_downgrade(
            &sid,
            clientid(cx)?,
            &key(&fh),
            access,
            a.share_deny,
        )?;
        cx.cur_sid = Some(new);
        Ok(new)
    }

    /// CLOSE (RFC 8881 §18.2.4): answers the invalid special stateid, as
    /// an NFSv4.1 server should.
    fn close(&self, a: &Close4Args, cx: &mut Cx) -> R<Stateid4> {
        let fh = cur(cx)?;
        let sid = resolve_sid(cx, &a.open_stateid)?;
        let s = self.state()?.ids.close(&sid, clientid(cx)?, &key(&fh));
        self.nlm_released();
        if s.is_ok() {
            self.release_closed();
            cx.cur_sid = None;
            Ok(Stateid4::INVALID)
        } else {
            Err(s)
        }
    }

    async fn lock_target(&self, cx: &Cx) -> R<nfs::v3::NfsFh3> {
        let fh = cur(cx)?;
        let a = self.attr(&fh).await?;
        match a.ftype {
            Ftype3::NF3REG => Ok(fh),
            Ftype3::NF3DIR => Err(Nfsstat4::NFS4ERR_ISDIR),
            Ftype3::NF3LNK => Err(Nfsstat4::NFS4ERR_SYMLINK),
            _ => Err(Nfsstat4::NFS4ERR_INVAL),
        }
    }

    async fn lock(&self, a: &Lock4Args, cx: &mut Cx) -> R<LockRes4<Stateid4>> {
        let fh = self.lock_target(cx).await?;
        // RFC 8881 §8.4.2.1, §18.10.3; RFC 7530 §9.6.2: reclaims only in
        // the grace period, new locks only after it.
        {
            let (st, c) = (self.state()?, clientid(cx)?);
            if a.reclaim {
                st.may_reclaim(c)?;
            } else {
                st.may_take_state(c, false)?;
                self.nlm_grace()?;
            }
        }
        let mut a = a.clone();
        match &mut a.locker {
            Locker4::New(n) => n.open_stateid = resolve_sid(cx, &n.open_stateid)?,
            Locker4::Existing(e) => e.lock_stateid = resolve_sid(cx, &e.lock_stateid)?,
        }
        let k = key(&fh);
        let mut st = self.state()?;
        if let Some(d) = self.nlm_denied(&k, a.offset, a.length, a.locktype.is_write()) {
            return Ok(LockRes4::Denied(d));
        }
        let r = st.ids.lock(clientid(cx)?, &k, &a);
        drop(st);
        if let LockRes4::Ok(s) = &r {
            cx.cur_sid = Some(*s);
        }
        Ok(r)
    }

    /// LOCKT (RFC 8881 §18.11): NFS4ERR_GRACE during the grace period,
    /// as Linux's nfsd answers (a lock not yet reclaimed would not show).
    async fn lockt(&self, a: &Lockt4Args, cx: &Cx) -> R<LockRes4<()>> {
        let fh = self.lock_target(cx).await?;
        let k = key(&fh);
        let st = self.state()?;
        st.may_take_state(clientid(cx)?, false)?;
        self.nlm_grace()?;
        if let Some(d) = self.nlm_denied(&k, a.offset, a.length, a.locktype.is_write()) {
            return Ok(LockRes4::Denied(d));
        }
        Ok(st.ids.lockt(
            clientid(cx)?,
            &k,
            &a.owner.owner.0,
            a.locktype,
            a.offset,
            a.length,
        ))
    }

    async fn locku(&self, a: &Locku4Args, cx: &mut Cx) -> R<Stateid4> {
        let fh = self.lock_target(cx).await?;
        let sid = resolve_sid(cx, &a.lock_stateid)?;
        let new = self
            .state()?
            .ids
            .locku(&sid, clientid(cx)?, &key(&fh), a.offset, a.length)?;
        self.nlm_released();
        cx.cur_sid = Some(new);
        Ok(new)
    }
}
