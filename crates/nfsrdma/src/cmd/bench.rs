//! `nfsrdma bench`: the 2003 NFS/RDMA paper's experiment (Callaghan et
//! al., §7.3 and Figures 15 to 18) on this machine. A file is read
//! sequentially, and written, for each transport (RPC-over-RDMA on the
//! software iWARP device, and TCP), read size and number of reads in
//! flight (the paper's reads-ahead), with the throughput and the CPU time
//! of client and server per GiB moved. `--pattern random` reads at random
//! aligned offsets instead, for a fixed time, and reports IOPS and latency
//! percentiles.
//!
//! So that a noisy machine cannot fool it, every point runs `--repeat`
//! times with the transports interleaved run by run (see [`schedule`]),
//! and the tables give the median with the range, the load average, and
//! the RDMA/TCP ratio of the medians.
//!
//! The server is `nfsrdma serve` started as a child process on loopback
//! with ephemeral ports, so that its CPU time (read from its process CPU
//! clock) is kept apart from the client's (this process). With `--url` an
//! external server is used instead and its CPU time is unknown.

mod measure;
mod meta;
mod plot;
mod random;
mod report;
mod schedule;
mod stats;
mod v4;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use nfs_client::nfs::v3::{Ftype3, NfsFh3};
use nfs_client::{IoOptions, Mounted};
use oncrpc::ClientTransport;

use crate::url::{open, parse_size, with_remote, NfsUrl, Remote, Scheme};
use measure::{Clocks, ServerChild};
use report::{Op, Point, Transport, Vers};
use schedule::Slot;

/// Name of the file read by the read runs.
const READ_FILE: &str = "nfsrdma-bench-read.bin";
/// Bytes per WRITE buffer handed to the writer (shared, never copied).
const SOURCE_CHUNK: usize = 4 << 20;

/// Access pattern.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Sequential read and write of the whole file (`--ops`).
    Seq,
    /// READs at random aligned offsets for `--seconds` per run: IOPS and
    /// latency percentiles.
    Random,
    /// LOOKUP of a random name of the directory, then GETATTR of it, for
    /// `--seconds` per run: calls per second, latency percentiles and
    /// CPU microseconds per call. The embedded server's directory gets
    /// 1,000 empty files; with `--url` the directory's own entries are
    /// used (the first 100,000).
    Meta,
}

/// Empty files the embedded server's directory gets for `--pattern meta`.
const META_FILES: usize = 1000;

/// Arguments of `nfsrdma bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// File size read and written per point (suffixes k, m, g); with
    /// `--pattern random` the size of the file read.
    #[arg(long, default_value = "1g", value_parser = parse_size64)]
    size: u64,
    /// Access pattern: sequential, or random reads.
    #[arg(long, value_enum, default_value = "seq")]
    pattern: Pattern,
    /// READ/WRITE sizes to try (4k to 1m) [default: 4k,16k,64k,256k,1m;
    /// with --pattern random 4k,64k].
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    read_sizes: Option<Vec<u32>>,
    /// READs/WRITEs kept in flight (1 is no read-ahead) [default:
    /// 1,2,4,8,16; with --pattern random 32].
    #[arg(long, value_delimiter = ',')]
    in_flight: Option<Vec<usize>>,
    /// Runs of every point; the tables give the median and the range.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    repeat: u32,
    /// Seconds each random-read run lasts.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// With `--pattern random`: end each run after this many READs in all
    /// instead of after `--seconds` (a fixed amount of work, to compare
    /// instruction counts under `valgrind --tool=callgrind`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    calls: Option<u64>,
    /// Transports to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rdma,tcp")]
    transports: Vec<Transport>,
    /// NFS versions to compare, interleaved like the transports: 3
    /// (MOUNT and NFSv3), 4.1, 4.2, or 4 (4.2), over an NFSv4 session
    /// [default: the `version=` of the --url given, else 3].
    #[arg(long, value_delimiter = ',', value_parser = Vers::parse)]
    versions: Option<Vec<Vers>>,
    /// Operations of the sequential pattern: read and write.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read,write")]
    ops: Vec<Op>,
    /// Write every run to this CSV file, in the order they ran.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write PNG plots (median throughput and CPU per GiB by read size)
    /// here.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// An external server's directory instead of the embedded server:
    /// nfs://host[:port]/export/dir or nfs+rdma://host[:port]/export/dir.
    /// Give it twice (one per scheme) for both transports; with one URL
    /// the other transport uses the same host and path on its default
    /// port (2049 or 20049). `?version=4.1` (or 4.2) runs NFSv4 unless
    /// --versions says otherwise. Server CPU is then unknown ('-').
    #[arg(long)]
    url: Vec<String>,
    /// RDMA device of the embedded server and of the client: `soft` (the
    /// software iWARP device), `auto` or an rdma-core device name (see
    /// `nfsrdma devices`); with a device, give --addr of its interface.
    /// With --url, put `?device=` in the URL instead.
    #[arg(long, default_value = "soft")]
    rdma_device: crate::device::DeviceChoice,
    /// Address the embedded server listens on and the client connects to.
    #[arg(long, default_value = "127.0.0.1")]
    addr: std::net::IpAddr,
}

