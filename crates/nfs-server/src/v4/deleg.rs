//! Delegations and back-channel paths (RFC 8881 §10.2, §10.4,
//! §2.10.3.1): the sans-IO table; the callbacks themselves are in
//! [`super::callback`].
//!
//! - OPEN grants a read delegation (read-only open, no writer on the
//!   file) or a write delegation (the only open of the file) while the
//!   client's back channel works; at most one delegation per file.
//! - A conflicting access (RFC 8881 §10.4.1) from another client, an
//!   NFSv3 client or a local process marks the delegation recalled and
//!   hands back a [`Recall`] for CB_RECALL; the access is answered
//!   NFS4ERR_DELAY (NFS3ERR_JUKEBOX) until DELEGRETURN. A holder that has
//!   not returned the delegation a lease after the recall loses it
//!   (revoked, SEQ4_STATUS_RECALLABLE_STATE_REVOKED until FREE_STATEID)
//!   and the access proceeds.
//! - Indexed by file and by client: conflict checks and expiry do not
//!   scan the table. Bounds ([`DelegLimits`]): [`MAX_DELEGS`] in all and
//!   [`MAX_DELEGS_PER_CLIENT`] per client by default (beyond them OPEN
//!   grants none, with an [`oncrpc::limits::Limit`] trip), [`MAX_REVOKED`]
//!   remembered.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nfs::v4::session::SEQ4_STATUS_CB_PATH_DOWN;
use nfs::v4::{Nfsstat4, Stateid4};
use oncrpc::limits::Limit;
use oncrpc::msg::OpaqueAuth;
use oncrpc::PeerInfo;
use xdr::FixedOpaque;

use super::cb40::V40Target;
use super::cbslots::{CbParams, CbSlots};
use super::lease::Lease;

static DELEGS: Limit = Limit::new("nfs4.delegations");
static REVOKED: Limit = Limit::new("nfs4.revoked_delegations");

/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED (RFC 8881 §18.46.3).
pub(crate) const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.3).
pub(crate) const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
/// Most delegations held at once; beyond it none are granted.
pub(crate) const MAX_DELEGS: usize = 1 << 16;
/// Most delegations one client holds at once.
pub(crate) const MAX_DELEGS_PER_CLIENT: usize = 1 << 12;

/// Bounds on delegations (RFC 8881 §10.2: a server may always decline
/// to delegate, so beyond them OPEN answers OPEN_DELEGATE_NONE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegLimits {
    /// Delegations held at once, all clients (limit `nfs4.delegations`).
    /// Default 65,536.
    pub max: usize,
    /// Delegations one client holds at once (`nfs4.delegations`).
    /// Default 4096.
    pub max_per_client: usize,
    /// Delegated files watched for local changes, one inotify watch each
    /// (`nfs4.delegation_watches`); watches of files no longer delegated
    /// are dropped first. Default 4096.
    pub max_watches: usize,
}

impl Default for DelegLimits {
    fn default() -> Self {
        Self {
            max: MAX_DELEGS,
            max_per_client: MAX_DELEGS_PER_CLIENT,
            max_watches: super::watch::MAX_WATCHES,
        }
    }
}
/// Most revoked delegations remembered for their holders.
const MAX_REVOKED: usize = 1 << 12;

/// What the server knows of a client's back channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathStatus {
    Unprobed,
    Up,
    /// Failed, or lost: SEQ4_STATUS_CB_PATH_DOWN until the client binds
    /// a connection again.
    Down,
    /// The transport offers no back channel on this connection (ONC RPC
    /// over TCP here), and the client was told once and bound it again:
    /// no delegations, and no more CB_PATH_DOWN, which would only make
    /// the client repeat BIND_CONN_TO_SESSION.
    Absent,
}

