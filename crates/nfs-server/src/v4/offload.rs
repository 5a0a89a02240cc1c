//! Asynchronous COPY state (RFC 7862 §15.2.3, §15.8, §15.9, §16.1): the
//! sans-IO table of copies running in the background, their stateids
//! (COPY's `wr_callback_id`), their progress for OFFLOAD_STATUS, and
//! cancellation by OFFLOAD_CANCEL. The copying itself and CB_OFFLOAD are
//! in [`super::copyops`].
//!
//! A copy is "in flight" from its COPY reply until its CB_OFFLOAD is
//! answered (or given up on), it is cancelled, or its client goes. Bound
//! (limit `nfs4.async_copies`): at most [`MAX_PER_CLIENT`] copies in
//! flight per client and [`MAX_TOTAL`] in all; a COPY beyond either is
//! done synchronously instead (RFC 7862 §15.2.3 leaves the choice to the
//! server), so a client cannot make the server hold more background work
//! than that, and its further copies tie up its own slots.

use std::collections::HashMap;

use bytes::Bytes;
use nfs::v4::{Nfsstat4, OffloadStatus4ResOk, Stateid4};
use oncrpc::limits::Limit;
use xdr::{Bounded, FixedOpaque};

static ASYNC_COPIES: Limit = Limit::new("nfs4.async_copies");

/// Most asynchronous copies one client may have in flight.
pub(crate) const MAX_PER_CLIENT: usize = 4;
/// Most asynchronous copies in flight in all.
pub(crate) const MAX_TOTAL: usize = 64;

/// The first four bytes of a copy stateid's `other`, telling it from
/// open, lock and delegation stateids (whose first four bytes are the
/// high half of a client id: the server's boot time in seconds) and
/// layout stateids (`LYT1`).
const TAG: [u8; 4] = *b"CPY1";

/// How a copy ended: bytes copied, and the status when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) copied: u64,
    pub(crate) status: Nfsstat4,
}

#[derive(Debug)]
struct Entry {
    clientid: u64,
    /// The destination's handle.
    fh: Bytes,
    /// Bytes copied so far.
    copied: u64,
    /// Set once the copy ended.
    outcome: Option<Outcome>,
}

/// The asynchronous copies of a server instance.
#[derive(Debug)]
pub(crate) struct Offloads {
    copies: HashMap<[u8; 12], Entry>,
    per_client: HashMap<u64, usize>,
    next: u64,
    max_per_client: usize,
    max_total: usize,
}

impl Default for Offloads {
    fn default() -> Self {
        Self::new(MAX_PER_CLIENT, MAX_TOTAL)
    }
}

impl Offloads {
    /// A table admitting `max_per_client` copies per client and
    /// `max_total` in all.
    pub(crate) fn new(max_per_client: usize, max_total: usize) -> Self {
        Self {
            copies: HashMap::new(),
            per_client: HashMap::new(),
            next: 0,
            max_per_client,
            max_total,
        }
    }

