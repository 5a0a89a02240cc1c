//! Public types of the engine: settings, work-request kinds, completions,
//! events, placements, errors, and the access-error to Terminate mapping.

use rnic::{Access, AccessError, Stag, WcOpcode, WcStatus, WrId};

use crate::deframe::DeframeError;
use crate::negotiation::{Established, Rtr};
use crate::segment::SegmentError;
use crate::wire::ddp::DdpError;
use crate::wire::terminate::{Layer, TermError};

/// Default largest ULPDU this side sends (Linux siw sends up to ~32 KiB).
pub const DEFAULT_MULPDU: usize = 16384;

/// Remote access validation, implemented by the IO shell over the device's
/// access-check table (RFC 5041 §7.1, RFC 5040 §7: STag, protection domain, rights,
/// bounds).
pub trait RemoteAccess {
    /// Checks an access of `len` bytes at (`stag`, `to`) needing `need`.
    fn check(&self, stag: Stag, to: u64, len: u64, need: Access) -> Result<(), AccessError>;
    /// Invalidates `stag` for a Send with Invalidate (RFC 5040 §5.3).
    fn invalidate(&mut self, stag: Stag) -> Result<(), AccessError>;
}

/// Engine settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// CRC32c on FPDUs.
    pub crc: bool,
    /// Inbound RDMA Read Requests accepted at once.
    pub ird: u16,
    /// Outbound RDMA Read Requests outstanding at once.
    pub ord: u16,
    /// RTR duty from the MPA exchange.
    pub rtr: Rtr,
    /// Largest ULPDU we send.
    pub mulpdu: usize,
    /// Largest ULPDU we accept.
    pub max_rx_ulpdu: usize,
}

impl Config {
    /// Settings from a finished MPA exchange with default ULPDU limits.
    pub fn from_established(e: &Established) -> Self {
        Config {
            crc: e.crc,
            ird: e.ird,
            ord: e.ord,
            rtr: e.rtr,
            mulpdu: DEFAULT_MULPDU,
            max_rx_ulpdu: usize::from(u16::MAX),
        }
    }
}

/// The four Send variants, RFC 5040 §5.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendKind {
    /// Send.
    Send,
    /// Send with Invalidate of the peer's STag.
    Invalidate(Stag),
    /// Send with Solicited Event.
    Solicited,
    /// Send with Solicited Event and Invalidate.
    SolicitedInvalidate(Stag),
}

/// A finished (or flushed) work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request.
    pub wr_id: WrId,
    /// What it was.
    pub opcode: WcOpcode,
    /// How it ended.
    pub status: WcStatus,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// STag the peer invalidated with this Send (receives).
    pub invalidated: Option<Stag>,
    /// The Send asked for a solicited event (receives).
    pub solicited: bool,
}

/// What the engine reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The connection carries upper-layer traffic (after the RTR, if any).
    Ready,
    /// A work request completed.
    Completion(Completion),
    /// We queued a Terminate (it is the last FPDU); the stream is closed.
    TerminateSent(TermError),
    /// The peer sent a Terminate; the stream is closed.
    TerminateReceived(TermError),
}

/// Where pending payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceTarget {
    /// Into a registered region at (STag, TO), already validated.
    Tagged {
        /// Target STag.
        stag: Stag,
        /// Tagged Offset of the next byte.
        to: u64,
    },
    /// Into the posted receive buffer `wr_id` at `offset`.
    Recv {
        /// The receive work request.
        wr_id: WrId,
        /// Offset of the next byte in its buffer.
        offset: usize,
    },
}

/// "The next `len` stream bytes are payload for `target`."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Where they go.
    pub target: PlaceTarget,
    /// How many bytes.
    pub len: usize,
}

/// Errors returned to the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// The peer broke the protocol; a Terminate is queued for transmit.
    #[error("terminated: {0}")]
    Terminated(TermError),
    /// The stream is closed (Terminate sent or received).
    #[error("connection closed")]
    Closed,
    /// `placed` was called with more bytes than the placement allows.
    #[error("placed {got} bytes, placement allows {allowed}")]
    Overplaced {
        /// Bytes reported.
        got: usize,
        /// Bytes allowed.
        allowed: usize,
    },
}

