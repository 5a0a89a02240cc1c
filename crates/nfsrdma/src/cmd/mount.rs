//! `nfsrdma mount URL DIR`: the export as a local file system through FUSE
//! (the `fuser` crate, mounting with `mount(2)` as root or `fusermount3`
//! otherwise; no libfuse needed), so that ordinary tools work on it. The
//! URL is `nfs://` (TCP) or `nfs+rdma://` (RPC-over-RDMA), as for `cp`.
//!
//! `-o vers=4.1` (or `vers=4.2`, or `?version=4.1` in the URL) mounts
//! over an NFSv4 session instead of NFSv3 ([`fs4`]).
//!
//! `-o` takes mount(8)/nfs(5) options ([`options`]): with `allow_other`
//! every user of the machine may use the mount, each acting as itself
//! towards the server (AUTH_SYS with the caller's uid, gid and groups,
//! [`creds`]); `default_permissions` adds the kernel's own mode check.
//!
//! Without `--foreground` the command starts itself again in the
//! background with `--foreground`, waits until the mount is in place and
//! returns. The mount ends on SIGINT or SIGTERM (unmounting it), or when
//! it is unmounted from outside (`fusermount3 -u DIR`, `umount DIR`).

mod cache;
mod callbacks;
mod creds;
mod fs;
mod fs4;
mod handles;
mod hide;
mod options;
mod silly;
mod table;
mod unstable;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use fuser::{Config, MountOption, Session, SessionACL};
use nfs_client::nfs::v3::Ftype3;
use nfs_client::nfs::v4::NfsFtype4;
use nfs_client::Mounted;
use oncrpc::ClientTransport;
use tokio::signal::unix::{signal, SignalKind};

use crate::remote::{open_fs_with, with_fs, Fs, V4};
use crate::url::{open, with_remote, IoArgs, NfsUrl};

/// The line a background child prints on standard output once mounted.
const READY: &str = "nfsrdma-mount-ready";

/// FUSE session threads (each blocks on one NFS request at a time).
const FUSE_THREADS: usize = 4;

/// Arguments of `nfsrdma mount`.
#[derive(clap::Args, Debug)]
pub(crate) struct MountArgs {
    /// nfs://host[:port]/export/path (a directory), or
    /// nfs+rdma://host[:port]/... (RPC-over-RDMA on the software iWARP
    /// device; options ?mountport=N&crc=1&version=2).
    url: String,
    /// The local directory to mount on.
    dir: PathBuf,
    /// Stay in the foreground until interrupted or unmounted.
    #[arg(long, short = 'f')]
    foreground: bool,
    /// Mount options, comma-separated, as mount(8) and nfs(5) take them:
    /// allow_other, default_permissions, ro, rw, ac, noac, actimeo=S,
    /// acregmin=S, acregmax=S, acdirmin=S, acdirmax=S (attribute cache
    /// timeouts in seconds; defaults 3, 60, 30, 60), rsize=N, wsize=N,
    /// vers=3|4.1|4.2, sec=sys|krb5|krb5i|krb5p (Kerberos: every caller
    /// acts as the principal of the mounting user's ticket, KRB5CCNAME),
    /// deleg_opens=none|read|write (NFSv4: which opens are served
    /// locally under a delegation; default read), writeback_cache. May
    /// be repeated.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Mount read-only: every change fails with EROFS (`-o ro`).
    #[arg(long)]
    read_only: bool,
    /// Let the kernel cache writes and send them in large pieces (fast
    /// small writes); it then trusts its own size and mtime of files over
    /// the server's, so changes made by others show late
    /// (`-o writeback_cache`).
    #[arg(long)]
    writeback_cache: bool,
    /// Seconds the kernel may cache attributes and names (`-o actimeo=`,
    /// fractions allowed).
    #[arg(long, value_parser = parse_timeout)]
    attr_timeout: Option<f64>,
    #[command(flatten)]
    io: IoArgs,
    /// Print a readiness line on standard output once mounted (used by
    /// the background start).
    #[arg(long, hide = true)]
    notify_ready: bool,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("bad timeout {s:?}: expected 0 to 86400 seconds")),
    }
}

