//! NFSv3 READDIR and READDIRPLUS (RFC 1813 §3.3.16, §3.3.17), one
//! storage call per page: the storage hands the directory's attributes
//! (from the look-up that opens it) to the page's sink, which makes the
//! access check on them, then the entries, which the sink encodes
//! straight into the reply's entry list, borrowed from the storage, with
//! no per-entry allocation. The page stops at the first entry that does
//! not fit the client's limits, counted exactly on the encoded bytes.

use nfs::v3::*;
use xdr::{Encode, Encoder, XdrBuf};

use crate::localfs::MAX_READ;
use crate::nfs3::Nfs3Fs;
use crate::perm::{permits, Caller};
use crate::storage::PLUS_TO_DIRENT;
use crate::storage::{DirEntry, DirPage, DirRequest, DirSink, Storage, StorageResult};

/// A READDIR or READDIRPLUS call, as the page needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirCall<'a> {
    pub(crate) dir: &'a NfsFh3,
    pub(crate) cookie: u64,
    pub(crate) cookieverf: [u8; 8],
    /// READDIR `count`, READDIRPLUS `maxcount`: the size of the resok.
    pub(crate) maxcount: u32,
    /// READDIRPLUS `dircount` (None for READDIR).
    pub(crate) dircount: Option<u32>,
}

impl<'a> DirCall<'a> {
    pub(crate) fn readdir(a: &'a Readdir3Args) -> Self {
        Self {
            dir: &a.dir,
            cookie: a.cookie,
            cookieverf: a.cookieverf.0,
            maxcount: a.count,
            dircount: None,
        }
    }

    pub(crate) fn readdirplus(a: &'a Readdirplus3Args) -> Self {
        Self {
            dir: &a.dir,
            cookie: a.cookie,
            cookieverf: a.cookieverf.0,
            maxcount: a.maxcount,
            dircount: Some(a.dircount),
        }
    }
}

/// The sink of one page: the access check on the directory's attributes,
/// then each entry encoded into `body` while it fits.
struct Page<'c> {
    caller: &'c Caller,
    /// Entries carry handles and attributes (READDIRPLUS).
    plus: bool,
    /// Bytes the resok may take (`count`/`maxcount`, capped at rtmax).
    limit: usize,
    /// Bytes of fileid, name and cookie the entries may take (READDIRPLUS
    /// `dircount`).
    dircount: usize,
    /// The directory's attributes, once the storage handed them.
    attrs: PostOpAttr,
    /// Bytes of the resok so far.
    used: usize,
    /// Bytes counted against `dircount` so far.
    dir_used: usize,
    /// The encoded entries (each `TRUE, entry`), without the terminator.
    body: Vec<u8>,
    entries: usize,
    /// Whether an entry (its handle) goes without attributes
    /// ([`Nfs3Fs::withhold_attrs`]).
    withhold: &'c (dyn Fn(&[u8]) -> bool + Sync),
}

impl DirSink for Page<'_> {
    fn dir(&mut self, attrs: &Fattr3) -> StorageResult<()> {
        self.attrs = Some(attrs.clone());
        self.used = dir_resok_fixed(&self.attrs);
        if permits(attrs, self.caller, ACCESS3_READ, false) {
            Ok(())
        } else {
            Err(Nfsstat3::NFS3ERR_ACCES)
        }
    }

    fn entry(&mut self, e: DirEntry<'_>) -> bool {
        let d = dircount_of(e.name);
        if self.plus && self.entries > 0 && self.dir_used + d > self.dircount {
            return false;
        }
        let mark = self.body.len();
        let attrs = match &e.plus {
            Some(Ok((fh, _))) if self.plus => !(self.withhold)(fh),
            _ => true,
        };
        encode_entry(&mut self.body, &e, self.plus, attrs);
        let len = self.body.len() - mark;
        if self.used + len > self.limit {
            self.body.truncate(mark);
            return false;
        }
        self.used += len;
        self.dir_used += d;
        self.entries += 1;
        true
    }
}

