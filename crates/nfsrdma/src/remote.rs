//! [`Fs`]: what `ls`, `cat` and `cp` need of a server, over an NFSv3
//! [`Mount`] or an NFSv4.1/4.2 [`Session`], so each command is written
//! once: resolving a path, listing a directory page by page, streaming a
//! file out with READs in flight, and creating (or truncating) a file
//! and streaming data into it with WRITEs in flight, COMMITted (NFSv3
//! [`nfs_client::Mount`]).
//!
//! Paths are the URL's path. Over NFSv3, MOUNT chose the export and the
//! path within it. Over NFSv4 the path is walked from PUTROOTFH, the way
//! the Linux client mounts `server:/path` (RFC 8881 §7.3: the server's
//! pseudo file system joins the exports); a server whose root is the
//! export itself has no such names, so when the path's first component is
//! not in the root, the export holding the path is asked of MOUNT and the
//! root stands for it (logged at debug).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use nfs_client::nfs::v3::{Entryplus3, Fattr3, Ftype3, NfsFh3};
use nfs_client::nfs::v4::{NfsFh4, NfsFtype4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE};
use nfs_client::v4::{Attrs, Delegations, OpenOptions, Session, SessionOptions, Writer4};
use nfs_client::{FileWriter, IoOptions, Mounted};
use oncrpc::ClientTransport;

use crate::url::{NfsUrl, Scheme};

/// A server reached over NFSv3 or NFSv4.
pub(crate) enum Fs<T> {
    /// MOUNT, then NFSv3.
    V3(Mounted<T>),
    /// An NFSv4.1 (or 4.2) session.
    V4(V4<T>),
}

/// An NFSv4 session and where the URL's path starts.
pub(crate) struct V4<T> {
    session: Session<T>,
    root: NfsFh4,
    /// The URL's path from the root (see the module docs).
    rest: String,
    io: IoOptions,
    maxread: u32,
    maxwrite: u32,
}

/// A file or directory on either version.
#[derive(Debug, Clone)]
pub(crate) enum Handle {
    V3(NfsFh3),
    /// Its handle, and its directory and name (NFSv4 opens by name).
    V4 {
        fh: NfsFh4,
        dir: NfsFh4,
        name: String,
    },
}

/// The attributes the commands show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attr {
    pub(crate) ftype: Ftype3,
    pub(crate) mode: u32,
    pub(crate) size: u64,
    /// Seconds since the epoch.
    pub(crate) mtime: u32,
    /// Links, owner and group (over NFSv4 when the server gives
    /// `numlinks` and numeric `owner` and `owner_group`).
    pub(crate) ids: Option<(u32, u32, u32)>,
}

impl Attr {
    fn v3(a: &Fattr3) -> Self {
        Self {
            ftype: a.ftype,
            mode: a.mode,
            size: a.size,
            mtime: a.mtime.seconds,
            ids: Some((a.nlink, a.uid, a.gid)),
        }
    }

    fn v4(a: &Attrs) -> Self {
        Self {
            ftype: ftype4(a.ftype),
            mode: a.mode.unwrap_or(0),
            size: a.size,
            mtime: a
                .mtime
                .map_or(0, |t| u32::try_from(t.seconds.max(0)).unwrap_or(u32::MAX)),
            ids: match (a.nlink, a.uid, a.gid) {
                (Some(n), Some(u), Some(g)) => Some((n, u, g)),
                _ => None,
            },
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.ftype == Ftype3::NF3DIR
    }
}

/// The NFSv3 file type of an NFSv4 one (RFC 8881 §5.8.1.2; both follow
/// the Unix types).
fn ftype4(t: NfsFtype4) -> Ftype3 {
    match t {
        NfsFtype4::NF4DIR => Ftype3::NF3DIR,
        NfsFtype4::NF4LNK => Ftype3::NF3LNK,
        NfsFtype4::NF4BLK => Ftype3::NF3BLK,
        NfsFtype4::NF4CHR => Ftype3::NF3CHR,
        NfsFtype4::NF4SOCK => Ftype3::NF3SOCK,
        NfsFtype4::NF4FIFO => Ftype3::NF3FIFO,
        _ => Ftype3::NF3REG,
    }
}

/// A directory entry, with attributes when the server gave them.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: String,
    attr: Option<Attr>,
    v3: Option<Entryplus3>,
}

