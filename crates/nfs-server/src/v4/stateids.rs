//! Open and byte-range lock state (RFC 8881 §8.2, §9): stateids with
//! seqid checks, share reservations and POSIX-style byte-range locks.
//!
//! A stateid's `other` is the client id (8 bytes) and a counter (4 bytes),
//! so a stateid of a client whose lease expired is recognised and answers
//! NFS4ERR_EXPIRED rather than NFS4ERR_BAD_STATEID.
//!
//! A leaf table ([`StateIds`]): indexed by file (conflict checks) and by
//! client (expiry), so neither scans every stateid. Bounds: [`MAX_STATES`]
//! over all clients, [`MAX_STATES_PER_CLIENT`] per client and
//! [`MAX_RANGES`] per lock owner and file, each NFS4ERR_NOSPC (RFC 8881
//! §18.16.4, §18.10.4) with an [`oncrpc::limits::Limit`] trip.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use nfs::v4::{
    Lock4Args, Lock4Denied, LockRes4, Locker4, NfsLockType4, Nfsstat4, StateOwner4, Stateid4,
    NFS4_UINT64_MAX, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_READ,
    OPEN4_SHARE_DENY_WRITE,
};
use oncrpc::limits::Limit;
use xdr::{Bounded, FixedOpaque};

static STATES: Limit = Limit::new("nfs4.stateids");
static STATES_PER_CLIENT: Limit = Limit::new("nfs4.stateids_per_client");
static RANGES: Limit = Limit::new("nfs4.lock_ranges");
static EXPIRED: Limit = Limit::new("nfs4.expired_clients");

/// One past the last byte: a lock "to the end of file".
const INF: u128 = 1 << 64;
/// Most open and lock stateids held at once, over all clients; beyond,
/// OPEN and LOCK answer NFS4ERR_NOSPC (a peer cannot grow the table
/// without bound).
pub(crate) const MAX_STATES: usize = 1 << 20;
/// Most open and lock stateids one client holds at once.
pub(crate) const MAX_STATES_PER_CLIENT: usize = 1 << 16;
/// Most expired client ids remembered (for NFS4ERR_EXPIRED).
const MAX_EXPIRED: usize = 1 << 14;
/// Most separate ranges one lock owner holds on one file; a LOCK that
/// would split beyond it is NFS4ERR_NOSPC.
pub(crate) const MAX_RANGES: usize = 1024;

/// A share reservation held by an open owner on a file (RFC 8881 §9.7).
#[derive(Debug, Clone)]
pub(crate) struct OpenState {
    clientid: u64,
    owner: Bytes,
    pub(crate) fh: Bytes,
    seqid: u32,
    access: u32,
    deny: u32,
}

/// A held byte range, `start..end`.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u128,
    end: u128,
    write: bool,
}

/// The byte-range locks of one lock owner on one file (RFC 8881 §9.1.4).
#[derive(Debug, Clone)]
pub(crate) struct LockState {
    clientid: u64,
    owner: Bytes,
    fh: Bytes,
    seqid: u32,
    open: [u8; 12],
    ranges: Vec<Range>,
}

/// A stateid's state.
#[derive(Debug, Clone)]
pub(crate) enum StateKind {
    /// An open.
    Open(OpenState),
    /// A lock owner's locks.
    Lock(LockState),
}

impl StateKind {
    pub(crate) fn clientid(&self) -> u64 {
        match self {
            StateKind::Open(o) => o.clientid,
            StateKind::Lock(l) => l.clientid,
        }
    }

    fn seqid(&self) -> u32 {
        match self {
            StateKind::Open(o) => o.seqid,
            StateKind::Lock(l) => l.seqid,
        }
    }

    fn fh(&self) -> &Bytes {
        match self {
            StateKind::Open(o) => &o.fh,
            StateKind::Lock(l) => &l.fh,
        }
    }
}

fn overlaps(a: &Range, start: u128, end: u128) -> bool {
    a.start < end && start < a.end
}

