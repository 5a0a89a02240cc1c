//! Arguments and results of the NFSv4.2 data operations READ_PLUS, COPY,
//! OFFLOAD_STATUS and CLONE (RFC 7862 §15.10, §15.2, §15.9, §15.13). SEEK, ALLOCATE and
//! DEALLOCATE are in [`super::ops`].

use bytes::Bytes;
use xdr::{Bounded, Decode, Decoder, Encode, Encoder, Error, ErrorKind};

use super::{StableHow4, Stateid4, Verifier4};

/// Most segments decoded from one READ_PLUS reply (a server sends fewer).
pub const MAX_READ_PLUS_SEGMENTS: usize = 1 << 12;
/// Largest data segment decoded from a READ_PLUS reply.
pub const MAX_READ_PLUS_DATA: usize = 1 << 22;
/// Most source servers decoded from COPY4args (`ca_source_server<>`).
pub const MAX_COPY_SOURCES: usize = 16;
/// Longest `netloc4` string decoded.
pub const MAX_NETLOC: usize = 1024;

xdr_struct! {
    /// READ_PLUS4args (RFC 7862 §15.10.1).
    pub struct ReadPlus4Args {
        /// The open, lock or special stateid.
        pub stateid: Stateid4,
        /// Start.
        pub offset: u64,
        /// Most bytes wanted.
        pub count: u32,
    }
}

/// `read_plus_content` (RFC 7862 §15.10.2): a run of data (`data4`) or a
/// hole (`data_info4`) of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadPlusContent4 {
    /// NFS4_CONTENT_DATA: bytes at `offset`.
    Data {
        /// Where they start.
        offset: u64,
        /// The bytes.
        data: Bounded<Bytes, MAX_READ_PLUS_DATA>,
    },
    /// NFS4_CONTENT_HOLE: `length` bytes of zeros at `offset`.
    Hole {
        /// Where it starts.
        offset: u64,
        /// How long it is.
        length: u64,
    },
}

/// RFC 7862 §15.10.2 `union read_plus_content switch (data_content4
/// rpc_content)`.
impl Encode for ReadPlusContent4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::Data { offset, data } => {
                enc.put_u32(0);
                offset.encode(enc);
                data.encode(enc);
            }
            Self::Hole { offset, length } => {
                enc.put_u32(1);
                offset.encode(enc);
                length.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for ReadPlusContent4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        Ok(match dec.u32()? {
            0 => Self::Data {
                offset: dec.decode()?,
                data: dec.decode()?,
            },
            1 => Self::Hole {
                offset: dec.decode()?,
                length: dec.decode()?,
            },
            n => {
                return Err(Error::new(
                    ErrorKind::InvalidEnum(n),
                    at,
                    "read_plus_content",
                ))
            }
        })
    }
}

xdr_struct! {
    /// `read_plus_res4` (RFC 7862 §15.10.2).
    pub struct ReadPlus4ResOk {
        /// The file ends within (or right after) the contents.
        pub eof: bool,
        /// Data and holes, in file order.
        pub contents: Bounded<Vec<ReadPlusContent4>, MAX_READ_PLUS_SEGMENTS>,
    }
}

/// `netloc4` (RFC 7862 §15.2.1 via §11.2: where an inter-server copy's
/// source is). Decoded to be refused: this server copies within itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Netloc4 {
    /// NL4_NAME.
    Name(Bounded<Bytes, MAX_NETLOC>),
    /// NL4_URL.
    Url(Bounded<Bytes, MAX_NETLOC>),
    /// NL4_NETADDR: `netaddr4` (netid, universal address).
    Netaddr(Bounded<Bytes, MAX_NETLOC>, Bounded<Bytes, MAX_NETLOC>),
}

/// RFC 7862 §11.2 `union netloc4 switch (netloc_type4 nl_type)`.
impl Encode for Netloc4 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Self::Name(n) => {
                enc.put_u32(1);
                n.encode(enc);
            }
            Self::Url(u) => {
                enc.put_u32(2);
                u.encode(enc);
            }
            Self::Netaddr(id, addr) => {
                enc.put_u32(3);
                id.encode(enc);
                addr.encode(enc);
            }
        }
    }
}

impl<'a> Decode<'a> for Netloc4 {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let at = dec.position();
        Ok(match dec.u32()? {
            1 => Self::Name(dec.decode()?),
            2 => Self::Url(dec.decode()?),
            3 => Self::Netaddr(dec.decode()?, dec.decode()?),
            n => return Err(Error::new(ErrorKind::InvalidEnum(n), at, "netloc4")),
        })
    }
}

xdr_struct! {
    /// COPY4args (RFC 7862 §15.2.1): from the saved file handle to the
    /// current one.
    pub struct Copy4Args {
        /// Stateid of the source (SAVED_FH).
        pub src_stateid: Stateid4,
        /// Stateid of the destination (CURRENT_FH).
        pub dst_stateid: Stateid4,
        /// Where to read.
        pub src_offset: u64,
        /// Where to write.
        pub dst_offset: u64,
        /// How many bytes (0: to the source's end).
        pub count: u64,
        /// The client wants the bytes copied in order.
        pub consecutive: bool,
        /// The client wants the copy done before the reply.
        pub synchronous: bool,
        /// Other servers holding the source (empty: this one).
        pub source_server: Bounded<Vec<Netloc4>, MAX_COPY_SOURCES>,
    }
}