/// `/`-separated components, without empty ones and `.`.
fn components(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

impl<T: ClientTransport> Fs<T> {
    /// The URL's target relative to where [`Fs::find`] starts.
    pub(crate) fn rest(&self) -> &str {
        match self {
            Fs::V3(m) => &m.rest,
            Fs::V4(v) => &v.rest,
        }
    }

    /// The object at `rel` (relative to [`Fs::rest`]'s start), or `None`
    /// when the server says it does not exist.
    pub(crate) async fn find(&self, rel: &str) -> anyhow::Result<Option<(Handle, Attr)>> {
        match self {
            Fs::V3(m) => match m.mount.resolve(rel).await {
                Ok(r) => Ok(Some((Handle::V3(r.fh), Attr::v3(&r.attrs)))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            },
            Fs::V4(v) => v.find(rel).await,
        }
    }

    /// Like [`Fs::find`], failing with the server's status (in context
    /// `what`) when it does not exist.
    pub(crate) async fn resolve(&self, rel: &str, what: &str) -> anyhow::Result<(Handle, Attr)> {
        match self {
            Fs::V3(m) => {
                let r = m
                    .mount
                    .resolve(rel)
                    .await
                    .with_context(|| what.to_owned())?;
                Ok((Handle::V3(r.fh), Attr::v3(&r.attrs)))
            }
            Fs::V4(v) => match v.find(rel).await.with_context(|| what.to_owned())? {
                Some(f) => Ok(f),
                None => bail!("{what}: no such file or directory (NFS4ERR_NOENT)"),
            },
        }
    }

    /// A lister of directory `dir`.
    pub(crate) fn list<'a>(&'a self, dir: &'a Handle) -> Lister<'a, T> {
        Lister {
            fs: self,
            dir,
            v3: match (self, dir) {
                (Fs::V3(m), Handle::V3(fh)) => Some(m.mount.read_dir(fh)),
                _ => None,
            },
            done: false,
        }
    }

    /// The attributes of entry `e` of `dir`, asked of the server when the
    /// listing left them out; its symbolic link target, if it is one
    /// (NFSv3 only).
    pub(crate) async fn entry_attr(
        &self,
        dir: &Handle,
        e: &Entry,
    ) -> anyhow::Result<(Attr, Option<String>)> {
        match (self, dir) {
            (Fs::V3(m), Handle::V3(dfh)) => {
                let c = m.mount.client();
                let Some(ep) = &e.v3 else {
                    bail!("NFSv3 entry without its reply");
                };
                let (a, fh) = match (&ep.name_attributes, &ep.name_handle) {
                    (Some(a), fh) => (a.clone(), fh.clone()),
                    (None, Some(fh)) => (c.getattr(fh).await?, Some(fh.clone())),
                    (None, None) => {
                        let l = c.lookup(dfh, &ep.name.0).await?;
                        let a = l.obj_attributes.context("server gave no attributes")?;
                        (a, Some(l.object))
                    }
                };
                let link = match (a.ftype, fh) {
                    (Ftype3::NF3LNK, Some(fh)) => c
                        .readlink(&fh)
                        .await
                        .ok()
                        .map(|l| String::from_utf8_lossy(&l.data.0).into_owned()),
                    _ => None,
                };
                Ok((Attr::v3(&a), link))
            }
            (Fs::V4(v), Handle::V4 { fh, .. }) => match &e.attr {
                Some(a) => Ok((a.clone(), None)),
                None => {
                    let efh = v.session.lookup(fh, &e.name).await?;
                    Ok((Attr::v4(&v.session.getattr(&efh).await?), None))
                }
            },
            _ => bail!("handle of the other NFS version"),
        }
    }

    /// Streams the regular file `h` into `sink` with READs in flight;
    /// returns the bytes delivered.
    pub(crate) async fn read_to(
        &self,
        h: &Handle,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> anyhow::Result<u64> {
        match (self, h) {
            (Fs::V3(m), Handle::V3(fh)) => Ok(m.mount.read_to(fh, 0, sink).await?),
            (Fs::V4(v), Handle::V4 { dir, name, .. }) => v.read_to(dir, name, sink).await,
            _ => bail!("handle of the other NFS version"),
        }
    }

    /// READ size.
    pub(crate) fn read_size(&self) -> u32 {
        match self {
            Fs::V3(m) => m.mount.read_size(),
            Fs::V4(v) => v.maxread,
        }
    }

    /// Creates the regular file `name` in directory `dir` with `mode`,
    /// or truncates it if it exists, for writing.
    pub(crate) async fn create(
        &self,
        dir: &Handle,
        name: &str,
        mode: u32,
    ) -> anyhow::Result<Writer<'_, T>> {
        match (self, dir) {
            (Fs::V3(m), Handle::V3(dfh)) => {
                let fh = m.mount.create_file(dfh, name, mode).await?;
                Ok(Writer::V3(m.mount.writer(&fh, 0)))
            }
            (Fs::V4(v), Handle::V4 { fh, .. }) => {
                let how = OpenOptions {
                    create_mode: Some(mode),
                    ..OpenOptions::default()
                };
                let file = v.session.open(fh, name, how).await?;
                v.session.truncate(&file, 0).await?;
                let w = v.session.writer(file, 0, v.maxwrite, v.io.commit_window);
                Ok(Writer::V4(w))
            }
            _ => bail!("handle of the other NFS version"),
        }
    }

    /// WRITE size.
    pub(crate) fn write_size(&self) -> u32 {
        match self {
            Fs::V3(m) => m.mount.write_size(),
            Fs::V4(v) => v.maxwrite,
        }
    }

    /// Bytes to hand a [`Writer`] at once: enough for every WRITE in
    /// flight.
    pub(crate) fn write_window(&self) -> usize {
        let in_flight = match self {
            Fs::V3(m) => m.mount.in_flight(),
            Fs::V4(v) => v.io.in_flight.clamp(1, v.session.slot_count().max(1)),
        };
        (self.write_size() as usize).saturating_mul(in_flight.max(4))
    }

    /// Ends the session (NFSv4 DESTROY_SESSION and DESTROY_CLIENTID).
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        if let Fs::V4(v) = self {
            v.session.close().await?;
        }
        Ok(())
    }
}

/// Pages of a directory listing.
pub(crate) struct Lister<'a, T> {
    fs: &'a Fs<T>,
    dir: &'a Handle,
    v3: Option<nfs_client::ReadDirPlus<'a, T>>,
    done: bool,
}

