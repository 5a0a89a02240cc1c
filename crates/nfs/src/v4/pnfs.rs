//! The pNFS operations (RFC 8881 §12, §18.40 to §18.44; RFC 7862 §15.6,
//! §15.7): GETDEVICEINFO, LAYOUTCOMMIT, LAYOUTGET, LAYOUTRETURN,
//! LAYOUTERROR and LAYOUTSTATS, with the generic layout types they carry.
//! The layout-type-specific bodies (`loc_body`, `da_addr_body`,
//! `lrf_body`, `lou_body`) stay opaque here; [`super::flexfiles`] decodes
//! the flexible-files ones.
//!
//! Bounds: an opaque layout body holds at most [`MAX_LAYOUT_BODY`] bytes,
//! a LAYOUTGET reply at most [`MAX_LAYOUTS`] layouts, a LAYOUTERROR at most
//! [`MAX_DEVICE_ERRORS`] device errors.

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error, ErrorKind, FixedOpaque};

use super::attr::Bitmap4;
use super::compound::OpStatus;
use super::{Nfsstat4, Nfstime4, Stateid4};

/// Largest opaque layout-type-specific body decoded (`loc_body`,
/// `da_addr_body`, `lrf_body`, `lou_body`).
pub const MAX_LAYOUT_BODY: usize = 16 << 10;
/// Most layouts decoded from one LAYOUTGET reply (`logr_layout<>`).
pub const MAX_LAYOUTS: usize = 16;
/// Most device errors decoded from one LAYOUTERROR (`lea_errors<>`).
pub const MAX_DEVICE_ERRORS: usize = 64;
/// `NFS4_DEVICEID4_SIZE` (RFC 8881 §3.1).
pub const NFS4_DEVICEID4_SIZE: usize = 16;

/// `deviceid4` (RFC 8881 §3.3.14).
pub type Deviceid4 = FixedOpaque<NFS4_DEVICEID4_SIZE>;
/// An opaque layout-type-specific body.
pub type LayoutBody = Bounded<Bytes, MAX_LAYOUT_BODY>;

xdr::open_code! {
    /// `layouttype4` (RFC 8881 §3.3.13, RFC 8435 §4).
    pub struct Layouttype4 {
        /// LAYOUT4_NFSV4_1_FILES (RFC 8881 §13).
        LAYOUT4_NFSV4_1_FILES = 1,
        /// LAYOUT4_OSD2_OBJECTS (RFC 5664).
        LAYOUT4_OSD2_OBJECTS = 2,
        /// LAYOUT4_BLOCK_VOLUME (RFC 5663).
        LAYOUT4_BLOCK_VOLUME = 3,
        /// LAYOUT4_FLEX_FILES (RFC 8435 §4).
        LAYOUT4_FLEX_FILES = 4,
    }
}

xdr::open_code! {
    /// `layoutiomode4` (RFC 8881 §3.3.20).
    pub struct Layoutiomode4 {
        /// Reads only.
        LAYOUTIOMODE4_READ = 1,
        /// Reads and writes.
        LAYOUTIOMODE4_RW = 2,
        /// Either (LAYOUTRETURN, CB_LAYOUTRECALL).
        LAYOUTIOMODE4_ANY = 3,
    }
}

xdr_struct! {
    /// `device_addr4` (RFC 8881 §3.3.15).
    pub struct DeviceAddr4 {
        /// Layout type the address is for.
        pub layout_type: Layouttype4,
        /// Its layout-type-specific address (`ff_device_addr4` for flex
        /// files).
        pub addr_body: LayoutBody,
    }
}

xdr_struct! {
    /// `layout_content4` (RFC 8881 §3.3.17).
    pub struct LayoutContent4 {
        /// Layout type.
        pub layout_type: Layouttype4,
        /// The layout-type-specific body (`ff_layout4` for flex files).
        pub body: LayoutBody,
    }
}

xdr_struct! {
    /// `layout4` (RFC 8881 §3.3.18): one layout segment.
    pub struct Layout4 {
        /// Start of the range.
        pub offset: u64,
        /// Length (`NFS4_UINT64_MAX` to the end of the file).
        pub length: u64,
        /// Access it grants.
        pub iomode: Layoutiomode4,
        /// The layout.
        pub content: LayoutContent4,
    }
}

