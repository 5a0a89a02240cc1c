//! One method per NFSv3 procedure (RFC 1813 §3.3), each taking its
//! decoded arguments and the caller's grant and returning its typed
//! result; [`Nfs3Fs::execute`](super::Nfs3Fs) only dispatches and
//! encodes. Procedures that change a directory answer through
//! [`Nfs3Fs::created`], [`Nfs3Fs::removed`] or [`with_wcc`] (weak cache
//! consistency data, post-op handles and attributes, §2.6).

use nfs::v3::*;
use oncrpc::ServiceError;
use xdr::{Encode, FixedOpaque, XdrBuf};

use super::{wcc_attr, Nfs3Fs};
use crate::access::Grant;
use crate::localfs::{MAX_READ, MAX_WRITE};
use crate::perm::{access_bits, check_setattr, permits, DIR_ADD, DIR_REMOVE};
use crate::storage::{ReadData, Storage};

/// The result of a procedure whose reply carries `w` (wcc data) whether
/// it succeeded or not (RFC 1813 §2.6).
fn with_wcc<W>(r: Result<(), Nfsstat3>, w: W) -> Res3<W, W> {
    match r {
        Ok(()) => Res3::Ok(w),
        Err(s) => Res3::Fail(s, w),
    }
}

impl<S: Storage> Nfs3Fs<S> {
    /// GETATTR (RFC 1813 §3.3.1).
    pub(super) async fn getattr3(&self, a: Getattr3Args) -> Getattr3Res {
        match self.fs.getattr(&a.object).await {
            Ok(obj_attributes) => Res3::Ok(Getattr3ResOk { obj_attributes }),
            Err(s) => Res3::Fail(s, ()),
        }
    }

