//! Client ids, sessions, slots and the reply cache (RFC 8881 §2.4,
//! §2.10): the sans-IO table behind EXCHANGE_ID, CREATE_SESSION,
//! SEQUENCE, DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION and
//! leases. A leaf: it knows nothing of stateids or delegations; the
//! owner ([`super::state::StateTable`]) drains [`ClientTable::take_dropped`]
//! after each call to drop the state of clients that went away.
//! Time comes in as an argument ([`super::Clock`] supplies it).
//!
//! Bounds (each trips an [`oncrpc::limits::Limit`]):
//! - Confirmed clients: [`MAX_CLIENTS`]; EXCHANGE_ID for a new client
//!   beyond it is NFS4ERR_DELAY (RFC 8881 §15.1.1.3: "try again").
//! - Unconfirmed clients: [`MAX_UNCONFIRMED`]; beyond it the oldest
//!   unconfirmed record is evicted, so a flood of EXCHANGE_IDs never
//!   locks real clients out (RFC 8881 §18.35.4 lets the server drop an
//!   unconfirmed record at any time: its CREATE_SESSION then sees
//!   NFS4ERR_STALE_CLIENTID and the client starts over).
//! - Sessions per client: [`MAX_SESSIONS_PER_CLIENT`] (NFS4ERR_NOSPC,
//!   RFC 8881 §18.36.4).
//! - Reply cache: every slot may cache up to `ca_maxresponsesize_cached`
//!   bytes, and CREATE_SESSION reserves slots × that size from a
//!   server-wide budget ([`SessionLimits::reply_cache_bytes`]). When the
//!   budget is short the server grants fewer slots, then one smaller
//!   slot (RFC 8881 §18.36.3: the server may lower `ca_maxrequests` and
//!   `ca_maxresponsesize_cached`; §2.10.6.1), and NFS4ERR_DELAY when not
//!   even [`MIN_CACHED`] bytes are left. One client may reserve at most a
//!   quarter of the budget.
//!
//! Leases (RFC 8881 §8.3): SEQUENCE renews its client's lease. Deadlines
//! are kept ordered (a `BTreeSet` of (last renewal, client)), so
//! [`ClientTable::expire`] looks only at clients that did run out: their
//! sessions go (SEQUENCE then answers NFS4ERR_BADSESSION, CREATE_SESSION
//! NFS4ERR_STALE_CLIENTID) and the owner drops their stateids.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::*;
use nfs::v4::{Bitmap4, Nfsstat4, Res4};
use oncrpc::limits::Limit;
use oncrpc::msg::OpaqueAuth;
use xdr::{Bounded, FixedOpaque, XdrBuf};

use super::cbslots::{cb_cred, CbParams, MAX_CB_SLOTS};
use super::principal::Principal;

mod v40;

static CLIENTS: Limit = Limit::new("nfs4.clients");
static UNCONFIRMED: Limit = Limit::new("nfs4.unconfirmed_clients");
static SESSIONS: Limit = Limit::new("nfs4.sessions_per_client");
static REPLY_CACHE: Limit = Limit::new("nfs4.reply_cache_bytes");
static SESSION_CONNS: Limit = Limit::new("nfs4.session_connections");
static SLOTS: Limit = Limit::new("nfs4.session_slots");

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
    /// Bytes all sessions' reply caches may reserve together (slots ×
    /// `ca_maxresponsesize_cached` per session); CREATE_SESSION grants
    /// fewer or smaller slots when it runs short. Default 64 MiB.
    pub reply_cache_bytes: u64,
    /// Longest a DELEGRETURN waits for WRITEs of its file in progress
    /// (the holder's flush, RFC 8881 §10.4.1) before the delegation goes
    /// with some still running (limit `nfs4.delegreturn_write_wait`).
    /// Default 10 s.
    pub delegreturn_write_wait: Duration,
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
            reply_cache_bytes: 64 << 20,
            delegreturn_write_wait: super::inflight::DRAIN_WAIT,
        }
    }
}

/// Most confirmed client records at once; EXCHANGE_ID for a new client
/// beyond it is NFS4ERR_DELAY.
pub(crate) const MAX_CLIENTS: usize = 1 << 14;

/// Most unconfirmed client records at once; beyond it the oldest goes.
pub(crate) const MAX_UNCONFIRMED: usize = 1 << 10;

/// Most sessions one client id may hold at once.
pub(crate) const MAX_SESSIONS_PER_CLIENT: usize = 16;

/// The smallest reply cache slot granted when the budget runs short:
/// enough for the replies Linux asks to cache (OPEN, LOCK, CLOSE).
pub(crate) const MIN_CACHED: u32 = 2048;

/// Most connections remembered as bound to one session; beyond it the
/// one bound longest ago is forgotten (it binds again with its next
/// SEQUENCE, RFC 8881 §2.10.3.1).
pub(crate) const MAX_SESSION_CONNS: usize = 64;

/// The smallest fore channel `ca_maxrequestsize` that works: an RPC call
/// header with AUTH_NONE (40 bytes), the COMPOUND header with an empty tag
/// (12) and SEQUENCE (36).
pub(crate) const MIN_FORE_REQUEST: u32 = 88;
/// The smallest fore channel `ca_maxresponsesize` that works: an RPC
/// reply header (24 bytes), the COMPOUND result header (12) and the
/// SEQUENCE result (40).
pub(crate) const MIN_FORE_RESPONSE: u32 = 76;
/// The smallest back channel `ca_maxrequestsize` this server's callbacks
/// fit: an RPC call header (40 bytes), the CB_COMPOUND header (16),
/// CB_SEQUENCE (40) and CB_RECALL with the longest handle (160).
pub(crate) const MIN_BACK_REQUEST: u32 = 256;
/// The smallest back channel `ca_maxresponsesize`: an RPC reply header
/// (24 bytes), the CB_COMPOUND result header (12), the CB_SEQUENCE result
/// (40) and the CB_RECALL status (8).
pub(crate) const MIN_BACK_RESPONSE: u32 = 84;

/// CREATE_SESSION flags defined by RFC 8881 §18.36.3.
/// The operations SP4_MACH_CRED protects (RFC 8881 §18.35.3: the lease
/// operations, the list Linux's nfsd grants and its client requires):
/// BIND_CONN_TO_SESSION, EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION,
/// DESTROY_CLIENTID. `spo_must_allow` is granted empty: no operation is
/// let through on the machine credential that its own checks would
/// refuse.
pub(crate) const MACH_CRED_ENFORCED: [u32; 5] = [
    nfs::v4::Opnum4::OP_BIND_CONN_TO_SESSION.0,
    nfs::v4::Opnum4::OP_EXCHANGE_ID.0,
    nfs::v4::Opnum4::OP_CREATE_SESSION.0,
    nfs::v4::Opnum4::OP_DESTROY_SESSION.0,
    nfs::v4::Opnum4::OP_DESTROY_CLIENTID.0,
];