impl BenchArgs {
    /// When a random-read run ends: after `--calls` READs, else after
    /// `--seconds`.
    fn random_stop(&self) -> random::Stop {
        match self.calls {
            Some(n) => random::Stop::Calls(n),
            None => random::Stop::After(Duration::from_secs_f64(self.seconds)),
        }
    }
}

/// Parses `1g`, `64m`, `8M`, `4096`.
fn parse_size64(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = match lower.strip_suffix('g') {
        Some(n) => (n, 1u64 << 30),
        None => match lower.strip_suffix('m') {
            Some(n) => (n, 1 << 20),
            None => match lower.strip_suffix('k') {
                Some(n) => (n, 1 << 10),
                None => (lower.as_str(), 1),
            },
        },
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad size {s:?}"))
}

/// The NFS versions to run: `--versions`, else those the URLs name,
/// else NFSv3.
fn versions_of(args: &BenchArgs, given: &[NfsUrl]) -> Vec<Vers> {
    if let Some(v) = &args.versions {
        let mut v = v.clone();
        v.dedup();
        return v;
    }
    let mut v: Vec<Vers> = Vec::new();
    for u in given {
        let x = u.nfs4_minor.map_or(Vers::V3, Vers::V4);
        if !v.contains(&x) {
            v.push(x);
        }
    }
    if v.is_empty() {
        v.push(Vers::V3);
    }
    v
}

/// The URL for each side (version, then transport), from `--url` or the
/// embedded server.
fn urls_for(
    args: &BenchArgs,
    server: Option<&ServerChild>,
) -> anyhow::Result<Vec<(Transport, Vers, NfsUrl)>> {
    let given = args
        .url
        .iter()
        .map(|u| NfsUrl::parse(u))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = Vec::new();
    for vers in versions_of(args, &given) {
        for &t in &args.transports {
            let scheme = match t {
                Transport::Rdma => Scheme::Rdma,
                Transport::Tcp => Scheme::Tcp,
            };
            let url = if let Some(s) = server {
                s.url(scheme)
            } else if let Some(u) = given.iter().find(|u| u.scheme == scheme) {
                u.clone()
            } else if let Some(u) = given.first() {
                NfsUrl {
                    scheme,
                    nfs_port: None,
                    crc: false,
                    rdma_v2: false,
                    ..u.clone()
                }
            } else {
                bail!("no URL");
            };
            let url = NfsUrl {
                nfs4_minor: vers.minor(),
                ..url
            };
            out.push((t, vers, url));
        }
    }
    Ok(out)
}

/// What to run: operations, sizes and in-flight counts after the
/// pattern's defaults.
struct Grid {
    ops: Vec<Op>,
    sizes: Vec<u32>,
    in_flight: Vec<usize>,
}

impl Grid {
    fn of(args: &BenchArgs) -> anyhow::Result<Self> {
        let (ops, sizes, nf) = match args.pattern {
            Pattern::Seq => (
                args.ops.clone(),
                vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
                vec![1, 2, 4, 8, 16],
            ),
            Pattern::Random => (vec![Op::RandomRead], vec![4 << 10, 64 << 10], vec![32]),
            Pattern::Meta => (vec![Op::Meta], vec![0], vec![32]),
        };
        let g = Self {
            ops,
            sizes: match args.pattern {
                Pattern::Meta => sizes,
                _ => args.read_sizes.clone().unwrap_or(sizes),
            },
            in_flight: args.in_flight.clone().unwrap_or(nf),
        };
        anyhow::ensure!(
            !g.sizes.is_empty() && !g.in_flight.is_empty(),
            "no read size or no in-flight count"
        );
        anyhow::ensure!(
            !args.transports.is_empty() && !g.ops.is_empty(),
            "nothing to run"
        );
        anyhow::ensure!(
            g.in_flight.iter().all(|&n| (1..=256).contains(&n)),
            "--in-flight values must be 1 to 256"
        );
        anyhow::ensure!(
            args.seconds > 0.0 && args.seconds <= 3600.0,
            "--seconds must be above 0 and at most 3600"
        );
        Ok(g)
    }

    fn reads(&self) -> bool {
        self.ops
            .iter()
            .any(|&o| matches!(o, Op::Read | Op::RandomRead))
    }
}

/// One transport and NFS version: its connection and the files its runs
/// use.
struct Side {
    transport: Transport,
    vers: Vers,
    conn: Conn,
}

/// An NFSv3 mount or an NFSv4 session (one or two per transport, for
/// the whole run: their sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Conn {
    V3(Remote, Files),
    V4(v4::Side4),
}

