//! The flexible-files layout type (RFC 8435): the bodies that ride inside
//! the generic pNFS types of [`super::pnfs`] when the layout type is
//! `LAYOUT4_FLEX_FILES`. `ff_device_addr4` is the `da_addr_body` of
//! GETDEVICEINFO (§5.1), `ff_layout4` the `loc_body` of LAYOUTGET (§5.1),
//! `ff_layoutreturn4` the `lrf_body` of LAYOUTRETURN (§9.3) and
//! `ff_layoutupdate4` the `lou_body` of LAYOUTSTATS (§9.1).
//!
//! Bounds on what a peer chooses: [`FF_MAX_MIRRORS`] mirrors, each of at
//! most [`FF_MAX_DATA_SERVERS`] data servers with at most
//! [`FF_MAX_FH_VERS`] file handles; [`FF_MAX_NETADDRS`] addresses and
//! [`FF_MAX_VERSIONS`] versions per device; [`FF_MAX_REPORTS`] error and
//! statistics reports per LAYOUTRETURN; netids of [`MAX_NETID`] and
//! universal addresses of [`MAX_UADDR`] bytes.

use xdr::{Bounded, Decode, Encode};

use super::pnfs::{DeviceError4, Deviceid4, IoInfo4};
use super::{NfsFh4, Nfstime4, Stateid4, Utf8Str};

/// Most mirrors decoded from one `ff_layout4` (`ffl_mirrors<>`).
pub const FF_MAX_MIRRORS: usize = 16;
/// Most data servers decoded per mirror (`ffm_data_servers<>`).
pub const FF_MAX_DATA_SERVERS: usize = 16;
/// Most file handles decoded per data server (`ffds_fh_vers<>`).
pub const FF_MAX_FH_VERS: usize = 4;
/// Most addresses decoded per device (`ffda_netaddrs<>`).
pub const FF_MAX_NETADDRS: usize = 16;
/// Most versions decoded per device (`ffda_versions<>`).
pub const FF_MAX_VERSIONS: usize = 8;
/// Most error or statistics reports decoded from one `ff_layoutreturn4`.
pub const FF_MAX_REPORTS: usize = 64;
/// Longest `na_r_netid` decoded ("tcp", "tcp6", "rdma", "rdma6").
pub const MAX_NETID: usize = 16;
/// Longest `na_r_addr` decoded (an IPv6 universal address with port is
/// under 64 bytes).
pub const MAX_UADDR: usize = 128;

/// `ffv4_flags4` FF_FLAGS_NO_LAYOUTCOMMIT (RFC 8435 §5.1): the client
/// need not send LAYOUTCOMMIT.
pub const FF_FLAGS_NO_LAYOUTCOMMIT: u32 = 0x1;
/// FF_FLAGS_NO_IO_THRU_MDS (RFC 8435 §5.1): the client should not fall
/// back to I/O through the metadata server.
pub const FF_FLAGS_NO_IO_THRU_MDS: u32 = 0x2;
/// FF_FLAGS_NO_READ_IO (RFC 8435 §5.1): the layout is not for reads.
pub const FF_FLAGS_NO_READ_IO: u32 = 0x4;
/// FF_FLAGS_WRITE_ONE_MIRROR (RFC 8435 §5.1): one mirror written is enough.
pub const FF_FLAGS_WRITE_ONE_MIRROR: u32 = 0x8;

xdr_struct! {
    /// `netaddr4` (RFC 8881 §3.3.9, RFC 5665 §5.2.3.3): a netid ("tcp",
    /// "rdma", ...) and a universal address ("h1.h2.h3.h4.p1.p2").
    pub struct Netaddr4 {
        /// Network identifier.
        pub netid: Bounded<String, MAX_NETID>,
        /// Universal address.
        pub uaddr: Bounded<String, MAX_UADDR>,
    }
}

