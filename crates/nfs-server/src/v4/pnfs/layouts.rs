//! The layouts a metadata server has handed out (RFC 8881 §12.5): one
//! layout stateid per client and file (§12.5.2), with the I/O modes held
//! under it. Plain data, no I/O: the operations in [`super::ops`] consult
//! and change it under one lock.
//!
//! Bound: at most `max` layout stateids in all; one more is refused and
//! trips the `pnfs.layouts` limit (the client is told
//! NFS4ERR_LAYOUTTRYLATER and does its I/O through the metadata server or
//! retries).

use std::collections::HashMap;

use bytes::Bytes;
use nfs::v4::{Layoutiomode4, Nfsstat4, Stateid4};
use oncrpc::limits::Limit;
use xdr::FixedOpaque;

/// Layout stateids in all (`pnfs.layouts`).
static LAYOUTS: Limit = Limit::new("pnfs.layouts");

/// The first four bytes of a layout stateid's `other`, telling it from
/// open, lock and delegation stateids (whose first four bytes are the
/// server's boot time in seconds, never this value after 2010).
const TAG: [u8; 4] = *b"LYT1";

/// One client's layout on one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The layout stateid as last handed out.
    pub(crate) stateid: Stateid4,
    /// A read layout is held.
    pub(crate) read: bool,
    /// A read-write layout is held.
    pub(crate) rw: bool,
}

/// Every layout handed out, keyed by (client, file).
#[derive(Debug)]
pub(crate) struct LayoutTable {
    by_file: HashMap<(u64, Bytes), Layout>,
    next: u64,
    max: usize,
}