/// The back channel of one client: the session and connection callbacks
/// use, and that session's back-channel slot table (RFC 8881 §20.9.3).
#[derive(Debug, Clone)]
pub(crate) struct CbPath {
    pub(crate) sessionid: [u8; 16],
    pub(crate) conn: PeerInfo,
    pub(crate) program: u32,
    /// The credential callbacks carry (`csa_sec_parms`).
    pub(crate) cred: OpaqueAuth,
    /// The connection already reported down for having no back channel.
    pub(crate) told: Option<u64>,
    pub(crate) status: PathStatus,
    /// The session's back-channel slots: the callbacks in flight.
    pub(crate) slots: Arc<CbSlots>,
    /// Held by the CB_NULL probe, so one probe runs at a time.
    pub(crate) probe: Arc<tokio::sync::Mutex<()>>,
    /// The minor version of the session's COMPOUNDs, which its
    /// CB_COMPOUNDs carry: the Linux client looks the session up among
    /// its clients of that minor version (`nfs4_cb_match_client`) and
    /// answers NFS4ERR_BADSESSION to a 4.2 client called as 4.1.
    pub(crate) minor: u32,
    /// An NFSv4.0 client's callback service, called on a connection of
    /// the server's own (RFC 7530 §10.2.1; [`super::cb40`]); `None` for
    /// a 4.1 session's back channel.
    pub(crate) v40: Option<V40Target>,
}

/// One delegation (RFC 8881 §10.2).
#[derive(Debug, Clone)]
struct Deleg {
    clientid: u64,
    fh: Bytes,
    write: bool,
    /// When CB_RECALL was started (clock time).
    recalled: Option<Duration>,
    /// What CB_GETATTR last learnt (RFC 8881 §10.4.3).
    seen: Option<HolderAttrs>,
    /// The kernel lease on the file (`super::lease`), released when the
    /// delegation goes.
    lease: Option<Arc<Lease>>,
}

/// What a write delegation's holder reported by CB_GETATTR, and the
/// change attribute the server answered others with for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HolderAttrs {
    change: u64,
    size: u64,
    answered: u64,
}

/// Another client's write delegation on a file (for CB_GETATTR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteHolder {
    pub(crate) clientid: u64,
    /// CB_RECALL already started: the delegation is going.
    pub(crate) recalled: bool,
}

/// A CB_RECALL to send.
#[derive(Debug, Clone)]
pub(crate) struct Recall {
    pub(crate) clientid: u64,
    pub(crate) stateid: Stateid4,
    pub(crate) fh: Bytes,
}

/// Delegations and back-channel paths of a server instance (owned by
/// [`super::state::StateTable`], under its lock).
#[derive(Debug, Default)]
pub(crate) struct DelegTable {
    paths: HashMap<u64, CbPath>,
    delegs: HashMap<[u8; 12], Deleg>,
    /// The delegation on each file (at most one).
    by_fh: HashMap<Bytes, [u8; 12]>,
    /// The delegations of each client.
    by_client: HashMap<u64, HashSet<[u8; 12]>>,
    revoked: HashMap<[u8; 12], u64>,
    /// Revoked delegations remembered per client.
    revoked_of: HashMap<u64, usize>,
    next: u32,
    limits: DelegLimits,
}

impl DelegTable {
    /// Grants within `limits` from now on.
    pub(crate) fn set_limits(&mut self, limits: DelegLimits) {
        self.limits = limits;
    }

    /// Records the back channel of a client (CREATE_SESSION with
    /// CONN_BACK_CHAN, RFC 8881 §18.36.3; BIND_CONN_TO_SESSION, §18.34.3):
    /// connection `conn` of session `sessionid`, with the session's
    /// callback parameters. Another session starts a new slot table.
    pub(crate) fn bind(&mut self, sessionid: [u8; 16], conn: PeerInfo, cb: &CbParams, minor: u32) {
        let e = self.paths.entry(cb.clientid).or_insert_with(|| CbPath {
            sessionid,
            conn,
            program: cb.program,
            cred: cb.cred.clone(),
            told: None,
            status: PathStatus::Unprobed,
            slots: CbSlots::new(cb.slots),
            probe: Default::default(),
            minor,
            v40: None,
        });
        if e.sessionid != sessionid {
            e.slots = CbSlots::new(cb.slots);
        }
        e.program = cb.program;
        e.cred = cb.cred.clone();
        e.sessionid = sessionid;
        e.minor = minor;
        e.conn = conn;
        e.status = PathStatus::Unprobed;
    }

    /// Records the callback path of NFSv4.0 client `clientid`, confirmed
    /// by SETCLIENTID_CONFIRM (RFC 7530 §16.34.4), to be probed again;
    /// `None` (an address the server does not call) removes it.
    pub(crate) fn bind_v40(
        &mut self,
        clientid: u64,
        target: Option<V40Target>,
        program: u32,
        cred: OpaqueAuth,
    ) {
        let Some(t) = target else {
            self.paths.remove(&clientid);
            return;
        };
        let conn = PeerInfo {
            conn_id: 0,
            addr: Some(t.addr),
            transport: oncrpc::TransportKind::Tcp,
            security: oncrpc::TransportSecurity::None,
        };
        self.paths.insert(
            clientid,
            CbPath {
                sessionid: [0; 16],
                conn,
                program,
                cred,
                told: None,
                status: PathStatus::Unprobed,
                slots: CbSlots::new(1),
                probe: Default::default(),
                minor: 0,
                v40: Some(t),
            },
        );
    }

