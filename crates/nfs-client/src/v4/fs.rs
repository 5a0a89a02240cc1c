//! File operations over a [`Session`]: each builds one COMPOUND after
//! SEQUENCE (RFC 8881 §16.2) starting from a file handle.

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use nfs::v4::attr::{
    Bitmap4, Fattr4, FileAttrs, FATTR4_CHANGE, FATTR4_FILEID, FATTR4_MAXREAD, FATTR4_MAXWRITE,
    FATTR4_MODE, FATTR4_NUMLINKS, FATTR4_OWNER, FATTR4_OWNER_GROUP, FATTR4_RAWDEV, FATTR4_SIZE,
    FATTR4_SPACE_USED, FATTR4_TIME_ACCESS, FATTR4_TIME_METADATA, FATTR4_TIME_MODIFY, FATTR4_TYPE,
};
use nfs::v4::{
    Close4Args, Commit4Args, Component4, Create4Args, Createhow4, Createtype4, Getattr4Args,
    Lookup4Args, NfsArgop4, NfsFh4, NfsFtype4, NfsResop4, Nfsstat4, Nfstime4, Open4Args,
    OpenClaim4, OpenHow4, Opnum4, Putfh4Args, Read4Args, Readdir4Args, Remove4Args, Rename4Args,
    Res4, StableHow4, StateOwner4, Stateid4, Verifier4, Write4Args, NFS4_MAXNAMLEN,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_NONE,
};
use oncrpc::ClientTransport;
use xdr::{Bounded, DdpOpaque, FixedOpaque};

use super::error::{Error, Result};
use super::session::Session;

/// The attributes [`Session::getattr`] asks for (RFC 8881 §5.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attrs {
    /// `type` (RFC 8881 §5.8.1.2).
    pub ftype: NfsFtype4,
    /// `size` (§5.8.1.5).
    pub size: u64,
    /// `mode` (§6.2.4), when the server supports it.
    pub mode: Option<u32>,
    /// `fileid` (§5.8.2.7), when supported.
    pub fileid: Option<u64>,
    /// `time_access` (§5.8.2.32), when supported.
    pub atime: Option<Nfstime4>,
    /// `time_modify` (§5.8.2.38), when supported.
    pub mtime: Option<Nfstime4>,
    /// `time_metadata` (§5.8.2.37), when supported.
    pub ctime: Option<Nfstime4>,
    /// `change` (§5.8.1.4).
    pub change: Option<u64>,
    /// `numlinks` (§5.8.2.20), when supported.
    pub nlink: Option<u32>,
    /// `owner` as a number (§5.9: AUTH_SYS servers may send the uid as a
    /// decimal string); `None` when absent or a name.
    pub uid: Option<u32>,
    /// `owner_group` as a number, likewise.
    pub gid: Option<u32>,
    /// `space_used` in bytes (§5.8.2.30), when supported.
    pub used: Option<u64>,
    /// `rawdev` (major, minor) of a device (§5.8.2.26), when supported.
    pub rawdev: Option<(u32, u32)>,
}

/// A numeric `owner` or `owner_group` (RFC 8881 §5.9).
fn numeric_id(s: Option<&nfs::v4::Utf8Str>) -> Option<u32> {
    std::str::from_utf8(&s?.0).ok()?.parse().ok()
}

impl Attrs {
    pub(crate) fn request() -> Bitmap4 {
        Bitmap4::from_bits(&[
            FATTR4_TYPE,
            FATTR4_CHANGE,
            FATTR4_SIZE,
            FATTR4_FILEID,
            FATTR4_MODE,
            FATTR4_NUMLINKS,
            FATTR4_OWNER,
            FATTR4_OWNER_GROUP,
            FATTR4_RAWDEV,
            FATTR4_SPACE_USED,
            FATTR4_TIME_ACCESS,
            FATTR4_TIME_METADATA,
            FATTR4_TIME_MODIFY,
        ])
    }

