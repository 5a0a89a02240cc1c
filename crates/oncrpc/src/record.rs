//! Record marking for stream transports (RFC 5531 §11) as a sans-IO
//! deframer and a framer.
//!
//! Each fragment starts with a 4-byte header: the high bit marks the last
//! fragment of a record, the low 31 bits are the fragment length.

use bytes::{Buf, Bytes, BytesMut};
use xdr::XdrBuf;

/// Bit marking the last fragment of a record (RFC 5531 §11).
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// Largest fragment length a header can carry (RFC 5531 §11: 31 bits).
pub const MAX_FRAGMENT_LEN: usize = 0x7fff_ffff;

/// Why the deframer stopped. The stream cannot be resynchronised after
/// either error: the shell closes the connection.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A fragment would make the record exceed the configured maximum.
    /// Detected from the fragment header, before its data is buffered.
    #[error("record of at least {len} bytes exceeds the maximum {max}")]
    TooLarge {
        /// Record length so far including the announced fragment.
        len: u64,
        /// The configured maximum.
        max: usize,
    },
}

/// Builds a fragment header (RFC 5531 §11).
pub fn fragment_header(len: usize, last: bool) -> [u8; 4] {
    let len = len.min(MAX_FRAGMENT_LEN) as u32;
    let word = if last { len | LAST_FRAGMENT } else { len };
    word.to_be_bytes()
}

/// Splits a fragment header into (length, last-fragment flag).
pub fn parse_fragment_header(h: [u8; 4]) -> (usize, bool) {
    let word = u32::from_be_bytes(h);
    ((word & !LAST_FRAGMENT) as usize, word & LAST_FRAGMENT != 0)
}

/// A sans-IO record deframer (RFC 5531 §11).
///
/// Feed it stream bytes with [`RecordDecoder::feed`] (or read straight into
/// [`RecordDecoder::read_buf`]), then call [`RecordDecoder::next_record`]
/// until it returns `Ok(None)`. Fragments are reassembled; a single-fragment
/// record is returned without copying. The record size bound is checked on
/// each fragment header, before the fragment is accepted, so memory use
/// stays below the bound plus one read; below that, the buffers hold only
/// the bytes received: the decoder reserves nothing from a header's claim
/// itself. A shell may ([`RecordDecoder::fragment_missing`],
/// [`RecordDecoder::reserve_input`]) within a budget of its own.
#[derive(Debug)]
pub struct RecordDecoder {
    max_record: usize,
    input: BytesMut,
    partial: BytesMut,
    /// Set once the peer exceeded the bound: the stream is unusable.
    failed: Option<RecordError>,
    /// A handle on the allocation `input` was last made in by
    /// [`Self::reserve_input_reusing`] (an empty view at its end), and the
    /// allocation's length.
    anchor: Option<(BytesMut, usize)>,
    /// Allocations `input` was in before, kept for reuse (at most
    /// [`MAX_SPARES`]), each with its length.
    spares: Vec<(BytesMut, usize)>,
}

/// Receive buffers a deframer keeps for reuse at most
/// ([`RecordDecoder::reserve_input_reusing`]): a client with four large
/// WRITEs in flight holds four records while the fifth arrives.
pub const MAX_SPARES: usize = 4;

impl RecordDecoder {
    /// A deframer accepting records of at most `max_record` bytes.
    pub fn new(max_record: usize) -> Self {
        Self {
            max_record,
            input: BytesMut::new(),
            partial: BytesMut::new(),
            failed: None,
            anchor: None,
            spares: Vec::new(),
        }
    }

    /// The configured maximum record size.
    pub fn max_record(&self) -> usize {
        self.max_record
    }

