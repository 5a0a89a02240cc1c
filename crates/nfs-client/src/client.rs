//! [`Nfs3Client`]: one typed async method per NFSv3 procedure over any
//! [`ClientTransport`].

use bytes::{Bytes, BytesMut};
use nfs::ulb::{NfsV3Binding, UpperLayerBinding};
use nfs::v3::{
    Access3Args, Access3ResOk, Commit3Args, Commit3ResOk, Cookieverf3, Create3Args, Create3ResOk,
    Createhow3, Diropargs3, Fattr3, Filename3, Fsinfo3ResOk, Fsroot3Args, Fsstat3ResOk,
    Getattr3Args, Getattr3ResOk, Link3Args, Link3Wcc, Lookup3Args, Lookup3ResOk, Mkdir3Args,
    Mknod3Args, Mknoddata3, NfsFh3, Nfspath3, Nfsproc3, Nfstime3, Pathconf3ResOk, PostOpAttr,
    Read3Args, Read3ResOk, Readdir3Args, Readdir3ResOk, Readdirplus3Args, Readdirplus3ResOk,
    Readlink3Args, Readlink3ResOk, Remove3Args, Rename3Args, Rename3Wcc, Res3, Sattr3,
    Setattr3Args, StableHow, Symlink3Args, WccData, Write3Args, Write3ResOk, FATTR3_LEN,
    NFS3_MAXNAMLEN, NFS3_MAXPATHLEN, NFS_PROGRAM, NFS_V3,
};
use oncrpc::client::DdpReplyHint;
use oncrpc::msg::{AuthSys, OpaqueAuth, MAX_AUTH_BYTES, MAX_MACHINENAME};
use oncrpc::{ClientTransport, ReplyHint, RpcCall};
use xdr::{Decode, Decoder, Encode, XdrBuf};

use crate::error::{Error, Result};

/// Largest RPC accepted-reply header before the procedure results:
/// xid, message type, reply status, verifier (flavor, length, up to
/// `MAX_AUTH_BYTES` of body) and accept status (RFC 5531 §9).
pub const RPC_REPLY_HEADER_MAX: usize = 6 * 4 + MAX_AUTH_BYTES;

/// Offset of READ3resok `data` in the READ results when the server
/// returns attributes: status, `post_op_attr` (4 + 84), count, eof, the
/// length word (RFC 1813 §3.3.6). Linux's nfsd and this project's server
/// always send attributes; an RPC-over-RDMA transport splices the Write
/// chunk here (RFC 8166 §3.4.6).
pub const READ_DATA_POSITION: usize = 4 + 4 + FATTR3_LEN + 4 + 4 + 4;

/// Offset of READLINK3resok `data` when attributes are present
/// (RFC 1813 §3.3.5): status, `post_op_attr`, the length word.
pub const READLINK_DATA_POSITION: usize = 4 + 4 + FATTR3_LEN + 4;

/// The AUTH_SYS credential of this process (RFC 5531 Appendix A): the
/// effective uid and gid (the owner of `/proc/self`) and the host name,
/// or uid/gid 0 when `/proc` is not mounted.
pub fn process_auth_sys() -> AuthSys {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let mut name = host.trim().as_bytes().to_vec();
    name.truncate(MAX_MACHINENAME);
    AuthSys {
        stamp: std::process::id(),
        machinename: Bytes::from(name),
        uid,
        gid,
        gids: vec![gid],
    }
}

/// A file name for a request: non-empty, at most `NFS3_MAXNAMLEN` bytes,
/// no `/` or NUL (RFC 1813 §2.5 `filename3`; the component rules Linux's
/// nfsd enforces).
pub fn filename(name: impl AsRef<[u8]>) -> Result<Filename3> {
    let n = name.as_ref();
    let f = Filename3(Bytes::copy_from_slice(n));
    if n.len() > NFS3_MAXNAMLEN || !f.is_valid_component() {
        return Err(Error::InvalidName(String::from_utf8_lossy(n).into_owned()));
    }
    Ok(f)
}