impl<T: ClientTransport> Lister<'_, T> {
    /// The next page of entries (`.` and `..` left out), or `None`
    /// after the last: NFSv3 READDIRPLUS replies one by one, NFSv4
    /// READDIR as one page.
    pub(crate) async fn next_page(&mut self) -> anyhow::Result<Option<Vec<Entry>>> {
        if let Some(it) = &mut self.v3 {
            let Some(page) = it.next_page().await? else {
                return Ok(None);
            };
            let out = page
                .into_iter()
                .filter(|e| e.name.0[..] != *b"." && e.name.0[..] != *b"..")
                .map(|e| Entry {
                    name: nfs_client::entry_name(&e),
                    attr: e.name_attributes.as_ref().map(Attr::v3),
                    v3: Some(e),
                })
                .collect();
            return Ok(Some(out));
        }
        if self.done {
            return Ok(None);
        }
        self.done = true;
        let (Fs::V4(v), Handle::V4 { fh, .. }) = (self.fs, self.dir) else {
            bail!("handle of the other NFS version");
        };
        let entries = v.session.readdir(fh).await?;
        Ok(Some(
            entries
                .into_iter()
                .map(|e| Entry {
                    name: String::from_utf8_lossy(&e.name).into_owned(),
                    attr: None,
                    v3: None,
                })
                .collect(),
        ))
    }
}

