//! Arguments and results of the 22 NFSv3 procedures (RFC 1813 §3.3.0 to
//! §3.3.21). Each `XXX3res` is a [`Res3`] of its `resok` and `resfail`
//! arms.

use xdr::{Decode, Decoder, Encode, Encoder, Error};

use super::{
    Cookieverf3, Createverf3, Data3, Diropargs3, Fattr3, Filename3, Ftype3, NfsFh3, Nfspath3,
    Nfstime3, PostOpAttr, PostOpFh3, Res3, Sattr3, Specdata3, StableHow, WccData, Writeverf3,
};

xdr_struct! {
    /// GETATTR3args (RFC 1813 §3.3.1).
    pub struct Getattr3Args {
        /// The object.
        pub object: NfsFh3,
    }
}
xdr_struct! {
    /// GETATTR3resok (RFC 1813 §3.3.1).
    pub struct Getattr3ResOk {
        /// The attributes.
        pub obj_attributes: Fattr3,
    }
}
/// GETATTR3res (RFC 1813 §3.3.1).
pub type Getattr3Res = Res3<Getattr3ResOk, ()>;

xdr_struct! {
    /// SETATTR3args (RFC 1813 §3.3.2); `guard` is `sattrguard3`: when set,
    /// the object's ctime must equal it.
    pub struct Setattr3Args {
        /// The object.
        pub object: NfsFh3,
        /// What to change.
        pub new_attributes: Sattr3,
        /// `sattrguard3`: the expected ctime.
        pub guard: Option<Nfstime3>,
    }
}
/// SETATTR3res (RFC 1813 §3.3.2): `obj_wcc` in both arms.
pub type Setattr3Res = Res3<WccData, WccData>;

xdr_struct! {
    /// LOOKUP3args (RFC 1813 §3.3.3).
    pub struct Lookup3Args {
        /// Directory and name.
        pub what: Diropargs3,
    }
}
xdr_struct! {
    /// LOOKUP3resok (RFC 1813 §3.3.3).
    pub struct Lookup3ResOk {
        /// The handle found.
        pub object: NfsFh3,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
    }
}
/// LOOKUP3res (RFC 1813 §3.3.3); the failure arm is `dir_attributes`.
pub type Lookup3Res = Res3<Lookup3ResOk, PostOpAttr>;

xdr_struct! {
    /// ACCESS3args (RFC 1813 §3.3.4).
    pub struct Access3Args {
        /// The object.
        pub object: NfsFh3,
        /// ACCESS3_* bits to check.
        pub access: u32,
    }
}
xdr_struct! {
    /// ACCESS3resok (RFC 1813 §3.3.4).
    pub struct Access3ResOk {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
        /// ACCESS3_* bits granted.
        pub access: u32,
    }
}
/// ACCESS3res (RFC 1813 §3.3.4); the failure arm is `obj_attributes`.
pub type Access3Res = Res3<Access3ResOk, PostOpAttr>;

xdr_struct! {
    /// READLINK3args (RFC 1813 §3.3.5).
    pub struct Readlink3Args {
        /// The symbolic link.
        pub symlink: NfsFh3,
    }
}
xdr_struct! {
    /// READLINK3resok (RFC 1813 §3.3.5); `data` is DDP-eligible
    /// (ULB v2 draft §3).
    pub struct Readlink3ResOk {
        /// The link's attributes.
        pub symlink_attributes: PostOpAttr,
        /// The link text.
        pub data: Nfspath3,
    }
}
/// READLINK3res (RFC 1813 §3.3.5).
pub type Readlink3Res = Res3<Readlink3ResOk, PostOpAttr>;

