//! A hostile client against the handle index's pending-changes bound
//! (docs/hardening.md, "Index write policy"; limit
//! `index.pending_bytes`): with a state directory every entry a
//! READDIRPLUS page hands out is logged and waits in memory for the next
//! durable commit. A client listing a directory of more new entries than
//! the bound, faster than the commit interval (here an hour, so only the
//! bound can commit: half of it wakes the commit thread, all of it
//! commits in the call), must make the bound commit: the changes waiting
//! (the records of the index's logs, which hold exactly the changes not
//! yet committed, one log between two commits) never pass the bound,
//! every handle the listing handed out resolves, and the server keeps
//! serving.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Client, TempDir};
use nfs::v3::*;
use nfs_server::localfs::index_log::Replay;
use xdr::FixedOpaque;

/// The bound on bytes of changes waiting for the durable commit, set
/// for this test (the default, 48 MiB, would take half a million files).
const PENDING_BYTES: usize = 4 << 20;

/// The bound in changes of this test's names (`e000000`).
const PENDING_BOUND: usize = PENDING_BYTES / 79;

/// More new entries than the bound, by a few READDIRPLUS pages.
const FILES: usize = PENDING_BOUND + 4_464;

/// Records in each of the handle index's logs under `state`: the
/// changes handed out since the last durable commit (the current log)
/// and those of a commit still running (the other log; empty once it
/// ended).
fn logged_changes(state: &Path) -> Vec<usize> {
    let mut n = Vec::new();
    for e in std::fs::read_dir(state).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("index-") && (name.ends_with(".log") || name.ends_with(".log2")) {
            let buf = std::fs::read(e.path()).unwrap();
            n.push(Replay::new(&buf).map_or(0, |r| r.count()));
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_listing_more_new_entries_than_the_pending_bound_trips_it_and_every_handle_resolves(
) {
    let export = TempDir::new("ixb-export");
    let state = TempDir::new("ixb-state");
    let dir = export.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..FILES {
        std::fs::File::create(dir.join(format!("e{i:06}"))).unwrap();
    }
    assert_eq!(
        nfs_server::localfs::index_pending_change_bytes(b"e000000"),
        79
    );
    // Only the bound commits while the listing runs.
    nfs_server::localfs::set_index_commit_interval(Duration::from_secs(3600));
    nfs_server::localfs::set_index_pending_bytes(PENDING_BYTES);
    let mut cfg = nfs_server::ServerConfig::new(export.path());
    cfg.set_squash(nfs_server::exports::Squash::None);
    cfg.nfs_addr = "127.0.0.1:0".parse().unwrap();
    cfg.mount_addr = None;
    cfg.state_dir = Some(state.path().into());
    cfg.grace_time = Duration::from_millis(1);
    let srv = nfs_server::start(cfg).await.unwrap();
    let c = Arc::new(Client::connect(srv.nfs_addr()).await);
    let root = srv.root_handle();
    let d = match c.lookup(&root, "d").await {
        Res3::Ok(ok) => ok.object,
        Res3::Fail(s, _) => panic!("LOOKUP d: {s}"),
    };

    let (mut cookie, mut verf, mut handles, mut most) = (0, [0; 8], Vec::new(), 0);
    loop {
        let r: Readdirplus3Res = c
            .nfs(
                Nfsproc3::READDIRPLUS,
                &Readdirplus3Args {
                    dir: d.clone(),
                    cookie,
                    cookieverf: FixedOpaque(verf),
                    dircount: 64 << 10,
                    maxcount: 256 << 10,
                },
            )
            .await;
        let r = r.ok().expect("READDIRPLUS");
        for e in &r.entries {
            if e.name.0.starts_with(b"e") {
                handles.push((e.fileid, e.name_handle.clone().expect("a handle")));
            }
            cookie = e.cookie;
        }
        verf = r.cookieverf.0;
        // What waits for the commit once the page's reply is out: at
        // most the bound between two commits (each log), twice that
        // while one runs (both).
        let logs = logged_changes(state.path());
        let waiting = logs.iter().copied().max().unwrap_or(0);
        assert!(
            waiting <= PENDING_BOUND && logs.iter().sum::<usize>() <= 2 * PENDING_BOUND,
            "changes waiting for the durable commit {logs:?}, bound {PENDING_BOUND}"
        );
        most = most.max(waiting);
        if r.eof {
            break;
        }
    }
    assert_eq!(handles.len(), FILES);
    // The listing filled the set to half the bound before it committed,
    // and the bound committed: without it all FILES would wait.
    assert!(most > PENDING_BOUND / 4, "at most {most} changes waited");
    let left: usize = logged_changes(state.path()).iter().sum();
    assert!(left < FILES, "{left} of {FILES} changes still wait");

    // Every handle handed out resolves, those committed by the trip and
    // those still waiting alike: four streams of GETATTRs.
    let handles = Arc::new(handles);
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..4 {
        let (c, handles) = (Arc::clone(&c), Arc::clone(&handles));
        tasks.spawn(async move {
            for (fileid, fh) in handles.iter().skip(k).step_by(4) {
                match c.getattr(fh).await {
                    Res3::Ok(ok) => assert_eq!(ok.obj_attributes.fileid, *fileid),
                    Res3::Fail(s, _) => panic!("GETATTR of fileid {fileid}: {s}"),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    // And the server still takes new work.
    let f = common::fh_of(c.create(&d, "after").await);
    assert!(matches!(c.getattr(&f).await, Res3::Ok(_)));
    srv.stop();
}
