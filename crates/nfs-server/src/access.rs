//! The export table: every export's storage, the names MOUNT knows it by,
//! and who may use it; and the access decision each call goes through
//! (client address, then security flavor, then identity squashing), the
//! same over TCP and RPC-over-RDMA since both fill
//! [`oncrpc::PeerInfo::addr`].

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::limits::Limit;
use oncrpc::msg::Credential;
use oncrpc::PeerInfo;

use crate::exports::{ClientRule, ClientSpec, ExportEntry, ExportOptions};
use crate::fh::HandleKey;
use crate::perm::Caller;
use crate::storage::Storage;
use crate::LocalFs;

/// Calls and connections refused because the client is not in an
/// export's list or used a flavor the export does not accept.
static REFUSED: Limit = Limit::new("exports.refused");

/// The clients `nfsrdma serve DIR` allows without `--allow`: loopback.
pub fn loopback_clients(options: &ExportOptions) -> Vec<ClientRule> {
    [
        ClientSpec::Net {
            addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
            prefix: 8,
        },
        ClientSpec::Addr(IpAddr::V6(Ipv6Addr::LOCALHOST)),
    ]
    .into_iter()
    .map(|spec| ClientRule {
        spec,
        options: options.clone(),
    })
    .collect()
}

/// One exported directory.
#[derive(Debug)]
pub struct Export<S> {
    path: PathBuf,
    names: Vec<Bytes>,
    fs: Arc<S>,
    clients: ExportEntry,
}

impl<S: Storage> Export<S> {
    /// `fs`, known to MOUNT as its canonical `path` and any of `aliases`,
    /// usable by `clients`.
    pub fn new(fs: Arc<S>, path: PathBuf, aliases: &[Bytes], clients: Vec<ClientRule>) -> Self {
        let mut names = vec![Bytes::copy_from_slice(path.as_os_str().as_bytes())];
        names.extend(aliases.iter().cloned());
        Self {
            clients: ExportEntry {
                path: path.clone(),
                clients,
            },
            path,
            names,
            fs,
        }
    }

    /// The canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names MNT accepts (canonical path first).
    pub fn names(&self) -> &[Bytes] {
        &self.names
    }

    /// The storage.
    pub fn fs(&self) -> &Arc<S> {
        &self.fs
    }

    /// The client list (as EXPORT reports it).
    pub fn clients(&self) -> &[ClientRule] {
        &self.clients.clients
    }

    /// The options for a client at `ip`, or `None` when it is not listed.
    pub fn options_for(&self, ip: IpAddr) -> Option<&ExportOptions> {
        self.clients.options_for(ip)
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The client's address is not in the export's list.
    NotListed,
    /// The call's flavor is not one the export accepts (RFC 2623 §2.7).
    WrongSec,
    /// The connection's transport security (RFC 9289: TLS, mutual TLS or
    /// none) is not one the export's `xprtsec=` lists. NFSv3 answers
    /// NFS3ERR_ACCES and NFSv4 NFS4ERR_WRONGSEC, as Linux's
    /// `check_xprtsec_policy`.
    XprtSec,
}

/// What an admitted call may do.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    /// The identity after squashing.
    pub(crate) caller: Caller,
    /// Changes are refused with ROFS.
    pub(crate) read_only: bool,
}