xdr_struct! {
    /// READ3args (RFC 1813 §3.3.6).
    pub struct Read3Args {
        /// The file.
        pub file: NfsFh3,
        /// Byte offset.
        pub offset: u64,
        /// Bytes wanted.
        pub count: u32,
    }
}
xdr_struct! {
    /// READ3resok (RFC 1813 §3.3.6); `data` is DDP-eligible
    /// (ULB v2 draft §3).
    pub struct Read3ResOk {
        /// The file's attributes.
        pub file_attributes: PostOpAttr,
        /// Bytes returned.
        pub count: u32,
        /// True when the read reached the end of the file.
        pub eof: bool,
        /// The data.
        pub data: Data3,
    }
}
/// READ3res (RFC 1813 §3.3.6).
pub type Read3Res = Res3<Read3ResOk, PostOpAttr>;

xdr_struct! {
    /// WRITE3args (RFC 1813 §3.3.7); `data` is DDP-eligible
    /// (ULB v2 draft §3).
    pub struct Write3Args {
        /// The file.
        pub file: NfsFh3,
        /// Byte offset.
        pub offset: u64,
        /// Bytes to write (must not exceed `data`'s length).
        pub count: u32,
        /// How stable the data must be before the reply.
        pub stable: StableHow,
        /// The data.
        pub data: Data3,
    }
}
xdr_struct! {
    /// WRITE3resok (RFC 1813 §3.3.7).
    pub struct Write3ResOk {
        /// The file's attributes around the write.
        pub file_wcc: WccData,
        /// Bytes written.
        pub count: u32,
        /// How stable the data is.
        pub committed: StableHow,
        /// The server instance's write verifier.
        pub verf: Writeverf3,
    }
}
/// WRITE3res (RFC 1813 §3.3.7).
pub type Write3Res = Res3<Write3ResOk, WccData>;

/// `createhow3` (RFC 1813 §3.3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createhow3 {
    /// UNCHECKED (0): create or truncate.
    Unchecked(Sattr3),
    /// GUARDED (1): fail with NFS3ERR_EXIST when the name exists.
    Guarded(Sattr3),
    /// EXCLUSIVE (2): idempotent create keyed by a verifier.
    Exclusive(Createverf3),
}

/// RFC 1813 §3.3.8 `union createhow3 switch (createmode3 mode)`.
impl Encode for Createhow3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Createhow3::Unchecked(a) => {
                enc.put_u32(0);
                a.encode(enc);
            }
            Createhow3::Guarded(a) => {
                enc.put_u32(1);
                a.encode(enc);
            }
            Createhow3::Exclusive(v) => {
                enc.put_u32(2);
                v.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for Createhow3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        match dec.enum_checked(|v| v <= 2)? {
            0 => Ok(Createhow3::Unchecked(dec.decode()?)),
            1 => Ok(Createhow3::Guarded(dec.decode()?)),
            _ => Ok(Createhow3::Exclusive(dec.decode()?)),
        }
    }
}

xdr_struct! {
    /// CREATE3args (RFC 1813 §3.3.8).
    pub struct Create3Args {
        /// Directory and name.
        pub dir: Diropargs3,
        /// Creation mode.
        pub how: Createhow3,
    }
}
xdr_struct! {
    /// CREATE3resok, also MKDIR3resok, SYMLINK3resok and MKNOD3resok
    /// (RFC 1813 §3.3.8 to §3.3.11).
    pub struct Create3ResOk {
        /// The new object's handle.
        pub obj: PostOpFh3,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's attributes around the change.
        pub dir_wcc: WccData,
    }
}
/// CREATE3res, MKDIR3res, SYMLINK3res and MKNOD3res (RFC 1813 §3.3.8 to
/// §3.3.11); the failure arm is `dir_wcc`.
pub type Create3Res = Res3<Create3ResOk, WccData>;

xdr_struct! {
    /// MKDIR3args (RFC 1813 §3.3.9).
    pub struct Mkdir3Args {
        /// Directory and name.
        pub dir: Diropargs3,
        /// Initial attributes.
        pub attributes: Sattr3,
    }
}

xdr_struct! {
    /// SYMLINK3args (RFC 1813 §3.3.10) with `symlinkdata3` inlined; the
    /// path is DDP-eligible (ULB v2 draft §3).
    pub struct Symlink3Args {
        /// Directory and name.
        pub dir: Diropargs3,
        /// Initial attributes.
        pub symlink_attributes: Sattr3,
        /// The link text.
        pub symlink_data: Nfspath3,
    }
}

