//! NFSv4.0 callbacks (RFC 7530 §10.2.1, §16.33, §15.2 of the callback
//! program): a 4.0 client names its callback service in SETCLIENTID
//! (`cb_program`, `r_netid`/`r_addr`, `callback_ident`), and the server
//! calls it on a TCP connection of its own, not on the client's
//! connection as in 4.1. Over RPC-over-RDMA the forward channel is RDMA
//! and the callbacks still go over TCP (RFC 8267 §4: NFSv4.0 has no
//! bi-directional RPC-over-RDMA).
//!
//! Once SETCLIENTID_CONFIRM confirms the address it becomes the client's
//! back-channel path ([`super::deleg::DelegTable::bind_v40`]); the server
//! probes it with CB_NULL before granting a delegation (RFC 7530 §10.2.1:
//! "the server MUST verify the callback path") and recalls by
//! CB_COMPOUND { CB_RECALL } with minor version 0 and the client's
//! `callback_ident`, with no CB_SEQUENCE ([`super::callback`]).
//!
//! Bounds: one connection per client, at most [`MAX_CONNS`] at once
//! (limit `nfs4.v40_callback_conns`: beyond it no connection, so no
//! delegation); connecting and each callback are bounded by the callback
//! timeout (`Callbacks::timeout`, 5 s by default); a failed connection is
//! forgotten and made again at the next callback. Only `tcp` and `tcp6`
//! addresses are called; any other netid leaves the client without
//! delegations.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nfs::v4::CbClient4;
use oncrpc::client::{ClientConfig, RetransmitPolicy};
use oncrpc::limits::Limit;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};

static CONNS: Limit = Limit::new("nfs4.v40_callback_conns");

/// Most callback connections to 4.0 clients open at once.
pub(crate) const MAX_CONNS: usize = 1024;

/// Where a 4.0 client takes its callbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V40Target {
    pub(crate) addr: SocketAddr,
    /// Sent back in every CB_COMPOUND's `callback_ident`.
    pub(crate) ident: u32,
}

/// The target of `cb` (RFC 7530 §16.33: `r_netid` "tcp" or "tcp6" and a
/// universal address, RFC 5665 §5.2.3.3: the host, then the port's two
/// bytes as decimals, all dot-separated); `None` for another netid or a
/// malformed address.
pub(crate) fn target(cb: &CbClient4, ident: u32) -> Option<V40Target> {
    let netid = std::str::from_utf8(&cb.location.netid.0).ok()?;
    if netid != "tcp" && netid != "tcp6" {
        return None;
    }
    let uaddr = std::str::from_utf8(&cb.location.addr.0).ok()?;
    let mut parts = uaddr.rsplitn(3, '.');
    let lo: u8 = parts.next()?.parse().ok()?;
    let hi: u8 = parts.next()?.parse().ok()?;
    let ip: IpAddr = parts.next()?.parse().ok()?;
    if ip.is_unspecified() || (netid == "tcp") != ip.is_ipv4() {
        return None;
    }
    let port = u16::from_be_bytes([hi, lo]);
    (port != 0).then_some(V40Target {
        addr: SocketAddr::new(ip, port),
        ident,
    })
}

/// The credential of callbacks to 4.0 clients: AUTH_SYS as root of this
/// host (Linux's callback service refuses AUTH_NONE for anything but
/// CB_NULL; knfsd sends its machine credential).
pub(crate) fn credential() -> OpaqueAuth {
    AuthSys {
        stamp: 0,
        machinename: bytes::Bytes::from_static(b"nfsrdma"),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    }
    .to_opaque_auth()
}

/// The open callback connections, one per 4.0 client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Dialer {
    conns: Arc<Mutex<HashMap<u64, (SocketAddr, TcpClient)>>>,
    max: usize,
}

impl Default for Dialer {
    fn default() -> Self {
        Self::with_max(MAX_CONNS)
    }
}

impl core::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Dialer").finish_non_exhaustive()
    }
}

impl Dialer {
    /// A dialer keeping at most `max` connections.
    pub(crate) fn with_max(max: usize) -> Self {
        Self {
            conns: Arc::default(),
            max,
        }
    }

