//! All NFSv4.1 state of a server instance, under one lock: the owner of
//! three leaf tables that do not know each other —
//! [`ClientTable`] (client ids, sessions, slots, reply cache, leases),
//! [`StateIds`] (open and lock stateids) and [`DelegTable`] (delegations
//! and back-channel paths). What spans tables lives here: a client that
//! goes (lease expiry, RFC 8881 §8.3; replacement, §18.35.4;
//! DESTROY_CLIENTID, §18.50.3) takes its stateids and delegations with
//! it, and stateid checks look at delegations first.

use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::{Nfsstat4, Res4, Stateid4, OPEN4_SHARE_ACCESS_WRITE};
use xdr::XdrBuf;

use super::cbslots::CbParams;
use super::clients::{ClientTable, SeqOutcome, SessionLimits};
use super::deleg::{DelegTable, OPEN4_SHARE_ACCESS_WANT_NO_DELEG};
use super::grace::{Grace, RecordOp};
use super::offload::Offloads;
use super::principal::Principal;
use super::records::RecordStore;
use super::seqids::OwnerSeqs;
use super::stateids::StateIds;

/// All NFSv4.1 state of a server instance.
#[derive(Debug)]
pub(crate) struct StateTable {
    clients: ClientTable,
    /// Open and lock stateids.
    pub(super) ids: StateIds,
    /// Delegations and back-channel paths.
    pub(super) delegs: DelegTable,
    /// NFSv4.0 open and lock owners' seqids and last replies.
    pub(super) seqs: OwnerSeqs,
    /// Asynchronous copies in flight.
    pub(super) offloads: Offloads,
    /// The grace period and which clients are recorded.
    grace: Grace,
    /// Where client records are kept, with a state directory.
    store: Option<RecordStore>,
    /// The pNFS metadata server whose layouts go with their client.
    pub(crate) mds: Option<std::sync::Weak<super::pnfs::Mds>>,
}

impl StateTable {
    /// A fresh table; `boot` distinguishes this instance's ids from a
    /// previous one's.
    pub(crate) fn new(limits: SessionLimits, boot: u32) -> Self {
        Self {
            clients: ClientTable::new(limits, boot),
            ids: StateIds::default(),
            delegs: DelegTable::default(),
            seqs: OwnerSeqs::default(),
            offloads: Offloads::default(),
            grace: Grace::none(),
            store: None,
            mds: None,
        }
    }

    /// Reboot recovery (RFC 8881 §8.4.2): this instance is boot number
    /// `boot`, records go to `store`, and the clients `prev` recorded by
    /// the previous instance may reclaim for `length` from `now`.
    pub(crate) fn recover(
        &mut self,
        boot: u32,
        store: RecordStore,
        prev: Vec<(Bytes, u32)>,
        now: Duration,
        length: Duration,
        max: usize,
    ) {
        self.clients.set_boot(boot);
        self.grace = Grace::start(prev, now, length, max);
        self.store = Some(store);
    }

    /// Whether the grace period runs at `now` (ending it, and removing
    /// the records of clients that did not come back, when its time is
    /// up).
    pub(crate) fn grace_now(&mut self, now: Duration) -> bool {
        let ops = self.grace.tick(now);
        self.persist(ops);
        self.grace.in_grace()
    }

    /// Whether the grace period runs, and the records kept.
    pub(crate) fn grace_stats(&self) -> (bool, usize) {
        (self.grace.in_grace(), self.grace.records())
    }

    /// Makes `ops` durable; a record that could not be written is
    /// forgotten (the client cannot reclaim after a restart).
    fn persist(&mut self, ops: Vec<RecordOp>) {
        if ops.is_empty() {
            return;
        }
        let Some(s) = &self.store else {
            return;
        };
        for k in s.apply(ops) {
            self.grace.unrecord(&k);
        }
    }