pub(crate) async fn run(args: MountArgs) -> anyhow::Result<()> {
    if !args.notify_ready {
        return mount(args).await;
    }
    // A background child: its standard error is not read, so a failure
    // goes to standard output, where the starting process looks.
    let r = mount(args).await;
    if let Err(e) = &r {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{e:#}").and_then(|()| out.flush());
    }
    r
}

/// The `-o` options with the older flags applied over them.
fn mount_options(args: &MountArgs) -> anyhow::Result<options::MountOpts> {
    let mut o = options::MountOpts::parse(&args.options).map_err(anyhow::Error::msg)?;
    o.read_only |= args.read_only;
    o.writeback_cache |= args.writeback_cache;
    if let Some(t) = args.attr_timeout {
        o.ac = options::AcTimeouts::all(Duration::from_secs_f64(t));
    }
    Ok(o)
}

async fn mount(args: MountArgs) -> anyhow::Result<()> {
    let mut url = NfsUrl::parse(&args.url)?;
    let opts = mount_options(&args)?;
    let dir = std::fs::canonicalize(&args.dir)
        .with_context(|| format!("mount point {}", args.dir.display()))?;
    anyhow::ensure!(dir.is_dir(), "{}: not a directory", dir.display());
    if !args.foreground {
        return tokio::task::spawn_blocking(move || start_background(&args, &dir)).await?;
    }
    let mut io = args.io.options();
    io.rsize = opts.rsize;
    io.wsize = opts.wsize;
    if opts.nfs4_minor.is_some() {
        url.nfs4_minor = opts.nfs4_minor;
    }
    if opts.sec.is_some() {
        url.sec = opts.sec;
    }
    if let Some(n) = opts.nconnect {
        url.nconnect = n;
    }
    if url.sec.is_some() {
        // RPCSEC_GSS under the mounting user's ticket, for every caller
        // (no back channel: its session takes no delegations).
        let unused = nfs_client::v4::Delegations::new();
        return with_fs!(open_fs_with(&url, io, None).await?, |fs| match fs {
            Fs::V4(v) => serve4(v, &url, &args, opts, dir, unused).await,
            Fs::V3(m) => serve(m, &url, &args, opts, dir).await,
        });
    }
    if url.nfs4_minor.is_some() {
        // The session's back channel answers recalls from this table
        // (RFC 8881 §2.10.3.1), so OPENs take delegations.
        let (delegs, recalls) = nfs_client::v4::Delegations::new();
        let fs = open_fs_with(&url, io, Some(&delegs)).await?;
        return with_fs!(fs, |fs| match fs {
            Fs::V4(v) => serve4(v, &url, &args, opts, dir, (delegs, recalls)).await,
            Fs::V3(_) => bail!("expected an NFSv4 session"),
        });
    }
    with_remote!(open(&url, io).await?, |m| {
        serve(m, &url, &args, opts, dir).await
    })
}

/// Mounts `m`'s directory on `dir` over NFSv3 and serves it until a
/// signal or an unmount from outside.
async fn serve<T: ClientTransport + Send + Sync + 'static>(
    m: Mounted<T>,
    url: &NfsUrl,
    args: &MountArgs,
    opts: options::MountOpts,
    dir: PathBuf,
) -> anyhow::Result<()> {
    let Mounted { mount, rest, .. } = m;
    let root = mount
        .resolve(&rest)
        .await
        .with_context(|| url.path.clone())?;
    if root.attrs.ftype != Ftype3::NF3DIR {
        bail!("{}: not a directory", url.path);
    }
    let nfs_fs = fs::NfsFs::new(
        mount,
        root.fh,
        &root.attrs,
        tokio::runtime::Handle::current(),
        opts,
    );
    run_fuse(nfs_fs, url, args, opts, dir).await
}

/// The delegation table the back channel answers from, and its recalls.
type Callbacks = (
    Arc<nfs_client::v4::Delegations>,
    tokio::sync::mpsc::UnboundedReceiver<nfs_client::v4::Recall>,
);

