//! Replies whose bulk data is a file range (`XdrBuf::put_file`): sent
//! with `sendfile` on plain TCP, read in everywhere else, byte-exact
//! either way, with zeros for a file that ended early.

use std::sync::Arc;
use std::time::Duration;

use oncrpc::client::{ClientConfig, ClientTransport};
use oncrpc::msg::OpaqueAuth;
use oncrpc::tcp::{TcpClient, TcpConfig, TcpServer};
use oncrpc::{PeerInfo, Server, TransportKind};
use testkit::ranges::{call, parse, pattern as data, temp_file, Ranges, PROG};
use xdr::{Encode, Encoder, XdrBuf};

const FILE_LEN: usize = 3 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_ranges_arrive_byte_exact_over_tcp_many_at_once() {
    let file = temp_file("tcp", FILE_LEN);
    let mut server = Server::new();
    server.register(Ranges { file });
    let srv = TcpServer::bind("127.0.0.1:0", Arc::new(server), TcpConfig::default())
        .await
        .unwrap();
    let addr = srv.local_addr().unwrap();
    srv.spawn();
    let c = Arc::new(
        TcpClient::connect(addr, 0x77, ClientConfig::default(), TcpConfig::default())
            .await
            .unwrap(),
    );
    let want = data(FILE_LEN);
    // Large and small, aligned and not (padding), all in flight together
    // so replies queue behind each other and go out in batches.
    let mut tasks = Vec::new();
    for i in 0..40u32 {
        let (offset, len) = match i % 4 {
            0 => (i * 4099, 1 << 20),
            1 => (i * 13, 4097),
            2 => (i, 3),
            _ => (i * 65536 + 1, 200_001),
        };
        let c = Arc::clone(&c);
        tasks.push(tokio::spawn(async move {
            (offset, len, c.call(call(offset, len, false)).await.unwrap())
        }));
    }
    for t in tasks {
        let (offset, len, results) = t.await.unwrap();
        let (files, got) = parse(&results);
        assert!(files, "plain TCP sends from the file");
        let at = offset as usize;
        assert!(got[..] == want[at..at + len as usize], "{offset} {len}");
    }
    // A range past the end of the file: the length announced, zeros
    // for what the file does not have.
    let results = c
        .call(call(FILE_LEN as u32 - 5, 4096, false))
        .await
        .unwrap();
    let (_, got) = parse(&results);
    assert_eq!(got.len(), 4096);
    assert_eq!(&got[..5], &want[FILE_LEN - 5..]);
    assert!(got[5..].iter().all(|&b| b == 0));
    // The connection is still in step.
    let results = c.call(call(10, 10, false)).await.unwrap();
    assert_eq!(&parse(&results).1[..], &want[10..20]);
    // A reply's headers are sent with MSG_MORE, held for the file's data
    // that follows them: replies with an empty range and with one wholly
    // past the end (sendfile sends nothing) still arrive whole.
    for (offset, len) in [(10, 0), (FILE_LEN as u32 + 100, 8)] {
        let reply = tokio::time::timeout(Duration::from_secs(2), c.call(call(offset, len, false)))
            .await
            .expect("the reply is sent, not held")
            .unwrap();
        let (_, got) = parse(&reply);
        assert_eq!(got.len(), len as usize);
        assert!(got.iter().all(|&b| b == 0));
    }
}

#[tokio::test]
async fn other_transports_get_the_bytes_read_in() {
    let file = temp_file("other", 100_000);
    let mut server = Server::new();
    server.register(Ranges { file });
    let peer = PeerInfo {
        conn_id: oncrpc::server::next_conn_id(),
        addr: None,
        transport: TransportKind::Other,
        security: oncrpc::TransportSecurity::None,
    };
    let mut record = XdrBuf::new();
    oncrpc::msg::CallHeader {
        xid: 9,
        prog: PROG,
        vers: 1,
        proc_: 1,
        cred: OpaqueAuth::NONE,
        verf: OpaqueAuth::NONE,
    }
    .encode(&mut record);
    record.put_u32(7);
    record.put_u32(70_001);
    let reply = server.handle_call(record.to_bytes(), &peer).await.unwrap();
    assert!(!reply.has_files());
    let bytes = reply.to_bytes();
    // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS: 24 bytes.
    let (files, got) = parse(&bytes.slice(24..));
    assert!(!files);
    assert!(got[..] == data(100_000)[7..70_008]);
    assert_eq!(
        reply
            .ddp_items()
            .map(|(p, d)| (p, d.len()))
            .collect::<Vec<_>>(),
        [(32, 70_001)]
    );
}