    /// Appends stream bytes.
    pub fn feed(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// The input buffer, for reading from a socket directly (e.g. tokio's
    /// `read_buf`). Bytes appended here are treated like [`Self::feed`].
    pub fn read_buf(&mut self) -> &mut BytesMut {
        &mut self.input
    }

    /// Bytes the fragment whose header is buffered still needs beyond what
    /// is buffered (its header included), or `None` when no fragment
    /// header is buffered or the fragment would exceed the record bound
    /// (the next [`Self::next_record`] fails then). The length is the
    /// peer's claim: a shell that makes room for it up front
    /// ([`Self::reserve_input`]) must bound what it reserves so.
    pub fn fragment_missing(&self) -> Option<usize> {
        let h = self.input.get(..4)?;
        let (len, _) = parse_fragment_header([h[0], h[1], h[2], h[3]]);
        if self.partial.len() as u64 + len as u64 > self.max_record as u64 {
            return None;
        }
        Some((4 + len).saturating_sub(self.input.len()))
    }

    /// Makes room for `n` more input bytes in one step, so a record read
    /// into the room is neither moved nor copied as it arrives: the input
    /// buffer is reused if it has the room (or gets it back by moving the
    /// few bytes it holds to its start), else replaced by a new buffer of
    /// exactly the bytes held plus `n`, the bytes held copied once.
    /// `BytesMut::reserve` would instead double a buffer it can reclaim
    /// (copying a returned record's dead bytes with it) and grow a shared
    /// one from 64 KiB, moving the record at each step.
    pub fn reserve_input(&mut self, n: usize) {
        if self.input.capacity() - self.input.len() >= n || self.input.try_reclaim(n) {
            return;
        }
        let mut fresh = BytesMut::with_capacity(self.input.len().saturating_add(n));
        fresh.extend_from_slice(&self.input);
        self.input = fresh;
    }

    /// As [`Self::reserve_input`], but the buffer replaced is kept as a
    /// spare (at most [`MAX_SPARES`], [`Self::spare_len`]) and a spare is
    /// reused when the room is needed again and the records split off it
    /// have been dropped, so a stream of large records (1 MiB WRITEs) is
    /// received into the same few allocations instead of a new one each,
    /// whose pages the allocator had given back to the kernel and the
    /// receive copy faults in again, zeroed (docs/benchmarks.md). Spares
    /// are memory held while no record needs them: the shell charges
    /// [`Self::spare_len`] to a budget and calls [`Self::drop_spares`]
    /// past it.
    pub fn reserve_input_reusing(&mut self, n: usize) {
        if self.input.capacity() - self.input.len() >= n || self.input.try_reclaim(n) {
            return;
        }
        let want = self.input.len().saturating_add(n);
        // A spare unique again (its records dropped) and large enough:
        // the whole allocation is the new input, from its start.
        let reused = self
            .spares
            .iter_mut()
            .position(|(b, _)| b.try_reclaim(want))
            .map(|i| self.spares.swap_remove(i));
        let (mut next, len) = reused.unwrap_or_else(|| {
            let b = BytesMut::with_capacity(want);
            let len = b.capacity();
            (b, len)
        });
        let end = next.capacity();
        let anchor = next.split_off(end);
        next.extend_from_slice(&self.input);
        self.input = next;
        if let Some(old) = self.anchor.replace((anchor, len)) {
            if self.spares.len() >= MAX_SPARES {
                // The oldest is let go; a record still holding it frees it.
                self.spares.remove(0);
            }
            self.spares.push(old);
        }
    }

    /// The length of the allocations kept as spares, together (0: none).
    pub fn spare_len(&self) -> usize {
        self.spares.iter().map(|(_, len)| len).sum()
    }

    /// Lets the spares go (their memory is freed once no record holds it).
    pub fn drop_spares(&mut self) {
        self.spares.clear();
    }

    /// Bytes buffered but not yet returned (input plus partial record).
    pub fn buffered(&self) -> usize {
        self.input.len() + self.partial.len()
    }

    /// True when no partial record or unparsed input is held, i.e. the
    /// stream is at a record boundary.
    pub fn is_idle(&self) -> bool {
        self.buffered() == 0
    }

    /// Returns the next complete record, `Ok(None)` if more input is
    /// needed, or an error if the peer exceeded the record bound.
    pub fn next_record(&mut self) -> Result<Option<Bytes>, RecordError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        loop {
            let Some(h) = self.input.get(..4) else {
                return Ok(None);
            };
            let (len, last) = parse_fragment_header([h[0], h[1], h[2], h[3]]);
            let total = self.partial.len() as u64 + len as u64;
            if total > self.max_record as u64 {
                let e = RecordError::TooLarge {
                    len: total,
                    max: self.max_record,
                };
                self.failed = Some(e);
                return Err(e);
            }
            if self.input.len() - 4 < len {
                // Nothing is reserved from the header's length: the buffer
                // grows only as the peer's bytes arrive, so a header
                // claiming 4 MiB followed by silence costs what was sent.
                return Ok(None);
            }
            self.input.advance(4);
            let frag = self.input.split_to(len);
            if last {
                if self.partial.is_empty() {
                    return Ok(Some(frag.freeze()));
                }
                self.partial.extend_from_slice(&frag);
                return Ok(Some(self.partial.split().freeze()));
            }
            self.partial.extend_from_slice(&frag);
        }
    }
}

