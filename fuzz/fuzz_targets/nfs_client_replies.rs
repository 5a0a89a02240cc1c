//! The NFSv3 client fed arbitrary procedure results: every reply to every
//! call comes from the fuzz input (2-byte length-prefixed records), and
//! the high-level helpers (FSINFO at mount, path resolution, READDIRPLUS
//! iteration, pipelined reads and writes with COMMIT) must end with a
//! value or a typed error, never a panic or a hang.
#![no_main]

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs::v3::{NfsFh3, StableHow};
use nfs_client::{IoOptions, Mount, MountClient, Nfs3Client};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, RpcCall, RpcError};

struct Scripted(Mutex<VecDeque<Bytes>>);

impl ClientTransport for Scripted {
    fn call(&self, _call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        let next = self.0.lock().ok().and_then(|mut q| q.pop_front());
        std::future::ready(next.ok_or(RpcError::ConnectionClosed))
    }
}

/// Polls to completion: every scripted reply is ready at once, so a
/// future still pending after many polls is a hang.
fn run<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("client future never completed");
}

fn records(mut data: &[u8]) -> VecDeque<Bytes> {
    let mut out = VecDeque::new();
    while let [a, b, rest @ ..] = data {
        let n = usize::from(u16::from_be_bytes([*a, *b])).min(rest.len());
        out.push_back(Bytes::copy_from_slice(&rest[..n]));
        data = &rest[n..];
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&op, rest)) = data.split_first() else {
        return;
    };
    let replies = records(rest);
    let fh = NfsFh3::new(&[1; 8]).unwrap_or_default();
    if op % 8 == 7 {
        let mc = MountClient::new(Scripted(Mutex::new(replies)), OpaqueAuth::NONE);
        let _ = run(mc.mnt("/export"));
        let _ = run(mc.export());
        return;
    }
    let io = IoOptions {
        in_flight: 1 + usize::from(op >> 4),
        block_size: Some(4096),
        dir_bytes: Some(1024),
        commit_window: 16 << 10,
        ..IoOptions::default()
    };
    let nfs = Nfs3Client::new(Scripted(Mutex::new(replies)), OpaqueAuth::NONE);
    let Ok(m) = run(Mount::new(nfs, fh.clone(), io)) else {
        return;
    };
    match op % 8 {
        0 => {
            let _ = run(m.resolve("a/b/../c"));
        }
        1 => {
            let _ = run(m.list_dir(&fh));
        }
        2 => {
            let mut buf = vec![0u8; 20_000];
            if let Ok(n) = run(m.read_at(&fh, 0, &mut buf)) {
                assert!(n <= buf.len());
            }
        }
        3 => {
            let _ = run(m.read_file(&fh));
        }
        4 => {
            let mut w = m.writer(&fh, 0);
            if run(w.write(Bytes::from(vec![7u8; 40_000]))).is_ok() {
                let _ = run(w.finish());
            }
        }
        5 => {
            let c = m.client();
            let _ = run(c.write(&fh, 0, Bytes::from_static(b"x"), StableHow::UNSTABLE));
            let _ = run(c.readlink(&fh));
            let _ = run(c.commit(&fh, 0, 0));
        }
        _ => {
            let _ = run(m.write_file("d/f", 0o644, Bytes::from(vec![1u8; 9000])));
        }
    }
});