xdr_struct! {
    /// `layoutupdate4` (RFC 8881 §3.3.18).
    pub struct Layoutupdate4 {
        /// Layout type.
        pub layout_type: Layouttype4,
        /// The layout-type-specific update (empty for flex files).
        pub body: LayoutBody,
    }
}

xdr_struct! {
    /// GETDEVICEINFO4args (RFC 8881 §18.40.1).
    pub struct Getdeviceinfo4Args {
        /// The device.
        pub device_id: Deviceid4,
        /// Layout type.
        pub layout_type: Layouttype4,
        /// Largest `device_addr4` the client takes (0: no limit).
        pub maxcount: u32,
        /// Device notifications wanted.
        pub notify_types: Bitmap4,
    }
}

xdr_struct! {
    /// GETDEVICEINFO4resok (RFC 8881 §18.40.2).
    pub struct Getdeviceinfo4ResOk {
        /// The device's address.
        pub device_addr: DeviceAddr4,
        /// Notifications the server will send.
        pub notification: Bitmap4,
    }
}

/// GETDEVICEINFO4res (RFC 8881 §18.40.2): NFS4ERR_TOOSMALL carries the
/// `maxcount` that would have been enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Getdeviceinfo4Res {
    /// NFS4_OK.
    Ok(Getdeviceinfo4ResOk),
    /// NFS4ERR_TOOSMALL with `gdir_mincount`.
    TooSmall(u32),
    /// Any other status.
    Err(Nfsstat4),
}

impl OpStatus for Getdeviceinfo4Res {
    fn op_status(&self) -> Nfsstat4 {
        match self {
            Self::Ok(_) => Nfsstat4::NFS4_OK,
            Self::TooSmall(_) => Nfsstat4::NFS4ERR_TOOSMALL,
            Self::Err(s) => *s,
        }
    }
}

/// RFC 8881 §18.40.2 `union GETDEVICEINFO4res switch (nfsstat4
/// gdir_status)`.
impl Encode for Getdeviceinfo4Res {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::Ok(r) => {
                Nfsstat4::NFS4_OK.encode(enc);
                r.encode(enc);
            }
            Self::TooSmall(n) => {
                Nfsstat4::NFS4ERR_TOOSMALL.encode(enc);
                n.encode(enc);
            }
            Self::Err(s) => s.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Getdeviceinfo4Res {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match dec.decode::<Nfsstat4>()? {
            Nfsstat4::NFS4_OK => Self::Ok(dec.decode()?),
            Nfsstat4::NFS4ERR_TOOSMALL => Self::TooSmall(dec.u32()?),
            s => Self::Err(s),
        })
    }
}

xdr_struct! {
    /// LAYOUTCOMMIT4args (RFC 8881 §18.42.1).
    pub struct Layoutcommit4Args {
        /// Start of the range written.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// Reclaim after a server restart.
        pub reclaim: bool,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// `newoffset4`: the highest byte offset written, if any.
        pub last_write_offset: Option<u64>,
        /// `newtime4`: the client's modify time, if it sets one.
        pub time_modify: Option<Nfstime4>,
        /// Layout-type-specific update.
        pub layoutupdate: Layoutupdate4,
    }
}

xdr_struct! {
    /// LAYOUTCOMMIT4resok (RFC 8881 §18.42.2).
    pub struct Layoutcommit4ResOk {
        /// `newsize4`: the new file size, if it changed.
        pub newsize: Option<u64>,
    }
}

xdr_struct! {
    /// LAYOUTGET4args (RFC 8881 §18.43.1).
    pub struct Layoutget4Args {
        /// Ask for CB_RECALLABLE_OBJ_AVAIL when refused with TRYLATER.
        pub signal_layout_avail: bool,
        /// Layout type.
        pub layout_type: Layouttype4,
        /// Access wanted.
        pub iomode: Layoutiomode4,
        /// Start of the range.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// Smallest useful length.
        pub minlength: u64,
        /// An open, lock, delegation or layout stateid.
        pub stateid: Stateid4,
        /// Largest reply body the client takes.
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// LAYOUTGET4resok (RFC 8881 §18.43.2).
    pub struct Layoutget4ResOk {
        /// Return the layout on CLOSE.
        pub return_on_close: bool,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// The layouts granted (at most [`MAX_LAYOUTS`] decoded).
        pub layout: Bounded<Vec<Layout4>, MAX_LAYOUTS>,
    }
}

/// LAYOUTGET4res (RFC 8881 §18.43.2): NFS4ERR_LAYOUTTRYLATER carries
/// `logr_will_signal_layout_avail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layoutget4Res {
    /// NFS4_OK.
    Ok(Layoutget4ResOk),
    /// NFS4ERR_LAYOUTTRYLATER and whether the server will signal.
    TryLater(bool),
    /// Any other status.
    Err(Nfsstat4),
}