/// `mknoddata3` (RFC 1813 §3.3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mknoddata3 {
    /// NF3CHR or NF3BLK: `devicedata3`.
    Device {
        /// NF3CHR or NF3BLK.
        ftype: Ftype3,
        /// Initial attributes.
        attributes: Sattr3,
        /// Device numbers.
        spec: Specdata3,
    },
    /// NF3SOCK or NF3FIFO with attributes.
    Special {
        /// NF3SOCK or NF3FIFO.
        ftype: Ftype3,
        /// Initial attributes.
        attributes: Sattr3,
    },
    /// Any other type: no body (the server answers NFS3ERR_BADTYPE).
    Other(Ftype3),
}

/// RFC 1813 §3.3.11 `union mknoddata3 switch (ftype3 type)`.
impl Encode for Mknoddata3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Mknoddata3::Device {
                ftype,
                attributes,
                spec,
            } => {
                ftype.encode(enc);
                attributes.encode(enc);
                spec.encode(enc);
            }
            Mknoddata3::Special { ftype, attributes } => {
                ftype.encode(enc);
                attributes.encode(enc);
            }
            Mknoddata3::Other(t) => t.encode(enc),
        }
    }
}

impl<'a> Decode<'a> for Mknoddata3 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let ftype: Ftype3 = dec.decode()?;
        match ftype {
            Ftype3::NF3CHR | Ftype3::NF3BLK => Ok(Mknoddata3::Device {
                ftype,
                attributes: dec.decode()?,
                spec: dec.decode()?,
            }),
            Ftype3::NF3SOCK | Ftype3::NF3FIFO => Ok(Mknoddata3::Special {
                ftype,
                attributes: dec.decode()?,
            }),
            other => Ok(Mknoddata3::Other(other)),
        }
    }
}

xdr_struct! {
    /// MKNOD3args (RFC 1813 §3.3.11).
    pub struct Mknod3Args {
        /// Directory and name.
        pub dir: Diropargs3,
        /// What to create.
        pub what: Mknoddata3,
    }
}

xdr_struct! {
    /// REMOVE3args (RFC 1813 §3.3.12), also RMDIR3args (§3.3.13).
    pub struct Remove3Args {
        /// Directory and name.
        pub object: Diropargs3,
    }
}
/// REMOVE3res and RMDIR3res (RFC 1813 §3.3.12, §3.3.13): `dir_wcc` in both
/// arms.
pub type Remove3Res = Res3<WccData, WccData>;

xdr_struct! {
    /// RENAME3args (RFC 1813 §3.3.14).
    pub struct Rename3Args {
        /// Source directory and name.
        pub from: Diropargs3,
        /// Target directory and name.
        pub to: Diropargs3,
    }
}
xdr_struct! {
    /// RENAME3resok and RENAME3resfail (RFC 1813 §3.3.14).
    #[derive(Default)]
    pub struct Rename3Wcc {
        /// Source directory around the change.
        pub fromdir_wcc: WccData,
        /// Target directory around the change.
        pub todir_wcc: WccData,
    }
}
/// RENAME3res (RFC 1813 §3.3.14).
pub type Rename3Res = Res3<Rename3Wcc, Rename3Wcc>;

xdr_struct! {
    /// LINK3args (RFC 1813 §3.3.15).
    pub struct Link3Args {
        /// The existing file.
        pub file: NfsFh3,
        /// Directory and name of the new link.
        pub link: Diropargs3,
    }
}
xdr_struct! {
    /// LINK3resok and LINK3resfail (RFC 1813 §3.3.15).
    #[derive(Default)]
    pub struct Link3Wcc {
        /// The file's attributes.
        pub file_attributes: PostOpAttr,
        /// The directory around the change.
        pub linkdir_wcc: WccData,
    }
}
/// LINK3res (RFC 1813 §3.3.15).
pub type Link3Res = Res3<Link3Wcc, Link3Wcc>;

