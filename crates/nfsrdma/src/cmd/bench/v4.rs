//! The bench over an NFSv4.1 or 4.2 session (RFC 8881, RFC 7862): the
//! same runs as over NFSv3, each through the session's COMPOUNDs.
//!
//! - sequential read: OPEN for reading (CLAIM_NULL, §18.16), READs of
//!   the open stateid with the point's in-flight count (§18.22), CLOSE
//!   (§18.2), all timed;
//! - sequential write: OPEN for writing, UNSTABLE WRITEs of the open
//!   stateid (§18.32) with the point's in-flight count, COMMIT (§18.3),
//!   CLOSE, all timed;
//! - random read: one OPEN before the run (untimed), then READs of its
//!   stateid at random offsets, CLOSE after;
//! - metadata: LOOKUP (PUTFH, LOOKUP, GETFH; §18.15), then GETATTR of
//!   the handle (PUTFH, GETATTR; §18.7): two COMPOUNDs, as NFSv3's two
//!   calls.
//!
//! Every COMPOUND starts with SEQUENCE (§18.46) on one of the session's
//! slots; the session asks for as many slots as the largest in-flight
//! count (at most 64, the server may grant fewer), so in-flight counts
//! mean the same as over NFSv3.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use nfs_client::nfs::v4::{NfsFh4, NfsFtype4, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE};
use nfs_client::v4::{OpenOptions, Session};
use nfs_client::IoOptions;
use oncrpc::ClientTransport;

use super::measure::{self, Clocks, Sample};
use super::meta::{self, Calls};
use super::random::{self, RandomSample};
use super::report::{Op, Transport};
use super::schedule::Slot;
use super::{BenchArgs, Grid, READ_FILE};
use crate::remote::{open_fs, AnyFs, Fs};
use crate::url::NfsUrl;

/// An NFSv4 session over one transport.
pub(super) enum AnySession {
    Tcp(Session<nfs_client::TcpConns>),
    Rdma(Session<rpcrdma::transport::RdmaClient<softrnic::SoftDevice>>),
    Verbs(Session<rpcrdma::transport::RdmaClient<verbs::VerbsDevice>>),
}

/// Runs `$body` with `$s` bound to the [`Session`] inside an
/// [`AnySession`].
macro_rules! with_session {
    ($any:expr, |$s:ident| $body:expr) => {
        match $any {
            $crate::cmd::bench::v4::AnySession::Tcp($s) => $body,
            $crate::cmd::bench::v4::AnySession::Rdma($s) => $body,
            $crate::cmd::bench::v4::AnySession::Verbs($s) => $body,
        }
    };
}
pub(super) use with_session;

/// One NFSv4 side of the bench: its session and files.
pub(super) struct Side4 {
    pub(super) session: AnySession,
    pub(super) files: Files4,
}

/// The bench directory, the server's largest READ and WRITE, and the
/// names used.
pub(super) struct Files4 {
    dir: NfsFh4,
    max: (u32, u32),
    read: bool,
    write: Option<String>,
    names: Vec<Bytes>,
}

/// Establishes a session to `url` (whose `version=` says the minor
/// version) with slots for `in_flight` calls, and prepares the files.
pub(super) async fn open(
    url: &NfsUrl,
    (args, grid): (&BenchArgs, &Grid),
    transport: Transport,
    file_ready: &mut bool,
) -> anyhow::Result<Side4> {
    let io = IoOptions {
        in_flight: grid.in_flight.iter().copied().max().unwrap_or(1),
        ..IoOptions::default()
    };
    let (session, dir) = match open_fs(url, io).await? {
        AnyFs::Tcp(Fs::V4(v)) => {
            let (s, dir, _) = v.into_mount().await?;
            (AnySession::Tcp(s), dir)
        }
        AnyFs::Rdma(Fs::V4(v)) => {
            let (s, dir, _) = v.into_mount().await?;
            (AnySession::Rdma(s), dir)
        }
        AnyFs::Verbs(Fs::V4(v)) => {
            let (s, dir, _) = v.into_mount().await?;
            (AnySession::Verbs(s), dir)
        }
        _ => bail!("bench speaks NFSv4 with AUTH_SYS only (no sec=)"),
    };
    let files = with_session!(&session, |s| prepare(
        s,
        dir,
        (args, grid),
        transport,
        file_ready
    )
    .await?);
    Ok(Side4 { session, files })
}

/// Finds the bench directory and makes its files, as for NFSv3.
async fn prepare<T: ClientTransport>(
    s: &Session<T>,
    dir: NfsFh4,
    (args, grid): (&BenchArgs, &Grid),
    transport: Transport,
    file_ready: &mut bool,
) -> anyhow::Result<Files4> {
    if s.getattr(&dir).await?.ftype != NfsFtype4::NF4DIR {
        bail!("the bench URL must name a directory");
    }
    let max = s.io_sizes(&dir).await?;
    if grid.reads() && !*file_ready {
        let reuse = match s.lookup(&dir, READ_FILE).await {
            Ok(fh) => s.getattr(&fh).await?.size == args.size,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e.into()),
        };
        if !reuse {
            write_file(s, &dir, READ_FILE, args.size, max.1, usize::MAX).await?;
        }
        *file_ready = true;
    }
    let write = if grid.ops.contains(&Op::Write) {
        let minor = s.minor_version();
        let name = format!("nfsrdma-bench-write-{transport}-v4.{minor}.bin");
        let f = s.open(&dir, &name, create(0o644)).await?;
        s.truncate(&f, 0).await?;
        s.close_file(f).await?;
        Some(name)
    } else {
        None
    };
    let names = if grid.ops.contains(&Op::Meta) {
        let mut names: Vec<Bytes> = s
            .readdir(&dir)
            .await?
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.as_ref() != b"." && n.as_ref() != b"..")
            .collect();
        names.truncate(meta::MAX_NAMES);
        if names.is_empty() {
            bail!("the bench directory is empty: nothing to LOOKUP");
        }
        names
    } else {
        Vec::new()
    };
    Ok(Files4 {
        dir,
        max,
        read: grid.reads(),
        write,
        names,
    })
}