/// Computes the fragment headers for a record of `total` bytes split into
/// fragments of at most `max_fragment` bytes (an empty record is one empty
/// last fragment).
pub fn fragment_headers(total: usize, max_fragment: usize) -> Vec<[u8; 4]> {
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT_LEN);
    let mut out = Vec::with_capacity(total / max_fragment + 1);
    let mut left = total;
    loop {
        let n = left.min(max_fragment);
        left -= n;
        out.push(fragment_header(n, left == 0));
        if left == 0 {
            return out;
        }
    }
}

/// The slices of a framed record, in order: each fragment header followed
/// by that fragment's data, taken from `msg` without copying. `headers`
/// must come from [`fragment_headers`] with the same `max_fragment` and
/// `msg.len()`. Use with vectored writes.
pub fn framed_slices<'a>(
    msg: &'a XdrBuf,
    headers: &'a [[u8; 4]],
    max_fragment: usize,
) -> Vec<&'a [u8]> {
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT_LEN);
    let mut out = Vec::new();
    let mut hdrs = headers.iter();
    let mut room = 0usize;
    if let Some(h) = hdrs.next() {
        out.push(&h[..]);
        room = max_fragment;
    }
    for mut chunk in msg.chunks() {
        while !chunk.is_empty() {
            if room == 0 {
                match hdrs.next() {
                    Some(h) => {
                        out.push(&h[..]);
                        room = max_fragment;
                    }
                    None => return out,
                }
            }
            let (now, rest) = chunk.split_at(chunk.len().min(room));
            out.push(now);
            room -= now.len();
            chunk = rest;
        }
    }
    out
}