/// One `entry3` or `entryplus3` with the list's TRUE before it (RFC 1813
/// §3.3.16, §3.3.17); an entry whose handle and attributes could not be
/// had goes without both; without `attrs`, an entry goes with its handle
/// only.
fn encode_entry(out: &mut Vec<u8>, e: &DirEntry<'_>, plus: bool, attrs: bool) {
    out.put_bool(true);
    out.put_u64(e.fileid);
    out.put_string(e.name);
    out.put_u64(e.cookie);
    if !plus {
        return;
    }
    match &e.plus {
        Some(Ok((fh, at))) => {
            out.put_bool(attrs);
            if attrs {
                at.encode(out);
            }
            out.put_bool(true);
            out.put_opaque(fh);
        }
        _ => {
            out.put_bool(false);
            out.put_bool(false);
        }
    }
}

/// Size of a READDIR3resok/READDIRPLUS3resok without its entries: the
/// directory's `post_op_attr`, the verifier, the list terminator and
/// `eof` (RFC 1813 §3.3.16, §3.3.17).
fn dir_resok_fixed(attrs: &PostOpAttr) -> usize {
    attrs.encoded_len() + 8 + 4 + 4
}

/// The status of a READDIR/READDIRPLUS page: NFS3ERR_BAD_COOKIE when a
/// non-zero cookie comes with a verifier other than the directory's (a
/// zero verifier is taken as "none", as clients that ignore verifiers
/// send), NFS3ERR_TOOSMALL when not even one entry fit (RFC 1813 §3.3.16).
fn page_status(cookie: u64, verf: [u8; 8], page: &DirPage, empty: bool) -> Result<(), Nfsstat3> {
    if cookie != 0 && verf != [0; 8] && verf != page.verf {
        Err(Nfsstat3::NFS3ERR_BAD_COOKIE)
    } else if empty && !page.eof {
        Err(Nfsstat3::NFS3ERR_TOOSMALL)
    } else {
        Ok(())
    }
}

/// What one READDIRPLUS entry counts against `dircount`: fileid, name and
/// cookie (RFC 1813 §3.3.17).
fn dircount_of(name: &[u8]) -> usize {
    8 + 4 + xdr::padded_len(name.len()) + 8
}

