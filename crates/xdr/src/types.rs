//! [`Encode`]/[`Decode`] for the RFC 4506 types and bounded wrappers.

use bytes::Bytes;

use crate::{Decode, Decoder, Encode, Encoder, Error};

/// Largest length an XDR length word can carry.
const UNBOUNDED: usize = u32::MAX as usize;

macro_rules! int_impl {
    ($t:ty, $get:ident, $put:ident, $min:expr, $sec:literal) => {
        #[doc = concat!("RFC 4506 ", $sec)]
        impl Encode for $t {
            fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
                enc.$put(*self);
            }
        }

        #[doc = concat!("RFC 4506 ", $sec)]
        impl<'a> Decode<'a> for $t {
            const MIN_ENCODED_LEN: usize = $min;
            fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
                dec.$get()
            }
        }
    };
}

int_impl!(u32, u32, put_u32, 4, "§4.2");
int_impl!(i32, i32, put_i32, 4, "§4.1");
int_impl!(u64, u64, put_u64, 8, "§4.5");
int_impl!(i64, i64, put_i64, 8, "§4.5");
int_impl!(f32, f32, put_f32, 4, "§4.6");
int_impl!(f64, f64, put_f64, 8, "§4.7");
int_impl!(bool, bool, put_bool, 4, "§4.4");

/// `void` (RFC 4506 §4.16): no bytes.
impl Encode for () {
    fn encode<E: Encoder + ?Sized>(&self, _enc: &mut E) {}
}

/// `void` (RFC 4506 §4.16): no bytes.
impl<'a> Decode<'a> for () {
    const MIN_ENCODED_LEN: usize = 0;
    fn decode(_dec: &mut Decoder<'a>) -> Result<Self, Error> {
        Ok(())
    }
}

/// Optional-data (RFC 4506 §4.19): a boolean, then the value if present.
impl<T: Encode> Encode for Option<T> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Some(v) => {
                enc.put_bool(true);
                v.encode(enc);
            }
            None => enc.put_bool(false),
        }
    }
}

/// Optional-data (RFC 4506 §4.19).
impl<'a, T: Decode<'a>> Decode<'a> for Option<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.optional(T::decode)
    }
}

/// Variable-length array (RFC 4506 §4.13): count, then the elements.
impl<T: Encode> Encode for Vec<T> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.as_slice().encode(enc);
    }
}

/// Variable-length array (RFC 4506 §4.13): count, then the elements.
impl<T: Encode> Encode for [T] {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_array_len(self.len());
        for v in self {
            v.encode(enc);
        }
    }
}

/// Variable-length array (RFC 4506 §4.13) with no protocol maximum: the
/// count is still checked against the remaining input before allocating.
/// Use [`Bounded`] to apply a protocol's `<max>`.
impl<'a, T: Decode<'a>> Decode<'a> for Vec<T> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.array(UNBOUNDED)
    }
}

/// Fixed-length array (RFC 4506 §4.12): the elements, no count.
impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        for v in self {
            v.encode(enc);
        }
    }
}

/// Fixed-length array (RFC 4506 §4.12).
impl<'a, T: Decode<'a>, const N: usize> Decode<'a> for [T; N] {
    const MIN_ENCODED_LEN: usize = T::MIN_ENCODED_LEN.saturating_mul(N);
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let mut v = Vec::with_capacity(N.min(dec.remaining() / T::MIN_ENCODED_LEN.max(1) + 1));
        for _ in 0..N {
            v.push(T::decode(dec)?);
        }
        // Exactly N elements were pushed, so the conversion cannot fail.
        v.try_into().map_err(|_| {
            Error::new(
                crate::ErrorKind::LengthExceeded {
                    len: 0,
                    max: N as u64,
                },
                dec.position(),
                "fixed array",
            )
        })
    }
}

/// Variable-length opaque data (RFC 4506 §4.10). Encoding keeps the bytes
/// by reference in an [`XdrBuf`](crate::XdrBuf) (not DDP-eligible; see
/// [`DdpOpaque`]).
impl Encode for Bytes {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_bulk(self.clone(), false);
    }
}