impl Netaddr4 {
    /// The address of `sa` with netid `netid` (RFC 5665 §5.2.3.3: the
    /// port as two more decimal octets).
    pub fn from_socket(netid: &str, sa: std::net::SocketAddr) -> Self {
        let (hi, lo) = (sa.port() >> 8, sa.port() & 0xff);
        Self {
            netid: Bounded(netid.to_owned()),
            uaddr: Bounded(format!("{}.{hi}.{lo}", sa.ip())),
        }
    }

    /// The socket address of a universal address, if it is one.
    pub fn to_socket(&self) -> Option<std::net::SocketAddr> {
        let s = &self.uaddr.0;
        let (rest, lo) = s.rsplit_once('.')?;
        let (ip, hi) = rest.rsplit_once('.')?;
        let port = hi.parse::<u8>().ok()? as u16 * 256 + lo.parse::<u8>().ok()? as u16;
        Some(std::net::SocketAddr::new(ip.parse().ok()?, port))
    }
}

xdr_struct! {
    /// `ff_device_versions4` (RFC 8435 §5.1).
    pub struct FfDeviceVersions4 {
        /// NFS version (3 for a loosely coupled NFSv3 data server).
        pub version: u32,
        /// Minor version.
        pub minorversion: u32,
        /// Largest READ.
        pub rsize: u32,
        /// Largest WRITE.
        pub wsize: u32,
        /// Tightly coupled (stateids checked by the data server).
        pub tightly_coupled: bool,
    }
}

xdr_struct! {
    /// `ff_device_addr4` (RFC 8435 §5.1).
    pub struct FfDeviceAddr4 {
        /// `multipath_list4`: the addresses the device answers on.
        pub netaddrs: Bounded<Vec<Netaddr4>, FF_MAX_NETADDRS>,
        /// The NFS versions it serves.
        pub versions: Bounded<Vec<FfDeviceVersions4>, FF_MAX_VERSIONS>,
    }
}

xdr_struct! {
    /// `ff_data_server4` (RFC 8435 §5.1).
    pub struct FfDataServer4 {
        /// The device.
        pub deviceid: Deviceid4,
        /// Relative efficiency (higher is better).
        pub efficiency: u32,
        /// Stateid for the data server (anonymous for NFSv3).
        pub stateid: Stateid4,
        /// The data file's handle, one per version in the device's list.
        pub fh_vers: Bounded<Vec<NfsFh4>, FF_MAX_FH_VERS>,
        /// The synthetic owner to send as the AUTH_SYS uid (§2.2).
        pub user: Utf8Str,
        /// The synthetic group (§2.2).
        pub group: Utf8Str,
    }
}

xdr_struct! {
    /// `ff_mirror4` (RFC 8435 §5.1): the data servers of one copy.
    pub struct FfMirror4 {
        /// One per stripe (one without striping).
        pub data_servers: Bounded<Vec<FfDataServer4>, FF_MAX_DATA_SERVERS>,
    }
}

xdr_struct! {
    /// `ff_layout4` (RFC 8435 §5.1).
    pub struct FfLayout4 {
        /// Stripe unit (0: no striping).
        pub stripe_unit: u64,
        /// The copies.
        pub mirrors: Bounded<Vec<FfMirror4>, FF_MAX_MIRRORS>,
        /// `ffv4_flags4` (FF_FLAGS_*).
        pub flags: u32,
        /// Seconds between LAYOUTSTATS wanted (0: client's choice).
        pub stats_collect_hint: u32,
    }
}

xdr_struct! {
    /// `ff_io_latency4` (RFC 8435 §9.1.1).
    #[derive(Default)]
    pub struct FfIoLatency4 {
        /// Operations requested.
        pub ops_requested: u64,
        /// Bytes requested.
        pub bytes_requested: u64,
        /// Operations completed.
        pub ops_completed: u64,
        /// Bytes completed.
        pub bytes_completed: u64,
        /// Bytes not delivered.
        pub bytes_not_delivered: u64,
        /// Time busy.
        pub total_busy_time: Nfstime4,
        /// Sum of completion times.
        pub aggregate_completion_time: Nfstime4,
    }
}

