//! NFSv4.0 open-owner and lock-owner sequence ids and the per-owner
//! reply cache (RFC 7530 §9.1.7): a sans-IO leaf table.
//!
//! Each owner's request carrying a seqid runs only when the seqid is the
//! last one plus one (wrapping, and an owner's first request takes any
//! seqid); the same seqid again replays the last reply, if it was for the
//! same operation; anything else is NFS4ERR_BAD_SEQID. The seqid moves on
//! with every reply except those RFC 7530 §9.1.7 lists
//! ([`advances`]).
//!
//! Bounds: [`MAX_OWNERS`] owners over all clients (a new owner beyond it
//! is NFS4ERR_RESOURCE, RFC 7530 §13.1.11, with an
//! [`oncrpc::limits::Limit`] trip); a cached reply longer than
//! [`MAX_REPLY`] is not kept (its retry then gets NFS4ERR_BAD_SEQID, as
//! when no reply is cached), so the cache holds at most
//! `MAX_OWNERS × MAX_REPLY` bytes.

use std::collections::HashMap;

use bytes::Bytes;
use nfs::v4::{NfsResop4, Nfsstat4};
use oncrpc::limits::Limit;
use xdr::Encode;

static OWNERS: Limit = Limit::new("nfs4.v40_owners");

/// Most NFSv4.0 open and lock owners remembered at once.
pub(crate) const MAX_OWNERS: usize = 1 << 14;
/// Longest reply kept for replay (OPEN, LOCK, CLOSE replies are far
/// shorter).
pub(crate) const MAX_REPLY: usize = 1024;

/// An owner: (client id, lock owner?, owner bytes).
pub(crate) type OwnerKey = (u64, bool, Bytes);

#[derive(Debug)]
struct Owner {
    seqid: u32,
    last: Option<NfsResop4>,
    confirmed: bool,
}

/// What to do with a request carrying a seqid.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SeqCheck {
    /// Run it.
    Run,
    /// A retry: send this reply again.
    Replay(NfsResop4),
    /// Out of sequence.
    Bad,
}

/// Whether a reply with `status` moves the owner's seqid on (RFC 7530
/// §9.1.7: all but these errors do).
pub(crate) fn advances(status: Nfsstat4) -> bool {
    !matches!(
        status,
        Nfsstat4::NFS4ERR_STALE_CLIENTID
            | Nfsstat4::NFS4ERR_STALE_STATEID
            | Nfsstat4::NFS4ERR_BAD_STATEID
            | Nfsstat4::NFS4ERR_BAD_SEQID
            | Nfsstat4::NFS4ERR_BADXDR
            | Nfsstat4::NFS4ERR_RESOURCE
            | Nfsstat4::NFS4ERR_NOFILEHANDLE
            | Nfsstat4::NFS4ERR_MOVED
    )
}

/// The NFSv4.0 owners of a server instance.
#[derive(Debug, Default)]
pub(crate) struct OwnerSeqs {
    owners: HashMap<OwnerKey, Owner>,
}

impl OwnerSeqs {
    /// Checks `seqid` of a request of owner `k` for operation `op`.
    pub(crate) fn check(&self, k: &OwnerKey, seqid: u32, op: nfs::v4::Opnum4) -> SeqCheck {
        let Some(o) = self.owners.get(k) else {
            return SeqCheck::Run;
        };
        if seqid == o.seqid.wrapping_add(1) {
            return SeqCheck::Run;
        }
        match &o.last {
            Some(r) if seqid == o.seqid && r.opnum() == op => SeqCheck::Replay(r.clone()),
            _ => SeqCheck::Bad,
        }
    }

    /// Room for owner `k`: NFS4ERR_RESOURCE when it is new and the table
    /// is full.
    pub(crate) fn room_for(&self, k: &OwnerKey) -> Result<(), Nfsstat4> {
        if self.owners.len() >= MAX_OWNERS && !self.owners.contains_key(k) {
            OWNERS.trip(format_args!(
                "NFS4ERR_RESOURCE: {MAX_OWNERS} NFSv4.0 owners held"
            ));
            return Err(Nfsstat4::NFS4ERR_RESOURCE);
        }
        Ok(())
    }

