//! Sans-IO iWARP: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP
//! (RFC 5040) wire formats and state machines.
//!
//! No sockets, no clocks: bytes and events go in, bytes and actions come out.
//! - [`wire`]: zero-copy views of MPA frames, FPDUs, DDP/RDMAP headers and
//!   Terminate bodies.
//! - [`negotiation`]: the MPA Request/Reply exchange for both roles (CRC,
//!   markers refused, RFC 6581 IRD/ORD and RTR).
//! - [`deframe`]: a streaming FPDU deframer that lets the shell place payload
//!   straight into memory while the CRC is kept.
//! - [`segment`]: DDP segmentation within the MULPDU and gather-form FPDUs.
//! - [`conn`]: the RDMAP engine of one stream: Send variants, RDMA Write,
//!   RDMA Read within IRD/ORD, invalidation, Terminate.
//!
//! The IO shell's loop: feed socket bytes to [`conn::Connection::handle_bytes`];
//! when it stops at a [`conn::Placement`], copy (or read) that many bytes into
//! the target and call [`conn::Connection::placed`]; send every
//! [`segment::Transmit`] from [`conn::Connection::poll_transmit`] (head,
//! gathered payload, trailer); act on [`conn::Connection::poll_event`].
#![forbid(unsafe_code)]

pub mod conn;
pub mod deframe;
pub mod negotiation;
pub mod segment;
pub mod wire;

#[cfg(test)]
pub(crate) mod testutil {
    /// Decodes a hex string with optional spaces (test literals only).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        assert!(digits.len() % 2 == 0, "odd hex literal");
        digits
            .chunks(2)
            .map(|p| {
                u8::from_str_radix(core::str::from_utf8(p).expect("ascii"), 16).expect("hex digit")
            })
            .collect()
    }
}
