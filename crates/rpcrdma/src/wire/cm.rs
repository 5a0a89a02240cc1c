//! RPC-over-RDMA version 1 connection-manager private data (RFC 8797):
//! the 8 bytes a peer puts in the CM connect request / accept to advertise
//! its inline sizes and whether it accepts Send With Invalidate.

use core::fmt;

/// The format identifier, first word of the private data (RFC 8797 §4).
pub const MAGIC: u32 = 0xf6ab_0e18;
/// The private data format version this module speaks (RFC 8797 §4).
pub const VERSION: u8 = 1;
/// Length of the encoded private data.
pub const LEN: usize = 8;
/// The inline threshold assumed when a peer sends no (usable) private
/// data (RFC 8166 §3.3.3; RFC 8797 §4).
pub const DEFAULT_INLINE_SIZE: u32 = 1024;
/// Largest size the one-byte encoding can express: (255 + 1) * 1024.
pub const MAX_INLINE_SIZE: u32 = 256 * 1024;

/// Private data flags (RFC 8797 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmFlags(pub u8);

impl CmFlags {
    /// The sender can receive Send With Invalidate (RFC 8797 §4,
    /// `RPCRDMA_CMP_F_SND_W_INV_OK` in Linux).
    pub const SEND_WITH_INVALIDATE_OK: CmFlags = CmFlags(1);

    /// True when Send With Invalidate is acceptable to the sender.
    pub const fn send_with_invalidate_ok(self) -> bool {
        self.0 & Self::SEND_WITH_INVALIDATE_OK.0 != 0
    }
}

/// Why bytes are not usable RPC-over-RDMA private data. A receiver treats
/// any of these as "no private data" and uses the defaults (RFC 8797 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrivateDataError {
    /// Fewer than 8 bytes.
    #[error("private data of {0} bytes, 8 needed")]
    TooShort(usize),
    /// The first word is not 0xf6ab0e18.
    #[error("private data magic {0:#010x} is not RPC-over-RDMA's")]
    BadMagic(u32),
    /// A format version other than 1.
    #[error("private data version {0} not supported")]
    UnsupportedVersion(u8),
}

/// The decoded private data (RFC 8797 §4). Sizes are in bytes; the wire
/// carries `size / 1024 - 1` in one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPrivateData {
    /// Format version.
    pub version: u8,
    /// Flags.
    pub flags: CmFlags,
    /// Largest message the sender will Send (its inline send threshold).
    pub max_send_size: u32,
    /// Size of the sender's receive buffers (its inline receive threshold).
    pub max_recv_size: u32,
}

fn encode_size(bytes: u32) -> u8 {
    let units = (bytes.clamp(DEFAULT_INLINE_SIZE, MAX_INLINE_SIZE) / 1024) - 1;
    u8::try_from(units).unwrap_or(u8::MAX)
}

fn decode_size(v: u8) -> u32 {
    (u32::from(v) + 1) * 1024
}

impl CmPrivateData {
    /// Private data advertising `send`/`recv` byte sizes, rounded down to
    /// a multiple of 1024 within 1 KiB..=256 KiB.
    pub fn new(flags: CmFlags, send: u32, recv: u32) -> Self {
        Self {
            version: VERSION,
            flags,
            max_send_size: decode_size(encode_size(send)),
            max_recv_size: decode_size(encode_size(recv)),
        }
    }

    /// Decodes the first 8 bytes of `buf` (RFC 8797 §4).
    pub fn parse(buf: &[u8]) -> Result<Self, PrivateDataError> {
        let Some(b) = buf.get(..LEN) else {
            return Err(PrivateDataError::TooShort(buf.len()));
        };
        let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if magic != MAGIC {
            return Err(PrivateDataError::BadMagic(magic));
        }
        if b[4] != VERSION {
            return Err(PrivateDataError::UnsupportedVersion(b[4]));
        }
        Ok(Self {
            version: b[4],
            flags: CmFlags(b[5]),
            max_send_size: decode_size(b[6]),
            max_recv_size: decode_size(b[7]),
        })
    }

    /// Decodes a peer's private data, falling back to the RFC defaults
    /// (1024 bytes each way, no Send With Invalidate) when it is absent
    /// or not RPC-over-RDMA's (RFC 8797 §4).
    pub fn from_peer(buf: Option<&[u8]>) -> Self {
        buf.and_then(|b| Self::parse(b).ok()).unwrap_or_default()
    }

