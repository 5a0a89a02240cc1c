//! The gather buffer: inline XDR bytes interleaved with references to bulk
//! payloads that are never copied into the header stream.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use crate::encode::Encoder;
use crate::pad_len;

const ZEROS: [u8; 4] = [0; 4];

/// XDR padding as `'static` bytes, for [`XdrBuf::reduced_pieces_with`].
static PAD: [u8; 4] = [0; 4];

/// A bulk payload held by reference inside an [`XdrBuf`].
///
/// It is the data of one variable-length opaque item (RFC 4506 §4.10);
/// the length word precedes it in the inline bytes. Its XDR padding is not
/// stored in `data`: RFC 8166 §3.4.5 has a chunk carry the item without
/// its XDR roundup, and the receiver reinserts it, so the pad is kept
/// apart and emitted only when the full stream is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItem {
    /// Offset of the first data byte in the full XDR stream (after the
    /// length word). This is the position an RPC-over-RDMA Read chunk
    /// names (RFC 8166 §3.4.5).
    pub position: usize,
    /// The data, shared, not copied.
    pub data: Bytes,
    /// Whether the item is a "DDP-eligible data item" (RFC 8166 §3.4) that
    /// an RDMA transport may move by chunk.
    pub ddp_eligible: bool,
}

impl BulkItem {
    /// Bytes of XDR padding that follow the data in the full stream.
    pub fn pad(&self) -> usize {
        pad_len(self.data.len())
    }

    /// Data plus padding: the span the item occupies after its length word.
    pub fn padded_len(&self) -> usize {
        self.data.len() + self.pad()
    }
}

/// An open file whose bytes a [`FileItem`] stands for.
pub trait FileSource: Send + Sync + core::fmt::Debug {
    /// The open file, for a sender that moves the bytes itself (a TCP
    /// sender's `sendfile`).
    fn fd(&self) -> BorrowedFd<'_>;
    /// Reads up to `buf.len()` bytes at `offset` (`pread`): 0 at the end
    /// of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

/// A bulk item whose data is a byte range of an open file, not yet read:
/// a TCP sender sends it from the page cache to the socket without
/// copying it through user space ([`XdrBuf::put_file`]); any other
/// sender reads it in first ([`XdrBuf::load_files`]).
///
/// The length in the stream is fixed when the item is made: if the file
/// has shrunk by the time the bytes are read, the missing bytes are sent
/// as zeros so the stream keeps its length.
#[derive(Debug, Clone)]
pub struct FileItem {
    /// Offset of the first data byte in the full XDR stream.
    pub position: usize,
    /// The file.
    pub file: Arc<dyn FileSource>,
    /// Where the bytes start in the file.
    pub offset: u64,
    /// How many bytes.
    pub len: usize,
    /// Whether the item is DDP-eligible (RFC 8166 §3.4).
    pub ddp_eligible: bool,
}

/// The same range of the same open file.
impl PartialEq for FileItem {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
            && (self.position, self.offset, self.len, self.ddp_eligible)
                == (other.position, other.offset, other.len, other.ddp_eligible)
    }
}

impl Eq for FileItem {}

impl FileItem {
    /// Bytes of XDR padding that follow the data in the full stream.
    pub fn pad(&self) -> usize {
        pad_len(self.len)
    }

    /// Reads the bytes, zeros where the file ends early.
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = vec![0u8; self.len];
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            match self.file.read_at(rest, self.offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Bytes::from(buf))
    }
}

#[derive(Debug, Clone)]
enum Seg {
    Inline(Bytes),
    Bulk(BulkItem),
    File(FileItem),
}

