//! Points, the per-point medians, tables, the RDMA-vs-TCP summary and the
//! CSV file.

use std::io::Write;
use std::path::Path;

use super::stats::{median, spread, Latency, Spread};

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;
/// Bytes in a MiB.
const MIB: f64 = (1u64 << 20) as f64;

/// The two transports compared.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Transport {
    /// RPC-over-RDMA on the software iWARP device.
    Rdma,
    /// ONC RPC over TCP.
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Rdma => "rdma",
            Transport::Tcp => "tcp",
        })
    }
}

/// The NFS version a run speaks: NFSv3 (RFC 1813, with MOUNT) or an
/// NFSv4 session of minor version 1 or 2 (RFC 8881, RFC 7862).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Vers {
    V3,
    V4(u32),
}

impl Vers {
    /// `3`, `4.1`, `4.2`, or `4` (the highest minor version spoken).
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "3" => Ok(Vers::V3),
            "4" => Ok(Vers::V4(crate::url::NFS4_MAX_MINOR)),
            "4.1" => Ok(Vers::V4(1)),
            "4.2" => Ok(Vers::V4(2)),
            _ => Err(format!("NFS version {s:?}: 3, 4.1, 4.2 or 4")),
        }
    }

    /// The NFSv4 minor version, or `None` for NFSv3.
    pub(crate) fn minor(self) -> Option<u32> {
        match self {
            Vers::V3 => None,
            Vers::V4(m) => Some(m),
        }
    }
}

impl std::fmt::Display for Vers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Vers::V3 => f.write_str("3"),
            Vers::V4(m) => write!(f, "4.{m}"),
        }
    }
}

/// A table row's name: the transport, with the NFS version after it
/// when it is not NFSv3 (`tcp`, `rdma-v4.1`).
pub(crate) fn side_label(t: Transport, v: Vers) -> String {
    match v {
        Vers::V3 => t.to_string(),
        Vers::V4(_) => format!("{t}-v{v}"),
    }
}

/// What a run does.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Sequential READ of the whole file.
    Read,
    /// Sequential UNSTABLE WRITE of the whole file, then COMMIT.
    Write,
    /// READs at random aligned offsets for a fixed time
    /// (`--pattern random`).
    #[value(skip)]
    RandomRead,
    /// LOOKUP of a random name then GETATTR, for a fixed time
    /// (`--pattern meta`).
    #[value(skip)]
    Meta,
}

impl Op {
    /// Runs for a fixed time and count calls (IOPS and latency).
    pub(crate) fn timed(self) -> bool {
        matches!(self, Op::RandomRead | Op::Meta)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::RandomRead => "random-read",
            Op::Meta => "lookup-getattr",
        })
    }
}

/// One measured run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub(crate) op: Op,
    pub(crate) transport: Transport,
    pub(crate) vers: Vers,
    /// The READ/WRITE size asked for.
    pub(crate) io_size: u32,
    /// The size used after the server's FSINFO limits.
    pub(crate) effective_io_size: u32,
    pub(crate) in_flight: usize,
    /// Which repetition of the point (0-based).
    pub(crate) rep: u32,
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    /// Client CPU seconds (user + system) during the transfer.
    pub(crate) client_cpu: f64,
    /// Server CPU seconds, when the server is ours.
    pub(crate) server_cpu: Option<f64>,
    /// The 1-minute load average just after the run.
    pub(crate) load1: Option<f64>,
    /// Random reads: READs done and their latency percentiles.
    pub(crate) latency: Option<Latency>,
}

fn per_gib(bytes: u64, cpu: f64) -> f64 {
    if bytes > 0 {
        cpu * GIB / bytes as f64
    } else {
        0.0
    }
}

