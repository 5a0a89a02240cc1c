//! Sans-IO iWARP: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP
//! (RFC 5040) wire formats and state machines.
//!
//! No sockets, no clocks: bytes and events go in, bytes and actions come out.
//! - [`wire`]: zero-copy views of MPA frames, FPDUs, DDP/RDMAP headers and
//!   Terminate bodies.
#![forbid(unsafe_code)]

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
