//! Typed errors and status codes of the verbs model.

use crate::stag::Stag;

/// Why a tagged access (remote or local) to a memory region was refused.
///
/// Produced by [`MrTable`](crate::MrTable), the one access-check table every
/// device uses. Each variant corresponds to one Terminate error code of
/// RFC 5040 §4.8 (RDMAP remote protection errors) and RFC 5041 §7.2 (DDP tagged
/// buffer errors); the `iwarp` crate maps them to wire codes:
///
/// | variant | RFC 5040 §4.8 code |
/// |---|---|
/// | `UnknownStag`, `KeyMismatch`, `Invalidated` | 0x00 Invalid STag |
/// | `BoundsViolation` | 0x01 Base or bounds violation |
/// | `AccessRights` | 0x02 Access rights violation |
/// | `PdMismatch` | 0x03 STag not associated with RDMAP stream |
/// | `ToWrap` | 0x04 TO wrap |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// No region is registered at the STag's index.
    #[error("invalid STag {0}: no region at this index")]
    UnknownStag(Stag),
    /// A region exists at the index but under another key.
    #[error("invalid STag {0}: key does not match")]
    KeyMismatch(Stag),
    /// The region was invalidated (locally or by a Send With Invalidate).
    #[error("invalid STag {0}: region was invalidated")]
    Invalidated(Stag),
    /// The region belongs to another protection domain than the stream.
    #[error("STag {0} is not associated with this stream's protection domain")]
    PdMismatch(Stag),
    /// The region lacks the access right the operation needs.
    #[error("access rights violation on STag {0}")]
    AccessRights(Stag),
    /// `[to, to + len)` is not inside `[base, base + length)`.
    #[error("base or bounds violation on STag {stag}: to {to:#x} len {len}")]
    BoundsViolation {
        /// The STag addressed.
        stag: Stag,
        /// The tagged offset asked for.
        to: u64,
        /// The length asked for.
        len: u64,
    },
    /// `to + len` overflows 64 bits.
    #[error("tagged offset wrap on STag {0}")]
    ToWrap(Stag),
}

impl AccessError {
    /// The DDP tagged-buffer error code (layer 1, error type 1) a Terminate
    /// carries for this failure of an RDMA Write or Read Response placement
    /// (RFC 5041 §7.2). DDP has no rights code: a rights violation reports an
    /// invalid STag, as Linux `siw` does.
    pub fn ddp_tagged_code(&self) -> u8 {
        match self {
            AccessError::BoundsViolation { .. } => 0x01,
            AccessError::PdMismatch(_) => 0x02,
            AccessError::ToWrap(_) => 0x03,
            _ => 0x00,
        }
    }

    /// The RDMAP remote protection error code (layer 0, error type 1) a
    /// Terminate carries for this failure of an RDMA Read Request's source
    /// (RFC 5040 §4.8).
    pub fn rdmap_protection_code(&self) -> u8 {
        match self {
            AccessError::BoundsViolation { .. } => 0x01,
            AccessError::AccessRights(_) => 0x02,
            AccessError::PdMismatch(_) => 0x03,
            AccessError::ToWrap(_) => 0x04,
            _ => 0x00,
        }
    }

    /// The STag the refused access named.
    pub fn stag(&self) -> Stag {
        match *self {
            AccessError::UnknownStag(s)
            | AccessError::KeyMismatch(s)
            | AccessError::Invalidated(s)
            | AccessError::PdMismatch(s)
            | AccessError::AccessRights(s)
            | AccessError::ToWrap(s) => s,
            AccessError::BoundsViolation { stag, .. } => stag,
        }
    }
}

/// Why a connection was terminated, in layer-neutral terms.
///
/// RFC 5040 §7 and RFC 5041 §7: an error detected on an RDMAP stream is reported
/// to the peer in a Terminate message and the stream is closed. The `iwarp` crate
/// maps each cause to the Terminate layer, error type and code (RFC 5040 §4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TerminateCause {
    /// A tagged access failed the region checks (remote protection error).
    #[error("remote protection error: {0}")]
    Access(AccessError),
    /// A Send arrived with no posted receive buffer.
    /// RFC 5041 §7.2 (untagged buffer error: invalid MSN, no buffer available).
    #[error("no receive buffer posted for an incoming Send")]
    NoReceiveBuffer,
    /// A Send was larger than the receive buffer it consumed.
    /// RFC 5041 §7.2 (untagged buffer error: message too long for available buffer).
    #[error("incoming Send larger than the posted receive buffer")]
    MessageTooLong,
    /// The STag named by a Send With Invalidate could not be invalidated.
    /// RFC 5040 §4.8 (remote operation error 0x09, STag cannot be invalidated).
    #[error("STag named by Send With Invalidate cannot be invalidated: {0}")]
    CannotInvalidate(AccessError),
    /// Any other Terminate, by its RFC 5040 §4.8 layer, error type and code
    /// (e.g. a CRC error, an invalid MSN, or a protection error reported by the
    /// peer whose details only the peer knows).
    #[error("terminate: layer {layer} type {etype} code {code:#04x}")]
    Other {
        /// Layer: 0 RDMAP, 1 DDP, 2 LLP (MPA).
        layer: u8,
        /// Error type within the layer.
        etype: u8,
        /// Error code within the type.
        code: u8,
    },
}