const CREATE_SESSION4_FLAGS: u32 = CREATE_SESSION4_FLAG_PERSIST
    | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
    | CREATE_SESSION4_FLAG_CONN_RDMA;

/// The callback credential of `csa_sec_parms` ([`cb_cred`]); an empty
/// list states no preference and gets AUTH_NONE.
fn session_cb_cred(parms: &[CallbackSecParms4]) -> Option<OpaqueAuth> {
    if parms.is_empty() {
        return Some(OpaqueAuth::NONE);
    }
    cb_cred(parms)
}

/// What EXCHANGE_ID does when the owner has a confirmed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confirmed {
    /// Answer with the record's client id (cases 2 and 6).
    Keep,
    /// The record and its state go now; a new unconfirmed record with a
    /// new client id takes its place (case 3 without state).
    Replace,
    /// A new unconfirmed record with a new client id; the confirmed one
    /// stays until CREATE_SESSION confirms the new (case 5).
    NewIncarnation,
    /// Refused (cases 3 with state, 8 and 9).
    Refuse(Nfsstat4),
}

/// RFC 8881 §18.35.4, the cases with a confirmed record of the same
/// owner: `update` is EXCHGID4_FLAG_UPD_CONFIRMED_REC_A, `same_principal`
/// and `same_verifier` compare the call with the record, `busy` says the
/// record has state (sessions, stateids, delegations). The principal is
/// checked before the verifier, as Linux's nfsd does.
fn on_confirmed(update: bool, same_principal: bool, same_verifier: bool, busy: bool) -> Confirmed {
    match (update, same_principal, same_verifier) {
        // Case 9: update but wrong principal.
        (true, false, _) => Confirmed::Refuse(Nfsstat4::NFS4ERR_PERM),
        // Case 8: update but wrong verifier.
        (true, true, false) => Confirmed::Refuse(Nfsstat4::NFS4ERR_NOT_SAME),
        // Case 6: update; case 2: the same client again.
        (true, true, true) | (false, true, true) => Confirmed::Keep,
        // Case 3: client collision. Another principal may not take over
        // an owner that holds state; one without state is replaced.
        (false, false, _) if busy => Confirmed::Refuse(Nfsstat4::NFS4ERR_CLID_INUSE),
        (false, false, _) => Confirmed::Replace,
        // Case 5: the client restarted.
        (false, true, false) => Confirmed::NewIncarnation,
    }
}

/// RFC 8881 §18.36.3: a channel whose sizes cannot carry even SEQUENCE
/// (or CB_SEQUENCE and a recall) is NFS4ERR_TOOSMALL, as are no slots or
/// no operations.
fn check_channels(a: &CreateSession4Args) -> Result<(), Nfsstat4> {
    let (f, b) = (&a.fore_chan_attrs, &a.back_chan_attrs);
    let too_small = f.maxrequestsize < MIN_FORE_REQUEST
        || f.maxresponsesize < MIN_FORE_RESPONSE
        || f.maxoperations == 0
        || f.maxrequests == 0
        || b.maxrequestsize < MIN_BACK_REQUEST
        || b.maxresponsesize < MIN_BACK_RESPONSE
        || b.maxoperations < 2
        || b.maxrequests == 0;
    if too_small {
        return Err(Nfsstat4::NFS4ERR_TOOSMALL);
    }
    Ok(())
}

/// One slot of a session's fore channel (RFC 8881 §2.10.6.1).
#[derive(Debug, Default)]
struct Slot {
    used: bool,
    seqid: u32,
    busy: bool,
    reply: Option<XdrBuf>,
    args_hash: u64,
}

/// A session (RFC 8881 §2.10).
#[derive(Debug)]
struct Session {
    clientid: u64,
    fore: ChannelAttrs4,
    slots: Vec<Slot>,
    /// `csa_cb_program`, the credential from `csa_sec_parms` and the
    /// back channel's slots (RFC 8881 §18.36.3; BACKCHANNEL_CTL, §18.33).
    cb: CbParams,
    /// Connections bound to the session (RFC 8881 §2.10.3.1), oldest
    /// first, at most [`MAX_SESSION_CONNS`].
    conns: Vec<u64>,
}

impl Session {
    /// Bytes reserved in the reply cache budget.
    fn reserved(&self) -> u64 {
        self.slots.len() as u64 * u64::from(self.fore.maxresponsesize_cached)
    }

    /// Bytes of replies cached now.
    fn cached(&self) -> u64 {
        self.slots
            .iter()
            .filter_map(|s| s.reply.as_ref())
            .map(|r| r.len() as u64)
            .sum()
    }
}

/// A client record (RFC 8881 §2.4).
#[derive(Debug)]
struct Client {
    ownerid: Bytes,
    verifier: [u8; 8],
    confirmed: bool,
    cs_seq: u32,
    cs_reply: Option<CreateSession4ResOk>,
    last_renew: Duration,
    sessions: Vec<[u8; 16]>,
    reclaim_complete: bool,
    /// Who established it: the caller of its EXCHANGE_ID or
    /// SETCLIENTID.
    principal: Principal,
    /// Reply cache bytes its sessions reserve.
    reserved: u64,
    /// SP4_MACH_CRED state protection (RFC 8881 §18.35.3): the
    /// operations in [`MACH_CRED_ENFORCED`] must come from `principal`
    /// under RPCSEC_GSS integrity or privacy.
    mach_cred: bool,
    /// The NFSv4.0 part of a record made by SETCLIENTID.
    v40: Option<v40::V40Client>,
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

/// Client records and sessions of a server instance.
#[derive(Debug)]
pub(crate) struct ClientTable {
    limits: SessionLimits,
    boot: u32,
    next_client: u32,
    next_session: u32,
    clients: HashMap<u64, Client>,
    /// (owner id, confirmed) → client id (RFC 8881 §2.4: at most one
    /// confirmed and one unconfirmed record per owner).
    owners: HashMap<(Bytes, bool), u64>,
    /// (last renewal, client id): lease deadlines in order.
    deadlines: BTreeSet<(Duration, u64)>,
    /// Unconfirmed client ids, oldest (lowest) first.
    unconfirmed: BTreeSet<u64>,
    sessions: HashMap<[u8; 16], Session>,
    /// Reply cache bytes reserved by all sessions.
    reserved: u64,
    /// Reply cache bytes held by cached replies.
    cached: u64,
    /// Clients removed since the owner last asked.
    dropped: Vec<u64>,
    /// Owner keys of confirmed clients that expired or were destroyed
    /// since the owner last asked: their stable records go.
    forgotten: Vec<Bytes>,
    /// Connection id → sessions it is bound to (idle connections bound to
    /// a session are kept open: callbacks may use them).
    bound: HashMap<u64, u32>,
}

impl ClientTable {
    /// A fresh table; `boot` distinguishes this instance's ids from a
    /// previous one's.
    pub(crate) fn new(limits: SessionLimits, boot: u32) -> Self {
        Self {
            limits,
            boot,
            next_client: 0,
            next_session: 0,
            clients: HashMap::new(),
            owners: HashMap::new(),
            deadlines: BTreeSet::new(),
            unconfirmed: BTreeSet::new(),
            sessions: HashMap::new(),
            reserved: 0,
            cached: 0,
            dropped: Vec::new(),
            forgotten: Vec::new(),
            bound: HashMap::new(),
        }
    }

