//! Replies whose bulk data is a file range (`XdrBuf::put_file`) over
//! RPC-over-RDMA on softrnic: a range that goes by write chunk is sent
//! from the file (RDMA Writes from the page cache, `rnic::ChainWr::WriteFile`),
//! one that stays inline or goes by reply chunk is read in; byte-exact
//! either way, with and without MPA CRC, zeros for a file that ended early.
#![cfg(feature = "transport")]

use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::client::{ClientTransport, DdpReplyHint, ReplyHint, RpcCall};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{CallContext, RpcService, Server, ServiceError};
use rpcrdma::transport::{RdmaClient, RdmaClientConfig, RdmaListener, RdmaServerConfig};
use softrnic::{SoftConfig, SoftDevice};
use xdr::{Decoder, Encoder, FileSource, XdrBuf};

const PROG: u32 = 0x2000_0078;

#[derive(Debug)]
struct File(std::fs::File);

impl FileSource for File {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, offset)
    }
}

/// Procedure 1, arguments `offset, len`: replies `sends_files` (as a
/// u32), `len` bytes of the file at `offset` as DDP-eligible opaque data
/// left in the file when the transport sends files, then a trailer word.
struct Ranges {
    file: Arc<File>,
}

impl RpcService for Ranges {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let mut dec = Decoder::from_bytes(&args);
        let offset: u32 = dec.u32()?;
        let len: u32 = dec.u32()?;
        let mut out = XdrBuf::new();
        out.put_u32(u32::from(ctx.sends_files()));
        out.put_file(
            Arc::clone(&self.file) as _,
            offset.into(),
            len as usize,
            true,
        );
        out.put_u32(0xfeed_f00d);
        Ok(out)
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ (i >> 11) as u8)
        .collect()
}

fn temp_file(name: &str, len: usize) -> Arc<File> {
    let path = std::env::temp_dir().join(format!("rpcrdma-{name}-{}", std::process::id()));
    std::fs::write(&path, data(len)).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Arc::new(File(f))
}

/// A call for `len` bytes at `offset`, offering a write chunk for them
/// when `chunk`.
fn call(offset: u32, len: u32, chunk: bool) -> RpcCall {
    let mut args = XdrBuf::new();
    args.put_u32(offset);
    args.put_u32(len);
    RpcCall {
        prog: PROG,
        vers: 1,
        proc_: 1,
        cred: OpaqueAuth::NONE,
        args,
        reply_hint: ReplyHint {
            max_reply_len: 64 + len as usize,
            ddp: chunk.then_some(DdpReplyHint {
                position: 8,
                max_len: len as usize,
            }),
        },
    }
}

fn parse(results: &Bytes) -> (bool, Bytes) {
    let mut dec = Decoder::from_bytes(results);
    let files = dec.u32().unwrap() == 1;
    let data = dec.opaque_bytes(usize::MAX).unwrap();
    assert_eq!(dec.u32().unwrap(), 0xfeed_f00d);
    dec.finish().unwrap();
    (files, data)
}

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