xdr_struct! {
    /// READDIR3args (RFC 1813 §3.3.16).
    pub struct Readdir3Args {
        /// The directory.
        pub dir: NfsFh3,
        /// Where to resume (0 for the start).
        pub cookie: u64,
        /// The verifier returned with `cookie`.
        pub cookieverf: Cookieverf3,
        /// Largest reply the client accepts, in bytes.
        pub count: u32,
    }
}

xdr_struct! {
    /// `entry3` (RFC 1813 §3.3.16) without its list link.
    pub struct Entry3 {
        /// File id.
        pub fileid: u64,
        /// Name.
        pub name: Filename3,
        /// Cookie to resume after this entry.
        pub cookie: u64,
    }
}

xdr_struct! {
    /// `entryplus3` (RFC 1813 §3.3.17) without its list link.
    pub struct Entryplus3 {
        /// File id.
        pub fileid: u64,
        /// Name.
        pub name: Filename3,
        /// Cookie to resume after this entry.
        pub cookie: u64,
        /// Attributes.
        pub name_attributes: PostOpAttr,
        /// Handle.
        pub name_handle: PostOpFh3,
    }
}

/// Encodes an XDR optional-data linked list (`entry3 *entries` with
/// `nextentry`, RFC 4506 §4.19): each element preceded by TRUE, the end by
/// FALSE.
fn encode_list<T: Encode, E: Encoder + ?Sized>(items: &[T], enc: &mut E) {
    for item in items {
        enc.put_bool(true);
        item.encode(enc);
    }
    enc.put_bool(false);
}

/// Decodes an XDR linked list. Each element consumes input, so the list
/// cannot outgrow the input; nothing is allocated ahead of it.
fn decode_list<'a, T: Decode<'a>>(dec: &mut Decoder<'a>) -> Result<Vec<T>, Error> {
    let mut out = Vec::new();
    while dec.bool()? {
        out.push(dec.decode()?);
    }
    Ok(out)
}

/// READDIR3resok (RFC 1813 §3.3.16) and READDIRPLUS3resok (§3.3.17),
/// with `dirlist3` / `dirlistplus3` inlined: the two differ only in the
/// entry type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPage3<E> {
    /// The directory's attributes.
    pub dir_attributes: PostOpAttr,
    /// The verifier for the returned cookies.
    pub cookieverf: Cookieverf3,
    /// The entries.
    pub entries: Vec<E>,
    /// True when the last entry is the directory's last.
    pub eof: bool,
}

/// RFC 1813 §3.3.16 READDIR3resok and §3.3.17 READDIRPLUS3resok.
impl<E: Encode> Encode for DirPage3<E> {
    fn encode<En: Encoder + ?Sized>(&self, enc: &mut En) {
        self.dir_attributes.encode(enc);
        self.cookieverf.encode(enc);
        encode_list(&self.entries, enc);
        enc.put_bool(self.eof);
    }
}

impl<'a, E: Decode<'a>> Decode<'a> for DirPage3<E> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(Self {
            dir_attributes: dec.decode()?,
            cookieverf: dec.decode()?,
            entries: decode_list(dec)?,
            eof: dec.bool()?,
        })
    }
}

/// READDIR3resok (RFC 1813 §3.3.16).
pub type Readdir3ResOk = DirPage3<Entry3>;
/// READDIR3res (RFC 1813 §3.3.16).
pub type Readdir3Res = Res3<Readdir3ResOk, PostOpAttr>;

xdr_struct! {
    /// READDIRPLUS3args (RFC 1813 §3.3.17).
    pub struct Readdirplus3Args {
        /// The directory.
        pub dir: NfsFh3,
        /// Where to resume (0 for the start).
        pub cookie: u64,
        /// The verifier returned with `cookie`.
        pub cookieverf: Cookieverf3,
        /// Bytes of directory information (fileid, name, cookie) wanted.
        pub dircount: u32,
        /// Largest reply the client accepts, in bytes.
        pub maxcount: u32,
    }
}

