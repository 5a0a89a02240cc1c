//! The host-side second client of the kernel delegation check (kpeer):
//! while a Linux NFSv4.1 client over RDMA holds a delegation on a file of
//! a running `nfsrdma serve`, this client opens the same file for writing
//! over TCP, retrying on NFS4ERR_DELAY while the server recalls the
//! kernel's delegation (RFC 8881 §10.4.1), then writes "HOST!" at offset 0
//! and closes. Run by hand with the server's TCP address and export:
//!
//! ```sh
//! NFSRDMA_KPEER_NFS=127.0.0.1:32049 NFSRDMA_KPEER_EXPORT=/tmp/dk/export \
//!   cargo test -p nfs-server --test v4_deleg_kpeer -- --ignored --nocapture
//! ```

mod v4_common;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nfs::v4::*;
use oncrpc::client::ClientConfig;
use oncrpc::tcp::{TcpClient, TcpConfig};
use v4_common::*;

#[tokio::test]
#[ignore = "needs a running nfsrdma serve with a kernel client holding a delegation (kpeer)"]
async fn host_client_conflicts_with_the_kernel_delegation() {
    let addr: SocketAddr = std::env::var("NFSRDMA_KPEER_NFS")
        .expect("NFSRDMA_KPEER_NFS=host:port of the server's TCP listener")
        .parse()
        .unwrap();
    let export = std::env::var("NFSRDMA_KPEER_EXPORT").expect("NFSRDMA_KPEER_EXPORT=dir");
    let file = std::env::var("NFSRDMA_KPEER_FILE").unwrap_or_else(|_| "dfile".into());
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&export).unwrap());
    let rpc = TcpClient::connect(addr, 11, ClientConfig::default(), TcpConfig::default())
        .await
        .unwrap();
    let mut c = C4 {
        rpc,
        cred: sys_cred(uid),
        clientid: 0,
        session: [0; 16],
        seq: AtomicU32::new(0),
    };
    c.establish("kpeer-host-client").await;
    let open = NfsArgop4::Open(Open4Args {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_WRITE,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner(c.clientid, "host-owner"),
        openhow: OpenHow4(None),
        claim: OpenClaim4::Null(Component4(Bytes::from(file.clone()))),
    });
    let start = Instant::now();
    let mut delays = 0u32;
    let r = loop {
        let r = c
            .seq(vec![
                NfsArgop4::Putrootfh(()),
                open.clone(),
                NfsArgop4::Getfh(()),
            ])
            .await;
        if r.status != Nfsstat4::NFS4ERR_DELAY {
            break r;
        }
        delays += 1;
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "DELAY for 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    let sid = open_stateid(&r.resarray);
    println!(
        "OPEN for write answered NFS4_OK after {delays} NFS4ERR_DELAY in {:?}",
        start.elapsed()
    );
    let fh = r
        .resarray
        .iter()
        .find_map(|x| match x {
            NfsResop4::Getfh(Res4::Ok(g)) => Some(g.object.clone()),
            _ => None,
        })
        .unwrap();
    let r = c
        .seq(vec![
            NfsArgop4::Putfh(Putfh4Args { object: fh }),
            NfsArgop4::Write(Write4Args {
                stateid: sid,
                offset: 0,
                stable: StableHow4(2),
                data: xdr::DdpOpaque(Bytes::from_static(b"HOST!")),
            }),
            NfsArgop4::Close(Close4Args {
                seqid: 0,
                open_stateid: sid,
            }),
        ])
        .await;
    assert_eq!(r.status, Nfsstat4::NFS4_OK, "{r:?}");
    assert!(delays > 0, "the kernel held a conflicting delegation");
}
