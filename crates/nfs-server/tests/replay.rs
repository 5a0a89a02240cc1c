//! The duplicate-request cache on NFSv3: a retransmitted non-idempotent
//! call gets the first reply, also from a new connection with a new source
//! port (ULB v2 draft §3.3.2: replay detection never uses the port).

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{start, TempDir};
use nfs::v3::*;
use oncrpc::msg::{AuthSys, CallHeader, OpaqueAuth};
use oncrpc::record::{encode_record, RecordDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xdr::{Encode, XdrBuf};

async fn call_once(addr: std::net::SocketAddr, msg: &[u8]) -> (u16, Bytes) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let port = s.local_addr().unwrap().port();
    s.write_all(&encode_record(&XdrBuf::from_bytes(Bytes::copy_from_slice(
        msg,
    ))))
    .await
    .unwrap();
    let mut d = RecordDecoder::new(1 << 20);
    loop {
        if let Some(r) = d.next_record().unwrap() {
            return (port, r);
        }
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed without a reply");
        d.feed(&buf[..n]);
    }
}

#[tokio::test]
async fn retransmitted_remove_from_another_port_gets_the_cached_reply() {
    let t = TempDir::new("replay");
    std::fs::write(t.path().join("victim"), b"x").unwrap();
    let srv = start(t.path(), false).await;
    let mut msg = Vec::new();
    CallHeader {
        xid: 0x5eed,
        prog: NFS_PROGRAM,
        vers: NFS_V3,
        proc_: Nfsproc3::REMOVE.0,
        cred: AuthSys {
            stamp: 1,
            machinename: Bytes::from_static(b"replay"),
            uid: 0,
            gid: 0,
            gids: vec![],
        }
        .to_opaque_auth(),
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut msg);
    Remove3Args {
        object: Diropargs3 {
            dir: srv.root_handle(),
            name: Filename3::from_static("victim"),
        },
    }
    .encode(&mut msg);
    let (p1, first) = call_once(srv.nfs_addr(), &msg).await;
    assert!(!t.path().join("victim").exists());
    let (p2, second) = call_once(srv.nfs_addr(), &msg).await;
    assert_ne!(p1, p2);
    // Executing REMOVE again would answer NFS3ERR_NOENT; the cache answers
    // with the first reply, byte for byte.
    assert_eq!(first, second);
    let status = u32::from_be_bytes(first[24..28].try_into().unwrap());
    assert_eq!(Nfsstat3(status), Nfsstat3::NFS3_OK);
    srv.stop();
}
