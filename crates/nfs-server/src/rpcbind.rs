//! A minimal rpcbind (RFC 1833): the port mapper v2 (§3: NULL, GETPORT,
//! DUMP) and rpcbind v3/v4 (§2: NULL, GETADDR, DUMP, GETTIME, and v4
//! GETVERSADDR), answering from a fixed table of this server's own
//! programs so a client that asks port 111 finds NFS and MOUNT. SET and
//! UNSET are refused (FALSE): other programs cannot register.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use oncrpc::{CallContext, RpcService, ServiceError};
use xdr::{Decode, Decoder, Encode, Encoder, Error, XdrBuf};

/// The rpcbind program number (RFC 1833 §2, §3).
pub const RPCBIND_PROGRAM: u32 = 100_000;
/// IPPROTO_TCP, the `prot` of a port mapper mapping (RFC 1833 §3).
pub const IPPROTO_TCP: u32 = 6;
/// Longest netid, address or owner string accepted in an `rpcb`.
/// RFC 1833 leaves the strings unbounded; real ones are short.
pub const RPCB_MAXSTR: usize = 1024;

/// One registered program: served over TCP on `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// Program number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// TCP port.
    pub port: u16,
}

/// The table of registrations, shared with the server that fills it once
/// its listeners are bound.
pub type Registry = Arc<Mutex<Vec<Registration>>>;

/// `rpcb` (RFC 1833 §2.1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rpcb {
    /// Program.
    pub r_prog: u32,
    /// Version.
    pub r_vers: u32,
    /// Network id ("tcp", "tcp6", ...).
    pub r_netid: Bytes,
    /// Universal address.
    pub r_addr: Bytes,
    /// Owner.
    pub r_owner: Bytes,
}

/// RFC 1833 §2.1 `struct rpcb`.
impl Encode for Rpcb {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.r_prog);
        enc.put_u32(self.r_vers);
        enc.put_string(&self.r_netid);
        enc.put_string(&self.r_addr);
        enc.put_string(&self.r_owner);
    }
}

impl<'a> Decode<'a> for Rpcb {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(Self {
            r_prog: dec.u32()?,
            r_vers: dec.u32()?,
            r_netid: dec.opaque_bytes(RPCB_MAXSTR)?,
            r_addr: dec.opaque_bytes(RPCB_MAXSTR)?,
            r_owner: dec.opaque_bytes(RPCB_MAXSTR)?,
        })
    }
}

/// The universal address of an IPv4/IPv6 address and port (RFC 5665
/// §4.2.3.3, §4.2.3.4): the address, then the port's two bytes in
/// decimal.
pub fn universal_addr(ip: IpAddr, port: u16) -> String {
    format!("{}.{}.{}", ip, port >> 8, port & 0xff)
}

/// The rpcbind service.
#[derive(Debug)]
pub struct RpcbindService {
    registry: Registry,
    addr: IpAddr,
}

impl RpcbindService {
    /// A service answering from `registry`, advertising `addr` in
    /// universal addresses (an unspecified address is replaced by the
    /// loopback address for a caller on loopback).
    pub fn new(registry: Registry, addr: IpAddr) -> Self {
        Self { registry, addr }
    }

    fn entries(&self) -> Vec<Registration> {
        self.registry.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn getport(&self, prog: u32, vers: u32, prot: u32) -> u32 {
        if prot != IPPROTO_TCP {
            return 0;
        }
        self.entries()
            .into_iter()
            .find(|r| r.prog == prog && r.vers == vers)
            .map_or(0, |r| u32::from(r.port))
    }

    fn ip_for(&self, caller: Option<IpAddr>) -> IpAddr {
        match (self.addr.is_unspecified(), caller) {
            (true, Some(c)) if c.is_loopback() => c,
            _ => self.addr,
        }
    }

    fn netid(&self) -> &'static [u8] {
        if self.addr.is_ipv6() {
            b"tcp6"
        } else {
            b"tcp"
        }
    }

    fn getaddr(&self, q: &Rpcb, caller: Option<IpAddr>) -> String {
        let netid_ok = q.r_netid.is_empty() || q.r_netid[..] == *self.netid();
        self.entries()
            .into_iter()
            .find(|r| netid_ok && r.prog == q.r_prog && r.vers == q.r_vers)
            .map(|r| universal_addr(self.ip_for(caller), r.port))
            .unwrap_or_default()
    }
}