fn create(mode: u32) -> OpenOptions {
    OpenOptions {
        create_mode: Some(mode),
        ..OpenOptions::default()
    }
}

fn for_reading() -> OpenOptions {
    OpenOptions {
        share_access: OPEN4_SHARE_ACCESS_READ,
        share_deny: OPEN4_SHARE_DENY_NONE,
        create_mode: None,
    }
}

/// OPEN (creating), `size` bytes of the pattern in UNSTABLE WRITEs of
/// `block` with `in_flight` in flight, COMMIT, CLOSE: the bytes written.
async fn write_file<T: ClientTransport>(
    s: &Session<T>,
    dir: &NfsFh4,
    name: &str,
    size: u64,
    block: u32,
    in_flight: usize,
) -> anyhow::Result<u64> {
    let f = s.open(dir, name, create(0o644)).await?;
    let mut w = s
        .writer(f, 0, block, IoOptions::default().commit_window)
        .with_in_flight(in_flight);
    let src = measure::source_chunk();
    let mut left = size;
    while left > 0 {
        let n = usize::try_from(left).unwrap_or(usize::MAX).min(src.len());
        w.write(src.slice(..n)).await?;
        left -= n as u64;
    }
    Ok(w.finish().await?.0)
}

/// One run of the plan over the session: the sample, the latency
/// figures of the timed modes, and the READ/WRITE size used.
pub(super) async fn run_slot<T: ClientTransport>(
    s: &Session<T>,
    files: &Files4,
    slot: &Slot,
    args: &BenchArgs,
    clocks: &Clocks,
) -> anyhow::Result<(RandomSample, u32)> {
    let Slot {
        op,
        io_size: rs,
        in_flight: nf,
        rep,
        ..
    } = *slot;
    let eff = |max: u32| if rs > 0 { rs.min(max) } else { max };
    let seed = (u64::from(rep) << 32) ^ u64::from(rs) ^ nf as u64;
    let run_for = Duration::from_secs_f64(args.seconds);
    match op {
        Op::Meta => {
            let dir = &files.dir;
            let calls = Calls {
                lookup: |name: &Bytes| {
                    let name = String::from_utf8_lossy(name).into_owned();
                    async move { Ok(s.lookup(dir, &name).await?) }
                },
                getattr: |fh: NfsFh4| async move { s.getattr(&fh).await.map(drop).map_err(Into::into) },
            };
            let r = meta::point_with(&calls, &files.names, (nf, run_for), seed, clocks).await?;
            Ok((r, 0))
        }
        Op::RandomRead => {
            anyhow::ensure!(files.read, "no file for this operation");
            let count = eff(files.max.0);
            let f = s.open(&files.dir, READ_FILE, for_reading()).await?;
            let read = |off: u64, count: u32| {
                let f = &f;
                async move {
                    let (data, _) = s.read(f, off, count).await?;
                    Ok(u32::try_from(data.len())?)
                }
            };
            let r = random::point_with(
                &read,
                (count, nf),
                args.size,
                args.random_stop(),
                seed,
                clocks,
            )
            .await;
            s.close_file(f).await?;
            Ok((r?, count))
        }
        Op::Read => {
            anyhow::ensure!(files.read, "no file for this operation");
            let block = eff(files.max.0);
            let sample = timed(clocks, async {
                let f = s.open(&files.dir, READ_FILE, for_reading()).await?;
                let n = s.read_to(&f, 0, block, nf, |_| Ok(())).await?;
                s.close_file(f).await?;
                Ok(n)
            })
            .await?;
            if sample.bytes != args.size {
                bail!("read {} bytes of a {}-byte file", sample.bytes, args.size);
            }
            Ok((untimed(sample), block))
        }
        Op::Write => {
            let name = files
                .write
                .as_deref()
                .context("no file for this operation")?;
            let block = eff(files.max.1);
            let size = args.size;
            let sample = timed(clocks, write_file(s, &files.dir, name, size, block, nf)).await?;
            Ok((untimed(sample), block))
        }
    }
}

/// Times `work` (bytes moved) with the CPU of both sides.
async fn timed(
    clocks: &Clocks,
    work: impl std::future::Future<Output = anyhow::Result<u64>>,
) -> anyhow::Result<Sample> {
    let (c0, s0) = clocks.now()?;
    let t0 = Instant::now();
    let bytes = work.await?;
    let seconds = t0.elapsed().as_secs_f64();
    let (c1, s1) = clocks.now()?;
    Ok(Sample {
        bytes,
        seconds,
        client_cpu: c1 - c0,
        server_cpu: s0.zip(s1).map(|(a, b)| b - a),
    })
}

fn untimed(sample: Sample) -> RandomSample {
    RandomSample {
        sample,
        latency: None,
    }
}

/// Removes the written file at the end.
pub(super) async fn clean_up<T: ClientTransport>(s: &Session<T>, files: &Files4) {
    if let Some(name) = &files.write {
        let _ = s.remove(&files.dir, name).await;
    }
}

/// Ends the session (DESTROY_SESSION, DESTROY_CLIENTID).
pub(super) async fn close(session: AnySession) {
    let _ = with_session!(session, |s| s.close().await);
}
