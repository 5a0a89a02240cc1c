//! Client ids, sessions and slots (RFC 8881 §2.4, §2.10): the sans-IO
//! state machine behind EXCHANGE_ID, CREATE_SESSION, SEQUENCE,
//! DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION and leases.
//! Time comes in as an argument ([`super::Clock`] supplies it).
//!
//! Leases (RFC 8881 §8.3): SEQUENCE renews its client's lease. A client
//! whose lease has run out is dropped whole at the next request
//! ([`StateTable::expire`]): its sessions go (SEQUENCE then answers
//! NFS4ERR_BADSESSION, CREATE_SESSION NFS4ERR_STALE_CLIENTID) and its
//! stateids answer NFS4ERR_EXPIRED.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::{Nfsstat4, Res4};
use xdr::{Bounded, FixedOpaque, XdrBuf};

use super::stateids::StateKind;

/// Server limits offered in CREATE_SESSION (RFC 8881 §18.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Lease period (the `lease_time` attribute).
    pub lease: Duration,
    /// Largest `ca_maxrequestsize` granted.
    pub max_request: u32,
    /// Largest `ca_maxresponsesize` granted.
    pub max_response: u32,
    /// Largest `ca_maxresponsesize_cached` granted.
    pub max_response_cached: u32,
    /// Largest `ca_maxoperations` granted.
    pub max_ops: u32,
    /// Most slots per session.
    pub max_slots: u32,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            lease: Duration::from_secs(90),
            max_request: (1 << 20) + 8192,
            max_response: (1 << 20) + 8192,
            max_response_cached: 64 << 10,
            max_ops: 64,
            max_slots: 64,
        }
    }
}

/// Most client records at once; EXCHANGE_ID for a new client beyond it is
/// NFS4ERR_DELAY (unconfirmed records expire after a lease).
pub(crate) const MAX_CLIENTS: usize = 1 << 14;

/// Most sessions one client id may hold at once (each keeps a reply cache
/// of up to `max_slots` × `max_response_cached` bytes).
pub(crate) const MAX_SESSIONS_PER_CLIENT: usize = 16;

/// One slot of a session's fore channel (RFC 8881 §2.10.6.1).
#[derive(Debug, Default)]
pub(crate) struct Slot {
    used: bool,
    seqid: u32,
    busy: bool,
    reply: Option<XdrBuf>,
    args_hash: u64,
}

/// A session (RFC 8881 §2.10).
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) clientid: u64,
    pub(crate) fore: ChannelAttrs4,
    slots: Vec<Slot>,
    conns: HashSet<u64>,
    /// `csa_cb_program` (RFC 8881 §18.36.3).
    cb_program: u32,
}

/// A client record (RFC 8881 §2.4).
#[derive(Debug)]
pub(crate) struct Client {
    ownerid: Bytes,
    verifier: [u8; 8],
    confirmed: bool,
    cs_seq: u32,
    cs_reply: Option<CreateSession4ResOk>,
    last_renew: Duration,
    sessions: Vec<[u8; 16]>,
    reclaim_complete: bool,
}

/// What SEQUENCE decided (RFC 8881 §18.46.3, §2.10.6.1).
#[derive(Debug)]
pub(crate) enum SeqOutcome {
    /// A new request on the slot: run the rest of the COMPOUND.
    New(Sequence4ResOk, SessCtx),
    /// A retry of the slot's last request: send this cached reply.
    Replay(XdrBuf),
    /// An error for the SEQUENCE result.
    Err(Nfsstat4),
}

/// The session a COMPOUND runs in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessCtx {
    pub(crate) sessionid: [u8; 16],
    pub(crate) clientid: u64,
    pub(crate) slot: u32,
    pub(crate) cachethis: bool,
    pub(crate) max_response: u32,
    pub(crate) max_response_cached: u32,
}