/// RFC 1833 §2.2 (rpcbind v3/v4) and §3 (port mapper v2).
impl RpcService for RpcbindService {
    fn program(&self) -> u32 {
        RPCBIND_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        2..=4
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        let caller = ctx.peer.addr.map(|a| a.ip());
        let mut dec = Decoder::from_bytes(&args);
        let mut out = XdrBuf::new();
        match (ctx.vers, ctx.proc_) {
            (_, 0) => {}
            // SET, UNSET: refused.
            (2, 1 | 2) => {
                let _ = (dec.u32()?, dec.u32()?, dec.u32()?, dec.u32()?);
                out.put_bool(false);
            }
            (3 | 4, 1 | 2) => {
                let _: Rpcb = dec.decode()?;
                out.put_bool(false);
            }
            // PMAPPROC_GETPORT(mapping) -> port.
            (2, 3) => {
                let (prog, vers, prot, _port) = (dec.u32()?, dec.u32()?, dec.u32()?, dec.u32()?);
                out.put_u32(self.getport(prog, vers, prot));
            }
            // PMAPPROC_DUMP -> pmaplist.
            (2, 4) => {
                for r in self.entries() {
                    out.put_bool(true);
                    for v in [r.prog, r.vers, IPPROTO_TCP, u32::from(r.port)] {
                        out.put_u32(v);
                    }
                }
                out.put_bool(false);
            }
            // RPCBPROC_GETADDR, and v4 RPCBPROC_GETVERSADDR (9).
            (3 | 4, 3) | (4, 9) => {
                let q: Rpcb = dec.decode()?;
                out.put_string(self.getaddr(&q, caller).as_bytes());
            }
            // RPCBPROC_DUMP -> rpcblist.
            (3 | 4, 4) => {
                let ip = self.ip_for(caller);
                for r in self.entries() {
                    out.put_bool(true);
                    Rpcb {
                        r_prog: r.prog,
                        r_vers: r.vers,
                        r_netid: Bytes::from_static(self.netid()),
                        r_addr: Bytes::from(universal_addr(ip, r.port)),
                        r_owner: Bytes::from_static(b"superuser"),
                    }
                    .encode(&mut out);
                }
                out.put_bool(false);
            }
            // RPCBPROC_GETTIME.
            (3 | 4, 6) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                out.put_u32(u32::try_from(now).unwrap_or(u32::MAX));
            }
            _ => return Err(ServiceError::ProcUnavail),
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_address_splits_the_port() {
        assert_eq!(
            universal_addr(IpAddr::from([127, 0, 0, 1]), 2049),
            "127.0.0.1.8.1"
        );
    }

    #[test]
    fn getport_and_getaddr_find_registered_programs() {
        let reg: Registry = Arc::new(Mutex::new(vec![Registration {
            prog: 100_003,
            vers: 3,
            port: 2049,
        }]));
        let s = RpcbindService::new(reg, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(s.getport(100_003, 3, IPPROTO_TCP), 2049);
        assert_eq!(s.getport(100_003, 4, IPPROTO_TCP), 0);
        assert_eq!(s.getport(100_003, 3, 17), 0);
        let q = Rpcb {
            r_prog: 100_003,
            r_vers: 3,
            r_netid: Bytes::from_static(b"tcp"),
            ..Rpcb::default()
        };
        let lo = Some(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(s.getaddr(&q, lo), "127.0.0.1.8.1");
        let udp = Rpcb {
            r_netid: Bytes::from_static(b"udp"),
            ..q
        };
        assert_eq!(s.getaddr(&udp, lo), "");
    }

    #[test]
    fn rpcb_round_trips() {
        let r = Rpcb {
            r_prog: 100_005,
            r_vers: 3,
            r_netid: Bytes::from_static(b"tcp"),
            r_addr: Bytes::from_static(b"1.2.3.4.0.111"),
            r_owner: Bytes::new(),
        };
        let wire = xdr::to_bytes(&r);
        let mut expect = vec![
            0, 1, 0x86, 0xa5, 0, 0, 0, 3, 0, 0, 0, 3, b't', b'c', b'p', 0, 0, 0, 0, 13,
        ];
        expect.extend_from_slice(b"1.2.3.4.0.111\0\0\0");
        expect.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(&wire[..], &expect[..]);
        assert_eq!(xdr::from_slice::<Rpcb>(&wire), Ok(r));
    }
}
