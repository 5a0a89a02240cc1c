//! The MOUNT v3 program (RFC 1813 Appendix I) for one export.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Mutex;

use bytes::Bytes;
use nfs::mount::*;
use nfs::v3::NfsFh3;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, Encode, XdrBuf};

/// AUTH_SYS, the one flavor offered in MNT replies (RFC 5531 §8.2).
const AUTH_SYS: u32 = 1;

/// Serves MOUNT program 100005 version 3 for one export.
#[derive(Debug)]
pub struct MountService {
    root: NfsFh3,
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

impl MountService {
    /// A MOUNT service handing out `root` for any of `paths` (the first is
    /// listed by EXPORT; a trailing `/` in a request is ignored).
    pub fn new(root: NfsFh3, paths: Vec<Bytes>) -> Self {
        Self {
            root,
            paths,
            mounts: Mutex::new(Vec::new()),
        }
    }

    fn exported(&self, p: &[u8]) -> bool {
        self.paths.iter().any(|x| trim(x) == trim(p))
    }

    fn mnt(&self, dir: &Dirpath, host: IpAddr) -> Mountres3 {
        if !self.exported(&dir.0) {
            // rpc.mountd refuses a path it does not export with ACCES.
            return Mountres3::Err(Mountstat3::MNT3ERR_ACCES);
        }
        if let Ok(mut m) = self.mounts.lock() {
            if !m.iter().any(|(h, d)| *h == host && d == &dir.0) {
                m.push((host, dir.0.clone()));
            }
        }
        Mountres3::Ok(Mountres3Ok {
            fhandle: self.root.clone(),
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
impl RpcService for MountService {
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
                self.mnt(&dir, host).encode(&mut out);
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

    #[test]
    fn trailing_slash_is_ignored_and_other_paths_refused() {
        let s = MountService::new(NfsFh3::default(), vec![Bytes::from_static(b"/srv/x")]);
        let h = IpAddr::from([127, 0, 0, 1]);
        assert!(matches!(
            s.mnt(&Dirpath(Bytes::from_static(b"/srv/x/")), h),
            Mountres3::Ok(_)
        ));
        assert_eq!(
            s.mnt(&Dirpath(Bytes::from_static(b"/srv")), h),
            Mountres3::Err(Mountstat3::MNT3ERR_ACCES)
        );
        assert_eq!(s.mounts().0.len(), 1);
    }
}