    pub(crate) fn from_fattr4(f: &Fattr4) -> Result<Self> {
        let a = FileAttrs::from_fattr4(f)?;
        Ok(Self {
            ftype: a.ftype.ok_or(Error::Protocol("GETATTR without type"))?,
            size: a.size.ok_or(Error::Protocol("GETATTR without size"))?,
            mode: a.mode,
            fileid: a.fileid,
            atime: a.time_access,
            mtime: a.time_modify,
            ctime: a.time_metadata,
            change: a.change,
            nlink: a.numlinks,
            uid: numeric_id(a.owner.as_ref()),
            gid: numeric_id(a.owner_group.as_ref()),
            used: a.space_used,
            rawdev: a.rawdev.map(|d| (d.specdata1, d.specdata2)),
        })
    }
}

/// One directory entry from [`Session::readdir`] (RFC 8881 §18.23.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The name.
    pub name: Bytes,
    /// The cookie to resume after this entry.
    pub cookie: u64,
    /// `type`, when the server returned it.
    pub ftype: Option<NfsFtype4>,
    /// `fileid`, when the server returned it.
    pub fileid: Option<u64>,
}

/// How [`Session::open`] opens a file (RFC 8881 §18.16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// `OPEN4_SHARE_ACCESS_*`.
    pub share_access: u32,
    /// `OPEN4_SHARE_DENY_*`.
    pub share_deny: u32,
    /// Create the file (UNCHECKED4) with this mode when it does not
    /// exist; `None` opens an existing file only (OPEN4_NOCREATE).
    pub create_mode: Option<u32>,
}

impl Default for OpenOptions {
    /// Read and write, deny nothing, no create.
    fn default() -> Self {
        Self {
            share_access: OPEN4_SHARE_ACCESS_BOTH,
            share_deny: OPEN4_SHARE_DENY_NONE,
            create_mode: None,
        }
    }
}

/// An open file: its handle and open stateid (RFC 8881 §18.16.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    /// The file handle.
    pub fh: NfsFh4,
    /// The open stateid, for READ, WRITE and CLOSE.
    pub stateid: Stateid4,
}

/// A name as an NFSv4 `component4` (RFC 8881 §14.2: UTF-8, no `/` or
/// NUL, not `.` or `..`, at most 255 bytes).
pub fn component(name: impl AsRef<[u8]>) -> Result<Component4> {
    let n = name.as_ref();
    let c = Component4(Bytes::copy_from_slice(n));
    if n.len() > NFS4_MAXNAMLEN || c.check().is_err() {
        return Err(Error::InvalidName(String::from_utf8_lossy(n).into_owned()));
    }
    Ok(c)
}

pub(crate) fn putfh(fh: &NfsFh4) -> NfsArgop4 {
    NfsArgop4::Putfh(Putfh4Args { object: fh.clone() })
}

/// The handle of the last GETFH in `res`.
pub(crate) fn last_fh(res: Vec<NfsResop4>) -> Result<NfsFh4> {
    res.into_iter()
        .rev()
        .find_map(|r| match r {
            NfsResop4::Getfh(Res4::Ok(f)) => Some(f.object),
            _ => None,
        })
        .ok_or(Error::Protocol("GETFH result missing"))
}

/// Reply bytes beside READ data in a READ COMPOUND: SEQUENCE, PUTFH and
/// READ's own words, with room to spare.
const READ_OVERHEAD: u32 = 512;
/// Request bytes beside WRITE data in a WRITE COMPOUND.
const WRITE_OVERHEAD: u32 = 512;

impl<T: ClientTransport> Session<T> {
    /// The root file handle (PUTROOTFH, GETFH; RFC 8881 §18.21).
    pub async fn root(&self) -> Result<NfsFh4> {
        last_fh(
            self.compound(vec![NfsArgop4::Putrootfh(()), NfsArgop4::Getfh(())])
                .await?,
        )
    }

    /// The root of the export at `path` (`/srv/export`, as in
    /// `mount server:/srv/export`): the server's namespace walked from
    /// PUTROOTFH a LOOKUP per component, through the junctions of its
    /// pseudo file system (RFC 8881 §7.3, §7.7), as the Linux client
    /// mounts; `/` is the root itself. NFS4ERR_NOTDIR when `path` is not a
    /// directory.
    pub async fn mount(&self, path: &str) -> Result<NfsFh4> {
        let fh = self.lookup_path(path).await?;
        if self.getattr(&fh).await?.ftype != NfsFtype4::NF4DIR {
            return Err(Error::Nfs {
                op: Opnum4::OP_LOOKUP,
                status: Nfsstat4::NFS4ERR_NOTDIR,
            });
        }
        Ok(fh)
    }