    /// Whether `clientid` holds delegations.
    pub(crate) fn has_delegations(&self, clientid: u64) -> bool {
        self.by_client.get(&clientid).is_some_and(|s| !s.is_empty())
    }

    /// Whether `clientid` has an NFSv4.0 callback path.
    pub(crate) fn has_v40_path(&self, clientid: u64) -> bool {
        self.paths.get(&clientid).is_some_and(|p| p.v40.is_some())
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33.3): the client's path, if it uses
    /// session `sessionid`, takes the new program and credential.
    pub(crate) fn set_callback(&mut self, sessionid: &[u8; 16], cb: &CbParams) {
        if let Some(p) = self.paths.get_mut(&cb.clientid) {
            if p.sessionid == *sessionid {
                p.program = cb.program;
                p.cred = cb.cred.clone();
            }
        }
    }

    /// Forgets everything of a client whose lease ended.
    pub(crate) fn purge(&mut self, clientid: u64) {
        self.paths.remove(&clientid);
        for k in self.by_client.remove(&clientid).unwrap_or_default() {
            if let Some(d) = self.delegs.remove(&k) {
                self.by_fh.remove(&d.fh);
            }
        }
        if self.revoked_of.remove(&clientid).is_some() {
            self.revoked.retain(|_, c| *c != clientid);
        }
    }

    fn remove(&mut self, k: &[u8; 12]) -> Option<Deleg> {
        let d = self.delegs.remove(k)?;
        self.by_fh.remove(&d.fh);
        if let Some(s) = self.by_client.get_mut(&d.clientid) {
            s.remove(k);
            if s.is_empty() {
                self.by_client.remove(&d.clientid);
            }
        }
        Some(d)
    }

