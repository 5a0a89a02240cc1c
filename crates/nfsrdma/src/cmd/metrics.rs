//! `serve --metrics ADDR`: the server's counters in the Prometheus text
//! format at `http://ADDR/metrics`, through `metrics-exporter-prometheus`.
//!
//! What is exported:
//! - `rpc_calls_total{program,version,procedure,status}` and the histogram
//!   `rpc_call_seconds{program,version,procedure}` (every ONC RPC program
//!   the server runs, over TCP and RPC-over-RDMA; see `oncrpc::stats`);
//! - `rpc_rejected_total{reason}`: calls answered before a service ran;
//! - `limit_trips_total{limit}`: how often each resource bound tripped
//!   (the names of docs/hardening.md, the same counts the log lines give);
//! - `connections`: connections open now, TCP and RDMA together;
//! - `rpcrdma_*`: the RPC-over-RDMA transport's totals (bytes inline and
//!   by read, write and reply chunk, Sends, RDMA Reads and Writes, errors;
//!   `rpcrdma_credits_granted` and `rpcrdma_credits_in_use` are gauges),
//!   and `rpcrdma_conn_*{conn,peer}` gauges with each open connection's
//!   figures (`rpcrdma::transport::stats`), which go 10 s after the
//!   connection does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusBuilder;
use metrics_util::MetricKindMask;
use oncrpc::limits::{self, ConnLimiter};
use rpcrdma::transport::stats;

/// Bucket bounds of the call latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 14] = [
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
    5.0,
];

/// How often the limit counters and the connection gauge are refreshed.
const REFRESH: Duration = Duration::from_secs(1);

/// A gauge not set for this long leaves the page: the per-connection
/// series of a closed connection.
const GAUGE_IDLE: Duration = Duration::from_secs(10);

/// The transport figures that are gauges; the others only grow.
const GAUGES: [&str; 2] = ["credits_granted", "credits_in_use"];

/// Installs the Prometheus recorder with its HTTP listener on `addr`, and
/// a task that copies the limit counters and the open connections into
/// it. Call from within the runtime, before the server takes calls.
pub(crate) fn serve(addr: SocketAddr, conns: Arc<ConnLimiter>) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("rpc_call_seconds".into()),
            &LATENCY_BUCKETS,
        )
        .context("latency buckets")?
        .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE))
        .install()
        .with_context(|| format!("serving metrics on {addr}"))?;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REFRESH);
        loop {
            tick.tick().await;
            refresh(&conns);
        }
    });
    Ok(())
}

fn refresh(conns: &ConnLimiter) {
    for (name, count) in limits::snapshot() {
        metrics::counter!("limit_trips_total", "limit" => name).absolute(count);
    }
    metrics::gauge!("connections").set(conns.open() as f64);
    refresh_rdma();
}

/// Copies the RPC-over-RDMA counters into the recorder.
fn refresh_rdma() {
    let (totals, per_conn) = stats::snapshot();
    for (name, v) in totals.named() {
        let series = format!("rpcrdma_{name}");
        if GAUGES.contains(&name) {
            metrics::gauge!(series).set(v as f64);
        } else {
            metrics::counter!(series).absolute(v);
        }
    }
    for c in per_conn {
        let conn = c.id.to_string();
        for (name, v) in c.figures.named() {
            let labels = [("conn", conn.clone()), ("peer", c.peer.clone())];
            metrics::gauge!(format!("rpcrdma_conn_{name}"), &labels).set(v as f64);
        }
    }
}
