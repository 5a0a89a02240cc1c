//! The MOUNT v3 program (RFC 1813 Appendix I) for one export.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use bytes::Bytes;
use nfs::mount::*;
use nfs::v3::{Filename3, Ftype3, NfsFh3};
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, Encode, XdrBuf};

use crate::storage::Storage;

/// AUTH_SYS, the one flavor offered in MNT replies (RFC 5531 §8.2).
const AUTH_SYS: u32 = 1;

/// Serves MOUNT program 100005 version 3 for one export, and for any
/// directory below it (as Linux's `rpc.mountd` allows).
#[derive(Debug)]
pub struct MountService<S> {
    fs: std::sync::Arc<S>,
    paths: Vec<Bytes>,
    mounts: Mutex<Vec<(IpAddr, Bytes)>>,
}

fn trim(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.last() == Some(&b'/') {
        p = p.get(..p.len() - 1).unwrap_or(p);
    }
    p
}

impl<S: Storage> MountService<S> {
    /// A MOUNT service for the export of `fs`, named by any of `paths`
    /// (the first is listed by EXPORT; a trailing `/` in a request is
    /// ignored).
    pub fn new(fs: std::sync::Arc<S>, paths: Vec<Bytes>) -> Self {
        Self {
            fs,
            paths,
            mounts: Mutex::new(Vec::new()),
        }
    }

    /// The components of `p` below the export path it starts with, or
    /// `None` when it names nothing exported.
    fn below_export<'p>(&self, p: &'p [u8]) -> Option<Vec<&'p [u8]>> {
        let p = trim(p);
        self.paths.iter().find_map(|x| {
            let x = trim(x);
            if p == x {
                return Some(Vec::new());
            }
            let rest = p.strip_prefix(x)?;
            let rest = if x == b"/" {
                rest
            } else {
                rest.strip_prefix(b"/")?
            };
            Some(
                rest.split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .collect(),
            )
        })
    }

    /// The handle of `dir`: the export root or a directory below it,
    /// reached by LOOKUPs that never follow symbolic links and never
    /// accept `.` or `..`.
    async fn resolve(&self, dir: &[u8]) -> Result<NfsFh3, Mountstat3> {
        // rpc.mountd refuses a path it does not export with ACCES.
        let comps = self.below_export(dir).ok_or(Mountstat3::MNT3ERR_ACCES)?;
        let mut fh = self.fs.root();
        for c in comps {
            let name = Filename3(Bytes::copy_from_slice(c));
            if c == b"." || c == b".." || !name.is_valid_component() {
                return Err(Mountstat3::MNT3ERR_ACCES);
            }
            fh = self
                .fs
                .lookup(&fh, &name)
                .await
                .map_err(|_| Mountstat3::MNT3ERR_NOENT)?;
        }
        match self.fs.getattr(&fh).await {
            Ok(a) if a.ftype == Ftype3::NF3DIR => Ok(fh),
            Ok(_) => Err(Mountstat3::MNT3ERR_NOTDIR),
            Err(_) => Err(Mountstat3::MNT3ERR_NOENT),
        }
    }

    async fn mnt(&self, dir: &Dirpath, host: IpAddr) -> Mountres3 {
        let fhandle = match self.resolve(&dir.0).await {
            Ok(fh) => fh,
            Err(e) => return Mountres3::Err(e),
        };
        if let Ok(mut m) = self.mounts.lock() {
            if !m.iter().any(|(h, d)| *h == host && d == &dir.0) {
                m.push((host, dir.0.clone()));
            }
        }
        Mountres3::Ok(Mountres3Ok {
            fhandle,
            auth_flavors: vec![AUTH_SYS],
        })
    }

    /// Current mounts as DUMP lists them.
    pub fn mounts(&self) -> MountList {
        let m = self.mounts.lock().map(|m| m.clone()).unwrap_or_default();
        MountList(
            m.into_iter()
                .map(|(h, d)| MountBody {
                    hostname: MountName(Bytes::from(h.to_string())),
                    directory: Dirpath(d),
                })
                .collect(),
        )
    }
}

/// RFC 1813 Appendix I: MOUNTPROC3_NULL, MNT, DUMP, UMNT, UMNTALL, EXPORT.
impl<S: Storage> RpcService for MountService<S> {
    fn program(&self) -> u32 {
        MOUNT_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        MOUNT_V3..=MOUNT_V3
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let host = ctx
            .peer
            .addr
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let mut dec = Decoder::from_bytes(&args);
        let mut out = XdrBuf::new();
        match Mountproc3(ctx.proc_) {
            Mountproc3::NULL => {}
            Mountproc3::MNT => {
                let dir: Dirpath = dec.decode()?;
                self.mnt(&dir, host).await.encode(&mut out);
            }
            Mountproc3::DUMP => self.mounts().encode(&mut out),
            Mountproc3::UMNT => {
                let dir: Dirpath = dec.decode()?;
                if let Ok(mut m) = self.mounts.lock() {
                    m.retain(|(h, d)| !(*h == host && d == &dir.0));
                }
            }
            Mountproc3::UMNTALL => {
                if let Ok(mut m) = self.mounts.lock() {
                    m.retain(|(h, _)| *h != host);
                }
            }
            Mountproc3::EXPORT => {
                let ex = Exports(
                    self.paths
                        .first()
                        .map(|p| ExportNode {
                            dir: Dirpath(p.clone()),
                            groups: Vec::new(),
                        })
                        .into_iter()
                        .collect(),
                );
                ex.encode(&mut out);
            }
            _ => return Err(ServiceError::ProcUnavail),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocalFs;

    fn block<F: core::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn mounts_export_and_subdirectories_but_nothing_else() {
        let dir = std::env::temp_dir().join(format!("mountsvc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
        std::fs::write(dir.join("file"), b"").unwrap();
        std::os::unix::fs::symlink("/", dir.join("root-link")).unwrap();
        let fs = std::sync::Arc::new(LocalFs::new(&dir, false).unwrap());
        let s = MountService::new(fs.clone(), vec![Bytes::from_static(b"/srv/x")]);
        let h = IpAddr::from([127, 0, 0, 1]);
        let mnt = |p: &'static [u8]| block(s.mnt(&Dirpath(Bytes::from_static(p)), h));
        assert!(matches!(mnt(b"/srv/x/"), Mountres3::Ok(ok) if ok.fhandle == fs.root()));
        assert!(matches!(mnt(b"/srv/x/sub//deeper"), Mountres3::Ok(_)));
        assert_eq!(mnt(b"/srv"), Mountres3::Err(Mountstat3::MNT3ERR_ACCES));
        assert_eq!(mnt(b"/srv/xy"), Mountres3::Err(Mountstat3::MNT3ERR_ACCES));
        assert_eq!(mnt(b"/srv/x/.."), Mountres3::Err(Mountstat3::MNT3ERR_ACCES));
        assert_eq!(
            mnt(b"/srv/x/nope"),
            Mountres3::Err(Mountstat3::MNT3ERR_NOENT)
        );
        assert_eq!(
            mnt(b"/srv/x/file"),
            Mountres3::Err(Mountstat3::MNT3ERR_NOTDIR)
        );
        assert_eq!(
            mnt(b"/srv/x/root-link"),
            Mountres3::Err(Mountstat3::MNT3ERR_NOTDIR)
        );
        assert_eq!(s.mounts().0.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
