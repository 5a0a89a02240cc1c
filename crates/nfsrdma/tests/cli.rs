//! The `nfsrdma` binary as a user runs it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nfsrdma");

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("an ephemeral port")
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server never listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn help_documents_each_subcommand() {
    let out = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["serve", "echo-server", "rpc-ping", "ls", "cat", "cp"] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
        let sub_help = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        assert!(sub_help.status.success(), "{sub} --help failed");
        assert!(!sub_help.stdout.is_empty());
    }
}

#[test]
fn rpc_ping_round_trips_against_echo_server() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _server = KillOnDrop(
        Command::new(BIN)
            .args(["echo-server", "--listen", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn echo-server"),
    );
    wait_listening(port);
    let out = Command::new(BIN)
        .args([
            "rpc-ping", &addr, "--nulls", "20", "--size", "300000", "--count", "6",
        ])
        .output()
        .expect("run rpc-ping");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rpc-ping failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("NULL x20"), "{stdout}");
    assert!(stdout.contains("ECHO 300000 B x6"), "{stdout}");
    assert!(stdout.contains("byte-exact"), "{stdout}");
}

#[test]
fn rpc_ping_reports_a_refused_connection() {
    let port = free_port();
    let out = Command::new(BIN)
        .args(["rpc-ping", &format!("127.0.0.1:{port}"), "--nulls", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to"));
}

#[test]
fn serve_exports_a_directory_to_libnfs_and_our_client() {
    let dir = std::env::temp_dir().join(format!("nfsrdma-cli-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), b"hello over nfs\n").unwrap();
    let (nfs, mnt, rdma) = (free_port(), free_port(), free_port());
    let _server = KillOnDrop(
        Command::new(BIN)
            .arg("serve")
            .arg(&dir)
            .arg("--state-dir")
            .arg(dir.with_extension("state"))
            .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
            .args(["--mount-port", &mnt.to_string(), "--read-only"])
            .args(["--rdma-port", &rdma.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve"),
    );
    wait_listening(nfs);
    wait_listening(mnt);
    wait_listening(rdma);
    let path = dir.to_str().unwrap();

    let ours = Command::new(BIN)
        .args([
            "cat",
            &format!("nfs://127.0.0.1:{nfs}{path}/hello.txt?mountport={mnt}"),
        ])
        .output()
        .unwrap();
    assert!(
        ours.status.success(),
        "{}",
        String::from_utf8_lossy(&ours.stderr)
    );
    assert_eq!(ours.stdout, b"hello over nfs\n");

    if std::env::var_os("NFSRDMA_SKIP_LIBNFS").is_none() {
        let theirs = Command::new("nfs-cat")
            .arg(format!(
                "nfs://127.0.0.1{path}/hello.txt?version=3&nfsport={nfs}&mountport={mnt}"
            ))
            .output()
            .expect("nfs-cat from libnfs-utils (scripts/install-deps.sh installs it)");
        assert!(
            theirs.status.success(),
            "{}",
            String::from_utf8_lossy(&theirs.stderr)
        );
        assert_eq!(theirs.stdout, b"hello over nfs\n");
    }

    // --read-only: a copy into the export is refused and leaves nothing behind.
    let src = dir.with_extension("src");
    std::fs::write(&src, b"x").unwrap();
    let cp = Command::new(BIN)
        .arg("cp")
        .arg(&src)
        .arg(format!(
            "nfs://127.0.0.1:{nfs}{path}/new.txt?mountport={mnt}"
        ))
        .output()
        .unwrap();
    assert!(!cp.status.success());
    assert!(!dir.join("new.txt").exists());
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(dir.with_extension("state"));
}
