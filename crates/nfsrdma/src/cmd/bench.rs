//! `nfsrdma bench`: the 2003 NFS/RDMA paper's experiment (Callaghan et
//! al., §7.3 and Figures 15 to 18) on this machine. A file is read
//! sequentially, and written, for each transport (RPC-over-RDMA on the
//! software iWARP device, and TCP), read size and number of reads in
//! flight (the paper's reads-ahead), with the throughput and the CPU time
//! of client and server per GiB moved.
//!
//! The server is `nfsrdma serve` started as a child process on loopback
//! with ephemeral ports, so that its CPU time (read from its process CPU
//! clock) is kept apart from the client's (this process). With `--url` an
//! external server is used instead and its CPU time is unknown.

mod measure;
mod plot;
mod report;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use nfs_client::nfs::v3::Ftype3;
use nfs_client::{IoOptions, Mounted};
use oncrpc::ClientTransport;

use crate::url::{open, parse_size, with_remote, NfsUrl, Scheme};
use measure::{Clocks, ServerChild};
use report::{Op, Point, Transport};

/// Name of the file read by the read runs.
const READ_FILE: &str = "nfsrdma-bench-read.bin";
/// Name of the file written by the write runs.
const WRITE_FILE: &str = "nfsrdma-bench-write.bin";
/// Bytes per WRITE buffer handed to the writer (shared, never copied).
const SOURCE_CHUNK: usize = 4 << 20;

/// Arguments of `nfsrdma bench`.
#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// File size read and written per point (suffixes k, m, g).
    #[arg(long, default_value = "1g", value_parser = parse_size64)]
    size: u64,
    /// READ/WRITE sizes to try (4k to 1m).
    #[arg(long, value_delimiter = ',', default_value = "4k,16k,64k,256k,1m", value_parser = parse_size)]
    read_sizes: Vec<u32>,
    /// READs/WRITEs kept in flight (1 is no read-ahead).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    in_flight: Vec<usize>,
    /// Transports to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rdma,tcp")]
    transports: Vec<Transport>,
    /// Operations: sequential read and sequential write.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "read,write")]
    ops: Vec<Op>,
    /// Write every point to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write PNG plots (throughput and CPU per GiB by read size) here.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// An external server's directory instead of the embedded server:
    /// nfs://host[:port]/export/dir or nfs+rdma://host[:port]/export/dir.
    /// Give it twice (one per scheme) for both transports; with one URL
    /// the other transport uses the same host and path on its default
    /// port (2049 or 20049). Server CPU is then unknown ('-').
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

/// The URL for each transport, from `--url` or the embedded server.
fn urls_for(
    args: &BenchArgs,
    server: Option<&ServerChild>,
) -> anyhow::Result<Vec<(Transport, NfsUrl)>> {
    let given = args
        .url
        .iter()
        .map(|u| NfsUrl::parse(u))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = Vec::new();
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
        out.push((t, url));
    }
    Ok(out)
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.read_sizes.is_empty() && !args.in_flight.is_empty(),
        "no read size or no in-flight count"
    );
    anyhow::ensure!(
        !args.transports.is_empty() && !args.ops.is_empty(),
        "nothing to run"
    );
    anyhow::ensure!(
        args.in_flight.iter().all(|&n| (1..=256).contains(&n)),
        "--in-flight values must be 1 to 256"
    );
    let server = if args.url.is_empty() {
        Some(ServerChild::start(args.addr, &args.rdma_device).await?)
    } else {
        None
    };
    if let Some(s) = &server {
        // Embedded: the file is written locally (this also warms the
        // server's page cache, as the paper's blind run did).
        if args.ops.contains(&Op::Read) {
            measure::write_local_file(&s.export().join(READ_FILE), args.size)?;
        }
    }
    let urls = urls_for(&args, server.as_ref())?;
    let points_total = urls.len() * args.ops.len() * args.read_sizes.len() * args.in_flight.len();
    let pb = if std::io::stderr().is_terminal() {
        let pb = ProgressBar::new(points_total as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} points  {msg}") {
            pb.set_style(style);
        }
        Some(pb)
    } else {
        None
    };
    let clocks = Clocks::new(server.as_ref().map(ServerChild::pid))?;
    let mut points = Vec::new();
    let mut file_ready = server.is_some();
    for (transport, url) in &urls {
        let io = IoOptions::default();
        let remote = open(url, io)
            .await
            .with_context(|| format!("{transport} mount"))?;
        let ctx = RunCtx {
            args: &args,
            transport: *transport,
            clocks: &clocks,
            pb: pb.as_ref(),
        };
        let got = with_remote!(remote, |m| ctx.run_all(m, &mut file_ready).await?);
        points.extend(got);
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    drop(server);
    let known_server = args.url.is_empty();
    for op in &args.ops {
        report::print_table(
            &mut std::io::stdout().lock(),
            *op,
            args.size,
            &points,
            known_server,
        )?;
    }
    report::print_summary(&mut std::io::stdout().lock(), &points)?;
    if let Some(path) = &args.csv {
        report::write_csv(path, &points).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.plot_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for op in &args.ops {
            for p in plot::draw(dir, *op, &points, &args.in_flight)? {
                eprintln!("wrote {}", p.display());
            }
        }
    }
    Ok(())
}