    /// A reclaim by `clientid` (OPEN with CLAIM_PREVIOUS, LOCK with
    /// `reclaim`; RFC 8881 §8.4.2.1, §18.16.3, §18.10.3; RFC 7530
    /// §9.6.2): only during the grace period, by a client the previous
    /// instance recorded, before its RECLAIM_COMPLETE (§18.51.3); else
    /// NFS4ERR_NO_GRACE.
    pub(crate) fn may_reclaim(&self, clientid: u64) -> Result<(), Nfsstat4> {
        let Some((key, principal, _, done)) = self.clients.record_info(clientid) else {
            return Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
        };
        if done {
            return Err(Nfsstat4::NFS4ERR_NO_GRACE);
        }
        self.grace.may_reclaim(&key, principal)
    }

    /// A non-reclaim OPEN (`open`) or LOCK by `clientid`: NFS4ERR_GRACE
    /// during the grace period (RFC 8881 §8.4.2.1, RFC 7530 §9.6.2), and
    /// an OPEN from a 4.1/4.2 client that has not sent RECLAIM_COMPLETE
    /// (RFC 8881 §18.51.3: "If non-reclaim locking operations are done
    /// before the RECLAIM_COMPLETE, an NFS4ERR_GRACE error will be
    /// returned").
    pub(crate) fn may_take_state(&self, clientid: u64, open: bool) -> Result<(), Nfsstat4> {
        if self.grace.in_grace() {
            return Err(Nfsstat4::NFS4ERR_GRACE);
        }
        match self.clients.record_info(clientid) {
            Some((_, _, false, false)) if open => Err(Nfsstat4::NFS4ERR_GRACE),
            _ => Ok(()),
        }
    }

    /// After an NFSv4.0 client's OPEN: its record is written (once) before
    /// the reply (RFC 7530 §9.6.2: it now holds state it may reclaim).
    pub(crate) fn record_v40(&mut self, clientid: u64) {
        if let Some((key, principal, true, _)) = self.clients.record_info(clientid) {
            if !self.grace.is_recorded(&key) {
                let ops = self.grace.record(&key, principal);
                self.persist(ops);
            }
        }
    }

    /// The lease period.
    pub(crate) fn lease(&self) -> Duration {
        self.clients.limits().lease
    }

    /// How long a DELEGRETURN waits for WRITEs of its file in progress.
    pub(crate) fn delegreturn_write_wait(&self) -> Duration {
        self.clients.limits().delegreturn_write_wait
    }

