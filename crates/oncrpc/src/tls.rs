//! RPC-over-TLS (RFC 9289), the sans-IO part: the AUTH_TLS probe and its
//! answer, the recognition of a probe at the start of a connection, and
//! the security a connection ended up with.
//!
//! The exchange (RFC 9289 §4.1): on a new TCP connection the client sends
//! a NULL call whose credential is AUTH_TLS with an empty body and whose
//! verifier is AUTH_NONE. A server that will do TLS on this connection
//! answers MSG_ACCEPTED with an AUTH_NONE verifier holding the eight bytes
//! `STARTTLS`; the client then sends its TLS ClientHello on the same
//! connection, and once the handshake is done the record-marked RPC stream
//! (RFC 5531 §11) runs inside TLS. Any other answer (AUTH_ERROR from a
//! server that does not know AUTH_TLS, or an accepted reply without the
//! token) means no TLS: a client that requires it gives up.
//!
//! The TCP shell (`tcp::tls`, feature `tokio`) drives these functions.

use bytes::Bytes;
use xdr::{Decoder, XdrBuf};

use crate::msg::{Accepted, AuthFlavor, CallHeader, OpaqueAuth, ReplyBody, ReplyHeader};
use crate::record::LAST_FRAGMENT;

/// The verifier body of a server's answer to a probe when it will start
/// TLS (RFC 9289 §4.1).
pub const STARTTLS: &[u8; 8] = b"STARTTLS";

/// The ALPN protocol identifier of RPC-over-TLS (RFC 9289 §5.2, §8.2).
pub const ALPN_SUNRPC: &[u8] = b"sunrpc";

/// Length of a probe call message: the 40-byte NULL call header with an
/// empty AUTH_TLS credential and an empty AUTH_NONE verifier.
pub const PROBE_LEN: usize = 40;

/// A probe as one record on the wire: its record mark and the message.
pub const PROBE_RECORD_LEN: usize = 4 + PROBE_LEN;

/// The transport-layer security of the connection a call came on, as an
/// export's `xprtsec=` sees it (the Linux server's XPT_TLS_SESSION and
/// XPT_PEER_AUTH flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TransportSecurity {
    /// No TLS (plain TCP, RPC-over-RDMA, in-process).
    #[default]
    None,
    /// TLS; the client presented no certificate (or none was asked for).
    Tls,
    /// TLS with a client certificate the server verified against its
    /// client CA (mutual TLS).
    MutualTls,
}

/// The probe call (RFC 9289 §4.1): NULL of `prog`/`vers` with an AUTH_TLS
/// credential of length zero and an AUTH_NONE verifier of length zero.
pub fn probe_call(xid: u32, prog: u32, vers: u32) -> XdrBuf {
    xdr::to_xdr_buf(&CallHeader {
        xid,
        prog,
        vers,
        proc_: 0,
        cred: OpaqueAuth {
            flavor: AuthFlavor::AUTH_TLS,
            body: Bytes::new(),
        },
        verf: OpaqueAuth::NONE,
    })
}

/// The server's answer to a probe: MSG_ACCEPTED, SUCCESS (NULL returns
/// nothing), and an AUTH_NONE verifier holding `STARTTLS` when `start` (the
/// server will now expect a ClientHello), empty otherwise (the Linux
/// server's answer on a transport that cannot do TLS).
pub fn probe_reply(xid: u32, start: bool) -> XdrBuf {
    let body = if start {
        Bytes::from_static(STARTTLS)
    } else {
        Bytes::new()
    };
    xdr::to_xdr_buf(&ReplyHeader {
        xid,
        body: ReplyBody::Accepted {
            verf: OpaqueAuth {
                flavor: AuthFlavor::AUTH_NONE,
                body,
            },
            stat: Accepted::Success,
        },
    })
}

/// What the first bytes of a connection say about a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek {
    /// Consistent with a probe so far: read more.
    NeedMore,
    /// A whole probe record ([`PROBE_RECORD_LEN`] bytes) with this xid.
    Probe {
        /// The probe's transaction id.
        xid: u32,
    },
    /// Not a probe: serve the connection as plain RPC.
    NotProbe,
}

/// The words of a probe record that must hold these values (index, value):
/// the record mark (one last fragment of 40 bytes), CALL, RPC version 2,
/// procedure 0, credential AUTH_TLS of length 0, verifier AUTH_NONE of
/// length 0. The xid, program and version (words 1, 4, 5) may be anything.
const PROBE_WORDS: [(usize, u32); 8] = [
    (0, LAST_FRAGMENT | PROBE_LEN as u32),
    (2, 0),
    (3, crate::msg::RPC_VERSION),
    (6, 0),
    (7, AuthFlavor::AUTH_TLS.0),
    (8, 0),
    (9, AuthFlavor::AUTH_NONE.0),
    (10, 0),
];