    /// Copies in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.copies.len()
    }

    /// Whether `clientid` has copies in flight.
    pub(crate) fn has_copies(&self, clientid: u64) -> bool {
        self.per_client.contains_key(&clientid)
    }

    /// Admits a copy of `clientid` to destination `fh`: its stateid, or
    /// `None` past a bound (the copy is then done synchronously).
    pub(crate) fn start(&mut self, clientid: u64, fh: Bytes) -> Option<Stateid4> {
        let mine = self.per_client.get(&clientid).copied().unwrap_or(0);
        if mine >= self.max_per_client || self.copies.len() >= self.max_total {
            ASYNC_COPIES.trip(format_args!(
                "COPY done synchronously: client {clientid:#x} has {mine} asynchronous copies in flight, {} in all (at most {} and {})",
                self.copies.len(),
                self.max_per_client,
                self.max_total
            ));
            return None;
        }
        self.next = self.next.wrapping_add(1);
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&TAG);
        other[4..].copy_from_slice(&self.next.to_be_bytes());
        self.copies.insert(
            other,
            Entry {
                clientid,
                fh,
                copied: 0,
                outcome: None,
            },
        );
        *self.per_client.entry(clientid).or_default() += 1;
        Some(Stateid4 {
            seqid: 1,
            other: FixedOpaque(other),
        })
    }

    /// Records `copied` bytes done; `false` when the copy was cancelled
    /// or its client went (the copier stops).
    pub(crate) fn progress(&mut self, sid: &Stateid4, copied: u64) -> bool {
        match self.copies.get_mut(&sid.other.0) {
            Some(e) => {
                e.copied = copied;
                true
            }
            None => false,
        }
    }

    /// The copy ended; `false` when it was cancelled meanwhile (no
    /// CB_OFFLOAD is sent for it).
    pub(crate) fn finish(&mut self, sid: &Stateid4, outcome: Outcome) -> bool {
        match self.copies.get_mut(&sid.other.0) {
            Some(e) => {
                e.copied = outcome.copied;
                e.outcome = Some(outcome);
                true
            }
            None => false,
        }
    }

    /// The copy's CB_OFFLOAD was answered, or given up on: it is no
    /// longer in flight.
    pub(crate) fn remove(&mut self, sid: &Stateid4) {
        if let Some(e) = self.copies.remove(&sid.other.0) {
            self.release(e.clientid);
        }
    }

    fn release(&mut self, clientid: u64) {
        if let Some(n) = self.per_client.get_mut(&clientid) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&clientid);
            }
        }
    }

    /// The copy `sid` of `clientid` on destination `fh`: NFS4ERR_BAD_STATEID
    /// for any other (unknown, another client's, another file's, or one
    /// already reported and gone), as Linux's nfsd answers.
    fn find(&self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Result<&Entry, Nfsstat4> {
        self.copies
            .get(&sid.other.0)
            .filter(|e| e.clientid == clientid && e.fh == *fh)
            .ok_or(Nfsstat4::NFS4ERR_BAD_STATEID)
    }

    /// OFFLOAD_STATUS (RFC 7862 §15.9.3): bytes copied so far, and the
    /// copy's status once it ended.
    pub(crate) fn status(
        &self,
        sid: &Stateid4,
        clientid: u64,
        fh: &Bytes,
    ) -> Result<OffloadStatus4ResOk, Nfsstat4> {
        let e = self.find(sid, clientid, fh)?;
        Ok(OffloadStatus4ResOk {
            count: e.copied,
            complete: Bounded(e.outcome.map(|o| o.status).into_iter().collect()),
        })
    }

    /// OFFLOAD_CANCEL (RFC 7862 §15.8.3): the copy stops at its next
    /// chunk and no CB_OFFLOAD follows; what it copied stays.
    pub(crate) fn cancel(&mut self, sid: &Stateid4, clientid: u64, fh: &Bytes) -> Nfsstat4 {
        if let Err(e) = self.find(sid, clientid, fh) {
            return e;
        }
        self.remove(sid);
        Nfsstat4::NFS4_OK
    }

    /// Drops the copies of a client that went away (their copiers stop).
    pub(crate) fn purge_client(&mut self, clientid: u64) {
        self.copies.retain(|_, e| e.clientid != clientid);
        self.per_client.remove(&clientid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Outcome = Outcome {
        copied: 10,
        status: Nfsstat4::NFS4_OK,
    };

    #[test]
    fn copies_are_bounded_per_client_and_in_all() {
        let fh = Bytes::from_static(b"f");
        let mut t = Offloads::new(2, 3);
        let a1 = t.start(1, fh.clone()).unwrap();
        let _a2 = t.start(1, fh.clone()).unwrap();
        assert!(t.start(1, fh.clone()).is_none(), "per client");
        let _b1 = t.start(2, fh.clone()).unwrap();
        assert!(t.start(3, fh.clone()).is_none(), "in all");
        // A copy still counts after it ended, until its CB_OFFLOAD is done.
        assert!(t.finish(&a1, DONE));
        assert!(t.start(3, fh.clone()).is_none());
        t.remove(&a1);
        assert!(t.start(3, fh.clone()).is_some());
        assert_eq!(a1.other.0[..4], TAG);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn status_and_cancel_only_for_the_owner_and_file() {
        let (f, g) = (Bytes::from_static(b"f"), Bytes::from_static(b"g"));
        let mut t = Offloads::default();
        let s = t.start(7, f.clone()).unwrap();
        assert!(t.progress(&s, 4096));
        let st = t.status(&s, 7, &f).unwrap();
        assert_eq!((st.count, st.complete.0.len()), (4096, 0));
        assert_eq!(t.status(&s, 8, &f), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
        assert_eq!(t.status(&s, 7, &g), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
        assert_eq!(t.cancel(&s, 8, &f), Nfsstat4::NFS4ERR_BAD_STATEID);
        t.finish(&s, DONE);
        let st = t.status(&s, 7, &f).unwrap();
        assert_eq!(st.complete.0, vec![Nfsstat4::NFS4_OK]);
        assert_eq!(t.cancel(&s, 7, &f), Nfsstat4::NFS4_OK);
        assert!(!t.progress(&s, 1), "the copier stops");
        assert!(!t.finish(&s, DONE), "no CB_OFFLOAD");
        assert_eq!(t.status(&s, 7, &f), Err(Nfsstat4::NFS4ERR_BAD_STATEID));
        assert!(!t.has_copies(7));
    }

    #[test]
    fn a_client_that_goes_takes_its_copies() {
        let f = Bytes::from_static(b"f");
        let mut t = Offloads::new(1, 8);
        let s = t.start(1, f.clone()).unwrap();
        t.start(2, f.clone()).unwrap();
        t.purge_client(1);
        assert!(!t.progress(&s, 1));
        assert!(t.start(1, f).is_some());
        assert_eq!(t.len(), 2);
    }
}