/// All NFSv4.1 state of a server instance.
#[derive(Debug)]
pub(crate) struct StateTable {
    pub(crate) limits: SessionLimits,
    boot: u32,
    next_client: u32,
    next_session: u32,
    pub(crate) next_state: u32,
    pub(crate) clients: HashMap<u64, Client>,
    sessions: HashMap<[u8; 16], Session>,
    pub(crate) expired: HashSet<u64>,
    pub(crate) states: HashMap<[u8; 12], StateKind>,
    /// The stateids of each file, for conflict checks.
    pub(crate) by_fh: HashMap<Bytes, Vec<[u8; 12]>>,
    /// Delegations and back-channel paths.
    pub(crate) delegs: super::deleg::DelegTable,
}

impl StateTable {
    /// A fresh table; `boot` distinguishes this instance's ids from a
    /// previous one's.
    pub(crate) fn new(limits: SessionLimits, boot: u32) -> Self {
        Self {
            limits,
            boot,
            next_client: 0,
            next_session: 0,
            next_state: 0,
            clients: HashMap::new(),
            sessions: HashMap::new(),
            expired: HashSet::new(),
            states: HashMap::new(),
            by_fh: HashMap::new(),
            delegs: Default::default(),
        }
    }

    /// Drops every client whose lease ran out before `now` (RFC 8881
    /// §8.3), with its sessions and state.
    pub(crate) fn expire(&mut self, now: Duration) {
        let lease = self.limits.lease;
        let dead: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| now.saturating_sub(c.last_renew) > lease)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            tracing::debug!(clientid = id, "NFSv4 lease expired");
            self.purge_client(id);
            // At most MAX_CLIENTS expired ids are remembered; past that
            // the set starts over, and stateids of the forgotten clients
            // answer NFS4ERR_BAD_STATEID instead of NFS4ERR_EXPIRED.
            if self.expired.len() >= MAX_CLIENTS {
                self.expired.clear();
            }
            self.expired.insert(id);
        }
    }

    fn purge_client(&mut self, id: u64) {
        self.delegs.purge(id);
        if let Some(c) = self.clients.remove(&id) {
            for s in c.sessions {
                self.sessions.remove(&s);
            }
        }
        let keys: Vec<[u8; 12]> = self
            .states
            .iter()
            .filter(|(_, s)| s.clientid() == id)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.remove_state(&k);
        }
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.4), for the cases a client without
    /// state protection meets: a new client, a retry, a client restart
    /// (new verifier: a new unconfirmed record, the old one goes when
    /// CREATE_SESSION confirms the new), and the update flag.
    pub(crate) fn exchange_id(
        &mut self,
        a: &ExchangeId4Args,
        owner_major: &Bytes,
        now: Duration,
    ) -> Res4<ExchangeId4ResOk> {
        const FLAGS_A: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
            | EXCHGID4_FLAG_SUPP_MOVED_MIGR
            | EXCHGID4_FLAG_BIND_PRINC_STATEID
            | EXCHGID4_FLAG_MASK_PNFS
            | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;
        if a.flags & !FLAGS_A != 0 {
            return Res4::Err(Nfsstat4::NFS4ERR_INVAL);
        }
        if a.state_protect != StateProtect4A::None {
            return Res4::Err(Nfsstat4::NFS4ERR_NOTSUPP);
        }
        let owner = &a.clientowner.ownerid.0;
        let verf = a.clientowner.verifier.0;
        let find = |confirmed: bool| {
            self.clients
                .iter()
                .find(|(_, c)| c.confirmed == confirmed && c.ownerid == *owner)
                .map(|(&id, c)| (id, c.verifier, c.cs_seq))
        };
        let confirmed = find(true);
        let id = if a.flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0 {
            match confirmed {
                None => return Res4::Err(Nfsstat4::NFS4ERR_NOENT),
                Some((_, v, _)) if v != verf => return Res4::Err(Nfsstat4::NFS4ERR_NOT_SAME),
                Some((id, _, _)) => id,
            }
        } else if let Some((id, _, _)) = confirmed.filter(|c| c.1 == verf) {
            id
        } else {
            if let Some((old, _, _)) = find(false) {
                self.purge_client(old);
            }
            if self.clients.len() >= MAX_CLIENTS {
                return Res4::Err(Nfsstat4::NFS4ERR_DELAY);
            }
            self.next_client = self.next_client.wrapping_add(1);
            let id = (u64::from(self.boot) << 32) | u64::from(self.next_client);
            self.clients.insert(
                id,
                Client {
                    ownerid: owner.clone(),
                    verifier: verf,
                    confirmed: false,
                    cs_seq: 1,
                    cs_reply: None,
                    last_renew: now,
                    sessions: Vec::new(),
                    reclaim_complete: false,
                },
            );
            id
        };
        let Some(c) = self.clients.get_mut(&id) else {
            return Res4::Err(Nfsstat4::NFS4ERR_SERVERFAULT);
        };
        c.last_renew = now;
        let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
        if c.confirmed {
            flags |= EXCHGID4_FLAG_CONFIRMED_R;
        }
        Res4::Ok(ExchangeId4ResOk {
            clientid: id,
            sequenceid: c.cs_seq,
            flags,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Bounded(owner_major.clone()),
            },
            server_scope: Bounded(owner_major.clone()),
            server_impl_id: Bounded(vec![NfsImplId4 {
                nii_domain: Bounded(Bytes::from_static(b"nfsrdma")),
                nii_name: Bounded(Bytes::from_static(b"nfsrdma nfs-server")),
                nii_date: nfs::v4::Nfstime4::default(),
            }]),
        })
    }

    fn grant(&self, want: &ChannelAttrs4) -> ChannelAttrs4 {
        let l = &self.limits;
        ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: want.maxrequestsize.min(l.max_request),
            maxresponsesize: want.maxresponsesize.min(l.max_response),
            maxresponsesize_cached: want.maxresponsesize_cached.min(l.max_response_cached),
            maxoperations: want.maxoperations.min(l.max_ops),
            maxrequests: want.maxrequests.clamp(1, l.max_slots),
            rdma_ird: Bounded(Vec::new()),
        }
    }

    /// CREATE_SESSION (RFC 8881 §18.36.4): the client-id sequence check
    /// with its one-entry reply cache, confirmation of the client id, and
    /// the channel attributes cut to the server's limits. With
    /// CREATE_SESSION4_FLAG_CONN_BACK_CHAN the connection becomes the
    /// client's back channel (RFC 8881 §2.10.3.1, §18.36.3).
    pub(crate) fn create_session(
        &mut self,
        a: &CreateSession4Args,
        conn: u64,
        now: Duration,
    ) -> Res4<CreateSession4ResOk> {
        let Some(c) = self.clients.get(&a.clientid) else {
            return Res4::Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
        };
        if a.sequence == c.cs_seq.wrapping_sub(1) {
            if let Some(r) = &c.cs_reply {
                return Res4::Ok(r.clone());
            }
        }
        if a.sequence != c.cs_seq {
            return Res4::Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        }
        if a.fore_chan_attrs.maxrequests == 0 || a.fore_chan_attrs.maxoperations == 0 {
            return Res4::Err(Nfsstat4::NFS4ERR_INVAL);
        }
        // RFC 8881 §18.36.4: out of resources for another reply cache is
        // NFS4ERR_NOSPC; a client may not pile up sessions without bound.
        if c.sessions.len() >= MAX_SESSIONS_PER_CLIENT {
            return Res4::Err(Nfsstat4::NFS4ERR_NOSPC);
        }
        let fore = self.grant(&a.fore_chan_attrs);
        let mut back = a.back_chan_attrs.clone();
        back.rdma_ird = Bounded(Vec::new());
        if !c.confirmed {
            let owner = c.ownerid.clone();
            let old: Vec<u64> = self
                .clients
                .iter()
                .filter(|(&id, o)| id != a.clientid && o.ownerid == owner)
                .map(|(&id, _)| id)
                .collect();
            for id in old {
                self.purge_client(id);
            }
        }
        self.next_session = self.next_session.wrapping_add(1);
        let mut sid = [0u8; 16];
        sid[..8].copy_from_slice(&a.clientid.to_be_bytes());
        sid[8..12].copy_from_slice(&self.next_session.to_be_bytes());
        sid[12..].copy_from_slice(&self.boot.to_be_bytes());
        let slots = (0..fore.maxrequests).map(|_| Slot::default()).collect();
        let ok = CreateSession4ResOk {
            sessionid: FixedOpaque(sid),
            sequence: a.sequence,
            flags: a.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: fore.clone(),
            back_chan_attrs: back,
        };
        self.sessions.insert(
            sid,
            Session {
                clientid: a.clientid,
                fore,
                slots,
                conns: HashSet::from([conn]),
                cb_program: a.cb_program,
            },
        );
        let Some(c) = self.clients.get_mut(&a.clientid) else {
            return Res4::Err(Nfsstat4::NFS4ERR_SERVERFAULT);
        };
        c.confirmed = true;
        c.cs_seq = c.cs_seq.wrapping_add(1);
        c.cs_reply = Some(ok.clone());
        c.last_renew = now;
        c.sessions.push(sid);
        Res4::Ok(ok)
    }

    /// SEQUENCE (RFC 8881 §18.46.3) with the slot rules of §2.10.6.1: the
    /// next sequence id runs the request, the same one is a retry answered
    /// from the slot's reply cache (NFS4ERR_DELAY while the first is still
    /// running, NFS4ERR_RETRY_UNCACHED_REP when it was not cached,
    /// NFS4ERR_SEQ_FALSE_RETRY when the arguments differ), anything else is
    /// NFS4ERR_SEQ_MISORDERED. The request size and operation count are
    /// checked against the session first (§2.10.6.4, §18.36.3).
    pub(crate) fn sequence(
        &mut self,
        a: &Sequence4Args,
        numops: usize,
        request_size: usize,
        args_hash: u64,
        now: Duration,
    ) -> SeqOutcome {
        let Some(s) = self.sessions.get_mut(&a.sessionid.0) else {
            return SeqOutcome::Err(Nfsstat4::NFS4ERR_BADSESSION);
        };
        if numops > s.fore.maxoperations as usize {
            return SeqOutcome::Err(Nfsstat4::NFS4ERR_TOO_MANY_OPS);
        }
        if request_size > s.fore.maxrequestsize as usize {
            return SeqOutcome::Err(Nfsstat4::NFS4ERR_REQ_TOO_BIG);
        }
        let highest = s.fore.maxrequests.saturating_sub(1);
        let Some(slot) = s.slots.get_mut(a.slotid as usize) else {
            return SeqOutcome::Err(Nfsstat4::NFS4ERR_BADSLOT);
        };
        if slot.used && a.sequenceid == slot.seqid {
            if slot.busy {
                return SeqOutcome::Err(Nfsstat4::NFS4ERR_DELAY);
            }
            if slot.args_hash != args_hash {
                return SeqOutcome::Err(Nfsstat4::NFS4ERR_SEQ_FALSE_RETRY);
            }
            return match &slot.reply {
                Some(r) => SeqOutcome::Replay(r.clone()),
                None => SeqOutcome::Err(Nfsstat4::NFS4ERR_RETRY_UNCACHED_REP),
            };
        }
        if a.sequenceid != slot.seqid.wrapping_add(1) {
            return SeqOutcome::Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        }
        *slot = Slot {
            used: true,
            seqid: a.sequenceid,
            busy: true,
            reply: None,
            args_hash,
        };
        let ctx = SessCtx {
            sessionid: a.sessionid.0,
            clientid: s.clientid,
            slot: a.slotid,
            cachethis: a.cachethis,
            max_response: s.fore.maxresponsesize,
            max_response_cached: s.fore.maxresponsesize_cached,
        };
        if let Some(c) = self.clients.get_mut(&ctx.clientid) {
            c.last_renew = now;
        }
        SeqOutcome::New(
            Sequence4ResOk {
                sessionid: a.sessionid,
                sequenceid: a.sequenceid,
                slotid: a.slotid,
                highest_slotid: highest,
                target_highest_slotid: highest,
                status_flags: 0,
            },
            ctx,
        )
    }

    /// Ends the request on a slot, keeping `reply` for retries.
    pub(crate) fn finish_slot(&mut self, sessionid: &[u8; 16], slot: u32, reply: Option<XdrBuf>) {
        if let Some(s) = self
            .sessions
            .get_mut(sessionid)
            .and_then(|s| s.slots.get_mut(slot as usize))
        {
            s.busy = false;
            s.reply = reply;
        }
    }

    /// The client and `csa_cb_program` of a session.
    pub(crate) fn cb_program_of(&self, sid: &[u8; 16]) -> Option<(u64, u32)> {
        self.sessions.get(sid).map(|s| (s.clientid, s.cb_program))
    }

    /// DESTROY_SESSION (RFC 8881 §18.37.3).
    pub(crate) fn destroy_session(&mut self, sid: &[u8; 16]) -> Nfsstat4 {
        let Some(s) = self.sessions.remove(sid) else {
            return Nfsstat4::NFS4ERR_BADSESSION;
        };
        self.delegs.session_gone(sid);
        if let Some(c) = self.clients.get_mut(&s.clientid) {
            c.sessions.retain(|x| x != sid);
        }
        Nfsstat4::NFS4_OK
    }

    /// DESTROY_CLIENTID (RFC 8881 §18.50.3): only a client without
    /// sessions or state.
    pub(crate) fn destroy_clientid(&mut self, id: u64) -> Nfsstat4 {
        let Some(c) = self.clients.get(&id) else {
            return Nfsstat4::NFS4ERR_STALE_CLIENTID;
        };
        if !c.sessions.is_empty() || self.states.values().any(|s| s.clientid() == id) {
            return Nfsstat4::NFS4ERR_CLIENTID_BUSY;
        }
        self.clients.remove(&id);
        Nfsstat4::NFS4_OK
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34.3): the connection joins the
    /// fore channel and, as asked, the back channel (RFC 8881 §2.10.3.1):
    /// callbacks then go on it.
    pub(crate) fn bind_conn(
        &mut self,
        a: &BindConnToSession4Args,
        conn: u64,
        now: Duration,
    ) -> Res4<BindConnToSession4ResOk> {
        let Some(s) = self.sessions.get_mut(&a.sessid.0) else {
            return Res4::Err(Nfsstat4::NFS4ERR_BADSESSION);
        };
        let dir = match a.dir {
            ChannelDir4::CDFC4_FORE => ChannelDir4::CDFC4_FORE,
            ChannelDir4::CDFC4_BACK => ChannelDir4::CDFC4_BACK,
            ChannelDir4::CDFC4_FORE_OR_BOTH | ChannelDir4::CDFC4_BACK_OR_BOTH => ChannelDir4(3),
            _ => return Res4::Err(Nfsstat4::NFS4ERR_INVAL),
        };
        s.conns.insert(conn);
        let id = s.clientid;

        if let Some(c) = self.clients.get_mut(&id) {
            c.last_renew = now;
        }
        Res4::Ok(BindConnToSession4ResOk {
            sessid: a.sessid,
            dir,
            use_conn_in_rdma_mode: false,
        })
    }

    /// RECLAIM_COMPLETE (RFC 8881 §18.51.3). With nothing to reclaim
    /// (no grace period is kept), only a repeat is an error.
    pub(crate) fn reclaim_complete(&mut self, clientid: u64, one_fs: bool) -> Nfsstat4 {
        let Some(c) = self.clients.get_mut(&clientid) else {
            return Nfsstat4::NFS4ERR_STALE_CLIENTID;
        };
        if one_fs {
            return Nfsstat4::NFS4_OK;
        }
        if c.reclaim_complete {
            return Nfsstat4::NFS4ERR_COMPLETE_ALREADY;
        }
        c.reclaim_complete = true;
        Nfsstat4::NFS4_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_a_bounded_number_of_expired_clients() {
        let mut t = StateTable::new(SessionLimits::default(), 1);
        t.expired.extend(0..MAX_CLIENTS as u64);
        let ex = ExchangeId4Args {
            clientowner: ClientOwner4 {
                verifier: FixedOpaque([2; 8]),
                ownerid: Bounded(Bytes::from_static(b"late")),
            },
            flags: 0,
            state_protect: StateProtect4A::None,
            client_impl_id: Bounded(Vec::new()),
        };
        let Res4::Ok(id) = t.exchange_id(&ex, &Bytes::from_static(b"srv"), Duration::ZERO) else {
            panic!("EXCHANGE_ID refused");
        };
        t.expire(t.limits.lease + Duration::from_secs(1));
        assert!(t.expired.len() <= MAX_CLIENTS);
        assert!(t.expired.contains(&id.clientid));
    }

    #[test]
    fn refuses_sessions_beyond_the_per_client_bound() {
        let mut t = StateTable::new(SessionLimits::default(), 1);
        let now = Duration::ZERO;
        let ex = ExchangeId4Args {
            clientowner: ClientOwner4 {
                verifier: FixedOpaque([1; 8]),
                ownerid: Bounded(Bytes::from_static(b"client")),
            },
            flags: 0,
            state_protect: StateProtect4A::None,
            client_impl_id: Bounded(Vec::new()),
        };
        let Res4::Ok(id) = t.exchange_id(&ex, &Bytes::from_static(b"srv"), now) else {
            panic!("EXCHANGE_ID refused");
        };
        let attrs = ChannelAttrs4 {
            maxrequestsize: 4096,
            maxresponsesize: 4096,
            maxresponsesize_cached: 4096,
            maxoperations: 8,
            maxrequests: 64,
            ..ChannelAttrs4::default()
        };
        let mut args = CreateSession4Args {
            clientid: id.clientid,
            sequence: id.sequenceid,
            flags: 0,
            fore_chan_attrs: attrs.clone(),
            back_chan_attrs: attrs,
            cb_program: 0,
            sec_parms: Bounded(Vec::new()),
        };
        for _ in 0..MAX_SESSIONS_PER_CLIENT {
            assert!(matches!(t.create_session(&args, 1, now), Res4::Ok(_)));
            args.sequence = args.sequence.wrapping_add(1);
        }
        assert!(matches!(
            t.create_session(&args, 1, now),
            Res4::Err(Nfsstat4::NFS4ERR_NOSPC)
        ));
        assert_eq!(t.sessions.len(), MAX_SESSIONS_PER_CLIENT);
    }
}