impl Point {
    /// Throughput in MiB/s.
    pub(crate) fn mib_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / MIB / self.seconds
        } else {
            0.0
        }
    }

    /// READs per second (random reads only).
    pub(crate) fn iops(&self) -> Option<f64> {
        let l = self.latency?;
        (self.seconds > 0.0).then(|| l.ops as f64 / self.seconds)
    }

    /// Client CPU seconds per GiB moved.
    pub(crate) fn client_per_gib(&self) -> f64 {
        per_gib(self.bytes, self.client_cpu)
    }

    /// CPU cost in the table's unit: seconds per GiB, or for the
    /// metadata mode (no bytes moved) microseconds per call.
    fn cost(&self, cpu: f64) -> f64 {
        match (self.op, self.latency) {
            (Op::Meta, Some(l)) if l.ops > 0 => cpu * 1e6 / l.ops as f64,
            (Op::Meta, _) => 0.0,
            _ => per_gib(self.bytes, cpu),
        }
    }

    /// Server CPU seconds per GiB moved.
    pub(crate) fn server_per_gib(&self) -> Option<f64> {
        self.server_cpu.map(|c| per_gib(self.bytes, c))
    }
}

/// The repetitions of one point (operation, size, in-flight count,
/// transport): medians, and the range of the throughput.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Agg {
    pub(crate) op: Op,
    pub(crate) transport: Transport,
    pub(crate) vers: Vers,
    pub(crate) io_size: u32,
    pub(crate) effective_io_size: u32,
    pub(crate) in_flight: usize,
    pub(crate) runs: usize,
    pub(crate) throughput: Spread,
    pub(crate) iops: Option<Spread>,
    /// Median client CPU seconds per GiB (microseconds per call in the
    /// metadata mode).
    pub(crate) client: f64,
    /// The same for the server, when known.
    pub(crate) server: Option<f64>,
    pub(crate) load1: Option<f64>,
    pub(crate) latency: Option<Latency>,
}

impl Agg {
    /// Median throughput in MiB/s.
    pub(crate) fn mib_s(&self) -> f64 {
        self.throughput.median
    }

    /// Median client CPU seconds per GiB.
    pub(crate) fn client_per_gib(&self) -> f64 {
        self.client
    }

    /// Median server CPU seconds per GiB, when known.
    pub(crate) fn server_per_gib(&self) -> Option<f64> {
        self.server
    }

    /// Client plus server CPU per GiB, when the server's is known.
    fn total_per_gib(&self) -> Option<f64> {
        self.server.map(|s| s + self.client)
    }

    fn same_point(&self, o: &Agg) -> bool {
        self.op == o.op && self.io_size == o.io_size && self.in_flight == o.in_flight
    }
}

/// The points grouped by operation, size, in-flight count, transport and
/// NFS version, in the order each group first ran.
pub(crate) fn aggregate(points: &[Point]) -> Vec<Agg> {
    let mut keys: Vec<(Op, u32, usize, Transport, Vers)> = Vec::new();
    for p in points {
        let k = (p.op, p.io_size, p.in_flight, p.transport, p.vers);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(op, io_size, in_flight, transport, vers)| {
            let runs: Vec<&Point> = points
                .iter()
                .filter(|p| {
                    p.op == op
                        && p.io_size == io_size
                        && p.in_flight == in_flight
                        && p.transport == transport
                        && p.vers == vers
                })
                .collect();
            let col = |f: &dyn Fn(&Point) -> Option<f64>| -> Vec<f64> {
                runs.iter().filter_map(|p| f(p)).collect()
            };
            let server = col(&|p| p.server_cpu.map(|c| p.cost(c)));
            let lats: Vec<Latency> = runs.iter().filter_map(|p| p.latency).collect();
            let iops = col(&|p| p.iops());
            Some(Agg {
                op,
                transport,
                vers,
                io_size,
                effective_io_size: runs.first()?.effective_io_size,
                in_flight,
                runs: runs.len(),
                throughput: spread(&col(&|p| Some(p.mib_s())))?,
                iops: spread(&iops),
                client: median(&col(&|p| Some(p.cost(p.client_cpu))))?,
                server: (server.len() == runs.len())
                    .then(|| median(&server))
                    .flatten(),
                load1: median(&col(&|p| p.load1)),
                latency: Latency::median_of(&lats),
            })
        })
        .collect()
}