    /// (client records, sessions).
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.clients.counts()
    }

    /// (reserved, cached) reply cache bytes over all sessions.
    pub(crate) fn reply_cache_bytes(&self) -> (u64, u64) {
        self.clients.reply_cache_bytes()
    }

    /// The client `id` went: its pNFS layouts go too (RFC 8881 §12.7.3).
    fn layouts_gone(&self, id: u64) {
        if let Some(m) = self.mds.as_ref().and_then(std::sync::Weak::upgrade) {
            m.client_gone(id);
        }
    }

    /// Drops the stateids and delegations of clients that went away.
    fn sweep(&mut self) {
        for id in self.clients.take_dropped() {
            self.ids.purge_client(id, false);
            self.delegs.purge(id);
            self.seqs.purge_client(id);
            self.offloads.purge_client(id);
            self.layouts_gone(id);
        }
        for k in self.clients.take_forgotten() {
            let ops = self.grace.forget(&k);
            self.persist(ops);
        }
    }

    /// Drops every client whose lease ran out before `now` (RFC 8881
    /// §8.3), with its sessions and state; its stateids then answer
    /// NFS4ERR_EXPIRED.
    pub(crate) fn expire(&mut self, now: Duration) {
        for id in self.clients.expire(now) {
            self.ids.purge_client(id, true);
            self.delegs.purge(id);
            self.seqs.purge_client(id);
            self.offloads.purge_client(id);
            self.layouts_gone(id);
        }
        self.sweep();
        let ops = self.grace.tick(now);
        self.persist(ops);
    }

    /// Whether connection `conn` is bound to a session whose client's
    /// lease has not run out at `now` (expired clients are dropped first).
    pub(crate) fn conn_in_session(&mut self, conn: u64, now: Duration) -> bool {
        self.expire(now);
        self.clients.conn_in_session(conn)
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.4) from `principal`. A client
    /// "has state" (case 3) when it holds sessions, stateids,
    /// delegations or asynchronous copies, as Linux's nfsd counts it
    /// (`client_has_state`).
    pub(crate) fn exchange_id(
        &mut self,
        a: &ExchangeId4Args,
        owner_major: &Bytes,
        principal: &Principal,
        protected: bool,
        now: Duration,
    ) -> Res4<ExchangeId4ResOk> {
        let (ids, delegs, copies) = (&self.ids, &self.delegs, &self.offloads);
        let has_state =
            |id| ids.has_state(id) || delegs.has_delegations(id) || copies.has_copies(id);
        let r = self
            .clients
            .exchange_id(a, owner_major, principal, protected, has_state, now);
        self.sweep();
        r
    }

    /// CREATE_SESSION (RFC 8881 §18.36.4) on connection `conn`, which
    /// joins the new session (§2.10.3.1).
    pub(crate) fn create_session(
        &mut self,
        a: &CreateSession4Args,
        principal: &Principal,
        protected: bool,
        conn: u64,
        now: Duration,
    ) -> Res4<CreateSession4ResOk> {
        let r = self.clients.create_session(a, principal, protected, now);
        if let Res4::Ok(ok) = &r {
            self.clients.bind_to(&ok.sessionid.0, conn);
        }
        self.sweep();
        r
    }

    /// SEQUENCE (RFC 8881 §18.46.3) on connection `conn`, with the
    /// client's status flags; a connection not yet bound to the session
    /// joins it (§2.10.3.1: no state protection is offered, so any
    /// connection may).
    pub(crate) fn sequence(
        &mut self,
        a: &Sequence4Args,
        conn: u64,
        numops: usize,
        request_size: usize,
        args_hash: u64,
        now: Duration,
    ) -> SeqOutcome {
        let mut o = self
            .clients
            .sequence(a, numops, request_size, args_hash, now);
        if let SeqOutcome::New(ok, sc) = &mut o {
            ok.status_flags |= self.delegs.status_flags(sc.clientid);
            self.clients.bind_to(&sc.sessionid, conn);
        }
        o
    }

    /// Ends the request on a slot, keeping `reply` for retries.
    pub(crate) fn finish_slot(&mut self, sessionid: &[u8; 16], slot: u32, reply: Option<XdrBuf>) {
        self.clients.finish_slot(sessionid, slot, reply);
    }

    /// The callback parameters of a session.
    pub(crate) fn cb_params(&self, sid: &[u8; 16]) -> Option<CbParams> {
        self.clients.cb_params(sid)
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33.3) on session `sid`: callbacks
    /// take the new program and credential from now on.
    pub(crate) fn backchannel_ctl(&mut self, sid: &[u8; 16], a: &BackchannelCtl4Args) -> Nfsstat4 {
        match self.clients.backchannel_ctl(sid, a) {
            Ok(cb) => {
                self.delegs.set_callback(sid, &cb);
                Nfsstat4::NFS4_OK
            }
            Err(e) => e,
        }
    }

    /// DESTROY_SESSION (RFC 8881 §18.37.3) from connection `conn`, which
    /// must be bound to the session (NFS4ERR_CONN_NOT_BOUND_TO_SESSION),
    /// and from the machine credential of a client with SP4_MACH_CRED
    /// (`who`: principal and protection, [`ClientTable::mach_cred_check`]);
    /// callbacks stop using it.
    pub(crate) fn destroy_session(
        &mut self,
        sid: &[u8; 16],
        conn: u64,
        who: (&Principal, bool),
    ) -> Nfsstat4 {
        if let Err(e) = self.clients.mach_cred_check_session(sid, who.0, who.1) {
            return e;
        }
        if self.clients.cb_params(sid).is_some() && !self.clients.is_bound(sid, conn) {
            return Nfsstat4::NFS4ERR_CONN_NOT_BOUND_TO_SESSION;
        }
        let s = self.clients.destroy_session(sid);
        if s.is_ok() {
            self.delegs.session_gone(sid);
        }
        s
    }

    /// DESTROY_CLIENTID (RFC 8881 §18.50.3): only a client without
    /// sessions or state, and from its machine credential under
    /// SP4_MACH_CRED (`who` as for [`Self::destroy_session`]).
    pub(crate) fn destroy_clientid(&mut self, id: u64, who: (&Principal, bool)) -> Nfsstat4 {
        if let Err(e) = self.clients.mach_cred_check(id, who.0, who.1) {
            return e;
        }
        let s = self.clients.destroy_clientid(id, self.ids.has_state(id));
        self.sweep();
        s
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34.3) of connection `conn`,
    /// from the machine credential under SP4_MACH_CRED (`who` as for
    /// [`Self::destroy_session`]).
    pub(crate) fn bind_conn(
        &mut self,
        a: &BindConnToSession4Args,
        conn: u64,
        who: (&Principal, bool),
        now: Duration,
    ) -> Res4<BindConnToSession4ResOk> {
        if let Err(e) = self
            .clients
            .mach_cred_check_session(&a.sessid.0, who.0, who.1)
        {
            return Res4::Err(e);
        }
        let r = self.clients.bind_conn(a, now);
        if r.status().is_ok() {
            self.clients.bind_to(&a.sessid.0, conn);
        }
        r
    }

    /// SETCLIENTID (RFC 7530 §16.33.5).
    pub(crate) fn setclientid(
        &mut self,
        a: &nfs::v4::Setclientid4Args,
        principal: Principal,
        now: Duration,
    ) -> nfs::v4::Setclientid4Res {
        let r = self.clients.setclientid(a, principal, now);
        self.sweep();
        r
    }

    /// SETCLIENTID_CONFIRM (RFC 7530 §16.34.4): the client's earlier
    /// incarnation goes with its state; the confirmed callback address
    /// becomes the client's callback path, to be probed before the next
    /// delegation (RFC 7530 §10.2.1).
    pub(crate) fn setclientid_confirm(
        &mut self,
        a: &nfs::v4::SetclientidConfirm4Args,
        principal: Principal,
        now: Duration,
    ) -> Nfsstat4 {
        let r =
            self.clients
                .setclientid_confirm(a.clientid, a.setclientid_confirm.0, &principal, now);
        self.sweep();
        if r.is_ok() {
            if let Some((cb, ident)) = self.clients.v40_callback(a.clientid) {
                let target = super::cb40::target(&cb, ident);
                self.delegs
                    .bind_v40(a.clientid, target, cb.program, super::cb40::credential());
            }
        }
        r
    }

    /// RENEW (RFC 7530 §16.29.4): renews the lease as
    /// [`StateTable::renew_v40`] does, then answers NFS4ERR_CB_PATH_DOWN
    /// when the client holds delegations and its callback path is not
    /// known to work (a callback to it failed), as Linux's nfsd does
    /// (`nfsd4_renew`): the client is to fix the path with SETCLIENTID
    /// (RFC 7530 §10.2.1) or return its delegations.
    pub(crate) fn renew_op(&mut self, clientid: u64, now: Duration) -> Nfsstat4 {
        let s = self.renew_v40(clientid, now);
        let up = self
            .delegs
            .path(clientid)
            .is_some_and(|p| p.status == super::deleg::PathStatus::Up);
        if s.is_ok() && self.delegs.has_delegations(clientid) && !up {
            return Nfsstat4::NFS4ERR_CB_PATH_DOWN;
        }
        s
    }

    /// Renews NFSv4.0 client `clientid` (RENEW, RFC 7530 §16.29.4, and
    /// every operation naming it, §9.6): NFS4ERR_EXPIRED once its lease
    /// ran out, NFS4ERR_STALE_CLIENTID for an unknown id.
    pub(crate) fn renew_v40(&mut self, clientid: u64, now: Duration) -> Nfsstat4 {
        match self.clients.renew_v40(clientid, now) {
            Nfsstat4::NFS4ERR_STALE_CLIENTID if self.ids.was_expired(clientid) => {
                Nfsstat4::NFS4ERR_EXPIRED
            }
            s => s,
        }
    }

    /// Whether `clientid` was handed out by this server instance.
    pub(crate) fn is_this_boot(&self, clientid: u64) -> bool {
        self.clients.is_this_boot(clientid)
    }

    /// RECLAIM_COMPLETE (RFC 8881 §18.51.3): the client is recorded
    /// (durably, before the reply) and, once every client of the previous
    /// instance has sent it, the grace period ends (§8.4.2.1).
    pub(crate) fn reclaim_complete(&mut self, clientid: u64, one_fs: bool) -> Nfsstat4 {
        let s = self.clients.reclaim_complete(clientid, one_fs);
        if s.is_ok() && !one_fs {
            if let Some((key, principal, ..)) = self.clients.record_info(clientid) {
                let ops = self.grace.reclaim_complete(&key, principal);
                self.persist(ops);
            }
        }
        s
    }

    /// Checks a READ/WRITE/SETATTR(size) stateid for `fh`: a delegation
    /// stateid allowing the access (RFC 8881 §10.2), else an open, lock or
    /// special stateid ([`StateIds::io_check`]).
    pub(crate) fn io_check(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        write: bool,
    ) -> Result<(), Nfsstat4> {
        if !sid.is_special() && self.delegs.io_allowed(sid, clientid, fh, write) {
            return Ok(());
        }
        self.ids.io_check(sid, clientid, fh, write)
    }

    /// FREE_STATEID (RFC 8881 §18.38.3): a revoked delegation's stateid
    /// is freed (§8.2.3), a held one is NFS4ERR_LOCKS_HELD.
    pub(crate) fn free_stateid(&mut self, sid: &Stateid4, clientid: u64) -> Nfsstat4 {
        if let Some(s) = self.delegs.free_revoked(sid, clientid) {
            return s;
        }
        if self.delegs.knows(sid) == Some(Nfsstat4::NFS4_OK) {
            return Nfsstat4::NFS4ERR_LOCKS_HELD;
        }
        self.ids.free_stateid(sid, clientid)
    }

    /// TEST_STATEID's per-stateid status (RFC 8881 §18.48.3).
    pub(crate) fn test_stateid(&self, sid: &Stateid4, clientid: u64) -> Nfsstat4 {
        if !sid.is_special() {
            if let Some(s) = self.delegs.knows(sid) {
                return s;
            }
        }
        self.ids.test_stateid(sid, clientid)
    }

    /// The delegation OPEN grants (RFC 8881 §10.4, §18.16.3): a write
    /// delegation when `clientid`'s open is the only one of the file, a
    /// read delegation for a read-only open when nobody has the file open
    /// for writing; none if the client asked for none.
    pub(crate) fn offer_delegation(
        &mut self,
        clientid: u64,
        fh: &Bytes,
        access: u32,
        want: u32,
    ) -> Option<(Stateid4, bool)> {
        if want == OPEN4_SHARE_ACCESS_WANT_NO_DELEG || !self.delegs.may_grant(clientid, fh) {
            return None;
        }
        let opens = self.ids.opens_of(fh);
        let others = opens.iter().any(|(c, _)| *c != clientid);
        let writers = opens
            .iter()
            .any(|(_, a)| *a & OPEN4_SHARE_ACCESS_WRITE != 0);
        let write = access & OPEN4_SHARE_ACCESS_WRITE != 0;
        if write && !others && opens.len() == 1 {
            Some((self.delegs.grant(clientid, fh, true), true))
        } else if !write && !writers {
            Some((self.delegs.grant(clientid, fh, false), false))
        } else {
            None
        }
    }
}