/// Handles of the bench directory, the file read and the file written.
struct Files {
    dir: NfsFh3,
    read: Option<NfsFh3>,
    write: Option<(NfsFh3, String)>,
    /// Names to LOOKUP in the metadata mode.
    names: Vec<bytes::Bytes>,
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let grid = Grid::of(&args)?;
    let server = if args.url.is_empty() {
        Some(ServerChild::start(args.addr, &args.rdma_device).await?)
    } else {
        None
    };
    if let Some(s) = &server {
        // Embedded: the file is written locally (this also warms the
        // server's page cache, as the paper's blind run did).
        if grid.reads() {
            measure::write_local_file(&s.export().join(READ_FILE), args.size)?;
        }
        if grid.ops.contains(&Op::Meta) {
            for i in 0..META_FILES {
                let p = s.export().join(format!("f-{i:07}"));
                std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
            }
        }
    }
    let urls = urls_for(&args, server.as_ref())?;
    let mut file_ready = server.is_some();
    let mut sides = Vec::new();
    for (transport, vers, url) in &urls {
        let conn = if *vers == Vers::V3 {
            let mut remote = open(url, IoOptions::default())
                .await
                .with_context(|| format!("{transport} mount"))?;
            let files = with_remote!(&mut remote, |m| {
                prepare(m, &args, &grid, *transport, &mut file_ready).await?
            });
            Conn::V3(remote, files)
        } else {
            let side = v4::open(url, (&args, &grid), *transport, &mut file_ready)
                .await
                .with_context(|| format!("NFSv{vers} session over {transport}"))?;
            Conn::V4(side)
        };
        sides.push(Side {
            transport: *transport,
            vers: *vers,
            conn,
        });
    }
    let plan = schedule::plan(
        &grid.ops,
        &grid.sizes,
        &grid.in_flight,
        sides.len(),
        args.repeat,
    );
    let pb = progress(plan.len());
    let clocks = Clocks::new(server.as_ref().map(ServerChild::pid))?;
    let mut points = Vec::new();
    for slot in &plan {
        let side = sides.get_mut(slot.side).context("schedule")?;
        if let Some(pb) = &pb {
            pb.set_message(format!(
                "{} {} {} x{} run {}",
                slot.op,
                report::side_label(side.transport, side.vers),
                report::size_label(slot.io_size),
                slot.in_flight,
                slot.rep + 1
            ));
        }
        let (transport, vers) = (side.transport, side.vers);
        let p = match &mut side.conn {
            Conn::V3(remote, files) => with_remote!(remote, |m| {
                run_slot(m, files, slot, transport, (&args, &clocks)).await?
            }),
            Conn::V4(v) => {
                let files = &v.files;
                let what = || format!("{} over {transport} NFSv{vers}", slot.op);
                let (r, eff) = v4::with_session!(&v.session, |s| {
                    v4::run_slot(s, files, slot, &args, &clocks)
                        .await
                        .with_context(what)?
                });
                let mut p = point_of(slot, transport, eff, r.sample, r.latency);
                if slot.op == Op::Meta {
                    p.effective_io_size = 0;
                }
                p
            }
        };
        points.push(Point { vers, ..p });
        if let Some(pb) = &pb {
            pb.inc(1);
        }
    }
    for side in sides {
        match side.conn {
            Conn::V3(mut remote, files) => {
                if let Some((_, name)) = &files.write {
                    let dir = &files.dir;
                    let _ = with_remote!(&mut remote, |m| m.mount.client().remove(dir, name).await);
                }
            }
            Conn::V4(v) => {
                let files = &v.files;
                v4::with_session!(&v.session, |s| v4::clean_up(s, files).await);
                v4::close(v.session).await;
            }
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    drop(server);
    report_all(&args, &grid, &points)
}

/// A progress bar on a terminal.
fn progress(total: usize) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {msg}") {
        pb.set_style(style);
    }
    Some(pb)
}