/// Whether the first bytes received on a connection (`head`, as many as
/// have arrived) are a probe record (RFC 9289 §4.1). Decides as soon as a
/// byte differs from what a probe holds, so a plain client is never kept
/// waiting for bytes it will not send. A probe split into several record
/// fragments is not recognised (the server core then answers it as an
/// unknown flavor, AUTH_BADCRED).
pub fn peek_probe(head: &[u8]) -> Peek {
    for &(word, value) in &PROBE_WORDS {
        let want = value.to_be_bytes();
        let at = word * 4;
        let have = head.get(at..).unwrap_or(&[]);
        let n = have.len().min(4);
        if have.get(..n) != want.get(..n) {
            return Peek::NotProbe;
        }
    }
    match head.get(4..8) {
        Some(x) if head.len() >= PROBE_RECORD_LEN => Peek::Probe {
            xid: u32::from_be_bytes([x[0], x[1], x[2], x[3]]),
        },
        _ => Peek::NeedMore,
    }
}

/// Why a probe's answer means no TLS.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The answer did not decode as a reply.
    #[error("the answer to the AUTH_TLS probe is not an RPC reply: {0}")]
    Garbage(xdr::Error),
    /// A reply to another call.
    #[error("the answer to the AUTH_TLS probe has xid {got:#x}, not {want:#x}")]
    WrongXid {
        /// The probe's xid.
        want: u32,
        /// The reply's.
        got: u32,
    },
    /// MSG_DENIED: a server that does not know AUTH_TLS (RFC 9289 §4.1:
    /// the client must not start TLS).
    #[error("the server refused the AUTH_TLS probe ({0:?}): it does not offer RPC-over-TLS")]
    Denied(crate::msg::Rejected),
    /// Accepted without the `STARTTLS` token: the server knows AUTH_TLS
    /// but offers no TLS on this connection.
    #[error("the server answered the AUTH_TLS probe without STARTTLS: no RPC-over-TLS here")]
    NotOffered,
}

/// Reads the server's answer to probe `xid`: `Ok` when it is MSG_ACCEPTED
/// with an AUTH_NONE verifier holding `STARTTLS`, whatever its
/// accept_stat (RFC 9289 §4.1: the client proceeds with TLS "even if the
/// Reply's accept_stat is not SUCCESS").
pub fn check_probe_reply(record: &[u8], xid: u32) -> Result<(), ProbeError> {
    let mut dec = Decoder::new(record);
    let reply = ReplyHeader::decode(&mut dec).map_err(ProbeError::Garbage)?;
    if reply.xid != xid {
        return Err(ProbeError::WrongXid {
            want: xid,
            got: reply.xid,
        });
    }
    match reply.body {
        ReplyBody::Denied(r) => Err(ProbeError::Denied(r)),
        ReplyBody::Accepted { verf, .. }
            if verf.flavor == AuthFlavor::AUTH_NONE && verf.body[..] == STARTTLS[..] =>
        {
            Ok(())
        }
        ReplyBody::Accepted { .. } => Err(ProbeError::NotOffered),
    }
}

