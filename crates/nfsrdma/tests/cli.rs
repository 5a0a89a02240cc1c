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
    for sub in ["echo-server", "rpc-ping"] {
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