/// A file being written: data handed in windows goes out with UNSTABLE
/// WRITEs in flight, COMMITted every commit window (64 MiB) and at
/// [`Writer::finish`].
pub(crate) enum Writer<'a, T> {
    V3(FileWriter<'a, T>),
    V4(Writer4<'a, T>),
}

impl<T: ClientTransport> Writer<'_, T> {
    /// Writes `data` after what was written so far.
    pub(crate) async fn write(&mut self, data: Bytes) -> anyhow::Result<()> {
        match self {
            Writer::V3(w) => Ok(w.write(data).await?),
            Writer::V4(w) => Ok(w.write(data).await?),
        }
    }

    /// COMMITs (NFSv3) or CLOSEs (NFSv4) the file; returns the bytes
    /// written and those sent again after a lost unstable write.
    pub(crate) async fn finish(self) -> anyhow::Result<(u64, u64)> {
        match self {
            Writer::V3(w) => {
                let s = w.finish().await?;
                Ok((s.bytes, s.resent_bytes))
            }
            Writer::V4(w) => Ok(w.finish().await?),
        }
    }
}

impl<T: ClientTransport> V4<T> {
    /// Establishes a session on `rpc` and finds where `path` starts.
    async fn new(
        rpc: T,
        minor: u32,
        opts: SessionOptions,
        url: &NfsUrl,
        io: IoOptions,
        callbacks: Option<&Arc<Delegations>>,
    ) -> anyhow::Result<Self> {
        let cred = nfs_client::process_auth_sys().to_opaque_auth();
        // A slot per call in flight (RFC 8881 §2.10.6.1), at most 64.
        let want = u32::try_from(io.in_flight).unwrap_or(u32::MAX).min(64);
        let opts = SessionOptions {
            minor_version: minor,
            slots: opts.slots.max(want),
            ..opts
        };
        let session = match callbacks {
            Some(d) => Session::establish_with_callbacks(rpc, cred, &opts, d).await,
            None => Session::establish(rpc, cred, &opts).await,
        }
        .context("establishing an NFSv4 session")?;
        let root = session.root().await?;
        let rest = start_of(&session, &root, url).await?;
        let (maxread, maxwrite) = session.io_sizes(&root).await?;
        let pick = |opt: Option<u32>, max: u32| opt.map_or(max, |o| o.min(max)).max(1);
        Ok(Self {
            maxread: pick(io.rsize.or(io.block_size), maxread),
            maxwrite: pick(io.wsize.or(io.block_size), maxwrite),
            session,
            root,
            rest,
            io,
        })
    }

    /// The session, the directory the URL names (walked from where its
    /// path starts) and the READ and WRITE sizes: what `mount` serves.
    pub(crate) async fn into_mount(self) -> anyhow::Result<(Session<T>, NfsFh4, (u32, u32))> {
        let dir = if components(&self.rest).is_empty() {
            self.root.clone()
        } else {
            self.session
                .lookup_path_at(&self.root, &self.rest)
                .await
                .with_context(|| format!("looking up {}", self.rest))?
        };
        Ok((self.session, dir, (self.maxread, self.maxwrite)))
    }

