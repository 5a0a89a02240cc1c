//! The MOUNT v3 program (RFC 1813 Appendix I) over an export table.
//!
//! - MNT answers for an export's path (or an alias, or a directory below
//!   it) with the root handle and the flavors the export accepts for this
//!   client; a client the export does not list gets MNT3ERR_ACCES, as
//!   Linux's `rpc.mountd` answers.
//! - The mount list (DUMP, UMNT, UMNTALL) is keyed on the client address
//!   and the canonical path of what was mounted (however the client spelt
//!   it), holds at most [`MOUNT_LIST_MAX`] entries by default (the oldest
//!   is dropped, with a `mount.list_entries` trip), and a DUMP reply stops
//!   at [`DUMP_MAX_BYTES`] (`mount.dump_bytes`). The list is advisory
//!   (RFC 1813 Appendix I: "the server's list of mounted file systems is
//!   only a hint"), so dropping entries never refuses a client.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nfs::mount::*;
use nfs::v3::{Filename3, Ftype3, NfsFh3};
use oncrpc::limits::Limit;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, Encode, XdrBuf};

use crate::access::{peer_ip, Export, ExportTable};
use crate::storage::Storage;

/// Default bound on mount list entries.
pub const MOUNT_LIST_MAX: usize = 4096;
/// Largest DUMP reply body.
pub const DUMP_MAX_BYTES: usize = 256 * 1024;

static LIST_ENTRIES: Limit = Limit::new("mount.list_entries");
static DUMP_BYTES: Limit = Limit::new("mount.dump_bytes");

/// Serves MOUNT program 100005 version 3 for every export of a table,
/// and for any directory below one (as Linux's `rpc.mountd` allows).
#[derive(Debug)]
pub struct MountService<S> {
    table: Arc<ExportTable<S>>,
    mounts: Mutex<VecDeque<(IpAddr, Bytes)>>,
    max_entries: usize,
}

fn trim(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.last() == Some(&b'/') {
        p = p.get(..p.len() - 1).unwrap_or(p);
    }
    p
}

/// The components of `p` below the export name `x`, or `None`.
fn below<'p>(x: &[u8], p: &'p [u8]) -> Option<Vec<&'p [u8]>> {
    let (p, x) = (trim(p), trim(x));
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
}

impl<S: Storage> MountService<S> {
    /// A MOUNT service for the exports of `table`.
    pub fn new(table: Arc<ExportTable<S>>) -> Self {
        Self {
            table,
            mounts: Mutex::new(VecDeque::new()),
            max_entries: MOUNT_LIST_MAX,
        }
    }

    /// Keeps at most `n` (at least 1) mount list entries.
    pub fn with_max_entries(mut self, n: usize) -> Self {
        self.max_entries = n.max(1);
        self
    }