/// Encodes procedure arguments into a gather buffer; WRITE data and the
/// SYMLINK path become DDP-eligible items (RFC 8267 §3.1).
fn args<A: Encode>(a: &A) -> XdrBuf {
    xdr::to_xdr_buf(a)
}

/// The reply a call can draw, for an RPC-over-RDMA transport to provision
/// (RFC 8267 §3.2, ULB v2 draft §3.1): the largest results plus the RPC
/// header, and the DDP-eligible result's position and size.
pub fn reply_hint(proc: Nfsproc3, args: &XdrBuf) -> ReplyHint {
    let reduced = args.reduced_bytes();
    let Ok(size) = NfsV3Binding.reply_size_estimate(NFS_PROGRAM, NFS_V3, proc.0, &reduced) else {
        return ReplyHint::default();
    };
    let position = match proc {
        Nfsproc3::READ => Some(READ_DATA_POSITION),
        Nfsproc3::READLINK => Some(READLINK_DATA_POSITION),
        _ => None,
    };
    ReplyHint {
        max_reply_len: RPC_REPLY_HEADER_MAX.saturating_add(size.total()),
        ddp: position.map(|position| DdpReplyHint {
            position,
            max_len: size.ddp_max,
        }),
    }
}

/// An NFSv3 client (RFC 1813) over any ONC RPC transport: one method per
/// procedure, each returning the `resok` body or a typed [`Error`]
/// (`Error::Nfs` for a failure status).
#[derive(Debug, Clone)]
pub struct Nfs3Client<T> {
    rpc: T,
    cred: OpaqueAuth,
}

impl<T: ClientTransport> Nfs3Client<T> {
    /// A client sending `cred` (usually AUTH_SYS, see
    /// [`process_auth_sys`]) on every call.
    pub fn new(rpc: T, cred: OpaqueAuth) -> Self {
        Self { rpc, cred }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.rpc
    }

    /// The credential sent with each call.
    pub fn credential(&self) -> &OpaqueAuth {
        &self.cred
    }

    /// A view of this client that sends `cred` on every call instead of
    /// its own, over the same transport (borrowed, not copied): each RPC
    /// call carries its own credential (RFC 5531 §8.2), so one connection
    /// serves many users, as a multi-user mount needs.
    pub fn with_credential(&self, cred: OpaqueAuth) -> Nfs3Client<&T> {
        Nfs3Client {
            rpc: &self.rpc,
            cred,
        }
    }

    /// Sends one call and returns the raw procedure results.
    async fn raw(&self, proc: Nfsproc3, args: XdrBuf) -> Result<Bytes> {
        let reply_hint = reply_hint(proc, &args);
        let call = RpcCall {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_: proc.0,
            cred: self.cred.clone(),
            args,
            reply_hint,
        };
        Ok(self.rpc.call(call).await?)
    }

    /// Sends one call and decodes its `Res3` union (RFC 1813 §3.3): the
    /// `resok` body, or [`Error::Nfs`] with the status.
    async fn call<R, F>(&self, proc: Nfsproc3, args: XdrBuf) -> Result<R>
    where
        R: for<'a> Decode<'a>,
        F: for<'a> Decode<'a>,
    {
        let results = self.raw(proc, args).await?;
        Self::decode_res::<R, F>(proc, &results)
    }

    /// Decodes the `Res3` union of `results`.
    fn decode_res<R, F>(proc: Nfsproc3, results: &Bytes) -> Result<R>
    where
        R: for<'a> Decode<'a>,
        F: for<'a> Decode<'a>,
    {
        let mut dec = Decoder::from_bytes(results);
        let res: Res3<R, F> = dec.decode()?;
        dec.finish()?;
        match res {
            Res3::Ok(ok) => Ok(ok),
            Res3::Fail(status, _) => Err(Error::Nfs { proc, status }),
        }
    }

    /// NULL (RFC 1813 §3.3.0): a round trip that does nothing.
    pub async fn null(&self) -> Result<()> {
        let res = self.raw(Nfsproc3::NULL, XdrBuf::new()).await?;
        Decoder::from_bytes(&res).finish()?;
        Ok(())
    }