/// `4k`, `256k`, `1m`.
pub(crate) fn size_label(n: u32) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{}m", n >> 20)
    } else if n >= 1024 && n % 1024 == 0 {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.prec$}"))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_owned()
    }
}

/// The RDMA/TCP ratios of `a`'s point from the medians: throughput (the
/// same as IOPS for random reads) and CPU per GiB (client + server when
/// the server's is known, else client); empty unless `a` is the RDMA
/// side and the TCP side ran with the same NFS version.
fn point_ratio(a: &Agg, all: &[Agg]) -> String {
    if a.transport != Transport::Rdma {
        return String::new();
    }
    let Some(t) = all
        .iter()
        .find(|t| t.transport == Transport::Tcp && t.vers == a.vers && t.same_point(a))
    else {
        return String::new();
    };
    speed_cpu(a, t)
}

/// The NFSv4/NFSv3 ratios of `a`'s point (as [`point_ratio`]), empty
/// unless `a` is an NFSv4 row and NFSv3 ran on the same transport.
fn vers_ratio(a: &Agg, all: &[Agg]) -> String {
    if a.vers == Vers::V3 {
        return String::new();
    }
    let Some(t) = all
        .iter()
        .find(|t| t.transport == a.transport && t.vers == Vers::V3 && t.same_point(a))
    else {
        return String::new();
    };
    format!("v{}/v3 {}", a.vers, speed_cpu(a, t))
}

/// `a`'s throughput (or IOPS) and CPU per GiB against `t`'s.
fn speed_cpu(a: &Agg, t: &Agg) -> String {
    let cpu = match (a.total_per_gib(), t.total_per_gib()) {
        (Some(x), Some(y)) => ratio(x, y),
        _ => ratio(a.client, t.client),
    };
    let speed = match (&a.iops, &t.iops) {
        (Some(x), Some(y)) => ratio(x.median, y.median),
        _ => ratio(a.mib_s(), t.mib_s()),
    };
    format!("{speed} cpu {cpu}")
}

fn range(s: &Spread, prec: usize) -> String {
    format!("{:.prec$} [{:.prec$}-{:.prec$}]", s.median, s.min, s.max)
}

/// What the table of `op` is headed with.
fn title(op: Op, size: u64, random_secs: f64, calls: Option<u64>) -> String {
    let mib = size as f64 / MIB;
    match (op, calls) {
        (Op::RandomRead, Some(n)) => {
            format!("random read in a {mib:.0} MiB file, {n} READs per run")
        }
        (Op::RandomRead, None) => {
            format!("random read in a {mib:.0} MiB file, {random_secs:.1} s per run")
        }
        (Op::Meta, _) => format!("LOOKUP + GETATTR of random names, {random_secs:.1} s per run"),
        _ => format!("sequential {op} of {mib:.0} MiB"),
    }
}

