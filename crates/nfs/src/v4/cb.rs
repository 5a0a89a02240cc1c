//! The NFSv4.1 callback program (RFC 8881 §20): CB_COMPOUND with
//! CB_SEQUENCE, CB_RECALL, CB_GETATTR, CB_LAYOUTRECALL and NFSv4.2's
//! CB_OFFLOAD (RFC 7862 §16.1). CB_NULL is procedure [`CB_NULL`] with no
//! arguments and no results. The program number is the one the client
//! gave in CREATE_SESSION (`csa_cb_program`).

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error, ErrorKind};

use super::attr::{Bitmap4, Fattr4};
use super::pnfs::{
    Layoutiomode4, Layouttype4, LAYOUTRETURN4_ALL, LAYOUTRETURN4_FILE, LAYOUTRETURN4_FSID,
};
use super::v42::WriteResponse4;
use super::{Fsid4, NfsFh4, Nfsstat4, Res4, Sessionid4, Stateid4, NFS4_MAX_OPS, NFS4_MAX_TAGLEN};

/// Procedure CB_NULL (RFC 8881 §20.1).
pub const CB_NULL: u32 = 0;
/// Procedure CB_COMPOUND (RFC 8881 §20.2).
pub const CB_COMPOUND: u32 = 1;
/// Version of the callback program (RFC 8881 §20).
pub const NFS4_CALLBACK_VERSION: u32 = 1;
/// OP_CB_GETATTR (RFC 8881 §20.1).
pub const OP_CB_GETATTR: u32 = 3;
/// OP_CB_RECALL (RFC 8881 §20.2).
pub const OP_CB_RECALL: u32 = 4;
/// OP_CB_LAYOUTRECALL (RFC 8881 §20.3).
pub const OP_CB_LAYOUTRECALL: u32 = 5;
/// OP_CB_SEQUENCE (RFC 8881 §20.2).
pub const OP_CB_SEQUENCE: u32 = 11;
/// OP_CB_OFFLOAD (RFC 7862 §16.1).
pub const OP_CB_OFFLOAD: u32 = 15;
/// OP_CB_ILLEGAL (RFC 8881 §20.2).
pub const OP_CB_ILLEGAL: u32 = 10044;

xdr_struct! {
    /// `referring_call4` (RFC 8881 §20.9.1).
    pub struct ReferringCall4 {
        /// Sequence id of the fore-channel call.
        pub sequenceid: u32,
        /// Its slot.
        pub slotid: u32,
    }
}
xdr_struct! {
    /// `referring_call_list4` (RFC 8881 §20.9.1).
    pub struct ReferringCallList4 {
        /// Session of the referring calls.
        pub sessionid: Sessionid4,
        /// The calls.
        pub referring_calls: Bounded<Vec<ReferringCall4>, 64>,
    }
}
xdr_struct! {
    /// CB_SEQUENCE4args (RFC 8881 §20.9.1).
    pub struct CbSequence4Args {
        /// Session.
        pub sessionid: Sessionid4,
        /// Slot sequence id.
        pub sequenceid: u32,
        /// Slot.
        pub slotid: u32,
        /// Highest slot in use.
        pub highest_slotid: u32,
        /// Cache the reply.
        pub cachethis: bool,
        /// Fore-channel calls this callback races with.
        pub referring_call_lists: Bounded<Vec<ReferringCallList4>, 16>,
    }
}
xdr_struct! {
    /// CB_SEQUENCE4resok (RFC 8881 §20.9.2).
    pub struct CbSequence4ResOk {
        /// Session.
        pub sessionid: Sessionid4,
        /// Echo.
        pub sequenceid: u32,
        /// Echo.
        pub slotid: u32,
        /// Highest slot.
        pub highest_slotid: u32,
        /// Target highest slot.
        pub target_highest_slotid: u32,
    }
}
xdr_struct! {
    /// CB_RECALL4args (RFC 8881 §20.2.1).
    pub struct CbRecall4Args {
        /// The delegation.
        pub stateid: Stateid4,
        /// Whether the file is being truncated.
        pub truncate: bool,
        /// The file.
        pub fh: NfsFh4,
    }
}

