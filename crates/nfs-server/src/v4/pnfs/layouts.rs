//! The layouts a metadata server has handed out (RFC 8881 §12.5): one
//! layout stateid per client and file (§12.5.2), with the I/O modes held
//! under it. Plain data, no I/O: the operations in [`super::ops`] consult
//! and change it under one lock.
//!
//! Bound: at most `max` layout stateids in all; one more is refused and
//! trips the `pnfs.layouts` limit (the client is told
//! NFS4ERR_LAYOUTTRYLATER and does its I/O through the metadata server or
//! retries).
//!
//! Recalls (RFC 8881 §12.5.5): a layout being recalled carries the time
//! of the recall; while any layout of a file is being recalled, LAYOUTGET
//! of that file is NFS4ERR_RECALLCONFLICT (§18.43.3); LAYOUTRETURN ends
//! the recall, and a recall not ended within the lease is
//! [`LayoutTable::due`] for fencing.

use std::collections::BTreeMap;
use std::time::Duration;

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
    /// Where the file's data is: one data file per mirror handed out
    /// under this stateid (RFC 8435 §8).
    pub(crate) data: Vec<DataFile>,
    /// When the layout was recalled (the service clock), if it is being
    /// recalled.
    pub(crate) recalled: Option<Duration>,
}

/// A file's data file: the data server's index and the name in its
/// export.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DataFile {
    pub(crate) ds: usize,
    pub(crate) name: String,
}

/// One layout being recalled: who holds it, on which file, under which
/// stateid (its seqid bumped by the recall, RFC 8881 §12.5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recalled {
    pub(crate) client: u64,
    pub(crate) file: Bytes,
    pub(crate) stateid: Stateid4,
    pub(crate) data: Vec<DataFile>,
    /// Whether it is a read-write layout.
    pub(crate) rw: bool,
}

/// Every layout handed out, keyed by (client, file): ordered, so one
/// client's layouts are found without looking at the others'.
#[derive(Debug)]
pub(crate) struct LayoutTable {
    by_file: BTreeMap<(u64, Bytes), Layout>,
    /// Bytes 4 to 7 of every layout stateid's `other`: this instance's
    /// start time, so a stateid of an earlier instance is never taken
    /// for one of this one's (layouts do not survive a restart).
    boot: u32,
    next: u32,
    max: usize,
}

