//! NFSv3 accesses that conflict with NFSv4 delegations (RFC 8881
//! §10.4.1; RFC 1813 §2.6 NFS3ERR_JUKEBOX): before a procedure runs, the
//! delegations on the files it reads (READ, COMMIT; and GETATTR, ACCESS
//! and LOOKUP, whose attributes a write delegation's holder may not have
//! sent yet, RFC 8881 §10.4.3: a write delegation) or changes (WRITE,
//! SETATTR, LINK; CREATE over, REMOVE or RENAME of a delegated name, and
//! the file a RENAME replaces) are recalled through
//! [`crate::v4::Delegations::break_for`]. When the holder does not return
//! them within the wait the procedure is answered NFS3ERR_JUKEBOX with
//! empty attributes and the client retries later. READDIRPLUS returns
//! attributes of many files at once: it recalls the write delegations of
//! its entries without waiting and returns those entries without
//! attributes (RFC 1813 §3.3.17: `name_attributes` is optional), so the
//! client asks for them with a GETATTR, which waits for the return.

use nfs::v3::*;
use xdr::XdrBuf;

use crate::nfs3::{failure, Nfs3Fs};
use crate::storage::Storage;

/// A file an access touches, and whether it changes it.
type Target = (NfsFh3, bool);

/// The files `args` touches, each with whether it changes them.
async fn targets<S: Storage>(fs: &S, args: &Args3) -> Vec<Target> {
    let named = |d: &Diropargs3, write| (d.clone(), write);
    let (direct, names): (Vec<Target>, Vec<(Diropargs3, bool)>) = match args {
        Args3::Getattr(a) => (vec![(a.object.clone(), false)], vec![]),
        Args3::Access(a) => (vec![(a.object.clone(), false)], vec![]),
        Args3::Lookup(a) => (vec![], vec![named(&a.what, false)]),
        Args3::Read(a) => (vec![(a.file.clone(), false)], vec![]),
        Args3::Commit(a) => (vec![(a.file.clone(), false)], vec![]),
        Args3::Write(a) => (vec![(a.file.clone(), true)], vec![]),
        Args3::Setattr(a) => (vec![(a.object.clone(), true)], vec![]),
        Args3::Link(a) => (vec![(a.file.clone(), true)], vec![]),
        Args3::Create(a) => (vec![], vec![named(&a.dir, true)]),
        Args3::Remove(a) => (vec![], vec![named(&a.object, true)]),
        Args3::Rename(a) => (vec![], vec![named(&a.from, true), named(&a.to, true)]),
        _ => return Vec::new(),
    };
    let mut out = direct;
    for (d, write) in names {
        if let Ok(fh) = fs.lookup(&d.dir, &d.name).await {
            out.push((fh, write));
        }
    }
    out
}

impl<S: Storage> Nfs3Fs<S> {
    /// Breaks the delegations `args` conflicts with; `Some(reply)`
    /// (NFS3ERR_JUKEBOX) when some are still held after the wait.
    pub(crate) async fn break_delegations(&self, args: &Args3) -> Option<XdrBuf> {
        let delegs = self.delegs.as_ref().filter(|d| d.any_held())?;
        for (fh, write) in targets(&*self.fs, args).await {
            if !delegs.break_for(&fh, write).await {
                tracing::debug!(proc_ = %args.procedure(), "NFS3ERR_JUKEBOX: delegation held");
                return Some(failure(args, Nfsstat3::NFS3ERR_JUKEBOX));
            }
        }
        None
    }
}

impl<S: Storage> Nfs3Fs<S> {
    /// READDIRPLUS: whether the entry with handle `fh` goes without
    /// attributes: another client holds a write delegation on it (the
    /// server's size and times are stale until the holder flushes, RFC
    /// 8881 §10.4.3), which is recalled, not awaited (one listing may
    /// name many).
    pub(crate) fn withhold_attrs(&self, fh: &[u8]) -> bool {
        self.delegs
            .as_ref()
            .is_some_and(|d| d.any_held() && d.recall(&bytes::Bytes::copy_from_slice(fh), 0, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use nfs::v3::Nfsproc3;
    use xdr::{Decode, Decoder};

    #[test]
    fn jukebox_replies_decode_as_the_procedures_failure() {
        let fh = NfsFh3::new(b"fh").unwrap();
        let dir = Diropargs3 {
            dir: fh.clone(),
            name: Filename3(Bytes::from_static(b"n")),
        };
        let cases = [
            (
                Nfsproc3::READ,
                Args3::Read(Read3Args {
                    file: fh.clone(),
                    offset: 0,
                    count: 1,
                }),
            ),
            (
                Nfsproc3::RENAME,
                Args3::Rename(Rename3Args {
                    from: dir.clone(),
                    to: dir.clone(),
                }),
            ),
            (
                Nfsproc3::LINK,
                Args3::Link(Link3Args {
                    file: fh.clone(),
                    link: dir.clone(),
                }),
            ),
            (
                Nfsproc3::LOOKUP,
                Args3::Lookup(Lookup3Args { what: dir.clone() }),
            ),
            (
                Nfsproc3::ACCESS,
                Args3::Access(Access3Args {
                    object: fh.clone(),
                    access: 1,
                }),
            ),
            (
                Nfsproc3::GETATTR,
                Args3::Getattr(Getattr3Args { object: fh.clone() }),
            ),
            (Nfsproc3::REMOVE, Args3::Remove(Remove3Args { object: dir })),
        ];
        for (p, a) in cases {
            let b = failure(&a, Nfsstat3::NFS3ERR_JUKEBOX).to_bytes();
            let mut d = Decoder::from_bytes(&b);
            let s = match p {
                Nfsproc3::READ => Read3Res::decode(&mut d).map(|r| r.status()),
                Nfsproc3::RENAME => Rename3Res::decode(&mut d).map(|r| r.status()),
                Nfsproc3::LINK => Link3Res::decode(&mut d).map(|r| r.status()),
                Nfsproc3::LOOKUP => Lookup3Res::decode(&mut d).map(|r| r.status()),
                Nfsproc3::ACCESS => Access3Res::decode(&mut d).map(|r| r.status()),
                Nfsproc3::GETATTR => Getattr3Res::decode(&mut d).map(|r| r.status()),
                _ => Remove3Res::decode(&mut d).map(|r| r.status()),
            };
            assert_eq!(s.unwrap(), Nfsstat3::NFS3ERR_JUKEBOX, "{p:?}");
            assert_eq!(d.remaining(), 0, "{p:?}");
        }
    }
}