xdr_struct! {
    /// CB_GETATTR4args (RFC 8881 §20.1.1): the attributes of a file under
    /// a write delegation, as its holder sees them.
    pub struct CbGetattr4Args {
        /// The file.
        pub fh: NfsFh4,
        /// Attributes wanted (size and change, §10.4.3).
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// `layoutrecall_file4` (RFC 8881 §20.3.1).
    pub struct LayoutrecallFile4 {
        /// The file.
        pub fh: NfsFh4,
        /// Start of the range recalled.
        pub offset: u64,
        /// Its length.
        pub length: u64,
        /// The layout stateid.
        pub stateid: Stateid4,
    }
}

/// `layoutrecall4` (RFC 8881 §20.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layoutrecall4 {
    /// LAYOUTRECALL4_FILE: a range of one file.
    File(LayoutrecallFile4),
    /// LAYOUTRECALL4_FSID: every layout of a file system.
    Fsid(Fsid4),
    /// LAYOUTRECALL4_ALL: every layout.
    All,
}

/// RFC 8881 §20.3.1 `union layoutrecall4 switch (layoutrecall_type4
/// lor_recalltype)`.
impl Encode for Layoutrecall4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::File(f) => {
                enc.put_u32(LAYOUTRETURN4_FILE);
                f.encode(enc);
            }
            Self::Fsid(f) => {
                enc.put_u32(LAYOUTRETURN4_FSID);
                f.encode(enc);
            }
            Self::All => enc.put_u32(LAYOUTRETURN4_ALL),
        }
    }
}

impl<'a> Decode<'a> for Layoutrecall4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        Ok(match dec.u32()? {
            LAYOUTRETURN4_FILE => Self::File(dec.decode()?),
            LAYOUTRETURN4_FSID => Self::Fsid(dec.decode()?),
            LAYOUTRETURN4_ALL => Self::All,
            n => return Err(Error::new(ErrorKind::InvalidEnum(n), at, "layoutrecall4")),
        })
    }
}

xdr_struct! {
    /// CB_LAYOUTRECALL4args (RFC 8881 §20.3.1).
    pub struct CbLayoutrecall4Args {
        /// Layout type recalled.
        pub layout_type: Layouttype4,
        /// Access recalled.
        pub iomode: Layoutiomode4,
        /// The layout changed: the client must not write through it again
        /// (data it cached for it need not be flushed through it).
        pub changed: bool,
        /// What is recalled.
        pub recall: Layoutrecall4,
    }
}

/// `offload_info4` (RFC 7862 §16.1.1): how an asynchronous copy ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffloadInfo4 {
    /// NFS4_OK: what was copied (`coa_resok4`).
    Ok(WriteResponse4),
    /// The copy failed with this status after `bytes_copied` bytes.
    Err {
        /// Why (never NFS4_OK).
        status: Nfsstat4,
        /// Bytes copied before it failed (`coa_bytes_copied`).
        bytes_copied: u64,
    },
}

/// RFC 7862 §16.1.1 `union offload_info4 switch (nfsstat4 coa_status)`.
impl Encode for OffloadInfo4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            OffloadInfo4::Ok(w) => {
                Nfsstat4::NFS4_OK.encode(enc);
                w.encode(enc);
            }
            OffloadInfo4::Err {
                status,
                bytes_copied,
            } => {
                status.encode(enc);
                enc.put_u64(*bytes_copied);
            }
        }
    }
}

impl<'a> Decode<'a> for OffloadInfo4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let status: Nfsstat4 = dec.decode()?;
        Ok(if status.is_ok() {
            OffloadInfo4::Ok(dec.decode()?)
        } else {
            OffloadInfo4::Err {
                status,
                bytes_copied: dec.u64()?,
            }
        })
    }
}

xdr_struct! {
    /// CB_OFFLOAD4args (RFC 7862 §16.1.1): an asynchronous COPY to the
    /// file `fh` finished.
    pub struct CbOffload4Args {
        /// The destination file.
        pub fh: NfsFh4,
        /// The copy's stateid (COPY's `wr_callback_id`).
        pub stateid: Stateid4,
        /// Its outcome.
        pub info: OffloadInfo4,
    }
}

/// One callback operation's arguments (`nfs_cb_argop4`, RFC 8881 §20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsCbArgop4 {
    /// CB_SEQUENCE.
    Sequence(CbSequence4Args),
    /// CB_GETATTR.
    Getattr(CbGetattr4Args),
    /// CB_RECALL.
    Recall(CbRecall4Args),
    /// CB_LAYOUTRECALL.
    Layoutrecall(CbLayoutrecall4Args),
    /// CB_OFFLOAD (RFC 7862 §16.1).
    Offload(CbOffload4Args),
    /// Any other operation (number only; the client answers with an error).
    Other(u32),
}