impl TerminateCause {
    /// What the peer learns of a failed RDMA Write (or Read Response)
    /// placement: the DDP tagged-buffer code (RFC 5041 §7.2).
    pub fn ddp_tagged(e: AccessError) -> TerminateCause {
        TerminateCause::Other {
            layer: 1,
            etype: 1,
            code: e.ddp_tagged_code(),
        }
    }

    /// What the peer learns of a refused RDMA Read Request: the RDMAP remote
    /// protection code (RFC 5040 §4.8).
    pub fn rdmap_protection(e: AccessError) -> TerminateCause {
        TerminateCause::Other {
            layer: 0,
            etype: 1,
            code: e.rdmap_protection_code(),
        }
    }

    /// What the peer learns of a Send With Invalidate whose STag could not be
    /// invalidated: RDMAP remote operation error 0x09 (RFC 5040 §4.8).
    pub const CANNOT_INVALIDATE_ON_WIRE: TerminateCause = TerminateCause::Other {
        layer: 0,
        etype: 2,
        code: 0x09,
    };
}

/// Status of a work completion.
///
/// Mirrors the verbs completion statuses an iWARP consumer sees (RFC 5040 §7.1,
/// error surfacing; Linux `ib_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// The queue pair left the ready-to-send state before the request ran; it was
    /// flushed without being executed (or without its result being known).
    FlushError,
    /// A receive buffer was too small for the incoming message.
    LocalLengthError,
    /// A local buffer named by the request failed the access checks.
    LocalProtectionError,
    /// An RDMA Read was refused by the peer's access checks (bad STag, bounds,
    /// rights, PD, invalidated): the peer's Terminate named it.
    RemoteAccessError,
    /// An RDMA Read ended by a Terminate for another reason than its access.
    RemoteOperationError,
}

impl WcStatus {
    /// Whether this is [`WcStatus::Success`].
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

/// Why a registration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// Every STag index of the table is in use.
    #[error("memory-region table is full")]
    TableFull,
    /// The slot belongs to another table or protection domain.
    #[error("STag slot does not belong to this protection domain")]
    ForeignSlot,
    /// The region's last byte would lie beyond 2^64 - 1 in tagged-offset space.
    #[error("base tagged offset plus length overflows")]
    ToOverflow,
    /// The device (an RDMA NIC's driver) refused to register the memory;
    /// the value is the OS error number it gave.
    #[error("the RDMA device refused the registration (errno {0})")]
    Device(i32),
}

/// Why a work request could not be posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// The queue pair is not in a state that accepts this request.
    #[error("queue pair is in state {0:?}")]
    InvalidState(crate::QpState),
    /// The send or receive queue already holds its maximum of outstanding requests.
    #[error("work queue is full")]
    QueueFull,
    /// The message is larger than the connection's maximum message size.
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    TooLong {
        /// Length of the request.
        len: u64,
        /// The negotiated maximum.
        max: u64,
    },
    /// The request names more gather elements than the device accepts.
    #[error("too many gather elements: {0}")]
    TooManySges(usize),
    /// The file range of a [`ChainWr::WriteFile`](crate::ChainWr::WriteFile)
    /// could not be read by a device that sends it from memory.
    #[error("reading the file range to send failed: {0:?}")]
    FileRead(std::io::ErrorKind),
}

/// The completion queue overflowed: completions were lost and the queue is unusable.
///
/// Verbs treat a CQ overrun as a fatal error of the queue; it is never silent here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("completion queue overflowed")]
pub struct CqOverflow;

/// Errors of connection management (listen, connect, accept, reject).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// The peer rejected the connection, with its private data.
    #[error("connection rejected by peer ({} bytes of private data)", private_data.len())]
    Rejected {
        /// The private data the peer sent with its reject.
        private_data: Vec<u8>,
    },
    /// Nobody listens at the address.
    #[error("connection refused: nobody listens at the address")]
    Refused,
    /// The address is already in use by another listener.
    #[error("address already in use")]
    AddrInUse,
    /// Private data longer than the transport carries
    /// ([`MAX_PRIVATE_DATA`](crate::MAX_PRIVATE_DATA), RFC 5044 §7.1).
    #[error("private data of {0} bytes exceeds the limit of 508")]
    PrivateDataTooLong(usize),
    /// The listener was closed.
    #[error("listener closed")]
    ListenerClosed,
    /// The connection failed during set-up (lower layer error or protocol error).
    #[error("connection set-up failed: {0}")]
    Setup(String),
}
