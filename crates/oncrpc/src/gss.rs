//! RPCSEC_GSS version 1 (RFC 2203) without IO: the wire types, the
//! server's sequence window, the mechanism behind a trait ([`mech`]), the
//! server's context table and call verification ([`server`], used by
//! [`crate::Server::with_gss`]) and the client's context and call
//! protection ([`client`]). The Kerberos V5 mechanism through the system's
//! GSS-API lives in the `gss` crate; [`fake`] is a stand-in for tests.

pub mod client;
pub mod fake;
pub mod mech;
pub mod server;

pub use client::GssClient;
pub use mech::{Acceptor, GssError, Initiator, SecContext, Step};
pub use server::{GssConfig, GssIdentity, GssOutcome, GssServer, ReplyProtect};

use bytes::Bytes;
use xdr::{Decoder, Encode, Encoder, ResultExt};

use crate::msg::MAX_AUTH_BYTES;

/// `RPCSEC_GSS_VERS_1` (RFC 2203 §5).
pub const RPCSEC_GSS_VERS_1: u32 = 1;

/// `MAXSEQ` (RFC 2203 §5): sequence numbers at or above it end the
/// context (RFC 2203 §5.3.3.1).
pub const MAXSEQ: u32 = 0x8000_0000;

/// Largest GSS token accepted in `rpc_gss_init_arg` / `rpc_gss_init_res`
/// (a Kerberos AP-REQ with a PAC is a few KiB; Linux's gssproxy path
/// takes up to 64 KiB).
pub const MAX_GSS_TOKEN: usize = 64 * 1024;

xdr::open_code! {
    /// `rpc_gss_proc_t` (RFC 2203 §5).
    pub struct GssProc {
        /// A call under an established context.
        RPCSEC_GSS_DATA = 0,
        /// Context creation, first token.
        RPCSEC_GSS_INIT = 1,
        /// Context creation, a further token.
        RPCSEC_GSS_CONTINUE_INIT = 2,
        /// Context destruction.
        RPCSEC_GSS_DESTROY = 3,
    }
}

xdr::open_code! {
    /// `rpc_gss_service_t` (RFC 2203 §5): how the call's arguments and
    /// results are protected.
    pub struct GssService {
        /// Authentication only (krb5).
        NONE = 1,
        /// Integrity: arguments and results checksummed (krb5i).
        INTEGRITY = 2,
        /// Privacy: arguments and results encrypted (krb5p).
        PRIVACY = 3,
    }
}

/// `rpc_gss_cred_t` version 1 (RFC 2203 §5): the body of an RPCSEC_GSS
/// credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssCred {
    /// What the call does to the context.
    pub proc_: GssProc,
    /// The call's sequence number (ignored by INIT and CONTINUE_INIT).
    pub seq_num: u32,
    /// The protection of arguments and results.
    pub service: GssService,
    /// The server's context handle (empty on INIT).
    pub handle: Bytes,
}

/// Why a credential body is not an RPCSEC_GSS version 1 credential.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GssCredError {
    /// The body does not decode (AUTH_BADCRED).
    #[error("malformed RPCSEC_GSS credential: {0}")]
    Malformed(xdr::Error),
    /// Another version (RFC 2203 §5.3.3.3: AUTH_BADCRED).
    #[error("RPCSEC_GSS version {0}, only 1 is known")]
    Version(u32),
}

impl GssCred {
    /// Decodes a credential body, which must be consumed exactly; the
    /// handle is bounded by the credential's 400 bytes (RFC 5531 §8.2).
    pub fn decode_body(body: &Bytes) -> Result<Self, GssCredError> {
        let mut dec = Decoder::from_bytes(body);
        let m = GssCredError::Malformed;
        let version = dec.u32().context("gss version").map_err(m)?;
        if version != RPCSEC_GSS_VERS_1 {
            return Err(GssCredError::Version(version));
        }
        let proc_ = GssProc(dec.u32().context("gss_proc").map_err(m)?);
        let seq_num = dec.u32().context("seq_num").map_err(m)?;
        let service = GssService(dec.u32().context("service").map_err(m)?);
        let handle = dec
            .opaque_bytes(MAX_AUTH_BYTES)
            .context("handle")
            .map_err(m)?;
        dec.finish().context("rpc_gss_cred_t").map_err(m)?;
        Ok(Self {
            proc_,
            seq_num,
            service,
            handle,
        })
    }
}

/// RFC 2203 §5: the version, then `rpc_gss_cred_vers_1_t`.
impl Encode for GssCred {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(RPCSEC_GSS_VERS_1);
        enc.put_u32(self.proc_.0);
        enc.put_u32(self.seq_num);
        enc.put_u32(self.service.0);
        enc.put_opaque(&self.handle);
    }
}

/// `rpc_gss_init_arg` (RFC 2203 §5.2.2): the arguments of INIT and
/// CONTINUE_INIT, a GSS token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssInitArg {
    /// The token from `GSS_Init_sec_context`.
    pub gss_token: Bytes,
}