/// RFC 8881 §20.2 `union nfs_cb_argop4 switch (unsigned argop)`.
impl Encode for NfsCbArgop4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            NfsCbArgop4::Sequence(a) => {
                enc.put_u32(OP_CB_SEQUENCE);
                a.encode(enc);
            }
            NfsCbArgop4::Recall(a) => {
                enc.put_u32(OP_CB_RECALL);
                a.encode(enc);
            }
            NfsCbArgop4::Getattr(a) => {
                enc.put_u32(OP_CB_GETATTR);
                a.encode(enc);
            }
            NfsCbArgop4::Layoutrecall(a) => {
                enc.put_u32(OP_CB_LAYOUTRECALL);
                a.encode(enc);
            }
            NfsCbArgop4::Offload(a) => {
                enc.put_u32(OP_CB_OFFLOAD);
                a.encode(enc);
            }
            NfsCbArgop4::Other(n) => enc.put_u32(*n),
        }
    }
}

impl<'a> Decode<'a> for NfsCbArgop4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(match dec.u32()? {
            OP_CB_SEQUENCE => NfsCbArgop4::Sequence(dec.decode()?),
            OP_CB_RECALL => NfsCbArgop4::Recall(dec.decode()?),
            OP_CB_GETATTR => NfsCbArgop4::Getattr(dec.decode()?),
            OP_CB_LAYOUTRECALL => NfsCbArgop4::Layoutrecall(dec.decode()?),
            OP_CB_OFFLOAD => NfsCbArgop4::Offload(dec.decode()?),
            n => NfsCbArgop4::Other(n),
        })
    }
}

/// CB_COMPOUND4args (RFC 8881 §20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound4Args {
    /// Tag.
    pub tag: Bytes,
    /// Minor version.
    pub minorversion: u32,
    /// Callback identifier (0 in 4.1).
    pub callback_ident: u32,
    /// Operations; decoding stops after an [`NfsCbArgop4::Other`].
    pub argarray: Vec<NfsCbArgop4>,
}

/// RFC 8881 §20.2 `struct CB_COMPOUND4args`.
impl Encode for CbCompound4Args {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.tag);
        enc.put_u32(self.minorversion);
        enc.put_u32(self.callback_ident);
        self.argarray.encode(enc);
    }
}

impl<'a> Decode<'a> for CbCompound4Args {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let tag = dec.opaque_bytes(NFS4_MAX_TAGLEN)?;
        let minorversion = dec.u32()?;
        let callback_ident = dec.u32()?;
        let n = dec.array_len(NFS4_MAX_OPS, 4)?;
        let mut argarray = Vec::with_capacity(n);
        for _ in 0..n {
            let op: NfsCbArgop4 = dec.decode()?;
            let stop = matches!(op, NfsCbArgop4::Other(_));
            argarray.push(op);
            if stop {
                let _ = dec.rest();
                break;
            }
        }
        Ok(Self {
            tag,
            minorversion,
            callback_ident,
            argarray,
        })
    }
}

/// One callback operation's result (`nfs_cb_resop4`, RFC 8881 §20.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsCbResop4 {
    /// CB_SEQUENCE.
    Sequence(Res4<CbSequence4ResOk>),
    /// CB_RECALL.
    Recall(Nfsstat4),
    /// CB_GETATTR (RFC 8881 §20.1.2): the holder's attributes.
    Getattr(Res4<Fattr4>),
    /// CB_LAYOUTRECALL (RFC 8881 §20.3.2): NFS4ERR_NOMATCHING_LAYOUT when
    /// the client holds nothing recalled.
    Layoutrecall(Nfsstat4),
    /// CB_OFFLOAD (RFC 7862 §16.1.2).
    Offload(Nfsstat4),
    /// Any other operation, answered with an error status.
    Other(u32, Nfsstat4),
}