/// One segment of an [`XdrBuf`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Inline XDR bytes (already padded).
    Inline(&'a [u8]),
    /// A bulk payload by reference; its padding is not part of `data`.
    Bulk(&'a BulkItem),
    /// A bulk payload still in a file; its padding follows implicitly.
    File(&'a FileItem),
}

/// A gather buffer holding one XDR stream as inline bytes plus references to
/// bulk payloads (DESIGN.md, `xdr`).
///
/// Encoding into it through [`Encoder`] appends to a growing inline
/// [`BytesMut`]; [`Encoder::put_bulk`] records the payload `Bytes` by
/// reference together with its stream position and DDP eligibility, so
/// bulk data is never copied into the header stream.
///
/// A TCP sender writes the full stream ([`XdrBuf::chunks`],
/// [`XdrBuf::write_to`], [`XdrBuf::to_bytes`]); an RPC-over-RDMA sender
/// moves [`XdrBuf::ddp_items`] by chunk and sends the reduced stream
/// ([`XdrBuf::reduced_bytes`], RFC 8166 §3.4.1).
#[derive(Debug, Clone, Default)]
pub struct XdrBuf {
    segs: Vec<Seg>,
    tail: BytesMut,
    len: usize,
}

impl XdrBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty buffer whose inline part starts with `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            segs: Vec::new(),
            tail: BytesMut::with_capacity(capacity),
            len: 0,
        }
    }

    /// A buffer holding `bytes` as one inline segment, without copying.
    /// The caller guarantees `bytes` is a whole number of XDR units.
    pub fn from_bytes(bytes: Bytes) -> Self {
        let len = bytes.len();
        let segs = if bytes.is_empty() {
            Vec::new()
        } else {
            vec![Seg::Inline(bytes)]
        };
        Self {
            segs,
            tail: BytesMut::new(),
            len,
        }
    }

    /// Length of the full XDR stream (inline bytes, bulk data and padding).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the stream is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn seal_tail(&mut self) {
        if !self.tail.is_empty() {
            let t = self.tail.split().freeze();
            self.segs.push(Seg::Inline(t));
        }
    }

    /// Iterates over the segments in stream order. Bulk padding is not a
    /// segment: it follows each [`Segment::Bulk`] implicitly.
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> + '_ {
        self.segs
            .iter()
            .map(|s| match s {
                Seg::Inline(b) => Segment::Inline(b.as_ref()),
                Seg::Bulk(item) => Segment::Bulk(item),
                Seg::File(item) => Segment::File(item),
            })
            .chain((!self.tail.is_empty()).then_some(Segment::Inline(self.tail.as_ref())))
    }

    /// Every bulk item, DDP-eligible or not, in stream order.
    pub fn bulk_items(&self) -> impl Iterator<Item = &BulkItem> + '_ {
        self.segs.iter().filter_map(|s| match s {
            Seg::Bulk(item) => Some(item),
            Seg::Inline(_) | Seg::File(_) => None,
        })
    }

    /// The DDP-eligible items as `(position, data)`, position being the
    /// offset of the data in the full stream (RFC 8166 §3.4).
    pub fn ddp_items(&self) -> impl Iterator<Item = (usize, &Bytes)> + '_ {
        self.bulk_items()
            .filter(|i| i.ddp_eligible)
            .map(|i| (i.position, &i.data))
    }

    /// Whether some bulk data is still in a file ([`Self::put_file`]):
    /// then the byte views ([`Self::chunks`], [`Self::to_bytes`],
    /// [`Self::ddp_items`], ...) leave it out until [`Self::load_files`]
    /// reads it in.
    pub fn has_files(&self) -> bool {
        self.segs.iter().any(|s| matches!(s, Seg::File(_)))
    }

    /// Reads every file range in ([`FileItem::read`]), making it a bulk
    /// item: for a sender that cannot send from a file (RPC-over-RDMA,
    /// TLS, RPCSEC_GSS integrity or privacy).
    pub fn load_files(&mut self) -> io::Result<()> {
        self.load_files_where(|_| true)
    }

    /// Reads in the file ranges for which `load` returns true, as
    /// [`Self::load_files`], leaving the others in their files: for an
    /// RPC-over-RDMA sender whose device sends the ranges that go by
    /// write chunk from the file, but needs the bytes of those that stay
    /// inline.
    pub fn load_files_where(&mut self, mut load: impl FnMut(&FileItem) -> bool) -> io::Result<()> {
        for seg in &mut self.segs {
            if let Seg::File(item) = seg {
                if !load(item) {
                    continue;
                }
                let data = item.read()?;
                *seg = Seg::Bulk(BulkItem {
                    position: item.position,
                    data,
                    ddp_eligible: item.ddp_eligible,
                });
            }
        }
        Ok(())
    }

    /// Appends variable-length opaque data (RFC 4506 §4.10) that is
    /// `len` bytes of `file` at `offset`: the length word inline, the
    /// data left in the file ([`FileItem`]) and its padding implied, as
    /// for [`Encoder::put_bulk`].
    pub fn put_file(
        &mut self,
        file: Arc<dyn FileSource>,
        offset: u64,
        len: usize,
        ddp_eligible: bool,
    ) {
        self.put_array_len(len);
        self.seal_tail();
        let item = FileItem {
            position: self.len,
            file,
            offset,
            len,
            ddp_eligible,
        };
        self.len += len + item.pad();
        self.segs.push(Seg::File(item));
    }

    /// The byte slices of the full stream in order (inline bytes, bulk data,
    /// padding), suitable for vectored writes.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.chunks_filtered(|_| false)
    }

    /// The byte slices of the stream with the bulk items for which `remove`
    /// returns true left out (their data and padding; the length words stay).
    pub fn chunks_filtered<'s>(
        &'s self,
        mut remove: impl FnMut(&BulkItem) -> bool + 's,
    ) -> impl Iterator<Item = &'s [u8]> + 's {
        self.segments().flat_map(move |s| {
            let (a, b): (&[u8], &[u8]) = match s {
                Segment::Inline(b) => (b, &[]),
                Segment::Bulk(item) if remove(item) => (&[], &[]),
                Segment::Bulk(item) => (item.data.as_ref(), &ZEROS[..item.pad()]),
                // Read in by `load_files` before the bytes are taken.
                Segment::File(_) => (&[], &[]),
            };
            [a, b].into_iter().filter(|c| !c.is_empty())
        })
    }

    /// Writes the full stream into `out` (one copy).
    pub fn write_to(&self, out: &mut impl BufMut) {
        for c in self.chunks() {
            out.put_slice(c);
        }
    }

    /// The full stream as contiguous bytes. Zero-copy when the buffer holds
    /// a single inline segment; otherwise one copy.
    pub fn to_bytes(&self) -> Bytes {
        match (self.segs.as_slice(), self.tail.is_empty()) {
            ([], true) => Bytes::new(),
            ([Seg::Inline(b)], true) => b.clone(),
            _ => {
                let mut out = BytesMut::with_capacity(self.len);
                self.write_to(&mut out);
                out.freeze()
            }
        }
    }

    /// The reduced stream: the full stream minus the data and padding of
    /// every DDP-eligible item, which an RPC-over-RDMA sender conveys in
    /// chunks (RFC 8166 §3.4.1). Length words stay inline.
    pub fn reduced_bytes(&self) -> Bytes {
        self.reduced_bytes_with(|i| i.ddp_eligible)
    }

    /// The stream minus the data and padding of the bulk items for which
    /// `remove` returns true (e.g. only DDP-eligible items above a size
    /// threshold).
    pub fn reduced_bytes_with(&self, remove: impl FnMut(&BulkItem) -> bool) -> Bytes {
        let mut out = BytesMut::new();
        for c in self.chunks_filtered(remove) {
            out.extend_from_slice(c);
        }
        out.freeze()
    }

    /// The same stream as [`Self::reduced_bytes_with`], as reference-counted
    /// pieces instead of one copy: the inline segments, the data of the
    /// bulk items kept and their padding, in order (a gather list for a
    /// vectored Send). Only the unsealed tail, the bytes after the last
    /// bulk item, is copied.
    pub fn reduced_pieces_with(&self, mut remove: impl FnMut(&BulkItem) -> bool) -> Vec<Bytes> {
        let mut out = Vec::with_capacity(2 * self.segs.len() + 1);
        for s in &self.segs {
            match s {
                Seg::Inline(b) => out.push(b.clone()),
                Seg::Bulk(item) if remove(item) => {}
                Seg::Bulk(item) => {
                    out.push(item.data.clone());
                    out.push(Bytes::from_static(&PAD[..item.pad()]));
                }
                // Read in by `load_files` before the bytes are taken.
                Seg::File(_) => {}
            }
        }
        if !self.tail.is_empty() {
            out.push(Bytes::copy_from_slice(&self.tail));
        }
        out.retain(|b| !b.is_empty());
        out
    }

    /// Appends another stream, shifting its bulk positions by this
    /// stream's length. Bulk data is moved, not copied.
    pub fn append(&mut self, other: XdrBuf) {
        let base = self.len;
        let XdrBuf { segs, tail, len } = other;
        self.seal_tail();
        for seg in segs {
            match seg {
                Seg::Inline(b) => self.segs.push(Seg::Inline(b)),
                Seg::Bulk(mut item) => {
                    item.position += base;
                    self.segs.push(Seg::Bulk(item));
                }
                Seg::File(mut item) => {
                    item.position += base;
                    self.segs.push(Seg::File(item));
                }
            }
        }
        if !tail.is_empty() {
            self.segs.push(Seg::Inline(tail.freeze()));
        }
        self.len = base + len;
    }
}

impl Encoder for XdrBuf {
    fn put_raw(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Length word inline, data by reference (RFC 4506 §4.10); the padding
    /// is implied by the data length.
    fn put_bulk(&mut self, data: Bytes, ddp_eligible: bool) {
        self.put_array_len(data.len());
        self.seal_tail();
        let item = BulkItem {
            position: self.len,
            data,
            ddp_eligible,
        };
        self.len += item.padded_len();
        self.segs.push(Seg::Bulk(item));
    }
}

/// Why [`XdrBuf::from_reduced`] refused its input.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReassemblyError {
    /// Positions must be increasing, 4-byte aligned and, once the earlier
    /// items are accounted for, inside the reduced stream.
    #[error("bulk item position {position} is not valid in a stream of {len} bytes")]
    BadPosition {
        /// The offending position (in the full stream).
        position: usize,
        /// Length of the full stream up to that point.
        len: usize,
    },
}

impl XdrBuf {
    /// Rebuilds a full stream from a reduced one and the DDP-eligible items
    /// that were conveyed apart from it (the receiver side of
    /// RFC 8166 §3.4.5-§3.4.6: each item is inserted at its position and
    /// its XDR roundup reinserted). `items` are `(position, data)` with
    /// positions in the full stream, in increasing order, as
    /// [`XdrBuf::ddp_items`] reports them. Nothing is copied.
    pub fn from_reduced(
        reduced: Bytes,
        items: impl IntoIterator<Item = (usize, Bytes)>,
    ) -> Result<Self, ReassemblyError> {
        let mut out = XdrBuf::new();
        let mut consumed = 0usize; // bytes of `reduced` already placed
        for (position, data) in items {
            // Full-stream offset of the next reduced byte is out.len().
            let bad = ReassemblyError::BadPosition {
                position,
                len: out.len() + (reduced.len() - consumed),
            };
            if position < out.len() || position % 4 != 0 {
                return Err(bad);
            }
            let take = position - out.len();
            if take > reduced.len() - consumed {
                return Err(bad);
            }
            if take > 0 {
                out.seal_tail();
                out.segs
                    .push(Seg::Inline(reduced.slice(consumed..consumed + take)));
                out.len += take;
                consumed += take;
            }
            out.seal_tail();
            let item = BulkItem {
                position,
                data,
                ddp_eligible: true,
            };
            out.len += item.padded_len();
            out.segs.push(Seg::Bulk(item));
        }
        if consumed < reduced.len() {
            out.segs.push(Seg::Inline(reduced.slice(consumed..)));
            out.len += reduced.len() - consumed;
        }
        Ok(out)
    }
}

impl From<Bytes> for XdrBuf {
    fn from(b: Bytes) -> Self {
        Self::from_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// u32 7, DDP-eligible "hello", u32 9, non-DDP "ab".
    const FULL: [u8; 32] = [
        0, 0, 0, 7, // u32
        0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // bulk, ddp
        0, 0, 0, 9, // u32
        0, 0, 0, 2, b'a', b'b', 0, 0, // bulk, not ddp
        0, 0, 0, 1, // u32
    ];

    fn sample(hello: &Bytes, ab: &Bytes) -> XdrBuf {
        let mut b = XdrBuf::new();
        b.put_u32(7);
        b.put_bulk(hello.clone(), true);
        b.put_u32(9);
        b.put_bulk(ab.clone(), false);
        b.put_u32(1);
        b
    }

    #[test]
    fn records_positions_of_ddp_items() {
        let hello = Bytes::from_static(b"hello");
        let ab = Bytes::from_static(b"ab");
        let b = sample(&hello, &ab);
        assert_eq!(b.len(), FULL.len());
        let ddp: Vec<_> = b.ddp_items().collect();
        assert_eq!(ddp.len(), 1);
        assert_eq!(ddp[0].0, 8);
        let bulk: Vec<_> = b.bulk_items().collect();
        assert_eq!(bulk[1].position, 24);
        assert_eq!(bulk[0].pad(), 3);
        assert_eq!(bulk[1].padded_len(), 4);
    }

    #[test]
    fn bulk_data_is_not_copied() {
        let hello = Bytes::from(vec![1u8; 1000]);
        let ab = Bytes::from_static(b"ab");
        let b = sample(&hello, &ab);
        let (_, data) = b.ddp_items().next().unwrap();
        assert_eq!(data.as_ptr(), hello.as_ptr());
        assert_eq!(data.len(), hello.len());
        let chunk_ptrs: Vec<_> = b.chunks().map(<[u8]>::as_ptr).collect();
        assert!(chunk_ptrs.contains(&hello.as_ptr()));
    }

    #[test]
    fn emits_full_stream() {
        let b = sample(&Bytes::from_static(b"hello"), &Bytes::from_static(b"ab"));
        assert_eq!(b.to_bytes().as_ref(), &FULL);
        let mut out = BytesMut::new();
        out.extend_from_slice(&[0xa5; 4]);
        b.write_to(&mut out);
        assert_eq!(&out[..4], &[0xa5; 4]);
        assert_eq!(&out[4..], &FULL);
        let joined: Vec<u8> = b.chunks().flatten().copied().collect();
        assert_eq!(joined, FULL);
    }

    #[test]
    fn reduced_stream_drops_ddp_data_and_padding_only() {
        let b = sample(&Bytes::from_static(b"hello"), &Bytes::from_static(b"ab"));
        let mut want = FULL[..8].to_vec();
        want.extend_from_slice(&FULL[16..]);
        assert_eq!(b.reduced_bytes().as_ref(), want.as_slice());
        let none = b.reduced_bytes_with(|_| false);
        assert_eq!(none.as_ref(), &FULL);
    }

    #[test]
    fn reduced_pieces_are_the_reduced_stream_by_reference() {
        let hello = Bytes::from_static(b"hello");
        let b = sample(&hello, &Bytes::from_static(b"ab"));
        for ddp_out in [true, false] {
            let pieces = b.reduced_pieces_with(|i| ddp_out && i.ddp_eligible);
            let joined: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
            let want = b.reduced_bytes_with(|i| ddp_out && i.ddp_eligible);
            assert_eq!(joined, want.as_ref(), "ddp_out {ddp_out}");
            assert!(pieces.iter().all(|p| !p.is_empty()));
            // The kept data is the caller's, not a copy.
            assert_eq!(
                pieces.iter().any(|p| p.as_ptr() == hello.as_ptr()),
                !ddp_out
            );
        }
        // An unsealed tail after the last bulk item is part of it.
        let mut t = sample(&hello, &Bytes::from_static(b"ab"));
        t.put_u32(0xabcd);
        let joined: Vec<u8> = t
            .reduced_pieces_with(|_| false)
            .iter()
            .flat_map(|p| p.iter().copied())
            .collect();
        assert_eq!(joined, t.to_bytes().as_ref());
    }

    #[test]
    fn segments_list_inline_and_bulk_in_order() {
        let b = sample(&Bytes::from_static(b"hello"), &Bytes::from_static(b"ab"));
        let kinds: Vec<_> = b
            .segments()
            .map(|s| match s {
                Segment::Inline(x) => ("inline", x.len()),
                Segment::Bulk(i) => ("bulk", i.data.len()),
                Segment::File(i) => ("file", i.len),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("inline", 8),
                ("bulk", 5),
                ("inline", 8),
                ("bulk", 2),
                ("inline", 4)
            ]
        );
    }

    #[test]
    fn append_shifts_positions() {
        let mut head = XdrBuf::new();
        head.put_u32(0xdead_beef);
        head.put_u32(1);
        let body = sample(&Bytes::from_static(b"hello"), &Bytes::from_static(b"ab"));
        head.append(body);
        assert_eq!(head.len(), 8 + FULL.len());
        assert_eq!(head.ddp_items().next().unwrap().0, 16);
        let flat = head.to_bytes();
        assert_eq!(&flat[8..], &FULL);
        head.put_u32(2);
        assert_eq!(head.len(), 12 + FULL.len());
        assert_eq!(&head.to_bytes()[8 + FULL.len()..], &[0, 0, 0, 2]);
    }

    #[test]
    fn from_bytes_is_zero_copy() {
        let wire = Bytes::from(vec![0u8; 64]);
        let b = XdrBuf::from_bytes(wire.clone());
        assert_eq!(b.len(), 64);
        assert_eq!(b.to_bytes().as_ptr(), wire.as_ptr());
        assert!(XdrBuf::new().to_bytes().is_empty());
    }

    #[test]
    fn from_reduced_inverts_reduced_bytes_without_copy() {
        let hello = Bytes::from_static(b"hello");
        let b = sample(&hello, &Bytes::from_static(b"ab"));
        let items: Vec<(usize, Bytes)> = b.ddp_items().map(|(p, d)| (p, d.clone())).collect();
        let back = XdrBuf::from_reduced(b.reduced_bytes(), items).unwrap();
        assert_eq!(back.len(), FULL.len());
        assert_eq!(back.to_bytes().as_ref(), &FULL);
        let (pos, data) = back.ddp_items().next().unwrap();
        assert_eq!(pos, 8);
        assert_eq!(data.as_ptr(), hello.as_ptr());
    }

    #[test]
    fn from_reduced_rejects_bad_positions() {
        let reduced = Bytes::from_static(&[0u8; 8]);
        let d = Bytes::from_static(b"x");
        assert!(XdrBuf::from_reduced(reduced.clone(), [(2, d.clone())]).is_err());
        assert!(XdrBuf::from_reduced(reduced.clone(), [(12, d.clone())]).is_err());
        assert!(XdrBuf::from_reduced(reduced.clone(), [(4, d.clone()), (4, d.clone())]).is_err());
        let ok = XdrBuf::from_reduced(reduced, [(8, d.clone()), (12, d)]).unwrap();
        assert_eq!(ok.len(), 16);
    }

    /// A file for [`XdrBuf::put_file`].
    #[derive(Debug)]
    struct TestFile(std::fs::File);

    impl FileSource for TestFile {
        fn fd(&self) -> BorrowedFd<'_> {
            std::os::fd::AsFd::as_fd(&self.0)
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
        }
    }

    fn test_file(name: &str, bytes: &[u8]) -> Arc<TestFile> {
        let path = std::env::temp_dir().join(format!("xdr-{name}-{}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(TestFile(f))
    }

    #[test]
    fn a_file_range_loads_into_the_same_stream_as_its_bytes() {
        let f = test_file("range", b"..hello..");
        let mut b = XdrBuf::new();
        b.put_u32(7);
        b.put_file(f, 2, 5, true);
        b.put_u32(9);
        b.put_bulk(Bytes::from_static(b"ab"), false);
        b.put_u32(1);
        assert_eq!(b.len(), FULL.len());
        assert!(b.has_files());
        assert!(
            matches!(b.segments().nth(1), Some(Segment::File(i)) if i.position == 8 && i.pad() == 3)
        );
        // Before loading, the byte views leave the file's data out.
        assert_eq!(b.ddp_items().count(), 0);
        let mut head = XdrBuf::new();
        head.put_u32(0xdead_beef);
        head.append(b);
        head.load_files().unwrap();
        assert!(!head.has_files());
        assert_eq!(&head.to_bytes()[4..], &FULL);
        assert_eq!(
            head.ddp_items().next().map(|(p, d)| (p, d.len())),
            Some((12, 5))
        );
    }

    #[test]
    fn a_file_that_shrank_loads_as_zeros() {
        let f = test_file("shrunk", b"abc");
        let mut b = XdrBuf::new();
        b.put_file(f, 1, 6, false);
        assert_eq!(b.len(), 12);
        b.load_files().unwrap();
        assert_eq!(
            b.to_bytes().as_ref(),
            &[0, 0, 0, 6, b'b', b'c', 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn len_counter_matches_gather_buffer() {
        let mut c = crate::LenCounter::new();
        c.put_u32(7);
        c.put_bulk(Bytes::from_static(b"hello"), true);
        c.put_u32(9);
        c.put_bulk(Bytes::from_static(b"ab"), false);
        c.put_u32(1);
        assert_eq!(c.len(), FULL.len());
        assert_eq!(c.ddp_len(), 8);
        assert_eq!(c.reduced_len(), FULL.len() - 8);
    }
}