    /// The export `p` names and the components below it.
    fn find<'p>(&self, p: &'p [u8]) -> Option<(&Export<S>, Vec<&'p [u8]>)> {
        self.table
            .exports()
            .iter()
            .find_map(|e| e.names().iter().find_map(|x| below(x, p)).map(|c| (e, c)))
    }

    /// The handle of `comps` below `e`'s root, reached by LOOKUPs that
    /// never follow symbolic links and never accept `.` or `..`.
    async fn resolve(&self, e: &Export<S>, comps: &[&[u8]]) -> Result<NfsFh3, Mountstat3> {
        let fs = e.fs();
        let mut fh = fs.root();
        for c in comps {
            let name = Filename3(Bytes::copy_from_slice(c));
            if *c == b"." || *c == b".." || !name.is_valid_component() {
                return Err(Mountstat3::MNT3ERR_ACCES);
            }
            fh = fs
                .lookup(&fh, &name)
                .await
                .map_err(|_| Mountstat3::MNT3ERR_NOENT)?;
        }
        match fs.getattr(&fh).await {
            Ok(a) if a.ftype == Ftype3::NF3DIR => Ok(fh),
            Ok(_) => Err(Mountstat3::MNT3ERR_NOTDIR),
            Err(_) => Err(Mountstat3::MNT3ERR_NOENT),
        }
    }

    /// The canonical spelling of `comps` below `e`.
    fn canonical(e: &Export<S>, comps: &[&[u8]]) -> Bytes {
        let mut p = e.path().as_os_str().as_bytes().to_vec();
        for c in comps {
            if p.last() != Some(&b'/') {
                p.push(b'/');
            }
            p.extend_from_slice(c);
        }
        Bytes::from(p)
    }

    async fn mnt(&self, dir: &Dirpath, peer: &oncrpc::PeerInfo) -> Mountres3 {
        // rpc.mountd refuses a path it does not export with ACCES.
        let Some((e, comps)) = self.find(&dir.0) else {
            return Mountres3::Err(Mountstat3::MNT3ERR_ACCES);
        };
        let host = peer_ip(peer);
        let Some(opts) = e.options_for(host) else {
            // Counted by the table's `exports.refused` limit.
            let _ = self.table.any_allows(host);
            return Mountres3::Err(Mountstat3::MNT3ERR_ACCES);
        };
        let auth_flavors = opts.sec.iter().map(|s| s.number()).collect();
        let fhandle = match self.resolve(e, &comps).await {
            Ok(fh) => fh,
            Err(err) => return Mountres3::Err(err),
        };
        self.remember(host, Self::canonical(e, &comps));
        Mountres3::Ok(Mountres3Ok {
            fhandle,
            auth_flavors,
        })
    }

    /// Adds (or refreshes) a mount list entry, dropping the oldest when
    /// the list is full.
    fn remember(&self, host: IpAddr, path: Bytes) {
        let Ok(mut m) = self.mounts.lock() else {
            return;
        };
        if let Some(i) = m.iter().position(|(h, d)| *h == host && *d == path) {
            m.remove(i);
        }
        while m.len() >= self.max_entries {
            m.pop_front();
            LIST_ENTRIES.trip(format_args!(
                "mount list full ({} entries): dropped the oldest",
                self.max_entries
            ));
        }
        m.push_back((host, path));
    }

    fn forget(&self, host: IpAddr, dir: &[u8]) {
        let path = self
            .find(dir)
            .map(|(e, c)| Self::canonical(e, &c))
            .unwrap_or_else(|| Bytes::copy_from_slice(dir));
        if let Ok(mut m) = self.mounts.lock() {
            m.retain(|(h, d)| !(*h == host && *d == path));
        }
    }

    /// Current mounts as DUMP lists them, at most [`DUMP_MAX_BYTES`].
    pub fn mounts(&self) -> MountList {
        let m: Vec<(IpAddr, Bytes)> = self
            .mounts
            .lock()
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        let mut used = 4;
        let mut out = Vec::new();
        for (h, d) in m {
            let body = MountBody {
                hostname: MountName(Bytes::from(h.to_string())),
                directory: Dirpath(d),
            };
            used += 4 + body.encoded_len();
            if used > DUMP_MAX_BYTES {
                DUMP_BYTES.trip(format_args!(
                    "DUMP reply cut at {DUMP_MAX_BYTES} bytes ({} entries)",
                    out.len()
                ));
                break;
            }
            out.push(body);
        }
        MountList(out)
    }

    /// EXPORT: every export's canonical path with its client list.
    fn exports(&self) -> Exports {
        Exports(
            self.table
                .exports()
                .iter()
                .map(|e| ExportNode {
                    dir: Dirpath(e.names()[0].clone()),
                    groups: e
                        .clients()
                        .iter()
                        .map(|c| MountName(Bytes::from(c.spec.to_string())))
                        .collect(),
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
        let host = peer_ip(&ctx.peer);
        let mut dec = Decoder::from_bytes(&args);
        let mut out = XdrBuf::new();
        match Mountproc3(ctx.proc_) {
            Mountproc3::NULL => {}
            Mountproc3::MNT => {
                let dir: Dirpath = dec.decode()?;
                self.mnt(&dir, &ctx.peer).await.encode(&mut out);
            }
            Mountproc3::DUMP => self.mounts().encode(&mut out),
            Mountproc3::UMNT => {
                let dir: Dirpath = dec.decode()?;
                self.forget(host, &dir.0);
            }
            Mountproc3::UMNTALL => {
                if let Ok(mut m) = self.mounts.lock() {
                    m.retain(|(h, _)| *h != host);
                }
            }
            Mountproc3::EXPORT => self.exports().encode(&mut out),
            _ => return Err(ServiceError::ProcUnavail),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::{ClientRule, ExportOptions};
    use crate::LocalFs;

    fn block<F: core::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn peer(ip: [u8; 4]) -> oncrpc::PeerInfo {
        oncrpc::PeerInfo {
            conn_id: 1,
            addr: Some((ip, 700).into()),
            transport: oncrpc::TransportKind::Tcp,
            security: oncrpc::TransportSecurity::None,
        }
    }

    fn service(dir: &std::path::Path, spec: &str) -> (Arc<LocalFs>, MountService<LocalFs>) {
        let fs = Arc::new(LocalFs::new(dir, false).unwrap());
        let rule = ClientRule {
            spec: crate::exports::parse_client(spec).unwrap(),
            options: ExportOptions::read_write(),
        };
        let e = Export::new(
            fs.clone(),
            fs.path().to_path_buf(),
            &[Bytes::from_static(b"/srv/x")],
            vec![rule],
        );
        let table = Arc::new(ExportTable::new(vec![e]).unwrap());
        (fs, MountService::new(table))
    }

    fn tmp(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("mountsvc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
        dir
    }

    #[test]
    fn mounts_export_and_subdirectories_but_nothing_else() {
        let dir = tmp("paths");
        std::fs::write(dir.join("file"), b"").unwrap();
        std::os::unix::fs::symlink("/", dir.join("root-link")).unwrap();
        let (fs, s) = service(&dir, "*");
        let h = peer([127, 0, 0, 1]);
        let mnt = |p: &'static [u8]| block(s.mnt(&Dirpath(Bytes::from_static(p)), &h));
        assert!(
            matches!(mnt(b"/srv/x/"), Mountres3::Ok(ok) if ok.fhandle == fs.root() && ok.auth_flavors == vec![1])
        );
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

    #[test]
    fn unlisted_client_gets_acces() {
        let dir = tmp("acces");
        let (_fs, s) = service(&dir, "10.0.0.0/8");
        let d = Dirpath(Bytes::from_static(b"/srv/x"));
        assert_eq!(
            block(s.mnt(&d, &peer([127, 0, 0, 1]))),
            Mountres3::Err(Mountstat3::MNT3ERR_ACCES)
        );
        assert!(matches!(
            block(s.mnt(&d, &peer([10, 1, 2, 3]))),
            Mountres3::Ok(_)
        ));
        assert_eq!(s.mounts().0.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn mount_list_is_keyed_on_canonical_path_and_bounded() {
        let dir = tmp("list");
        let (fs, s) = service(&dir, "*");
        let s = s.with_max_entries(3);
        let h = peer([127, 0, 0, 1]);
        for spelling in [&b"/srv/x"[..], b"/srv/x/", b"/srv/x//", b"/srv/x///"] {
            let d = Dirpath(Bytes::copy_from_slice(spelling));
            assert!(matches!(block(s.mnt(&d, &h)), Mountres3::Ok(_)));
        }
        let canon = Bytes::copy_from_slice(fs.path().as_os_str().as_bytes());
        assert_eq!(s.mounts().0.len(), 1, "every spelling is one entry");
        assert_eq!(s.mounts().0[0].directory.0, canon);
        let before = LIST_ENTRIES.count();
        for last in 1..=5u8 {
            let d = Dirpath(Bytes::from_static(b"/srv/x/sub"));
            assert!(matches!(
                block(s.mnt(&d, &peer([10, 0, 0, last]))),
                Mountres3::Ok(_)
            ));
        }
        let list = s.mounts().0;
        assert_eq!(list.len(), 3, "bounded");
        assert_eq!(
            list[0].hostname.0,
            Bytes::from_static(b"10.0.0.3"),
            "oldest dropped"
        );
        assert!(LIST_ENTRIES.count() >= before + 3);
        s.forget(IpAddr::from([10, 0, 0, 5]), b"/srv/x/sub/");
        assert_eq!(s.mounts().0.len(), 2, "UMNT with another spelling");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// DUMP through the service, as a client calling MOUNTPROC3_DUMP sees
    /// it: the reply's encoded bytes and its entries.
    fn dump(s: &MountService<LocalFs>) -> (usize, usize) {
        let ctx = CallContext {
            xid: 1,
            prog: MOUNT_PROGRAM,
            vers: MOUNT_V3,
            proc_: Mountproc3::DUMP.0,
            cred: oncrpc::msg::OpaqueAuth::NONE,
            credential: oncrpc::msg::Credential::None,
            peer: peer([127, 0, 0, 1]),
        };
        let out = block(s.call(ctx, Bytes::new())).unwrap();
        let bytes = out.to_bytes();
        let list: MountList = xdr::from_slice(&bytes).unwrap();
        (bytes.len(), list.0.len())
    }

    /// `mount.dump_bytes` at its default (256 KiB): 4,096 mounts (the
    /// list's default bound) of 250-byte directory names from 256 client
    /// addresses would answer about 1.2 MB; the reply stops at the bound,
    /// and 2,000 more MNT calls do not grow it.
    #[test]
    fn dump_reply_stays_within_its_default_bound() {
        assert_eq!((DUMP_MAX_BYTES, MOUNT_LIST_MAX), (256 << 10, 4096));
        let dir = tmp("dump");
        let names: Vec<String> = (0..16u8)
            .map(|i| format!("{}", char::from(b'a' + i)).repeat(250))
            .collect();
        for n in &names {
            std::fs::create_dir(dir.join(n)).unwrap();
        }
        let (_fs, s) = service(&dir, "*");
        let before = DUMP_BYTES.count();
        let mnt_all = |clients: std::ops::Range<u32>| {
            block(async {
                for c in clients {
                    let h = peer([10, (c >> 16) as u8, (c >> 8) as u8, c as u8]);
                    for n in &names {
                        let d = Dirpath(Bytes::from(format!("/srv/x/{n}")));
                        assert!(matches!(s.mnt(&d, &h).await, Mountres3::Ok(_)));
                    }
                }
            })
        };
        mnt_all(0..256);
        let (bytes, entries) = dump(&s);
        assert!(bytes <= DUMP_MAX_BYTES, "{bytes} bytes");
        assert!(
            bytes > DUMP_MAX_BYTES - 512,
            "filled up to the bound: {bytes}"
        );
        assert!(entries < 4096, "cut: {entries} entries");
        assert!(DUMP_BYTES.count() > before);
        mnt_all(256..381);
        assert_eq!(s.mounts.lock().unwrap().len(), MOUNT_LIST_MAX);
        assert!(dump(&s).0 <= DUMP_MAX_BYTES);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
