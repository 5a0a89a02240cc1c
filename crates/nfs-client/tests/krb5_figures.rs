//! Figures, not a check (`#[ignore]`): NFSv3 WRITE and READ throughput
//! and CPU per GiB with AUTH_SYS, krb5, krb5i and krb5p, our client and
//! server in one process over loopback TCP and over RPC-over-RDMA
//! (softrnic, real iWARP on 127.0.0.1), the transports and flavors
//! alternated in each round so they share the machine's load. Run (the
//! figures in docs/security.md are from a release build):
//!
//! ```text
//! cargo test --release -p nfs-client --test krb5_figures -- --ignored --nocapture
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
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use testkit::krb5::TestKdc;
use testkit::TempDir;

const SIZE: usize = 32 << 20;
const ROUNDS: usize = 3;

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

/// AUTH_SYS, then krb5, krb5i and krb5p, each on a fresh connection
/// from `connect`: (MiB/s, CPU s/GiB) of WRITE and READ for each.
async fn four_flavors<T, F, Fut>(
    connect: F,
    fh: &nfs_client::nfs::v3::NfsFh3,
    sys: &oncrpc::msg::OpaqueAuth,
    data: &Bytes,
    tag: &str,
) -> Vec<[(f64, f64); 2]>
where
    T: ClientTransport + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let init = Krb5Initiator::from_ccache().unwrap();
    let m = Mount::new(
        Nfs3Client::new(connect().await, sys.clone()),
        fh.clone(),
        io(),
    )
    .await
    .unwrap();
    let mut out = vec![run(&m, &format!("{tag}-sys"), data).await];
    for svc in [GssService::NONE, GssService::INTEGRITY, GssService::PRIVACY] {
        let g = GssClient::establish(
            connect().await,
            &init,
            "nfs@localhost",
            NFS_PROGRAM,
            NFS_V3,
            svc,
        )
        .await
        .unwrap();
        let m = Mount::new(Nfs3Client::new(g, sys.clone()), fh.clone(), io())
            .await
            .unwrap();
        out.push(run(&m, &format!("{tag}-{}", svc.0), data).await);
    }
    out
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
        options.sec = vec![
            SecFlavor::Sys,
            SecFlavor::Krb5,
            SecFlavor::Krb5i,
            SecFlavor::Krb5p,
        ];
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
        let data = Bytes::from(
            (0..SIZE)
                .map(|i| (i * 7 + i / 4093) as u8)
                .collect::<Vec<u8>>(),
        );
        // RPC-over-RDMA on softrnic, served by the same RPC core.
        let sdev = SoftDevice::new(SoftConfig::default(), 5);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listener = RdmaListener::bind(&sdev, &any, srv.rpc(), RdmaServerConfig::default())
            .await
            .unwrap();
        let raddr = listener.local_addr();
        listener.spawn();
        let cdev = SoftDevice::new(SoftConfig::default(), 6);
        let rdma = || async {
            RdmaClient::connect(&cdev, &raddr, RdmaClientConfig::default())
                .await
                .unwrap()
        };
        let names = ["sys", "krb5", "krb5i", "krb5p"];
        // [transport][flavor][round]
        let mut results = vec![vec![Vec::new(); 4]; 2];
        for round in 0..ROUNDS {
            let t = four_flavors(|| tcp(addr), &fh, &sys, &data, &format!("tcp{round}")).await;
            let r = four_flavors(rdma, &fh, &sys, &data, &format!("rdma{round}")).await;
            for (i, (t, r)) in t.into_iter().zip(r).enumerate() {
                results[0][i].push(t);
                results[1][i].push(r);
            }
        }
        println!(
            "NFSv3, {} MiB per transfer, 1 MiB calls, 8 in flight, {ROUNDS} rounds; \
             per round: MiB/s (x sys on the same transport), CPU s/GiB (x sys)",
            SIZE >> 20
        );
        for (t, tname) in ["TCP", "RDMA"].iter().enumerate() {
            let base = &results[t][0];
            for (i, name) in names.iter().enumerate() {
                for (dir, d) in [("WRITE", 0), ("READ", 1)] {
                    let r: Vec<String> = results[t][i]
                        .iter()
                        .zip(base)
                        .map(|(x, b)| {
                            format!(
                                "{:.0} ({:.2}x), {:.2} ({:.2}x)",
                                x[d].0,
                                x[d].0 / b[d].0,
                                x[d].1,
                                x[d].1 / b[d].1
                            )
                        })
                        .collect();
                    println!("{tname:4} {name:6} {dir:5} {}", r.join(" | "));
                }
            }
        }
        for (i, name) in names.iter().enumerate() {
            for (dir, d) in [("WRITE", 0), ("READ", 1)] {
                let r: Vec<String> = results[1][i]
                    .iter()
                    .zip(&results[0][i])
                    .map(|(r, t)| {
                        format!(
                            "{:.2}x MiB/s, {:.2}x CPU/GiB",
                            r[d].0 / t[d].0,
                            r[d].1 / t[d].1
                        )
                    })
                    .collect();
                println!("RDMA/TCP {name:6} {dir:5} {}", r.join(" | "));
            }
        }
        srv.stop();
    });
}