impl LayoutTable {
    /// An empty table holding at most `max` layout stateids, of the
    /// instance started at `boot` (seconds).
    pub(crate) fn new(max: usize, boot: u32) -> Self {
        Self {
            by_file: BTreeMap::new(),
            boot,
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
        data: &[DataFile],
    ) -> Result<Stateid4, Nfsstat4> {
        if self.recalling(file) {
            return Err(Nfsstat4::NFS4ERR_RECALLCONFLICT);
        }
        let k = (client, file.clone());
        if let Some(l) = self.by_file.get_mut(&k) {
            if Self::is_layout_stateid(presented) && presented.other != l.stateid.other {
                return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
            }
            l.stateid.seqid = l.stateid.seqid.wrapping_add(1).max(1);
            l.read |= iomode == Layoutiomode4::LAYOUTIOMODE4_READ;
            l.rw |= iomode == Layoutiomode4::LAYOUTIOMODE4_RW;
            // The client may hold the earlier grants' mirrors too.
            for d in data {
                if !l.data.contains(d) {
                    l.data.push(d.clone());
                }
            }
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
        other[4..8].copy_from_slice(&self.boot.to_be_bytes());
        other[8..].copy_from_slice(&self.next.to_be_bytes());
        self.next = self.next.wrapping_add(1);
        let l = Layout {
            stateid: Stateid4 {
                seqid: 1,
                other: FixedOpaque(other),
            },
            read: iomode == Layoutiomode4::LAYOUTIOMODE4_READ,
            rw: iomode == Layoutiomode4::LAYOUTIOMODE4_RW,
            data: data.to_vec(),
            recalled: None,
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
    /// drops every layout `client` holds and returns them with their
    /// files (work in proportion to that client's layouts).
    pub(crate) fn return_all(&mut self, client: u64) -> Vec<(Bytes, Layout)> {
        let keys: Vec<(u64, Bytes)> = self
            .by_file
            .range((client, Bytes::new())..)
            .take_while(|((c, _), _)| *c == client)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.by_file.remove(&k).map(|l| (k.1, l)))
            .collect()
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

    /// Whether a layout of `file` is being recalled.
    pub(crate) fn recalling(&self, file: &Bytes) -> bool {
        self.by_file
            .iter()
            .any(|((_, f), l)| f == file && l.recalled.is_some())
    }

    /// Starts the recall (at `now`) of every layout `pick` chooses (by
    /// its file and itself: of one file, on one data server...) not
    /// already being recalled: each one's stateid seqid is bumped (RFC
    /// 8881 §12.5.3, the recall carries it) and it is returned.
    pub(crate) fn recall(
        &mut self,
        pick: impl Fn(&Bytes, &Layout) -> bool,
        now: Duration,
    ) -> Vec<Recalled> {
        let mut out = Vec::new();
        for ((c, f), l) in &mut self.by_file {
            if l.recalled.is_some() || !pick(f, l) {
                continue;
            }
            l.recalled = Some(now);
            l.stateid.seqid = l.stateid.seqid.wrapping_add(1).max(1);
            out.push(Recalled {
                client: *c,
                file: f.clone(),
                stateid: l.stateid,
                data: l.data.clone(),
                rw: l.rw,
            });
        }
        out
    }

    /// Whether the layout of `r` is still being recalled.
    pub(crate) fn pending(&self, r: &Recalled) -> bool {
        self.by_file
            .get(&(r.client, r.file.clone()))
            .is_some_and(|l| l.stateid.other == r.stateid.other && l.recalled.is_some())
    }

    /// Of the recalls `rs`, those still pending whose recall started a
    /// `lease` or more before `now` (RFC 8881 §12.5.5.2: the client had
    /// its lease to return the layout); they are revoked here.
    pub(crate) fn due(&mut self, rs: &[Recalled], now: Duration, lease: Duration) -> Vec<Recalled> {
        let mut out = Vec::new();
        for r in rs {
            let k = (r.client, r.file.clone());
            let late = self.by_file.get(&k).is_some_and(|l| {
                l.stateid.other == r.stateid.other
                    && l.recalled.is_some_and(|t| now.saturating_sub(t) >= lease)
            });
            if late {
                self.by_file.remove(&k);
                out.push(r.clone());
            }
        }
        out
    }

    /// Drops `client`'s layout on `file` (it answered the recall with
    /// NFS4ERR_NOMATCHING_LAYOUT: it holds none, RFC 8881 §20.3.4).
    pub(crate) fn forget(&mut self, client: u64, file: &Bytes) {
        self.by_file.remove(&(client, file.clone()));
    }

    /// Whether some layout is one `pick` chooses.
    pub(crate) fn any(&self, pick: impl Fn(&Bytes, &Layout) -> bool) -> bool {
        self.by_file.iter().any(|((_, f), l)| pick(f, l))
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

    fn at(ds: usize) -> Vec<DataFile> {
        vec![DataFile {
            ds,
            name: format!("data{ds}"),
        }]
    }

    fn open_sid() -> Stateid4 {
        Stateid4 {
            seqid: 1,
            other: FixedOpaque([1; 12]),
        }
    }

    #[test]
    fn grants_one_stateid_per_client_and_file_and_bumps_its_seqid() {
        let mut t = LayoutTable::new(8, 1);
        let f = Bytes::from_static(b"file");
        let a = t.grant(1, &f, RD, &open_sid(), &at(0)).unwrap();
        assert!(LayoutTable::is_layout_stateid(&a));
        assert_eq!(a.seqid, 1);
        let b = t.grant(1, &f, RW, &a, &at(0)).unwrap();
        assert_eq!((b.other, b.seqid), (a.other, 2));
        assert!(t.writers(&f));
        let other = t.grant(2, &f, RD, &open_sid(), &at(0)).unwrap();
        assert_ne!(other.other, a.other);
        // Another client's layout stateid is not this client's.
        assert_eq!(
            t.grant(1, &f, RD, &other, &at(0)),
            Err(Nfsstat4::NFS4ERR_BAD_STATEID)
        );
        assert_eq!(
            t.check(2, &f, &a).err(),
            Some(Nfsstat4::NFS4ERR_BAD_STATEID)
        );
    }

    #[test]
    fn return_of_each_mode_then_the_last_frees_the_stateid() {
        let mut t = LayoutTable::new(8, 1);
        let f = Bytes::from_static(b"file");
        let s = t.grant(1, &f, RD, &open_sid(), &at(0)).unwrap();
        let s = t.grant(1, &f, RW, &s, &at(0)).unwrap();
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
        let mut t = LayoutTable::new(2, 1);
        let before = LAYOUTS.count();
        for n in 0..2u8 {
            t.grant(1, &Bytes::from(vec![n]), RD, &open_sid(), &at(0))
                .unwrap();
        }
        assert_eq!(
            t.grant(1, &Bytes::from_static(b"x"), RD, &open_sid(), &at(0)),
            Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER)
        );
        assert!(LAYOUTS.count() > before);
        assert_eq!(t.return_all(1).len(), 2);
        assert_eq!(t.len(), 0);
        t.grant(1, &Bytes::from_static(b"x"), RD, &open_sid(), &at(0))
            .unwrap();
        assert_eq!(t.forget_file(&Bytes::from_static(b"x")), vec![1]);
    }

    #[test]
    fn a_recall_blocks_new_layouts_until_returned_or_due() {
        let mut t = LayoutTable::new(8, 1);
        let f = Bytes::from_static(b"file");
        let g = Bytes::from_static(b"other");
        let a = t.grant(1, &f, RW, &open_sid(), &at(0)).unwrap();
        t.grant(2, &f, RD, &open_sid(), &at(0)).unwrap();
        t.grant(1, &g, RD, &open_sid(), &at(1)).unwrap();
        let now = Duration::from_secs(10);
        let rs = t.recall(|x, _| *x == f, now);
        assert_eq!(rs.len(), 2);
        let mine = rs.iter().find(|r| r.client == 1).unwrap();
        assert_eq!(
            mine.stateid.seqid,
            a.seqid + 1,
            "the recall bumps the seqid"
        );
        // Recalled once only; other files untouched.
        assert!(t.recall(|x, _| *x == f, now).is_empty());
        assert_eq!(
            t.grant(3, &f, RD, &open_sid(), &at(0)),
            Err(Nfsstat4::NFS4ERR_RECALLCONFLICT)
        );
        // Client 1 returns: its recall ends; client 2's is due after a lease.
        assert_eq!(
            t.return_file(1, &f, Layoutiomode4::LAYOUTIOMODE4_ANY, &mine.stateid),
            Ok(None)
        );
        let lease = Duration::from_secs(90);
        assert!(t.due(&rs, now + Duration::from_secs(89), lease).is_empty());
        let due = t.due(&rs, now + lease, lease);
        assert_eq!(due.iter().map(|r| r.client).collect::<Vec<_>>(), vec![2]);
        assert!(!t.recalling(&f));
        t.grant(3, &f, RD, &open_sid(), &at(0)).unwrap();
        // A data server's loss recalls the layouts on it only.
        let lost = t.recall(|_, l| l.data.iter().any(|d| d.ds == 1), now);
        assert_eq!(lost.len(), 1);
        assert_eq!((&lost[0].file, lost[0].data[0].ds), (&g, 1));
    }

    #[test]
    fn return_all_drops_one_clients_layouts_only() {
        let mut t = LayoutTable::new(16, 1);
        for c in [1u64, 2, 3] {
            for n in 0..3u8 {
                let iomode = if n == 0 { RW } else { RD };
                t.grant(c, &Bytes::from(vec![n]), iomode, &open_sid(), &at(n.into()))
                    .unwrap();
            }
        }
        let gone = t.return_all(2);
        assert_eq!(gone.len(), 3);
        assert_eq!(gone.iter().filter(|(_, l)| l.rw).count(), 1);
        assert_eq!(t.len(), 6);
        assert!(t.return_all(2).is_empty());
        assert!(t
            .check(
                1,
                &Bytes::from(vec![0]),
                &t.by_file[&(1, Bytes::from(vec![0]))].stateid
            )
            .is_ok());
        assert_eq!(t.return_all(u64::MAX).len(), 0);
    }
}