    /// Takes `boot` as this instance's boot number (before any client
    /// id is handed out).
    pub(crate) fn set_boot(&mut self, boot: u32) {
        self.boot = boot;
    }

    /// Owner keys of confirmed clients that expired or were destroyed
    /// since the last call, unless another live confirmed record has the
    /// same key (a new incarnation).
    pub(crate) fn take_forgotten(&mut self) -> Vec<Bytes> {
        let mut keys = std::mem::take(&mut self.forgotten);
        keys.retain(|k| !self.owners.contains_key(&(k.clone(), true)));
        keys
    }

    /// What a stable record of client `id` holds: (owner key, principal
    /// ([`Principal::record_id`]), whether it is an NFSv4.0 client,
    /// whether it sent RECLAIM_COMPLETE).
    pub(crate) fn record_info(&self, id: u64) -> Option<(Bytes, u32, bool, bool)> {
        let c = self.clients.get(&id)?;
        Some((
            c.ownerid.clone(),
            c.principal.record_id(),
            c.v40.is_some(),
            c.reclaim_complete,
        ))
    }

    /// The limits the table was made with.
    pub(crate) fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// Client ids removed (expired, replaced, evicted, destroyed) since
    /// the last call; their stateids and delegations must go too.
    pub(crate) fn take_dropped(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.dropped)
    }