/// RFC 8881 §20.2 `union nfs_cb_resop4 switch (unsigned resop)`.
impl Encode for NfsCbResop4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            NfsCbResop4::Sequence(r) => {
                enc.put_u32(OP_CB_SEQUENCE);
                r.encode(enc);
            }
            NfsCbResop4::Recall(s) => {
                enc.put_u32(OP_CB_RECALL);
                s.encode(enc);
            }
            NfsCbResop4::Getattr(r) => {
                enc.put_u32(OP_CB_GETATTR);
                r.encode(enc);
            }
            NfsCbResop4::Layoutrecall(s) => {
                enc.put_u32(OP_CB_LAYOUTRECALL);
                s.encode(enc);
            }
            NfsCbResop4::Offload(s) => {
                enc.put_u32(OP_CB_OFFLOAD);
                s.encode(enc);
            }
            NfsCbResop4::Other(n, s) => {
                enc.put_u32(*n);
                s.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for NfsCbResop4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        Ok(match dec.u32()? {
            OP_CB_SEQUENCE => NfsCbResop4::Sequence(dec.decode()?),
            OP_CB_RECALL => NfsCbResop4::Recall(dec.decode()?),
            OP_CB_GETATTR => NfsCbResop4::Getattr(dec.decode()?),
            OP_CB_LAYOUTRECALL => NfsCbResop4::Layoutrecall(dec.decode()?),
            OP_CB_OFFLOAD => NfsCbResop4::Offload(dec.decode()?),
            n => {
                let s: Nfsstat4 = dec.decode()?;
                if s.is_ok() {
                    return Err(Error::new(ErrorKind::InvalidEnum(n), at, "nfs_cb_resop4"));
                }
                NfsCbResop4::Other(n, s)
            }
        })
    }
}

