//! The MOUNT protocol, version 3 (RFC 1813 Appendix I): the side protocol
//! that turns an export path into the root file handle.

use bytes::Bytes;
use xdr::{Decode, Decoder, Encode, Encoder, Error};

use crate::v3::NfsFh3;

/// The MOUNT program number (RFC 1813 Appendix I).
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The MOUNT version paired with NFSv3 (RFC 1813 Appendix I).
pub const MOUNT_V3: u32 = 3;
/// Longest `dirpath` (RFC 1813 Appendix I, `MNTPATHLEN`).
pub const MNTPATHLEN: usize = 1024;
/// Longest `name` (RFC 1813 Appendix I, `MNTNAMLEN`).
pub const MNTNAMLEN: usize = 255;
/// Most auth flavors accepted in a MNT reply. RFC 1813 leaves
/// `auth_flavors<>` open; servers list a handful.
pub const MAX_AUTH_FLAVORS: usize = 32;

xdr::open_code! {
    /// MOUNT procedure numbers (RFC 1813 Appendix I).
    pub struct Mountproc3 {
        /// Do nothing.
        NULL = 0,
        /// Mount an export: path to root handle.
        MNT = 1,
        /// List mounts.
        DUMP = 2,
        /// Forget one mount.
        UMNT = 3,
        /// Forget all of the caller's mounts.
        UMNTALL = 4,
        /// List exports.
        EXPORT = 5,
    }
}

xdr::open_code! {
    /// `mountstat3` (RFC 1813 Appendix I).
    pub struct Mountstat3 {
        /// Success.
        MNT3_OK = 0,
        /// Not owner.
        MNT3ERR_PERM = 1,
        /// No such file or directory.
        MNT3ERR_NOENT = 2,
        /// I/O error.
        MNT3ERR_IO = 5,
        /// Permission denied.
        MNT3ERR_ACCES = 13,
        /// Not a directory.
        MNT3ERR_NOTDIR = 20,
        /// Invalid argument.
        MNT3ERR_INVAL = 22,
        /// File name too long.
        MNT3ERR_NAMETOOLONG = 63,
        /// Operation not supported.
        MNT3ERR_NOTSUPP = 10004,
        /// Server fault.
        MNT3ERR_SERVERFAULT = 10006,
    }
}

/// `dirpath` (RFC 1813 Appendix I): `string dirpath<MNTPATHLEN>`, bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Dirpath(pub Bytes);

/// RFC 1813 Appendix I `dirpath`.
impl Encode for Dirpath {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(&self.0);
    }
}

impl<'a> Decode<'a> for Dirpath {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(MNTPATHLEN).map(Self)
    }
}

/// `name` (RFC 1813 Appendix I): `string name<MNTNAMLEN>`, bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MountName(pub Bytes);

/// RFC 1813 Appendix I `name`.
impl Encode for MountName {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(&self.0);
    }
}

impl<'a> Decode<'a> for MountName {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(MNTNAMLEN).map(Self)
    }
}

/// `mountres3_ok` (RFC 1813 Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mountres3Ok {
    /// The export's root handle.
    pub fhandle: NfsFh3,
    /// Acceptable RPC auth flavors, most preferred first.
    pub auth_flavors: Vec<u32>,
}

/// `mountres3` (RFC 1813 Appendix I): the MNT result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mountres3 {
    /// MNT3_OK.
    Ok(Mountres3Ok),
    /// Any other status (void body).
    Err(Mountstat3),
}

/// RFC 1813 Appendix I `union mountres3 switch (mountstat3 fhs_status)`.
impl Encode for Mountres3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Mountres3::Ok(ok) => {
                enc.put_u32(0);
                ok.fhandle.encode(enc);
                ok.auth_flavors.encode(enc);
            }
            Mountres3::Err(s) => s.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Mountres3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let status: Mountstat3 = dec.decode()?;
        if status == Mountstat3::MNT3_OK {
            Ok(Mountres3::Ok(Mountres3Ok {
                fhandle: dec.decode()?,
                auth_flavors: dec.array(MAX_AUTH_FLAVORS)?,
            }))
        } else {
            Ok(Mountres3::Err(status))
        }
    }
}

xdr_struct! {
    /// `mountbody` (RFC 1813 Appendix I) without its list link: one DUMP
    /// entry.
    pub struct MountBody {
        /// Client host name.
        pub hostname: MountName,
        /// Mounted path.
        pub directory: Dirpath,
    }
}

