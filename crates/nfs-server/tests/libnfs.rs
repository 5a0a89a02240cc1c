//! Interop with a client this project did not write: libnfs's nfs-ls,
//! nfs-cp and nfs-cat (Debian libnfs-utils) over TCP against the server on
//! ephemeral ports. Set NFSRDMA_SKIP_LIBNFS=1 to skip when the tools are
//! not installed; otherwise their absence fails the test.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use common::{start, TempDir};

const BIG: usize = 100 << 20;

fn tools_present() -> bool {
    ["nfs-ls", "nfs-cp", "nfs-cat"].iter().all(|t| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    })
}

/// Deterministic pseudo-random bytes (xorshift64).
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

async fn run(args: Vec<String>) -> Output {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&args[0]).args(&args[1..]).output().unwrap()
    })
    .await
    .unwrap();
    if !out.status.success() {
        panic!(
            "command failed: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

fn url(export: &Path, file: &str, nfs_port: u16, mount_port: u16) -> String {
    format!(
        "nfs://127.0.0.1{}{}?version=3&nfsport={nfs_port}&mountport={mount_port}",
        std::fs::canonicalize(export).unwrap().display(),
        file
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnfs_lists_copies_100mib_in_and_out_and_cats_byte_exact() {
    if !tools_present() {
        if std::env::var("NFSRDMA_SKIP_LIBNFS").as_deref() == Ok("1") {
            eprintln!("skipping: libnfs-utils not installed and NFSRDMA_SKIP_LIBNFS=1");
            return;
        }
        panic!(
            "nfs-ls/nfs-cp/nfs-cat not found: install libnfs-utils (or set NFSRDMA_SKIP_LIBNFS=1)"
        );
    }
    let export = TempDir::new("libnfs-export");
    let local = TempDir::new("libnfs-local");
    std::fs::write(export.path().join("hello.txt"), b"hello from nfsrdma\n").unwrap();
    std::fs::create_dir(export.path().join("subdir")).unwrap();
    // Enough entries that listing takes several READDIRPLUS calls.
    for i in 0..500 {
        std::fs::write(
            export
                .path()
                .join(format!("subdir/entry-with-a-long-name-{i:04}")),
            b"",
        )
        .unwrap();
    }
    let srv = start(export.path(), false).await;
    let (np, mp) = (srv.nfs_addr().port(), srv.mount_addr().unwrap().port());

    let t = Instant::now();
    let ls = run(vec!["nfs-ls".into(), url(export.path(), "", np, mp)]).await;
    let listing = String::from_utf8_lossy(&ls.stdout).to_string();
    assert!(listing.contains("hello.txt"), "listing: {listing}");
    assert!(listing.contains("subdir"), "listing: {listing}");
    let sub = run(vec!["nfs-ls".into(), url(export.path(), "/subdir", np, mp)]).await;
    let sub = String::from_utf8_lossy(&sub.stdout).to_string();
    let mut names: Vec<&str> = sub
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|n| n.starts_with("entry-"))
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 500, "nfs-ls of 500 entries: {sub}");
    eprintln!("nfs-ls (2 listings, 502 entries): {:?}", t.elapsed());

    let t = Instant::now();
    let cat = run(vec![
        "nfs-cat".into(),
        url(export.path(), "/hello.txt", np, mp),
    ])
    .await;
    assert_eq!(cat.stdout, b"hello from nfsrdma\n");
    eprintln!("nfs-cat: {:?}", t.elapsed());

    let data = pattern(BIG);
    let src = local.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let t = Instant::now();
    run(vec![
        "nfs-cp".into(),
        src.display().to_string(),
        url(export.path(), "/big.bin", np, mp),
    ])
    .await;
    let up = t.elapsed();
    assert!(
        std::fs::read(export.path().join("big.bin")).unwrap() == data,
        "upload differs"
    );

    let dst = local.path().join("dst.bin");
    let t = Instant::now();
    run(vec![
        "nfs-cp".into(),
        url(export.path(), "/big.bin", np, mp),
        dst.display().to_string(),
    ])
    .await;
    let down = t.elapsed();
    assert!(std::fs::read(&dst).unwrap() == data, "download differs");
    let mib = (BIG >> 20) as f64;
    eprintln!(
        "nfs-cp 100 MiB in: {:?} ({:.0} MiB/s), out: {:?} ({:.0} MiB/s)",
        up,
        mib / up.as_secs_f64(),
        down,
        mib / down.as_secs_f64()
    );
    srv.stop();
}