    /// The encoding (RFC 8797 §4).
    pub fn to_bytes(&self) -> [u8; LEN] {
        let m = MAGIC.to_be_bytes();
        [
            m[0],
            m[1],
            m[2],
            m[3],
            self.version,
            self.flags.0,
            encode_size(self.max_send_size),
            encode_size(self.max_recv_size),
        ]
    }

    /// Writes the encoding into the front of `buf`; returns the length,
    /// or `None` (and writes nothing) when `buf` is shorter than 8 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let dst = buf.get_mut(..LEN)?;
        dst.copy_from_slice(&self.to_bytes());
        Some(LEN)
    }
}

impl Default for CmPrivateData {
    fn default() -> Self {
        Self {
            version: VERSION,
            flags: CmFlags::default(),
            max_send_size: DEFAULT_INLINE_SIZE,
            max_recv_size: DEFAULT_INLINE_SIZE,
        }
    }
}

impl fmt::Display for CmPrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rpcrdma-cm v{} send={} recv={} sendinv={}",
            self.version,
            self.max_send_size,
            self.max_recv_size,
            self.flags.send_with_invalidate_ok()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux xprtrdma client's private data (kpeer README, MPA Request).
    const KERNEL_CLIENT: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
    /// knfsd's private data (kpeer README, MPA Reply).
    const KNFSD: [u8; 8] = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03];

    #[test]
    fn parses_kernel_client_private_data() {
        let pd = CmPrivateData::parse(&KERNEL_CLIENT).unwrap();
        assert_eq!(pd.version, 1);
        assert!(pd.flags.send_with_invalidate_ok());
        assert_eq!(pd.max_send_size, 4096);
        assert_eq!(pd.max_recv_size, 4096);
    }

    #[test]
    fn parses_knfsd_private_data() {
        let pd = CmPrivateData::parse(&KNFSD).unwrap();
        assert!(!pd.flags.send_with_invalidate_ok());
        assert_eq!((pd.max_send_size, pd.max_recv_size), (4096, 4096));
    }

    #[test]
    fn emits_kernel_bytes() {
        let pd = CmPrivateData::new(CmFlags::SEND_WITH_INVALIDATE_OK, 4096, 4096);
        let mut buf = [0xa5u8; 10];
        assert_eq!(pd.emit(&mut buf), Some(8));
        assert_eq!(&buf[..8], &KERNEL_CLIENT);
        assert_eq!(&buf[8..], &[0xa5, 0xa5]);
        assert_eq!(CmPrivateData::new(CmFlags(0), 4096, 4096).to_bytes(), KNFSD);
        assert_eq!(pd.emit(&mut [0u8; 7]), None);
    }

    #[test]
    fn defaults_to_1024_when_absent_or_foreign() {
        let d = CmPrivateData::from_peer(None);
        assert_eq!((d.max_send_size, d.max_recv_size), (1024, 1024));
        assert!(!d.flags.send_with_invalidate_ok());
        let mut bad = KERNEL_CLIENT;
        bad[0] = 0;
        assert_eq!(CmPrivateData::from_peer(Some(&bad)), d);
        assert_eq!(CmPrivateData::from_peer(Some(&KERNEL_CLIENT[..7])), d);
    }

    #[test]
    fn rejects_bad_magic_version_and_length() {
        let mut b = KNFSD;
        b[4] = 2;
        assert_eq!(
            CmPrivateData::parse(&b),
            Err(PrivateDataError::UnsupportedVersion(2))
        );
        b = KNFSD;
        b[3] = 0x19;
        assert_eq!(
            CmPrivateData::parse(&b),
            Err(PrivateDataError::BadMagic(0xf6ab_0e19))
        );
        assert_eq!(
            CmPrivateData::parse(&b[..3]),
            Err(PrivateDataError::TooShort(3))
        );
    }

    #[test]
    fn size_encoding_is_value_plus_one_kib() {
        assert_eq!(decode_size(0), 1024);
        assert_eq!(decode_size(255), 256 * 1024);
        assert_eq!(encode_size(1024), 0);
        assert_eq!(encode_size(4096), 3);
        assert_eq!(encode_size(5000), 3);
        assert_eq!(encode_size(10), 0);
        assert_eq!(encode_size(u32::MAX), 255);
    }
}