impl GssInitArg {
    /// Decodes the arguments, the token bounded by [`MAX_GSS_TOKEN`].
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, xdr::Error> {
        let gss_token = dec.opaque_bytes(MAX_GSS_TOKEN).context("gss_token")?;
        Ok(Self { gss_token })
    }
}

impl Encode for GssInitArg {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.gss_token);
    }
}

/// `rpc_gss_init_res` (RFC 2203 §5.2.3.1): the server's answer to INIT
/// and CONTINUE_INIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GssInitRes {
    /// The context handle the client puts in later credentials.
    pub handle: Bytes,
    /// GSS major status (`GSS_S_COMPLETE` 0, `GSS_S_CONTINUE_NEEDED` 1).
    pub gss_major: u32,
    /// GSS minor status.
    pub gss_minor: u32,
    /// The sequence window the server keeps (RFC 2203 §5.3.3.1).
    pub seq_window: u32,
    /// The token for `GSS_Init_sec_context`, if any.
    pub gss_token: Bytes,
}

impl GssInitRes {
    /// Decodes the results; the handle is bounded as a credential's body
    /// is (it must fit one), the token by [`MAX_GSS_TOKEN`].
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, xdr::Error> {
        Ok(Self {
            handle: dec.opaque_bytes(MAX_AUTH_BYTES).context("handle")?,
            gss_major: dec.u32().context("gss_major")?,
            gss_minor: dec.u32().context("gss_minor")?,
            seq_window: dec.u32().context("seq_window")?,
            gss_token: dec.opaque_bytes(MAX_GSS_TOKEN).context("gss_token")?,
        })
    }
}

impl Encode for GssInitRes {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_opaque(&self.handle);
        enc.put_u32(self.gss_major);
        enc.put_u32(self.gss_minor);
        enc.put_u32(self.seq_window);
        enc.put_opaque(&self.gss_token);
    }
}

/// What the sequence window says about a DATA call's `seq_num`
/// (RFC 2203 §5.3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    /// New: process the call.
    Accept,
    /// Already seen within the window: a replay, silently dropped.
    Replay,
    /// Below the window: silently dropped.
    BelowWindow,
    /// At or above [`MAXSEQ`]: the context is done (the server answers
    /// RPCSEC_GSS_CTXPROBLEM).
    Exhausted,
}

/// Largest window a server keeps (bits of state per context).
pub const MAX_SEQ_WINDOW: u32 = 4096;

/// The server's replay protection for one context (RFC 2203 §5.3.3.1):
/// the highest sequence number seen and which of the `size` numbers up to
/// it were seen. A number above the highest moves the window; one inside
/// it is accepted once; one below it is dropped. Sans-IO: the caller
/// checks after verifying the call's checksum, so a forged number cannot
/// move the window.
#[derive(Debug, Clone)]
pub struct SeqWindow {
    size: u32,
    highest: Option<u32>,
    /// Bit `n % size` set: sequence number `n` (within the window) seen.
    seen: Vec<u64>,
}

impl SeqWindow {
    /// A window of `size` numbers (1..=[`MAX_SEQ_WINDOW`]; clamped).
    pub fn new(size: u32) -> Self {
        let size = size.clamp(1, MAX_SEQ_WINDOW);
        Self {
            size,
            highest: None,
            seen: vec![0; size.div_ceil(64) as usize],
        }
    }

    /// The window's size, as told to the client in `seq_window`.
    pub fn size(&self) -> u32 {
        self.size
    }