    /// Resolves a `/`-separated path from the root (PUTROOTFH, LOOKUP per
    /// component, GETFH; RFC 8881 §18.13), in as few COMPOUNDs as the
    /// fore channel's `ca_maxoperations` allows, each going on from the
    /// previous one's handle. Empty components are skipped.
    pub async fn lookup_path(&self, path: &str) -> Result<NfsFh4> {
        self.walk(None, path).await
    }

    /// Resolves a `/`-separated path from directory `dir` (as
    /// [`Self::lookup_path`] does from the root).
    pub async fn lookup_path_at(&self, dir: &NfsFh4, path: &str) -> Result<NfsFh4> {
        self.walk(Some(dir.clone()), path).await
    }

    async fn walk(&self, from: Option<NfsFh4>, path: &str) -> Result<NfsFh4> {
        let names = path
            .split('/')
            .filter(|c| !c.is_empty())
            .map(component)
            .collect::<Result<Vec<_>>>()?;
        // SEQUENCE, PUTROOTFH or PUTFH, and GETFH around the LOOKUPs.
        let per = (self.fore_channel().maxoperations as usize)
            .saturating_sub(3)
            .max(1);
        let mut fh = from;
        let mut rest = &names[..];
        loop {
            let (now, later) = rest.split_at(rest.len().min(per));
            let mut ops = vec![match &fh {
                None => NfsArgop4::Putrootfh(()),
                Some(f) => putfh(f),
            }];
            ops.extend(
                now.iter()
                    .map(|n| NfsArgop4::Lookup(Lookup4Args { objname: n.clone() })),
            );
            ops.push(NfsArgop4::Getfh(()));
            fh = Some(last_fh(self.compound(ops).await?)?);
            rest = later;
            if rest.is_empty() {
                return fh.ok_or(Error::Protocol("GETFH result missing"));
            }
        }
    }

    /// LOOKUP of `name` in `dir` (RFC 8881 §18.13).
    pub async fn lookup(&self, dir: &NfsFh4, name: &str) -> Result<NfsFh4> {
        let ops = vec![
            putfh(dir),
            NfsArgop4::Lookup(Lookup4Args {
                objname: component(name)?,
            }),
            NfsArgop4::Getfh(()),
        ];
        last_fh(self.compound(ops).await?)
    }