/// Variable-length opaque data (RFC 4506 §4.10), zero-copy with
/// [`Decoder::from_bytes`]; limited only by the input (see [`Bounded`]).
impl<'a> Decode<'a> for Bytes {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(UNBOUNDED)
    }
}

/// Variable-length opaque data (RFC 4506 §4.10), borrowed.
impl<'a> Decode<'a> for &'a [u8] {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque(UNBOUNDED)
    }
}

/// String (RFC 4506 §4.11).
impl Encode for str {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(self.as_bytes());
    }
}

/// String (RFC 4506 §4.11).
impl Encode for String {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_string(self.as_bytes());
    }
}

/// String (RFC 4506 §4.11), which must be UTF-8.
impl<'a> Decode<'a> for &'a str {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.str_utf8(UNBOUNDED)
    }
}

/// String (RFC 4506 §4.11), which must be UTF-8; copies.
impl<'a> Decode<'a> for String {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.str_utf8(UNBOUNDED).map(str::to_owned)
    }
}

/// Types whose XDR form has a length (opaque, string, array) and can be
/// decoded with a protocol maximum. Used by [`Bounded`].
pub trait DecodeBounded<'a>: Sized {
    /// Reads the value, rejecting a length above `max`.
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error>;
}

impl<'a, T: Decode<'a>> DecodeBounded<'a> for Vec<T> {
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error> {
        dec.array(max)
    }
}

impl<'a> DecodeBounded<'a> for Bytes {
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error> {
        dec.opaque_bytes(max)
    }
}

impl<'a> DecodeBounded<'a> for &'a [u8] {
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error> {
        dec.opaque(max)
    }
}

impl<'a> DecodeBounded<'a> for &'a str {
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error> {
        dec.str_utf8(max)
    }
}

impl<'a> DecodeBounded<'a> for String {
    fn decode_bounded(dec: &mut Decoder<'a>, max: usize) -> Result<Self, Error> {
        dec.str_utf8(max).map(str::to_owned)
    }
}

/// A variable-length item with a protocol maximum, the `<MAX>` of an XDR
/// declaration such as `opaque data<MAX>`, `string name<MAX>` or
/// `int list<MAX>` (RFC 4506 §4.10, §4.11, §4.13).
///
/// Decoding rejects a length above `MAX` before reading the body. Encoding
/// writes the inner value as is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Bounded<T, const MAX: usize>(pub T);

impl<T: Encode, const MAX: usize> Encode for Bounded<T, MAX> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        self.0.encode(enc);
    }
}

impl<'a, T: DecodeBounded<'a>, const MAX: usize> Decode<'a> for Bounded<T, MAX> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        T::decode_bounded(dec, MAX).map(Self)
    }
}

/// Fixed-length opaque data `opaque name[N]` (RFC 4506 §4.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedOpaque<const N: usize>(pub [u8; N]);

impl<const N: usize> Encode for FixedOpaque<N> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque_fixed(&self.0);
    }
}

impl<'a, const N: usize> Decode<'a> for FixedOpaque<N> {
    const MIN_ENCODED_LEN: usize = crate::padded_len(N);
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        let s = dec.opaque_fixed(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(Self(out))
    }
}

/// A DDP-eligible variable-length opaque item `opaque data<MAX>`
/// (RFC 8166 §3.4, RFC 4506 §4.10), such as NFS WRITE arguments or READ
/// results (draft-ietf-nfsv4-nfs-ulb-v2 §3 lists those of NFSv3).
///
/// Encoding records the data by reference as a DDP-eligible bulk item of
/// an [`XdrBuf`](crate::XdrBuf); decoding is zero-copy with
/// [`Decoder::from_bytes`] and rejects more than `MAX` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DdpOpaque<const MAX: usize>(pub Bytes);

impl<const MAX: usize> Encode for DdpOpaque<MAX> {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_bulk(self.0.clone(), true);
    }
}

impl<'a, const MAX: usize> Decode<'a> for DdpOpaque<MAX> {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, Error> {
        dec.opaque_bytes(MAX).map(Self)
    }
}
