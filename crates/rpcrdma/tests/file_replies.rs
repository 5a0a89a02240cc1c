//! Replies whose bulk data is a file range (`XdrBuf::put_file`) over
//! RPC-over-RDMA on softrnic: a range that goes by write chunk is sent
//! from the file (RDMA Writes from the page cache, `rnic::ChainWr::WriteFile`),
//! one that stays inline or goes by reply chunk is read in; byte-exact
//! either way, with and without MPA CRC, zeros for a file that ended early.
#![cfg(feature = "transport")]

use std::net::SocketAddr;
use std::sync::Arc;

use oncrpc::client::ClientTransport;
use oncrpc::Server;
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use testkit::ranges::{call, parse, pattern as data, temp_file, Ranges};

const FILE_LEN: usize = 3 << 20;

async fn ranges_arrive(crc: bool, seed: u64) {
    let cfg = SoftConfig {
        crc,
        ..SoftConfig::default()
    };
    let sdev = SoftDevice::new(cfg, seed);
    let cdev = SoftDevice::new(cfg, seed + 1);
    let mut server = Server::new();
    server.register(Ranges {
        file: temp_file(&format!("files-{crc}"), FILE_LEN),
    });
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = RdmaListener::bind(&sdev, &any, Arc::new(server), RdmaServerConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr();
    listener.spawn();
    let client = Arc::new(
        RdmaClient::connect(&cdev, &addr, RdmaClientConfig::default())
            .await
            .unwrap(),
    );
    let want = data(FILE_LEN);
    // Large and small, aligned and not, by write chunk or not, all in
    // flight together.
    let mut tasks = Vec::new();
    for i in 0..32u32 {
        let (offset, len) = match i % 4 {
            0 => (i * 4099, 1 << 20),
            1 => (i * 13, 4097),
            2 => (i, 3),
            _ => (i * 65536 + 1, 200_001),
        };
        let chunk = i % 8 != 7;
        let c = Arc::clone(&client);
        tasks.push(tokio::spawn(async move {
            let r = c
                .call(call(offset, len, chunk))
                .await
                .unwrap_or_else(|e| panic!("{offset} {len} {chunk}: {e}"));
            (offset, len, r)
        }));
    }
    for t in tasks {
        let (offset, len, results) = t.await.unwrap();
        let (files, got) = parse(&results);
        assert!(files, "RPC-over-RDMA takes file ranges");
        let at = offset as usize;
        assert!(
            got[..] == want[at..at + len as usize],
            "crc {crc}: {offset} {len}"
        );
    }
    // A range running past the end of the file: the length announced,
    // zeros for what the file does not have.
    for chunk in [true, false] {
        let results = client
            .call(call(FILE_LEN as u32 - 5, 70_000, chunk))
            .await
            .unwrap();
        let (_, got) = parse(&results);
        assert_eq!(got.len(), 70_000);
        assert_eq!(&got[..5], &want[FILE_LEN - 5..]);
        assert!(got[5..].iter().all(|&b| b == 0), "crc {crc}, chunk {chunk}");
    }
    let s = client.stats();
    assert!(s.write_chunk_replies >= 20, "{s:?}");
    client.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_ranges_arrive_byte_exact_over_rdma() {
    ranges_arrive(false, 40).await;
    ranges_arrive(true, 50).await;
}