/// `mountlist` (RFC 1813 Appendix I): the DUMP result, a linked list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountList(pub Vec<MountBody>);

/// RFC 1813 Appendix I `mountlist` as an XDR optional-data list
/// (RFC 4506 §4.19).
impl Encode for MountList {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        for m in &self.0 {
            enc.put_bool(true);
            m.encode(enc);
        }
        enc.put_bool(false);
    }
}

impl<'a> Decode<'a> for MountList {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let mut v = Vec::new();
        while dec.bool()? {
            v.push(dec.decode()?);
        }
        Ok(Self(v))
    }
}

/// `exportnode` (RFC 1813 Appendix I) without its list link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportNode {
    /// Exported path.
    pub dir: Dirpath,
    /// Groups (host names) allowed; empty means everyone.
    pub groups: Vec<MountName>,
}

/// `exports` (RFC 1813 Appendix I): the EXPORT result, a linked list of
/// nodes each with a linked list of groups.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports(pub Vec<ExportNode>);

/// RFC 1813 Appendix I `exports`/`groups` as XDR optional-data lists
/// (RFC 4506 §4.19).
impl Encode for Exports {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        for node in &self.0 {
            enc.put_bool(true);
            node.dir.encode(enc);
            for g in &node.groups {
                enc.put_bool(true);
                g.encode(enc);
            }
            enc.put_bool(false);
        }
        enc.put_bool(false);
    }
}

impl<'a> Decode<'a> for Exports {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let mut v = Vec::new();
        while dec.bool()? {
            let dir = dec.decode()?;
            let mut groups = Vec::new();
            while dec.bool()? {
                groups.push(dec.decode()?);
            }
            v.push(ExportNode { dir, groups });
        }
        Ok(Self(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug>(
        v: &T,
        wire: &[u8],
    ) {
        let mut out = vec![0xa5u8; 0];
        v.encode(&mut out);
        assert_eq!(out, wire);
        assert_eq!(&xdr::from_slice::<T>(wire).unwrap(), v);
        assert_eq!(v.encoded_len(), wire.len());
    }

    #[test]
    fn mnt_reply_round_trips() {
        let res = Mountres3::Ok(Mountres3Ok {
            fhandle: NfsFh3::new(&[1, 0, 1, 0, 0, 0, 0, 0]).unwrap(),
            auth_flavors: vec![1],
        });
        let wire = [
            0, 0, 0, 0, 0, 0, 0, 8, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1,
        ];
        roundtrip(&res, &wire);
    }

    #[test]
    fn mnt_error_has_no_body() {
        roundtrip(&Mountres3::Err(Mountstat3::MNT3ERR_NOENT), &[0, 0, 0, 2]);
    }

    #[test]
    fn dirpath_round_trips_and_rejects_overlong() {
        roundtrip(
            &Dirpath(Bytes::from_static(b"/export")),
            b"\0\0\0\x07/export\0",
        );
        let mut long = vec![0, 0, 0x04, 0x01];
        long.extend(std::iter::repeat_n(b'a', 1028));
        assert!(xdr::from_slice::<Dirpath>(&long).is_err());
    }

    #[test]
    fn export_list_round_trips() {
        let ex = Exports(vec![ExportNode {
            dir: Dirpath(Bytes::from_static(b"/e")),
            groups: vec![MountName(Bytes::from_static(b"*"))],
        }]);
        let wire = [
            0, 0, 0, 1, 0, 0, 0, 2, b'/', b'e', 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, b'*', 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0,
        ];
        roundtrip(&ex, &wire);
    }

    #[test]
    fn dump_list_round_trips_empty_and_full() {
        roundtrip(&MountList::default(), &[0, 0, 0, 0]);
        let l = MountList(vec![MountBody {
            hostname: MountName(Bytes::from_static(b"h")),
            directory: Dirpath(Bytes::from_static(b"/")),
        }]);
        roundtrip(
            &l,
            &[
                0, 0, 0, 1, 0, 0, 0, 1, b'h', 0, 0, 0, 0, 0, 0, 1, b'/', 0, 0, 0, 0, 0, 0, 0,
            ],
        );
    }

    #[test]
    fn rejects_truncated_mnt_reply() {
        assert!(xdr::from_slice::<Mountres3>(&[0, 0, 0, 0, 0, 0, 0, 8, 1]).is_err());
    }
}
