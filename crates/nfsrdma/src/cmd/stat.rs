//! `nfsrdma stat ADDR`: a summary of a running server's metrics (what
//! `serve --metrics ADDR` exports), in the manner of nfsstat: calls per
//! procedure with errors and mean latency, rejected calls, limits tripped,
//! connections, and the RPC-over-RDMA transport's figures in total and per
//! connection (as mountstats' `xprt:` lines).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reply bytes read from the metrics endpoint at most.
const MAX_BODY: u64 = 16 << 20;

#[derive(clap::Args, Debug)]
pub(crate) struct StatArgs {
    /// The server's metrics address, HOST:PORT (its `serve --metrics`), or
    /// http://HOST:PORT/metrics.
    addr: String,
}

pub(crate) async fn run(args: StatArgs) -> anyhow::Result<()> {
    let text = fetch(&args.addr).await?;
    print!("{}", summarize(&parse(&text)));
    Ok(())
}

/// GETs the Prometheus text of `addr`.
async fn fetch(addr: &str) -> anyhow::Result<String> {
    let hostport = addr
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default();
    let connect = tokio::net::TcpStream::connect(hostport);
    let mut s = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .with_context(|| format!("connecting to {hostport}: timed out"))?
        .with_context(|| format!("connecting to {hostport}"))?;
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut body = Vec::new();
    let mut limited = (&mut s).take(MAX_BODY);
    let read = limited.read_to_end(&mut body);
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .context("reading the metrics: timed out")??;
    let text = String::from_utf8_lossy(&body);
    let (head, rest) = text.split_once("\r\n\r\n").context("not an HTTP reply")?;
    anyhow::ensure!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{hostport}: {}",
        head.lines().next().unwrap_or_default()
    );
    Ok(rest.to_string())
}

/// One sample: metric name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// The samples of a Prometheus text exposition (comments skipped, lines
/// that do not parse ignored).
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        None => (series, BTreeMap::new()),
        Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y"` (values without commas or escaped quotes, as ours are).
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.trim_matches('"').to_string()))
        })
        .collect()
}

#[derive(Default)]
struct ProcLine {
    calls: f64,
    errors: f64,
    seconds: f64,
    timed: f64,
}

/// The report `nfsrdma stat` prints.
pub(crate) fn summarize(samples: &[Sample]) -> String {
    let mut procs: BTreeMap<(String, String, u32), ProcLine> = BTreeMap::new();
    let mut out = String::new();
    let label = |s: &Sample, k: &str| s.labels.get(k).cloned().unwrap_or_default();
    for s in samples {
        let key = || {
            let p = label(s, "procedure").parse().unwrap_or(u32::MAX);
            (label(s, "program"), label(s, "version"), p)
        };
        match s.name.as_str() {
            "rpc_calls_total" => {
                let e = procs.entry(key()).or_default();
                e.calls += s.value;
                if label(s, "status") != "success" {
                    e.errors += s.value;
                }
            }
            "rpc_call_seconds_sum" => procs.entry(key()).or_default().seconds += s.value,
            "rpc_call_seconds_count" => procs.entry(key()).or_default().timed += s.value,
            _ => {}
        }
    }
    let conns = samples.iter().find(|s| s.name == "connections");
    out.push_str(&format!(
        "connections open: {}\n",
        conns.map_or("?".into(), |s| s.value.to_string())
    ));
    out.push_str(&format!(
        "{:<10} {:>4} {:<12} {:>10} {:>8} {:>10}\n",
        "program", "vers", "procedure", "calls", "errors", "mean ms"
    ));
    for ((prog, vers, p), l) in &procs {
        let mean = if l.timed > 0.0 {
            format!("{:.3}", l.seconds / l.timed * 1e3)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "{:<10} {:>4} {:<12} {:>10} {:>8} {:>10}\n",
            prog,
            vers,
            procedure_name(prog, vers, *p),
            l.calls,
            l.errors,
            mean
        ));
    }
    out.push_str(&nfs4_ops(samples));
    out.push_str(&rdma(samples));
    for (title, name, key) in [
        ("rejected calls", "rpc_rejected_total", "reason"),
        ("limits tripped", "limit_trips_total", "limit"),
    ] {
        let hit: Vec<_> = samples
            .iter()
            .filter(|s| s.name == name && s.value > 0.0)
            .map(|s| format!("{} {}", label(s, key), s.value))
            .collect();
        let shown = if hit.is_empty() {
            "none".to_string()
        } else {
            hit.join(", ")
        };
        out.push_str(&format!("{title}: {shown}\n"));
    }
    out
}