impl<S: Storage> Nfs3Fs<S> {
    /// READDIR (RFC 1813 §3.3.16): entries while the READDIR3resok
    /// structure, XDR overhead included, stays within `count` (capped at
    /// rtmax). READDIRPLUS (§3.3.17): entries while the READDIRPLUS3resok
    /// structure stays within `maxcount` (capped at rtmax) and their
    /// fileids, names and cookies within `dircount` (the first entry is
    /// always let through `dircount`, so a small hint cannot make a
    /// listing fail); handles and attributes come with the entries from
    /// the storage, one `fstatat` each, never a second lookup. Either way
    /// one storage call: the access check is made on the directory
    /// attributes the storage reads when it opens the directory, and the
    /// storage reads only what fits. Encodes the result into `out`.
    pub(crate) async fn read_dir(&self, a: DirCall<'_>, c: &Caller, out: &mut XdrBuf) {
        let limit = a.maxcount.min(MAX_READ) as usize;
        let plus = a.dircount.is_some();
        let dircount = a.dircount.unwrap_or(u32::MAX) as usize;
        let mut page = Page {
            caller: c,
            plus,
            limit,
            dircount,
            attrs: None,
            used: 0,
            dir_used: 0,
            // Room for the whole page at once: the page's entries are
            // encoded straight into it and never copied by its growth
            // (from 64 KiB by doubling, 3.7% of the instructions of a
            // listing in 512 KiB pages). `limit` is the client's
            // `count`/`maxcount` capped at the server's reply limit
            // (`MAX_READ`): what the body could grow to anyway.
            body: Vec::with_capacity(limit),
            entries: 0,
            withhold: &|fh: &[u8]| self.withhold_attrs(fh),
        };
        let size_hint = match plus {
            true => (limit / PLUS_TO_DIRENT).min(dircount),
            false => limit,
        };
        let req = DirRequest {
            cookie: a.cookie,
            plus,
            size_hint,
        };
        let r = self.fs.readdir(a.dir, req, &mut page).await;
        let r =
            r.and_then(|p| page_status(a.cookie, a.cookieverf, &p, page.entries == 0).map(|()| p));
        match r {
            Ok(p) => {
                out.put_u32(0);
                page.attrs.encode(out);
                out.put_raw(&p.verf);
                // The entries (whole XDR units) join the reply as they
                // are: a 512 KiB page is not copied a second time.
                out.append(XdrBuf::from_bytes(std::mem::take(&mut page.body).into()));
                out.put_bool(false);
                out.put_bool(p.eof);
            }
            Err(s) => {
                let attrs = match page.attrs {
                    Some(at) => Some(at),
                    None => self.fs.getattr(a.dir).await.ok(),
                };
                s.encode(out);
                attrs.encode(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use xdr::FixedOpaque;

    fn attrs() -> Fattr3 {
        let t = Nfstime3 {
            seconds: 1,
            nseconds: 2,
        };
        Fattr3 {
            ftype: Ftype3::NF3REG,
            mode: 0o644,
            nlink: 1,
            uid: 3,
            gid: 4,
            size: 5,
            used: 6,
            rdev: Specdata3::default(),
            fsid: 8,
            fileid: 7,
            atime: t,
            mtime: t,
            ctime: t,
        }
    }

    fn entry<'a>(name: &'a [u8], fh: &'a [u8], plus: bool) -> DirEntry<'a> {
        DirEntry {
            fileid: 7,
            name,
            cookie: 99,
            plus: plus.then(|| Ok((fh, attrs()))),
        }
    }

    /// The hand-written entry encoding is byte for byte the codec's
    /// `dirlistplus3`/`dirlist3` (RFC 1813 §3.3.16-17), and counts what
    /// the codec's `encoded_len` counts.
    #[test]
    fn entries_encode_as_the_codec_does() {
        let fh = [5u8; 44];
        for name in [&b"a"[..], b"abcd", b"f-0000123"] {
            let mut ours = Vec::new();
            encode_entry(&mut ours, &entry(name, &fh, true), true, true);
            let item = Entryplus3 {
                fileid: 7,
                name: Filename3(Bytes::copy_from_slice(name)),
                cookie: 99,
                name_attributes: Some(attrs()),
                name_handle: NfsFh3::new(&fh),
            };
            let res = Readdirplus3ResOk {
                dir_attributes: None,
                cookieverf: FixedOpaque([0; 8]),
                entries: vec![item.clone()],
                eof: true,
            };
            let codec = xdr::to_bytes(&res);
            assert_eq!(&codec[4 + 8..codec.len() - 8], &ours[..]);
            assert_eq!(ours.len(), 4 + item.encoded_len());

            let mut ours = Vec::new();
            encode_entry(&mut ours, &entry(name, &fh, false), false, true);
            let item = Entry3 {
                fileid: 7,
                name: Filename3(Bytes::copy_from_slice(name)),
                cookie: 99,
            };
            assert_eq!(ours.len(), 4 + item.encoded_len());
        }
        let mut gone = Vec::new();
        let e = DirEntry {
            plus: Some(Err(Nfsstat3::NFS3ERR_NOENT)),
            ..entry(b"x", &fh, true)
        };
        encode_entry(&mut gone, &e, true, true);
        assert_eq!(&gone[gone.len() - 8..], &[0u8; 8][..]);
        // Attributes withheld (a write-delegated entry): the codec's
        // entry with no attributes and the handle.
        let mut ours = Vec::new();
        encode_entry(&mut ours, &entry(b"wd", &fh, true), true, false);
        let item = Entryplus3 {
            fileid: 7,
            name: Filename3(Bytes::from_static(b"wd")),
            cookie: 99,
            name_attributes: None,
            name_handle: NfsFh3::new(&fh),
        };
        let res = Readdirplus3ResOk {
            dir_attributes: None,
            cookieverf: FixedOpaque([0; 8]),
            entries: vec![item],
            eof: true,
        };
        let codec = xdr::to_bytes(&res);
        assert_eq!(&codec[4 + 8..codec.len() - 8], &ours[..]);
    }
}
