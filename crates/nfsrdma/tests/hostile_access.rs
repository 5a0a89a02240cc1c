//! Access control of `nfsrdma serve` in a child process (issue 12 item
//! 3): a client outside the allowed list cannot mount or read anything
//! over TCP or RDMA, NFSv3 or NFSv4, and its RDMA connection is refused
//! at set-up; a loopback client of the default `serve DIR` is served,
//! with uid 0 squashed (it cannot read a 0600 file of another user).

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nfs_client::v4::{Session, SessionOptions};
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{TcpClient, TcpConfig};

mod support;

use support::serve::{free_port, ServeChild as Serve, BIN};
use support::TempDir;

/// The server under test: `hello` readable by all, `secret` 0600 owned by
/// uid 1234.
fn serve(tag: &str, extra: &[&str]) -> Serve {
    Serve::start(tag, extra, |dir| {
        std::fs::write(dir.join("hello"), b"hello\n").unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, b"top secret\n").unwrap();
        std::fs::set_permissions(&secret, PermissionsExt::from_mode(0o600)).unwrap();
        let _ = std::os::unix::fs::chown(&secret, Some(1234), Some(1234));
    })
}

impl Serve {
    /// `nfsrdma cat URL`: its output, or its error text.
    fn cat(&self, scheme: &str, file: &str) -> Result<String, String> {
        let out = Command::new(BIN)
            .args(["cat", &self.url(scheme, file)])
            .output()
            .expect("run nfsrdma cat");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// NFSv4.1 over TCP as uid 0: the status of PUTROOTFH + GETFH.
async fn v4_root(port: u16) -> Result<(), Option<nfs::v4::Nfsstat4>> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let rpc = TcpClient::connect(addr, 9, ClientConfig::default(), TcpConfig::default())
        .await
        .expect("TCP connect");
    let cred = nfs_client::process_auth_sys().to_opaque_auth();
    let s = Session::establish(rpc, cred, &SessionOptions::default())
        .await
        .expect("EXCHANGE_ID and CREATE_SESSION are open to anyone");
    s.root().await.map(|_| ()).map_err(|e| e.nfs_status())
}

/// Whether an RPC-over-RDMA connection to `port` is accepted.
async fn rdma_connects(port: u16) -> bool {
    let device = softrnic::SoftDevice::new(softrnic::SoftConfig::default(), 77);
    let opts = nfs_client::RdmaOptions {
        connect_timeout: Duration::from_secs(5),
        ..nfs_client::RdmaOptions::default()
    };
    nfs_client::connect_rdma_transport(&device, "127.0.0.1", port, &opts)
        .await
        .is_ok()
}

#[test]
fn client_outside_allow_is_refused_over_tcp_and_rdma_v3_and_v4() {
    let mut srv = serve("refused", &["--allow", "10.0.0.0/8"]);
    let tcp = srv.cat("nfs", "hello");
    assert!(tcp.as_ref().is_err_and(|e| e.contains("ACCES")), "{tcp:?}");
    let rdma = srv.cat("nfs+rdma", "hello");
    assert!(rdma.is_err(), "{rdma:?}");
    let rt = rt();
    assert!(
        !rt.block_on(rdma_connects(srv.rdma)),
        "RDMA connection refused at set-up"
    );
    assert_eq!(
        rt.block_on(v4_root(srv.nfs)),
        Err(Some(nfs::v4::Nfsstat4::NFS4ERR_ACCESS))
    );
    assert!(srv.alive());
}

#[test]
fn loopback_is_served_by_default_with_root_squashed() {
    let mut srv = serve("allowed", &[]);
    assert_eq!(srv.cat("nfs", "hello").as_deref(), Ok("hello\n"));
    assert_eq!(srv.cat("nfs+rdma", "hello").as_deref(), Ok("hello\n"));
    let rt = rt();
    assert!(rt.block_on(rdma_connects(srv.rdma)));
    assert_eq!(rt.block_on(v4_root(srv.nfs)), Ok(()));
    let running_as_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    if running_as_root {
        // uid 0 is squashed: the 0600 file of uid 1234 stays closed.
        let secret = srv.cat("nfs", "secret");
        assert!(
            secret.as_ref().is_err_and(|e| e.contains("ACCES")),
            "{secret:?}"
        );
        let secret = srv.cat("nfs+rdma", "secret");
        assert!(secret.is_err(), "{secret:?}");
    }
    assert!(srv.alive());
}

#[test]
fn no_root_squash_and_allow_star_open_it_up() {
    let mut srv = serve("open", &["--allow", "*", "--no-root-squash"]);
    assert_eq!(srv.cat("nfs", "secret").as_deref(), Ok("top secret\n"));
    assert_eq!(srv.cat("nfs+rdma", "secret").as_deref(), Ok("top secret\n"));
    assert!(srv.alive());
}

/// NFSv4.1 over TCP as uid 0 on a read-only grant, the export mounted by
/// its path: creating is NFS4ERR_ROFS, reading works.
async fn v4_on_read_only(port: u16, export: &str) -> (Option<nfs::v4::Nfsstat4>, Vec<u8>) {
    use nfs_client::v4::OpenOptions;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let rpc = TcpClient::connect(addr, 11, ClientConfig::default(), TcpConfig::default())
        .await
        .expect("TCP connect");
    let cred = nfs_client::process_auth_sys().to_opaque_auth();
    let s = Session::establish(rpc, cred, &SessionOptions::default())
        .await
        .unwrap();
    let root = s.mount(export).await.unwrap();
    let create = OpenOptions {
        create_mode: Some(0o644),
        ..OpenOptions::default()
    };
    let created = s
        .open(&root, "new", create)
        .await
        .err()
        .and_then(|e| e.nfs_status());
    let read = OpenOptions {
        share_access: nfs::v4::OPEN4_SHARE_ACCESS_READ,
        ..OpenOptions::default()
    };
    let f = s.open(&root, "hello", read).await.unwrap();
    let data = s.read_all(&f).await.unwrap();
    (created, data)
}

#[test]
fn exports_file_read_only_grant_is_rofs_on_v3_and_v4() {
    let dir = TempDir::new("ro-file");
    let file = dir.0.join("exports");
    let export = TempDir::new("ro-export");
    std::fs::write(export.0.join("hello"), b"hello\n").unwrap();
    std::fs::write(
        &file,
        format!(
            "# test\n\"{}\" 127.0.0.1(ro,no_root_squash)\n",
            export.0.display()
        ),
    )
    .unwrap();
    let (nfs, mnt) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .args(["serve", "--exports"])
        .arg(&file)
        .arg("--state-dir")
        .arg(dir.0.join("state"))
        .args(["--addr", "127.0.0.1", "--port", &nfs.to_string()])
        .args(["--mount-port", &mnt.to_string(), "--transports", "tcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn serve");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", mnt)).is_err() {
        assert!(Instant::now() < deadline, "server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = |f: &str| {
        format!(
            "nfs://127.0.0.1:{nfs}{}/{f}?mountport={mnt}",
            export.0.display()
        )
    };
    let cat = Command::new(BIN)
        .args(["cat", &url("hello")])
        .output()
        .unwrap();
    assert_eq!(cat.stdout, b"hello\n");
    let cp = Command::new(BIN)
        .args(["cp", file.to_str().unwrap(), &url("copied")])
        .output()
        .unwrap();
    assert!(!cp.status.success());
    assert!(
        String::from_utf8_lossy(&cp.stderr).contains("ROFS"),
        "{cp:?}"
    );
    let path = std::fs::canonicalize(&export.0).unwrap();
    let (created, data) = rt().block_on(v4_on_read_only(nfs, path.to_str().unwrap()));
    assert_eq!(created, Some(nfs::v4::Nfsstat4::NFS4ERR_ROFS));
    assert_eq!(data, b"hello\n");
    assert!(!export.0.join("copied").exists() && !export.0.join("new").exists());
    assert!(child.try_wait().unwrap().is_none());
    let _ = child.kill();
    let _ = child.wait();
}