/// The table of one operation: per transport, size and in-flight count,
/// the median throughput (IOPS and latency percentiles for random reads)
/// with its range over the repetitions, the median client and server CPU
/// seconds per GiB, the median 1-minute load average, and on the RDMA row
/// the RDMA/TCP ratios of the medians.
pub(crate) fn print_table(
    out: &mut impl Write,
    op: Op,
    (size, random_secs, calls): (u64, f64, Option<u64>),
    aggs: &[Agg],
    server_known: bool,
) -> std::io::Result<()> {
    let rows: Vec<&Agg> = aggs.iter().filter(|p| p.op == op).collect();
    let Some(first) = rows.first() else {
        return Ok(());
    };
    writeln!(
        out,
        "{}: {} run(s) per point, transports interleaved; median [min-max]{}",
        title(op, size, random_secs, calls),
        first.runs,
        if server_known {
            ""
        } else {
            " (external server: its CPU is unknown)"
        }
    )?;
    let random = op.timed();
    if random {
        write!(
            out,
            "{:<9} {:>7} {:>9} {:>28} {:>8} {:>8} {:>9}",
            "transport",
            "size",
            "in-flight",
            if op == Op::Meta { "calls/s" } else { "IOPS" },
            "p50 us",
            "p99 us",
            "p99.9 us"
        )?;
    } else {
        write!(
            out,
            "{:<9} {:>7} {:>9} {:>28}",
            "transport", "size", "in-flight", "MiB/s"
        )?;
    }
    let unit = if op == Op::Meta { "us/call" } else { "s/GiB" };
    writeln!(
        out,
        " {:>14} {:>14} {:>6}  rdma/tcp",
        format!("client {unit}"),
        format!("server {unit}"),
        "load1"
    )?;
    for p in rows {
        let mut size = size_label(p.io_size);
        if p.effective_io_size != p.io_size {
            size = format!("{}*", size_label(p.effective_io_size));
        }
        if op == Op::Meta {
            size = "-".to_owned();
        }
        write!(
            out,
            "{:<9} {:>7} {:>9}",
            side_label(p.transport, p.vers),
            size,
            p.in_flight
        )?;
        match (random, &p.iops, &p.latency) {
            (true, Some(iops), Some(l)) => write!(
                out,
                " {:>28} {:>8.0} {:>8.0} {:>9.0}",
                range(iops, 0),
                l.p50_us,
                l.p99_us,
                l.p999_us
            )?,
            (true, _, _) => write!(out, " {:>28} {:>8} {:>8} {:>9}", "-", "-", "-", "-")?,
            (false, _, _) => write!(out, " {:>28}", range(&p.throughput, 1))?,
        }
        let ratios = [point_ratio(p, aggs), vers_ratio(p, aggs)];
        let ratios: Vec<&str> = ratios
            .iter()
            .map(String::as_str)
            .filter(|r| !r.is_empty())
            .collect();
        writeln!(
            out,
            " {:>14.3} {:>14} {:>6}  {}",
            p.client,
            opt(p.server, 3),
            opt(p.load1, 2),
            ratios.join(" ; ")
        )?;
    }
    writeln!(out)
}

/// The fastest point of `op` over `t` with NFS version `v`, by median.
pub(crate) fn best(aggs: &[Agg], op: Op, t: Transport, v: Vers) -> Option<&Agg> {
    aggs.iter()
        .filter(|p| p.op == op && p.transport == t && p.vers == v)
        .max_by(|a, b| a.mib_s().total_cmp(&b.mib_s()))
}

/// Per NFS version, best RDMA vs best TCP median throughput per
/// sequential operation, with the CPU per GiB of each at those points,
/// and their ratios; then per transport, best NFSv4 vs best NFSv3.
pub(crate) fn print_summary(out: &mut impl Write, aggs: &[Agg]) -> std::io::Result<()> {
    let mut versions: Vec<Vers> = aggs.iter().map(|a| a.vers).collect();
    versions.sort_unstable();
    versions.dedup();
    for &v in &versions {
        print_transport_summary(out, aggs, v)?;
    }
    for op in [Op::Read, Op::Write] {
        for t in [Transport::Rdma, Transport::Tcp] {
            let Some(old) = best(aggs, op, t, Vers::V3) else {
                continue;
            };
            for &v in versions.iter().filter(|v| **v != Vers::V3) {
                if let Some(new) = best(aggs, op, t, v) {
                    print_best_pair(out, &format!("best {op} over {t}"), new, old)?;
                }
            }
        }
    }
    Ok(())
}

/// One "best" line: `a` against `b` (medians), throughput and CPU per GiB.
fn print_best_pair(out: &mut impl Write, what: &str, a: &Agg, b: &Agg) -> std::io::Result<()> {
    let (na, nb) = (format!("v{}", a.vers), format!("v{}", b.vers));
    writeln!(
        out,
        "{what}: {na} {:.1} MiB/s ({} x {}) vs {nb} {:.1} MiB/s ({} x {}): {} ; \
         CPU s/GiB client {na} {:.3} vs {nb} {:.3} ({}), total {na} {} vs {nb} {} ({})",
        a.mib_s(),
        size_label(a.effective_io_size),
        a.in_flight,
        b.mib_s(),
        size_label(b.effective_io_size),
        b.in_flight,
        ratio(a.mib_s(), b.mib_s()),
        a.client_per_gib(),
        b.client_per_gib(),
        ratio(a.client_per_gib(), b.client_per_gib()),
        opt(a.total_per_gib(), 3),
        opt(b.total_per_gib(), 3),
        match (a.total_per_gib(), b.total_per_gib()) {
            (Some(x), Some(y)) => ratio(x, y),
            _ => "-".to_owned(),
        },
    )
}