#[cfg(test)]
mod exchange_tests {
    use super::*;

    fn xid(owner: &'static [u8], verf: u8, flags: u32) -> ExchangeId4Args {
        ExchangeId4Args {
            clientowner: ClientOwner4 {
                verifier: FixedOpaque([verf; 8]),
                ownerid: Bounded(Bytes::from_static(owner)),
            },
            flags,
            state_protect: StateProtect4A::None,
            client_impl_id: Bounded(vec![]),
        }
    }

    fn cs(clientid: u64, sequence: u32) -> CreateSession4Args {
        let ch = ChannelAttrs4 {
            maxrequestsize: 1 << 30,
            maxresponsesize: 4096,
            maxresponsesize_cached: 1 << 30,
            maxoperations: 1000,
            maxrequests: 1000,
            ..ChannelAttrs4::default()
        };
        CreateSession4Args {
            clientid,
            sequence,
            flags: CREATE_SESSION4_FLAG_PERSIST | CREATE_SESSION4_FLAG_CONN_RDMA,
            fore_chan_attrs: ch.clone(),
            back_chan_attrs: ch,
            cb_program: 1,
            sec_parms: Bounded(vec![]),
        }
    }

    #[test]
    fn exchange_id_refuses_unknown_flags_protection_and_missing_updates() {
        let mut t = StateTable::new(SessionLimits::default(), 7);
        let owner = Bytes::from_static(b"srv");
        let now = Duration::ZERO;
        assert_eq!(
            t.exchange_id(&xid(b"c", 1, 0x0800_0000), &owner, now)
                .status(),
            Nfsstat4::NFS4ERR_INVAL
        );
        let mut a = xid(b"c", 1, 0);
        a.state_protect = StateProtect4A::MachCred(StateProtectOps4 {
            must_enforce: Default::default(),
            must_allow: Default::default(),
        });
        assert_eq!(
            t.exchange_id(&a, &owner, now).status(),
            Nfsstat4::NFS4ERR_NOTSUPP
        );
        let upd = xid(b"c", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A);
        assert_eq!(
            t.exchange_id(&upd, &owner, now).status(),
            Nfsstat4::NFS4ERR_NOENT
        );
        let Res4::Ok(r) = t.exchange_id(&xid(b"c", 1, 0), &owner, now) else {
            panic!()
        };
        assert_eq!(r.clientid >> 32, 7);
        assert!(matches!(
            t.create_session(&cs(r.clientid, r.sequenceid), 1, now),
            Res4::Ok(_)
        ));
        let other = xid(b"c", 2, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A);
        assert_eq!(
            t.exchange_id(&other, &owner, now).status(),
            Nfsstat4::NFS4ERR_NOT_SAME
        );
        assert!(
            matches!(t.exchange_id(&upd, &owner, now), Res4::Ok(u) if u.clientid == r.clientid)
        );
    }

