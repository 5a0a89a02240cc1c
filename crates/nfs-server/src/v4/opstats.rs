//! Per-operation counts and latencies inside NFSv4 COMPOUNDs (RFC 8881
//! §16.2, RFC 7530 §15.2), through the `metrics` facade as the RPC layer's
//! per-procedure series are (`oncrpc::stats`): nothing is kept until the
//! program installs a recorder (`nfsrdma serve --metrics ADDR`).
//!
//! Series: `nfs4_ops_total{minor,op,status}` (one per operation result, by
//! its `nfsstat4`) and `nfs4_op_seconds{minor,op}` (the time from the
//! operation's decode to its result). An RPC-level COMPOUND is counted once
//! more by `rpc_calls_total`.

use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};
use std::time::Duration;

use metrics::{Counter, Histogram};
use nfs::v4::{Nfsstat4, Opnum4};

type Key = (u32, u32);

static OPS: LazyLock<OpStats> = LazyLock::new(OpStats::default);

/// Records operation `op` of a minor version `minor` COMPOUND, process-wide
/// (the series are labelled by operation, not by server instance).
pub(crate) fn record(minor: u32, op: Opnum4, status: Nfsstat4, took: Duration) {
    OPS.record(minor, op, status, took);
}

struct OpHandles {
    seconds: Histogram,
    results: HashMap<u32, Counter>,
}

/// The handles of each (minor version, operation) seen, made on first use.
#[derive(Default)]
pub(crate) struct OpStats {
    ops: RwLock<HashMap<Key, OpHandles>>,
}

impl OpStats {
    /// Records operation `op` of a minor version `minor` COMPOUND that
    /// took `took` and ended with `status`.
    pub(crate) fn record(&self, minor: u32, op: Opnum4, status: Nfsstat4, took: Duration) {
        let key = (minor, op.0);
        if let Ok(ops) = self.ops.read() {
            if let Some(h) = ops.get(&key) {
                if let Some(c) = h.results.get(&status.0) {
                    c.increment(1);
                    h.seconds.record(took.as_secs_f64());
                    return;
                }
            }
        }
        let Ok(mut ops) = self.ops.write() else {
            return;
        };
        let h = ops.entry(key).or_insert_with(|| OpHandles {
            seconds: metrics::histogram!("nfs4_op_seconds", &labels(key)),
            results: HashMap::new(),
        });
        h.seconds.record(took.as_secs_f64());
        h.results
            .entry(status.0)
            .or_insert_with(|| {
                let mut l = labels(key);
                l.push(("status", status_name(status)));
                metrics::counter!("nfs4_ops_total", &l)
            })
            .increment(1);
    }
}

fn labels((minor, op): Key) -> Vec<(&'static str, String)> {
    vec![("minor", minor.to_string()), ("op", op_name(Opnum4(op)))]
}

/// `READ` for OP_READ; `op_N` for a number without a name.
pub(crate) fn op_name(op: Opnum4) -> String {
    match op.name() {
        Some(n) => n.trim_start_matches("OP_").to_string(),
        None => format!("op_{}", op.0),
    }
}

fn status_name(s: Nfsstat4) -> String {
    match s.name() {
        Some(n) => n.to_string(),
        None => format!("nfsstat4_{}", s.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_protocol_constants() {
        assert_eq!(op_name(Opnum4::OP_READ), "READ");
        assert_eq!(op_name(Opnum4(9999)), "op_9999");
        assert_eq!(status_name(Nfsstat4::NFS4ERR_DELAY), "NFS4ERR_DELAY");
    }

    #[test]
    fn records_without_a_recorder_installed() {
        let s = OpStats::default();
        s.record(
            1,
            Opnum4::OP_READ,
            Nfsstat4::NFS4_OK,
            Duration::from_micros(5),
        );
        s.record(1, Opnum4::OP_READ, Nfsstat4::NFS4ERR_DELAY, Duration::ZERO);
        s.record(1, Opnum4::OP_READ, Nfsstat4::NFS4_OK, Duration::ZERO);
        let ops = s.ops.read().unwrap();
        assert_eq!(ops[&(1, Opnum4::OP_READ.0)].results.len(), 2);
    }
}