    fn forget_revoked(&mut self, k: &[u8; 12]) {
        if let Some(c) = self.revoked.remove(k) {
            if let Some(n) = self.revoked_of.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.revoked_of.remove(&c);
                }
            }
        }
    }

    /// The back channel of `clientid`, as known now.
    pub(crate) fn path(&self, clientid: u64) -> Option<CbPath> {
        self.paths.get(&clientid).cloned()
    }

    /// Sets the status of `clientid`'s path if it still uses `conn`.
    pub(crate) fn set_status(&mut self, clientid: u64, conn: PeerInfo, status: PathStatus) {
        if let Some(p) = self.paths.get_mut(&clientid) {
            if p.conn == conn {
                p.status = status;
            }
        }
    }

    /// Notes that `conn` was reported down for having no back channel.
    pub(crate) fn set_told(&mut self, clientid: u64, conn: u64) {
        if let Some(p) = self.paths.get_mut(&clientid) {
            p.told = Some(conn);
        }
    }

    /// After a CB_COMPOUND answered on `conn`: the path is up.
    pub(crate) fn callback_done(&mut self, clientid: u64, conn: PeerInfo) {
        self.set_status(clientid, conn, PathStatus::Up);
    }

    /// The write delegation on `fh` of a client other than `clientid`.
    pub(crate) fn write_holder(&self, fh: &Bytes, clientid: u64) -> Option<WriteHolder> {
        let d = self.delegs.get(self.by_fh.get(fh)?)?;
        (d.write && d.clientid != clientid).then_some(WriteHolder {
            clientid: d.clientid,
            recalled: d.recalled.is_some(),
        })
    }

    /// The size and change attribute to answer a GETATTR on `fh` with,
    /// from the holder's CB_GETATTR reply (RFC 8881 §10.4.3): when the
    /// holder's size or change differs from the server's the file is
    /// modified, and the answer is the holder's size with a change
    /// attribute past the server's that moves on each time the holder's
    /// does. `None` while the holder has not modified the file.
    pub(crate) fn holder_attrs(
        &mut self,
        fh: &Bytes,
        holder: (u64, u64),
        server: (u64, u64),
    ) -> Option<(u64, u64)> {
        let d = self.delegs.get_mut(self.by_fh.get(fh)?)?;
        let (change, size) = holder;
        let answered = match d.seen {
            Some(s) if s.change == change && s.size == size => s.answered,
            _ if holder == server && d.seen.is_none() => return None,
            Some(s) => s.answered.max(server.0).wrapping_add(1),
            None => server.0.wrapping_add(1),
        };
        d.seen = Some(HolderAttrs {
            change,
            size,
            answered,
        });
        Some((size, answered))
    }

    /// Whether some client holds a delegation on `fh`.
    pub(crate) fn on_file(&self, fh: &Bytes) -> bool {
        self.by_fh.contains_key(fh)
    }

    /// Whether the delegation `other` is still held.
    pub(crate) fn holds(&self, other: &[u8; 12]) -> bool {
        self.delegs.contains_key(other)
    }

    /// Forgets the path of a destroyed session.
    pub(crate) fn session_gone(&mut self, sessionid: &[u8; 16]) {
        self.paths.retain(|_, p| p.sessionid != *sessionid);
    }

    /// The SEQUENCE status flags of `clientid` (RFC 8881 §18.46.3).
    pub(crate) fn status_flags(&self, clientid: u64) -> u32 {
        let mut f = 0;
        if self
            .paths
            .get(&clientid)
            .is_some_and(|p| p.status == PathStatus::Down)
        {
            f |= SEQ4_STATUS_CB_PATH_DOWN;
        }
        if self.revoked_of.contains_key(&clientid) {
            f |= SEQ4_STATUS_RECALLABLE_STATE_REVOKED;
        }
        f
    }

    /// Delegations of other clients on `fh` that an access (`write` or
    /// not) by `clientid` conflicts with (RFC 8881 §10.4.1): a read
    /// delegation conflicts with writing, a write delegation with any
    /// access. Those not yet recalled are marked and returned for
    /// CB_RECALL; those recalled at least `lease` ago are revoked. `true`
    /// when some are still outstanding (the caller answers NFS4ERR_DELAY).
    pub(crate) fn conflicts(
        &mut self,
        fh: &Bytes,
        clientid: u64,
        write: bool,
        now: Duration,
        lease: Duration,
    ) -> (bool, Vec<Recall>) {
        let mut pending = false;
        let mut recalls = Vec::new();
        let mut revoke = Vec::new();
        let k = self.by_fh.get(fh).copied();
        if let Some((k, d)) = k.and_then(|k| self.delegs.get_mut(&k).map(|d| (k, d))) {
            if d.clientid == clientid || !(d.write || write) {
                return (false, Vec::new());
            }
            match d.recalled {
                Some(t) if now >= t + lease => revoke.push((k, d.clientid)),
                Some(_) => pending = true,
                None => {
                    d.recalled = Some(now);
                    pending = true;
                    recalls.push(Recall {
                        clientid: d.clientid,
                        stateid: Stateid4 {
                            seqid: 1,
                            other: FixedOpaque(k),
                        },
                        fh: d.fh.clone(),
                    });
                }
            }
        }
        for (k, c) in revoke {
            self.remove(&k);
            if self.revoked.len() < MAX_REVOKED {
                self.revoked.insert(k, c);
                *self.revoked_of.entry(c).or_default() += 1;
            } else {
                REVOKED.trip(format_args!(
                    "{MAX_REVOKED} revoked delegations remembered; client {c}'s not \
                     (no RECALLABLE_STATE_REVOKED flag for it)"
                ));
            }
            tracing::info!(
                clientid = c,
                "delegation revoked: not returned within the lease"
            );
        }
        (pending, recalls)
    }

    /// Whether `clientid` may be given a delegation on `fh` now: its back
    /// channel was probed good, it holds none on the file, nobody else
    /// holds one, and the table has room.
    pub(crate) fn may_grant(&self, clientid: u64, fh: &Bytes) -> bool {
        if !self
            .paths
            .get(&clientid)
            .is_some_and(|p| p.status == PathStatus::Up)
            || self.by_fh.contains_key(fh)
        {
            return false;
        }
        let l = self.limits;
        if self.delegs.len() >= l.max {
            DELEGS.trip(format_args!("no delegation granted: {} held", l.max));
            return false;
        }
        if self.by_client.get(&clientid).map_or(0, HashSet::len) >= l.max_per_client {
            DELEGS.trip(format_args!(
                "no delegation granted: client {clientid:#x} holds {}",
                l.max_per_client
            ));
            return false;
        }
        true
    }

    pub(crate) fn grant(&mut self, clientid: u64, fh: &Bytes, write: bool) -> Stateid4 {
        // Delegation stateids have the top bit of the counter set, apart
        // from open and lock stateids (RFC 8881 §8.2.2).
        self.next = self.next.wrapping_add(1) & 0x7fff_ffff;
        let mut o = [0u8; 12];
        o[..8].copy_from_slice(&clientid.to_be_bytes());
        o[8..].copy_from_slice(&(self.next | 0x8000_0000).to_be_bytes());
        self.delegs.insert(
            o,
            Deleg {
                clientid,
                fh: fh.clone(),
                write,
                recalled: None,
                seen: None,
                lease: None,
            },
        );
        self.by_fh.insert(fh.clone(), o);
        self.by_client.entry(clientid).or_default().insert(o);
        Stateid4 {
            seqid: 1,
            other: FixedOpaque(o),
        }
    }

    /// Keeps `lease` with delegation `sid` until it goes; `false` (the
    /// lease released) when the delegation is already gone.
    pub(crate) fn attach_lease(&mut self, sid: &Stateid4, lease: Lease) -> bool {
        match self.delegs.get_mut(&sid.other.0) {
            Some(d) => {
                d.lease = Some(Arc::new(lease));
                true
            }
            None => false,
        }
    }

    /// DELEGRETURN (RFC 8881 §18.6.3).
    pub(crate) fn delegreturn(&mut self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Nfsstat4 {
        if let Some(c) = self.revoked.get(&sid.other.0) {
            return if *c == clientid {
                Nfsstat4::NFS4ERR_DELEG_REVOKED
            } else {
                Nfsstat4::NFS4ERR_BAD_STATEID
            };
        }
        match self.delegs.get(&sid.other.0) {
            Some(d) if d.clientid == clientid && d.fh == *fh => {
                if sid.seqid > 1 {
                    return Nfsstat4::NFS4ERR_BAD_STATEID;
                }
                self.remove(&sid.other.0);
                Nfsstat4::NFS4_OK
            }
            _ => Nfsstat4::NFS4ERR_BAD_STATEID,
        }
    }

    /// FREE_STATEID of a revoked delegation (RFC 8881 §18.38.3).
    pub(crate) fn free_revoked(&mut self, sid: &Stateid4, clientid: u64) -> Option<Nfsstat4> {
        match self.revoked.get(&sid.other.0) {
            Some(c) if *c == clientid => {
                self.forget_revoked(&sid.other.0);
                Some(Nfsstat4::NFS4_OK)
            }
            _ => None,
        }
    }

    /// Whether `sid` is a delegation of `clientid` on `fh` allowing the
    /// access (RFC 8881 §10.2: READ/WRITE with a delegation stateid).
    pub(crate) fn io_allowed(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        write: bool,
    ) -> bool {
        self.delegs
            .get(&sid.other.0)
            .is_some_and(|d| d.clientid == clientid && d.fh == *fh && (d.write || !write))
    }

    /// Whether `sid` names a delegation (held or revoked).
    pub(crate) fn knows(&self, sid: &Stateid4) -> Option<Nfsstat4> {
        if self.revoked.contains_key(&sid.other.0) {
            Some(Nfsstat4::NFS4ERR_DELEG_REVOKED)
        } else if self.delegs.contains_key(&sid.other.0) {
            Some(Nfsstat4::NFS4_OK)
        } else {
            None
        }
    }

    /// Delegations held (for tests and statistics).
    pub(crate) fn held(&self) -> usize {
        self.delegs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh() -> Bytes {
        Bytes::from_static(b"file")
    }

    fn cb(program: u32) -> CbParams {
        CbParams {
            clientid: 1,
            program,
            cred: OpaqueAuth::NONE,
            slots: 1,
        }
    }

    fn peer(conn_id: u64) -> PeerInfo {
        PeerInfo {
            conn_id,
            addr: None,
            transport: oncrpc::TransportKind::Rdma,
            security: oncrpc::TransportSecurity::None,
        }
    }

    #[test]
    fn revoked_delegations_remembered_are_bounded() {
        let mut t = DelegTable::default();
        t.set_limits(DelegLimits {
            max_per_client: 1 << 16,
            ..DelegLimits::default()
        });
        t.bind([1; 16], peer(10), &cb(0x4000_0000), 1);
        t.set_status(1, peer(10), PathStatus::Up);
        let lease = Duration::from_secs(90);
        let fhs: Vec<Bytes> = (0..MAX_REVOKED as u32 + 100)
            .map(|i| Bytes::from(i.to_be_bytes().to_vec()))
            .collect();
        let sids: Vec<Stateid4> = fhs.iter().map(|f| t.grant(1, f, true)).collect();
        for f in &fhs {
            assert!(t.conflicts(f, 2, false, Duration::ZERO, lease).0);
            assert!(!t.conflicts(f, 2, false, lease, lease).0);
        }
        assert_eq!(t.held(), 0);
        assert_eq!(t.revoked.len(), MAX_REVOKED, "remembered up to the bound");
        assert!(REVOKED.count() >= 100, "those beyond it counted");
        assert_eq!(t.status_flags(1), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
        // A remembered one answers DELEG_REVOKED; one beyond the bound is
        // simply unknown.
        assert_eq!(
            t.delegreturn(&sids[0], 1, &fhs[0]),
            Nfsstat4::NFS4ERR_DELEG_REVOKED
        );
        assert_ne!(
            t.delegreturn(&sids[MAX_REVOKED + 50], 1, &fhs[MAX_REVOKED + 50]),
            Nfsstat4::NFS4ERR_DELEG_REVOKED
        );
    }

    #[test]
    fn read_delegation_conflicts_only_with_writers_and_is_revoked_after_a_lease() {
        let mut t = DelegTable::default();
        t.bind([1; 16], peer(10), &cb(0x4000_0000), 1);
        t.set_status(1, peer(10), PathStatus::Up);
        assert!(t.may_grant(1, &fh()));
        let sid = t.grant(1, &fh(), false);
        assert!(!t.may_grant(2, &fh()));
        let lease = Duration::from_secs(90);
        assert!(!t.conflicts(&fh(), 2, false, Duration::ZERO, lease).0);
        let (pending, recalls) = t.conflicts(&fh(), 2, true, Duration::ZERO, lease);
        assert!(pending);
        assert_eq!(recalls.len(), 1);
        assert_eq!(recalls[0].stateid, sid);
        // Recalled once only.
        let (pending, recalls) = t.conflicts(&fh(), 2, true, Duration::from_secs(1), lease);
        assert!(pending && recalls.is_empty());
        let (pending, _) = t.conflicts(&fh(), 2, true, lease, lease);
        assert!(!pending);
        assert_eq!(t.held(), 0);
        assert_eq!(t.status_flags(1), SEQ4_STATUS_RECALLABLE_STATE_REVOKED);
        assert_eq!(
            t.delegreturn(&sid, 1, &fh()),
            Nfsstat4::NFS4ERR_DELEG_REVOKED
        );
        assert_eq!(t.free_revoked(&sid, 1), Some(Nfsstat4::NFS4_OK));
        assert_eq!(t.status_flags(1), 0);
    }

    #[test]
    fn delegreturn_checks_owner_file_and_seqid() {
        let mut t = DelegTable::default();
        let sid = t.grant(1, &fh(), true);
        assert_eq!(t.delegreturn(&sid, 2, &fh()), Nfsstat4::NFS4ERR_BAD_STATEID);
        assert_eq!(
            t.delegreturn(&sid, 1, &Bytes::from_static(b"other")),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
        let newer = Stateid4 { seqid: 2, ..sid };
        assert_eq!(
            t.delegreturn(&newer, 1, &fh()),
            Nfsstat4::NFS4ERR_BAD_STATEID
        );
        assert!(t.io_allowed(&sid, 1, &fh(), true));
        assert_eq!(t.delegreturn(&sid, 1, &fh()), Nfsstat4::NFS4_OK);
        assert_eq!(t.delegreturn(&sid, 1, &fh()), Nfsstat4::NFS4ERR_BAD_STATEID);
    }

    #[test]
    fn a_down_path_is_reported_and_grants_nothing() {
        let mut t = DelegTable::default();
        t.bind([1; 16], peer(10), &cb(1), 1);
        assert!(!t.may_grant(1, &fh()), "unprobed");
        t.set_status(1, peer(10), PathStatus::Down);
        assert_eq!(t.status_flags(1), SEQ4_STATUS_CB_PATH_DOWN);
        assert!(!t.may_grant(1, &fh()));
        t.bind([1; 16], peer(11), &cb(1), 1);
        assert_eq!(t.status_flags(1), 0, "a new connection is probed afresh");
    }
}
