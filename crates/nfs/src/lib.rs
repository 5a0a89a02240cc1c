//! NFSv3 (RFC 1813) and MOUNT v3 (RFC 1813 Appendix I) protocol types, and
//! the NFSv3 upper-layer binding for RPC-over-RDMA (RFC 8267). No IO.
//!
//! - [`v3`]: every NFSv3 data type and the arguments and results of all 22
//!   procedures, with [`xdr::Encode`]/[`xdr::Decode`] in both directions (a
//!   server decodes arguments and encodes results; a client does the
//!   reverse). [`v3::Args3::decode`] decodes any procedure's arguments by
//!   procedure number.
//! - [`mount`]: the MOUNT v3 program (NULL, MNT, DUMP, UMNT, UMNTALL,
//!   EXPORT).
//! - [`nlm`], [`nsm`]: the NLM v4 lock manager (RFC 1813 Appendix II)
//!   and the NSM status monitor NFSv3 clients lock files with.
//! - [`ulb`]: which items are DDP-eligible (ULB v2 draft §3) and how
//!   large a reply can be, for an RPC-over-RDMA transport that must
//!   provision reply and write chunks before sending a call.
//!
//! "ULB v2 draft" in citations is draft-ietf-nfsv4-nfs-ulb-v2-06, whose
//! NFSv3 binding (§3) matches RFC 8267's for version 1.
//!
//! Bulk data (READ results, WRITE arguments, the SYMLINK and READLINK
//! paths) is [`bytes::Bytes`]: decoding with [`xdr::Decoder::from_bytes`]
//! takes it without a copy, and encoding records it as a DDP-eligible bulk
//! item of an [`xdr::XdrBuf`].
//!
//! ```
//! use nfs::v3::{Args3, Getattr3Args, NfsFh3, Nfsproc3};
//! let args = Getattr3Args { object: NfsFh3::new(&[1, 2, 3, 4]).unwrap() };
//! let wire = xdr::to_bytes(&args);
//! let back = Args3::decode(Nfsproc3::GETATTR, &wire).unwrap();
//! assert_eq!(back, Args3::Getattr(args));
//! ```
//!
//! # Fuzzing
//!
//! The `nfs_v3_args` target (in `fuzz/` at the workspace root) decodes
//! every procedure's arguments from arbitrary bytes:
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run nfs_v3_args -- -max_total_time=60`.
#![forbid(unsafe_code)]

/// Defines a struct whose XDR encoding is its fields in order
/// (RFC 4506 §4.14), with `Encode` and `Decode`.
macro_rules! xdr_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        impl ::xdr::Encode for $name {
            #[allow(unused_variables)]
            fn encode<E: ::xdr::Encoder + ?Sized>(&self, enc: &mut E) {
                $( ::xdr::Encode::encode(&self.$field, enc); )*
            }
        }

        impl<'a> ::xdr::Decode<'a> for $name {
            #[allow(unused_variables)]
            fn decode(dec: &mut ::xdr::Decoder<'a>) -> Result<Self, ::xdr::Error> {
                Ok(Self { $( $field: dec.decode()? ),* })
            }
        }
    };
}

pub mod mount;
pub mod nlm;
pub mod nsm;
#[cfg(test)]
mod roundtrip;
pub mod ulb;
pub mod v3;
pub mod v4;

pub use xdr;
