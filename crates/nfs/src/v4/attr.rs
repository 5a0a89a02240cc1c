//! File attributes (RFC 8881 §5): `bitmap4`, `fattr4`, and a typed codec
//! [`FileAttrs`] for the REQUIRED attributes and the RECOMMENDED ones a
//! Linux client asks for.
//!
//! `fattr4` carries the values of the attributes set in its mask, in
//! ascending attribute number, as one opaque list (RFC 8881 §3.3.10,
//! §5.2). Only attributes whose XDR type is known can be decoded: a mask
//! naming any other makes [`FileAttrs::from_fattr4`] fail with
//! [`AttrError::Unsupported`] (a server answers NFS4ERR_ATTRNOTSUPP).

use bytes::Bytes;
use xdr::{Decode, Decoder, Encode, Encoder, Error};

use super::pnfs::Layouttype4;
use super::{Fsid4, NfsFh4, NfsFtype4, Nfsstat4, Nfstime4, Specdata4, Utf8Str};

/// Most layout types decoded from `fs_layout_types` (`layouttype4<>`).
pub const MAX_LAYOUT_TYPES: usize = 8;
/// `fs_layout_types` (RFC 8881 §5.12.2), at most [`MAX_LAYOUT_TYPES`].
pub type LayoutTypes = xdr::Bounded<Vec<Layouttype4>, MAX_LAYOUT_TYPES>;

/// Most words accepted in a `bitmap4` (attributes 0 to 255).
pub const MAX_BITMAP_WORDS: usize = 8;
/// Largest `attrlist4` accepted when decoding.
pub const MAX_ATTRLIST: usize = 64 << 10;

/// `bitmap4` (RFC 8881 §3.3.5): bit `n` of word `n / 32` set means item
/// `n` is present. At most [`MAX_BITMAP_WORDS`] words are decoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// An empty bitmap.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// A bitmap with the listed bits set.
    pub fn from_bits(bits: &[u32]) -> Self {
        let mut b = Self::new();
        for &n in bits {
            b.insert(n);
        }
        b
    }

    /// Whether bit `n` is set.
    pub fn contains(&self, n: u32) -> bool {
        self.0
            .get((n / 32) as usize)
            .is_some_and(|w| w & (1 << (n % 32)) != 0)
    }

    /// Sets bit `n` (ignored beyond [`MAX_BITMAP_WORDS`] words).
    pub fn insert(&mut self, n: u32) {
        let w = (n / 32) as usize;
        if w >= MAX_BITMAP_WORDS {
            return;
        }
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        if let Some(word) = self.0.get_mut(w) {
            *word |= 1 << (n % 32);
        }
    }

    /// The set bits in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..32u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 32 + b)
        })
    }

    /// Bits set in both.
    pub fn intersect(&self, other: &Bitmap4) -> Bitmap4 {
        let mut out = Bitmap4(
            self.0
                .iter()
                .zip(other.0.iter())
                .map(|(a, b)| a & b)
                .collect(),
        );
        out.trim();
        out
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Drops trailing zero words.
    pub fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
}

/// RFC 8881 §3.3.5 `typedef uint32_t bitmap4<>`.
impl Encode for Bitmap4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.0.encode(enc);
    }
}

impl<'a> Decode<'a> for Bitmap4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.array(MAX_BITMAP_WORDS).map(Self)
    }
}

xdr_struct! {
    /// `fattr4` (RFC 8881 §3.3.10): a mask and the values of the masked
    /// attributes (`attrlist4`, at most [`MAX_ATTRLIST`] bytes).
    #[derive(Default)]
    pub struct Fattr4 {
        /// Which attributes follow.
        pub attrmask: Bitmap4,
        /// Their values, in ascending attribute number.
        pub attr_vals: xdr::Bounded<Bytes, MAX_ATTRLIST>,
    }
}

/// `settime4` (RFC 8881 §3.3.4): how SETATTR sets a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime4 {
    /// SET_TO_SERVER_TIME4 (0).
    ServerTime,
    /// SET_TO_CLIENT_TIME4 (1) with the time.
    ClientTime(Nfstime4),
}

/// RFC 8881 §3.3.4 `union settime4 switch (time_how4 set_it)`.
impl Encode for SetTime4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            SetTime4::ServerTime => enc.put_u32(0),
            SetTime4::ClientTime(t) => {
                enc.put_u32(1);
                t.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for SetTime4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match super::disc(dec, |v| v <= 1)? {
            0 => Ok(SetTime4::ServerTime),
            _ => Ok(SetTime4::ClientTime(dec.decode()?)),
        }
    }
}