xdr_struct! {
    /// CB_COMPOUND4res (RFC 8881 §20.2).
    pub struct CbCompound4Res {
        /// Status of the last operation.
        pub status: Nfsstat4,
        /// Tag.
        pub tag: Bounded<Bytes, NFS4_MAX_TAGLEN>,
        /// Results.
        pub resarray: Bounded<Vec<NfsCbResop4>, NFS4_MAX_OPS>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::FixedOpaque;

    #[test]
    fn cb_compound_with_sequence_and_recall_round_trips() {
        let args = CbCompound4Args {
            tag: Bytes::new(),
            minorversion: 1,
            callback_ident: 0,
            argarray: vec![
                NfsCbArgop4::Sequence(CbSequence4Args {
                    sessionid: FixedOpaque([7; 16]),
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    cachethis: false,
                    referring_call_lists: Bounded(vec![]),
                }),
                NfsCbArgop4::Recall(CbRecall4Args {
                    stateid: Stateid4 {
                        seqid: 1,
                        other: FixedOpaque([3; 12]),
                    },
                    truncate: false,
                    fh: NfsFh4(Bytes::from_static(&[1, 2, 3, 4])),
                }),
            ],
        };
        let wire = xdr::to_bytes(&args);
        assert_eq!(
            &wire[..16],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]
        );
        assert_eq!(xdr::from_slice::<CbCompound4Args>(&wire).unwrap(), args);
        let res = CbCompound4Res {
            status: Nfsstat4::NFS4_OK,
            tag: Bounded(Bytes::new()),
            resarray: Bounded(vec![
                NfsCbResop4::Sequence(Res4::Err(Nfsstat4::NFS4ERR_BADSESSION)),
                NfsCbResop4::Recall(Nfsstat4::NFS4_OK),
            ]),
        };
        let wire = xdr::to_bytes(&res);
        assert_eq!(xdr::from_slice::<CbCompound4Res>(&wire).unwrap(), res);
    }

    #[test]
    fn cb_offload_round_trips_with_its_wire_layout() {
        use super::super::{StableHow4, Stateid4};
        let sid = Stateid4 {
            seqid: 1,
            other: FixedOpaque([5; 12]),
        };
        let ok = NfsCbArgop4::Offload(CbOffload4Args {
            fh: NfsFh4(Bytes::from_static(&[1, 2, 3, 4])),
            stateid: sid,
            info: OffloadInfo4::Ok(WriteResponse4 {
                callback_id: Bounded(vec![]),
                count: 1 << 30,
                committed: StableHow4::FILE_SYNC4,
                writeverf: FixedOpaque([9; 8]),
            }),
        });
        let wire = xdr::to_bytes(&ok);
        // opnum 15, the handle, the stateid, NFS4_OK, then write_response4.
        assert_eq!(&wire[..4], &[0, 0, 0, 15]);
        assert_eq!(&wire[4..12], &[0, 0, 0, 4, 1, 2, 3, 4]);
        assert_eq!(&wire[28..32], &[0, 0, 0, 0], "coa_status");
        assert_eq!(wire.len(), 4 + 8 + 16 + 4 + (4 + 8 + 4 + 8));
        assert_eq!(xdr::from_slice::<NfsCbArgop4>(&wire).unwrap(), ok);
        let failed = NfsCbArgop4::Offload(CbOffload4Args {
            fh: NfsFh4(Bytes::from_static(&[7; 8])),
            stateid: sid,
            info: OffloadInfo4::Err {
                status: Nfsstat4::NFS4ERR_NOSPC,
                bytes_copied: 4096,
            },
        });
        let wire = xdr::to_bytes(&failed);
        assert_eq!(&wire[wire.len() - 8..], &4096u64.to_be_bytes());
        assert_eq!(xdr::from_slice::<NfsCbArgop4>(&wire).unwrap(), failed);
        let res = NfsCbResop4::Offload(Nfsstat4::NFS4_OK);
        let wire = xdr::to_bytes(&res);
        assert_eq!(&wire[..], &[0, 0, 0, 15, 0, 0, 0, 0]);
        assert_eq!(xdr::from_slice::<NfsCbResop4>(&wire).unwrap(), res);
        // A truncated offload_info4 is an error, not a panic.
        assert!(xdr::from_slice::<NfsCbArgop4>(&xdr::to_bytes(&ok)[..30]).is_err());
    }

    #[test]
    fn cb_getattr_round_trips_with_its_wire_layout() {
        let mut want = Bitmap4::new();
        want.insert(3);
        want.insert(4);
        let op = NfsCbArgop4::Getattr(CbGetattr4Args {
            fh: NfsFh4(Bytes::from_static(&[9, 9])),
            attr_request: want.clone(),
        });
        let wire = xdr::to_bytes(&op);
        // opnum 3, the handle (length 2, padded), a one-word bitmap 0x18.
        assert_eq!(
            &wire[..],
            &[0, 0, 0, 3, 0, 0, 0, 2, 9, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0x18]
        );
        assert_eq!(xdr::from_slice::<NfsCbArgop4>(&wire).unwrap(), op);
        let mut vals = Vec::new();
        vals.extend_from_slice(&7u64.to_be_bytes());
        vals.extend_from_slice(&4096u64.to_be_bytes());
        let res = NfsCbResop4::Getattr(Res4::Ok(Fattr4 {
            attrmask: want,
            attr_vals: Bounded(Bytes::from(vals)),
        }));
        let wire = xdr::to_bytes(&res);
        assert_eq!(xdr::from_slice::<NfsCbResop4>(&wire).unwrap(), res);
        let err = NfsCbResop4::Getattr(Res4::Err(Nfsstat4::NFS4ERR_BADHANDLE));
        let wire = xdr::to_bytes(&err);
        assert_eq!(xdr::from_slice::<NfsCbResop4>(&wire).unwrap(), err);
    }

    #[test]
    fn cb_layoutrecall_round_trips_every_arm() {
        for recall in [
            Layoutrecall4::File(LayoutrecallFile4 {
                fh: NfsFh4(Bytes::from_static(&[4; 20])),
                offset: 0,
                length: u64::MAX,
                stateid: Stateid4 {
                    seqid: 2,
                    other: FixedOpaque([6; 12]),
                },
            }),
            Layoutrecall4::Fsid(Fsid4 { major: 1, minor: 2 }),
            Layoutrecall4::All,
        ] {
            let op = NfsCbArgop4::Layoutrecall(CbLayoutrecall4Args {
                layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                iomode: Layoutiomode4::LAYOUTIOMODE4_ANY,
                changed: true,
                recall,
            });
            let wire = xdr::to_bytes(&op);
            assert_eq!(
                &wire[..16],
                &[0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 1]
            );
            assert_eq!(xdr::from_slice::<NfsCbArgop4>(&wire).unwrap(), op);
            for cut in 4..wire.len() {
                assert!(xdr::from_slice::<NfsCbArgop4>(&wire[..cut]).is_err());
            }
        }
        let bad = [0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 7];
        assert!(xdr::from_slice::<NfsCbArgop4>(&bad).is_err());
        let res = NfsCbResop4::Layoutrecall(Nfsstat4::NFS4ERR_NOMATCHING_LAYOUT);
        let wire = xdr::to_bytes(&res);
        assert_eq!(xdr::from_slice::<NfsCbResop4>(&wire).unwrap(), res);
    }
}