    fn bit(&self, seq: u32) -> (usize, u64) {
        let i = seq % self.size;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn set(&mut self, seq: u32, on: bool) {
        let (w, b) = self.bit(seq);
        if let Some(word) = self.seen.get_mut(w) {
            if on {
                *word |= b;
            } else {
                *word &= !b;
            }
        }
    }

    fn is_set(&self, seq: u32) -> bool {
        let (w, b) = self.bit(seq);
        self.seen.get(w).is_some_and(|word| word & b != 0)
    }

    /// Checks `seq` and records it when accepted.
    pub fn check(&mut self, seq: u32) -> SeqCheck {
        if seq >= MAXSEQ {
            return SeqCheck::Exhausted;
        }
        let Some(high) = self.highest else {
            self.highest = Some(seq);
            self.set(seq, true);
            return SeqCheck::Accept;
        };
        if seq > high {
            // Forget the numbers that leave the window: their slots are
            // those of the numbers now entering it.
            let advance = seq - high;
            if advance >= self.size {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                for n in high + 1..seq {
                    self.set(n, false);
                }
            }
            self.highest = Some(seq);
            self.set(seq, true);
            return SeqCheck::Accept;
        }
        if high - seq >= self.size {
            return SeqCheck::BelowWindow;
        }
        if self.is_set(seq) {
            return SeqCheck::Replay;
        }
        self.set(seq, true);
        SeqCheck::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_round_trips_and_matches_the_rfc_layout() {
        let c = GssCred {
            proc_: GssProc::RPCSEC_GSS_DATA,
            seq_num: 7,
            service: GssService::INTEGRITY,
            handle: Bytes::from_static(b"\x01\x02\x03"),
        };
        let wire = xdr::to_bytes(&c);
        assert_eq!(
            &wire[..],
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 0]
        );
        assert_eq!(c.encoded_len(), wire.len());
        assert_eq!(GssCred::decode_body(&wire), Ok(c));
    }

    #[test]
    fn bad_credentials_are_typed_errors() {
        let mut v2 = xdr::to_bytes(&GssCred {
            proc_: GssProc::RPCSEC_GSS_INIT,
            seq_num: 0,
            service: GssService::NONE,
            handle: Bytes::new(),
        })
        .to_vec();
        v2[3] = 2;
        assert_eq!(
            GssCred::decode_body(&Bytes::from(v2.clone())),
            Err(GssCredError::Version(2))
        );
        v2[3] = 1;
        for n in 0..v2.len() {
            let short = Bytes::copy_from_slice(&v2[..n]);
            assert!(matches!(
                GssCred::decode_body(&short),
                Err(GssCredError::Malformed(_))
            ));
        }
        let mut long = v2.clone();
        long.extend_from_slice(&[0, 0, 0, 0]);
        assert!(GssCred::decode_body(&Bytes::from(long)).is_err());
        // A handle longer than a credential may be: refused before it is
        // read.
        let mut huge = v2;
        huge.truncate(16);
        huge.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
        assert!(GssCred::decode_body(&Bytes::from(huge)).is_err());
    }

    #[test]
    fn init_messages_round_trip() {
        let a = GssInitArg {
            gss_token: Bytes::from(vec![0x60; 1001]),
        };
        let wire = xdr::to_bytes(&a);
        assert_eq!(wire.len(), 4 + 1004);
        let mut dec = Decoder::new(&wire);
        assert_eq!(GssInitArg::decode(&mut dec).unwrap(), a);
        dec.finish().unwrap();
        let r = GssInitRes {
            handle: Bytes::from_static(b"ctx-0001"),
            gss_major: 0,
            gss_minor: 0,
            seq_window: 128,
            gss_token: Bytes::from_static(b"ap-rep"),
        };
        let wire = xdr::to_bytes(&r);
        let mut dec = Decoder::new(&wire);
        assert_eq!(GssInitRes::decode(&mut dec).unwrap(), r);
        dec.finish().unwrap();
        // A token length past the bound is refused without allocating.
        let mut bad = vec![0u8, 0, 0, 0];
        bad.extend_from_slice(&((MAX_GSS_TOKEN as u32) + 1).to_be_bytes());
        assert!(GssInitArg::decode(&mut Decoder::new(&bad[4..])).is_err());
    }

    #[test]
    fn window_accepts_each_number_once_and_drops_old_ones() {
        let mut w = SeqWindow::new(4);
        assert_eq!(w.check(10), SeqCheck::Accept);
        assert_eq!(w.check(10), SeqCheck::Replay);
        // Out of order within the window.
        assert_eq!(w.check(8), SeqCheck::Accept);
        assert_eq!(w.check(7), SeqCheck::Accept);
        assert_eq!(w.check(8), SeqCheck::Replay);
        assert_eq!(w.check(6), SeqCheck::BelowWindow);
        // Moving the window forgets what left it, not what stayed.
        assert_eq!(w.check(12), SeqCheck::Accept);
        assert_eq!(w.check(9), SeqCheck::Accept);
        assert_eq!(w.check(10), SeqCheck::Replay);
        assert_eq!(w.check(8), SeqCheck::BelowWindow);
        assert_eq!(w.check(11), SeqCheck::Accept);
        // A jump past the whole window clears it.
        assert_eq!(w.check(100), SeqCheck::Accept);
        assert_eq!(w.check(97), SeqCheck::Accept);
        assert_eq!(w.check(96), SeqCheck::BelowWindow);
        assert_eq!(w.check(MAXSEQ), SeqCheck::Exhausted);
        assert_eq!(w.check(u32::MAX), SeqCheck::Exhausted);
    }

    /// Against a model (a set of every number seen and the highest): the
    /// window agrees for every number within it, over random sequences.
    #[test]
    fn window_matches_a_model() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for size in [1u32, 3, 64, 65, 128, 1000] {
            let mut w = SeqWindow::new(size);
            let mut seen = std::collections::HashSet::new();
            let mut high: Option<u32> = None;
            let mut base = 1000u32;
            for _ in 0..5000 {
                let jitter = (next() % u64::from(2 * size + 4)) as u32;
                let seq = base + jitter - size.min(base);
                if next() % 7 == 0 {
                    base += (next() % u64::from(size + 2)) as u32;
                }
                let want = match high {
                    Some(h) if seq <= h && h - seq >= size => SeqCheck::BelowWindow,
                    _ if seen.contains(&seq) => SeqCheck::Replay,
                    _ => SeqCheck::Accept,
                };
                assert_eq!(w.check(seq), want, "size {size}, seq {seq}, high {high:?}");
                if want == SeqCheck::Accept {
                    seen.insert(seq);
                    high = Some(high.map_or(seq, |h| h.max(seq)));
                }
            }
        }
    }
}