/// The client's address, or `0.0.0.0` (matched only by `*`) when the
/// transport has none.
pub(crate) fn peer_ip(peer: &PeerInfo) -> IpAddr {
    peer.addr
        .map(|a| a.ip().to_canonical())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

fn flavor_of(cred: &Credential) -> u32 {
    match cred {
        Credential::None => 0,
        Credential::Sys(_) => 1,
        Credential::Other(o) => o.flavor.0,
        // RFC 2623 §2.2: the pseudo-flavor of Kerberos V5 with the call's
        // service (krb5 390003, krb5i 390004, krb5p 390005).
        Credential::Gss(id) => crate::exports::KRB5_PSEUDO_FLAVOR + id.service.0.saturating_sub(1),
        _ => u32::MAX,
    }
}

/// Every export, in configuration order (the first is the primary: the
/// one a handle no export owns is sent to, to be refused). NFSv4 reaches
/// them all through its pseudo file system (`crate::v4`).
#[derive(Debug)]
pub struct ExportTable<S> {
    exports: Vec<Export<S>>,
    /// The key of the NFSv4 pseudo file system's handles (the state
    /// directory's, so they last across restarts).
    key: HandleKey,
}

/// A random handle key for a table without a state directory.
fn fresh_key() -> HandleKey {
    let key = crate::statedir::random_key().unwrap_or_else(|_| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        *blake3::hash(
            &[
                now.as_nanos().to_be_bytes(),
                u128::from(std::process::id()).to_be_bytes(),
            ]
            .concat(),
        )
        .as_bytes()
    });
    HandleKey::new(key)
}

impl<S: Storage> ExportTable<S> {
    /// A table of `exports`; at least one is needed.
    pub fn new(exports: Vec<Export<S>>) -> io::Result<Self> {
        if exports.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no export configured",
            ));
        }
        Ok(Self {
            exports,
            key: fresh_key(),
        })
    }

    /// The key pseudo file system handles are tagged with.
    pub(crate) fn handle_key(&self) -> &HandleKey {
        &self.key
    }

    /// The exports in order.
    pub fn exports(&self) -> &[Export<S>] {
        &self.exports
    }

    /// The first export.
    pub fn primary(&self) -> &Export<S> {
        // `new` refuses an empty table.
        &self.exports[0]
    }

    /// The access decision for one call on `export` (exports(5)):
    /// the client's address must be listed, its flavor accepted; the
    /// identity is then squashed as the matching options say.
    pub(crate) fn admit(
        &self,
        export: &Export<S>,
        peer: &PeerInfo,
        cred: &Credential,
    ) -> Result<Grant, Refusal> {
        let ip = peer_ip(peer);
        let Some(opts) = export.options_for(ip) else {
            REFUSED.trip(format_args!(
                "client {ip} is not allowed to use {}",
                export.path.display()
            ));
            return Err(Refusal::NotListed);
        };
        let flavor = flavor_of(cred);
        if !opts.accepts_flavor(flavor) {
            REFUSED.trip(format_args!(
                "client {ip} used auth flavor {flavor} on {}, which accepts {:?}",
                export.path.display(),
                opts.sec
            ));
            return Err(Refusal::WrongSec);
        }
        if !opts.xprtsec.admits(peer.security) {
            REFUSED.trip(format_args!(
                "client {ip} on a {:?} connection to {}, which accepts xprtsec={}",
                peer.security,
                export.path.display(),
                opts.xprtsec
            ));
            return Err(Refusal::XprtSec);
        }
        Ok(Grant {
            caller: Caller::mapped(cred, opts),
            read_only: opts.read_only || export.fs.read_only(),
        })
    }

    /// The access decision for a directory of the NFSv4 pseudo file system
    /// above the exports `below` (RFC 8881 §7.3, §7.8): the client must be
    /// listed by one of them and use a flavor one of those accepts; the
    /// junctions are read-only for everyone.
    pub(crate) fn admit_junction(
        &self,
        below: &[usize],
        peer: &PeerInfo,
        cred: &Credential,
    ) -> Result<Grant, Refusal> {
        let ip = peer_ip(peer);
        let listed: Vec<&ExportOptions> = below
            .iter()
            .filter_map(|&e| self.exports.get(e)?.options_for(ip))
            .collect();
        if listed.is_empty() {
            REFUSED.trip(format_args!(
                "client {ip} is not allowed to use any export (NFSv4 pseudo file system)"
            ));
            return Err(Refusal::NotListed);
        }
        let flavor = flavor_of(cred);
        if !listed.iter().any(|o| o.accepts_flavor(flavor)) {
            REFUSED.trip(format_args!(
                "client {ip} used auth flavor {flavor} on the NFSv4 pseudo file system"
            ));
            return Err(Refusal::WrongSec);
        }
        if !listed.iter().any(|o| o.xprtsec.admits(peer.security)) {
            REFUSED.trip(format_args!(
                "client {ip} on a {:?} connection to the NFSv4 pseudo file system",
                peer.security
            ));
            return Err(Refusal::XprtSec);
        }
        Ok(Grant {
            caller: Caller::of(cred),
            read_only: true,
        })
    }

    /// Whether a client at `ip` may use export `e` (by index).
    pub(crate) fn lists(&self, e: usize, ip: IpAddr) -> bool {
        self.exports
            .get(e)
            .is_some_and(|x| x.options_for(ip).is_some())
    }

    /// The flavors a client at `ip` may use on the exports `which`, in
    /// the exports' order of preference, each once (SECINFO, RFC 8881
    /// §18.29.4).
    pub(crate) fn flavors(&self, which: &[usize], ip: IpAddr) -> Vec<u32> {
        let mut out = Vec::new();
        for o in which
            .iter()
            .filter_map(|&e| self.exports.get(e)?.options_for(ip))
        {
            for f in &o.sec {
                if !out.contains(&f.number()) {
                    out.push(f.number());
                }
            }
        }
        out
    }

    /// Whether a client at `ip` may use any export: the RDMA accept
    /// filter (a client no export lists is refused at connection time).
    pub fn any_allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        let ok = self.exports.iter().any(|e| e.options_for(ip).is_some());
        if !ok {
            REFUSED.trip(format_args!("connection from {ip}: no export lists it"));
        }
        ok
    }
}