    /// The connection to `clientid`'s callback service at `addr`, made
    /// within `timeout` if there is none; `None` when it cannot be made.
    /// `live` tells which clients still have a 4.0 path, so the
    /// connections of clients gone make room first.
    pub(crate) async fn get(
        &self,
        clientid: u64,
        addr: SocketAddr,
        timeout: Duration,
        live: impl Fn(u64) -> bool,
    ) -> Option<TcpClient> {
        if let Some(c) = self.cached(clientid, addr) {
            return Some(c);
        }
        if !self.room(clientid, live) {
            CONNS.trip(format_args!(
                "{} NFSv4.0 callback connections open: client {clientid:#x} gets no delegations",
                self.max
            ));
            return None;
        }
        let cfg = ClientConfig {
            retransmit: RetransmitPolicy {
                timeout: Some(timeout),
                max_retransmits: 0,
            },
            ..ClientConfig::default()
        };
        let seed = (clientid as u32) ^ 0x4000_0000;
        let conn = TcpClient::connect(addr, seed, cfg, TcpConfig::default());
        let c = match tokio::time::timeout(timeout, conn).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::info!(clientid, %addr, error = %e, "NFSv4.0 callback connection refused");
                return None;
            }
            Err(_) => {
                tracing::info!(clientid, %addr, "NFSv4.0 callback connection timed out");
                return None;
            }
        };
        if let Ok(mut m) = self.conns.lock() {
            m.insert(clientid, (addr, c.clone()));
        }
        Some(c)
    }

    fn cached(&self, clientid: u64, addr: SocketAddr) -> Option<TcpClient> {
        let m = self.conns.lock().ok()?;
        m.get(&clientid)
            .filter(|(a, _)| *a == addr)
            .map(|(_, c)| c.clone())
    }

    /// Whether one more connection fits, after dropping those of clients
    /// no longer `live`.
    fn room(&self, clientid: u64, live: impl Fn(u64) -> bool) -> bool {
        let Ok(mut m) = self.conns.lock() else {
            return false;
        };
        m.remove(&clientid);
        if m.len() >= self.max {
            m.retain(|c, _| live(*c));
        }
        m.len() < self.max
    }

    /// Forgets `clientid`'s connection (after a failed callback), so the
    /// next callback connects again.
    pub(crate) fn forget(&self, clientid: u64) {
        if let Ok(mut m) = self.conns.lock() {
            m.remove(&clientid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs::v4::Netaddr4;
    use xdr::Bounded;

    fn cb(netid: &'static str, addr: &'static str) -> CbClient4 {
        CbClient4 {
            program: 0x4000_0000,
            location: Netaddr4 {
                netid: Bounded(bytes::Bytes::from_static(netid.as_bytes())),
                addr: Bounded(bytes::Bytes::from_static(addr.as_bytes())),
            },
        }
    }

    /// A hostile set of 4.0 clients cannot make the server hold more
    /// callback connections than the bound; those of clients gone make
    /// room; a dead address is given up within the timeout.
    #[tokio::test]
    async fn callback_connections_are_bounded() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let d = Dialer::with_max(2);
        let t = Duration::from_secs(2);
        let before = oncrpc::limits::snapshot()
            .into_iter()
            .find(|(n, _)| *n == "nfs4.v40_callback_conns")
            .map_or(0, |(_, c)| c);
        assert!(d.get(1, addr, t, |_| true).await.is_some());
        assert!(d.get(2, addr, t, |_| true).await.is_some());
        assert!(d.get(1, addr, t, |_| true).await.is_some(), "cached");
        assert!(
            d.get(3, addr, t, |_| true).await.is_none(),
            "over the bound"
        );
        let after = oncrpc::limits::snapshot()
            .into_iter()
            .find(|(n, _)| *n == "nfs4.v40_callback_conns")
            .map_or(0, |(_, c)| c);
        assert!(after > before, "the limit tripped");
        assert!(
            d.get(3, addr, t, |c| c != 1).await.is_some(),
            "client 1 gone"
        );
        assert_eq!(d.conns.lock().unwrap().len(), 2);
        // Nothing listens here: refused at once.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        d.forget(2);
        assert!(d.get(4, closed, t, |_| true).await.is_none());
    }

    #[test]
    fn universal_addresses_become_socket_addresses() {
        let t = target(&cb("tcp", "10.0.2.15.3.232"), 7).unwrap();
        assert_eq!(t.addr, "10.0.2.15:1000".parse().unwrap());
        assert_eq!(t.ident, 7);
        let t6 = target(&cb("tcp6", "fe80::1.0.80"), 1).unwrap();
        assert_eq!(t6.addr, "[fe80::1]:80".parse().unwrap());
        for (netid, addr) in [
            ("rdma", "10.0.2.15.3.232"),
            ("udp", "10.0.2.15.3.232"),
            ("tcp", "10.0.2.15.3"),
            ("tcp", "10.0.2.15.3.256"),
            ("tcp", "10.0.2.15.0.0"),
            ("tcp", "0.0.0.0.3.232"),
            ("tcp6", "10.0.2.15.3.232"),
            ("tcp", "fe80::1.0.80"),
            ("tcp", ""),
        ] {
            assert_eq!(target(&cb(netid, addr), 0), None, "{netid} {addr}");
        }
    }
}
