//! Per-procedure call counts and latencies of a [`crate::Server`],
//! recorded through the `metrics` facade: nothing is kept until the program
//! installs a recorder (`nfsrdma serve --metrics ADDR` installs a Prometheus
//! one), so a library user pays one map lookup per call and no more.
//!
//! Series: `rpc_calls_total{program,version,procedure,status}` and
//! `rpc_call_seconds{program,version,procedure}` (a histogram of the time
//! from dispatch to reply, the service's own time), plus
//! `rpc_rejected_total{reason}` for calls answered before any service ran
//! (RFC 5531 §9: PROG_UNAVAIL, PROG_MISMATCH, AUTH_ERROR, RPC_MISMATCH,
//! GARBAGE_ARGS).

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use metrics::{Counter, Histogram};

/// How a call that reached its service ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Success,
    GarbageArgs,
    ProcUnavail,
    SystemErr,
    AuthError,
    Dropped,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::GarbageArgs => "garbage_args",
            Self::ProcUnavail => "proc_unavail",
            Self::SystemErr => "system_err",
            Self::AuthError => "auth_error",
            Self::Dropped => "dropped",
        }
    }
}

/// Why a call was answered before a service ran.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rejected {
    RpcMismatch,
    BadCred,
    BadVerf,
    GarbageHeader,
    ProgUnavail,
    ProgMismatch,
}

impl Rejected {
    fn label(self) -> &'static str {
        match self {
            Self::RpcMismatch => "rpc_mismatch",
            Self::BadCred => "auth_badcred",
            Self::BadVerf => "auth_badverf",
            Self::GarbageHeader => "garbage_header",
            Self::ProgUnavail => "prog_unavail",
            Self::ProgMismatch => "prog_mismatch",
        }
    }
}

/// The name a program is shown under (its rpcbind name where well known,
/// else its number).
pub fn program_name(prog: u32) -> String {
    match prog {
        100_000 => "portmapper".into(),
        100_003 => "nfs".into(),
        100_005 => "mount".into(),
        100_021 => "nlockmgr".into(),
        100_024 => "status".into(),
        0x4000_0000 => "nfs_cb".into(),
        n => n.to_string(),
    }
}

type Key = (u32, u32, u32);

struct ProcHandles {
    seconds: Histogram,
    calls: HashMap<Outcome, Counter>,
}

/// The handles of each (program, version, procedure) seen, made on first
/// use: the labels are built once, not per call.
#[derive(Default)]
pub(crate) struct CallStats {
    procs: RwLock<HashMap<Key, ProcHandles>>,
}

impl CallStats {
    /// Records one call of `key` that took `took` and ended as `outcome`.
    pub(crate) fn record(&self, key: Key, outcome: Outcome, took: Duration) {
        if let Ok(procs) = self.procs.read() {
            if let Some(h) = procs.get(&key) {
                if let Some(c) = h.calls.get(&outcome) {
                    c.increment(1);
                    h.seconds.record(took.as_secs_f64());
                    return;
                }
            }
        }
        let Ok(mut procs) = self.procs.write() else {
            return;
        };
        let h = procs.entry(key).or_insert_with(|| ProcHandles {
            seconds: metrics::histogram!("rpc_call_seconds", &labels(key)),
            calls: HashMap::new(),
        });
        h.seconds.record(took.as_secs_f64());
        h.calls
            .entry(outcome)
            .or_insert_with(|| {
                let mut l = labels(key);
                l.push(("status", outcome.label().to_string()));
                metrics::counter!("rpc_calls_total", &l)
            })
            .increment(1);
    }
}

fn labels((prog, vers, proc_): Key) -> Vec<(&'static str, String)> {
    vec![
        ("program", program_name(prog)),
        ("version", vers.to_string()),
        ("procedure", proc_.to_string()),
    ]
}

/// Counts a call answered before a service ran.
pub(crate) fn rejected(why: Rejected) {
    metrics::counter!("rpc_rejected_total", "reason" => why.label()).increment(1);
}