/// Why an `fattr4` could not be turned into [`FileAttrs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// The mask names an attribute this codec does not know (RFC 8881
    /// §5: NFS4ERR_ATTRNOTSUPP).
    #[error("attribute {0} not supported")]
    Unsupported(u32),
    /// The values do not decode (NFS4ERR_BADXDR).
    #[error("bad attribute list: {0}")]
    Xdr(Error),
}

impl AttrError {
    /// The status a server answers with.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            AttrError::Unsupported(_) => Nfsstat4::NFS4ERR_ATTRNOTSUPP,
            AttrError::Xdr(_) => Nfsstat4::NFS4ERR_BADXDR,
        }
    }
}

macro_rules! file_attrs {
    ($( $(#[$m:meta])* $num:literal $konst:ident $field:ident : $ty:ty ),* $(,)?) => {
        $( $(#[$m])* pub const $konst: u32 = $num; )*

        /// Every attribute [`FileAttrs`] can carry.
        pub const KNOWN_ATTRS: &[u32] = &[$($num),*];

        /// Typed file attributes (RFC 8881 §5.6, §5.7, RFC 7862 §12.2):
        /// `None` means absent from the mask.
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct FileAttrs {
            $( $(#[$m])* pub $field: Option<$ty>, )*
        }

        impl FileAttrs {
            /// The `fattr4` holding the attributes that are both present
            /// and in `request` (RFC 8881 §18.7.3: unsupported requested
            /// attributes are simply left out of the mask).
            pub fn to_fattr4(&self, request: &Bitmap4) -> Fattr4 {
                let mut mask = Bitmap4::new();
                let mut vals = bytes::BytesMut::new();
                $(
                    if let (true, Some(v)) = (request.contains($num), &self.$field) {
                        mask.insert($num);
                        v.encode(&mut vals);
                    }
                )*
                Fattr4 { attrmask: mask, attr_vals: xdr::Bounded(vals.freeze()) }
            }

            /// The mask of present attributes.
            pub fn mask(&self) -> Bitmap4 {
                let mut mask = Bitmap4::new();
                $( if self.$field.is_some() { mask.insert($num); } )*
                mask
            }

            /// Decodes the values of `fattr`, which must span its list
            /// exactly (RFC 8881 §5.2).
            pub fn from_fattr4(fattr: &Fattr4) -> Result<Self, AttrError> {
                let mut out = Self::default();
                let mut dec = Decoder::new(&fattr.attr_vals.0);
                for n in fattr.attrmask.iter() {
                    match n {
                        $( $num => out.$field = Some(dec.decode().map_err(AttrError::Xdr)?), )*
                        other => return Err(AttrError::Unsupported(other)),
                    }
                }
                dec.finish().map_err(AttrError::Xdr)?;
                Ok(out)
            }
        }
    };
}

file_attrs! {
    /// `supported_attrs` (REQUIRED, RFC 8881 §5.8.1.1).
    0 FATTR4_SUPPORTED_ATTRS supported_attrs: Bitmap4,
    /// `type` (REQUIRED, §5.8.1.2).
    1 FATTR4_TYPE ftype: NfsFtype4,
    /// `fh_expire_type` (REQUIRED, §5.8.1.3).
    2 FATTR4_FH_EXPIRE_TYPE fh_expire_type: u32,
    /// `change` (REQUIRED, §5.8.1.4).
    3 FATTR4_CHANGE change: u64,
    /// `size` (REQUIRED, §5.8.1.5).
    4 FATTR4_SIZE size: u64,
    /// `link_support` (REQUIRED, §5.8.1.6).
    5 FATTR4_LINK_SUPPORT link_support: bool,
    /// `symlink_support` (REQUIRED, §5.8.1.7).
    6 FATTR4_SYMLINK_SUPPORT symlink_support: bool,
    /// `named_attr` (REQUIRED, §5.8.1.8).
    7 FATTR4_NAMED_ATTR named_attr: bool,
    /// `fsid` (REQUIRED, §5.8.1.9).
    8 FATTR4_FSID fsid: Fsid4,
    /// `unique_handles` (REQUIRED, §5.8.1.10).
    9 FATTR4_UNIQUE_HANDLES unique_handles: bool,
    /// `lease_time` in seconds (REQUIRED, §5.8.1.11).
    10 FATTR4_LEASE_TIME lease_time: u32,
    /// `rdattr_error` (REQUIRED, §5.8.1.12).
    11 FATTR4_RDATTR_ERROR rdattr_error: Nfsstat4,
    /// `aclsupport` (RECOMMENDED, §6.2.1.2).
    13 FATTR4_ACLSUPPORT aclsupport: u32,
    /// `cansettime` (RECOMMENDED, §5.8.2.3).
    15 FATTR4_CANSETTIME cansettime: bool,
    /// `case_insensitive` (RECOMMENDED, §5.8.2.4).
    16 FATTR4_CASE_INSENSITIVE case_insensitive: bool,
    /// `case_preserving` (RECOMMENDED, §5.8.2.5).
    17 FATTR4_CASE_PRESERVING case_preserving: bool,
    /// `chown_restricted` (RECOMMENDED, §5.8.2.6).
    18 FATTR4_CHOWN_RESTRICTED chown_restricted: bool,
    /// `filehandle` (REQUIRED, §5.8.1.13).
    19 FATTR4_FILEHANDLE filehandle: NfsFh4,
    /// `fileid` (RECOMMENDED, §5.8.2.7).
    20 FATTR4_FILEID fileid: u64,
    /// `files_avail` (RECOMMENDED, §5.8.2.8).
    21 FATTR4_FILES_AVAIL files_avail: u64,
    /// `files_free` (RECOMMENDED, §5.8.2.9).
    22 FATTR4_FILES_FREE files_free: u64,
    /// `files_total` (RECOMMENDED, §5.8.2.10).
    23 FATTR4_FILES_TOTAL files_total: u64,
    /// `homogeneous` (RECOMMENDED, §5.8.2.12).
    26 FATTR4_HOMOGENEOUS homogeneous: bool,
    /// `maxfilesize` (RECOMMENDED, §5.8.2.13).
    27 FATTR4_MAXFILESIZE maxfilesize: u64,
    /// `maxlink` (RECOMMENDED, §5.8.2.14).
    28 FATTR4_MAXLINK maxlink: u32,
    /// `maxname` (RECOMMENDED, §5.8.2.15).
    29 FATTR4_MAXNAME maxname: u32,
    /// `maxread` (RECOMMENDED, §5.8.2.16).
    30 FATTR4_MAXREAD maxread: u64,
    /// `maxwrite` (RECOMMENDED, §5.8.2.17).
    31 FATTR4_MAXWRITE maxwrite: u64,
    /// `mode` (RECOMMENDED, §6.2.4).
    33 FATTR4_MODE mode: u32,
    /// `no_trunc` (RECOMMENDED, §5.8.2.19).
    34 FATTR4_NO_TRUNC no_trunc: bool,
    /// `numlinks` (RECOMMENDED, §5.8.2.20).
    35 FATTR4_NUMLINKS numlinks: u32,
    /// `owner` (RECOMMENDED, §5.8.2.21).
    36 FATTR4_OWNER owner: Utf8Str,
    /// `owner_group` (RECOMMENDED, §5.8.2.22).
    37 FATTR4_OWNER_GROUP owner_group: Utf8Str,
    /// `rawdev` (RECOMMENDED, §5.8.2.26).
    41 FATTR4_RAWDEV rawdev: Specdata4,
    /// `space_avail` (RECOMMENDED, §5.8.2.27).
    42 FATTR4_SPACE_AVAIL space_avail: u64,
    /// `space_free` (RECOMMENDED, §5.8.2.28).
    43 FATTR4_SPACE_FREE space_free: u64,
    /// `space_total` (RECOMMENDED, §5.8.2.29).
    44 FATTR4_SPACE_TOTAL space_total: u64,
    /// `space_used` (RECOMMENDED, §5.8.2.30).
    45 FATTR4_SPACE_USED space_used: u64,
    /// `time_access` (RECOMMENDED, §5.8.2.32).
    47 FATTR4_TIME_ACCESS time_access: Nfstime4,
    /// `time_access_set` (write-only, §5.8.2.33).
    48 FATTR4_TIME_ACCESS_SET time_access_set: SetTime4,
    /// `time_delta` (RECOMMENDED, §5.8.2.36).
    51 FATTR4_TIME_DELTA time_delta: Nfstime4,
    /// `time_metadata` (RECOMMENDED, §5.8.2.37).
    52 FATTR4_TIME_METADATA time_metadata: Nfstime4,
    /// `time_modify` (RECOMMENDED, §5.8.2.38).
    53 FATTR4_TIME_MODIFY time_modify: Nfstime4,
    /// `time_modify_set` (write-only, §5.8.2.39).
    54 FATTR4_TIME_MODIFY_SET time_modify_set: SetTime4,
    /// `mounted_on_fileid` (RECOMMENDED, §5.8.2.23).
    55 FATTR4_MOUNTED_ON_FILEID mounted_on_fileid: u64,
    /// `fs_layout_types` (RECOMMENDED, §5.12.2): the pNFS layout types
    /// the file system offers.
    62 FATTR4_FS_LAYOUT_TYPES fs_layout_types: LayoutTypes,
    /// `layout_blksize` (RECOMMENDED, §5.12.5): the preferred I/O size
    /// for layouts.
    65 FATTR4_LAYOUT_BLKSIZE layout_blksize: u32,
    /// `suppattr_exclcreat` (REQUIRED in 4.1, §5.8.1.14).
    75 FATTR4_SUPPATTR_EXCLCREAT suppattr_exclcreat: Bitmap4,
    /// `xattr_support`: the object's file system serves extended
    /// attributes (RFC 8276 §8.2).
    82 FATTR4_XATTR_SUPPORT xattr_support: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_iterates_set_bits_in_order() {
        let b = Bitmap4(vec![0x0010_011a, 0x00b0_a23a]);
        let bits: Vec<u32> = b.iter().collect();
        assert_eq!(
            bits,
            [1, 3, 4, 8, 20, 33, 35, 36, 37, 41, 45, 47, 52, 53, 55]
        );
        assert_eq!(Bitmap4::from_bits(&bits), b);
    }

    #[test]
    fn rejects_attribute_of_unknown_type() {
        let f = Fattr4 {
            attrmask: Bitmap4::from_bits(&[12]),
            attr_vals: xdr::Bounded(Bytes::new()),
        };
        assert_eq!(FileAttrs::from_fattr4(&f), Err(AttrError::Unsupported(12)));
    }

    #[test]
    fn rejects_trailing_attribute_bytes() {
        let f = Fattr4 {
            attrmask: Bitmap4::from_bits(&[FATTR4_MODE]),
            attr_vals: xdr::Bounded(Bytes::from_static(&[0, 0, 1, 0xa4, 0, 0, 0, 0])),
        };
        assert!(matches!(FileAttrs::from_fattr4(&f), Err(AttrError::Xdr(_))));
    }

    #[test]
    fn encodes_only_requested_and_present_attributes() {
        let a = FileAttrs {
            size: Some(10),
            mode: Some(0o644),
            fileid: Some(7),
            ..Default::default()
        };
        let f = a.to_fattr4(&Bitmap4::from_bits(&[
            FATTR4_SIZE,
            FATTR4_MODE,
            FATTR4_OWNER,
        ]));
        assert_eq!(f.attrmask, Bitmap4::from_bits(&[FATTR4_SIZE, FATTR4_MODE]));
        assert_eq!(
            &f.attr_vals.0[..],
            &[0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1, 0xa4]
        );
        let back = FileAttrs::from_fattr4(&f).unwrap();
        assert_eq!(back.size, Some(10));
        assert_eq!(back.mode, Some(0o644));
        assert_eq!(back.fileid, None);
    }

    #[test]
    fn pnfs_attributes_round_trip() {
        let a = FileAttrs {
            fs_layout_types: Some(xdr::Bounded(vec![Layouttype4::LAYOUT4_FLEX_FILES])),
            layout_blksize: Some(1 << 20),
            ..Default::default()
        };
        let f = a.to_fattr4(&a.mask());
        assert_eq!(
            f.attrmask,
            Bitmap4::from_bits(&[FATTR4_FS_LAYOUT_TYPES, FATTR4_LAYOUT_BLKSIZE])
        );
        assert_eq!(&f.attr_vals.0[..], &[0, 0, 0, 1, 0, 0, 0, 4, 0, 0x10, 0, 0]);
        assert_eq!(FileAttrs::from_fattr4(&f).unwrap(), a);
    }
}