    /// Records the reply `r` to owner `k`'s request `seqid` (if the
    /// status moves the sequence on); a new owner is added, at most
    /// [`MAX_OWNERS`].
    pub(crate) fn record(&mut self, k: &OwnerKey, seqid: u32, r: &NfsResop4) {
        if !advances(r.status()) || self.room_for(k).is_err() {
            return;
        }
        let last = (r.encoded_len() <= MAX_REPLY).then(|| r.clone());
        let o = self.owners.entry(k.clone()).or_insert(Owner {
            seqid,
            last: None,
            confirmed: false,
        });
        o.seqid = seqid;
        o.last = last;
    }

    /// Whether open owner `k` is known and confirmed (RFC 7530 §9.1.11).
    pub(crate) fn confirmed(&self, k: &OwnerKey) -> bool {
        self.owners.get(k).is_some_and(|o| o.confirmed)
    }

    /// Marks open owner `k` confirmed (OPEN_CONFIRM, RFC 7530 §16.18.5).
    pub(crate) fn confirm(&mut self, k: &OwnerKey) {
        if let Some(o) = self.owners.get_mut(k) {
            o.confirmed = true;
        }
    }

    /// Forgets owner `k` (RELEASE_LOCKOWNER, RFC 7530 §16.30.4).
    pub(crate) fn forget(&mut self, k: &OwnerKey) {
        self.owners.remove(k);
    }

    /// Forgets every owner of `clientid` (the client went).
    pub(crate) fn purge_client(&mut self, clientid: u64) {
        self.owners.retain(|k, _| k.0 != clientid);
    }

    /// Owners held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::v4::Opnum4;

    fn key(n: u32) -> OwnerKey {
        (1, false, Bytes::from(n.to_be_bytes().to_vec()))
    }

    fn ok_close() -> NfsResop4 {
        NfsResop4::Close(nfs::v4::Res4::Ok(nfs::v4::Stateid4::ANONYMOUS))
    }

    #[test]
    fn next_seqid_runs_same_replays_others_are_bad() {
        let mut t = OwnerSeqs::default();
        let k = key(1);
        assert_eq!(t.check(&k, 77, Opnum4::OP_CLOSE), SeqCheck::Run);
        t.record(&k, 77, &ok_close());
        assert_eq!(t.check(&k, 78, Opnum4::OP_CLOSE), SeqCheck::Run);
        assert_eq!(
            t.check(&k, 77, Opnum4::OP_CLOSE),
            SeqCheck::Replay(ok_close())
        );
        assert_eq!(t.check(&k, 77, Opnum4::OP_OPEN), SeqCheck::Bad);
        assert_eq!(t.check(&k, 79, Opnum4::OP_CLOSE), SeqCheck::Bad);
        // BAD_STATEID does not move the sequence on (RFC 7530 §9.1.7).
        let bad = NfsResop4::error(Opnum4::OP_CLOSE, Nfsstat4::NFS4ERR_BAD_STATEID);
        t.record(&k, 78, &bad);
        assert_eq!(t.check(&k, 78, Opnum4::OP_CLOSE), SeqCheck::Run);
        t.record(&k, u32::MAX, &ok_close());
        assert_eq!(t.check(&k, 0, Opnum4::OP_CLOSE), SeqCheck::Run);
    }

    #[test]
    fn owner_table_is_bounded() {
        let mut t = OwnerSeqs::default();
        for n in 0..MAX_OWNERS as u32 {
            t.record(&key(n), 1, &ok_close());
        }
        let before = OWNERS.count();
        let extra = key(MAX_OWNERS as u32);
        assert_eq!(t.room_for(&extra), Err(Nfsstat4::NFS4ERR_RESOURCE));
        t.record(&extra, 1, &ok_close());
        assert_eq!(t.len(), MAX_OWNERS);
        assert!(OWNERS.count() > before);
        t.purge_client(1);
        assert_eq!(t.len(), 0);
    }
}
