//! Encoders: the [`Encoder`] sink trait and its implementations.

use bytes::{BufMut, Bytes, BytesMut};

use crate::pad_len;

const ZEROS: [u8; 4] = [0; 4];

/// Converts a length to the XDR 32-bit length word.
///
/// # Panics
/// If `len` exceeds `u32::MAX`: XDR (RFC 4506 §4.10) cannot represent it.
/// This is only reachable with locally built values, never peer input.
fn len_word(len: usize) -> u32 {
    u32::try_from(len).expect("XDR variable-length item longer than 2^32-1 bytes")
}

/// A sink for XDR output.
///
/// Implementors provide [`Encoder::put_raw`] and may override
/// [`Encoder::put_bulk`]; every typed method is built on those two, so the
/// same encoding code drives a real buffer, a gather [`XdrBuf`](crate::XdrBuf)
/// and the [`LenCounter`] behind [`Encode::encoded_len`](crate::Encode::encoded_len).
pub trait Encoder {
    /// Appends raw bytes. Callers keep the stream 4-byte aligned.
    fn put_raw(&mut self, bytes: &[u8]);

    /// Appends variable-length opaque data (RFC 4506 §4.10) whose bytes are
    /// a bulk payload: the length word is written inline and the data is
    /// kept by reference where the sink supports it. `ddp_eligible` marks a
    /// "DDP-eligible data item" (RFC 8166 §3.4) an RDMA transport may move
    /// in a chunk. The default copies, like [`Encoder::put_opaque`].
    fn put_bulk(&mut self, data: Bytes, ddp_eligible: bool) {
        let _ = ddp_eligible;
        self.put_opaque(&data);
    }

    /// Writes `n` zero bytes of XDR padding (RFC 4506 §3).
    fn put_pad(&mut self, n: usize) {
        let n = n.min(3);
        self.put_raw(&ZEROS[..n]);
    }

    /// Writes an unsigned integer (RFC 4506 §4.2).
    fn put_u32(&mut self, v: u32) {
        self.put_raw(&v.to_be_bytes());
    }

    /// Writes a signed integer (RFC 4506 §4.1).
    fn put_i32(&mut self, v: i32) {
        self.put_raw(&v.to_be_bytes());
    }

    /// Writes an unsigned hyper integer (RFC 4506 §4.5).
    fn put_u64(&mut self, v: u64) {
        self.put_raw(&v.to_be_bytes());
    }

    /// Writes a hyper integer (RFC 4506 §4.5).
    fn put_i64(&mut self, v: i64) {
        self.put_raw(&v.to_be_bytes());
    }

    /// Writes a single-precision float (RFC 4506 §4.6).
    fn put_f32(&mut self, v: f32) {
        self.put_u32(v.to_bits());
    }

    /// Writes a double-precision float (RFC 4506 §4.7).
    fn put_f64(&mut self, v: f64) {
        self.put_u64(v.to_bits());
    }

    /// Writes a boolean (RFC 4506 §4.4).
    fn put_bool(&mut self, v: bool) {
        self.put_u32(u32::from(v));
    }

    /// Writes fixed-length opaque data plus zero padding (RFC 4506 §4.9).
    fn put_opaque_fixed(&mut self, data: &[u8]) {
        self.put_raw(data);
        self.put_pad(pad_len(data.len()));
    }

    /// Writes variable-length opaque data: length, bytes, zero padding
    /// (RFC 4506 §4.10). Copies the bytes.
    ///
    /// # Panics
    /// If `data` is longer than `u32::MAX` bytes.
    fn put_opaque(&mut self, data: &[u8]) {
        self.put_u32(len_word(data.len()));
        self.put_opaque_fixed(data);
    }

    /// Writes a string (RFC 4506 §4.11); same wire form as opaque data.
    fn put_string(&mut self, s: &[u8]) {
        self.put_opaque(s);
    }

    /// Writes an array count (RFC 4506 §4.13).
    ///
    /// # Panics
    /// If `count` exceeds `u32::MAX`.
    fn put_array_len(&mut self, count: usize) {
        self.put_u32(len_word(count));
    }
}

impl Encoder for BytesMut {
    fn put_raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Encoder for Vec<u8> {
    fn put_raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Adapts any [`BufMut`] as an [`Encoder`] (bulk data is copied).
#[derive(Debug)]
pub struct BufEncoder<'b, B: BufMut>(pub &'b mut B);

impl<B: BufMut> Encoder for BufEncoder<'_, B> {
    fn put_raw(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

/// An [`Encoder`] that only counts bytes: the sink behind
/// [`Encode::encoded_len`](crate::Encode::encoded_len), so lengths come
/// from the same code that writes.
///
/// It also counts the bytes of DDP-eligible bulk items (data plus padding)
/// separately, which is what an RPC-over-RDMA sender needs to size the
/// reduced Payload stream (RFC 8166 §3.4.1).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LenCounter {
    total: usize,
    ddp: usize,
}

impl LenCounter {
    /// A counter at zero.
    pub const fn new() -> Self {
        Self { total: 0, ddp: 0 }
    }

    /// Bytes of the full XDR stream.
    pub const fn len(&self) -> usize {
        self.total
    }

    /// True when nothing was counted.
    pub const fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Bytes belonging to DDP-eligible bulk items (data plus XDR padding,
    /// length words excluded).
    pub const fn ddp_len(&self) -> usize {
        self.ddp
    }

    /// Bytes of the stream with DDP-eligible item data and padding removed.
    pub const fn reduced_len(&self) -> usize {
        self.total - self.ddp
    }
}

impl Encoder for LenCounter {
    fn put_raw(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
    }

    fn put_pad(&mut self, n: usize) {
        self.total += n.min(3);
    }

    fn put_bulk(&mut self, data: Bytes, ddp_eligible: bool) {
        let body = data.len() + pad_len(data.len());
        self.total += 4 + body;
        if ddp_eligible {
            self.ddp += body;
        }
    }
}