impl OpStatus for Layoutget4Res {
    fn op_status(&self) -> Nfsstat4 {
        match self {
            Self::Ok(_) => Nfsstat4::NFS4_OK,
            Self::TryLater(_) => Nfsstat4::NFS4ERR_LAYOUTTRYLATER,
            Self::Err(s) => *s,
        }
    }
}

/// RFC 8881 §18.43.2 `union LAYOUTGET4res switch (nfsstat4 logr_status)`.
impl Encode for Layoutget4Res {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::Ok(r) => {
                Nfsstat4::NFS4_OK.encode(enc);
                r.encode(enc);
            }
            Self::TryLater(b) => {
                Nfsstat4::NFS4ERR_LAYOUTTRYLATER.encode(enc);
                b.encode(enc);
            }
            Self::Err(s) => s.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Layoutget4Res {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match dec.decode::<Nfsstat4>()? {
            Nfsstat4::NFS4_OK => Self::Ok(dec.decode()?),
            Nfsstat4::NFS4ERR_LAYOUTTRYLATER => Self::TryLater(dec.bool()?),
            s => Self::Err(s),
        })
    }
}

/// `layoutreturn_type4` LAYOUTRETURN4_FILE (RFC 8881 §18.44.1), also
/// LAYOUTRECALL4_FILE.
pub const LAYOUTRETURN4_FILE: u32 = 1;
/// LAYOUTRETURN4_FSID, also LAYOUTRECALL4_FSID.
pub const LAYOUTRETURN4_FSID: u32 = 2;
/// LAYOUTRETURN4_ALL, also LAYOUTRECALL4_ALL.
pub const LAYOUTRETURN4_ALL: u32 = 3;

xdr_struct! {
    /// `layoutreturn_file4` (RFC 8881 §18.44.1).
    pub struct LayoutreturnFile4 {
        /// Start of the range returned.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// Layout-type-specific body (`ff_layoutreturn4` for flex files).
        pub body: LayoutBody,
    }
}

/// `layoutreturn4` (RFC 8881 §18.44.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layoutreturn4 {
    /// LAYOUTRETURN4_FILE: a range of the current file.
    File(LayoutreturnFile4),
    /// LAYOUTRETURN4_FSID: every layout of the current file's file system.
    Fsid,
    /// LAYOUTRETURN4_ALL: every layout the client holds.
    All,
}

/// RFC 8881 §18.44.1 `union layoutreturn4 switch (layoutreturn_type4
/// lr_returntype)`.
impl Encode for Layoutreturn4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::File(f) => {
                enc.put_u32(LAYOUTRETURN4_FILE);
                f.encode(enc);
            }
            Self::Fsid => enc.put_u32(LAYOUTRETURN4_FSID),
            Self::All => enc.put_u32(LAYOUTRETURN4_ALL),
        }
    }
}

impl<'a> Decode<'a> for Layoutreturn4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        Ok(match dec.u32()? {
            LAYOUTRETURN4_FILE => Self::File(dec.decode()?),
            LAYOUTRETURN4_FSID => Self::Fsid,
            LAYOUTRETURN4_ALL => Self::All,
            n => return Err(Error::new(ErrorKind::InvalidEnum(n), at, "layoutreturn4")),
        })
    }
}

xdr_struct! {
    /// LAYOUTRETURN4args (RFC 8881 §18.44.1).
    pub struct Layoutreturn4Args {
        /// Return after a server restart.
        pub reclaim: bool,
        /// Layout type.
        pub layout_type: Layouttype4,
        /// Access returned.
        pub iomode: Layoutiomode4,
        /// What is returned.
        pub layoutreturn: Layoutreturn4,
    }
}

/// LAYOUTRETURN4res's success arm (RFC 8881 §18.44.2,
/// `layoutreturn_stateid`): the layout stateid while some layout of the
/// file is still held, none once all are returned.
pub type Layoutreturn4ResOk = Option<Stateid4>;