impl ExportTable<LocalFs> {
    /// One export, `fs`, with no access control: every client, with the
    /// identity its credential claims (`*(rw,no_root_squash,sec=sys:none)`).
    /// MOUNT knows it by its path and `names`.
    pub fn open_to_all(fs: Arc<LocalFs>, names: Vec<Bytes>) -> Self {
        let options = ExportOptions {
            read_only: false,
            squash: crate::exports::Squash::None,
            sec: vec![
                crate::exports::SecFlavor::Sys,
                crate::exports::SecFlavor::None,
            ],
            ..ExportOptions::default()
        };
        let path = fs.path().to_path_buf();
        let aliases: Vec<Bytes> = names
            .into_iter()
            .filter(|p| p[..] != *path.as_os_str().as_bytes())
            .collect();
        let rule = ClientRule {
            spec: ClientSpec::Any,
            options,
        };
        Self {
            exports: vec![Export::new(fs, path, &aliases, vec![rule])],
            key: fresh_key(),
        }
    }

    /// Opens every entry as a [`LocalFs`] (canonicalising its path; two
    /// entries naming one directory are an error). `read_only` makes the
    /// storage itself refuse changes, whatever the client options say;
    /// `aliases` are extra MOUNT names of the first export; `state` keeps
    /// every export's handle key and index (handles survive restarts).
    pub fn open(
        entries: &[ExportEntry],
        read_only: bool,
        aliases: &[Bytes],
        state: Option<&crate::StateDir>,
    ) -> io::Result<Self> {
        let mut exports: Vec<Export<LocalFs>> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let fs = Arc::new(match state {
                Some(s) => LocalFs::with_state_dir(&e.path, read_only, s)?,
                None => LocalFs::new(&e.path, read_only)?,
            });
            let path = fs.path().to_path_buf();
            if exports.iter().any(|x| x.path == path) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is exported twice", path.display()),
                ));
            }
            let mut names: Vec<Bytes> = Vec::new();
            if e.path != path {
                names.push(Bytes::copy_from_slice(e.path.as_os_str().as_bytes()));
            }
            if i == 0 {
                names.extend(aliases.iter().cloned());
            }
            exports.push(Export::new(fs, path, &names, e.clients.clone()));
        }
        let mut table = Self::new(exports)?;
        if let Some(s) = state {
            table.key = HandleKey::new(s.handle_key()?);
        }
        Ok(table)
    }
}
