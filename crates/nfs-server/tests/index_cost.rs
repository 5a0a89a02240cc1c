//! What writing the handle index costs (docs/hardening.md, "Handles and
//! storage"): NFSv3 LOOKUPs of names the index has not recorded (each
//! one a write of the on-disk index with a state directory) and a cold
//! READDIRPLUS listing of a large directory (one write per page), against
//! a server with its index in memory, which batches its writes. Runs
//! alternate between the two, each on a fresh server (and a fresh state
//! directory), so both start cold; prints the median of each.
//!
//! Not in the default suite (tens of seconds):
//! `cargo test --release -p nfs-server --test index_cost -- --ignored --nocapture`
//! (`INDEX_COST_FILES`, default 20000 files looked up; `INDEX_COST_LIST`,
//! default 50000 entries listed; `INDEX_COST_RUNS`, default 3).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Client, TempDir};
use nfs::v3::*;
use xdr::FixedOpaque;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fill(dir: &Path, files: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..files {
        std::fs::File::create(dir.join(format!("f{i:07}"))).unwrap();
    }
}

async fn server(export: &Path, state: Option<&Path>) -> nfs_server::RunningServer {
    let mut cfg = nfs_server::ServerConfig::new(export);
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    cfg.state_dir = state.map(Path::to_path_buf);
    cfg.grace_time = Duration::from_millis(1);
    nfs_server::start(cfg).await.unwrap()
}

async fn lookup(c: &Client, dir: &NfsFh3, name: String) -> NfsFh3 {
    let args = Lookup3Args {
        what: Diropargs3 {
            dir: dir.clone(),
            name: Filename3(Bytes::from(name)),
        },
    };
    let r: Lookup3Res = c.nfs(Nfsproc3::LOOKUP, &args).await;
    match r {
        Res3::Ok(ok) => ok.object,
        Res3::Fail(s, _) => panic!("LOOKUP: {s}"),
    }
}

/// LOOKUPs of `d/f0000000`.. with 8 in flight; the time they took.
async fn lookups(c: Arc<Client>, d: NfsFh3, files: usize) -> Duration {
    const WORKERS: usize = 8;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let (c, d) = (Arc::clone(&c), d.clone());
        tasks.spawn(async move {
            for i in (w..files).step_by(WORKERS) {
                lookup(&c, &d, format!("f{i:07}")).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    start.elapsed()
}

/// A whole READDIRPLUS listing of `d` (64 KiB pages, as Linux asks).
async fn list(c: &Client, d: &NfsFh3) -> (Duration, usize) {
    let start = Instant::now();
    let (mut cookie, mut verf, mut n) = (0, FixedOpaque([0; 8]), 0);
    loop {
        let args = Readdirplus3Args {
            dir: d.clone(),
            cookie,
            cookieverf: verf,
            dircount: 65536,
            maxcount: 65536,
        };
        let r: Readdirplus3Res = c.nfs(Nfsproc3::READDIRPLUS, &args).await;
        let page = r.ok().expect("READDIRPLUS");
        n += page.entries.len();
        if page.eof {
            return (start.elapsed(), n);
        }
        cookie = page.entries.last().unwrap().cookie;
        verf = page.cookieverf;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, tens of seconds"]
async fn index_write_cost() {
    let (files, listed, runs) = (
        env("INDEX_COST_FILES", 20_000),
        env("INDEX_COST_LIST", 50_000),
        env("INDEX_COST_RUNS", 3),
    );
    let t = TempDir::new("index-cost");
    // Outside the export: a state directory inside it is refused.
    let states = TempDir::new("index-cost-state");
    fill(&t.path().join("look"), files);
    fill(&t.path().join("list"), listed);
    let mut times: [[Vec<Duration>; 3]; 2] = Default::default();
    for run in 0..runs {
        // Alternating which goes first.
        for side in [run % 2, 1 - run % 2] {
            let state = states.path().join(format!("state-{run}-{side}"));
            let srv = server(t.path(), (side == 1).then_some(state.as_path())).await;
            let c = Arc::new(Client::connect(srv.nfs_addr()).await);
            let root = srv.root_handle();
            let look = lookup(&c, &root, "look".into()).await;
            let cold = lookups(Arc::clone(&c), look.clone(), files).await;
            let again = lookups(Arc::clone(&c), look, files).await;
            let d = lookup(&c, &root, "list".into()).await;
            let (took, n) = list(&c, &d).await;
            assert_eq!(n, listed + 2);
            let name = ["in memory", "state dir"][side];
            println!(
                "run {run} {name}: {files} new LOOKUPs {:.3} s, again {:.3} s, \
                 cold READDIRPLUS of {listed} {:.3} s, load {}",
                cold.as_secs_f64(),
                again.as_secs_f64(),
                took.as_secs_f64(),
                load()
            );
            for (k, d) in [cold, again, took].into_iter().enumerate() {
                times[side][k].push(d);
            }
            drop(srv);
        }
    }
    let per = |d: Duration, n: usize| d.as_secs_f64() * 1e6 / n as f64;
    for (side, name) in ["in memory", "state dir"].iter().enumerate() {
        let [cold, again, took] = times[side].clone().map(median);
        println!(
            "median {name}: new LOOKUP {:.1} us/call, known LOOKUP {:.1} us/call, \
             cold READDIRPLUS {:.3} s ({:.2} us/entry)",
            per(cold, files),
            per(again, files),
            took.as_secs_f64(),
            per(took, listed)
        );
    }
}
