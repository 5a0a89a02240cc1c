//! Points, tables, the RDMA-vs-TCP summary and the CSV file.

use std::io::Write;
use std::path::Path;

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

/// Sequential read or sequential write.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Sequential READ of the whole file.
    Read,
    /// Sequential UNSTABLE WRITE of the whole file, then COMMIT.
    Write,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
        })
    }
}

/// One measured point.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub(crate) op: Op,
    pub(crate) transport: Transport,
    /// The READ/WRITE size asked for.
    pub(crate) io_size: u32,
    /// The size used after the server's FSINFO limits.
    pub(crate) effective_io_size: u32,
    pub(crate) in_flight: usize,
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
    /// Client CPU seconds (user + system) during the transfer.
    pub(crate) client_cpu: f64,
    /// Server CPU seconds, when the server is ours.
    pub(crate) server_cpu: Option<f64>,
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

    fn per_gib(&self, cpu: f64) -> f64 {
        if self.bytes > 0 {
            cpu * GIB / self.bytes as f64
        } else {
            0.0
        }
    }

    /// Client CPU seconds per GiB moved.
    pub(crate) fn client_per_gib(&self) -> f64 {
        self.per_gib(self.client_cpu)
    }

    /// Server CPU seconds per GiB moved.
    pub(crate) fn server_per_gib(&self) -> Option<f64> {
        self.server_cpu.map(|c| self.per_gib(c))
    }
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

/// The table of one operation: MiB/s and client/server CPU seconds per
/// GiB for each transport, size and in-flight count.
pub(crate) fn print_table(
    out: &mut impl Write,
    op: Op,
    size: u64,
    points: &[Point],
    server_known: bool,
) -> std::io::Result<()> {
    let rows: Vec<&Point> = points.iter().filter(|p| p.op == op).collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "sequential {op} of {:.0} MiB{}",
        size as f64 / MIB,
        if server_known {
            ""
        } else {
            " (external server: its CPU is unknown)"
        }
    )?;
    writeln!(
        out,
        "{:<9} {:>7} {:>9} {:>9} {:>14} {:>14}",
        "transport", "size", "in-flight", "MiB/s", "client s/GiB", "server s/GiB"
    )?;
    for p in rows {
        let mut size = size_label(p.io_size);
        if p.effective_io_size != p.io_size {
            size = format!("{}*", size_label(p.effective_io_size));
        }
        writeln!(
            out,
            "{:<9} {:>7} {:>9} {:>9.1} {:>14.3} {:>14}",
            p.transport.to_string(),
            size,
            p.in_flight,
            p.mib_s(),
            p.client_per_gib(),
            opt(p.server_per_gib(), 3)
        )?;
    }
    writeln!(out)
}

/// The fastest point of `op` over `t`.
pub(crate) fn best(points: &[Point], op: Op, t: Transport) -> Option<&Point> {
    points
        .iter()
        .filter(|p| p.op == op && p.transport == t)
        .max_by(|a, b| a.mib_s().total_cmp(&b.mib_s()))
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".to_owned()
    }
}

/// Best RDMA vs best TCP throughput per operation, with the CPU per GiB
/// of each at those points, and their ratios.
pub(crate) fn print_summary(out: &mut impl Write, points: &[Point]) -> std::io::Result<()> {
    for op in [Op::Read, Op::Write] {
        let (Some(r), Some(t)) = (
            best(points, op, Transport::Rdma),
            best(points, op, Transport::Tcp),
        ) else {
            continue;
        };
        let total = |p: &Point| p.server_per_gib().map(|s| s + p.client_per_gib());
        writeln!(
            out,
            "best {op}: rdma {:.1} MiB/s ({} x {}) vs tcp {:.1} MiB/s ({} x {}): {} ; \
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
            opt(total(r), 3),
            opt(total(t), 3),
            match (total(r), total(t)) {
                (Some(a), Some(b)) => ratio(a, b),
                _ => "-".to_owned(),
            },
        )?;
    }
    Ok(())
}

/// The CSV header.
pub(crate) const CSV_HEADER: &str = "op,transport,io_size,effective_io_size,in_flight,bytes,\
seconds,mib_s,client_cpu_s,server_cpu_s,client_cpu_s_per_gib,server_cpu_s_per_gib";

/// One CSV line (no newline); an unknown server CPU is an empty field.
pub(crate) fn csv_line(p: &Point) -> String {
    let o = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.6}"));
    format!(
        "{},{},{},{},{},{},{:.6},{:.3},{:.6},{},{:.6},{}",
        p.op,
        p.transport,
        p.io_size,
        p.effective_io_size,
        p.in_flight,
        p.bytes,
        p.seconds,
        p.mib_s(),
        p.client_cpu,
        o(p.server_cpu),
        p.client_per_gib(),
        o(p.server_per_gib()),
    )
}

/// Writes every point to `path`.
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
            io_size: 256 << 10,
            effective_io_size: 256 << 10,
            in_flight: 8,
            bytes: 1 << 30,
            seconds: secs,
            client_cpu: client,
            server_cpu: server,
        }
    }

    #[test]
    fn per_gib_figures_scale_by_bytes() {
        let mut p = pt(Transport::Rdma, 2.0, 1.5, Some(0.5));
        p.bytes = 1 << 29;
        assert_eq!(p.mib_s(), 256.0);
        assert_eq!(p.client_per_gib(), 3.0);
        assert_eq!(p.server_per_gib(), Some(1.0));
    }

    #[test]
    fn csv_lines_have_every_field_and_blank_unknowns() {
        let line = csv_line(&pt(Transport::Tcp, 4.0, 2.0, None));
        assert_eq!(
            line,
            "read,tcp,262144,262144,8,1073741824,4.000000,256.000,2.000000,,2.000000,"
        );
        assert_eq!(line.split(',').count(), CSV_HEADER.split(',').count());
    }

    #[test]
    fn summary_compares_the_best_points() {
        let pts = vec![
            pt(Transport::Rdma, 2.0, 1.0, Some(1.0)),
            pt(Transport::Rdma, 4.0, 1.0, Some(1.0)),
            pt(Transport::Tcp, 4.0, 2.0, Some(2.0)),
        ];
        assert_eq!(best(&pts, Op::Read, Transport::Rdma).unwrap().seconds, 2.0);
        let mut out = Vec::new();
        print_summary(&mut out, &pts).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("best read: rdma 512.0 MiB/s (256k x 8) vs tcp 256.0 MiB/s"),
            "{s}"
        );
        assert!(s.contains("): 2.00x ;"), "{s}");
        assert!(s.contains("total rdma 2.000 vs tcp 4.000 (0.50x)"), "{s}");
    }

    #[test]
    fn tables_mark_capped_sizes_and_unknown_server_cpu() {
        let mut p = pt(Transport::Tcp, 1.0, 0.25, None);
        p.io_size = 4 << 20;
        p.effective_io_size = 1 << 20;
        let mut out = Vec::new();
        print_table(&mut out, Op::Read, 1 << 30, &[p], false).unwrap();
        let s = String::from_utf8(out).unwrap();
        let row = s.lines().nth(2).unwrap();
        assert!(row.starts_with("tcp") && row.contains(" 1m* "), "{s}");
        assert!(row.trim_end().ends_with('-'), "{s}");
        assert!(s.contains("external server"), "{s}");
        assert_eq!(size_label(4096), "4k");
        assert_eq!(size_label(1000), "1000");
    }
}