/// `offset`/`length` as a range; length 0 or a range past 2^64 - 1 is
/// NFS4ERR_INVAL (RFC 8881 §18.10.4).
fn range(offset: u64, length: u64) -> Result<(u128, u128), Nfsstat4> {
    if length == 0 {
        return Err(Nfsstat4::NFS4ERR_INVAL);
    }
    if length == NFS4_UINT64_MAX {
        return Ok((u128::from(offset), INF));
    }
    match offset.checked_add(length) {
        Some(_) => Ok((u128::from(offset), u128::from(offset) + u128::from(length))),
        None => Err(Nfsstat4::NFS4ERR_INVAL),
    }
}

fn subtract(ranges: &mut Vec<Range>, start: u128, end: u128) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.drain(..) {
        if !overlaps(&r, start, end) {
            out.push(r);
            continue;
        }
        if r.start < start {
            out.push(Range { end: start, ..r });
        }
        if end < r.end {
            out.push(Range { start: end, ..r });
        }
    }
    *ranges = out;
}

fn with_seqid(other: [u8; 12], seqid: u32) -> Stateid4 {
    Stateid4 {
        seqid,
        other: FixedOpaque(other),
    }
}

/// Open and lock stateids of a server instance.
#[derive(Debug, Default)]
pub(crate) struct StateIds {
    next: u32,
    states: HashMap<[u8; 12], StateKind>,
    /// The stateids of each file, for conflict checks.
    by_fh: HashMap<Bytes, Vec<[u8; 12]>>,
    /// The stateids of each client, for expiry.
    by_client: HashMap<u64, HashSet<[u8; 12]>>,
    /// Clients whose lease expired (their stateids: NFS4ERR_EXPIRED).
    expired: HashSet<u64>,
}

impl StateIds {
    /// Drops every stateid of `clientid`; `expired` remembers it so its
    /// stateids answer NFS4ERR_EXPIRED (RFC 8881 §8.3). At most
    /// `MAX_EXPIRED` ids are remembered; past that the set starts over,
    /// and stateids of the forgotten clients answer NFS4ERR_BAD_STATEID.
    pub(crate) fn purge_client(&mut self, clientid: u64, expired: bool) {
        for k in self.by_client.remove(&clientid).unwrap_or_default() {
            self.remove_state(&k);
        }
        if expired {
            if self.expired.len() >= MAX_EXPIRED {
                EXPIRED.trip(format_args!(
                    "{MAX_EXPIRED} expired client ids remembered: forgotten \
                     (their stateids now answer NFS4ERR_BAD_STATEID, not EXPIRED)"
                ));
                self.expired.clear();
            }
            self.expired.insert(clientid);
        }
    }

    /// Whether `clientid`'s lease ran out (and it is remembered).
    pub(crate) fn was_expired(&self, clientid: u64) -> bool {
        self.expired.contains(&clientid)
    }

    /// The owner of stateid `other`: (client id, lock owner?, owner).
    pub(crate) fn owner_of(&self, other: &[u8; 12]) -> Option<(u64, bool, Bytes)> {
        match self.states.get(other)? {
            StateKind::Open(o) => Some((o.clientid, false, o.owner.clone())),
            StateKind::Lock(l) => Some((l.clientid, true, l.owner.clone())),
        }
    }