/// The RDMA vs TCP "best" lines of NFS version `v` (`best read:` for
/// NFSv3, `best read (v4.1):` for the others).
fn print_transport_summary(out: &mut impl Write, aggs: &[Agg], v: Vers) -> std::io::Result<()> {
    for op in [Op::Read, Op::Write] {
        let (Some(r), Some(t)) = (
            best(aggs, op, Transport::Rdma, v),
            best(aggs, op, Transport::Tcp, v),
        ) else {
            continue;
        };
        let head = match v {
            Vers::V3 => format!("best {op}"),
            Vers::V4(_) => format!("best {op} (v{v})"),
        };
        writeln!(
            out,
            "{head}: rdma {:.1} MiB/s ({} x {}) vs tcp {:.1} MiB/s ({} x {}): {} ; \
             CPU s/GiB client rdma {:.3} vs tcp {:.3} ({}), server rdma {} vs tcp {} ({}), \
             total rdma {} vs tcp {} ({})",
            r.mib_s(),
            size_label(r.effective_io_size),
            r.in_flight,
            t.mib_s(),
            size_label(t.effective_io_size),
            t.in_flight,
            ratio(r.mib_s(), t.mib_s()),
            r.client_per_gib(),
            t.client_per_gib(),
            ratio(r.client_per_gib(), t.client_per_gib()),
            opt(r.server_per_gib(), 3),
            opt(t.server_per_gib(), 3),
            match (r.server_per_gib(), t.server_per_gib()) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".to_owned(),
            },
            opt(r.total_per_gib(), 3),
            opt(t.total_per_gib(), 3),
            match (r.total_per_gib(), t.total_per_gib()) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".to_owned(),
            },
        )?;
    }
    Ok(())
}

/// The CSV header.
pub(crate) const CSV_HEADER: &str = "op,transport,io_size,effective_io_size,in_flight,bytes,\
seconds,mib_s,client_cpu_s,server_cpu_s,client_cpu_s_per_gib,server_cpu_s_per_gib,\
rep,load1,reads,iops,p50_us,p99_us,p999_us,nfs_version";

/// One CSV line (no newline); an unknown figure is an empty field.
pub(crate) fn csv_line(p: &Point) -> String {
    let o = |v: Option<f64>, prec: usize| v.map_or_else(String::new, |v| format!("{v:.prec$}"));
    let l = p.latency;
    format!(
        "{},{},{},{},{},{},{:.6},{:.3},{:.6},{},{:.6},{},{},{},{},{},{},{},{},{}",
        p.op,
        p.transport,
        p.io_size,
        p.effective_io_size,
        p.in_flight,
        p.bytes,
        p.seconds,
        p.mib_s(),
        p.client_cpu,
        o(p.server_cpu, 6),
        p.client_per_gib(),
        o(p.server_per_gib(), 6),
        p.rep,
        o(p.load1, 2),
        l.map_or_else(String::new, |l| l.ops.to_string()),
        o(p.iops(), 1),
        o(l.map(|l| l.p50_us), 0),
        o(l.map(|l| l.p99_us), 0),
        o(l.map(|l| l.p999_us), 0),
        p.vers,
    )
}