    /// GETATTR (RFC 1813 §3.3.1).
    pub async fn getattr(&self, object: &NfsFh3) -> Result<Fattr3> {
        let a = Getattr3Args {
            object: object.clone(),
        };
        let ok: Getattr3ResOk = self.call::<_, ()>(Nfsproc3::GETATTR, args(&a)).await?;
        Ok(ok.obj_attributes)
    }

    /// SETATTR (RFC 1813 §3.3.2); with `guard`, the server applies the
    /// change only if the object's ctime equals it (else
    /// `NFS3ERR_NOT_SYNC`).
    pub async fn setattr(
        &self,
        object: &NfsFh3,
        new_attributes: Sattr3,
        guard: Option<Nfstime3>,
    ) -> Result<WccData> {
        let a = Setattr3Args {
            object: object.clone(),
            new_attributes,
            guard,
        };
        self.call::<_, WccData>(Nfsproc3::SETATTR, args(&a)).await
    }

    /// LOOKUP (RFC 1813 §3.3.3) of `name` in `dir`.
    pub async fn lookup(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<Lookup3ResOk> {
        let a = Lookup3Args {
            what: diropargs(dir, name)?,
        };
        self.call::<_, PostOpAttr>(Nfsproc3::LOOKUP, args(&a)).await
    }

    /// ACCESS (RFC 1813 §3.3.4): which of the `ACCESS3_*` bits in `access`
    /// the server grants.
    pub async fn access(&self, object: &NfsFh3, access: u32) -> Result<Access3ResOk> {
        let a = Access3Args {
            object: object.clone(),
            access,
        };
        self.call::<_, PostOpAttr>(Nfsproc3::ACCESS, args(&a)).await
    }

    /// READLINK (RFC 1813 §3.3.5).
    pub async fn readlink(&self, symlink: &NfsFh3) -> Result<Readlink3ResOk> {
        let a = Readlink3Args {
            symlink: symlink.clone(),
        };
        self.call::<_, PostOpAttr>(Nfsproc3::READLINK, args(&a))
            .await
    }

    /// READ (RFC 1813 §3.3.6) of up to `count` bytes at `offset`. The data
    /// is a zero-copy slice of the received reply. A reply whose `count`
    /// disagrees with its data, or with more data than asked, is an
    /// [`Error::Protocol`].
    pub async fn read(&self, file: &NfsFh3, offset: u64, count: u32) -> Result<Read3ResOk> {
        let a = Read3Args {
            file: file.clone(),
            offset,
            count,
        };
        let ok: Read3ResOk = self.call::<_, PostOpAttr>(Nfsproc3::READ, args(&a)).await?;
        check_read(ok, count)
    }

    /// READ like [`Nfs3Client::read`], with the reply built in the caller's
    /// buffer `buf` (its allocation is reused, its contents overwritten).
    /// Over RPC-over-RDMA `buf` is the call's Write chunk: the server's
    /// RDMA Write places the data straight into it and the returned `data`
    /// is a slice of `buf`'s memory (RFC 8166 §3.4.6); over TCP the reply
    /// is copied into it once. Give `buf` a capacity of `count` plus a few
    /// KiB (the reply's inline parts) to avoid a reallocation.
    pub async fn read_into(
        &self,
        file: &NfsFh3,
        offset: u64,
        count: u32,
        buf: BytesMut,
    ) -> Result<Read3ResOk> {
        let a = Read3Args {
            file: file.clone(),
            offset,
            count,
        };
        let args = args(&a);
        let call = RpcCall {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_: Nfsproc3::READ.0,
            cred: self.cred.clone(),
            reply_hint: reply_hint(Nfsproc3::READ, &args),
            args,
        };
        let results = self.rpc.call_into(call, buf).await?;
        let ok: Read3ResOk = Self::decode_res::<_, PostOpAttr>(Nfsproc3::READ, &results)?;
        check_read(ok, count)
    }

    /// WRITE (RFC 1813 §3.3.7) of `data` at `offset`. The data goes out as
    /// a DDP-eligible item without being copied into the header stream.
    pub async fn write(
        &self,
        file: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<Write3ResOk> {
        let count =
            u32::try_from(data.len()).map_err(|_| Error::Protocol("WRITE larger than 4 GiB"))?;
        let a = Write3Args {
            file: file.clone(),
            offset,
            count,
            stable,
            data: xdr::DdpOpaque(data),
        };
        let ok: Write3ResOk = self.call::<_, WccData>(Nfsproc3::WRITE, args(&a)).await?;
        if ok.count > count {
            return Err(Error::Protocol("WRITE acknowledged more than sent"));
        }
        Ok(ok)
    }

    /// CREATE (RFC 1813 §3.3.8) of a regular file `name` in `dir`.
    pub async fn create(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        how: Createhow3,
    ) -> Result<Create3ResOk> {
        let a = Create3Args {
            dir: diropargs(dir, name)?,
            how,
        };
        self.create_like(Nfsproc3::CREATE, args(&a)).await
    }

    /// MKDIR (RFC 1813 §3.3.9).
    pub async fn mkdir(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        attributes: Sattr3,
    ) -> Result<Create3ResOk> {
        let a = Mkdir3Args {
            dir: diropargs(dir, name)?,
            attributes,
        };
        self.create_like(Nfsproc3::MKDIR, args(&a)).await
    }

    /// SYMLINK (RFC 1813 §3.3.10): `name` in `dir` pointing at `target`.
    pub async fn symlink(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        target: impl AsRef<[u8]>,
        attributes: Sattr3,
    ) -> Result<Create3ResOk> {
        let t = target.as_ref();
        if t.len() > NFS3_MAXPATHLEN {
            return Err(Error::InvalidName(String::from_utf8_lossy(t).into_owned()));
        }
        let a = Symlink3Args {
            dir: diropargs(dir, name)?,
            symlink_attributes: attributes,
            symlink_data: Nfspath3(Bytes::copy_from_slice(t)),
        };
        self.create_like(Nfsproc3::SYMLINK, args(&a)).await
    }

    /// MKNOD (RFC 1813 §3.3.11).
    pub async fn mknod(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        what: Mknoddata3,
    ) -> Result<Create3ResOk> {
        let a = Mknod3Args {
            dir: diropargs(dir, name)?,
            what,
        };
        self.create_like(Nfsproc3::MKNOD, args(&a)).await
    }

    async fn create_like(&self, proc: Nfsproc3, a: XdrBuf) -> Result<Create3ResOk> {
        self.call::<_, WccData>(proc, a).await
    }

    /// REMOVE (RFC 1813 §3.3.12).
    pub async fn remove(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<WccData> {
        let a = Remove3Args {
            object: diropargs(dir, name)?,
        };
        self.call::<_, WccData>(Nfsproc3::REMOVE, args(&a)).await
    }

    /// RMDIR (RFC 1813 §3.3.13).
    pub async fn rmdir(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<WccData> {
        let a = Remove3Args {
            object: diropargs(dir, name)?,
        };
        self.call::<_, WccData>(Nfsproc3::RMDIR, args(&a)).await
    }

    /// RENAME (RFC 1813 §3.3.14).
    pub async fn rename(
        &self,
        from_dir: &NfsFh3,
        from_name: impl AsRef<[u8]>,
        to_dir: &NfsFh3,
        to_name: impl AsRef<[u8]>,
    ) -> Result<Rename3Wcc> {
        let a = Rename3Args {
            from: diropargs(from_dir, from_name)?,
            to: diropargs(to_dir, to_name)?,
        };
        self.call::<_, Rename3Wcc>(Nfsproc3::RENAME, args(&a)).await
    }

    /// LINK (RFC 1813 §3.3.15): a new name `name` in `dir` for `file`.
    pub async fn link(
        &self,
        file: &NfsFh3,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
    ) -> Result<Link3Wcc> {
        let a = Link3Args {
            file: file.clone(),
            link: diropargs(dir, name)?,
        };
        self.call::<_, Link3Wcc>(Nfsproc3::LINK, args(&a)).await
    }

    /// READDIR (RFC 1813 §3.3.16): entries after `cookie` (0 to start),
    /// in a reply of at most `count` bytes.
    pub async fn readdir(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Cookieverf3,
        count: u32,
    ) -> Result<Readdir3ResOk> {
        let a = Readdir3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            count,
        };
        self.call::<_, PostOpAttr>(Nfsproc3::READDIR, args(&a))
            .await
    }

    /// READDIRPLUS (RFC 1813 §3.3.17): entries with attributes and handles
    /// after `cookie`; `dircount` bounds the names and cookies, `maxcount`
    /// the whole reply.
    pub async fn readdirplus(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: Cookieverf3,
        dircount: u32,
        maxcount: u32,
    ) -> Result<Readdirplus3ResOk> {
        let a = Readdirplus3Args {
            dir: dir.clone(),
            cookie,
            cookieverf,
            dircount,
            maxcount,
        };
        self.call::<_, PostOpAttr>(Nfsproc3::READDIRPLUS, args(&a))
            .await
    }

    /// FSSTAT (RFC 1813 §3.3.18).
    pub async fn fsstat(&self, root: &NfsFh3) -> Result<Fsstat3ResOk> {
        self.call::<_, PostOpAttr>(Nfsproc3::FSSTAT, fsroot(root))
            .await
    }

    /// FSINFO (RFC 1813 §3.3.19): transfer sizes and properties.
    pub async fn fsinfo(&self, root: &NfsFh3) -> Result<Fsinfo3ResOk> {
        self.call::<_, PostOpAttr>(Nfsproc3::FSINFO, fsroot(root))
            .await
    }

    /// PATHCONF (RFC 1813 §3.3.20).
    pub async fn pathconf(&self, object: &NfsFh3) -> Result<Pathconf3ResOk> {
        self.call::<_, PostOpAttr>(Nfsproc3::PATHCONF, fsroot(object))
            .await
    }

    /// COMMIT (RFC 1813 §3.3.21) of `count` bytes at `offset` (0 and 0
    /// for the whole file). Compare the returned verifier with the WRITE
    /// replies': a change means the server lost unstable data.
    pub async fn commit(&self, file: &NfsFh3, offset: u64, count: u32) -> Result<Commit3ResOk> {
        let a = Commit3Args {
            file: file.clone(),
            offset,
            count,
        };
        self.call::<_, WccData>(Nfsproc3::COMMIT, args(&a)).await
    }
}

fn diropargs(dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<Diropargs3> {
    Ok(Diropargs3 {
        dir: dir.clone(),
        name: filename(name)?,
    })
}

fn fsroot(object: &NfsFh3) -> XdrBuf {
    args(&Fsroot3Args {
        object: object.clone(),
    })
}

/// A READ reply whose `count` disagrees with its data, or with more data
/// than asked, is an [`Error::Protocol`].
fn check_read(ok: Read3ResOk, count: u32) -> Result<Read3ResOk> {
    if ok.data.0.len() != ok.count as usize {
        return Err(Error::Protocol("READ count differs from its data length"));
    }
    if ok.count > count {
        return Err(Error::Protocol("READ returned more than asked"));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filename_rejects_slash_nul_empty_and_overlong() {
        assert!(filename("a/b").is_err());
        assert!(filename("a\0").is_err());
        assert!(filename("").is_err());
        assert!(filename("x".repeat(256)).is_err());
        assert_eq!(filename("ok").unwrap().0, Bytes::from_static(b"ok"));
    }

    /// Over RPC-over-RDMA (loopback device) against the project's server,
    /// READ data lands in the caller's buffer: the Write chunk is that
    /// buffer (RFC 8166 §3.4.6).
    #[tokio::test]
    async fn read_into_places_data_in_the_callers_buffer_over_rdma() {
        use std::net::{IpAddr, Ipv4Addr};
        use std::sync::{Arc, Mutex};

        use rnic::loopback::LoopbackNetwork;
        use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};

        let dir = std::env::temp_dir().join(format!("nfs-client-read-into-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let content: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(dir.join("f"), &content).unwrap();
        let fs = Arc::new(nfs_server::LocalFs::new(&dir, false).unwrap());
        let export = Bytes::copy_from_slice(dir.to_str().unwrap().as_bytes());
        let server = nfs_server::rpc_server(
            fs,
            vec![export],
            Arc::new(Mutex::new(Vec::new())),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        );
        let net = LoopbackNetwork::new(3);
        let (sdev, cdev) = (net.device(), net.device());
        let listener = RdmaListener::bind(
            &sdev,
            &String::new(),
            Arc::new(server),
            RdmaServerConfig::default(),
        )
        .await
        .unwrap();
        let addr = listener.local_addr();
        listener.spawn();
        let rpc = RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
            .await
            .unwrap();
        let cred = AuthSys {
            uid: 0,
            gid: 0,
            ..AuthSys::default()
        }
        .to_opaque_auth();
        let root = crate::MountClient::new(rpc.clone(), cred.clone())
            .mnt(dir.to_str().unwrap())
            .await
            .unwrap()
            .fhandle;
        let nfs = Nfs3Client::new(rpc.clone(), cred);
        let fh = nfs.lookup(&root, "f").await.unwrap().object;
        for (offset, count) in [(1000u64, 65_536u32), (150_000, 65_536), (3, 8193)] {
            let buf = BytesMut::with_capacity(count as usize + 8192);
            let (lo, cap) = (buf.as_ptr() as usize, buf.capacity());
            let ok = nfs.read_into(&fh, offset, count, buf).await.unwrap();
            let end = (offset as usize + count as usize).min(content.len());
            assert_eq!(&ok.data.0[..], &content[offset as usize..end]);
            assert_eq!(ok.eof, end == content.len());
            let at = ok.data.0.as_ptr() as usize;
            assert!(
                at >= lo && at + ok.data.0.len() <= lo + cap,
                "not in the caller's buffer"
            );
        }
        assert_eq!(rpc.stats().in_place_replies, 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn read_hint_provisions_a_write_chunk_at_the_data_position() {
        let a = args(&Read3Args {
            file: NfsFh3::new(&[1; 8]).unwrap(),
            offset: 0,
            count: 65536,
        });
        let h = reply_hint(Nfsproc3::READ, &a);
        let ddp = h.ddp.unwrap();
        assert_eq!(ddp.max_len, 65536);
        assert_eq!(ddp.position, 104);
        assert!(h.max_reply_len >= 65536 + 104 + 24);
    }

    #[test]
    fn getattr_hint_has_no_ddp_item() {
        let a = args(&Getattr3Args {
            object: NfsFh3::new(&[1; 8]).unwrap(),
        });
        let h = reply_hint(Nfsproc3::GETATTR, &a);
        assert!(h.ddp.is_none());
        assert_eq!(h.max_reply_len, RPC_REPLY_HEADER_MAX + 4 + FATTR3_LEN);
    }

    #[test]
    fn process_credential_names_this_process() {
        use std::os::unix::fs::MetadataExt;
        let a = process_auth_sys();
        if let Ok(m) = std::fs::metadata("/proc/self") {
            assert_eq!(a.uid, m.uid());
        }
        assert!(a.machinename.len() <= MAX_MACHINENAME);
    }

    /// Records the credential of each call and answers NULL.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<OpaqueAuth>>);

    impl ClientTransport for Recorder {
        fn call(
            &self,
            call: RpcCall,
        ) -> impl core::future::Future<Output = std::result::Result<Bytes, oncrpc::RpcError>> + Send
        {
            self.0.lock().unwrap().push(call.cred);
            async { Ok(Bytes::new()) }
        }
    }

    #[tokio::test]
    async fn a_call_carries_the_credential_of_the_view_it_is_made_on() {
        let base = AuthSys {
            uid: 1,
            ..AuthSys::default()
        }
        .to_opaque_auth();
        let other = AuthSys {
            uid: 1001,
            gid: 100,
            gids: vec![4, 27],
            ..AuthSys::default()
        }
        .to_opaque_auth();
        let c = Nfs3Client::new(Recorder::default(), base.clone());
        c.null().await.unwrap();
        c.with_credential(other.clone()).null().await.unwrap();
        c.null().await.unwrap();
        let seen = c.transport().0.lock().unwrap().clone();
        assert_eq!(seen, [base.clone(), other, base]);
    }
}
