//! `nconnect=N`: one mount over N connections to the same server, its
//! calls spread over them round-robin, as Linux's `nconnect` mount option
//! does (nfs(5); the kernel's RPC client rotates its transports per
//! call). Each connection is a full transport of its own (its XIDs,
//! slots, reconnection), so a call and its retransmissions stay on one
//! connection; only the choice of connection for each new call rotates.
//!
//! Bounded as Linux bounds it: 1 to [`MAX_NCONNECT`] (16) connections.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use oncrpc::client::{CallSigner, ClientTransport, RpcCall};
use oncrpc::RpcError;

/// Most connections one mount may open (Linux's `NFS_MAX_CONNECTIONS`:
/// a mount asking more fails).
pub const MAX_NCONNECT: usize = 16;

/// Why a connection count was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("nconnect={0}: between 1 and {MAX_NCONNECT} connections")]
pub struct BadNconnect(pub usize);

/// Checks a connection count: 1 to [`MAX_NCONNECT`].
pub fn check_nconnect(n: usize) -> Result<usize, BadNconnect> {
    if (1..=MAX_NCONNECT).contains(&n) {
        Ok(n)
    } else {
        Err(BadNconnect(n))
    }
}

/// Several transports to one server as one: each call goes to the next
/// in turn.
#[derive(Debug)]
pub struct Nconnect<T> {
    conns: Vec<T>,
    next: AtomicUsize,
}

impl<T> Nconnect<T> {
    /// `conns` as one transport; between 1 and [`MAX_NCONNECT`] of them.
    pub fn new(conns: Vec<T>) -> Result<Self, BadNconnect> {
        check_nconnect(conns.len())?;
        Ok(Self {
            conns,
            next: AtomicUsize::new(0),
        })
    }

    /// One transport (`nconnect=1`, the default).
    pub fn one(conn: T) -> Self {
        Self {
            conns: vec![conn],
            next: AtomicUsize::new(0),
        }
    }

    /// The connections, in the order calls rotate over them.
    pub fn connections(&self) -> &[T] {
        &self.conns
    }

    /// The connection the next call goes to.
    fn pick(&self) -> &T {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        &self.conns[i]
    }
}

impl<T: ClientTransport> ClientTransport for Nconnect<T> {
    fn call(&self, call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        self.pick().call(call)
    }

    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        self.pick().call_signed(call, signer)
    }

    fn call_into(
        &self,
        call: RpcCall,
        dst: BytesMut,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        self.pick().call_into(call, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncrpc::client::ReplyHint;
    use oncrpc::msg::OpaqueAuth;

    /// A transport that answers every call with its own number.
    struct Numbered(u8);

    impl ClientTransport for Numbered {
        fn call(&self, _call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
            let n = self.0;
            async move { Ok(Bytes::from(vec![n])) }
        }
    }

    fn call() -> RpcCall {
        RpcCall {
            prog: 100003,
            vers: 3,
            proc_: 0,
            cred: OpaqueAuth::NONE,
            args: xdr::XdrBuf::new(),
            reply_hint: ReplyHint::default(),
        }
    }

    #[tokio::test]
    async fn calls_rotate_over_the_connections_in_turn() {
        let n = Nconnect::new((0..4).map(Numbered).collect()).unwrap();
        let mut got = Vec::new();
        for _ in 0..10 {
            got.push(n.call(call()).await.unwrap()[0]);
        }
        assert_eq!(got, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]);
        // call_into goes the same way round.
        let r = n.call_into(call(), BytesMut::new()).await.unwrap();
        assert_eq!(r[..], [2]);
    }

    #[test]
    fn the_count_is_bounded_as_linux_bounds_it() {
        assert_eq!(check_nconnect(0), Err(BadNconnect(0)));
        assert_eq!(check_nconnect(1), Ok(1));
        assert_eq!(check_nconnect(16), Ok(16));
        assert_eq!(check_nconnect(17), Err(BadNconnect(17)));
        assert!(Nconnect::new((0..17).map(Numbered).collect()).is_err());
        assert!(Nconnect::<Numbered>::new(Vec::new()).is_err());
    }
}