/// Frames `msg` as one record in contiguous bytes (copies; for tests and
/// small messages).
pub fn encode_record(msg: &XdrBuf) -> Bytes {
    let headers = fragment_headers(msg.len(), MAX_FRAGMENT_LEN);
    let mut out = BytesMut::with_capacity(msg.len() + 4 * headers.len());
    for s in framed_slices(msg, &headers, MAX_FRAGMENT_LEN) {
        out.extend_from_slice(s);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::Encoder;

    #[test]
    fn deconstructs_fragment_header() {
        assert_eq!(parse_fragment_header([0x80, 0, 0, 0x28]), (40, true));
        assert_eq!(
            parse_fragment_header([0x7f, 0xff, 0xff, 0xff]),
            (MAX_FRAGMENT_LEN, false)
        );
    }

    #[test]
    fn constructs_fragment_header() {
        assert_eq!(fragment_header(40, true), [0x80, 0, 0, 0x28]);
        assert_eq!(fragment_header(5, false), [0, 0, 0, 5]);
    }

    #[test]
    fn fragment_missing_is_the_claim_less_what_arrived() {
        let mut d = RecordDecoder::new(1 << 20);
        assert_eq!(d.fragment_missing(), None);
        d.feed(&[0x80, 0]);
        assert_eq!(d.fragment_missing(), None);
        d.feed(&[0x10, 0, 1, 2]);
        assert_eq!(d.fragment_missing(), Some(4096 + 4 - 6));
        // A claim over the bound is not reported as bytes to make room for.
        let mut d = RecordDecoder::new(100);
        d.feed(&fragment_header(101, true));
        assert_eq!(d.fragment_missing(), None);
        assert!(d.next_record().is_err());
    }

    #[test]
    fn a_record_read_into_reserved_room_is_not_moved() {
        let len = 1 << 20;
        let mut d = RecordDecoder::new(2 << 20);
        d.feed(&[0; 100]); // a returned record's bytes, held by its call
        d.feed(&fragment_header(len, true));
        d.feed(&[7; 1000]);
        d.read_buf().advance(100);
        let held = d.read_buf().split_to(0).freeze();
        let missing = d.fragment_missing().unwrap();
        assert_eq!(missing, len + 4 - 1004);
        d.reserve_input(missing);
        let start = d.read_buf().as_ptr();
        assert!(d.read_buf().capacity() >= len + 4);
        for _ in 0..missing / 1000 {
            d.feed(&[7; 1000]);
        }
        d.feed(&vec![7; missing % 1000]);
        assert_eq!(d.read_buf().as_ptr(), start, "moved while arriving");
        let r = d.next_record().unwrap().unwrap();
        assert_eq!(r.len(), len);
        assert_eq!(r.as_ptr(), start.wrapping_add(4));
        assert!(r.iter().all(|&b| b == 7));
        drop(held);
    }

    #[test]
    fn parses_single_fragment_record_without_copy() {
        let mut d = RecordDecoder::new(64);
        d.feed(&[0x80, 0, 0, 4, 1, 2, 3, 4, 0x80]);
        let r = d.next_record().unwrap().unwrap();
        assert_eq!(&r[..], &[1, 2, 3, 4]);
        assert_eq!(d.next_record().unwrap(), None);
        assert!(!d.is_idle());
    }

    #[test]
    fn reassembles_multi_fragment_record_fed_byte_by_byte() {
        let wire = [0, 0, 0, 2, 1, 2, 0, 0, 0, 0, 0x80, 0, 0, 3, 3, 4, 5];
        let mut d = RecordDecoder::new(64);
        let mut got = Vec::new();
        for b in wire {
            d.feed(&[b]);
            while let Some(r) = d.next_record().unwrap() {
                got.push(r);
            }
        }
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0][..], &[1, 2, 3, 4, 5]);
        assert!(d.is_idle());
    }

    #[test]
    fn rejects_record_over_bound_from_header_alone() {
        let mut d = RecordDecoder::new(16);
        d.feed(&[0x80, 0, 0, 17]);
        assert_eq!(
            d.next_record(),
            Err(RecordError::TooLarge { len: 17, max: 16 })
        );
        // Poisoned: the stream cannot be resynchronised.
        d.feed(&[0x80, 0, 0, 0]);
        assert!(d.next_record().is_err());
        let mut d = RecordDecoder::new(16);
        d.feed(&[0, 0, 0, 10]);
        d.feed(&[0; 10]);
        d.feed(&[0x80, 0, 0, 7]);
        assert_eq!(
            d.next_record(),
            Err(RecordError::TooLarge { len: 17, max: 16 })
        );
    }

    #[test]
    fn reserves_nothing_from_a_header_claiming_a_large_fragment() {
        let mut d = RecordDecoder::new(8 << 20);
        d.feed(&[0x80, 0x40, 0, 0, 1, 2, 3]);
        assert_eq!(d.next_record(), Ok(None));
        assert!(
            d.read_buf().capacity() < 4096,
            "{}",
            d.read_buf().capacity()
        );
        assert_eq!(d.buffered(), 7);
    }

    #[test]
    fn emits_record_with_last_fragment_bit() {
        let mut msg = XdrBuf::new();
        msg.put_u32(0xa5a5_a5a5);
        msg.put_bulk(Bytes::from_static(b"xy"), true);
        let rec = encode_record(&msg);
        assert_eq!(
            &rec[..],
            &[0x80, 0, 0, 12, 0xa5, 0xa5, 0xa5, 0xa5, 0, 0, 0, 2, b'x', b'y', 0, 0]
        );
    }

    #[test]
    fn splits_large_records_into_fragments_that_reassemble() {
        let mut msg = XdrBuf::new();
        msg.put_u32(1);
        msg.put_bulk(Bytes::from(vec![7u8; 21]), false);
        let headers = fragment_headers(msg.len(), 8);
        assert_eq!(headers.len(), 4);
        let wire: Vec<u8> = framed_slices(&msg, &headers, 8).concat();
        assert_eq!(wire.len(), msg.len() + 16);
        let mut d = RecordDecoder::new(1024);
        d.feed(&wire);
        let rec = d.next_record().unwrap().unwrap();
        assert_eq!(rec, msg.to_bytes());
        assert_eq!(fragment_headers(0, 8), vec![[0x80, 0, 0, 0]]);
    }
}