/// The table of NFSv4 operations inside COMPOUNDs (`nfs4_ops_total`,
/// `nfs4_op_seconds`), empty when there were none.
fn nfs4_ops(samples: &[Sample]) -> String {
    let mut ops: BTreeMap<(String, String), ProcLine> = BTreeMap::new();
    let label = |s: &Sample, k: &str| s.labels.get(k).cloned().unwrap_or_default();
    for s in samples {
        let key = || (label(s, "minor"), label(s, "op"));
        match s.name.as_str() {
            "nfs4_ops_total" => {
                let e = ops.entry(key()).or_default();
                e.calls += s.value;
                if label(s, "status") != "NFS4_OK" {
                    e.errors += s.value;
                }
            }
            "nfs4_op_seconds_sum" => ops.entry(key()).or_default().seconds += s.value,
            "nfs4_op_seconds_count" => ops.entry(key()).or_default().timed += s.value,
            _ => {}
        }
    }
    if ops.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{:<10} {:>4} {:<20} {:>10} {:>8} {:>10}\n",
        "nfsv4 op", "minor", "operation", "calls", "errors", "mean ms"
    );
    for ((minor, op), l) in &ops {
        let mean = if l.timed > 0.0 {
            format!("{:.3}", l.seconds / l.timed * 1e3)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "{:<10} {:>4} {:<20} {:>10} {:>8} {:>10}\n",
            "nfs4", minor, op, l.calls, l.errors, mean
        ));
    }
    out
}

/// The RPC-over-RDMA lines: totals, then one line per open connection;
/// empty when the server has no such figures.
fn rdma(samples: &[Sample]) -> String {
    let total = |n: &str| {
        let name = format!("rpcrdma_{n}");
        samples
            .iter()
            .find(|s| s.name == name)
            .map_or(0.0, |s| s.value)
    };
    if !samples.iter().any(|s| s.name.starts_with("rpcrdma_")) {
        return String::new();
    }
    let mut out = format!(
        "rpc-over-rdma: received {} messages, {} B inline, {} B by read chunk ({} RDMA Reads)\n",
        total("messages_received"),
        total("inline_bytes_received"),
        total("read_chunk_bytes"),
        total("rdma_reads"),
    );
    out.push_str(&format!(
        "  sent {} (with invalidate {}), {} B inline, {} B by write chunk, {} B by reply chunk \
         ({} RDMA Writes)\n",
        total("sends"),
        total("sends_with_invalidate"),
        total("inline_bytes_sent"),
        total("write_chunk_bytes"),
        total("reply_chunk_bytes"),
        total("rdma_writes"),
    ));
    out.push_str(&format!(
        "  credits granted {}, in use {}; errors sent {}, connections failed {}\n",
        total("credits_granted"),
        total("credits_in_use"),
        total("errors_sent"),
        total("connection_errors"),
    ));
    let mut conns: BTreeMap<(u64, String), BTreeMap<&str, f64>> = BTreeMap::new();
    for s in samples {
        let Some(field) = s.name.strip_prefix("rpcrdma_conn_") else {
            continue;
        };
        let id = s
            .labels
            .get("conn")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let peer = s.labels.get("peer").cloned().unwrap_or_default();
        conns.entry((id, peer)).or_default().insert(field, s.value);
    }
    for ((id, peer), f) in &conns {
        let g = |k: &str| f.get(k).copied().unwrap_or(0.0);
        out.push_str(&format!(
            "  conn {id} {peer}: in {} msgs {} B + read {} B, out {} sends {} B + write {} B \
             + reply {} B, credits {}/{}\n",
            g("messages_received"),
            g("inline_bytes_received"),
            g("read_chunk_bytes"),
            g("sends"),
            g("inline_bytes_sent"),
            g("write_chunk_bytes"),
            g("reply_chunk_bytes"),
            g("credits_in_use"),
            g("credits_granted"),
        ));
    }
    out
}

/// NFSv3 procedure names (RFC 1813 §3.3).
const NFS3: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];

/// MOUNT v3 procedure names (RFC 1813 §5.2).
const MOUNT3: [&str; 6] = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"];

