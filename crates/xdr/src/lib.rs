//! XDR (RFC 4506) encoding and decoding with a panic-free bounded reader and
//! a gather buffer for DDP-eligible bulk data.
//!
//! - [`Decoder`] is a cursor over received bytes. It never panics, checks
//!   every length against an explicit maximum and the remaining input before
//!   allocating, rejects non-zero padding (RFC 4506 §3) and can return bulk
//!   opaque data as zero-copy [`bytes::Bytes`].
//! - [`Encoder`] is the output sink. [`Encode::encoded_len`] runs the same
//!   `encode` code against a counting sink ([`LenCounter`]), so sizes never
//!   drift from what is written.
//! - [`XdrBuf`] is the gather buffer: inline bytes plus references to bulk
//!   payloads, each with its stream position and DDP eligibility
//!   (RFC 8166 §3.4), so an RDMA transport can move them by chunk and send
//!   the reduced stream.
//! - [`Error`] is a small `Copy` value: an [`ErrorKind`], the input offset and
//!   a static context.
//!
//! ```
//! use xdr::{Decoder, Encode, Encoder, XdrBuf};
//! let mut buf = XdrBuf::new();
//! buf.put_u32(7);
//! buf.put_bulk(bytes::Bytes::from_static(b"hello"), true);
//! assert_eq!(buf.len(), 4 + 4 + 5 + 3);
//! assert_eq!(buf.ddp_items().next().map(|(pos, _)| pos), Some(8));
//! let wire = buf.to_bytes();
//! let mut dec = Decoder::from_bytes(&wire);
//! assert_eq!(dec.u32().unwrap(), 7);
//! assert_eq!(&dec.opaque_bytes(1024).unwrap()[..], b"hello");
//! dec.finish().unwrap();
//! assert_eq!(7u32.encoded_len(), 4);
//! ```
//!
//! # Fuzzing
//!
//! The `xdr_decode` target (in `fuzz/` at the workspace root) decodes a mix
//! of types from arbitrary bytes. From the workspace root:
//!
//! ```text
//! cargo install cargo-fuzz
//! RUSTC_BOOTSTRAP=1 cargo fuzz run xdr_decode -- -max_total_time=60
//! ```
#![forbid(unsafe_code)]

mod decode;
mod encode;
mod error;
mod gather;
mod types;

pub use bytes;

pub use decode::Decoder;
pub use encode::{BufEncoder, Encoder, LenCounter};
pub use error::{Error, ErrorKind, ResultExt};
pub use gather::{BulkItem, FileItem, FileSource, ReassemblyError, Segment, XdrBuf};
pub use types::{Bounded, DdpOpaque, DecodeBounded, FixedOpaque};

/// Number of zero bytes that pad an `n`-byte item to a multiple of four
/// (RFC 4506 §3).
pub const fn pad_len(n: usize) -> usize {
    (4 - (n % 4)) % 4
}

/// `n` rounded up to a multiple of four (RFC 4506 §3).
pub const fn padded_len(n: usize) -> usize {
    n + pad_len(n)
}

/// A value with an XDR encoding.
pub trait Encode {
    /// Writes the value to `enc`.
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E);

    /// Length in bytes of the encoding, computed by running
    /// [`Encode::encode`] against a [`LenCounter`].
    fn encoded_len(&self) -> usize {
        let mut c = LenCounter::new();
        self.encode(&mut c);
        c.len()
    }
}

/// A value decodable from an XDR stream, possibly borrowing from it.
pub trait Decode<'a>: Sized {
    /// Smallest possible encoded size, used to bound array allocations
    /// ([`Decoder::array`]). Every XDR item except `void` and zero-length
    /// fixed opaque takes at least one 4-byte unit; a smaller value only
    /// weakens the pre-allocation check, a larger one would reject valid
    /// input.
    const MIN_ENCODED_LEN: usize = 4;

    /// Reads one value from `dec`.
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error>;
}

impl<T: Encode + ?Sized> Encode for &T {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        (**self).encode(enc);
    }
}

/// Encodes `value` into a fresh gather buffer.
pub fn to_xdr_buf<T: Encode + ?Sized>(value: &T) -> XdrBuf {
    let mut buf = XdrBuf::new();
    value.encode(&mut buf);
    buf
}

/// Encodes `value` into contiguous bytes.
pub fn to_bytes<T: Encode + ?Sized>(value: &T) -> bytes::Bytes {
    let mut out = bytes::BytesMut::with_capacity(value.encoded_len());
    value.encode(&mut out);
    out.freeze()
}

/// Decodes a `T` that must span all of `input` (trailing bytes are an
/// error).
pub fn from_slice<'a, T: Decode<'a>>(input: &'a [u8]) -> Result<T, Error> {
    let mut dec = Decoder::new(input);
    let v = T::decode(&mut dec)?;
    dec.finish()?;
    Ok(v)
}

/// Defines an open code space (an XDR enum whose unknown values must still
/// decode): a `Copy` newtype over `u32` with named constants, `Debug` and
/// `Display` printing the name, and [`Encode`]/[`Decode`].
///
/// ```
/// xdr::open_code! {
///     /// Example status.
///     pub struct Status {
///         /// All fine.
///         OK = 0,
///         /// Not fine.
///         BAD = 5,
///     }
/// }
/// assert_eq!(format!("{:?}", Status::BAD), "BAD");
/// assert_eq!(format!("{:?}", Status(9)), "Status(9)");
/// assert!(!Status(9).is_known());
/// ```
#[macro_export]
macro_rules! open_code {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$cmeta:meta])* $cname:ident = $val:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name(pub u32);

        #[allow(dead_code)]
        impl $name {
            $( $(#[$cmeta])* pub const $cname: Self = Self($val); )*

            /// The constant's name when the value is a known one.
            pub const fn name(&self) -> Option<&'static str> {
                match self.0 {
                    $( v if v == $val => Some(stringify!($cname)), )*
                    _ => None,
                }
            }

            /// True when the value is one of the named constants.
            pub const fn is_known(&self) -> bool {
                self.name().is_some()
            }
        }

        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                ::core::fmt::Debug::fmt(self, f)
            }
        }

        impl ::core::convert::From<u32> for $name {
            fn from(v: u32) -> Self {
                Self(v)
            }
        }

        impl ::core::convert::From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }

        impl $crate::Encode for $name {
            fn encode<E: $crate::Encoder + ?Sized>(&self, enc: &mut E) {
                enc.put_u32(self.0);
            }
        }

        impl<'a> $crate::Decode<'a> for $name {
            fn decode(dec: &mut $crate::Decoder<'a>) -> ::core::result::Result<Self, $crate::Error> {
                dec.u32().map(Self)
            }
        }
    };
}
