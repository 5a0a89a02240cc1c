//! Connection admission: a total cap and a per client address cap.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// The caps of a [`ConnLimiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections open at once, all clients together.
    pub max_total: usize,
    /// Connections open at once from one client address.
    pub max_per_client: usize,
}

impl Default for ConnLimits {
    /// 4096 in total, 256 per client address: far above what a Linux
    /// client opens (one connection per server, `nconnect` up to 16) and
    /// far below the descriptor limit the server raises itself to.
    fn default() -> Self {
        Self {
            max_total: 4096,
            max_per_client: 256,
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_total` connections are open.
    Total {
        /// The cap.
        max: usize,
    },
    /// `max_per_client` connections are open from this address.
    PerClient {
        /// The client address.
        addr: IpAddr,
        /// The cap.
        max: usize,
    },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Total { max } => write!(f, "{max} connections open in total"),
            Self::PerClient { addr, max } => write!(f, "{max} connections open from {addr}"),
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// Counts open connections and admits new ones within [`ConnLimits`].
///
/// Addresses are compared in canonical form, so an IPv4 client reaching a
/// dual-stack listener as `::ffff:a.b.c.d` counts as `a.b.c.d`. Memory is
/// one map entry per address with a connection open, so at most
/// `max_total` entries.
#[derive(Debug)]
pub struct ConnLimiter {
    limits: ConnLimits,
    counts: Mutex<Counts>,
}

impl ConnLimiter {
    /// A limiter with nothing open.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// The caps.
    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `addr`, or says which cap it would exceed.
    /// The connection counts until the returned slot is dropped.
    pub fn admit(self: &Arc<Self>, addr: IpAddr) -> Result<ConnSlot, Refused> {
        let addr = addr.to_canonical();
        let mut c = self.lock();
        if c.total >= self.limits.max_total {
            return Err(Refused::Total {
                max: self.limits.max_total,
            });
        }
        let n = c.per_client.get(&addr).copied().unwrap_or(0);
        if n >= self.limits.max_per_client {
            return Err(Refused::PerClient {
                addr,
                max: self.limits.max_per_client,
            });
        }
        c.total += 1;
        c.per_client.insert(addr, n + 1);
        Ok(ConnSlot {
            limiter: Arc::clone(self),
            addr,
        })
    }

    /// Connections open.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Connections open from `addr`.
    pub fn open_from(&self, addr: IpAddr) -> usize {
        let addr = addr.to_canonical();
        self.lock().per_client.get(&addr).copied().unwrap_or(0)
    }

    fn release(&self, addr: IpAddr) {
        let mut c = self.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_client.get_mut(&addr) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_client.remove(&addr);
            }
        }
    }
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct ConnSlot {
    limiter: Arc<ConnLimiter>,
    addr: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.limiter.release(self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn caps_each_client_and_the_total_and_frees_on_drop() {
        let l = ConnLimiter::new(ConnLimits {
            max_total: 3,
            max_per_client: 2,
        });
        let a1 = l.admit(ip("192.0.2.1")).unwrap();
        let _a2 = l.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert_eq!(
            l.admit(ip("192.0.2.1")).unwrap_err(),
            Refused::PerClient {
                addr: ip("192.0.2.1"),
                max: 2
            }
        );
        let _b = l.admit(ip("192.0.2.2")).unwrap();
        assert_eq!(
            l.admit(ip("192.0.2.3")).unwrap_err(),
            Refused::Total { max: 3 }
        );
        drop(a1);
        assert_eq!(l.open(), 2);
        assert_eq!(l.open_from(ip("192.0.2.1")), 1);
        assert!(l.admit(ip("192.0.2.3")).is_ok());
    }

    #[test]
    fn forgets_addresses_with_nothing_open() {
        let l = ConnLimiter::new(ConnLimits::default());
        for i in 0..1000u32 {
            drop(l.admit(IpAddr::from(i.to_be_bytes())).unwrap());
        }
        assert_eq!(l.open(), 0);
        assert!(l.lock().per_client.is_empty());
    }
}