impl LayoutTable {
    /// An empty table holding at most `max` layout stateids.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            by_file: HashMap::new(),
            next: 1,
            max,
        }
    }

    /// Layout stateids held.
    pub(crate) fn len(&self) -> usize {
        self.by_file.len()
    }

    /// Whether `sid` looks like a layout stateid (RFC 8881 §12.5.3).
    pub(crate) fn is_layout_stateid(sid: &Stateid4) -> bool {
        sid.other.0[..4] == TAG
    }

    /// RFC 8881 §12.5.3: grants `iomode` on `file` to `client`; the
    /// first layout of a client on a file gets a new layout stateid with
    /// seqid 1, each later grant bumps its seqid. A layout stateid the
    /// client presents must be the one it holds for this file
    /// (NFS4ERR_BAD_STATEID) and not newer than it (NFS4ERR_OLD_STATEID is
    /// for older ones, which are accepted here as the client may race its
    /// own LAYOUTGETs).
    pub(crate) fn grant(
        &mut self,
        client: u64,
        file: &Bytes,
        iomode: Layoutiomode4,
        presented: &Stateid4,
    ) -> Result<Stateid4, Nfsstat4> {
        let k = (client, file.clone());
        if let Some(l) = self.by_file.get_mut(&k) {
            if Self::is_layout_stateid(presented) && presented.other != l.stateid.other {
                return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
            }
            l.stateid.seqid = l.stateid.seqid.wrapping_add(1).max(1);
            l.read |= iomode == Layoutiomode4::LAYOUTIOMODE4_READ;
            l.rw |= iomode == Layoutiomode4::LAYOUTIOMODE4_RW;
            return Ok(l.stateid);
        }
        if Self::is_layout_stateid(presented) {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        if self.by_file.len() >= self.max {
            LAYOUTS.trip(format_args!(
                "{} layouts held; LAYOUTGET from client {client:#x} refused with LAYOUTTRYLATER",
                self.max
            ));
            return Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER);
        }
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&TAG);
        other[4..].copy_from_slice(&self.next.to_be_bytes());
        self.next += 1;
        let l = Layout {
            stateid: Stateid4 {
                seqid: 1,
                other: FixedOpaque(other),
            },
            read: iomode == Layoutiomode4::LAYOUTIOMODE4_READ,
            rw: iomode == Layoutiomode4::LAYOUTIOMODE4_RW,
        };
        let sid = l.stateid;
        self.by_file.insert(k, l);
        Ok(sid)
    }

    /// The layout `client` holds on `file` under `sid` (LAYOUTCOMMIT,
    /// LAYOUTERROR, LAYOUTSTATS): NFS4ERR_BAD_STATEID when it holds none
    /// or another.
    pub(crate) fn check(
        &self,
        client: u64,
        file: &Bytes,
        sid: &Stateid4,
    ) -> Result<&Layout, Nfsstat4> {
        match self.by_file.get(&(client, file.clone())) {
            Some(l) if l.stateid.other == sid.other => Ok(l),
            _ => Err(Nfsstat4::NFS4ERR_BAD_STATEID),
        }
    }

    /// RFC 8881 §18.44.3 LAYOUTRETURN4_FILE of the whole file for
    /// `iomode`: what is left, with the stateid's seqid bumped, or `None`
    /// once nothing is (the stateid is then gone). A return of a layout
    /// not held succeeds with `None`; a stateid not the client's for the
    /// file is NFS4ERR_BAD_STATEID.
    pub(crate) fn return_file(
        &mut self,
        client: u64,
        file: &Bytes,
        iomode: Layoutiomode4,
        sid: &Stateid4,
    ) -> Result<Option<Stateid4>, Nfsstat4> {
        let k = (client, file.clone());
        let Some(l) = self.by_file.get_mut(&k) else {
            return Ok(None);
        };
        if l.stateid.other != sid.other {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        match iomode {
            Layoutiomode4::LAYOUTIOMODE4_READ => l.read = false,
            Layoutiomode4::LAYOUTIOMODE4_RW => l.rw = false,
            _ => (l.read, l.rw) = (false, false),
        }
        if l.read || l.rw {
            l.stateid.seqid = l.stateid.seqid.wrapping_add(1).max(1);
            return Ok(Some(l.stateid));
        }
        self.by_file.remove(&k);
        Ok(None)
    }

    /// LAYOUTRETURN4_FSID / LAYOUTRETURN4_ALL, and a client's expiry:
    /// drops every layout `client` holds.
    pub(crate) fn return_all(&mut self, client: u64) {
        self.by_file.retain(|(c, _), _| *c != client);
    }

    /// Drops every layout on `file` (it was removed), returning the
    /// clients that held one.
    pub(crate) fn forget_file(&mut self, file: &Bytes) -> Vec<u64> {
        let mut gone = Vec::new();
        self.by_file.retain(|(c, f), _| {
            let keep = f != file;
            if !keep {
                gone.push(*c);
            }
            keep
        });
        gone
    }

    /// Whether some client holds a read-write layout on `file`.
    pub(crate) fn writers(&self, file: &Bytes) -> bool {
        self.by_file.iter().any(|((_, f), l)| f == file && l.rw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: Layoutiomode4 = Layoutiomode4::LAYOUTIOMODE4_RW;
    const RD: Layoutiomode4 = Layoutiomode4::LAYOUTIOMODE4_READ;

    fn open_sid() -> Stateid4 {
        Stateid4 {
            seqid: 1,
            other: FixedOpaque([1; 12]),
        }
    }

    #[test]
    fn grants_one_stateid_per_client_and_file_and_bumps_its_seqid() {
        let mut t = LayoutTable::new(8);
        let f = Bytes::from_static(b"file");
        let a = t.grant(1, &f, RD, &open_sid()).unwrap();
        assert!(LayoutTable::is_layout_stateid(&a));
        assert_eq!(a.seqid, 1);
        let b = t.grant(1, &f, RW, &a).unwrap();
        assert_eq!((b.other, b.seqid), (a.other, 2));
        assert!(t.writers(&f));
        let other = t.grant(2, &f, RD, &open_sid()).unwrap();
        assert_ne!(other.other, a.other);
        // Another client's layout stateid is not this client's.
        assert_eq!(
            t.grant(1, &f, RD, &other),
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        );
        assert_eq!(
            t.check(2, &f, &a).err(),
            Some(Nfsstat4::NFS4ERR_BAD_STATEID)
        );
    }

    #[test]
    fn return_of_each_mode_then_the_last_frees_the_stateid() {
        let mut t = LayoutTable::new(8);
        let f = Bytes::from_static(b"file");
        let s = t.grant(1, &f, RD, &open_sid()).unwrap();
        let s = t.grant(1, &f, RW, &s).unwrap();
        let left = t.return_file(1, &f, RW, &s).unwrap().unwrap();
        assert_eq!(left.seqid, s.seqid + 1);
        assert!(!t.writers(&f));
        assert_eq!(t.return_file(1, &f, RD, &s), Ok(None));
        assert_eq!(t.len(), 0);
        // Returning what is not held is not an error.
        assert_eq!(t.return_file(1, &f, RD, &s), Ok(None));
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = LayoutTable::new(2);
        let before = LAYOUTS.count();
        for n in 0..2u8 {
            t.grant(1, &Bytes::from(vec![n]), RD, &open_sid()).unwrap();
        }
        assert_eq!(
            t.grant(1, &Bytes::from_static(b"x"), RD, &open_sid()),
            Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER)
        );
        assert!(LAYOUTS.count() > before);
        t.return_all(1);
        assert_eq!(t.len(), 0);
        t.grant(1, &Bytes::from_static(b"x"), RD, &open_sid())
            .unwrap();
        assert_eq!(t.forget_file(&Bytes::from_static(b"x")), vec![1]);
    }
}