    #[test]
    fn create_session_cuts_channels_to_the_server_limits() {
        let mut t = StateTable::new(SessionLimits::default(), 7);
        let Res4::Ok(r) = t.exchange_id(&xid(b"c", 1, 0), &Bytes::new(), Duration::ZERO) else {
            panic!()
        };
        let Res4::Ok(s) = t.create_session(&cs(r.clientid, r.sequenceid), 1, Duration::ZERO) else {
            panic!()
        };
        let l = SessionLimits::default();
        let f = &s.fore_chan_attrs;
        assert_eq!(f.maxrequestsize, l.max_request);
        assert_eq!(f.maxresponsesize, 4096);
        assert_eq!(f.maxresponsesize_cached, l.max_response_cached);
        assert_eq!((f.maxoperations, f.maxrequests), (l.max_ops, l.max_slots));
        assert_eq!(s.flags, 0);
        let mut zero = cs(r.clientid, r.sequenceid + 1);
        zero.fore_chan_attrs.maxrequests = 0;
        assert_eq!(
            t.create_session(&zero, 1, Duration::ZERO).status(),
            Nfsstat4::NFS4ERR_INVAL
        );
    }

    #[test]
    fn an_unconfirmed_client_expires_after_a_lease() {
        let mut t = StateTable::new(SessionLimits::default(), 7);
        let Res4::Ok(r) = t.exchange_id(&xid(b"c", 1, 0), &Bytes::new(), Duration::ZERO) else {
            panic!()
        };
        t.expire(Duration::from_secs(90));
        assert!(t.clients.contains_key(&r.clientid));
        t.expire(Duration::from_secs(91));
        assert_eq!(
            t.create_session(&cs(r.clientid, 1), 1, Duration::from_secs(91))
                .status(),
            Nfsstat4::NFS4ERR_STALE_CLIENTID
        );
    }
}