/// Mounts the directory of NFSv4 session `v` on `dir` and serves it,
/// renewing the lease while idle; destroys the session at the end.
async fn serve4<T: ClientTransport + Send + Sync + 'static>(
    v: V4<T>,
    url: &NfsUrl,
    args: &MountArgs,
    opts: options::MountOpts,
    dir: PathBuf,
    (delegs, recalls): Callbacks,
) -> anyhow::Result<()> {
    let (session, root, sizes) = v.into_mount().await?;
    let attrs = session.getattr(&root).await?;
    if attrs.ftype != NfsFtype4::NF4DIR {
        bail!("{}: not a directory", url.path);
    }
    let lease = session.lease_time(&root).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "no lease_time from the server; renewing every 30 s");
        90
    });
    let session = Arc::new(session);
    let rt = tokio::runtime::Handle::current();
    let mut nfs_fs = fs4::NfsFs4::new(Arc::clone(&session), root, &attrs, sizes, rt, opts)?;
    let mut recaller = None;
    if session.has_back_channel() {
        let (fs, task) = nfs_fs.with_delegations(delegs, recalls);
        nfs_fs = fs;
        recaller = Some(tokio::spawn(task));
    } else {
        tracing::info!("no back channel: the mount takes no delegations");
    }
    nfs_fs.reclaim_opens_on_recovery();
    let lease = Duration::from_secs(u64::from(lease.max(3)));
    let renewer = tokio::spawn(fs4::renew_lease(Arc::clone(&session), lease));
    let r = run_fuse(nfs_fs, url, args, opts, dir).await;
    renewer.abort();
    let _ = renewer.await;
    if let Some(t) = recaller {
        t.abort();
        let _ = t.await;
    }
    match Arc::try_unwrap(session) {
        Ok(s) => {
            if let Err(e) = s.close().await {
                tracing::warn!(error = %e, "destroying the NFSv4 session failed");
            }
        }
        Err(_) => tracing::debug!("session still shared at the end; not destroyed"),
    }
    r
}

/// Mounts `nfs_fs` on `dir` and serves it until a signal or an unmount
/// from outside.
async fn run_fuse<F: fuser::Filesystem + Send + 'static>(
    nfs_fs: F,
    url: &NfsUrl,
    args: &MountArgs,
    opts: options::MountOpts,
    dir: PathBuf,
) -> anyhow::Result<()> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(format!("{}:{}", url.host, url.path)),
        MountOption::Subtype("nfsrdma".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    if opts.default_permissions {
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    if opts.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(FUSE_THREADS);
    let mp = dir.clone();
    let mut session = tokio::task::spawn_blocking(move || Session::new(nfs_fs, &mp, &config))
        .await?
        .with_context(|| format!("mounting on {}", dir.display()))?;
    let mut unmounter = session.unmount_callable();
    tracing::info!("mounted {} on {}", args.url, dir.display());
    if args.notify_ready {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY}")?;
        out.flush()?;
    }
    let mut serving = tokio::task::spawn_blocking(move || session.run());
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            r = &mut serving => {
                r?.context("FUSE session failed")?;
                tracing::info!("{} was unmounted", dir.display());
                return Ok(());
            }
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        tracing::info!("signal: unmounting {}", dir.display());
        let r = tokio::task::spawn_blocking({
            let mut u = unmounter;
            move || (u.unmount(), u)
        })
        .await?;
        unmounter = r.1;
        match r.0 {
            // The session ends once the kernel lets go.
            Ok(()) => {
                tracing::debug!("unmounted; waiting for the FUSE session to end");
                serving.await?.context("FUSE session failed")?;
                tracing::debug!("FUSE session ended");
                return Ok(());
            }
            Err(e) => tracing::error!("unmounting {}: {e} (still mounted)", dir.display()),
        }
    }
}

/// Starts `nfsrdma mount --foreground` detached (its own process group,
/// so the terminal's signals do not reach it; its log discarded) and
/// waits for its readiness line; on failure, shows the error it printed.
fn start_background(args: &MountArgs, dir: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this program")?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg("--foreground")
        .arg("--notify-ready")
        .arg("--in-flight")
        .arg(args.io.in_flight.to_string());
    if let Some(bs) = args.io.block_size {
        cmd.arg("--block-size").arg(bs.to_string());
    }
    if let Some(t) = args.attr_timeout {
        cmd.arg("--attr-timeout").arg(t.to_string());
    }
    for o in &args.options {
        cmd.arg("-o").arg(o);
    }
    if args.read_only {
        cmd.arg("--read-only");
    }
    if args.writeback_cache {
        cmd.arg("--writeback-cache");
    }
    cmd.arg(&args.url)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().context("starting the mount process")?;
    let Some(out) = child.stdout.take() else {
        bail!("mount process has no output pipe");
    };
    let mut out = BufReader::new(out.take(64 << 10));
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    if line.trim_end() == READY {
        return Ok(());
    }
    let _ = out.read_to_string(&mut line);
    let status = child.wait()?;
    bail!("mount process failed ({status}): {}", line.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_within_a_day() {
        assert_eq!(parse_timeout("1.5"), Ok(1.5));
        assert_eq!(parse_timeout("0"), Ok(0.0));
        for bad in ["-1", "x", "NaN", "inf", "90000"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }
}
