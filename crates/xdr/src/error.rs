//! Decode errors: a `Copy` kind, the byte offset where decoding failed and a
//! static context string. Nothing here allocates.

use core::fmt;

/// What went wrong while decoding an XDR stream.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The item needs `needed` more bytes but only `available` remain.
    #[error("unexpected end of input: needed {needed} bytes, {available} available")]
    UnexpectedEof {
        /// Bytes the item needs (including XDR padding).
        needed: usize,
        /// Bytes left in the decoder.
        available: usize,
    },
    /// A variable-length item announced more elements than its bound allows.
    #[error("length {len} exceeds the maximum {max}")]
    LengthExceeded {
        /// The length (or count) read from the stream.
        len: u64,
        /// The bound in force.
        max: u64,
    },
    /// An array count cannot fit in the remaining input even if every
    /// element had its minimum encoded size.
    #[error("array count {count} needs at least {needed} bytes, {available} available")]
    CountExceedsInput {
        /// The element count read from the stream.
        count: u32,
        /// `count * min_item_size`.
        needed: u64,
        /// Bytes left in the decoder.
        available: usize,
    },
    /// RFC 4506 §3: padding bytes must be zero.
    #[error("non-zero XDR padding")]
    NonZeroPadding,
    /// RFC 4506 §4.4: a boolean is 0 or 1.
    #[error("invalid boolean {0}")]
    InvalidBool(u32),
    /// RFC 4506 §4.3: an enum value outside the declared set (or an
    /// unknown union discriminant).
    #[error("invalid enum value {0}")]
    InvalidEnum(u32),
    /// A string expected to be UTF-8 is not.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// [`Decoder::finish`](crate::Decoder::finish) found unconsumed bytes.
    #[error("{remaining} trailing bytes")]
    TrailingBytes {
        /// Bytes left over.
        remaining: usize,
    },
}

/// A decode failure: the [`ErrorKind`], the offset in the input where the
/// failing item started, and a static context naming the item.
///
/// The context defaults to the primitive that failed (`"u32"`,
/// `"opaque"`...); callers refine it with [`ResultExt::context`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    position: usize,
    context: &'static str,
}

impl Error {
    /// Creates an error of `kind` at byte offset `position`.
    pub const fn new(kind: ErrorKind, position: usize, context: &'static str) -> Self {
        Self {
            kind,
            position,
            context,
        }
    }

    /// What went wrong.
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Byte offset (from the start of the decoder's input) of the failing item.
    pub const fn position(&self) -> usize {
        self.position
    }

    /// A static name of the item being decoded.
    pub const fn context(&self) -> &'static str {
        self.context
    }

    /// Replaces the context with a more specific one.
    pub const fn with_context(mut self, context: &'static str) -> Self {
        self.context = context;
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "XDR {} at offset {}: {}",
            self.context, self.position, self.kind
        )
    }
}

impl std::error::Error for Error {}

/// Adds a context string to a decode result.
pub trait ResultExt {
    /// Replaces the error's context with `context` (no allocation).
    #[must_use]
    fn context(self, context: &'static str) -> Self;
}

impl<T> ResultExt for Result<T, Error> {
    fn context(self, context: &'static str) -> Self {
        self.map_err(|e| e.with_context(context))
    }
}