xdr_struct! {
    /// `ff_layoutupdate4` (RFC 8435 §9.1.2).
    pub struct FfLayoutupdate4 {
        /// The data server's address.
        pub addr: Netaddr4,
        /// The data file.
        pub fhandle: NfsFh4,
        /// Read statistics.
        pub read: FfIoLatency4,
        /// Write statistics.
        pub write: FfIoLatency4,
        /// Period covered.
        pub duration: Nfstime4,
        /// Served from a local cache.
        pub local: bool,
    }
}

xdr_struct! {
    /// `ff_iostats4` (RFC 8435 §9.2.1).
    pub struct FfIostats4 {
        /// Start of the range.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// Reads.
        pub read: IoInfo4,
        /// Writes.
        pub write: IoInfo4,
        /// The device.
        pub deviceid: Deviceid4,
        /// Its statistics.
        pub layoutupdate: FfLayoutupdate4,
    }
}

xdr_struct! {
    /// `ff_ioerr4` (RFC 8435 §9.1.1).
    pub struct FfIoerr4 {
        /// Start of the range.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// Errors per device.
        pub errors: Bounded<Vec<DeviceError4>, FF_MAX_REPORTS>,
    }
}

xdr_struct! {
    /// `ff_layoutreturn4` (RFC 8435 §9.3): the `lrf_body` of a flex-files
    /// LAYOUTRETURN.
    #[derive(Default)]
    pub struct FfLayoutreturn4 {
        /// I/O errors seen.
        pub ioerr_report: Bounded<Vec<FfIoerr4>, FF_MAX_REPORTS>,
        /// I/O statistics.
        pub iostats_report: Bounded<Vec<FfIostats4>, FF_MAX_REPORTS>,
    }
}

/// Decodes a flex-files body carried as an opaque (`loc_body`,
/// `da_addr_body`, `lrf_body`, `lou_body`): the value must span it.
pub fn decode_body<'a, T: Decode<'a>>(body: &'a [u8]) -> Result<T, xdr::Error> {
    xdr::from_slice(body)
}

