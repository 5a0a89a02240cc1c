//! RDMA Writes from a file range ([`rnic::ChainWr::WriteFile`]): the
//! software device sends the payload from the page cache with `sendfile`
//! between the FPDU headers and trailers (CRC off) or reads it in (CRC
//! on, or what a full socket does not take); either way the peer places
//! exactly the file's bytes, and zeros where the file ended early.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rnic::{
    Access, ChainWr, CompletionQueue, FileData, QueuePair, SendWr, WcOpcode, WcStatus,
    WorkCompletion, WriteFileWr,
};
use testkit::conformance::connect_pair;

mod common;
use common::Tcp;

#[derive(Debug)]
struct Src(File);

impl FileData for Src {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

async fn next(cq: &CompletionQueue) -> WorkCompletion {
    tokio::time::timeout(Duration::from_secs(20), cq.next())
        .await
        .expect("completion in time")
        .expect("no overflow")
}

/// A file of `len` patterned bytes, opened for reading, and its bytes.
fn source(name: &str, len: usize) -> (Arc<Src>, Vec<u8>) {
    let data: Vec<u8> = (0..len as u32).map(|i| (i * 13 + i / 509) as u8).collect();
    let path = std::env::temp_dir().join(format!(
        "softrnic-file-writes-{}-{name}",
        std::process::id()
    ));
    File::create(&path).unwrap().write_all(&data).unwrap();
    let f = File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    (Arc::new(Src(f)), data)
}

/// Eight 1 MiB Writes from one file posted as one chain with a Send
/// behind them: more than the socket takes at once, so the first FPDUs go
/// by `sendfile` and the rest are read in; a last Write runs 1,000 bytes
/// past the end of the file. The peer's region holds the file's bytes and
/// zeros, with CRC off and on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_from_a_file_place_its_bytes() {
    for crc in [false, true] {
        const MIB: usize = 1 << 20;
        const N: usize = 8;
        let p = connect_pair(&Tcp::quick_crc(crc), 0, 16).await;
        let (file, data) = source(&format!("crc-{crc}"), N * MIB + 4321);
        let target = p
            .server_pd
            .register(BytesMut::zeroed((N + 1) * MIB), Access::REMOTE_WRITE)
            .unwrap();
        let mut chain: Vec<ChainWr> = (0..N)
            .map(|i| {
                ChainWr::WriteFile(WriteFileWr {
                    wr_id: i as u64,
                    file: file.clone(),
                    // Odd offsets and lengths: FPDUs with pad bytes.
                    offset: (i * MIB + 7) as u64,
                    len: MIB - 3,
                    remote_stag: target.stag(),
                    remote_to: (i * MIB) as u64,
                })
            })
            .collect();
        // The last one reads past the end of the file: zeros there.
        chain.push(ChainWr::WriteFile(WriteFileWr {
            wr_id: N as u64,
            file: file.clone(),
            offset: (N * MIB + 4321 - 1000) as u64,
            len: 3000,
            remote_stag: target.stag(),
            remote_to: (N * MIB) as u64,
        }));
        chain.push(ChainWr::Send(SendWr {
            wr_id: 99,
            data: vec![Bytes::from_static(b"done")],
            ..Default::default()
        }));
        p.cqp.post_chain(chain).unwrap();
        let got = next(p.sqp.recv_cq()).await;
        assert_eq!(
            (got.opcode, got.status),
            (WcOpcode::Recv, WcStatus::Success)
        );
        for _ in 0..N + 2 {
            assert_eq!(next(p.cqp.send_cq()).await.status, WcStatus::Success);
        }
        let placed = target.invalidate().buf;
        for i in 0..N {
            let want = &data[i * MIB + 7..(i + 1) * MIB + 4];
            let got = &placed[i * MIB..(i + 1) * MIB - 3];
            assert!(got == want, "crc {crc}: write {i} placed the file's bytes");
        }
        let tail = &placed[N * MIB..N * MIB + 3000];
        assert_eq!(&tail[..1000], &data[N * MIB + 4321 - 1000..], "crc {crc}");
        assert!(
            tail[1000..].iter().all(|&b| b == 0),
            "crc {crc}: zeros past the end"
        );
    }
}