/// Errors posting a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The stream is closed.
    #[error("connection closed")]
    Closed,
    /// The message cannot be segmented.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// A length over 32 bits (RDMA Read size, receive length).
    #[error("length {0} too large")]
    TooLong(u64),
}

/// Maps a tagged access failure to the DDP tagged-buffer error (RFC 5041
/// §7.2, layer DDP, error type 1); the code is
/// [`AccessError::ddp_tagged_code`], so the codes live in `rnic` only. DDP has
/// no rights code: a rights violation reports an invalid STag, as Linux siw
/// does.
pub(crate) fn ddp_tagged_error(e: AccessError) -> TermError {
    TermError {
        layer: Layer::DDP,
        etype: 1,
        code: e.ddp_tagged_code(),
    }
}

/// Maps an access failure to the RDMAP remote protection error (RFC 5040
/// §7.2, layer RDMAP, error type 1), code [`AccessError::rdmap_protection_code`].
pub(crate) fn rdmap_protection_error(e: AccessError) -> TermError {
    TermError {
        layer: Layer::RDMAP,
        etype: 1,
        code: e.rdmap_protection_code(),
    }
}

/// Maps a deframing error to the Terminate that reports it.
pub(crate) fn deframe_error(e: DeframeError, tagged: bool) -> TermError {
    match e {
        DeframeError::BadCrc { .. } => TermError::LLP_CRC,
        DeframeError::TooLong { .. } | DeframeError::PlacedTooMuch { .. } => {
            TermError::LLP_CATASTROPHIC
        }
        DeframeError::ShortUlpdu(_) => TermError::DDP_CATASTROPHIC,
        DeframeError::Ddp(DdpError::DdpVersion(_)) if tagged => TermError::DDP_TAGGED_VERSION,
        DeframeError::Ddp(DdpError::DdpVersion(_)) => TermError::DDP_UNTAGGED_VERSION,
        DeframeError::Ddp(DdpError::RdmapVersion(_)) => TermError::RDMAP_VERSION,
        DeframeError::Ddp(_) => TermError::RDMAP_UNEXPECTED_OPCODE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_access_error() -> [AccessError; 7] {
        let s = Stag(0x1234);
        [
            AccessError::UnknownStag(s),
            AccessError::KeyMismatch(s),
            AccessError::Invalidated(s),
            AccessError::PdMismatch(s),
            AccessError::AccessRights(s),
            AccessError::ToWrap(s),
            AccessError::BoundsViolation {
                stag: s,
                to: 8,
                len: 9,
            },
        ]
    }

    #[test]
    fn tagged_access_errors_map_to_the_ddp_tagged_terminates() {
        let want = [
            TermError::DDP_INVALID_STAG,
            TermError::DDP_INVALID_STAG,
            TermError::DDP_INVALID_STAG,
            TermError::DDP_STAG_NOT_ASSOCIATED,
            TermError::DDP_INVALID_STAG,
            TermError::DDP_TO_WRAP,
            TermError::DDP_BASE_BOUNDS,
        ];
        for (e, w) in every_access_error().into_iter().zip(want) {
            assert_eq!(ddp_tagged_error(e), w, "{e:?}");
        }
    }

    #[test]
    fn read_source_errors_map_to_the_rdmap_protection_terminates() {
        let want = [
            TermError::RDMAP_INVALID_STAG,
            TermError::RDMAP_INVALID_STAG,
            TermError::RDMAP_INVALID_STAG,
            TermError::RDMAP_STAG_NOT_ASSOCIATED,
            TermError::RDMAP_ACCESS_RIGHTS,
            TermError::RDMAP_TO_WRAP,
            TermError::RDMAP_BASE_BOUNDS,
        ];
        for (e, w) in every_access_error().into_iter().zip(want) {
            assert_eq!(rdmap_protection_error(e), w, "{e:?}");
        }
    }
}