    /// OPEN_CONFIRM (RFC 7530 §16.18.4): the open stateid `sid` of `fh`
    /// with its seqid moved on.
    pub(crate) fn open_confirm(
        &mut self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
    ) -> Result<Stateid4, Nfsstat4> {
        self.check_open(sid, clientid, fh)?;
        match self.states.get_mut(&sid.other.0) {
            Some(StateKind::Open(o)) => {
                o.seqid = o.seqid.wrapping_add(1);
                Ok(with_seqid(sid.other.0, o.seqid))
            }
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// RELEASE_LOCKOWNER (RFC 7530 §16.30.4): drops the lock stateids of
    /// `clientid`'s lock owner `owner`; NFS4ERR_LOCKS_HELD while any of
    /// them holds a range.
    pub(crate) fn release_lockowner(&mut self, clientid: u64, owner: &Bytes) -> Nfsstat4 {
        let mine: Vec<[u8; 12]> = self
            .by_client
            .get(&clientid)
            .into_iter()
            .flatten()
            .filter(
                |k| matches!(self.states.get(*k), Some(StateKind::Lock(l)) if l.owner == *owner),
            )
            .copied()
            .collect();
        let held = mine.iter().any(
            |k| matches!(self.states.get(k), Some(StateKind::Lock(l)) if !l.ranges.is_empty()),
        );
        if held {
            return Nfsstat4::NFS4ERR_LOCKS_HELD;
        }
        for k in mine {
            self.remove_state(&k);
        }
        Nfsstat4::NFS4_OK
    }

    /// Whether `clientid` holds any stateid.
    pub(crate) fn has_state(&self, clientid: u64) -> bool {
        self.by_client.get(&clientid).is_some_and(|s| !s.is_empty())
    }

    /// Whether `clientid` may take another stateid.
    fn room_for(&self, clientid: u64) -> Result<(), Nfsstat4> {
        if self.states.len() >= MAX_STATES {
            STATES.trip(format_args!("NFS4ERR_NOSPC: {MAX_STATES} stateids held"));
            return Err(Nfsstat4::NFS4ERR_NOSPC);
        }
        if self.by_client.get(&clientid).map_or(0, HashSet::len) >= MAX_STATES_PER_CLIENT {
            STATES_PER_CLIENT.trip(format_args!(
                "NFS4ERR_NOSPC: client {clientid:#x} holds {MAX_STATES_PER_CLIENT} stateids"
            ));
            return Err(Nfsstat4::NFS4ERR_NOSPC);
        }
        Ok(())
    }

    fn new_other(&mut self, clientid: u64) -> [u8; 12] {
        self.next = self.next.wrapping_add(1) & 0x7fff_ffff;
        let mut o = [0u8; 12];
        o[..8].copy_from_slice(&clientid.to_be_bytes());
        o[8..].copy_from_slice(&self.next.to_be_bytes());
        o
    }

    fn insert_state(&mut self, k: [u8; 12], st: StateKind) {
        self.by_fh.entry(st.fh().clone()).or_default().push(k);
        self.by_client.entry(st.clientid()).or_default().insert(k);
        self.states.insert(k, st);
    }

    fn remove_state(&mut self, k: &[u8; 12]) -> Option<StateKind> {
        let st = self.states.remove(k)?;
        if let Some(v) = self.by_client.get_mut(&st.clientid()) {
            v.remove(k);
            if v.is_empty() {
                self.by_client.remove(&st.clientid());
            }
        }
        if let Some(v) = self.by_fh.get_mut(st.fh()) {
            v.retain(|x| x != k);
            if v.is_empty() {
                self.by_fh.remove(st.fh());
            }
        }
        Some(st)
    }

    /// The states on `fh`.
    fn on_file<'a>(
        &'a self,
        fh: &Bytes,
    ) -> impl Iterator<Item = (&'a [u8; 12], &'a StateKind)> + 'a {
        self.by_fh
            .get(fh)
            .into_iter()
            .flatten()
            .filter_map(|k| self.states.get_key_value(k))
    }