    async fn find(&self, rel: &str) -> anyhow::Result<Option<(Handle, Attr)>> {
        let comps = components(rel);
        let Some((name, dirs)) = comps.split_last() else {
            let a = self.session.getattr(&self.root).await?;
            let h = Handle::V4 {
                fh: self.root.clone(),
                dir: self.root.clone(),
                name: String::new(),
            };
            return Ok(Some((h, Attr::v4(&a))));
        };
        let walk = async {
            let mut dir = self.root.clone();
            for c in dirs {
                dir = self.session.lookup(&dir, c).await?;
            }
            let fh = self.session.lookup(&dir, name).await?;
            let a = self.session.getattr(&fh).await?;
            Ok::<_, nfs_client::v4::Error>((fh, dir, a))
        };
        match walk.await {
            Ok((fh, dir, a)) => {
                let h = Handle::V4 {
                    fh,
                    dir,
                    name: (*name).to_owned(),
                };
                Ok(Some((h, Attr::v4(&a))))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn read_to(
        &self,
        dir: &NfsFh4,
        name: &str,
        sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> anyhow::Result<u64> {
        let how = OpenOptions {
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_NONE,
            create_mode: None,
        };
        let file = self.session.open(dir, name, how).await?;
        let r = self
            .session
            .read_to(&file, 0, self.maxread, self.io.in_flight, sink)
            .await;
        let closed = self.session.close_file(file).await;
        let n = r?;
        closed?;
        Ok(n)
    }
}

/// Where the URL's path starts from the root: the whole path when its
/// first component is in the root (a pseudo file system, RFC 8881 §7.3),
/// or when it is the path's only component (a name in the root, which
/// may not exist yet: the file `cp` is to create in a root that is an
/// export, as the Linux server's `fsid=0` one is); else the root is the
/// export, and the path below the export is asked of MOUNT (over TCP, as
/// for NFSv3). A server that does not answer MOUNT (or has no export
/// holding the path) is taken to have the whole path under its root, so
/// that the server names what is missing.
async fn start_of<T: ClientTransport>(
    s: &Session<T>,
    root: &NfsFh4,
    url: &NfsUrl,
) -> anyhow::Result<String> {
    let comps = components(&url.path);
    let Some(first) = comps.first() else {
        return Ok(String::new());
    };
    if comps.len() == 1 {
        return Ok(comps.join("/"));
    }
    match s.lookup(root, first).await {
        Ok(_) => Ok(comps.join("/")),
        Err(e) if e.is_not_found() => {
            let nfs_port = match url.scheme {
                Scheme::Tcp => url.nfs_port,
                Scheme::Rdma => None,
            };
            match nfs_client::find_export(&url.host, url.mount_port, nfs_port, &url.path).await {
                Ok((export, rest)) => {
                    tracing::debug!(export, "the NFSv4 root is the export");
                    Ok(rest)
                }
                Err(e) => {
                    tracing::debug!(error = %e, "{first} is not in the NFSv4 root and MOUNT \
                                     does not place it; walking the path from the root");
                    Ok(comps.join("/"))
                }
            }
        }
        Err(e) => Err(e).with_context(|| format!("looking up {first}")),
    }
}

/// A server on either transport, for commands written once over [`Fs`].
pub(crate) enum AnyFs {
    Tcp(Fs<nfs_client::TcpConns>),
    /// `sec=krb5*`: RPCSEC_GSS on the TCP connection.
    Gss(Fs<oncrpc::gss::GssClient<oncrpc::tcp::TcpClient>>),
    /// `sec=krb5*` on `nfs+rdma://`: RPCSEC_GSS on the RDMA connection.
    GssRdma(Fs<oncrpc::gss::GssClient<rpcrdma::transport::RdmaClient<softrnic::SoftDevice>>>),
    GssVerbs(Fs<oncrpc::gss::GssClient<rpcrdma::transport::RdmaClient<verbs::VerbsDevice>>>),
    Rdma(Fs<rpcrdma::transport::RdmaClient<softrnic::SoftDevice>>),
    Verbs(Fs<rpcrdma::transport::RdmaClient<verbs::VerbsDevice>>),
}

/// Runs `$body` with `$fs` bound to the [`Fs`] inside an [`AnyFs`]
/// (instantiated once per transport).
macro_rules! with_fs {
    ($any:expr, |$fs:ident| $body:expr) => {
        match $any {
            $crate::remote::AnyFs::Tcp($fs) => $body,
            $crate::remote::AnyFs::Gss($fs) => $body,
            $crate::remote::AnyFs::GssRdma($fs) => $body,
            $crate::remote::AnyFs::GssVerbs($fs) => $body,
            $crate::remote::AnyFs::Rdma($fs) => $body,
            $crate::remote::AnyFs::Verbs($fs) => $body,
        }
    };
}
pub(crate) use with_fs;

/// Connects to `url`'s server with the NFS version it names: MOUNT and
/// NFSv3 ([`crate::url::open`]), or an NFSv4 session straight to the NFS
/// port (2049, or 20049 over RDMA, unless given).
pub(crate) async fn open_fs(url: &NfsUrl, io: IoOptions) -> anyhow::Result<AnyFs> {
    open_fs_with(url, io, None).await
}

/// Like [`open_fs`]; an NFSv4 session over TCP (without TLS) or RDMA
/// gets a back channel on its connection served by `callbacks`
/// (RFC 8881 §2.10.3.1, RFC 8167), so its OPENs take delegations.
pub(crate) async fn open_fs_with(
    url: &NfsUrl,
    io: IoOptions,
    callbacks: Option<&Arc<Delegations>>,
) -> anyhow::Result<AnyFs> {
    if url.nconnect > 1 && url.sec.is_some() && url.scheme == Scheme::Tcp {
        bail!(
            "nconnect={} with sec=krb5*: not supported (one RPCSEC_GSS context, one connection)",
            url.nconnect
        );
    }
    if let Some(service) = url.sec {
        return match url.scheme {
            Scheme::Tcp => open_gss(url, io, service).await.map(AnyFs::Gss),
            Scheme::Rdma => open_gss_rdma(url, io, service).await,
        };
    }
    let Some(minor) = url.nfs4_minor else {
        return Ok(match crate::url::open(url, io).await? {
            crate::url::Remote::Tcp(m) => AnyFs::Tcp(Fs::V3(m)),
            crate::url::Remote::Rdma(m) => AnyFs::Rdma(Fs::V3(m)),
            crate::url::Remote::Verbs(m) => AnyFs::Verbs(Fs::V3(m)),
        });
    };
    let what = || format!("NFSv4.{minor} to {}", url.host);
    match url.scheme {
        Scheme::Tcp if url.nconnect > 1 => bail!(
            "nconnect={}: NFSv4 over several connections (session trunking) is not \
             supported; nconnect= works with NFSv3",
            url.nconnect
        ),
        Scheme::Tcp => {
            let port = url.nfs_port.unwrap_or(nfs_client::DEFAULT_NFS_PORT);
            let addr = lookup(&url.host, port).await?;
            let (config, tcp) = (
                oncrpc::client::ClientConfig::default(),
                oncrpc::tcp::TcpConfig::default(),
            );
            let rpc = match url.client_tls()? {
                Some(tls) => {
                    let tls = tls.with_probe_program(nfs_client::nfs::v4::NFS4_PROGRAM, 4);
                    let never = oncrpc::tcp::ReconnectPolicy::default();
                    oncrpc::tcp::TcpClient::connect_tls(addr, rand_seed(), config, tcp, never, tls)
                        .await
                }
                None => match callbacks {
                    Some(d) => {
                        let cb = Arc::new(callback_server(d));
                        let seed = rand_seed();
                        // A mount keeps trying to reach its server (a
                        // `hard` mount), so that a restart is recovered.
                        let hard = oncrpc::tcp::ReconnectPolicy {
                            max_attempts: u32::MAX,
                            delay: std::time::Duration::from_millis(500),
                        };
                        oncrpc::tcp::TcpClient::connect_with_backchannel_and(
                            addr, seed, config, tcp, cb, hard,
                        )
                        .await
                    }
                    None => oncrpc::tcp::TcpClient::connect(addr, rand_seed(), config, tcp).await,
                },
            }
            .with_context(|| format!("connecting to {addr}"))?;
            let opts = SessionOptions::default();
            let cb = callbacks.filter(|_| url.client_tls().ok().flatten().is_none());
            let rpc = nfs_client::Nconnect::one(rpc);
            let v = V4::new(rpc, minor, opts, url, io, cb)
                .await
                .with_context(what)?;
            Ok(AnyFs::Tcp(Fs::V4(v)))
        }
        Scheme::Rdma => {
            if url.nconnect > 1 {
                // As Linux's NFSv4 client long did over RDMA: one
                // connection, the option ignored (docs/client.md).
                tracing::warn!(
                    nconnect = url.nconnect,
                    "nconnect is not spread over RDMA: one connection"
                );
            }
            let port = url.nfs_port.unwrap_or(nfs_client::DEFAULT_RDMA_PORT);
            let ropts = crate::url::rdma_options(url, io);
            let peer = match url.device {
                crate::device::DeviceChoice::Auto => crate::url::peer_ip(&url.host),
                _ => None,
            };
            match crate::device::choose_for_peer(&url.device, peer, crate::url::seed())? {
                crate::device::Chosen::Soft => {
                    let dev = crate::url::soft_device(url.crc);
                    let v = v4_rdma(&dev, port, minor, &ropts, url, io, callbacks)
                        .await
                        .with_context(what)?;
                    Ok(AnyFs::Rdma(Fs::V4(v)))
                }
                crate::device::Chosen::Verbs(dev) => {
                    let ropts = nfs_client::RdmaOptions {
                        send_with_invalidate: false,
                        ..ropts
                    };
                    let v = v4_rdma(&dev, port, minor, &ropts, url, io, callbacks)
                        .await
                        .with_context(what)?;
                    Ok(AnyFs::Verbs(Fs::V4(v)))
                }
            }
        }
    }
}

/// `sec=krb5*` over TCP: RPCSEC_GSS with Kerberos tickets from the
/// caller's credential cache (`KRB5CCNAME`) for `nfs@HOST`; NFSv3 (MOUNT
/// with AUTH_SYS, then NFS under the context) or an NFSv4 session.
async fn open_gss(
    url: &NfsUrl,
    io: IoOptions,
    service: oncrpc::gss::GssService,
) -> anyhow::Result<Fs<oncrpc::gss::GssClient<oncrpc::tcp::TcpClient>>> {
    let initiator = krb5_initiator()?;
    let target_name = format!("nfs@{}", url.host);
    let Some(minor) = url.nfs4_minor else {
        let target = nfs_client::TcpTarget {
            host: url.host.clone(),
            nfs_port: url.nfs_port,
            mount_port: url.mount_port,
            path: url.path.clone(),
        };
        let opts = nfs_client::TcpOptions {
            io,
            tls: url.client_tls()?,
            ..nfs_client::TcpOptions::default()
        };
        let m = nfs_client::connect_tcp_gss(&target, &opts, &initiator, &target_name, service)
            .await
            .with_context(|| format!("mounting {}:{} with RPCSEC_GSS", url.host, url.path))?;
        return Ok(Fs::V3(m));
    };
    let port = url.nfs_port.unwrap_or(nfs_client::DEFAULT_NFS_PORT);
    let addr = lookup(&url.host, port).await?;
    anyhow::ensure!(
        url.client_tls()?.is_none(),
        "sec=krb5* with xprtsec= is not supported for NFSv4 yet"
    );
    let rpc = oncrpc::tcp::TcpClient::connect(
        addr,
        rand_seed(),
        oncrpc::client::ClientConfig::default(),
        oncrpc::tcp::TcpConfig::default(),
    )
    .await
    .with_context(|| format!("connecting to {addr}"))?;
    let gss = oncrpc::gss::GssClient::establish(
        rpc,
        &initiator,
        &target_name,
        nfs_client::nfs::v4::NFS4_PROGRAM,
        4,
        service,
    )
    .await
    .with_context(|| format!("RPCSEC_GSS context with {target_name}"))?;
    let v = V4::new(gss, minor, SessionOptions::default(), url, io, None)
        .await
        .with_context(|| format!("NFSv4.{minor} to {}", url.host))?;
    Ok(Fs::V4(v))
}

/// Kerberos tickets from the caller's credential cache (`KRB5CCNAME`).
fn krb5_initiator() -> anyhow::Result<gss::Krb5Initiator> {
    gss::Krb5Initiator::from_ccache()
        .map_err(|e| anyhow::anyhow!("sec=krb5*: no Kerberos credentials (kinit?): {e}"))
}

/// `sec=krb5*` over RPC-over-RDMA: as [`open_gss`], the context on the
/// RDMA connection (softrnic, or an RDMA NIC as `device=` chooses).
async fn open_gss_rdma(
    url: &NfsUrl,
    io: IoOptions,
    service: oncrpc::gss::GssService,
) -> anyhow::Result<AnyFs> {
    let initiator = krb5_initiator()?;
    let ropts = crate::url::rdma_options(url, io);
    let peer = match url.device {
        crate::device::DeviceChoice::Auto => crate::url::peer_ip(&url.host),
        _ => None,
    };
    let gss = (&initiator, service);
    Ok(
        match crate::device::choose_for_peer(&url.device, peer, crate::url::seed())? {
            crate::device::Chosen::Soft => {
                let dev = crate::url::soft_device(url.crc);
                AnyFs::GssRdma(gss_rdma(&dev, &ropts, url, io, gss).await?)
            }
            crate::device::Chosen::Verbs(dev) => {
                let ropts = nfs_client::RdmaOptions {
                    send_with_invalidate: false,
                    ..ropts
                };
                AnyFs::GssVerbs(gss_rdma(&dev, &ropts, url, io, gss).await?)
            }
        },
    )
}

/// NFSv3 (MOUNT over TCP with AUTH_SYS) or an NFSv4 session over
/// RPC-over-RDMA on `dev`, under an RPCSEC_GSS context for `nfs@HOST`.
async fn gss_rdma<D: rnic::Device<Addr = SocketAddr>>(
    dev: &D,
    ropts: &nfs_client::RdmaOptions,
    url: &NfsUrl,
    io: IoOptions,
    (initiator, service): (&gss::Krb5Initiator, oncrpc::gss::GssService),
) -> anyhow::Result<Fs<oncrpc::gss::GssClient<rpcrdma::transport::RdmaClient<D>>>> {
    let target_name = format!("nfs@{}", url.host);
    let Some(minor) = url.nfs4_minor else {
        let target = nfs_client::RdmaTarget {
            host: url.host.clone(),
            rdma_port: url.nfs_port,
            mount_port: url.mount_port,
            path: url.path.clone(),
        };
        let m = nfs_client::connect_rdma_gss(dev, &target, ropts, initiator, &target_name, service)
            .await
            .with_context(|| {
                format!(
                    "mounting {}:{} over RDMA with RPCSEC_GSS",
                    url.host, url.path
                )
            })?;
        return Ok(Fs::V3(m));
    };
    let port = url.nfs_port.unwrap_or(nfs_client::DEFAULT_RDMA_PORT);
    let rpc = nfs_client::connect_rdma_transport(dev, &url.host, port, ropts).await?;
    let gss = oncrpc::gss::GssClient::establish(
        rpc,
        initiator,
        &target_name,
        nfs_client::nfs::v4::NFS4_PROGRAM,
        4,
        service,
    )
    .await
    .with_context(|| format!("RPCSEC_GSS context with {target_name}"))?;
    let opts = SessionOptions::for_rdma(&ropts.client_config());
    let v = V4::new(gss, minor, opts, url, io, None)
        .await
        .with_context(|| format!("NFSv4.{minor} over RDMA to {}", url.host))?;
    Ok(Fs::V4(v))
}

/// An NFSv4 session over RPC-over-RDMA on `dev`.
async fn v4_rdma<D: rnic::Device<Addr = SocketAddr> + Clone>(
    dev: &D,
    port: u16,
    minor: u32,
    ropts: &nfs_client::RdmaOptions,
    url: &NfsUrl,
    io: IoOptions,
    callbacks: Option<&Arc<Delegations>>,
) -> anyhow::Result<V4<rpcrdma::transport::RdmaClient<D>>> {
    let rpc = match callbacks {
        Some(d) => {
            // A mount keeps trying to reach its server (a `hard` mount),
            // so that a restart is recovered, as over TCP.
            let cb = Arc::new(callback_server(d));
            let hard = rpcrdma::transport::ReconnectPolicy {
                max_attempts: u32::MAX,
                delay: std::time::Duration::from_millis(500),
            };
            nfs_client::connect_rdma_transport_reconnecting(dev, &url.host, port, ropts, cb, hard)
                .await?
        }
        None => nfs_client::connect_rdma_transport(dev, &url.host, port, ropts).await?,
    };
    let opts = SessionOptions::for_rdma(&ropts.client_config());
    V4::new(rpc, minor, opts, url, io, callbacks).await
}

/// The RPC server a connection answers the NFS server's calls with: the
/// NFSv4.1 callback program over `d` (RFC 8881 §20).
fn callback_server(d: &Arc<Delegations>) -> oncrpc::Server {
    let mut s = oncrpc::Server::new();
    s.register(d.service());
    s
}

async fn lookup(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolving {host}"))?
        .next()
        .with_context(|| format!("{host}: no address"))
}

/// An XID seed that differs between runs.
fn rand_seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}