xdr_struct! {
    /// `device_error4` (RFC 7862 §15.6.1).
    pub struct DeviceError4 {
        /// The device.
        pub deviceid: Deviceid4,
        /// The error the client saw.
        pub status: Nfsstat4,
        /// The operation that failed.
        pub opnum: u32,
    }
}

xdr_struct! {
    /// LAYOUTERROR4args (RFC 7862 §15.6.1).
    pub struct Layouterror4Args {
        /// Start of the range.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// Errors, per device (at most [`MAX_DEVICE_ERRORS`] decoded).
        pub errors: Bounded<Vec<DeviceError4>, MAX_DEVICE_ERRORS>,
    }
}

xdr_struct! {
    /// `io_info4` (RFC 7862 §15.7.1).
    #[derive(Copy, Default)]
    pub struct IoInfo4 {
        /// Operations.
        pub count: u64,
        /// Bytes.
        pub bytes: u64,
    }
}

xdr_struct! {
    /// LAYOUTSTATS4args (RFC 7862 §15.7.1).
    pub struct Layoutstats4Args {
        /// Start of the range.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
        /// Reads done.
        pub read: IoInfo4,
        /// Writes done.
        pub write: IoInfo4,
        /// The device.
        pub deviceid: Deviceid4,
        /// Layout-type-specific statistics (`ff_layoutupdate4`).
        pub layoutupdate: Layoutupdate4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v4::{NfsArgop4, NfsResop4, Opnum4};

    fn sid(n: u8) -> Stateid4 {
        Stateid4 {
            seqid: 1,
            other: FixedOpaque([n; 12]),
        }
    }

    fn roundtrip<T>(v: &T)
    where
        T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug,
    {
        let wire = xdr::to_bytes(v);
        assert_eq!(v.encoded_len(), wire.len());
        let back: T = xdr::from_slice(&wire).unwrap();
        assert_eq!(&back, v);
        for cut in 0..wire.len() {
            assert!(xdr::from_slice::<T>(&wire[..cut]).is_err(), "prefix {cut}");
        }
    }

    #[test]
    fn layoutget_round_trips() {
        let args = NfsArgop4::Layoutget(Layoutget4Args {
            signal_layout_avail: false,
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            iomode: Layoutiomode4::LAYOUTIOMODE4_RW,
            offset: 0,
            length: u64::MAX,
            minlength: 4096,
            stateid: sid(3),
            maxcount: 4096,
        });
        roundtrip(&args);
        let ok = NfsResop4::Layoutget(Layoutget4Res::Ok(Layoutget4ResOk {
            return_on_close: true,
            stateid: sid(4),
            layout: Bounded(vec![Layout4 {
                offset: 0,
                length: u64::MAX,
                iomode: Layoutiomode4::LAYOUTIOMODE4_READ,
                content: LayoutContent4 {
                    layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    body: Bounded(Bytes::from_static(&[1, 2, 3, 4, 5])),
                },
            }]),
        }));
        roundtrip(&ok);
        roundtrip(&NfsResop4::Layoutget(Layoutget4Res::TryLater(true)));
        roundtrip(&NfsResop4::Layoutget(Layoutget4Res::Err(
            Nfsstat4::NFS4ERR_LAYOUTUNAVAILABLE,
        )));
        assert_eq!(
            NfsResop4::error(Opnum4::OP_LAYOUTGET, Nfsstat4::NFS4ERR_BADIOMODE),
            NfsResop4::Layoutget(Layoutget4Res::Err(Nfsstat4::NFS4ERR_BADIOMODE))
        );
    }

    #[test]
    fn layoutget_reply_with_too_many_layouts_is_refused() {
        let mut wire = xdr::to_bytes(&Nfsstat4::NFS4_OK).to_vec();
        wire.extend_from_slice(&[0, 0, 0, 0]);
        wire.extend_from_slice(&xdr::to_bytes(&sid(1)));
        wire.extend_from_slice(&(MAX_LAYOUTS as u32 + 1).to_be_bytes());
        wire.resize(wire.len() + 64 * (MAX_LAYOUTS + 1), 0);
        assert!(xdr::from_slice::<Layoutget4Res>(&wire).is_err());
    }

    #[test]
    fn getdeviceinfo_round_trips_with_toosmall_arm() {
        roundtrip(&NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
            device_id: FixedOpaque([7; 16]),
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount: 0,
            notify_types: Bitmap4::new(),
        }));
        roundtrip(&NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::Ok(
            Getdeviceinfo4ResOk {
                device_addr: DeviceAddr4 {
                    layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    addr_body: Bounded(Bytes::from_static(b"abc")),
                },
                notification: Bitmap4::from_bits(&[1]),
            },
        )));
        let small = NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::TooSmall(300));
        roundtrip(&small);
        assert_eq!(small.status(), Nfsstat4::NFS4ERR_TOOSMALL);
        // The mincount follows the status on the wire.
        assert_eq!(
            &xdr::to_bytes(&small)[4..],
            &[0, 0, 0x27, 0x15, 0, 0, 1, 0x2c]
        );
    }

    #[test]
    fn layoutcommit_round_trips() {
        roundtrip(&NfsArgop4::Layoutcommit(Layoutcommit4Args {
            offset: 0,
            length: 8192,
            reclaim: false,
            stateid: sid(9),
            last_write_offset: Some(8191),
            time_modify: Some(Nfstime4 {
                seconds: 1_700_000_000,
                nseconds: 5,
            }),
            layoutupdate: Layoutupdate4 {
                layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                body: Bounded(Bytes::new()),
            },
        }));
        roundtrip(&NfsResop4::Layoutcommit(crate::v4::Res4::Ok(
            Layoutcommit4ResOk {
                newsize: Some(8192),
            },
        )));
        roundtrip(&NfsResop4::Layoutcommit(crate::v4::Res4::Ok(
            Layoutcommit4ResOk { newsize: None },
        )));
    }

    #[test]
    fn layoutreturn_round_trips_every_arm() {
        for lr in [
            Layoutreturn4::File(LayoutreturnFile4 {
                offset: 0,
                length: u64::MAX,
                stateid: sid(2),
                body: Bounded(Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0])),
            }),
            Layoutreturn4::Fsid,
            Layoutreturn4::All,
        ] {
            roundtrip(&NfsArgop4::Layoutreturn(Layoutreturn4Args {
                reclaim: false,
                layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                iomode: Layoutiomode4::LAYOUTIOMODE4_ANY,
                layoutreturn: lr,
            }));
        }
        roundtrip(&NfsResop4::Layoutreturn(crate::v4::Res4::Ok(Some(sid(5)))));
        roundtrip(&NfsResop4::Layoutreturn(crate::v4::Res4::Ok(None)));
        let bad = [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 9];
        assert!(xdr::from_slice::<Layoutreturn4Args>(&bad).is_err());
    }

    #[test]
    fn layouterror_and_layoutstats_round_trip() {
        roundtrip(&NfsArgop4::Layouterror(Layouterror4Args {
            offset: 0,
            length: 4096,
            stateid: sid(1),
            errors: Bounded(vec![DeviceError4 {
                deviceid: FixedOpaque([1; 16]),
                status: Nfsstat4::NFS4ERR_IO,
                opnum: 38,
            }]),
        }));
        roundtrip(&NfsArgop4::Layoutstats(Layoutstats4Args {
            offset: 0,
            length: u64::MAX,
            stateid: sid(1),
            read: IoInfo4 {
                count: 3,
                bytes: 12288,
            },
            write: IoInfo4::default(),
            deviceid: FixedOpaque([2; 16]),
            layoutupdate: Layoutupdate4 {
                layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                body: Bounded(Bytes::from_static(b"xyzw")),
            },
        }));
        roundtrip(&NfsResop4::Layouterror(Nfsstat4::NFS4_OK));
        roundtrip(&NfsResop4::Layoutstats(Nfsstat4::NFS4_OK));
    }

    #[test]
    fn layouterror_with_too_many_errors_is_refused() {
        let mut wire = vec![0u8; 16];
        wire.extend_from_slice(&xdr::to_bytes(&sid(1)));
        wire.extend_from_slice(&(MAX_DEVICE_ERRORS as u32 + 1).to_be_bytes());
        wire.resize(wire.len() + 24 * (MAX_DEVICE_ERRORS + 1), 0);
        assert!(xdr::from_slice::<Layouterror4Args>(&wire).is_err());
    }
}