    /// Finds the state of `sid` for `clientid` and checks its seqid (RFC
    /// 8881 §8.2.2: 0 means "current"; older is NFS4ERR_OLD_STATEID, newer
    /// NFS4ERR_BAD_STATEID). Special stateids are NFS4ERR_BAD_STATEID here.
    pub(crate) fn check(&self, sid: &Stateid4, clientid: u64) -> Result<&StateKind, Nfsstat4> {
        let Some(st) = self.states.get(&sid.other.0) else {
            let mut c = [0u8; 8];
            c.copy_from_slice(&sid.other.0[..8]);
            if self.expired.contains(&u64::from_be_bytes(c)) {
                return Err(Nfsstat4::NFS4ERR_EXPIRED);
            }
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        };
        if st.clientid() != clientid {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        let cur = st.seqid();
        if sid.seqid == 0 || sid.seqid == cur {
            Ok(st)
        } else if sid.seqid < cur {
            Err(Nfsstat4::NFS4ERR_OLD_STATEID)
        } else {
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        }
    }

    fn check_open(&self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Result<OpenState, Nfsstat4> {
        match self.check(sid, clientid)? {
            StateKind::Open(o) if o.fh == *fh => Ok(o.clone()),
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// (client, access) of every open of `fh`.
    pub(crate) fn opens_of(&self, fh: &Bytes) -> Vec<(u64, u32)> {
        self.opens_on(fh).map(|o| (o.clientid, o.access)).collect()
    }

    fn opens_on<'a>(&'a self, fh: &'a Bytes) -> impl Iterator<Item = &'a OpenState> + 'a {
        self.on_file(fh).filter_map(|(_, s)| match s {
            StateKind::Open(o) => Some(o),
            _ => None,
        })
    }

    /// OPEN's share reservation (RFC 8881 §9.7, §18.16.4): a conflict with
    /// another open owner's access or deny bits is NFS4ERR_SHARE_DENIED;
    /// the same owner opening again upgrades its open and bumps the seqid.
    pub(crate) fn open(
        &mut self,
        clientid: u64,
        owner: &Bytes,
        fh: &Bytes,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let conflict = self.opens_on(fh).any(|o| {
            !(o.clientid == clientid && o.owner == *owner)
                && (access & o.deny != 0 || deny & o.access != 0)
        });
        if conflict {
            return Err(Nfsstat4::NFS4ERR_SHARE_DENIED);
        }
        let mine = self.on_file(fh).find_map(|(k, s)| match s {
            StateKind::Open(o) if o.clientid == clientid && o.owner == *owner => Some(*k),
            _ => None,
        });
        if let Some(k) = mine {
            if let Some(StateKind::Open(o)) = self.states.get_mut(&k) {
                o.access |= access;
                o.deny |= deny;
                o.seqid = o.seqid.wrapping_add(1);
                return Ok(with_seqid(k, o.seqid));
            }
        }
        self.room_for(clientid)?;
        let k = self.new_other(clientid);
        self.insert_state(
            k,
            StateKind::Open(OpenState {
                clientid,
                owner: owner.clone(),
                fh: fh.clone(),
                seqid: 1,
                access,
                deny,
            }),
        );
        Ok(with_seqid(k, 1))
    }

    /// OPEN_DOWNGRADE (RFC 8881 §18.18.3): the new bits must be a
    /// non-empty subset of the current ones.
    pub(crate) fn open_downgrade(
        &mut self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        access: u32,
        deny: u32,
    ) -> Result<Stateid4, Nfsstat4> {
        let o = self.check_open(sid, clientid, fh)?;
        if access == 0 || access & !o.access != 0 || deny & !o.deny != 0 {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        match self.states.get_mut(&sid.other.0) {
            Some(StateKind::Open(o)) => {
                o.access = access;
                o.deny = deny;
                o.seqid = o.seqid.wrapping_add(1);
                Ok(with_seqid(sid.other.0, o.seqid))
            }
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// CLOSE (RFC 8881 §18.2.4): refused with NFS4ERR_LOCKS_HELD while a
    /// lock owner of this open still holds a range; otherwise the open
    /// goes. Its (now empty) lock stateids stay until FREE_STATEID
    /// (RFC 8881 §8.2.4), which Linux sends after CLOSE; used for I/O or
    /// LOCK they are NFS4ERR_BAD_STATEID, as their open is gone.
    pub(crate) fn close(&mut self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Nfsstat4 {
        if let Err(e) = self.check_open(sid, clientid, fh) {
            return e;
        }
        let k = sid.other.0;
        let held = self
            .on_file(fh)
            .any(|(_, s)| matches!(s, StateKind::Lock(l) if l.open == k && !l.ranges.is_empty()));
        if held {
            return Nfsstat4::NFS4ERR_LOCKS_HELD;
        }
        self.remove_state(&k);
        Nfsstat4::NFS4_OK
    }

    /// Checks a READ/WRITE/SETATTR(size) stateid for `fh` (RFC 8881 §8.2.3,
    /// §9.1.2). Special stateids pass unless another open denies the
    /// access (NFS4ERR_LOCKED); the READ bypass stateid ignores deny-read.
    /// An open or lock stateid must be for this file; writing needs an
    /// open with write access (NFS4ERR_OPENMODE); reading is allowed with
    /// any open, as Linux's nfsd does.
    pub(crate) fn io_check(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        write: bool,
    ) -> Result<(), Nfsstat4> {
        if sid.is_special() {
            if *sid != Stateid4::ANONYMOUS && *sid != Stateid4::BYPASS {
                return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
            }
            let bypass = *sid == Stateid4::BYPASS;
            let denied = self.opens_on(fh).any(|o| {
                (write && o.deny & OPEN4_SHARE_DENY_WRITE != 0)
                    || (!write && !bypass && o.deny & OPEN4_SHARE_DENY_READ != 0)
            });
            return if denied {
                Err(Nfsstat4::NFS4ERR_LOCKED)
            } else {
                Ok(())
            };
        }
        let st = self.check(sid, clientid)?;
        if st.fh() != fh {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        let access = match st {
            StateKind::Open(o) => o.access,
            StateKind::Lock(l) => match self.states.get(&l.open) {
                Some(StateKind::Open(o)) => o.access,
                _ => return Err(Nfsstat4::NFS4ERR_BAD_STATEID),
            },
        };
        if write && access & OPEN4_SHARE_ACCESS_WRITE == 0 {
            return Err(Nfsstat4::NFS4ERR_OPENMODE);
        }
        Ok(())
    }

    /// The first lock of another owner on `fh` conflicting with `start..end`.
    fn conflict(
        &self,
        clientid: u64,
        owner: &Bytes,
        fh: &Bytes,
        start: u128,
        end: u128,
        write: bool,
    ) -> Option<Lock4Denied> {
        self.on_file(fh).find_map(|(_, s)| match s {
            StateKind::Lock(l) if !(l.clientid == clientid && l.owner == *owner) => l
                .ranges
                .iter()
                .find(|r| overlaps(r, start, end) && (write || r.write))
                .map(|r| Lock4Denied {
                    offset: u64::try_from(r.start).unwrap_or(u64::MAX),
                    length: if r.end >= INF {
                        NFS4_UINT64_MAX
                    } else {
                        u64::try_from(r.end - r.start).unwrap_or(u64::MAX)
                    },
                    locktype: if r.write {
                        NfsLockType4::WRITE_LT
                    } else {
                        NfsLockType4::READ_LT
                    },
                    owner: StateOwner4 {
                        clientid: l.clientid,
                        owner: Bounded(l.owner.clone()),
                    },
                }),
            _ => None,
        })
    }

    /// LOCK (RFC 8881 §18.10.4): a new lock owner derives its stateid from
    /// an open of this file; the lock type must match the open's access
    /// (NFS4ERR_OPENMODE); a conflicting range of another owner is
    /// NFS4ERR_DENIED with that lock; the owner's own ranges are replaced
    /// by the new one (POSIX semantics) and the lock seqid bumps.
    pub(crate) fn lock(&mut self, clientid: u64, fh: &Bytes, a: &Lock4Args) -> LockRes4<Stateid4> {
        let (start, end) = match range(a.offset, a.length) {
            Ok(r) => r,
            Err(e) => return LockRes4::Err(e),
        };
        let write = a.locktype.is_write();
        let (key, owner, open) = match &a.locker {
            Locker4::New(n) => {
                let open = match self.check_open(&n.open_stateid, clientid, fh) {
                    Ok(o) => o,
                    Err(e) => return LockRes4::Err(e),
                };
                let owner = n.lock_owner.owner.0.clone();
                let existing = self.on_file(fh).find_map(|(k, s)| match s {
                    StateKind::Lock(l) if l.clientid == clientid && l.owner == owner => Some(*k),
                    _ => None,
                });
                (existing, owner, (n.open_stateid.other.0, open))
            }
            Locker4::Existing(e) => match self.check(&e.lock_stateid, clientid) {
                Ok(StateKind::Lock(l)) if l.fh == *fh => match self.states.get(&l.open) {
                    Some(StateKind::Open(o)) => (
                        Some(e.lock_stateid.other.0),
                        l.owner.clone(),
                        (l.open, o.clone()),
                    ),
                    _ => return LockRes4::Err(Nfsstat4::NFS4ERR_BAD_STATEID),
                },
                Ok(_) => return LockRes4::Err(Nfsstat4::NFS4ERR_BAD_STATEID),
                Err(e) => return LockRes4::Err(e),
            },
        };
        let need = if write {
            OPEN4_SHARE_ACCESS_WRITE
        } else {
            OPEN4_SHARE_ACCESS_READ
        };
        if open.1.access & need == 0 {
            return LockRes4::Err(Nfsstat4::NFS4ERR_OPENMODE);
        }
        if let Some(d) = self.conflict(clientid, &owner, fh, start, end, write) {
            return LockRes4::Denied(d);
        }
        let key = match key {
            Some(k) => k,
            None => {
                if let Err(e) = self.room_for(clientid) {
                    return LockRes4::Err(e);
                }
                let k = self.new_other(clientid);
                self.insert_state(
                    k,
                    StateKind::Lock(LockState {
                        clientid,
                        owner,
                        fh: fh.clone(),
                        seqid: 0,
                        open: open.0,
                        ranges: Vec::new(),
                    }),
                );
                k
            }
        };
        match self.states.get_mut(&key) {
            Some(StateKind::Lock(l)) => {
                let mut ranges = l.ranges.clone();
                subtract(&mut ranges, start, end);
                if ranges.len() >= MAX_RANGES {
                    RANGES.trip(format_args!(
                        "LOCK refused (NFS4ERR_NOSPC): {MAX_RANGES} ranges for one owner and file"
                    ));
                    return LockRes4::Err(Nfsstat4::NFS4ERR_NOSPC);
                }
                l.ranges = ranges;
                l.ranges.push(Range { start, end, write });
                l.seqid = l.seqid.wrapping_add(1);
                LockRes4::Ok(with_seqid(key, l.seqid))
            }
            _ => LockRes4::Err(Nfsstat4::NFS4ERR_SERVERFAULT),
        }
    }

    /// LOCKT (RFC 8881 §18.11.4).
    pub(crate) fn lockt(
        &self,
        clientid: u64,
        fh: &Bytes,
        owner: &Bytes,
        locktype: NfsLockType4,
        offset: u64,
        length: u64,
    ) -> LockRes4<()> {
        match range(offset, length) {
            Err(e) => LockRes4::Err(e),
            Ok((s, e)) => match self.conflict(clientid, owner, fh, s, e, locktype.is_write()) {
                Some(d) => LockRes4::Denied(d),
                None => LockRes4::Ok(()),
            },
        }
    }

    /// LOCKU (RFC 8881 §18.12.4).
    pub(crate) fn locku(
        &mut self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
        offset: u64,
        length: u64,
    ) -> Result<Stateid4, Nfsstat4> {
        let (start, end) = range(offset, length)?;
        match self.check(sid, clientid)? {
            StateKind::Lock(l) if l.fh == *fh => {}
            _ => return Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
        match self.states.get_mut(&sid.other.0) {
            Some(StateKind::Lock(l)) => {
                subtract(&mut l.ranges, start, end);
                l.seqid = l.seqid.wrapping_add(1);
                Ok(with_seqid(sid.other.0, l.seqid))
            }
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// The first byte-range lock on `fh` (of any owner) that a lock of
    /// `start..end` by another protocol's owner (NLM) conflicts with:
    /// (start, end, write, lock owner).
    pub(crate) fn foreign_conflict(
        &self,
        fh: &Bytes,
        start: u128,
        end: u128,
        write: bool,
    ) -> Option<(u128, u128, bool, Bytes)> {
        self.on_file(fh).find_map(|(_, s)| match s {
            StateKind::Lock(l) => l
                .ranges
                .iter()
                .find(|r| overlaps(r, start, end) && (write || r.write))
                .map(|r| (r.start, r.end, r.write, l.owner.clone())),
            StateKind::Open(_) => None,
        })
    }

    /// FREE_STATEID (RFC 8881 §18.38.3): a lock stateid without locks;
    /// an open, or a lock stateid still holding ranges, is
    /// NFS4ERR_LOCKS_HELD.
    pub(crate) fn free_stateid(&mut self, sid: &Stateid4, clientid: u64) -> Nfsstat4 {
        match self.check(sid, clientid) {
            Err(e) => e,
            Ok(StateKind::Lock(l)) if l.ranges.is_empty() => {
                self.remove_state(&sid.other.0);
                Nfsstat4::NFS4_OK
            }
            Ok(_) => Nfsstat4::NFS4ERR_LOCKS_HELD,
        }
    }

    /// TEST_STATEID's per-stateid status (RFC 8881 §18.48.3).
    pub(crate) fn test_stateid(&self, sid: &Stateid4, clientid: u64) -> Nfsstat4 {
        if sid.is_special() {
            return Nfsstat4::NFS4ERR_BAD_STATEID;
        }
        match self.check(sid, clientid) {
            Ok(_) => Nfsstat4::NFS4_OK,
            Err(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::v4::{ExistLockOwner4, OpenToLockOwner4};

    fn table() -> StateIds {
        StateIds::default()
    }

    fn lock_new(
        open: Stateid4,
        owner: &'static [u8],
        off: u64,
        len: u64,
        write: bool,
    ) -> Lock4Args {
        Lock4Args {
            locktype: if write {
                NfsLockType4::WRITE_LT
            } else {
                NfsLockType4::READ_LT
            },
            reclaim: false,
            offset: off,
            length: len,
            locker: Locker4::New(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: open,
                lock_seqid: 0,
                lock_owner: StateOwner4 {
                    clientid: 0,
                    owner: Bounded(Bytes::from_static(owner)),
                },
            }),
        }
    }

    #[test]
    fn share_deny_conflicts_between_owners_but_not_within_one() {
        let mut t = table();
        let fh = Bytes::from_static(b"f");
        let a = Bytes::from_static(b"a");
        let b = Bytes::from_static(b"b");
        let s1 = t.open(1, &a, &fh, 1, OPEN4_SHARE_DENY_WRITE).unwrap();
        assert_eq!(
            t.open(2, &b, &fh, 3, 0),
            Err(Nfsstat4::NFS4ERR_SHARE_DENIED)
        );
        assert_eq!(t.open(2, &b, &fh, 1, 0).map(|s| s.seqid), Ok(1));
        let s2 = t.open(1, &a, &fh, 3, 0).unwrap();
        assert_eq!((s2.other, s2.seqid), (s1.other, 2));
        assert_eq!(t.check(&s1, 1).err(), Some(Nfsstat4::NFS4ERR_OLD_STATEID));
        let future = Stateid4 { seqid: 9, ..s1 };
        assert_eq!(
            t.check(&future, 1).err(),
            Some(Nfsstat4::NFS4ERR_BAD_STATEID)
        );
        assert_eq!(t.check(&s2, 2).err(), Some(Nfsstat4::NFS4ERR_BAD_STATEID));
    }

    #[test]
    fn locks_split_merge_and_conflict() {
        let mut t = table();
        let fh = Bytes::from_static(b"f");
        let o1 = t.open(1, &Bytes::from_static(b"a"), &fh, 3, 0).unwrap();
        let o2 = t.open(2, &Bytes::from_static(b"b"), &fh, 3, 0).unwrap();
        let LockRes4::Ok(l1) = t.lock(1, &fh, &lock_new(o1, b"x", 0, 100, true)) else {
            panic!()
        };
        let LockRes4::Denied(d) = t.lock(2, &fh, &lock_new(o2, b"y", 50, 10, false)) else {
            panic!()
        };
        assert_eq!(
            (d.offset, d.length, d.locktype),
            (0, 100, NfsLockType4::WRITE_LT)
        );
        // Unlock the middle: 50..60 becomes free, 0..50 and 60..100 stay.
        let l1 = t.locku(&l1, 1, &fh, 50, 10).unwrap();
        assert!(matches!(
            t.lock(2, &fh, &lock_new(o2, b"y", 50, 10, false)),
            LockRes4::Ok(_)
        ));
        assert!(matches!(
            t.lockt(
                2,
                &fh,
                &Bytes::from_static(b"y"),
                NfsLockType4::READ_LT,
                60,
                1
            ),
            LockRes4::Denied(_)
        ));
        assert_eq!(t.close(&o1, 1, &fh), Nfsstat4::NFS4ERR_LOCKS_HELD);
        let l1 = t.locku(&l1, 1, &fh, 0, NFS4_UINT64_MAX).unwrap();
        let again = Lock4Args {
            locker: Locker4::Existing(ExistLockOwner4 {
                lock_stateid: l1,
                lock_seqid: 0,
            }),
            ..lock_new(o1, b"x", 0, 1, true)
        };
        assert!(matches!(t.lock(1, &fh, &again), LockRes4::Ok(s) if s.seqid == l1.seqid + 1));
    }

    #[test]
    fn one_owner_cannot_hold_unbounded_ranges() {
        let mut t = table();
        let fh = Bytes::from_static(b"f");
        let o = t.open(1, &Bytes::from_static(b"a"), &fh, 3, 0).unwrap();
        for i in 0..MAX_RANGES as u64 {
            assert!(matches!(
                t.lock(1, &fh, &lock_new(o, b"x", i * 2, 1, true)),
                LockRes4::Ok(_)
            ));
        }
        let r = t.lock(1, &fh, &lock_new(o, b"x", MAX_RANGES as u64 * 2, 1, true));
        assert_eq!(r.status(), Nfsstat4::NFS4ERR_NOSPC);
        // Replacing held ranges is still possible.
        assert!(matches!(
            t.lock(1, &fh, &lock_new(o, b"x", 0, 1, false)),
            LockRes4::Ok(_)
        ));
    }

    #[test]
    fn per_file_index_follows_the_states() {
        let mut t = table();
        let fh = Bytes::from_static(b"f");
        let o = t.open(1, &Bytes::from_static(b"a"), &fh, 3, 0).unwrap();
        let LockRes4::Ok(l) = t.lock(1, &fh, &lock_new(o, b"x", 0, 1, true)) else {
            panic!()
        };
        t.open(2, &Bytes::from_static(b"b"), &fh, 1, 0).unwrap();
        assert_eq!(t.by_fh.get(&fh).map(Vec::len), Some(3));
        let l = t.locku(&l, 1, &fh, 0, 1).unwrap();
        assert_eq!(t.close(&o, 1, &fh), Nfsstat4::NFS4_OK);
        assert_eq!(t.free_stateid(&l, 1), Nfsstat4::NFS4_OK);
        assert_eq!(t.by_fh.get(&fh).map(Vec::len), Some(1));
        // Drop the rest the way client expiry does.
        t.purge_client(1, true);
        t.purge_client(2, false);
        assert!(t.by_fh.is_empty() && t.states.is_empty() && t.by_client.is_empty());
        assert_eq!(t.check(&o, 1).err(), Some(Nfsstat4::NFS4ERR_EXPIRED));
    }

    #[test]
    fn rejects_empty_and_overflowing_ranges() {
        assert_eq!(range(u64::MAX, 2), Err(Nfsstat4::NFS4ERR_INVAL));
        assert_eq!(range(5, 0), Err(Nfsstat4::NFS4ERR_INVAL));
        assert_eq!(range(5, NFS4_UINT64_MAX), Ok((5, INF)));
    }

    #[test]
    fn one_client_cannot_hold_unbounded_stateids() {
        let mut t = table();
        let owner = Bytes::from_static(b"a");
        for i in 0..MAX_STATES_PER_CLIENT {
            let fh = Bytes::from(i.to_be_bytes().to_vec());
            assert!(t.open(1, &owner, &fh, 1, 0).is_ok());
        }
        let fh = Bytes::from_static(b"one more");
        let before = STATES_PER_CLIENT.count();
        assert_eq!(t.open(1, &owner, &fh, 1, 0), Err(Nfsstat4::NFS4ERR_NOSPC));
        assert!(STATES_PER_CLIENT.count() > before);
        assert!(
            t.open(2, &owner, &fh, 1, 0).is_ok(),
            "another client is not held back"
        );
    }

    #[test]
    fn remembers_a_bounded_number_of_expired_clients() {
        let mut t = table();
        let trips = EXPIRED.count();
        for id in 0..(MAX_EXPIRED as u64 + 10) {
            t.purge_client(id, true);
        }
        assert!(t.expired.len() <= MAX_EXPIRED);
        assert_eq!(EXPIRED.count(), trips + 1, "the forgetting counted");
        assert!(t.expired.contains(&(MAX_EXPIRED as u64 + 9)));
    }
}