/// Writes every run to `path`, in the order they ran.
pub(crate) fn write_csv(path: &Path, points: &[Point]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{CSV_HEADER}")?;
    for p in points {
        writeln!(f, "{}", csv_line(p))?;
    }
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(t: Transport, secs: f64, client: f64, server: Option<f64>) -> Point {
        Point {
            op: Op::Read,
            transport: t,
            vers: Vers::V3,
            io_size: 256 << 10,
            effective_io_size: 256 << 10,
            in_flight: 8,
            rep: 0,
            bytes: 1 << 30,
            seconds: secs,
            client_cpu: client,
            server_cpu: server,
            load1: Some(3.5),
            latency: None,
        }
    }

    #[test]
    fn per_gib_figures_scale_by_bytes() {
        let mut p = pt(Transport::Rdma, 2.0, 1.5, Some(0.5));
        p.bytes = 1 << 29;
        assert_eq!(p.mib_s(), 256.0);
        assert_eq!(p.client_per_gib(), 3.0);
        assert_eq!(p.server_per_gib(), Some(1.0));
        assert_eq!(p.iops(), None);
    }

    #[test]
    fn csv_lines_have_every_field_and_blank_unknowns() {
        let line = csv_line(&pt(Transport::Tcp, 4.0, 2.0, None));
        assert_eq!(
            line,
            "read,tcp,262144,262144,8,1073741824,4.000000,256.000,2.000000,,2.000000,,0,3.50,,,,,,3"
        );
        assert_eq!(line.split(',').count(), CSV_HEADER.split(',').count());
        let mut r = pt(Transport::Rdma, 2.0, 1.0, Some(1.0));
        r.op = Op::RandomRead;
        r.latency = Some(Latency {
            ops: 1000,
            p50_us: 90.0,
            p99_us: 400.0,
            p999_us: 2000.0,
        });
        let line = csv_line(&r);
        assert!(line.starts_with("random-read,rdma,"), "{line}");
        assert!(line.ends_with(",1000,500.0,90,400,2000,3"), "{line}");
    }

    #[test]
    fn medians_and_ranges_per_point_and_transport() {
        let mut pts = Vec::new();
        for (rep, (r, t)) in [(2.0, 4.0), (1.0, 8.0), (4.0, 2.0)].into_iter().enumerate() {
            let mut a = pt(Transport::Rdma, r, 1.0, Some(r));
            a.rep = rep as u32;
            a.load1 = Some(rep as f64);
            let mut b = pt(Transport::Tcp, t, 2.0, Some(1.0));
            b.rep = rep as u32;
            pts.extend([a, b]);
        }
        let aggs = aggregate(&pts);
        assert_eq!(aggs.len(), 2);
        let r = &aggs[0];
        assert_eq!(r.transport, Transport::Rdma);
        assert_eq!(r.runs, 3);
        // 1 GiB in 1, 2 and 4 s.
        assert_eq!(
            r.throughput,
            Spread {
                median: 512.0,
                min: 256.0,
                max: 1024.0
            }
        );
        assert_eq!(r.server, Some(2.0));
        assert_eq!(r.load1, Some(1.0));
        assert_eq!(aggs[1].throughput.median, 256.0);
        // The RDMA row carries RDMA/TCP from the medians: 512/256, and
        // (1 + 2) / (2 + 1) CPU.
        assert_eq!(point_ratio(r, &aggs), "2.00x cpu 1.00x");
        assert_eq!(point_ratio(&aggs[1], &aggs), "");
    }

    #[test]
    fn summary_compares_the_best_medians() {
        let pts = vec![
            pt(Transport::Rdma, 2.0, 1.0, Some(1.0)),
            pt(Transport::Tcp, 4.0, 2.0, Some(2.0)),
        ];
        let mut slow = pt(Transport::Rdma, 4.0, 1.0, Some(1.0));
        slow.in_flight = 1;
        let mut pts = pts;
        pts.push(slow);
        let aggs = aggregate(&pts);
        assert_eq!(
            best(&aggs, Op::Read, Transport::Rdma, Vers::V3)
                .unwrap()
                .in_flight,
            8
        );
        let mut out = Vec::new();
        print_summary(&mut out, &aggs).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("best read: rdma 512.0 MiB/s (256k x 8) vs tcp 256.0 MiB/s"),
            "{s}"
        );
        assert!(s.contains("): 2.00x ;"), "{s}");
        assert!(s.contains("total rdma 2.000 vs tcp 4.000 (0.50x)"), "{s}");
    }

    #[test]
    fn tables_mark_capped_sizes_unknown_server_cpu_and_load() {
        let mut p = pt(Transport::Tcp, 1.0, 0.25, None);
        p.io_size = 4 << 20;
        p.effective_io_size = 1 << 20;
        let mut out = Vec::new();
        print_table(
            &mut out,
            Op::Read,
            (1 << 30, 0.0, None),
            &aggregate(&[p]),
            false,
        )
        .unwrap();
        let s = String::from_utf8(out).unwrap();
        let row = s.lines().nth(2).unwrap();
        assert!(row.starts_with("tcp") && row.contains(" 1m* "), "{s}");
        assert!(row.contains("1024.0 [1024.0-1024.0]"), "{s}");
        assert!(
            row.contains(" - ") && row.trim_end().ends_with("3.50"),
            "{s}"
        );
        assert!(s.contains("external server"), "{s}");
        assert!(s.contains("1 run(s) per point"), "{s}");
        assert_eq!(size_label(4096), "4k");
        assert_eq!(size_label(1000), "1000");
    }

    #[test]
    fn metadata_tables_give_calls_per_second_and_cpu_per_call() {
        let lat = |ops| Latency {
            ops,
            p50_us: 50.0,
            p99_us: 200.0,
            p999_us: 900.0,
        };
        let mk = |t, ops, client, server| Point {
            op: Op::Meta,
            io_size: 0,
            effective_io_size: 0,
            bytes: 0,
            latency: Some(lat(ops)),
            ..pt(t, 1.0, client, Some(server))
        };
        // rdma: 20,000 calls in 1 s, 0.2 s client (10 us/call), 0.4 s
        // server (20 us/call); tcp: 10,000 calls, 10 and 30 us/call.
        let aggs = aggregate(&[
            mk(Transport::Rdma, 20_000, 0.2, 0.4),
            mk(Transport::Tcp, 10_000, 0.1, 0.3),
        ]);
        assert_eq!(aggs[0].client, 10.0);
        assert_eq!(aggs[0].server, Some(20.0));
        assert_eq!(point_ratio(&aggs[0], &aggs), "2.00x cpu 0.75x");
        let mut out = Vec::new();
        print_table(&mut out, Op::Meta, (0, 1.0, None), &aggs, true).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("LOOKUP + GETATTR of random names, 1.0 s per run"),
            "{s}"
        );
        assert!(s.contains("calls/s") && s.contains("client us/call"), "{s}");
        let row = s.lines().nth(2).unwrap();
        assert!(
            row.contains("20000 [20000-20000]") && row.contains(" - "),
            "{s}"
        );
    }

    #[test]
    fn random_tables_give_iops_and_percentiles() {
        let mut p = pt(Transport::Rdma, 2.0, 1.0, Some(1.0));
        p.op = Op::RandomRead;
        p.io_size = 4096;
        p.effective_io_size = 4096;
        p.bytes = 4096 * 20_000;
        p.latency = Some(Latency {
            ops: 20_000,
            p50_us: 95.0,
            p99_us: 410.0,
            p999_us: 2300.0,
        });
        let mut out = Vec::new();
        print_table(
            &mut out,
            Op::RandomRead,
            (1 << 30, 2.0, None),
            &aggregate(&[p.clone()]),
            true,
        )
        .unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("random read in a 1024 MiB file, 2.0 s per run"),
            "{s}"
        );
        // With --calls the run is a number of READs, not a time.
        let mut calls = Vec::new();
        let run = (1 << 30, 2.0, Some(20_000));
        print_table(&mut calls, Op::RandomRead, run, &aggregate(&[p]), true).unwrap();
        let c = String::from_utf8(calls).unwrap();
        assert!(
            c.starts_with("random read in a 1024 MiB file, 20000 READs per run"),
            "{c}"
        );
        let row = s.lines().nth(2).unwrap();
        assert!(row.contains("10000 [10000-10000]"), "{s}");
        assert!(
            row.contains(" 95 ") && row.contains(" 410 ") && row.contains(" 2300 "),
            "{s}"
        );
    }
}