    /// GETATTR of type, size, mode, fileid and the times (RFC 8881
    /// §18.7).
    pub async fn getattr(&self, fh: &NfsFh4) -> Result<Attrs> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Attrs::request(),
            }),
        ];
        match self.compound(ops).await?.pop() {
            Some(NfsResop4::Getattr(Res4::Ok(g))) => Attrs::from_fattr4(&g.obj_attributes),
            _ => Err(Error::Protocol("GETATTR result missing")),
        }
    }

    /// Largest READ and WRITE the server accepts on `fh`'s file system
    /// (`maxread`, `maxwrite`, RFC 8881 §5.8.2.16, §5.8.2.17), each also
    /// bounded by the session's fore channel.
    pub async fn io_sizes(&self, fh: &NfsFh4) -> Result<(u32, u32)> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Getattr(Getattr4Args {
                attr_request: Bitmap4::from_bits(&[FATTR4_MAXREAD, FATTR4_MAXWRITE]),
            }),
        ];
        let Some(NfsResop4::Getattr(Res4::Ok(g))) = self.compound(ops).await?.pop() else {
            return Err(Error::Protocol("GETATTR result missing"));
        };
        let a = FileAttrs::from_fattr4(&g.obj_attributes)?;
        let fore = self.fore_channel();
        let rd = fore.maxresponsesize.saturating_sub(READ_OVERHEAD);
        let wr = fore.maxrequestsize.saturating_sub(WRITE_OVERHEAD);
        let clamp = |attr: Option<u64>, chan: u32| -> u32 {
            attr.map_or(chan, |m| m.min(u64::from(chan)) as u32)
        };
        let (r, w) = (clamp(a.maxread, rd), clamp(a.maxwrite, wr));
        if r == 0 || w == 0 {
            return Err(Error::Protocol("zero maxread or maxwrite"));
        }
        Ok((r, w))
    }

    /// Every entry of `dir` (RFC 8881 §18.23), reading on from each
    /// reply's last cookie with its verifier until `eof`.
    pub async fn readdir(&self, dir: &NfsFh4) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut cookie = 0;
        let mut verf: Verifier4 = FixedOpaque([0; 8]);
        let maxcount = self
            .fore_channel()
            .maxresponsesize
            .saturating_sub(512)
            .min(64 << 10);
        loop {
            let ops = vec![
                putfh(dir),
                NfsArgop4::Readdir(Readdir4Args {
                    cookie,
                    cookieverf: verf,
                    dircount: maxcount,
                    maxcount,
                    attr_request: Bitmap4::from_bits(&[FATTR4_TYPE, FATTR4_FILEID]),
                }),
            ];
            let Some(NfsResop4::Readdir(Res4::Ok(r))) = self.compound(ops).await?.pop() else {
                return Err(Error::Protocol("READDIR result missing"));
            };
            for e in &r.entries {
                let a = FileAttrs::from_fattr4(&e.attrs)?;
                out.push(DirEntry {
                    name: e.name.0.clone(),
                    cookie: e.cookie,
                    ftype: a.ftype,
                    fileid: a.fileid,
                });
            }
            if r.eof {
                return Ok(out);
            }
            match r.entries.last() {
                Some(e) if e.cookie != cookie => cookie = e.cookie,
                _ => return Err(Error::Protocol("READDIR made no progress")),
            }
            verf = r.cookieverf;
        }
    }

    /// OPEN of `name` in `dir` with CLAIM_NULL (RFC 8881 §18.16), then
    /// GETFH; with [`OpenOptions::create_mode`], creates it (UNCHECKED4)
    /// if absent. Each open uses a fresh open owner.
    pub async fn open(&self, dir: &NfsFh4, name: &str, how: OpenOptions) -> Result<OpenFile> {
        let openhow = OpenHow4(how.create_mode.map(|mode| {
            let attrs = FileAttrs {
                mode: Some(mode),
                ..FileAttrs::default()
            };
            Createhow4::Unchecked(attrs.to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE])))
        }));
        let ops = vec![
            putfh(dir),
            NfsArgop4::Open(Open4Args {
                seqid: 0,
                share_access: how.share_access,
                share_deny: how.share_deny,
                owner: StateOwner4 {
                    clientid: self.clientid(),
                    owner: Bounded(self.next_open_owner()),
                },
                openhow,
                claim: OpenClaim4::Null(component(name)?),
            }),
            NfsArgop4::Getfh(()),
        ];
        let res = self.compound(ops).await?;
        let stateid = res
            .iter()
            .find_map(|r| match r {
                NfsResop4::Open(Res4::Ok(o)) => Some(o.stateid),
                _ => None,
            })
            .ok_or(Error::Protocol("OPEN result missing"))?;
        Ok(OpenFile {
            fh: last_fh(res)?,
            stateid,
        })
    }

    /// CLOSE of an open file (RFC 8881 §18.2).
    pub async fn close_file(&self, file: OpenFile) -> Result<()> {
        let ops = vec![
            putfh(&file.fh),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: file.stateid,
            }),
        ];
        self.compound(ops).await.map(drop)
    }

    /// READ of at most `count` bytes at `offset` (RFC 8881 §18.22): the
    /// data and whether it reached the end of the file. The data is
    /// DDP-eligible: over RPC-over-RDMA it arrives by Write chunk.
    pub async fn read(&self, file: &OpenFile, offset: u64, count: u32) -> Result<(Bytes, bool)> {
        self.read_into(file, offset, count, None).await
    }

    /// Like [`Session::read`], with the reply built in `dst` (its capacity
    /// reused): over RPC-over-RDMA the server's RDMA Write places the data
    /// straight into `dst` and the returned bytes are a slice of it
    /// (RFC 8166 §3.4.6, [`oncrpc::ClientTransport::call_into`]).
    pub async fn read_into(
        &self,
        file: &OpenFile,
        offset: u64,
        count: u32,
        dst: Option<BytesMut>,
    ) -> Result<(Bytes, bool)> {
        let ops = vec![
            putfh(&file.fh),
            NfsArgop4::Read(Read4Args {
                stateid: file.stateid,
                offset,
                count,
            }),
        ];
        let Some(NfsResop4::Read(Res4::Ok(r))) = self.compound_into(ops, dst).await?.pop() else {
            return Err(Error::Protocol("READ result missing"));
        };
        if r.data.0.len() > count as usize {
            return Err(Error::Protocol("READ returned more than asked"));
        }
        Ok((r.data.0, r.eof))
    }

    /// Reads the whole file: its size from GETATTR, then READs of
    /// `maxread` ([`Session::io_sizes`]) with one call in flight per slot
    /// (RFC 8881 §2.10.6.1), then on from the last offset until end of
    /// file (the file may have grown).
    pub async fn read_all(&self, file: &OpenFile) -> Result<Vec<u8>> {
        let (maxread, _) = self.io_sizes(&file.fh).await?;
        let size = self.getattr(&file.fh).await?.size;
        let mut out = self.read_at(file, 0, size, maxread).await?;
        loop {
            let (data, eof) = self.read(file, out.len() as u64, maxread).await?;
            out.extend_from_slice(&data);
            if eof {
                return Ok(out);
            }
            if data.is_empty() {
                return Err(Error::Protocol("READ without data before end of file"));
            }
        }
    }

    /// Reads `len` bytes at `offset` in READs of at most `block` bytes,
    /// one in flight per slot; a short read is completed by further reads
    /// of the rest of its block. Stops early at end of file.
    pub async fn read_at(
        &self,
        file: &OpenFile,
        offset: u64,
        len: u64,
        block: u32,
    ) -> Result<Vec<u8>> {
        let block = u64::from(block.max(1));
        let cap = usize::try_from(len).map_err(|_| Error::Protocol("length beyond memory"))?;
        let mut out = Vec::with_capacity(cap.min(1 << 30));
        let starts = (0..len.div_ceil(block)).map(|i| offset + i * block);
        let mut stream = futures::stream::iter(starts)
            .map(|start| {
                let want = (offset + len - start).min(block) as u32;
                async move { (start, want, self.read(file, start, want).await) }
            })
            .buffered(self.slot_count());
        while let Some((start, want, res)) = stream.next().await {
            let (mut data, mut eof) = res?;
            let mut got = data.len() as u64;
            out.extend_from_slice(&data);
            while !eof && got < u64::from(want) {
                let rest = want - got as u32;
                (data, eof) = self.read(file, start + got, rest).await?;
                if data.is_empty() && !eof {
                    return Err(Error::Protocol("READ without data before end of file"));
                }
                got += data.len() as u64;
                out.extend_from_slice(&data);
            }
            if eof {
                break;
            }
        }
        Ok(out)
    }

    /// One WRITE (RFC 8881 §18.32): the bytes written, the stability
    /// reached and the write verifier.
    pub async fn write(
        &self,
        file: &OpenFile,
        offset: u64,
        data: Bytes,
        stable: StableHow4,
    ) -> Result<(u32, StableHow4, Verifier4)> {
        let len = data.len();
        let ops = vec![
            putfh(&file.fh),
            NfsArgop4::Write(Write4Args {
                stateid: file.stateid,
                offset,
                stable,
                data: DdpOpaque(data),
            }),
        ];
        let Some(NfsResop4::Write(Res4::Ok(w))) = self.compound(ops).await?.pop() else {
            return Err(Error::Protocol("WRITE result missing"));
        };
        if w.count as usize > len {
            return Err(Error::Protocol("WRITE wrote more than sent"));
        }
        Ok((w.count, w.committed, w.writeverf))
    }

    /// COMMIT of the whole file (RFC 8881 §18.3): the write verifier.
    pub async fn commit(&self, fh: &NfsFh4) -> Result<Verifier4> {
        let ops = vec![
            putfh(fh),
            NfsArgop4::Commit(Commit4Args {
                offset: 0,
                count: 0,
            }),
        ];
        match self.compound(ops).await?.pop() {
            Some(NfsResop4::Commit(Res4::Ok(c))) => Ok(c.writeverf),
            _ => Err(Error::Protocol("COMMIT result missing")),
        }
    }

    /// Writes `data` at `offset` in UNSTABLE WRITEs of `maxwrite`
    /// ([`Session::io_sizes`]), then COMMITs (RFC 8881 §18.32.3, §18.3.3):
    /// when a verifier differs from the COMMIT's (the server restarted),
    /// everything is written again FILE_SYNC4.
    pub async fn write_all(&self, file: &OpenFile, offset: u64, data: &[u8]) -> Result<()> {
        let (_, maxwrite) = self.io_sizes(&file.fh).await?;
        let data = Bytes::copy_from_slice(data);
        let verfs = self
            .write_range(file, offset, &data, maxwrite, StableHow4::UNSTABLE4)
            .await?;
        let committed = self.commit(&file.fh).await?;
        if verfs.iter().any(|v| *v != committed) {
            self.write_range(file, offset, &data, maxwrite, StableHow4::FILE_SYNC4)
                .await?;
        }
        Ok(())
    }

    /// WRITEs of `data` at `offset` in pieces of at most `maxwrite`, one
    /// in flight per slot; a short write is completed by further WRITEs.
    /// Returns the distinct verifiers of UNSTABLE4 replies.
    pub(super) async fn write_range(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &Bytes,
        maxwrite: u32,
        stable: StableHow4,
    ) -> Result<Vec<Verifier4>> {
        let block = (maxwrite as usize).max(1);
        let pieces = (0..data.len().div_ceil(block)).map(|i| {
            let at = i * block;
            (at, data.slice(at..data.len().min(at + block)))
        });
        let mut stream = futures::stream::iter(pieces)
            .map(|(at, piece)| async move {
                let r = self
                    .write(file, offset + at as u64, piece.clone(), stable)
                    .await;
                (at, piece, r)
            })
            .buffered(self.slot_count());
        let mut verfs = Vec::new();
        while let Some((at, piece, res)) = stream.next().await {
            let mut r = res?;
            let mut done = 0usize;
            loop {
                let (n, how, verf) = r;
                if n == 0 {
                    return Err(Error::Protocol("WRITE made no progress"));
                }
                if how == StableHow4::UNSTABLE4 && !verfs.contains(&verf) {
                    verfs.push(verf);
                }
                done += n as usize;
                if done >= piece.len() {
                    break;
                }
                r = self
                    .write(
                        file,
                        offset + (at + done) as u64,
                        piece.slice(done..),
                        stable,
                    )
                    .await?;
            }
        }
        Ok(verfs)
    }

    /// CREATE of directory `name` in `dir` with `mode` (RFC 8881 §18.4),
    /// returning its handle.
    pub async fn mkdir(&self, dir: &NfsFh4, name: &str, mode: u32) -> Result<NfsFh4> {
        let attrs = FileAttrs {
            mode: Some(mode),
            ..FileAttrs::default()
        };
        let ops = vec![
            putfh(dir),
            NfsArgop4::Create(Create4Args {
                objtype: Createtype4::Dir,
                objname: component(name)?,
                createattrs: attrs.to_fattr4(&Bitmap4::from_bits(&[FATTR4_MODE])),
            }),
            NfsArgop4::Getfh(()),
        ];
        last_fh(self.compound(ops).await?)
    }

    /// REMOVE of `name` from `dir` (RFC 8881 §18.25): a file or an empty
    /// directory.
    pub async fn remove(&self, dir: &NfsFh4, name: &str) -> Result<()> {
        let ops = vec![
            putfh(dir),
            NfsArgop4::Remove(Remove4Args {
                target: component(name)?,
            }),
        ];
        self.compound(ops).await.map(drop)
    }

    /// RENAME of `from_name` in `from_dir` to `to_name` in `to_dir`
    /// (RFC 8881 §18.26: the source directory is the saved handle).
    pub async fn rename(
        &self,
        from_dir: &NfsFh4,
        from_name: &str,
        to_dir: &NfsFh4,
        to_name: &str,
    ) -> Result<()> {
        let ops = vec![
            putfh(from_dir),
            NfsArgop4::Savefh(()),
            putfh(to_dir),
            NfsArgop4::Rename(Rename4Args {
                oldname: component(from_name)?,
                newname: component(to_name)?,
            }),
        ];
        self.compound(ops).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_names_that_are_not_components() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                matches!(component(bad), Err(Error::InvalidName(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            component("x".repeat(256)),
            Err(Error::InvalidName(_))
        ));
        assert_eq!(
            component("ok.txt").unwrap().0,
            Bytes::from_static(b"ok.txt")
        );
    }
}