/// What every point of one transport shares.
struct RunCtx<'a> {
    args: &'a BenchArgs,
    transport: Transport,
    clocks: &'a Clocks,
    pb: Option<&'a ProgressBar>,
}

impl RunCtx<'_> {
    /// Every point of this transport: reads first, then writes.
    async fn run_all<T: ClientTransport>(
        &self,
        mut m: Mounted<T>,
        file_ready: &mut bool,
    ) -> anyhow::Result<Vec<Point>> {
        let dir = m
            .mount
            .resolve(&m.rest)
            .await
            .with_context(|| format!("{}: the bench directory", m.rest))?;
        if dir.attrs.ftype != Ftype3::NF3DIR {
            bail!("the bench URL must name a directory");
        }
        let mut out = Vec::new();
        for &op in &self.args.ops {
            let fh = match op {
                Op::Read => {
                    if !*file_ready {
                        // External server: reuse a file of the right size
                        // left by an earlier run, else write it, untimed.
                        let found = m.mount.client().lookup(&dir.fh, READ_FILE).await;
                        let reuse = matches!(&found, Ok(r) if r
                            .obj_attributes
                            .as_ref()
                            .is_some_and(|a| a.size == self.args.size));
                        if !reuse {
                            let fh = m.mount.create_file(&dir.fh, READ_FILE, 0o644).await?;
                            measure::write_remote(&m.mount, &fh, self.args.size).await?;
                        }
                        *file_ready = true;
                    }
                    m.mount.client().lookup(&dir.fh, READ_FILE).await?.object
                }
                Op::Write => m.mount.create_file(&dir.fh, WRITE_FILE, 0o644).await?,
            };
            for &rs in &self.args.read_sizes {
                for &nf in &self.args.in_flight {
                    if let Some(pb) = self.pb {
                        pb.set_message(format!(
                            "{op} {} {} x{nf}",
                            self.transport,
                            report::size_label(rs)
                        ));
                    }
                    m.mount.set_options(IoOptions {
                        in_flight: nf,
                        block_size: Some(rs),
                        ..IoOptions::default()
                    });
                    let p = measure::point(&m.mount, &fh, op, self.args.size, self.clocks)
                        .await
                        .with_context(|| format!("{op} over {} at {rs} x {nf}", self.transport))?;
                    out.push(Point {
                        op,
                        transport: self.transport,
                        io_size: rs,
                        effective_io_size: match op {
                            Op::Read => m.mount.read_size(),
                            Op::Write => m.mount.write_size(),
                        },
                        in_flight: nf,
                        bytes: p.bytes,
                        seconds: p.seconds,
                        client_cpu: p.client_cpu,
                        server_cpu: p.server_cpu,
                    });
                    if let Some(pb) = self.pb {
                        pb.inc(1);
                    }
                }
            }
            if op == Op::Write {
                let _ = m.mount.client().remove(&dir.fh, WRITE_FILE).await;
            }
        }
        Ok(out)
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
