//! Figures, not a check (`#[ignore]`): NFSv3 WRITE and READ throughput
//! and CPU per GiB with AUTH_SYS, krb5, krb5i and krb5p, our client and
//! server in one process over loopback TCP, the flavors alternated in
//! each round so they share the machine's load. Run:
//!
//! ```text
//! cargo test -p nfs-client --test krb5_figures -- --ignored --nocapture
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use gss::{Krb5Acceptor, Krb5Initiator};
use nfs_client::nfs::v3::{NFS_PROGRAM, NFS_V3};
use nfs_client::{IoOptions, Mount, MountClient, Nfs3Client};
use nfs_server::exports::{ClientRule, ExportEntry, ExportOptions, SecFlavor, Squash};
use oncrpc::client::{ClientConfig, ClientTransport};
use oncrpc::gss::{GssClient, GssConfig, GssServer, GssService};
use oncrpc::msg::AuthSys;
use oncrpc::tcp::{TcpClient, TcpConfig};
use testkit::krb5::TestKdc;
use testkit::TempDir;

const SIZE: usize = 32 << 20;
const ROUNDS: usize = 2;

/// User plus system CPU seconds of this process (/proc/self/stat).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

async fn tcp(addr: SocketAddr) -> TcpClient {
    TcpClient::connect(addr, 0x777, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap()
}

fn io() -> IoOptions {
    IoOptions {
        in_flight: 8,
        block_size: Some(1 << 20),
        ..IoOptions::default()
    }
}

/// (MiB/s, CPU s per GiB) writing then reading SIZE bytes.
async fn run<T: ClientTransport>(m: &Mount<T>, name: &str, data: &Bytes) -> [(f64, f64); 2] {
    let gib = data.len() as f64 / f64::from(1u32 << 30);
    let (c0, t0) = (cpu_seconds(), Instant::now());
    let (fh, _) = m.write_file(name, 0o644, data.clone()).await.unwrap();
    let (c1, t1) = (cpu_seconds(), Instant::now());
    let back = m.read_file(&fh).await.unwrap();
    let (c2, t2) = (cpu_seconds(), Instant::now());
    assert!(back == data[..]);
    let mib = data.len() as f64 / f64::from(1u32 << 20);
    [
        (mib / (t1 - t0).as_secs_f64(), (c1 - c0) / gib),
        (mib / (t2 - t1).as_secs_f64(), (c2 - c1) / gib),
    ]
}

#[test]
#[ignore]
fn nfs3_throughput_and_cpu_sys_vs_kerberos() {
    let Some(kdc) = TestKdc::start("krb5-figures") else {
        return;
    };
    let root = kdc.user_ccache("root");
    kdc.use_in_process(&root);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = TempDir::new("krb5-figures");
        let mut options = ExportOptions::read_write();
        options.squash = Squash::None;
        options.sec = vec![SecFlavor::Sys, SecFlavor::Krb5, SecFlavor::Krb5i, SecFlavor::Krb5p];
        let mut cfg = nfs_server::ServerConfig::new(dir.path());
        cfg.exports = vec![ExportEntry {
            path: dir.path().to_path_buf(),
            clients: vec![ClientRule {
                spec: nfs_server::exports::parse_client("127.0.0.1").unwrap(),
                options,
            }],
        }];
        cfg.nfs_addr = SocketAddr::from(([127, 0, 0, 1], 0));
        cfg.mount_addr = None;
        cfg.gss = Some(Arc::new(GssServer::new(
            Arc::new(Krb5Acceptor::new().unwrap()),
            GssConfig::default(),
        )));
        let srv = nfs_server::start(cfg).await.unwrap();
        let addr = srv.nfs_addr();
        let sys = AuthSys {
            machinename: Bytes::from_static(b"bench"),
            ..AuthSys::default()
        }
        .to_opaque_auth();
        let fh = MountClient::new(tcp(addr).await, sys.clone())
            .mnt(dir.path().to_str().unwrap())
            .await
            .unwrap()
            .fhandle;
        let data = Bytes::from((0..SIZE).map(|i| (i * 7 + i / 4093) as u8).collect::<Vec<u8>>());
        let init = Krb5Initiator::from_ccache().unwrap();
        let names = ["sys", "krb5", "krb5i", "krb5p"];
        let mut results = vec![Vec::new(); 4];
        for round in 0..ROUNDS {
            let m = Mount::new(Nfs3Client::new(tcp(addr).await, sys.clone()), fh.clone(), io())
                .await
                .unwrap();
            results[0].push(run(&m, &format!("sys{round}"), &data).await);
            for (i, svc) in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY]
                .into_iter()
                .enumerate()
            {
                let g = GssClient::establish(tcp(addr).await, &init, "nfs@localhost", NFS_PROGRAM, NFS_V3, svc)
                    .await
                    .unwrap();
                let m = Mount::new(Nfs3Client::new(g, sys.clone()), fh.clone(), io())
                    .await
                    .unwrap();
                results[i + 1].push(run(&m, &format!("{}{round}", names[i + 1]), &data).await);
            }
        }
        println!("NFSv3 over loopback TCP, {} MiB per transfer, 1 MiB calls, 8 in flight, {ROUNDS} rounds", SIZE >> 20);
        let base = &results[0];
        for (i, name) in names.iter().enumerate() {
            for (dir, d) in [("WRITE", 0), ("READ", 1)] {
                let r: Vec<String> = results[i]
                    .iter()
                    .zip(base)
                    .map(|(x, b)| {
                        format!(
                            "{:.0} MiB/s ({:.2}x sys), {:.2} CPU s/GiB ({:.2}x sys)",
                            x[d].0,
                            x[d].0 / b[d].0,
                            x[d].1,
                            x[d].1 / b[d].1
                        )
                    })
                    .collect();
                println!("{name:6} {dir:5} {}", r.join(" | "));
            }
        }
        srv.stop();
    });
}