xdr_struct! {
    /// `write_response4` (RFC 7862 §15.2.2).
    pub struct WriteResponse4 {
        /// The asynchronous copy's id (none for a synchronous one).
        pub callback_id: Bounded<Vec<Stateid4>, 1>,
        /// Bytes copied.
        pub count: u64,
        /// How stable they are.
        pub committed: StableHow4,
        /// Write verifier.
        pub writeverf: Verifier4,
    }
}

xdr_struct! {
    /// `copy_requirements4` (RFC 7862 §15.2.2).
    pub struct CopyRequirements4 {
        /// Copied in order.
        pub consecutive: bool,
        /// Done before the reply.
        pub synchronous: bool,
    }
}

xdr_struct! {
    /// COPY4resok (RFC 7862 §15.2.2). (The NFS4ERR_OFFLOAD_NO_REQS arm,
    /// which carries requirements, is never sent by this server.)
    pub struct Copy4ResOk {
        /// What was copied.
        pub response: WriteResponse4,
        /// How.
        pub requirements: CopyRequirements4,
    }
}

xdr_struct! {
    /// CLONE4args (RFC 7862 §15.13.1): from the saved file handle to the
    /// current one.
    pub struct Clone4Args {
        /// Stateid of the source (SAVED_FH).
        pub src_stateid: Stateid4,
        /// Stateid of the destination (CURRENT_FH).
        pub dst_stateid: Stateid4,
        /// Where to read.
        pub src_offset: u64,
        /// Where to write.
        pub dst_offset: u64,
        /// How many bytes (0: to the source's end).
        pub count: u64,
    }
}

xdr_struct! {
    /// OFFLOAD_STATUS4resok (RFC 7862 §15.9.2): how far an asynchronous
    /// copy got, and its status once it is done.
    pub struct OffloadStatus4ResOk {
        /// Bytes copied so far (`osr_count`).
        pub count: u64,
        /// The copy's outcome once it is complete (`osr_complete<1>`),
        /// empty while it runs.
        pub complete: Bounded<Vec<super::Nfsstat4>, 1>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T>(v: &T)
    where
        T: Encode + for<'a> Decode<'a> + PartialEq + core::fmt::Debug,
    {
        let b = xdr::to_bytes(v);
        let back: T = xdr::from_slice(&b).unwrap();
        assert_eq!(&back, v);
    }

    #[test]
    fn read_plus_result_round_trips() {
        let r = ReadPlus4ResOk {
            eof: true,
            contents: Bounded(vec![
                ReadPlusContent4::Data {
                    offset: 0,
                    data: Bounded(Bytes::from_static(b"abcde")),
                },
                ReadPlusContent4::Hole {
                    offset: 5,
                    length: 4091,
                },
            ]),
        };
        round_trip(&r);
        let b = xdr::to_bytes(&r);
        // eof, count 2, DATA 0 "abcde" padded, HOLE 5 4091.
        assert_eq!(b.len(), 4 + 4 + (4 + 8 + 4 + 8) + (4 + 8 + 8));
        let mut bad = b.to_vec();
        bad[11] = 7;
        assert!(xdr::from_slice::<ReadPlus4ResOk>(&bad).is_err());
    }

    #[test]
    fn copy_and_clone_round_trip() {
        round_trip(&Copy4Args {
            src_stateid: Stateid4::CURRENT,
            dst_stateid: Stateid4::CURRENT,
            src_offset: 1,
            dst_offset: 2,
            count: 3,
            consecutive: true,
            synchronous: false,
            source_server: Bounded(vec![
                Netloc4::Name(Bounded(Bytes::from_static(b"srv"))),
                Netloc4::Netaddr(
                    Bounded(Bytes::from_static(b"tcp")),
                    Bounded(Bytes::from_static(b"10.0.0.1.8.1")),
                ),
            ]),
        });
        round_trip(&Copy4ResOk {
            response: WriteResponse4 {
                callback_id: Bounded(vec![]),
                count: 7,
                committed: StableHow4::FILE_SYNC4,
                writeverf: xdr::FixedOpaque([1; 8]),
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: true,
            },
        });
        round_trip(&OffloadStatus4ResOk {
            count: 1 << 20,
            complete: Bounded(vec![super::super::Nfsstat4::NFS4_OK]),
        });
        let b = xdr::to_bytes(&OffloadStatus4ResOk {
            count: 5,
            complete: Bounded(vec![]),
        });
        assert_eq!(&b[..], &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]);
        let mut two = b.to_vec();
        two[11] = 2;
        assert!(
            xdr::from_slice::<OffloadStatus4ResOk>(&two).is_err(),
            "osr_complete<1>"
        );
        round_trip(&Clone4Args {
            src_stateid: Stateid4::CURRENT,
            dst_stateid: Stateid4::CURRENT,
            src_offset: 0,
            dst_offset: 4096,
            count: 0,
        });
    }
}
