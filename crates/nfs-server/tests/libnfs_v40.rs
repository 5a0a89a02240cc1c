//! Interop with libnfs's NFSv4.0 client (Debian libnfs-utils): `nfs-ls
//! 'nfs://127.0.0.1/EXPORT?version=4'` lists the export and `nfs-cat`
//! reads a file (SETCLIENTID, SETCLIENTID_CONFIRM, OPEN, OPEN_CONFIRM,
//! READ, CLOSE). Skipped with a note when the tools are not installed and
//! NFSRDMA_SKIP_LIBNFS=1; otherwise their absence fails the test.

mod common;

use std::process::Command;

use common::{start, TempDir};

fn present() -> bool {
    Command::new("sh")
        .arg("-c")
        .arg("command -v nfs-ls && command -v nfs-cat")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

async fn run(args: Vec<String>) -> String {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&args[0]).args(&args[1..]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "command failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnfs_v40_lists_the_export_and_reads_a_file() {
    if !present() {
        if std::env::var("NFSRDMA_SKIP_LIBNFS").as_deref() == Ok("1") {
            eprintln!("skipping: libnfs-utils not installed and NFSRDMA_SKIP_LIBNFS=1");
            return;
        }
        panic!("nfs-ls/nfs-cat not found: install libnfs-utils (or set NFSRDMA_SKIP_LIBNFS=1)");
    }
    let export = TempDir::new("libnfs-v40");
    std::fs::write(export.path().join("hello.txt"), b"hello over NFSv4.0\n").unwrap();
    std::fs::create_dir(export.path().join("subdir")).unwrap();
    let srv = start(export.path(), false).await;
    let np = srv.nfs_addr().port();
    let path = std::fs::canonicalize(export.path()).unwrap();
    let url = |f: &str| {
        format!(
            "nfs://127.0.0.1{}{f}?version=4&nfsport={np}",
            path.display()
        )
    };
    let ls = run(vec!["nfs-ls".into(), url("")]).await;
    assert!(ls.contains("hello.txt"), "listing: {ls}");
    assert!(ls.contains("subdir"), "listing: {ls}");
    let cat = run(vec!["nfs-cat".into(), url("/hello.txt")]).await;
    assert_eq!(cat, "hello over NFSv4.0\n");
}
