//! The panic-free XDR reader.

use bytes::Bytes;

use crate::error::{Error, ErrorKind};
use crate::pad_len;

/// A panic-free cursor over an XDR stream (RFC 4506 §3).
///
/// Every read checks the remaining length first and returns an [`Error`]
/// instead of panicking. Variable-length items take an explicit maximum,
/// and arrays are checked against the remaining input *before* anything is
/// allocated.
///
/// A decoder built with [`Decoder::from_bytes`] can hand out bulk opaque
/// data as zero-copy [`Bytes`] slices ([`Decoder::opaque_bytes`]); one
/// built with [`Decoder::new`] over a plain slice copies in that method.
///
/// **Padding policy.** RFC 4506 §3 says the residual bytes that round an
/// item up to a multiple of four are zero. This decoder enforces it:
/// non-zero padding is [`ErrorKind::NonZeroPadding`].
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    data: &'a [u8],
    shared: Option<&'a Bytes>,
    pos: usize,
    end: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder over a borrowed slice.
    pub fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            shared: None,
            pos: 0,
            end: data.len(),
        }
    }

    /// A decoder over shared bytes: [`Decoder::opaque_bytes`] and
    /// [`Decoder::rest_bytes`] return zero-copy slices of `data`.
    pub fn from_bytes(data: &'a Bytes) -> Self {
        Self {
            data: data.as_ref(),
            shared: Some(data),
            pos: 0,
            end: data.len(),
        }
    }

    /// Offset of the next byte, counted from the start of the original input
    /// (a [`Decoder::sub`] decoder keeps counting from that origin).
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to decode.
    pub fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// True when no bytes remain.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.end
    }

    fn eof(&self, needed: usize, context: &'static str) -> Error {
        Error::new(
            ErrorKind::UnexpectedEof {
                needed,
                available: self.remaining(),
            },
            self.pos,
            context,
        )
    }

    /// Takes exactly `n` raw bytes (no padding handling).
    fn take(&mut self, n: usize, context: &'static str) -> Result<&'a [u8], Error> {
        if n > self.remaining() {
            return Err(self.eof(n, context));
        }
        let start = self.pos;
        let out = self
            .data
            .get(start..start + n)
            .ok_or_else(|| self.eof(n, context))?;
        self.pos += n;
        Ok(out)
    }

    fn take_array<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N], Error> {
        let s = self.take(N, context)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// Takes `n` data bytes plus their padding (RFC 4506 §4.9, §4.10),
    /// returning the data and checking the padding is zero.
    fn take_padded(&mut self, n: usize, context: &'static str) -> Result<&'a [u8], Error> {
        let pad = pad_len(n);
        let total = n
            .checked_add(pad)
            .ok_or_else(|| self.eof(usize::MAX, context))?;
        if total > self.remaining() {
            return Err(self.eof(total, context));
        }
        let start = self.pos;
        let data = self.take(n, context)?;
        let padding = self.take(pad, context)?;
        if padding.iter().any(|&b| b != 0) {
            return Err(Error::new(ErrorKind::NonZeroPadding, start, context));
        }
        Ok(data)
    }

    /// Reads an unsigned integer (RFC 4506 §4.2).
    pub fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.take_array("u32")?))
    }

    /// Reads a signed integer (RFC 4506 §4.1).
    pub fn i32(&mut self) -> Result<i32, Error> {
        Ok(i32::from_be_bytes(self.take_array("i32")?))
    }

    /// Reads an unsigned hyper integer (RFC 4506 §4.5).
    pub fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.take_array("u64")?))
    }

    /// Reads a hyper integer (RFC 4506 §4.5).
    pub fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_be_bytes(self.take_array("i64")?))
    }

    /// Reads a single-precision float (RFC 4506 §4.6).
    pub fn f32(&mut self) -> Result<f32, Error> {
        Ok(f32::from_bits(self.u32()?))
    }

    /// Reads a double-precision float (RFC 4506 §4.7).
    pub fn f64(&mut self) -> Result<f64, Error> {
        Ok(f64::from_bits(self.u64()?))
    }

    /// Reads a boolean (RFC 4506 §4.4): 0 or 1, anything else is an error.
    pub fn bool(&mut self) -> Result<bool, Error> {
        let at = self.pos;
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::new(ErrorKind::InvalidBool(v), at, "bool")),
        }
    }

    /// Reads an enum discriminant (RFC 4506 §4.3) as its raw 32-bit value,
    /// for open code spaces that keep unknown values.
    pub fn enum_u32(&mut self) -> Result<u32, Error> {
        self.u32()
    }

    /// Reads an enum discriminant (RFC 4506 §4.3) and accepts it only if
    /// `valid` says so; otherwise [`ErrorKind::InvalidEnum`].
    pub fn enum_checked(&mut self, valid: impl FnOnce(u32) -> bool) -> Result<u32, Error> {
        let at = self.pos;
        let v = self.u32()?;
        if valid(v) {
            Ok(v)
        } else {
            Err(Error::new(ErrorKind::InvalidEnum(v), at, "enum"))
        }
    }

    /// Reads fixed-length opaque data of `n` bytes plus padding
    /// (RFC 4506 §4.9).
    pub fn opaque_fixed(&mut self, n: usize) -> Result<&'a [u8], Error> {
        self.take_padded(n, "opaque fixed")
    }

    /// Like [`Decoder::opaque_fixed`] but returns [`Bytes`], zero-copy when
    /// the decoder was built with [`Decoder::from_bytes`].
    pub fn opaque_fixed_bytes(&mut self, n: usize) -> Result<Bytes, Error> {
        let s = self.take_padded(n, "opaque fixed")?;
        Ok(self.to_bytes(s))
    }

    /// Reads a length word and checks it against `max` and the input.
    fn length(&mut self, max: usize, context: &'static str) -> Result<usize, Error> {
        let at = self.pos;
        let len = self.u32().map_err(|e| e.with_context(context))?;
        let len_usize = len as usize;
        if len_usize > max {
            return Err(Error::new(
                ErrorKind::LengthExceeded {
                    len: u64::from(len),
                    max: max as u64,
                },
                at,
                context,
            ));
        }
        Ok(len_usize)
    }

    /// Reads variable-length opaque data (RFC 4506 §4.10) of at most `max`
    /// bytes, borrowing it from the input.
    pub fn opaque(&mut self, max: usize) -> Result<&'a [u8], Error> {
        let n = self.length(max, "opaque")?;
        self.take_padded(n, "opaque")
    }

    /// Reads variable-length opaque data (RFC 4506 §4.10) of at most `max`
    /// bytes as [`Bytes`]: a zero-copy slice of the input when the decoder
    /// was built with [`Decoder::from_bytes`] (use this for bulk payloads such
    /// as NFS WRITE data), a copy otherwise.
    pub fn opaque_bytes(&mut self, max: usize) -> Result<Bytes, Error> {
        let n = self.length(max, "opaque")?;
        let s = self.take_padded(n, "opaque")?;
        Ok(self.to_bytes(s))
    }

    /// Reads a string (RFC 4506 §4.11) of at most `max` bytes. XDR strings
    /// are bytes ("ASCII" by the RFC, UTF-8 in NFSv4); no check is made.
    pub fn string(&mut self, max: usize) -> Result<&'a [u8], Error> {
        let n = self.length(max, "string")?;
        self.take_padded(n, "string")
    }

    /// Reads a string (RFC 4506 §4.11) of at most `max` bytes and checks it
    /// is UTF-8.
    pub fn str_utf8(&mut self, max: usize) -> Result<&'a str, Error> {
        let at = self.pos;
        let s = self.string(max)?;
        core::str::from_utf8(s).map_err(|_| Error::new(ErrorKind::InvalidUtf8, at, "string"))
    }

    /// Reads an array count (RFC 4506 §4.13) and checks it against `max`
    /// and against the input: `count * min_item_size` must not exceed the
    /// remaining bytes, so a caller may allocate `count` elements safely.
    pub fn array_len(&mut self, max: usize, min_item_size: usize) -> Result<usize, Error> {
        let at = self.pos;
        let count = self.length(max, "array")?;
        let needed = (count as u64).saturating_mul(min_item_size as u64);
        if needed > self.remaining() as u64 {
            return Err(Error::new(
                ErrorKind::CountExceedsInput {
                    count: count as u32,
                    needed,
                    available: self.remaining(),
                },
                at,
                "array",
            ));
        }
        Ok(count)
    }

    /// Reads a variable-length array (RFC 4506 §4.13) of at most `max`
    /// elements, each at least `min_item_size` bytes, with `item`.
    pub fn array_with<T>(
        &mut self,
        max: usize,
        min_item_size: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, Error>,
    ) -> Result<Vec<T>, Error> {
        let count = self.array_len(max, min_item_size)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(item(self)?);
        }
        Ok(out)
    }

    /// Reads a variable-length array (RFC 4506 §4.13) of [`Decode`] items.
    ///
    /// [`Decode`]: crate::Decode
    pub fn array<T: crate::Decode<'a>>(&mut self, max: usize) -> Result<Vec<T>, Error> {
        self.array_with(max, T::MIN_ENCODED_LEN, T::decode)
    }

    /// Reads optional-data (RFC 4506 §4.19): a boolean discriminant, then the
    /// item if it is TRUE.
    pub fn optional<T>(
        &mut self,
        item: impl FnOnce(&mut Self) -> Result<T, Error>,
    ) -> Result<Option<T>, Error> {
        if self.bool().map_err(|e| e.with_context("optional"))? {
            item(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Decodes any [`Decode`](crate::Decode) type.
    pub fn decode<T: crate::Decode<'a>>(&mut self) -> Result<T, Error> {
        T::decode(self)
    }

    /// Reads the next `u32` without consuming it.
    pub fn peek_u32(&self) -> Result<u32, Error> {
        self.clone().u32()
    }

    /// Skips `n` raw bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), Error> {
        self.take(n, "skip").map(|_| ())
    }

    /// Splits off a decoder over the next `len` bytes and advances past them.
    /// The sub-decoder cannot read beyond its window; positions keep
    /// counting from the original input.
    pub fn sub(&mut self, len: usize) -> Result<Decoder<'a>, Error> {
        if len > self.remaining() {
            return Err(self.eof(len, "sub"));
        }
        let sub = Decoder {
            data: self.data,
            shared: self.shared,
            pos: self.pos,
            end: self.pos + len,
        };
        self.pos += len;
        Ok(sub)
    }

    /// Takes every remaining byte, borrowed.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = self.data.get(self.pos..self.end).unwrap_or(&[]);
        self.pos = self.end;
        s
    }

    /// Takes every remaining byte as [`Bytes`] (zero-copy with
    /// [`Decoder::from_bytes`]).
    pub fn rest_bytes(&mut self) -> Bytes {
        let s = self.rest();
        self.to_bytes(s)
    }

    /// Ends decoding: an error if bytes remain.
    pub fn finish(self) -> Result<(), Error> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::TrailingBytes {
                    remaining: self.remaining(),
                },
                self.pos,
                "finish",
            ))
        }
    }

    fn to_bytes(&self, s: &'a [u8]) -> Bytes {
        match self.shared {
            Some(b) if !s.is_empty() => b.slice_ref(s),
            _ => Bytes::copy_from_slice(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peek_does_not_consume() {
        let wire = [0, 0, 0, 3];
        let mut d = Decoder::new(&wire);
        assert_eq!(d.peek_u32().unwrap(), 3);
        assert_eq!(d.remaining(), 4);
        assert_eq!(d.u32().unwrap(), 3);
        assert!(d.is_empty());
        assert!(d.peek_u32().is_err());
    }

    #[test]
    fn rejects_length_word_near_usize_limits_without_panic() {
        let wire = [0xff, 0xff, 0xff, 0xfd, 1, 2, 3];
        let mut d = Decoder::new(&wire);
        let e = d.opaque(usize::MAX).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::UnexpectedEof { .. }));
        let mut d = Decoder::new(&wire);
        assert!(d.opaque_fixed(usize::MAX).is_err());
        assert!(d.skip(8).is_err());
    }

    #[test]
    fn array_with_and_optional_decode() {
        let wire = [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 9];
        let mut d = Decoder::new(&wire);
        let v = d.array_with(4, 4, Decoder::u32).unwrap();
        assert_eq!(v, [1, 5]);
        assert_eq!(d.optional(Decoder::u32).unwrap(), Some(9));
        d.finish().unwrap();
    }
}