/// Tables, summary, CSV and plots.
fn report_all(args: &BenchArgs, grid: &Grid, points: &[Point]) -> anyhow::Result<()> {
    let aggs = report::aggregate(points);
    let known_server = args.url.is_empty();
    for op in &grid.ops {
        report::print_table(
            &mut std::io::stdout().lock(),
            *op,
            (args.size, args.seconds, args.calls),
            &aggs,
            known_server,
        )?;
    }
    report::print_summary(&mut std::io::stdout().lock(), &aggs)?;
    if let Some(path) = &args.csv {
        report::write_csv(path, points).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for op in grid.ops.iter().filter(|o| !o.timed()) {
            for p in plot::draw(dir, *op, &aggs, &grid.in_flight)? {
                eprintln!("wrote {}", p.display());
            }
        }
    }
    Ok(())
}

/// Finds the bench directory and the files of one transport: the file
/// read (written first, untimed, on an external server that lacks one of
/// the right size) and the file written (one per transport).
async fn prepare<T: ClientTransport>(
    m: &mut Mounted<T>,
    args: &BenchArgs,
    grid: &Grid,
    transport: Transport,
    file_ready: &mut bool,
) -> anyhow::Result<Files> {
    let dir = m
        .mount
        .resolve(&m.rest)
        .await
        .with_context(|| format!("{}: the bench directory", m.rest))?;
    if dir.attrs.ftype != Ftype3::NF3DIR {
        bail!("the bench URL must name a directory");
    }
    let dir = dir.fh;
    let read = if grid.reads() {
        if !*file_ready {
            // External server: reuse a file of the right size left by an
            // earlier run, else write it, untimed.
            let found = m.mount.client().lookup(&dir, READ_FILE).await;
            let reuse = matches!(&found, Ok(r) if r
                .obj_attributes
                .as_ref()
                .is_some_and(|a| a.size == args.size));
            if !reuse {
                let fh = m.mount.create_file(&dir, READ_FILE, 0o644).await?;
                measure::write_remote(&m.mount, &fh, args.size).await?;
            }
            *file_ready = true;
        }
        Some(m.mount.client().lookup(&dir, READ_FILE).await?.object)
    } else {
        None
    };
    let write = if grid.ops.contains(&Op::Write) {
        let name = format!("nfsrdma-bench-write-{transport}.bin");
        Some((m.mount.create_file(&dir, &name, 0o644).await?, name))
    } else {
        None
    };
    let names = if grid.ops.contains(&Op::Meta) {
        meta::names(&m.mount, &dir).await?
    } else {
        Vec::new()
    };
    Ok(Files {
        dir,
        read,
        write,
        names,
    })
}