/// Encodes a flex-files body for an opaque field.
pub fn encode_body<T: Encode>(v: &T) -> super::pnfs::LayoutBody {
    Bounded(xdr::to_bytes(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use xdr::FixedOpaque;

    fn roundtrip<T>(v: &T)
    where
        T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug,
    {
        let wire = xdr::to_bytes(v);
        assert_eq!(v.encoded_len(), wire.len());
        let back: T = decode_body(&wire).unwrap();
        assert_eq!(&back, v);
        for cut in 0..wire.len() {
            assert!(xdr::from_slice::<T>(&wire[..cut]).is_err(), "prefix {cut}");
        }
    }

    fn sid() -> Stateid4 {
        Stateid4 {
            seqid: 2,
            other: FixedOpaque([9; 12]),
        }
    }

    #[test]
    fn netaddr_universal_address_round_trips() {
        let sa: std::net::SocketAddr = "192.168.1.20:20049".parse().unwrap();
        let na = Netaddr4::from_socket("rdma", sa);
        assert_eq!(na.uaddr.0, "192.168.1.20.78.81");
        assert_eq!(na.to_socket(), Some(sa));
        let v6: std::net::SocketAddr = "[::1]:2049".parse().unwrap();
        assert_eq!(Netaddr4::from_socket("tcp6", v6).to_socket(), Some(v6));
        roundtrip(&na);
        let junk = Netaddr4 {
            netid: Bounded("tcp".into()),
            uaddr: Bounded("1.2.3.4.999.1".into()),
        };
        assert_eq!(junk.to_socket(), None);
    }

    #[test]
    fn device_addr_round_trips() {
        roundtrip(&FfDeviceAddr4 {
            netaddrs: Bounded(vec![
                Netaddr4::from_socket("tcp", "127.0.0.1:2049".parse().unwrap()),
                Netaddr4::from_socket("rdma", "127.0.0.1:20049".parse().unwrap()),
            ]),
            versions: Bounded(vec![FfDeviceVersions4 {
                version: 3,
                minorversion: 0,
                rsize: 1 << 20,
                wsize: 1 << 20,
                tightly_coupled: false,
            }]),
        });
    }

    #[test]
    fn layout_round_trips() {
        roundtrip(&FfLayout4 {
            stripe_unit: 0,
            mirrors: Bounded(vec![FfMirror4 {
                data_servers: Bounded(vec![FfDataServer4 {
                    deviceid: FixedOpaque([1; 16]),
                    efficiency: 0,
                    stateid: Stateid4::ANONYMOUS,
                    fh_vers: Bounded(vec![NfsFh4(Bytes::from_static(&[5; 24]))]),
                    user: Bounded(Bytes::from_static(b"40001")),
                    group: Bounded(Bytes::from_static(b"40001")),
                }]),
            }]),
            flags: FF_FLAGS_NO_IO_THRU_MDS,
            stats_collect_hint: 0,
        });
    }

    #[test]
    fn too_many_mirrors_are_refused() {
        let mut wire = vec![0u8; 8];
        wire.extend_from_slice(&(FF_MAX_MIRRORS as u32 + 1).to_be_bytes());
        wire.resize(wire.len() + 4 * (FF_MAX_MIRRORS + 1) + 8, 0);
        assert!(decode_body::<FfLayout4>(&wire).is_err());
        // The same count of empty mirrors within the bound decodes.
        let mut ok = vec![0u8; 8];
        ok.extend_from_slice(&(FF_MAX_MIRRORS as u32).to_be_bytes());
        ok.resize(ok.len() + 4 * FF_MAX_MIRRORS + 8, 0);
        assert_eq!(
            decode_body::<FfLayout4>(&ok).unwrap().mirrors.0.len(),
            FF_MAX_MIRRORS
        );
    }

    #[test]
    fn layoutreturn_body_round_trips() {
        roundtrip(&FfLayoutreturn4::default());
        let lat = FfIoLatency4 {
            ops_requested: 4,
            bytes_requested: 16384,
            ops_completed: 4,
            bytes_completed: 16384,
            bytes_not_delivered: 0,
            total_busy_time: Nfstime4 {
                seconds: 0,
                nseconds: 1000,
            },
            aggregate_completion_time: Nfstime4::default(),
        };
        roundtrip(&FfLayoutreturn4 {
            ioerr_report: Bounded(vec![FfIoerr4 {
                offset: 0,
                length: 4096,
                stateid: sid(),
                errors: Bounded(vec![DeviceError4 {
                    deviceid: FixedOpaque([3; 16]),
                    status: crate::v4::Nfsstat4::NFS4ERR_NXIO,
                    opnum: 38,
                }]),
            }]),
            iostats_report: Bounded(vec![FfIostats4 {
                offset: 0,
                length: u64::MAX,
                stateid: sid(),
                read: IoInfo4 {
                    count: 4,
                    bytes: 16384,
                },
                write: IoInfo4::default(),
                deviceid: FixedOpaque([3; 16]),
                layoutupdate: FfLayoutupdate4 {
                    addr: Netaddr4::from_socket("tcp", "10.0.0.1:2049".parse().unwrap()),
                    fhandle: NfsFh4(Bytes::from_static(&[1; 8])),
                    read: lat.clone(),
                    write: FfIoLatency4::default(),
                    duration: Nfstime4 {
                        seconds: 2,
                        nseconds: 0,
                    },
                    local: false,
                },
            }]),
        });
    }

    #[test]
    fn body_with_trailing_bytes_is_refused() {
        let mut wire = xdr::to_bytes(&FfLayoutreturn4::default()).to_vec();
        wire.extend_from_slice(&[0, 0, 0, 0]);
        assert!(decode_body::<FfLayoutreturn4>(&wire).is_err());
    }
}
