//! `nfsrdma cp SRC DST`: copy a file where either side (or both) is an
//! NFS URL, with pipelined READs/WRITEs, a progress bar on long copies
//! (when standard error is a terminal) and a final throughput line. Over
//! NFSv3, or NFSv4 with `?version=4.1` on a URL.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use indicatif::{ProgressBar, ProgressStyle};
use nfs_client::nfs::v3::Ftype3;
use oncrpc::ClientTransport;

use crate::remote::{open_fs, with_fs, Fs, Handle, Writer};
use crate::url::{IoArgs, Location, NfsUrl};

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

/// The file to write for `url` on `fs`: the URL's path, or the source's
/// name inside it when it is a directory (or ends in `/`); created or
/// truncated.
async fn create_remote<'a, T: ClientTransport>(
    fs: &'a Fs<T>,
    url: &NfsUrl,
    src_name: &str,
    mode: u32,
) -> anyhow::Result<Writer<'a, T>> {
    let rest = fs.rest();
    let mut path = rest.to_owned();
    let is_dir = url.trailing_slash
        || fs
            .find(rest)
            .await
            .with_context(|| url.path.clone())?
            .is_some_and(|(_, a)| a.is_dir());
    if is_dir {
        path = format!("{}/{src_name}", path.trim_end_matches('/'));
    }
    let (dirs, name) = match path.trim_end_matches('/').rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path.as_str()),
    };
    if name.is_empty() {
        bail!("{}: no file name", url.path);
    }
    let (dir, a) = fs.resolve(dirs, &url.path).await?;
    if !a.is_dir() {
        bail!("{}: not a directory", url.path);
    }
    fs.create(&dir, name, mode & 0o7777)
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

/// The regular file `url` names on `fs`.
async fn open_remote<T: ClientTransport>(
    fs: &Fs<T>,
    url: &NfsUrl,
) -> anyhow::Result<(Handle, Source)> {
    let (h, a) = fs.resolve(fs.rest(), &url.path).await?;
    if a.ftype != Ftype3::NF3REG {
        bail!("{}: not a regular file", url.path);
    }
    let src = Source {
        size: a.size,
        mode: a.mode,
        name: url.file_name().unwrap_or("file").to_owned(),
    };
    Ok((h, src))
}

pub(crate) async fn run(args: CpArgs) -> anyhow::Result<()> {
    let src = Location::parse(&args.src)?;
    let dst = Location::parse(&args.dst)?;
    let start = Instant::now();
    let io = args.io.options();
    let bytes = match (src, dst) {
        (Location::Local(s), Location::Remote(d)) => {
            with_fs!(open_fs(&d, io).await?, |fs| {
                let r = local_to_remote(&s, &d, &fs).await;
                let closed = fs.close().await;
                r.and_then(|n| closed.map(|()| n))?
            })
        }
        (Location::Remote(s), Location::Local(d)) => {
            with_fs!(open_fs(&s, io).await?, |fs| {
                let r = remote_to_local(&s, &d, &fs).await;
                let closed = fs.close().await;
                r.and_then(|n| closed.map(|()| n))?
            })
        }
        (Location::Remote(s), Location::Remote(d)) => {
            let src = open_fs(&s, io).await?;
            let dst = open_fs(&d, io).await?;
            with_fs!(src, |sfs| with_fs!(dst, |dfs| {
                let r = remote_to_remote(&s, &d, &sfs, &dfs).await;
                let c1 = sfs.close().await;
                let c2 = dfs.close().await;
                r.and_then(|n| c1.and(c2).map(|()| n))?
            }))
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
    fs: &Fs<T>,
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
    let mut w = create_remote(fs, dst, &name, meta.permissions().mode()).await?;
    let pb = progress(meta.len());
    let chunk = fs.write_window();
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
    let (bytes, resent) = w.finish().await.context("writing")?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    if resent > 0 {
        eprintln!("server lost unstable writes: {resent} bytes sent again");
    }
    Ok(bytes)
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
    fs: &Fs<T>,
) -> anyhow::Result<u64> {
    let (h, s) = open_remote(fs, src).await?;
    let path = local_dst(dst, &s.name);
    let mut out = std::io::BufWriter::with_capacity(
        1 << 20,
        File::create(&path).with_context(|| format!("creating {}", path.display()))?,
    );
    let pb = progress(s.size);
    let n = fs
        .read_to(&h, |b| {
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

/// Server to server: the source streamed out in READs, gathered into
/// windows handed to the destination's WRITEs.
async fn remote_to_remote<S: ClientTransport, D: ClientTransport>(
    src: &NfsUrl,
    dst: &NfsUrl,
    sfs: &Fs<S>,
    dfs: &Fs<D>,
) -> anyhow::Result<u64> {
    let (h, s) = open_remote(sfs, src).await?;
    let mut w = create_remote(dfs, dst, &s.name, s.mode).await?;
    let pb = progress(s.size);
    let window = dfs.write_window().max(sfs.read_size() as usize);
    // The READ stream's sink is synchronous: full windows queue here and
    // are written between READ replies by the loop below.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let mut buf = BytesMut::with_capacity(window);
    let done = {
        let read = sfs.read_to(&h, |b| {
            buf.extend_from_slice(b);
            if buf.len() >= window {
                let _ = tx.send(buf.split().freeze());
            }
            Ok(())
        });
        tokio::pin!(read);
        let mut done = None;
        loop {
            tokio::select! {
                r = &mut read, if done.is_none() => done = Some(r),
                Some(data) = rx.recv() => {
                    if let Some(pb) = &pb {
                        pb.inc(data.len() as u64);
                    }
                    w.write(data).await?;
                }
                else => break,
            }
            if done.is_some() && rx.is_empty() {
                break;
            }
        }
        done
    };
    done.unwrap_or(Ok(0))
        .with_context(|| format!("reading {}", src.path))?;
    if !buf.is_empty() {
        w.write(buf.split().freeze()).await?;
    }
    let (bytes, _) = w.finish().await?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(bytes)
}