/// One run of the plan on one transport.
async fn run_slot<T: ClientTransport>(
    m: &mut Mounted<T>,
    files: &Files,
    slot: &Slot,
    transport: Transport,
    (args, clocks): (&BenchArgs, &Clocks),
) -> anyhow::Result<Point> {
    let Slot {
        op,
        io_size: rs,
        in_flight: nf,
        rep,
        ..
    } = *slot;
    m.mount.set_options(IoOptions {
        in_flight: nf,
        block_size: (rs > 0).then_some(rs),
        ..IoOptions::default()
    });
    let effective = match op {
        Op::Read | Op::RandomRead => m.mount.read_size(),
        Op::Write => m.mount.write_size(),
        Op::Meta => 0,
    };
    let what = || format!("{op} over {transport} at {rs} x {nf}");
    let seed = (u64::from(rep) << 32) ^ u64::from(rs) ^ nf as u64;
    let run_for = Duration::from_secs_f64(args.seconds);
    let stop = args.random_stop();
    if op == Op::Meta {
        let r = meta::point(
            m.mount.client(),
            &files.dir,
            &files.names,
            (nf, run_for),
            seed,
            clocks,
        )
        .await
        .with_context(what)?;
        return Ok(point_of(slot, transport, effective, r.sample, r.latency));
    }
    let fh = match op {
        Op::Read | Op::RandomRead => files.read.as_ref(),
        Op::Write => files.write.as_ref().map(|(fh, _)| fh),
        Op::Meta => None,
    }
    .context("no file for this operation")?;
    let (sample, latency) = if op == Op::RandomRead {
        let r = random::point(
            m.mount.client(),
            fh,
            (effective, nf),
            args.size,
            stop,
            seed,
            clocks,
        )
        .await
        .with_context(what)?;
        (r.sample, r.latency)
    } else {
        let s = measure::point(&m.mount, fh, op, args.size, clocks)
            .await
            .with_context(what)?;
        (s, None)
    };
    Ok(point_of(slot, transport, effective, sample, latency))
}

/// The point of one run, with the load average now.
fn point_of(
    slot: &Slot,
    transport: Transport,
    effective: u32,
    sample: measure::Sample,
    latency: Option<stats::Latency>,
) -> Point {
    Point {
        op: slot.op,
        transport,
        vers: Vers::V3,
        io_size: slot.io_size,
        effective_io_size: effective,
        in_flight: slot.in_flight,
        rep: slot.rep,
        bytes: sample.bytes,
        seconds: sample.seconds,
        client_cpu: sample.client_cpu,
        server_cpu: sample.server_cpu,
        load1: measure::load1(),
        latency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_g_m_k_suffixes() {
        assert_eq!(parse_size64("1g"), Ok(1 << 30));
        assert_eq!(parse_size64("64M"), Ok(64 << 20));
        assert_eq!(parse_size64("8k"), Ok(8192));
        assert_eq!(parse_size64("123"), Ok(123));
        assert!(parse_size64("0").is_err());
        assert!(parse_size64("g").is_err());
        assert!(parse_size64("99999999999g").is_err());
    }
}