/// Encodes `msg` as one record (record mark and message), as the probe
/// and its answer travel before TLS starts.
pub fn one_record(msg: &XdrBuf) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + msg.len());
    out.extend_from_slice(&crate::record::fragment_header(msg.len(), true));
    out.extend_from_slice(&msg.to_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{AuthStat, Rejected};

    #[test]
    fn probe_is_a_forty_byte_null_call() {
        let rec = one_record(&probe_call(0x0102_0304, 100_003, 3));
        assert_eq!(rec.len(), PROBE_RECORD_LEN);
        let mut dec = Decoder::new(&rec[4..]);
        let h = CallHeader::decode(&mut dec).unwrap();
        dec.finish().unwrap();
        assert_eq!(
            (h.xid, h.prog, h.vers, h.proc_),
            (0x0102_0304, 100_003, 3, 0)
        );
        assert_eq!(h.cred.flavor, AuthFlavor::AUTH_TLS);
        assert!(h.cred.body.is_empty());
        assert_eq!(h.verf, OpaqueAuth::NONE);
        assert_eq!(
            &rec[28..44],
            &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn peek_recognises_a_probe_byte_by_byte() {
        let rec = one_record(&probe_call(0xdead_beef, 100_005, 3));
        for n in 0..rec.len() {
            assert_eq!(peek_probe(&rec[..n]), Peek::NeedMore, "{n} bytes");
        }
        assert_eq!(peek_probe(&rec), Peek::Probe { xid: 0xdead_beef });
        // Bytes after the probe (a client that did not wait) do not matter
        // to the decision.
        let mut more = rec.clone();
        more.extend_from_slice(&[0x16, 3, 1]);
        assert_eq!(peek_probe(&more), Peek::Probe { xid: 0xdead_beef });
    }

    #[test]
    fn peek_rejects_plain_calls_early() {
        // A NULL call with AUTH_NONE: it differs at the credential flavor.
        let plain = xdr::to_xdr_buf(&CallHeader {
            xid: 1,
            prog: 100_003,
            vers: 3,
            proc_: 0,
            cred: OpaqueAuth::NONE,
            verf: OpaqueAuth::NONE,
        });
        let rec = one_record(&plain);
        assert_eq!(peek_probe(&rec), Peek::NotProbe);
        assert_eq!(peek_probe(&rec[..28]), Peek::NeedMore);
        assert_eq!(peek_probe(&rec[..31]), Peek::NeedMore);
        assert_eq!(peek_probe(&rec[..32]), Peek::NotProbe);
        // A larger first record is decided by its record mark alone.
        assert_eq!(peek_probe(&[0x80, 0, 1, 0]), Peek::NotProbe);
        assert_eq!(peek_probe(&[0x80, 0, 0]), Peek::NeedMore);
        // A TLS ClientHello sent without a probe.
        assert_eq!(peek_probe(&[0x16, 3, 1, 0, 0xc8]), Peek::NotProbe);
        // AUTH_TLS on another procedure, or with a credential body.
        let mut other_proc = one_record(&probe_call(1, 100_003, 3));
        other_proc[27] = 1;
        assert_eq!(peek_probe(&other_proc), Peek::NotProbe);
        let mut cred_body = one_record(&probe_call(1, 100_003, 3));
        cred_body[35] = 4;
        assert_eq!(peek_probe(&cred_body), Peek::NotProbe);
    }

    #[test]
    fn starttls_answer_round_trips() {
        let r = probe_reply(9, true).to_bytes();
        assert_eq!(
            &r[..],
            &[
                0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0, // xid, REPLY, MSG_ACCEPTED
                0, 0, 0, 0, 0, 0, 0, 8, b'S', b'T', b'A', b'R', b'T', b'T', b'L', b'S', 0, 0, 0,
                0, // SUCCESS
            ]
        );
        assert_eq!(check_probe_reply(&r, 9), Ok(()));
        assert_eq!(
            check_probe_reply(&r, 10),
            Err(ProbeError::WrongXid { want: 10, got: 9 })
        );
    }

    #[test]
    fn other_answers_mean_no_tls() {
        let plain = probe_reply(3, false).to_bytes();
        assert_eq!(check_probe_reply(&plain, 3), Err(ProbeError::NotOffered));
        let denied = xdr::to_bytes(&ReplyHeader::denied(
            3,
            Rejected::AuthError(AuthStat::AUTH_BADCRED),
        ));
        assert_eq!(
            check_probe_reply(&denied, 3),
            Err(ProbeError::Denied(Rejected::AuthError(
                AuthStat::AUTH_BADCRED
            )))
        );
        // STARTTLS in a verifier of another flavor does not count.
        let odd = xdr::to_bytes(&ReplyHeader {
            xid: 3,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth {
                    flavor: AuthFlavor::AUTH_SYS,
                    body: Bytes::from_static(STARTTLS),
                },
                stat: Accepted::Success,
            },
        });
        assert_eq!(check_probe_reply(&odd, 3), Err(ProbeError::NotOffered));
        assert!(matches!(
            check_probe_reply(&[0, 0], 3),
            Err(ProbeError::Garbage(_))
        ));
    }

    /// Mutated probes and answers: the peek calls a probe only what
    /// decodes as the AUTH_TLS NULL call (every shorter prefix undecided),
    /// and the client starts TLS only on an accepted STARTTLS reply.
    #[test]
    fn mutations_never_fool_peek_or_check() {
        let probe = one_record(&probe_call(0x0a0b_0c0d, 100_003, 4));
        let answer = one_record(&probe_reply(0x0a0b_0c0d, true));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            for (base, is_probe) in [(&probe, true), (&answer, false)] {
                let mut m = base.clone();
                for _ in 0..(next() % 3) {
                    let i = (next() as usize) % m.len();
                    m[i] ^= 1 << (next() % 8);
                }
                m.truncate((next() as usize) % (m.len() + 8));
                if is_probe {
                    if let Peek::Probe { xid } = peek_probe(&m) {
                        let mut dec = Decoder::new(&m[4..PROBE_RECORD_LEN]);
                        let h = CallHeader::decode(&mut dec).unwrap();
                        dec.finish().unwrap();
                        assert_eq!((h.xid, h.proc_), (xid, 0));
                        assert_eq!(h.cred.flavor, AuthFlavor::AUTH_TLS);
                        assert!(
                            (0..PROBE_RECORD_LEN).all(|n| peek_probe(&m[..n]) == Peek::NeedMore)
                        );
                    }
                } else if m.len() >= 4 && check_probe_reply(&m[4..], 0x0a0b_0c0d).is_ok() {
                    let r = ReplyHeader::decode(&mut Decoder::new(&m[4..])).unwrap();
                    let ReplyBody::Accepted { verf, .. } = r.body else {
                        panic!("TLS on a denied reply");
                    };
                    assert_eq!(&verf.body[..], &STARTTLS[..]);
                }
            }
        }
    }
}