    /// SETATTR (RFC 1813 §3.3.2).
    pub(super) async fn setattr3(&self, a: Setattr3Args, g: &Grant) -> Setattr3Res {
        let before = self.pre(&a.object).await;
        let r = match self.fs.getattr(&a.object).await {
            Ok(attrs) => match check_setattr(&attrs, &g.caller, &a.new_attributes) {
                Ok(()) => match self.fs.setattr(&a.object, &a.new_attributes, a.guard).await {
                    Ok(()) => self.attrs_set(&a.object, &attrs, &a.new_attributes).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        with_wcc(r, self.wcc(before, &a.object).await)
    }

    /// LOOKUP (RFC 1813 §3.3.3).
    pub(super) async fn lookup3(&self, a: Lookup3Args, g: &Grant) -> Lookup3Res {
        let found = match self
            .allow(&a.what.dir, &g.caller, ACCESS3_LOOKUP, false)
            .await
        {
            Ok(()) => self.fs.lookup(&a.what.dir, &a.what.name).await,
            Err(e) => Err(e),
        };
        match found {
            Ok(object) => Res3::Ok(Lookup3ResOk {
                obj_attributes: self.post(&object).await,
                dir_attributes: self.post(&a.what.dir).await,
                object,
            }),
            Err(s) => Res3::Fail(s, self.post(&a.what.dir).await),
        }
    }

    /// ACCESS (RFC 1813 §3.3.4).
    pub(super) async fn access3(&self, a: Access3Args, g: &Grant) -> Access3Res {
        match self.fs.getattr(&a.object).await {
            Ok(attrs) => Res3::Ok(Access3ResOk {
                access: access_bits(&attrs, &g.caller, a.access, g.read_only),
                obj_attributes: Some(attrs),
            }),
            Err(s) => Res3::Fail(s, None),
        }
    }

    /// READLINK (RFC 1813 §3.3.5).
    pub(super) async fn readlink3(&self, a: Readlink3Args) -> Readlink3Res {
        match self.fs.readlink(&a.symlink).await {
            Ok(data) => Res3::Ok(Readlink3ResOk {
                symlink_attributes: self.post(&a.symlink).await,
                data: Nfspath3(data),
            }),
            Err(s) => Res3::Fail(s, self.post(&a.symlink).await),
        }
    }

    /// READ (RFC 1813 §3.3.6): needs read or execute permission (nfsd's
    /// NFSD_MAY_READ_IF_EXEC), or ownership; checked and read in one pass
    /// over the handle (`read_checked`), encoded into `out`. With `files`
    /// (plain TCP) the data may stay in the file for the transport to
    /// send from it ([`crate::storage::ReadData::File`]).
    pub(super) async fn read3(&self, a: Read3Args, g: &Grant, files: bool, out: &mut XdrBuf) {
        let c = &g.caller;
        let may = |attrs: &Fattr3| {
            if permits(attrs, c, ACCESS3_READ, true) || permits(attrs, c, ACCESS3_EXECUTE, false) {
                Ok(())
            } else {
                Err(Nfsstat3::NFS3ERR_ACCES)
            }
        };
        let count = a.count.min(MAX_READ);
        let done = self
            .read_checked(&a.file, a.offset, count, &may, files)
            .await;
        match done.data {
            Ok((data, eof)) => encode_read3_ok(done.attrs, data, eof, out),
            Err(s) => Read3Res::Fail(s, done.attrs).encode(out),
        }
    }

    /// WRITE (RFC 1813 §3.3.7), checked and written in one pass over the
    /// handle (`write_checked`). A count that disagrees with the data
    /// length is GARBAGE_ARGS, as Linux's nfsd has it
    /// (nfs3svc_decode_writeargs).
    pub(super) async fn write3(&self, a: Write3Args, g: &Grant) -> Result<Write3Res, ServiceError> {
        if a.count as usize != a.data.0.len() {
            return Err(ServiceError::GarbageArgs(xdr::Error::new(
                xdr::ErrorKind::LengthExceeded {
                    len: a.count.into(),
                    max: a.data.0.len() as u64,
                },
                0,
                "WRITE3args count",
            )));
        }
        let c = &g.caller;
        let data = a.data.0.slice(..a.data.0.len().min(MAX_WRITE as usize));
        let may = |attrs: &Fattr3| {
            if permits(attrs, c, ACCESS3_MODIFY, true) {
                Ok(())
            } else {
                Err(Nfsstat3::NFS3ERR_ACCES)
            }
        };
        let (done, verf) = self
            .write_checked(&a.file, a.offset, data.clone(), a.stable, &may)
            .await;
        let file_wcc = WccData {
            before: done.before.as_ref().map(wcc_attr),
            after: done.after,
        };
        Ok(match done.written {
            Ok(committed) => Res3::Ok(Write3ResOk {
                file_wcc,
                count: u32::try_from(data.len()).unwrap_or(0),
                committed,
                verf: FixedOpaque(verf),
            }),
            Err(s) => Res3::Fail(s, file_wcc),
        })
    }

    /// CREATE (RFC 1813 §3.3.8).
    pub(super) async fn create3(&self, a: Create3Args, g: &Grant) -> Create3Res {
        let before = self.pre(&a.dir.dir).await;
        let r = match self.allow(&a.dir.dir, &g.caller, DIR_ADD, false).await {
            Ok(()) => self.fs.create(&a.dir.dir, &a.dir.name, &a.how).await,
            Err(e) => Err(e),
        };
        self.created(before, &a.dir.dir, r, &g.caller).await
    }

    /// MKDIR (RFC 1813 §3.3.9).
    pub(super) async fn mkdir3(&self, a: Mkdir3Args, g: &Grant) -> Create3Res {
        let before = self.pre(&a.dir.dir).await;
        let r = match self.allow(&a.dir.dir, &g.caller, DIR_ADD, false).await {
            Ok(()) => self.fs.mkdir(&a.dir.dir, &a.dir.name, &a.attributes).await,
            Err(e) => Err(e),
        };
        self.created(before, &a.dir.dir, r, &g.caller).await
    }

    /// SYMLINK (RFC 1813 §3.3.10).
    pub(super) async fn symlink3(&self, a: Symlink3Args, g: &Grant) -> Create3Res {
        let before = self.pre(&a.dir.dir).await;
        let r = match self.allow(&a.dir.dir, &g.caller, DIR_ADD, false).await {
            Ok(()) => {
                let d = &a.dir;
                self.fs
                    .symlink(&d.dir, &d.name, &a.symlink_data.0, &a.symlink_attributes)
                    .await
            }
            Err(e) => Err(e),
        };
        self.created(before, &a.dir.dir, r, &g.caller).await
    }

    /// MKNOD (RFC 1813 §3.3.11).
    pub(super) async fn mknod3(&self, a: Mknod3Args, g: &Grant) -> Create3Res {
        let before = self.pre(&a.dir.dir).await;
        let r = match self.allow(&a.dir.dir, &g.caller, DIR_ADD, false).await {
            Ok(()) => self.fs.mknod(&a.dir.dir, &a.dir.name, &a.what).await,
            Err(e) => Err(e),
        };
        self.created(before, &a.dir.dir, r, &g.caller).await
    }

    /// REMOVE (RFC 1813 §3.3.12).
    pub(super) async fn remove3(&self, a: Remove3Args, g: &Grant) -> Remove3Res {
        let before = self.pre(&a.object.dir).await;
        let r = match self
            .allow(&a.object.dir, &g.caller, DIR_REMOVE, false)
            .await
        {
            Ok(()) => self.remove_file(&a.object.dir, &a.object.name).await,
            Err(e) => Err(e),
        };
        self.removed(before, &a.object.dir, r).await
    }

    /// RMDIR (RFC 1813 §3.3.13).
    pub(super) async fn rmdir3(&self, a: Remove3Args, g: &Grant) -> Remove3Res {
        let before = self.pre(&a.object.dir).await;
        let r = match self
            .allow(&a.object.dir, &g.caller, DIR_REMOVE, false)
            .await
        {
            Ok(()) => self.fs.rmdir(&a.object.dir, &a.object.name).await,
            Err(e) => Err(e),
        };
        self.removed(before, &a.object.dir, r).await
    }

    /// RENAME (RFC 1813 §3.3.14).
    pub(super) async fn rename3(&self, a: Rename3Args, g: &Grant) -> Rename3Res {
        let c = &g.caller;
        let fb = self.pre(&a.from.dir).await;
        let tb = self.pre(&a.to.dir).await;
        let may = match self.allow(&a.from.dir, c, DIR_REMOVE, false).await {
            Ok(()) => self.allow(&a.to.dir, c, DIR_ADD, false).await,
            Err(e) => Err(e),
        };
        let r = match may {
            Ok(()) => {
                self.rename_file(&a.from.dir, &a.from.name, &a.to.dir, &a.to.name)
                    .await
            }
            Err(e) => Err(e),
        };
        let w = Rename3Wcc {
            fromdir_wcc: self.wcc(fb, &a.from.dir).await,
            todir_wcc: self.wcc(tb, &a.to.dir).await,
        };
        with_wcc(r, w)
    }

    /// LINK (RFC 1813 §3.3.15).
    pub(super) async fn link3(&self, a: Link3Args, g: &Grant) -> Link3Res {
        let before = self.pre(&a.link.dir).await;
        let r = match self.allow(&a.link.dir, &g.caller, DIR_ADD, false).await {
            Ok(()) => self.fs.link(&a.file, &a.link.dir, &a.link.name).await,
            Err(e) => Err(e),
        };
        let w = Link3Wcc {
            file_attributes: self.post(&a.file).await,
            linkdir_wcc: self.wcc(before, &a.link.dir).await,
        };
        with_wcc(r, w)
    }

    /// FSSTAT (RFC 1813 §3.3.18).
    pub(super) async fn fsstat3(&self, a: Fsroot3Args) -> Fsstat3Res {
        match self.fs.fsstat(&a.object).await {
            Ok(s) => Res3::Ok(Fsstat3ResOk {
                obj_attributes: self.post(&a.object).await,
                tbytes: s.tbytes,
                fbytes: s.fbytes,
                abytes: s.abytes,
                tfiles: s.tfiles,
                ffiles: s.ffiles,
                afiles: s.afiles,
                invarsec: 0,
            }),
            Err(e) => Res3::Fail(e, self.post(&a.object).await),
        }
    }

    /// FSINFO (RFC 1813 §3.3.19).
    pub(super) async fn fsinfo3(&self, a: Fsroot3Args) -> Fsinfo3Res {
        match self.fs.getattr(&a.object).await {
            Ok(attrs) => Res3::Ok(Fsinfo3ResOk {
                obj_attributes: Some(attrs),
                rtmax: MAX_READ,
                rtpref: MAX_READ,
                rtmult: 4096,
                wtmax: MAX_WRITE,
                wtpref: MAX_WRITE,
                wtmult: 4096,
                dtpref: 64 * 1024,
                maxfilesize: i64::MAX as u64,
                time_delta: Nfstime3 {
                    seconds: 0,
                    nseconds: 1,
                },
                properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
            }),
            Err(s) => Res3::Fail(s, None),
        }
    }

    /// PATHCONF (RFC 1813 §3.3.20).
    pub(super) async fn pathconf3(&self, a: Fsroot3Args) -> Pathconf3Res {
        match self.fs.getattr(&a.object).await {
            Ok(attrs) => Res3::Ok(Pathconf3ResOk {
                obj_attributes: Some(attrs),
                linkmax: 255,
                name_max: NFS3_MAXNAMLEN as u32,
                no_trunc: true,
                chown_restricted: true,
                case_insensitive: false,
                case_preserving: true,
            }),
            Err(s) => Res3::Fail(s, None),
        }
    }

    /// COMMIT (RFC 1813 §3.3.21).
    pub(super) async fn commit3(&self, a: Commit3Args) -> Commit3Res {
        let before = self.pre(&a.file).await;
        let r = self.commit_data(&a.file).await;
        let file_wcc = self.wcc(before, &a.file).await;
        match r {
            Ok(v) => Res3::Ok(Commit3ResOk {
                file_wcc,
                verf: FixedOpaque(v),
            }),
            Err(s) => Res3::Fail(s, file_wcc),
        }
    }
}

/// READ3resok (RFC 1813 §3.3.6) as [`Read3Res::Ok`] encodes it, with the
/// data by reference or left in the file; `data` is DDP-eligible (RFC
/// 8267 §4.1.1).
fn encode_read3_ok(attrs: Option<Fattr3>, data: ReadData, eof: bool, out: &mut XdrBuf) {
    Nfsstat3::NFS3_OK.encode(out);
    attrs.encode(out);
    u32::try_from(data.len()).unwrap_or(0).encode(out);
    eof.encode(out);
    data.encode_into(out, true);
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use xdr::Decode;

    use super::*;

    #[test]
    fn read3_ok_encodes_as_the_codec_does_and_decodes_back() {
        let attrs = Some(Fattr3 {
            ftype: Ftype3::NF3REG,
            mode: 0o644,
            nlink: 1,
            uid: 5,
            gid: 6,
            size: 77,
            used: 4096,
            rdev: Specdata3::default(),
            fsid: 1,
            fileid: 9,
            atime: Nfstime3::default(),
            mtime: Nfstime3::default(),
            ctime: Nfstime3::default(),
        });
        let data = Bytes::from_static(b"hello, world!");
        let mut ours = XdrBuf::new();
        encode_read3_ok(attrs.clone(), data.clone().into(), true, &mut ours);
        let codec = Read3Res::Ok(Read3ResOk {
            file_attributes: attrs.clone(),
            count: 13,
            eof: true,
            data: xdr::DdpOpaque(data.clone()),
        });
        let want = xdr::to_xdr_buf(&codec);
        assert_eq!(ours.to_bytes(), want.to_bytes());
        assert_eq!(
            ours.ddp_items()
                .map(|(p, d)| (p, d.len()))
                .collect::<Vec<_>>(),
            want.ddp_items()
                .map(|(p, d)| (p, d.len()))
                .collect::<Vec<_>>()
        );
        let bytes = ours.to_bytes();
        let back = Read3Res::decode(&mut xdr::Decoder::from_bytes(&bytes)).unwrap();
        assert_eq!(back, codec);
    }
}