    /// (client records, sessions).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.clients.len(), self.sessions.len())
    }

    /// (reserved, cached) reply cache bytes over all sessions.
    pub(crate) fn reply_cache_bytes(&self) -> (u64, u64) {
        (self.reserved, self.cached)
    }

    fn renew(&mut self, id: u64, now: Duration) {
        if let Some(c) = self.clients.get_mut(&id) {
            self.deadlines.remove(&(c.last_renew, id));
            c.last_renew = now;
            self.deadlines.insert((now, id));
        }
    }

    /// Drops every client whose lease ran out before `now` (RFC 8881
    /// §8.3), with its sessions; returns their ids.
    pub(crate) fn expire(&mut self, now: Duration) -> Vec<u64> {
        let lease = self.limits.lease;
        let mut dead = Vec::new();
        while let Some(&(t, id)) = self.deadlines.first() {
            if now.saturating_sub(t) <= lease {
                break;
            }
            tracing::debug!(clientid = id, "NFSv4 lease expired");
            self.forget(id);
            self.remove_client(id);
            dead.push(id);
        }
        dead
    }

    /// Marks confirmed client `id`'s stable record for removal.
    fn forget(&mut self, id: u64) {
        if let Some(c) = self.clients.get(&id).filter(|c| c.confirmed) {
            self.forgotten.push(c.ownerid.clone());
        }
    }

    fn remove_client(&mut self, id: u64) {
        let Some(c) = self.clients.remove(&id) else {
            return;
        };
        self.deadlines.remove(&(c.last_renew, id));
        self.unconfirmed.remove(&id);
        if self.owners.get(&(c.ownerid.clone(), c.confirmed)) == Some(&id) {
            self.owners.remove(&(c.ownerid, c.confirmed));
        }
        for s in c.sessions {
            self.drop_session(&s);
        }
        self.dropped.push(id);
    }

    fn drop_session(&mut self, sid: &[u8; 16]) -> Option<Session> {
        let s = self.sessions.remove(sid)?;
        for c in &s.conns {
            self.unbind(*c);
        }
        self.reserved = self.reserved.saturating_sub(s.reserved());
        self.cached = self.cached.saturating_sub(s.cached());
        if let Some(c) = self.clients.get_mut(&s.clientid) {
            c.reserved = c.reserved.saturating_sub(s.reserved());
            c.sessions.retain(|x| x != sid);
        }
        Some(s)
    }

    /// Room for a new client record: the oldest unconfirmed records go
    /// past [`MAX_UNCONFIRMED`]; a full confirmed table is NFS4ERR_DELAY.
    fn make_room(&mut self) -> Result<(), Nfsstat4> {
        while self.unconfirmed.len() >= MAX_UNCONFIRMED {
            let Some(old) = self.unconfirmed.pop_first() else {
                break;
            };
            UNCONFIRMED.trip(format_args!(
                "evicted unconfirmed NFSv4 client {old:#x}: {MAX_UNCONFIRMED} unconfirmed"
            ));
            self.remove_client(old);
        }
        if self.clients.len() - self.unconfirmed.len() >= MAX_CLIENTS {
            CLIENTS.trip(format_args!(
                "EXCHANGE_ID refused (NFS4ERR_DELAY): {MAX_CLIENTS} confirmed clients"
            ));
            return Err(Nfsstat4::NFS4ERR_DELAY);
        }
        Ok(())
    }

    /// EXCHANGE_ID (RFC 8881 §18.35.4) from `principal` (`protected`:
    /// under RPCSEC_GSS integrity or privacy): the nine cases of §18.35.4
    /// (see [`on_confirmed`] for those with a confirmed record of the
    /// owner); without one, an update is NFS4ERR_NOENT (case 7) and
    /// anything else makes a new unconfirmed record (cases 1 and 4).
    /// `has_state` says whether a client holds stateids or delegations.
    /// State protection (§18.35.3): SP4_NONE, or SP4_MACH_CRED, which
    /// must come protected (NFS4ERR_INVAL otherwise, as Linux's nfsd
    /// answers) and binds [`MACH_CRED_ENFORCED`] to the caller; SP4_SSV
    /// is NFS4ERR_NOTSUPP.
    pub(crate) fn exchange_id(
        &mut self,
        a: &ExchangeId4Args,
        owner_major: &Bytes,
        principal: &Principal,
        protected: bool,
        has_state: impl Fn(u64) -> bool,
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
        let mach = match &a.state_protect {
            StateProtect4A::None => false,
            StateProtect4A::MachCred(_) if protected => true,
            StateProtect4A::MachCred(_) => return Res4::Err(Nfsstat4::NFS4ERR_INVAL),
            StateProtect4A::Ssv(_) => return Res4::Err(Nfsstat4::NFS4ERR_NOTSUPP),
        };
        let owner = &a.clientowner.ownerid.0;
        let verf = a.clientowner.verifier.0;
        let update = a.flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
        let confirmed = self.owners.get(&(owner.clone(), true)).and_then(|&id| {
            let c = self.clients.get(&id)?;
            let busy = !c.sessions.is_empty() || has_state(id);
            let same = c.principal == *principal;
            // §18.35.3: EXCHANGE_ID is in spo_must_enforce: the owner's
            // own principal acting on a protected record must be protected.
            let outcome = if same && c.mach_cred && !protected {
                Confirmed::Refuse(Nfsstat4::NFS4ERR_WRONG_CRED)
            } else {
                on_confirmed(update, same, c.verifier == verf, busy)
            };
            Some((id, outcome))
        });
        let id = match confirmed {
            Some((id, Confirmed::Keep)) => id,
            Some((_, Confirmed::Refuse(e))) => return Res4::Err(e),
            Some((old, Confirmed::Replace)) => {
                self.forget(old);
                self.remove_client(old);
                match self.new_client(owner, verf, principal, now) {
                    Ok(id) => id,
                    Err(e) => return Res4::Err(e),
                }
            }
            None if update => return Res4::Err(Nfsstat4::NFS4ERR_NOENT),
            Some((_, Confirmed::NewIncarnation)) | None => {
                match self.new_client(owner, verf, principal, now) {
                    Ok(id) => id,
                    Err(e) => return Res4::Err(e),
                }
            }
        };
        self.renew(id, now);
        let Some(c) = self.clients.get_mut(&id) else {
            return Res4::Err(Nfsstat4::NFS4ERR_SERVERFAULT);
        };
        c.mach_cred |= mach;
        let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
        if c.confirmed {
            flags |= EXCHGID4_FLAG_CONFIRMED_R;
        }
        let state_protect = if c.mach_cred {
            StateProtect4R::MachCred(StateProtectOps4 {
                must_enforce: Bitmap4::from_bits(&MACH_CRED_ENFORCED),
                must_allow: Bitmap4::new(),
            })
        } else {
            StateProtect4R::None
        };
        Res4::Ok(ExchangeId4ResOk {
            clientid: id,
            sequenceid: c.cs_seq,
            flags,
            state_protect,
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

    /// A new unconfirmed record for `owner` made by `principal`, with a
    /// new client id, replacing an older unconfirmed one (RFC 8881
    /// §18.35.4, cases 1, 3, 4 and 5).
    fn new_client(
        &mut self,
        owner: &Bytes,
        verf: [u8; 8],
        principal: &Principal,
        now: Duration,
    ) -> Result<u64, Nfsstat4> {
        if let Some(&old) = self.owners.get(&(owner.clone(), false)) {
            self.remove_client(old);
        }
        self.make_room()?;
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
                principal: principal.clone(),
                reserved: 0,
                mach_cred: false,
                v40: None,
            },
        );
        self.deadlines.insert((now, id));
        self.unconfirmed.insert(id);
        self.owners.insert((owner.clone(), false), id);
        Ok(id)
    }

    fn grant(&self, want: &ChannelAttrs4) -> ChannelAttrs4 {
        let l = &self.limits;
        if want.maxrequests > l.max_slots {
            SLOTS.trip(format_args!(
                "CREATE_SESSION asked for {} slots; granted {}",
                want.maxrequests, l.max_slots
            ));
        }
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

    /// Fits the fore channel's reply cache into what is left of the
    /// budget (RFC 8881 §18.36.3, §2.10.6.1): fewer slots first, then one
    /// slot of what is left, down to [`MIN_CACHED`]; below that
    /// NFS4ERR_DELAY until sessions go.
    fn fit_cache(&self, fore: &mut ChannelAttrs4, client_reserved: u64) -> Result<(), Nfsstat4> {
        let budget = self.limits.reply_cache_bytes;
        let room = budget
            .saturating_sub(self.reserved)
            .min((budget / 4).saturating_sub(client_reserved));
        let slot = u64::from(fore.maxresponsesize_cached);
        if slot * u64::from(fore.maxrequests) <= room {
            return Ok(());
        }
        let (want_slots, want_size) = (fore.maxrequests, fore.maxresponsesize_cached);
        if room >= slot {
            fore.maxrequests = u32::try_from(room / slot).unwrap_or(u32::MAX).max(1);
        } else if room >= u64::from(MIN_CACHED) {
            fore.maxrequests = 1;
            fore.maxresponsesize_cached = u32::try_from(room).unwrap_or(u32::MAX);
        } else {
            REPLY_CACHE.trip(format_args!(
                "CREATE_SESSION refused (NFS4ERR_DELAY): reply cache budget of {budget} bytes reserved"
            ));
            return Err(Nfsstat4::NFS4ERR_DELAY);
        }
        REPLY_CACHE.trip(format_args!(
            "CREATE_SESSION cut from {want_slots} slots x {want_size} to {} x {} bytes: reply cache budget {budget}",
            fore.maxrequests, fore.maxresponsesize_cached
        ));
        Ok(())
    }

    /// CREATE_SESSION (RFC 8881 §18.36.4) from `principal`: the
    /// client-id sequence check with its one-entry reply cache,
    /// confirmation of the client id, and the channel attributes cut to
    /// the server's limits and the reply cache budget. An unknown client
    /// id (never made, or replaced: §18.35.4 cases 3 to 5 hand out new
    /// ones) is NFS4ERR_STALE_CLIENTID; an unconfirmed one from another
    /// principal than its EXCHANGE_ID's NFS4ERR_CLID_INUSE, before the
    /// sequence id is looked at (§18.36.4; Linux's nfsd checks in the
    /// same order).
    pub(crate) fn create_session(
        &mut self,
        a: &CreateSession4Args,
        principal: &Principal,
        protected: bool,
        now: Duration,
    ) -> Res4<CreateSession4ResOk> {
        let Some(c) = self.clients.get(&a.clientid) else {
            return Res4::Err(Nfsstat4::NFS4ERR_STALE_CLIENTID);
        };
        if !c.confirmed && c.principal != *principal {
            return Res4::Err(Nfsstat4::NFS4ERR_CLID_INUSE);
        }
        if let Err(e) = self.mach_cred_check(a.clientid, principal, protected) {
            return Res4::Err(e);
        }
        if a.sequence == c.cs_seq.wrapping_sub(1) {
            if let Some(r) = &c.cs_reply {
                return Res4::Ok(r.clone());
            }
        }
        if a.sequence != c.cs_seq {
            return Res4::Err(Nfsstat4::NFS4ERR_SEQ_MISORDERED);
        }
        // RFC 8881 §18.36.3: flags this version does not define are
        // NFS4ERR_INVAL.
        if a.flags & !CREATE_SESSION4_FLAGS != 0 {
            return Res4::Err(Nfsstat4::NFS4ERR_INVAL);
        }
        if let Err(e) = check_channels(a) {
            return Res4::Err(e);
        }
        let Some(cred) = session_cb_cred(&a.sec_parms.0) else {
            return Res4::Err(Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP);
        };
        // RFC 8881 §18.36.4: out of resources for another reply cache is
        // NFS4ERR_NOSPC; a client may not pile up sessions without bound.
        if c.sessions.len() >= MAX_SESSIONS_PER_CLIENT {
            SESSIONS.trip(format_args!(
                "CREATE_SESSION refused (NFS4ERR_NOSPC): client {:#x} has {MAX_SESSIONS_PER_CLIENT} sessions",
                a.clientid
            ));
            return Res4::Err(Nfsstat4::NFS4ERR_NOSPC);
        }
        let mut fore = self.grant(&a.fore_chan_attrs);
        if let Err(e) = self.fit_cache(&mut fore, c.reserved) {
            return Res4::Err(e);
        }
        let mut back = a.back_chan_attrs.clone();
        back.rdma_ird = Bounded(Vec::new());
        back.maxrequests = back.maxrequests.min(MAX_CB_SLOTS);
        if !c.confirmed {
            self.confirm(a.clientid);
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
        let s = Session {
            clientid: a.clientid,
            fore,
            slots,
            cb: CbParams {
                clientid: a.clientid,
                program: a.cb_program,
                cred,
                slots: ok.back_chan_attrs.maxrequests,
            },
            conns: Vec::new(),
        };
        let reserved = s.reserved();
        self.sessions.insert(sid, s);
        self.reserved += reserved;
        self.renew(a.clientid, now);
        let Some(c) = self.clients.get_mut(&a.clientid) else {
            return Res4::Err(Nfsstat4::NFS4ERR_SERVERFAULT);
        };
        c.reserved += reserved;
        c.cs_seq = c.cs_seq.wrapping_add(1);
        c.cs_reply = Some(ok.clone());
        c.sessions.push(sid);
        Res4::Ok(ok)
    }

    /// Confirms `id`: the owner's other records (an earlier incarnation
    /// of the client) go (RFC 8881 §18.35.4, §18.36.4).
    fn confirm(&mut self, id: u64) {
        let Some(owner) = self.clients.get(&id).map(|c| c.ownerid.clone()) else {
            return;
        };
        if let Some(&old) = self.owners.get(&(owner.clone(), true)) {
            if old != id {
                self.remove_client(old);
            }
        }
        self.owners.remove(&(owner.clone(), false));
        self.unconfirmed.remove(&id);
        self.owners.insert((owner, true), id);
        if let Some(c) = self.clients.get_mut(&id) {
            c.confirmed = true;
        }
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
        let old = slot.reply.take().map_or(0, |r| r.len() as u64);
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
        self.cached = self.cached.saturating_sub(old);
        self.renew(ctx.clientid, now);
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

    /// Ends the request on a slot, keeping `reply` for retries when it
    /// fits the slot's `ca_maxresponsesize_cached`; the copy kept is
    /// compact, so the accounted bytes are the bytes held.
    pub(crate) fn finish_slot(&mut self, sessionid: &[u8; 16], slot: u32, reply: Option<XdrBuf>) {
        let Some(s) = self.sessions.get_mut(sessionid) else {
            return;
        };
        let max = s.fore.maxresponsesize_cached as usize;
        let Some(s) = s.slots.get_mut(slot as usize) else {
            return;
        };
        s.busy = false;
        let reply = reply
            .filter(|r| r.len() <= max)
            .map(|r| XdrBuf::from_bytes(r.to_bytes()));
        let old = s.reply.take().map_or(0, |r| r.len() as u64);
        let new = reply.as_ref().map_or(0, |r| r.len() as u64);
        s.reply = reply;
        self.cached = self.cached.saturating_sub(old) + new;
    }

    /// The callback parameters of a session.
    pub(crate) fn cb_params(&self, sid: &[u8; 16]) -> Option<CbParams> {
        self.sessions.get(sid).map(|s| s.cb.clone())
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33.3): a new callback program and
    /// credential for session `sid`; RPCSEC_GSS alone is
    /// NFS4ERR_ENCR_ALG_UNSUPP, as CREATE_SESSION.
    pub(crate) fn backchannel_ctl(
        &mut self,
        sid: &[u8; 16],
        a: &BackchannelCtl4Args,
    ) -> Result<CbParams, Nfsstat4> {
        let cred = session_cb_cred(&a.sec_parms.0).ok_or(Nfsstat4::NFS4ERR_ENCR_ALG_UNSUPP)?;
        let s = self
            .sessions
            .get_mut(sid)
            .ok_or(Nfsstat4::NFS4ERR_BADSESSION)?;
        s.cb.program = a.cb_program;
        s.cb.cred = cred;
        Ok(s.cb.clone())
    }

    /// Binds connection `conn` to session `sid` (RFC 8881 §2.10.3.1: by
    /// CREATE_SESSION, BIND_CONN_TO_SESSION, and SEQUENCE on a connection
    /// not yet bound, as clients without state protection may do).
    pub(crate) fn bind_to(&mut self, sid: &[u8; 16], conn: u64) {
        let Some(s) = self.sessions.get_mut(sid) else {
            return;
        };
        if s.conns.contains(&conn) {
            return;
        }
        let mut forgotten = None;
        if s.conns.len() >= MAX_SESSION_CONNS {
            let old = s.conns.remove(0);
            SESSION_CONNS.trip(format_args!(
                "session of client {:#x} forgets connection {old}: {MAX_SESSION_CONNS} bound",
                s.clientid
            ));
            forgotten = Some(old);
        }
        s.conns.push(conn);
        if let Some(old) = forgotten {
            self.unbind(old);
        }
        *self.bound.entry(conn).or_default() += 1;
    }

    fn unbind(&mut self, conn: u64) {
        if let Some(n) = self.bound.get_mut(&conn) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.bound.remove(&conn);
            }
        }
    }

    /// Whether connection `conn` is bound to any session.
    pub(crate) fn conn_in_session(&self, conn: u64) -> bool {
        self.bound.contains_key(&conn)
    }

    /// Whether connection `conn` is bound to session `sid`.
    pub(crate) fn is_bound(&self, sid: &[u8; 16], conn: u64) -> bool {
        self.sessions
            .get(sid)
            .is_some_and(|s| s.conns.contains(&conn))
    }

    /// SP4_MACH_CRED (RFC 8881 §18.35.3): an operation of
    /// [`MACH_CRED_ENFORCED`] on client `id` from `principal` (`protected`
    /// as for [`Self::exchange_id`]). A client with that protection takes
    /// it only from its machine credential: the principal of its
    /// EXCHANGE_ID under RPCSEC_GSS integrity or privacy; anything else is
    /// NFS4ERR_WRONG_CRED (§15.1.6.4: a principal not allowed to change
    /// this state; Linux's nfsd answers the same). An unknown client or
    /// one without protection passes (the operation decides).
    pub(crate) fn mach_cred_check(
        &self,
        id: u64,
        principal: &Principal,
        protected: bool,
    ) -> Result<(), Nfsstat4> {
        match self.clients.get(&id) {
            Some(c) if c.mach_cred && !(protected && c.principal == *principal) => {
                Err(Nfsstat4::NFS4ERR_WRONG_CRED)
            }
            _ => Ok(()),
        }
    }

    /// [`Self::mach_cred_check`] for the client of session `sid`.
    pub(crate) fn mach_cred_check_session(
        &self,
        sid: &[u8; 16],
        principal: &Principal,
        protected: bool,
    ) -> Result<(), Nfsstat4> {
        match self.sessions.get(sid) {
            Some(s) => self.mach_cred_check(s.clientid, principal, protected),
            None => Ok(()),
        }
    }

    /// DESTROY_SESSION (RFC 8881 §18.37.3).
    pub(crate) fn destroy_session(&mut self, sid: &[u8; 16]) -> Nfsstat4 {
        match self.drop_session(sid) {
            Some(_) => Nfsstat4::NFS4_OK,
            None => Nfsstat4::NFS4ERR_BADSESSION,
        }
    }

    /// DESTROY_CLIENTID (RFC 8881 §18.50.3): only a client without
    /// sessions; `has_state` says whether it still holds stateids.
    pub(crate) fn destroy_clientid(&mut self, id: u64, has_state: bool) -> Nfsstat4 {
        let Some(c) = self.clients.get(&id) else {
            return Nfsstat4::NFS4ERR_STALE_CLIENTID;
        };
        if !c.sessions.is_empty() || has_state {
            return Nfsstat4::NFS4ERR_CLIENTID_BUSY;
        }
        self.forget(id);
        self.remove_client(id);
        Nfsstat4::NFS4_OK
    }

    /// BIND_CONN_TO_SESSION (RFC 8881 §18.34.3): the connection joins the
    /// fore channel and, as asked, the back channel (RFC 8881 §2.10.3.1):
    /// callbacks then go on it.
    pub(crate) fn bind_conn(
        &mut self,
        a: &BindConnToSession4Args,
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
        let id = s.clientid;
        self.renew(id, now);
        Res4::Ok(BindConnToSession4ResOk {
            sessid: a.sessid,
            dir,
            use_conn_in_rdma_mode: false,
        })
    }

    /// RECLAIM_COMPLETE (RFC 8881 §18.51.3): once per client id (a
    /// repeat is NFS4ERR_COMPLETE_ALREADY); after it the client may no
    /// longer reclaim and may take new state. `rca_one_fs` (a migrated
    /// file system) changes nothing here: there is no migration.
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
impl ClientTable {
    /// EXCHANGE_ID from an AUTH_NONE caller whose clients hold no state.
    fn exchange_none(
        &mut self,
        a: &ExchangeId4Args,
        owner: &Bytes,
        now: Duration,
    ) -> Res4<ExchangeId4ResOk> {
        self.exchange_id(a, owner, &Principal::None, false, |_| false, now)
    }

    /// CREATE_SESSION from an AUTH_NONE caller.
    fn create_session_none(
        &mut self,
        a: &CreateSession4Args,
        now: Duration,
    ) -> Res4<CreateSession4ResOk> {
        self.create_session(a, &Principal::None, false, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_sessions_beyond_the_per_client_bound() {
        let mut t = ClientTable::new(SessionLimits::default(), 1);
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
        let Res4::Ok(id) = t.exchange_none(&ex, &Bytes::from_static(b"srv"), now) else {
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
            assert!(matches!(t.create_session_none(&args, now), Res4::Ok(_)));
            args.sequence = args.sequence.wrapping_add(1);
        }
        assert!(matches!(
            t.create_session_none(&args, now),
            Res4::Err(Nfsstat4::NFS4ERR_NOSPC)
        ));
        assert_eq!(t.sessions.len(), MAX_SESSIONS_PER_CLIENT);
    }
}

#[cfg(test)]
mod exchange_tests {
    use super::*;

    /// SP4_MACH_CRED (RFC 8881 §18.35.3) as the Linux client asks it
    /// under Kerberos: granted to a caller under RPCSEC_GSS integrity or
    /// privacy, with the lease operations enforced and nothing extra
    /// allowed; from then on CREATE_SESSION, DESTROY_SESSION,
    /// BIND_CONN_TO_SESSION, DESTROY_CLIENTID and EXCHANGE_ID of that
    /// client need the same principal, protected (NFS4ERR_WRONG_CRED);
    /// another principal's EXCHANGE_ID for the owner stays a collision.
    #[test]
    fn sp4_mach_cred_binds_the_lease_operations_to_the_machine_credential() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let owner = Bytes::from_static(b"srv");
        let now = Duration::ZERO;
        let machine = Principal::Gss("nfs/client@REALM".into());
        let user = Principal::Gss("alice@REALM".into());
        let mut a = xid(b"kernel", 1, 0);
        a.state_protect = StateProtect4A::MachCred(StateProtectOps4 {
            must_enforce: Bitmap4::from_bits(&MACH_CRED_ENFORCED),
            must_allow: Bitmap4::from_bits(&[
                nfs::v4::Opnum4::OP_CLOSE.0,
                nfs::v4::Opnum4::OP_WRITE.0,
            ]),
        });
        // krb5 (authentication only) is not enough.
        let r = t.exchange_id(&a, &owner, &machine, false, |_| false, now);
        assert_eq!(r.status(), Nfsstat4::NFS4ERR_INVAL);
        let Res4::Ok(ok) = t.exchange_id(&a, &owner, &machine, true, |_| false, now) else {
            panic!("protected SP4_MACH_CRED refused");
        };
        let StateProtect4R::MachCred(ops) = &ok.state_protect else {
            panic!("granted {:?}", ok.state_protect);
        };
        for op in MACH_CRED_ENFORCED {
            assert!(ops.must_enforce.contains(op), "op {op} not enforced");
        }
        assert!(ops.must_allow.0.iter().all(|w| *w == 0));
        let id = ok.clientid;
        // Unconfirmed: another principal is a collision (§18.36.4), the
        // machine's own principal without protection the wrong credential.
        assert_eq!(
            t.create_session(&cs(id, 1), &user, true, now).status(),
            Nfsstat4::NFS4ERR_CLID_INUSE
        );
        assert_eq!(
            t.create_session(&cs(id, 1), &machine, false, now).status(),
            Nfsstat4::NFS4ERR_WRONG_CRED
        );
        let Res4::Ok(sess) = t.create_session(&cs(id, 1), &machine, true, now) else {
            panic!("the machine credential's CREATE_SESSION refused");
        };
        // Confirmed: any other caller is the wrong credential.
        for (who, protected) in [(&machine, false), (&user, true)] {
            assert_eq!(
                t.create_session(&cs(id, 2), who, protected, now).status(),
                Nfsstat4::NFS4ERR_WRONG_CRED
            );
        }
        let sid = sess.sessionid.0;
        for (who, protected) in [(&machine, false), (&user, true), (&Principal::None, false)] {
            assert_eq!(
                t.mach_cred_check_session(&sid, who, protected),
                Err(Nfsstat4::NFS4ERR_WRONG_CRED)
            );
            assert_eq!(
                t.mach_cred_check(id, who, protected),
                Err(Nfsstat4::NFS4ERR_WRONG_CRED)
            );
        }
        assert_eq!(t.mach_cred_check_session(&sid, &machine, true), Ok(()));
        // The same principal's EXCHANGE_ID again: only protected.
        let again = t.exchange_id(
            &xid(b"kernel", 1, 0),
            &owner,
            &machine,
            false,
            |_| true,
            now,
        );
        assert_eq!(again.status(), Nfsstat4::NFS4ERR_WRONG_CRED);
        let Res4::Ok(again) =
            t.exchange_id(&xid(b"kernel", 1, 0), &owner, &machine, true, |_| true, now)
        else {
            panic!("the machine credential's EXCHANGE_ID refused");
        };
        assert_eq!(again.clientid, id);
        assert!(matches!(again.state_protect, StateProtect4R::MachCred(_)));
        // Another principal for the same owner: a collision, as before.
        let other = t.exchange_id(&xid(b"kernel", 1, 0), &owner, &user, true, |_| true, now);
        assert_eq!(other.status(), Nfsstat4::NFS4ERR_CLID_INUSE);
        // A client without protection is not affected.
        let Res4::Ok(plain) =
            t.exchange_id(&xid(b"plain", 1, 0), &owner, &user, false, |_| false, now)
        else {
            panic!("SP4_NONE refused");
        };
        assert_eq!(plain.state_protect, StateProtect4R::None);
        assert_eq!(t.mach_cred_check(plain.clientid, &machine, false), Ok(()));
    }

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
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let owner = Bytes::from_static(b"srv");
        let now = Duration::ZERO;
        assert_eq!(
            t.exchange_none(&xid(b"c", 1, 0x0800_0000), &owner, now)
                .status(),
            Nfsstat4::NFS4ERR_INVAL
        );
        let mut a = xid(b"c", 1, 0);
        a.state_protect = StateProtect4A::MachCred(StateProtectOps4 {
            must_enforce: Default::default(),
            must_allow: Default::default(),
        });
        // SP4_MACH_CRED from an unprotected caller (AUTH_NONE here).
        assert_eq!(
            t.exchange_none(&a, &owner, now).status(),
            Nfsstat4::NFS4ERR_INVAL
        );
        let upd = xid(b"c", 1, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A);
        assert_eq!(
            t.exchange_none(&upd, &owner, now).status(),
            Nfsstat4::NFS4ERR_NOENT
        );
        let Res4::Ok(r) = t.exchange_none(&xid(b"c", 1, 0), &owner, now) else {
            panic!()
        };
        assert_eq!(r.clientid >> 32, 7);
        assert!(matches!(
            t.create_session_none(&cs(r.clientid, r.sequenceid), now),
            Res4::Ok(_)
        ));
        let other = xid(b"c", 2, EXCHGID4_FLAG_UPD_CONFIRMED_REC_A);
        assert_eq!(
            t.exchange_none(&other, &owner, now).status(),
            Nfsstat4::NFS4ERR_NOT_SAME
        );
        assert!(
            matches!(t.exchange_none(&upd, &owner, now), Res4::Ok(u) if u.clientid == r.clientid)
        );
    }

    #[test]
    fn create_session_cuts_channels_to_the_server_limits() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let Res4::Ok(r) = t.exchange_none(&xid(b"c", 1, 0), &Bytes::new(), Duration::ZERO) else {
            panic!()
        };
        let slots = SLOTS.count();
        let Res4::Ok(s) = t.create_session_none(&cs(r.clientid, r.sequenceid), Duration::ZERO)
        else {
            panic!()
        };
        // 1000 slots asked, 64 granted: counted.
        assert!(SLOTS.count() > slots);
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
            t.create_session_none(&zero, Duration::ZERO).status(),
            Nfsstat4::NFS4ERR_TOOSMALL
        );
    }

    #[test]
    fn an_unconfirmed_client_expires_after_a_lease() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let Res4::Ok(r) = t.exchange_none(&xid(b"c", 1, 0), &Bytes::new(), Duration::ZERO) else {
            panic!()
        };
        assert!(t.expire(Duration::from_secs(90)).is_empty());
        assert!(t.clients.contains_key(&r.clientid));
        assert_eq!(t.expire(Duration::from_secs(91)), vec![r.clientid]);
        assert_eq!(
            t.create_session_none(&cs(r.clientid, 1), Duration::from_secs(91))
                .status(),
            Nfsstat4::NFS4ERR_STALE_CLIENTID
        );
    }

    #[test]
    fn a_flood_of_unconfirmed_clients_evicts_the_oldest_not_new_clients() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let owner = Bytes::new();
        let now = Duration::ZERO;
        let mut first = None;
        for i in 0..(MAX_UNCONFIRMED as u32 * 3) {
            let mut a = xid(b"", 1, 0);
            a.clientowner.ownerid = Bounded(Bytes::from(i.to_be_bytes().to_vec()));
            let Res4::Ok(r) = t.exchange_none(&a, &owner, now) else {
                panic!("EXCHANGE_ID {i} refused")
            };
            first.get_or_insert(r.clientid);
        }
        assert_eq!(t.clients.len(), MAX_UNCONFIRMED);
        assert!(UNCONFIRMED.count() >= 2 * MAX_UNCONFIRMED as u64);
        assert_eq!(t.take_dropped().len(), 2 * MAX_UNCONFIRMED);
        // The oldest went; a real client still gets its session.
        let old = first.unwrap_or_default();
        assert_eq!(
            t.create_session_none(&cs(old, 1), now).status(),
            Nfsstat4::NFS4ERR_STALE_CLIENTID
        );
        let Res4::Ok(r) = t.exchange_none(&xid(b"real", 1, 0), &owner, now) else {
            panic!()
        };
        assert!(matches!(
            t.create_session_none(&cs(r.clientid, r.sequenceid), now),
            Res4::Ok(_)
        ));
    }

    #[test]
    fn confirmed_clients_are_bounded_with_delay() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let owner = Bytes::new();
        let now = Duration::ZERO;
        // Confirmed records without sessions, as CREATE_SESSION +
        // DESTROY_SESSION would leave them.
        for i in 0..MAX_CLIENTS as u32 {
            let mut a = xid(b"", 1, 0);
            a.clientowner.ownerid = Bounded(Bytes::from(i.to_be_bytes().to_vec()));
            let Res4::Ok(r) = t.exchange_none(&a, &owner, now) else {
                panic!()
            };
            t.confirm(r.clientid);
        }
        let before = CLIENTS.count();
        assert_eq!(
            t.exchange_none(&xid(b"late", 1, 0), &owner, now).status(),
            Nfsstat4::NFS4ERR_DELAY
        );
        assert!(CLIENTS.count() > before);
        // A lease later they are gone and the newcomer gets in.
        let later = t.limits.lease + Duration::from_secs(1);
        assert_eq!(t.expire(later).len(), MAX_CLIENTS);
        assert!(matches!(
            t.exchange_none(&xid(b"late", 1, 0), &owner, later),
            Res4::Ok(_)
        ));
    }

    #[test]
    fn create_session_shrinks_the_reply_cache_to_the_budget() {
        let limits = SessionLimits {
            reply_cache_bytes: 4 * 64 * 4096,
            ..SessionLimits::default()
        };
        let mut t = ClientTable::new(limits, 7);
        let now = Duration::ZERO;
        let session = |t: &mut ClientTable, owner: &'static [u8]| {
            let Res4::Ok(r) = t.exchange_none(&xid(owner, 1, 0), &Bytes::new(), now) else {
                panic!()
            };
            let mut a = cs(r.clientid, r.sequenceid);
            a.fore_chan_attrs.maxresponsesize_cached = 4096;
            a.fore_chan_attrs.maxrequests = 64;
            t.create_session_none(&a, now)
        };
        // A quarter of the budget each: the first session is whole.
        let Res4::Ok(s) = session(&mut t, b"a") else {
            panic!()
        };
        assert_eq!(s.fore_chan_attrs.maxrequests, 64);
        for o in [&b"b"[..], b"c", b"d"] {
            let o: &'static [u8] = Box::leak(o.to_vec().into_boxed_slice());
            assert!(matches!(session(&mut t, o), Res4::Ok(_)));
        }
        assert_eq!(t.reply_cache_bytes().0, limits.reply_cache_bytes);
        let before = REPLY_CACHE.count();
        assert_eq!(session(&mut t, b"e").status(), Nfsstat4::NFS4ERR_DELAY);
        assert!(REPLY_CACHE.count() > before);
        // Room for 10 slots: the next session gets 10, not 64.
        let Res4::Ok(first) = t.exchange_none(&xid(b"a", 1, 0), &Bytes::new(), now) else {
            panic!()
        };
        let sid = t.clients[&first.clientid].sessions[0];
        assert!(t.destroy_session(&sid).is_ok());
        t.limits.reply_cache_bytes -= 54 * 4096;
        let Res4::Ok(s) = session(&mut t, b"f") else {
            panic!()
        };
        assert_eq!(s.fore_chan_attrs.maxrequests, 10);
        // Room for less than a slot: one smaller slot.
        assert!(t.destroy_session(&s.sessionid.0).is_ok());
        t.limits.reply_cache_bytes -= 10 * 4096 - 3000;
        let Res4::Ok(s) = session(&mut t, b"g") else {
            panic!()
        };
        assert_eq!(
            (
                s.fore_chan_attrs.maxrequests,
                s.fore_chan_attrs.maxresponsesize_cached
            ),
            (1, 3000)
        );
        assert!(t.reply_cache_bytes().0 <= t.limits.reply_cache_bytes);
    }

    #[test]
    fn cached_replies_are_counted_and_released() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let now = Duration::ZERO;
        let Res4::Ok(r) = t.exchange_none(&xid(b"c", 1, 0), &Bytes::new(), now) else {
            panic!()
        };
        let Res4::Ok(s) = t.create_session_none(&cs(r.clientid, r.sequenceid), now) else {
            panic!()
        };
        let seq = |id: u32| Sequence4Args {
            sessionid: s.sessionid,
            sequenceid: id,
            slotid: 0,
            highest_slotid: 0,
            cachethis: true,
        };
        assert!(matches!(
            t.sequence(&seq(1), 1, 100, 0, now),
            SeqOutcome::New(..)
        ));
        t.finish_slot(
            &s.sessionid.0,
            0,
            Some(XdrBuf::from_bytes(Bytes::from(vec![0; 1000]))),
        );
        assert_eq!(t.reply_cache_bytes().1, 1000);
        assert!(matches!(
            t.sequence(&seq(1), 1, 100, 0, now),
            SeqOutcome::Replay(_)
        ));
        // Too big for the slot: not kept.
        assert!(matches!(
            t.sequence(&seq(2), 1, 100, 0, now),
            SeqOutcome::New(..)
        ));
        let big = vec![0; s.fore_chan_attrs.maxresponsesize_cached as usize + 1];
        t.finish_slot(
            &s.sessionid.0,
            0,
            Some(XdrBuf::from_bytes(Bytes::from(big))),
        );
        assert_eq!(t.reply_cache_bytes().1, 0);
        assert!(matches!(
            t.sequence(&seq(3), 1, 100, 0, now),
            SeqOutcome::New(..)
        ));
        t.finish_slot(
            &s.sessionid.0,
            0,
            Some(XdrBuf::from_bytes(Bytes::from(vec![0; 10]))),
        );
        assert!(t.destroy_session(&s.sessionid.0).is_ok());
        assert_eq!(t.reply_cache_bytes(), (0, 0));
    }

    #[test]
    fn expiry_takes_only_the_clients_that_ran_out() {
        let mut t = ClientTable::new(SessionLimits::default(), 7);
        let owner = Bytes::new();
        let Res4::Ok(a) = t.exchange_none(&xid(b"a", 1, 0), &owner, Duration::ZERO) else {
            panic!()
        };
        let Res4::Ok(b) = t.exchange_none(&xid(b"b", 1, 0), &owner, Duration::from_secs(50)) else {
            panic!()
        };
        // a renews at 60 s: both live past 91 s, then b goes first.
        assert!(matches!(
            t.exchange_none(&xid(b"a", 1, 0), &owner, Duration::from_secs(60)),
            Res4::Ok(_)
        ));
        assert!(t.expire(Duration::from_secs(91)).is_empty());
        assert_eq!(t.expire(Duration::from_secs(141)), vec![b.clientid]);
        assert!(t.clients.contains_key(&a.clientid) || !t.clients.is_empty());
    }
}
