//! An RPC test service whose replies carry a byte range of an open file
//! (`XdrBuf::put_file`), and the client side of its one procedure: the
//! TCP tests (sent with `sendfile`) and the RPC-over-RDMA tests (RDMA
//! Writes from the file) drive the same service.

use std::io;
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use oncrpc::client::{DdpReplyHint, ReplyHint, RpcCall};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decoder, Encoder, FileSource, XdrBuf};

/// The service's program number.
pub const PROG: u32 = 0x2000_0077;

/// The trailer word after the data of every reply.
pub const TRAILER: u32 = 0xfeed_f00d;

/// An open file as a [`FileSource`].
#[derive(Debug)]
pub struct File(pub std::fs::File);

impl FileSource for File {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, offset)
    }
}

/// `len` bytes of a pattern that repeats neither every 256 bytes nor
/// every page: byte `i` is `i * 7` xor `i / 2048`.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ (i >> 11) as u8)
        .collect()
}

/// A file holding [`pattern`]`(len)`, open for reading and already
/// unlinked (nothing is left behind); `tag` names it while it is made.
pub fn temp_file(tag: &str, len: usize) -> Arc<File> {
    let path = std::env::temp_dir().join(format!("testkit-{tag}-{}", std::process::id()));
    std::fs::write(&path, pattern(len)).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    Arc::new(File(f))
}

/// Program [`PROG`] version 1, procedure 1, arguments `offset, len`:
/// replies `sends_files` (as a u32), `len` bytes of the file at `offset`
/// as DDP-eligible opaque data left in the file when the transport sends
/// files (zeros past its end), then [`TRAILER`].
#[derive(Debug)]
pub struct Ranges {
    /// The file the ranges are taken from.
    pub file: Arc<File>,
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
        out.put_u32(TRAILER);
        Ok(out)
    }
}

/// A call of [`Ranges`] for `len` bytes at `offset`, offering a write
/// chunk for them (RPC-over-RDMA) when `chunk`.
pub fn call(offset: u32, len: u32, chunk: bool) -> RpcCall {
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

/// The results of a [`Ranges`] reply: whether the server sent from the
/// file, and the data; the trailer and the end checked.
pub fn parse(results: &Bytes) -> (bool, Bytes) {
    let mut dec = Decoder::from_bytes(results);
    let files = dec.u32().unwrap() == 1;
    let data = dec.opaque_bytes(usize::MAX).unwrap();
    assert_eq!(dec.u32().unwrap(), TRAILER);
    dec.finish().unwrap();
    (files, data)
}