/// READDIRPLUS3resok (RFC 1813 §3.3.17).
pub type Readdirplus3ResOk = DirPage3<Entryplus3>;

/// READDIRPLUS3res (RFC 1813 §3.3.17).
pub type Readdirplus3Res = Res3<Readdirplus3ResOk, PostOpAttr>;

xdr_struct! {
    /// FSSTAT3args, FSINFO3args and PATHCONF3args (RFC 1813 §3.3.18 to
    /// §3.3.20): one file handle.
    pub struct Fsroot3Args {
        /// The file system root (any object for PATHCONF).
        pub object: NfsFh3,
    }
}
xdr_struct! {
    /// FSSTAT3resok (RFC 1813 §3.3.18).
    pub struct Fsstat3ResOk {
        /// Root attributes.
        pub obj_attributes: PostOpAttr,
        /// Total bytes.
        pub tbytes: u64,
        /// Free bytes.
        pub fbytes: u64,
        /// Bytes available to the caller.
        pub abytes: u64,
        /// Total file slots.
        pub tfiles: u64,
        /// Free file slots.
        pub ffiles: u64,
        /// File slots available to the caller.
        pub afiles: u64,
        /// Seconds for which the figures will not change.
        pub invarsec: u32,
    }
}
/// FSSTAT3res (RFC 1813 §3.3.18).
pub type Fsstat3Res = Res3<Fsstat3ResOk, PostOpAttr>;

xdr_struct! {
    /// FSINFO3resok (RFC 1813 §3.3.19).
    pub struct Fsinfo3ResOk {
        /// Root attributes.
        pub obj_attributes: PostOpAttr,
        /// Largest READ.
        pub rtmax: u32,
        /// Preferred READ size.
        pub rtpref: u32,
        /// READ size multiple.
        pub rtmult: u32,
        /// Largest WRITE.
        pub wtmax: u32,
        /// Preferred WRITE size.
        pub wtpref: u32,
        /// WRITE size multiple.
        pub wtmult: u32,
        /// Preferred READDIR count.
        pub dtpref: u32,
        /// Largest file size.
        pub maxfilesize: u64,
        /// Time granularity.
        pub time_delta: Nfstime3,
        /// FSF3_* bits.
        pub properties: u32,
    }
}
/// FSINFO3res (RFC 1813 §3.3.19).
pub type Fsinfo3Res = Res3<Fsinfo3ResOk, PostOpAttr>;

xdr_struct! {
    /// PATHCONF3resok (RFC 1813 §3.3.20).
    pub struct Pathconf3ResOk {
        /// Object attributes.
        pub obj_attributes: PostOpAttr,
        /// Largest link count.
        pub linkmax: u32,
        /// Longest name.
        pub name_max: u32,
        /// Longer names are rejected rather than truncated.
        pub no_trunc: bool,
        /// Only a privileged user may chown.
        pub chown_restricted: bool,
        /// Names are compared case-insensitively.
        pub case_insensitive: bool,
        /// Name case is preserved.
        pub case_preserving: bool,
    }
}
/// PATHCONF3res (RFC 1813 §3.3.20).
pub type Pathconf3Res = Res3<Pathconf3ResOk, PostOpAttr>;

xdr_struct! {
    /// COMMIT3args (RFC 1813 §3.3.21).
    pub struct Commit3Args {
        /// The file.
        pub file: NfsFh3,
        /// Start of the range (0 with count 0 for the whole file).
        pub offset: u64,
        /// Length of the range, 0 for "to the end".
        pub count: u32,
    }
}
xdr_struct! {
    /// COMMIT3resok (RFC 1813 §3.3.21).
    pub struct Commit3ResOk {
        /// The file around the commit.
        pub file_wcc: WccData,
        /// The server instance's write verifier.
        pub verf: Writeverf3,
    }
}
/// COMMIT3res (RFC 1813 §3.3.21).
pub type Commit3Res = Res3<Commit3ResOk, WccData>;
