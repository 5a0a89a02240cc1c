//! `nfsrdma cp SRC DST`: copy a file where either side (or both) is an
//! NFS URL, with pipelined READs/WRITEs, a progress bar on long copies
//! (when standard error is a terminal) and a final throughput line.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use indicatif::{ProgressBar, ProgressStyle};
use nfs_client::nfs::v3::{Ftype3, NfsFh3};
use nfs_client::{Mount, Mounted};
use oncrpc::ClientTransport;

use crate::url::{open, with_remote, IoArgs, Location, NfsUrl};

/// Copies shorter than this get no progress bar.
const PROGRESS_MIN: u64 = 8 << 20;

/// Arguments of `nfsrdma cp`.
#[derive(clap::Args, Debug)]
pub(crate) struct CpArgs {
    /// Source: a local path, nfs://host[:port]/export/path, or
    /// nfs+rdma://host[:port]/export/path (RPC-over-RDMA; options
    /// ?mountport=N&crc=1&version=2).
    src: String,
    /// Destination: a local path or URL; an existing directory (or a URL
    /// ending in '/') receives the source's file name.
    dst: String,
    #[command(flatten)]
    io: IoArgs,
}

fn progress(total: u64) -> Option<ProgressBar> {
    if total < PROGRESS_MIN || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        pb.set_style(style);
    }
    Some(pb)
}

/// An open source: its size, mode and name.
struct Source {
    size: u64,
    mode: u32,
    name: String,
}

/// A remote file opened for writing at `path` below the export.
async fn create_remote<T: ClientTransport>(
    m: &Mount<T>,
    url: &NfsUrl,
    rest: &str,
    src_name: &str,
    mode: u32,
) -> anyhow::Result<NfsFh3> {
    let mut path = rest.to_owned();
    let is_dir = url.trailing_slash
        || match m.resolve(rest).await {
            Ok(r) => r.attrs.ftype == Ftype3::NF3DIR,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e).with_context(|| url.path.clone()),
        };
    if is_dir {
        path = format!("{}/{src_name}", path.trim_end_matches('/'));
    }
    let (dir, name) = m
        .resolve_parent(&path)
        .await
        .with_context(|| url.path.clone())?;
    m.create_file(&dir, &name, mode & 0o7777)
        .await
        .with_context(|| format!("creating {path}"))
}

fn local_dst(dst: &Path, src_name: &str) -> PathBuf {
    if dst.is_dir() {
        dst.join(src_name)
    } else {
        dst.to_path_buf()
    }
}

/// The regular file `url` names on the mount `tm`.
async fn open_remote<T: ClientTransport>(
    tm: &Mounted<T>,
    url: &NfsUrl,
) -> anyhow::Result<(NfsFh3, Source)> {
    let f = tm
        .mount
        .resolve(&tm.rest)
        .await
        .with_context(|| url.path.clone())?;
    if f.attrs.ftype != Ftype3::NF3REG {
        bail!("{}: not a regular file", url.path);
    }
    let src = Source {
        size: f.attrs.size,
        mode: f.attrs.mode,
        name: url.file_name().unwrap_or("file").to_owned(),
    };
    Ok((f.fh, src))
}

pub(crate) async fn run(args: CpArgs) -> anyhow::Result<()> {
    let src = Location::parse(&args.src)?;
    let dst = Location::parse(&args.dst)?;
    let start = Instant::now();
    let bytes = match (src, dst) {
        (Location::Local(s), Location::Remote(d)) => {
            let remote = open(&d, args.io.options()).await?;
            with_remote!(remote, |tm| local_to_remote(&s, &d, tm).await?)
        }
        (Location::Remote(s), Location::Local(d)) => {
            let remote = open(&s, args.io.options()).await?;
            with_remote!(remote, |tm| remote_to_local(&s, &d, tm).await?)
        }
        (Location::Remote(s), Location::Remote(d)) => {
            let src = open(&s, args.io.options()).await?;
            let dst = open(&d, args.io.options()).await?;
            with_remote!(src, |stm| with_remote!(dst, |dtm| remote_to_remote(
                &s, &d, &stm, &dtm
            )
            .await?))
        }
        (Location::Local(_), Location::Local(_)) => {
            bail!("both operands are local: one of them must be an nfs:// URL")
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let mib_s = if secs > 0.0 {
        bytes as f64 / (1024.0 * 1024.0) / secs
    } else {
        0.0
    };
    eprintln!("copied {bytes} bytes in {secs:.3} s ({mib_s:.1} MiB/s)");
    Ok(())
}

async fn local_to_remote<T: ClientTransport>(
    src: &Path,
    dst: &NfsUrl,
    tm: Mounted<T>,
) -> anyhow::Result<u64> {
    let mut file = File::open(src).with_context(|| format!("opening {}", src.display()))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("{}: not a regular file", src.display());
    }
    let name = src
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let m = &tm.mount;
    let fh = create_remote(m, dst, &tm.rest, &name, meta.permissions().mode()).await?;
    let pb = progress(meta.len());
    let chunk = (m.write_size() as usize).saturating_mul(4);
    let mut w = m.writer(&fh, 0);
    loop {
        let mut buf = BytesMut::zeroed(chunk);
        let n = read_full(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        w.write(buf.freeze()).await?;
        if let Some(pb) = &pb {
            pb.inc(n as u64);
        }
    }
    let stats = w.finish().await.context("writing")?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    if stats.resent_bytes > 0 {
        eprintln!(
            "server lost unstable writes: {} bytes sent again",
            stats.resent_bytes
        );
    }
    Ok(stats.bytes)
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match f.read(&mut buf[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

async fn remote_to_local<T: ClientTransport>(
    src: &NfsUrl,
    dst: &Path,
    tm: Mounted<T>,
) -> anyhow::Result<u64> {
    let (fh, s) = open_remote(&tm, src).await?;
    let path = local_dst(dst, &s.name);
    let mut out = std::io::BufWriter::with_capacity(
        1 << 20,
        File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    let pb = progress(s.size);
    let n = tm
        .mount
        .read_to(&fh, 0, |b| {
            if let Some(pb) = &pb {
                pb.inc(b.len() as u64);
            }
            out.write_all(b)
        })
        .await
        .with_context(|| format!("reading {}", src.path))?;
    out.flush()?;
    let f = out.into_inner().map_err(|e| e.into_error())?;
    let _ = f.set_permissions(std::fs::Permissions::from_mode(s.mode & 0o777));
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(n)
}

async fn remote_to_remote<S: ClientTransport, D: ClientTransport>(
    src: &NfsUrl,
    dst: &NfsUrl,
    stm: &Mounted<S>,
    dtm: &Mounted<D>,
) -> anyhow::Result<u64> {
    let (sfh, s) = open_remote(stm, src).await?;
    let dfh = create_remote(&dtm.mount, dst, &dtm.rest, &s.name, s.mode).await?;
    let pb = progress(s.size);
    let window = (stm.mount.read_size() as usize).saturating_mul(stm.mount.in_flight());
    let mut w = dtm.mount.writer(&dfh, 0);
    let mut off = 0u64;
    loop {
        let mut buf = vec![0u8; window];
        let n = stm.mount.read_at(&sfh, off, &mut buf).await?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        off += n as u64;
        w.write(Bytes::from(buf)).await?;
        if let Some(pb) = &pb {
            pb.inc(n as u64);
        }
        if n < window {
            break;
        }
    }
    let stats = w.finish().await?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(stats.bytes)
}