fn procedure_name(prog: &str, vers: &str, p: u32) -> String {
    let table: &[&str] = match (prog, vers) {
        ("nfs", "3") => &NFS3,
        ("nfs", "4") | ("nfs_cb", "1") => &["NULL", "COMPOUND"],
        ("mount", _) => &MOUNT3,
        _ => &[],
    };
    usize::try_from(p)
        .ok()
        .and_then(|i| table.get(i))
        .map_or_else(|| p.to_string(), |n| (*n).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE rpc_calls_total counter\n\
rpc_calls_total{program=\"nfs\",version=\"3\",procedure=\"17\",status=\"success\"} 40\n\
rpc_calls_total{program=\"nfs\",version=\"3\",procedure=\"17\",status=\"garbage_args\"} 2\n\
rpc_call_seconds_bucket{program=\"nfs\",version=\"3\",procedure=\"17\",le=\"0.001\"} 42\n\
rpc_call_seconds_sum{program=\"nfs\",version=\"3\",procedure=\"17\"} 0.021\n\
rpc_call_seconds_count{program=\"nfs\",version=\"3\",procedure=\"17\"} 42\n\
limit_trips_total{limit=\"tcp.idle_closed\"} 3\n\
limit_trips_total{limit=\"readdir.cursors\"} 0\n\
rpc_rejected_total{reason=\"prog_unavail\"} 1\n\
connections 2\n";

    #[test]
    fn parses_samples_with_and_without_labels() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 9);
        assert_eq!(s[8].name, "connections");
        assert_eq!(s[8].value, 2.0);
        assert_eq!(s[0].labels["procedure"], "17");
        assert_eq!(s[0].labels["status"], "success");
    }

    #[test]
    fn summary_lists_nfs4_operations_by_minor_version() {
        let text = "nfs4_ops_total{minor=\"1\",op=\"READ\",status=\"NFS4_OK\"} 9\n\
nfs4_ops_total{minor=\"1\",op=\"READ\",status=\"NFS4ERR_DELAY\"} 1\n\
nfs4_op_seconds_sum{minor=\"1\",op=\"READ\"} 0.02\n\
nfs4_op_seconds_count{minor=\"1\",op=\"READ\"} 10\n";
        let out = summarize(&parse(text));
        let line = out.lines().find(|l| l.contains("READ")).unwrap();
        let cols: Vec<_> = line.split_whitespace().collect();
        assert_eq!(cols, ["nfs4", "1", "READ", "10", "1", "2.000"]);
        assert!(!summarize(&parse(TEXT)).contains("nfsv4 op"));
    }

    #[test]
    fn summary_shows_rdma_totals_and_connections() {
        let text = "rpcrdma_write_chunk_bytes 1048576\n\
rpcrdma_rdma_writes 16\n\
rpcrdma_credits_granted 32\n\
rpcrdma_conn_write_chunk_bytes{conn=\"7\",peer=\"127.0.0.1:5\"} 1048576\n\
rpcrdma_conn_credits_granted{conn=\"7\",peer=\"127.0.0.1:5\"} 32\n";
        let out = summarize(&parse(text));
        assert!(out.contains("1048576 B by write chunk"), "{out}");
        assert!(out.contains("(16 RDMA Writes)"), "{out}");
        assert!(out.contains("credits granted 32"), "{out}");
        assert!(out.contains("conn 7 127.0.0.1:5:"), "{out}");
        assert!(out.contains("write 1048576 B"), "{out}");
        assert!(out.contains("credits 0/32"), "{out}");
        assert!(!summarize(&parse(TEXT)).contains("rpc-over-rdma"));
    }

    #[test]
    fn summary_names_procedures_and_shows_errors_latency_and_limits() {
        let out = summarize(&parse(TEXT));
        assert!(out.contains("connections open: 2"), "{out}");
        let line = out.lines().find(|l| l.contains("READDIRPLUS")).unwrap();
        let cols: Vec<_> = line.split_whitespace().collect();
        assert_eq!(cols, ["nfs", "3", "READDIRPLUS", "42", "2", "0.500"]);
        assert!(out.contains("limits tripped: tcp.idle_closed 3\n"), "{out}");
        assert!(out.contains("rejected calls: prog_unavail 1\n"), "{out}");
    }
}
