//! Test support: a server on ephemeral ports and a small typed client over
//! oncrpc's TcpClient.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use nfs::mount::{Dirpath, Mountres3, MOUNT_PROGRAM, MOUNT_V3};
use nfs::v3::*;
use oncrpc::client::{ClientConfig, ClientTransport, ReplyHint, RpcCall, RpcError};
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};
use xdr::{Decode, Encode};

/// A fresh temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!(
            "nfs-server-test-{}-{}-{}",
            tag,
            std::process::id(),
            n
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Relative path to (kind, size, mode, content hash for files).
pub type Snapshot = BTreeMap<PathBuf, (u32, u64, u32, u64)>;

/// Everything under `root`, to show that nothing changed.
pub fn snapshot(root: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let h = if m.is_file() {
                std::fs::read(e.path())
                    .unwrap()
                    .iter()
                    .fold(0xcbf29ce484222325u64, |h, &b| {
                        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
                    })
            } else {
                0
            };
            out.insert(
                e.path().strip_prefix(root).unwrap().to_path_buf(),
                (m.mode() & 0o170000, m.size(), m.mode() & 0o7777, h),
            );
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// A typed NFSv3/MOUNT client for tests.
pub struct Client {
    pub rpc: TcpClient,
    pub cred: OpaqueAuth,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Self {
        let rpc = TcpClient::connect(addr, 0x1000, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap();
        let cred = AuthSys {
            stamp: 1,
            machinename: Bytes::from_static(b"test"),
            uid: 0,
            gid: 0,
            gids: vec![],
        }
        .to_opaque_auth();
        Self { rpc, cred }
    }

    pub async fn raw(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: xdr::XdrBuf,
    ) -> Result<Bytes, RpcError> {
        self.rpc
            .call(RpcCall {
                prog,
                vers,
                proc_,
                cred: self.cred.clone(),
                args,
                reply_hint: ReplyHint::default(),
            })
            .await
    }

    pub async fn call<A: Encode, R: for<'a> Decode<'a>>(
        &self,
        prog: u32,
        vers: u32,
        proc_: u32,
        args: &A,
    ) -> Result<R, RpcError> {
        let res = self.raw(prog, vers, proc_, xdr::to_xdr_buf(args)).await?;
        let mut dec = xdr::Decoder::from_bytes(&res);
        let r = R::decode(&mut dec)?;
        dec.finish()?;
        Ok(r)
    }

    pub async fn nfs<A: Encode, R: for<'a> Decode<'a>>(&self, proc_: Nfsproc3, args: &A) -> R {
        self.call(NFS_PROGRAM, NFS_V3, proc_.0, args).await.unwrap()
    }

    pub async fn mnt(&self, path: &Path) -> Mountres3 {
        let p = Dirpath(Bytes::copy_from_slice(
            std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()),
        ));
        self.call(MOUNT_PROGRAM, MOUNT_V3, 1, &p).await.unwrap()
    }

    pub async fn root(&self, path: &Path) -> NfsFh3 {
        match self.mnt(&std::fs::canonicalize(path).unwrap()).await {
            Mountres3::Ok(ok) => ok.fhandle,
            Mountres3::Err(e) => panic!("MNT failed: {e}"),
        }
    }

    pub async fn lookup(&self, dir: &NfsFh3, name: &'static str) -> Lookup3Res {
        self.nfs(
            Nfsproc3::LOOKUP,
            &Lookup3Args {
                what: Diropargs3 {
                    dir: dir.clone(),
                    name: Filename3::from_static(name),
                },
            },
        )
        .await
    }

    pub async fn getattr(&self, fh: &NfsFh3) -> Getattr3Res {
        self.nfs(Nfsproc3::GETATTR, &Getattr3Args { object: fh.clone() })
            .await
    }

    pub async fn create(&self, dir: &NfsFh3, name: &'static str) -> Create3Res {
        self.nfs(
            Nfsproc3::CREATE,
            &Create3Args {
                dir: Diropargs3 {
                    dir: dir.clone(),
                    name: Filename3::from_static(name),
                },
                how: Createhow3::Unchecked(Sattr3 {
                    mode: Some(0o644),
                    ..Sattr3::default()
                }),
            },
        )
        .await
    }

    pub async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &'static [u8],
        stable: StableHow,
    ) -> Write3Res {
        self.nfs(
            Nfsproc3::WRITE,
            &Write3Args {
                file: fh.clone(),
                offset,
                count: data.len() as u32,
                stable,
                data: xdr::DdpOpaque(Bytes::from_static(data)),
            },
        )
        .await
    }

    pub async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> Read3Res {
        self.nfs(
            Nfsproc3::READ,
            &Read3Args {
                file: fh.clone(),
                offset,
                count,
            },
        )
        .await
    }
}

/// Starts a server on 127.0.0.1 ephemeral ports (MOUNT on its own port).
pub async fn start(dir: &Path, read_only: bool) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(dir);
    // The tests run as root and act as the export's owner.
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.read_only = read_only;
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = Some("127.0.0.1:0".parse().unwrap());
    cfg.rpcbind_addr = Some("127.0.0.1:0".parse().unwrap());
    nfs_server::start(cfg).await.unwrap()
}

pub fn fh_of(r: Create3Res) -> NfsFh3 {
    match r {
        Res3::Ok(ok) => ok.obj.unwrap(),
        Res3::Fail(s, _) => panic!("create failed: {s}"),
    }
}
