//! The sans-IO client core: XID allocation, the table of calls in flight,
//! reply matching and decoding, timeouts and retransmission with the same
//! XID; and the [`ClientTransport`] trait that TCP and RPC-over-RDMA
//! implement.

use core::future::Future;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use xdr::{Decoder, Encode, XdrBuf};

use crate::msg::{
    AcceptStat, Accepted, AuthStat, CallHeader, OpaqueAuth, Rejected, ReplyBody, ReplyHeader,
};

/// Why a call failed, from the reply (RFC 5531 §9) or from the transport.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// PROG_UNAVAIL.
    #[error("program unavailable")]
    ProgUnavail,
    /// PROG_MISMATCH with the server's supported versions.
    #[error("program version mismatch (server supports {low}..={high})")]
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// GARBAGE_ARGS.
    #[error("server could not decode the arguments")]
    GarbageArgs,
    /// SYSTEM_ERR.
    #[error("server system error")]
    SystemErr,
    /// An `accept_stat` this crate does not know.
    #[error("unknown accept_stat {0}")]
    UnknownAcceptStat(AcceptStat),
    /// MSG_DENIED / RPC_MISMATCH.
    #[error("RPC version mismatch (server supports {low}..={high})")]
    RpcMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// MSG_DENIED / AUTH_ERROR.
    #[error("authentication error {0}")]
    Auth(AuthStat),
    /// The reply (or its results) did not decode.
    #[error("malformed reply: {0}")]
    Decode(xdr::Error),
    /// The in-flight bound was reached.
    #[error("too many calls in flight")]
    TooManyInFlight,
    /// No reply within the retransmission policy.
    #[error("call timed out")]
    TimedOut,
    /// The connection closed before the reply arrived.
    #[error("connection closed")]
    ConnectionClosed,
    /// A transport-level failure.
    #[error("transport error: {0}")]
    Transport(&'static str),
    /// The reply's verifier does not verify (RPCSEC_GSS: it is not the
    /// MIC of the call's sequence number, RFC 2203 §5.3.3.2).
    #[error("reply verifier does not verify")]
    BadReplyVerifier,
    /// The GSS-API mechanism failed (RPCSEC_GSS context creation, or a
    /// protected body that does not verify or unwrap).
    #[error("GSS-API failure (major {major:#x}, minor {minor})")]
    Gss {
        /// GSS major status.
        major: u32,
        /// GSS minor status.
        minor: u32,
    },
}

/// Signs a call and checks its reply, for a security flavor whose
/// verifiers depend on the message: RPCSEC_GSS (RFC 2203 §5.3.1,
/// §5.3.3.2). The transport calls [`CallSigner::verifier`] once the
/// call's XID is known.
pub trait CallSigner: Send + Sync {
    /// The call's verifier, over the header from the XID through the
    /// credential.
    fn verifier(&self, header: &[u8]) -> Result<OpaqueAuth, RpcError>;

    /// Checks an accepted reply's verifier.
    fn check_reply(&self, verf: &OpaqueAuth) -> Result<(), RpcError>;

    /// The credential and arguments a retransmission of the call carries
    /// instead of the last ones, or `None` (the default) to send the same
    /// message again. RPCSEC_GSS gives every retransmission a new sequence
    /// number (RFC 2203 §5.3.3.1), since the server drops a number it has
    /// seen; the XID stays, so a duplicate-request cache still knows the
    /// call. [`CallSigner::verifier`] is then asked for the new header.
    fn retransmission(&self) -> Result<Option<(OpaqueAuth, XdrBuf)>, RpcError> {
        Ok(None)
    }
}

impl From<xdr::Error> for RpcError {
    fn from(e: xdr::Error) -> Self {
        Self::Decode(e)
    }
}

/// A DDP-eligible item expected in the reply: where an RPC-over-RDMA
/// requester provisions a Write chunk (RFC 8166 §3.4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpReplyHint {
    /// Offset of the item's data in the procedure results (after the RPC
    /// reply header and the item's length word).
    pub position: usize,
    /// Largest size of the item.
    pub max_len: usize,
}

/// What the caller expects back, so a transport can provision receive
/// resources (RFC 8166 §3.4; reply size estimation in
/// draft-ietf-nfsv4-nfs-ulb-v2 §3.1). TCP
/// ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyHint {
    /// Largest reply (RPC header plus results, DDP data included).
    pub max_reply_len: usize,
    /// A DDP-eligible result item, if any.
    pub ddp: Option<DdpReplyHint>,
}

/// One call for a [`ClientTransport`]: the procedure, credential, the
/// encoded arguments (with their DDP-eligible items marked) and a hint
/// about the reply.
#[derive(Debug, Clone)]
pub struct RpcCall {
    /// Program.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure.
    pub proc_: u32,
    /// Credential (AUTH_NONE or AUTH_SYS).
    pub cred: OpaqueAuth,
    /// Encoded arguments.
    pub args: XdrBuf,
    /// Expected reply.
    pub reply_hint: ReplyHint,
}

/// A client transport: sends a call, returns the procedure results (the
/// reply after the RPC header) or the error the reply or transport gave.
pub trait ClientTransport: Send + Sync {
    /// Performs one call.
    fn call(&self, call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send;

    /// Performs one call whose verifier `signer` computes and whose
    /// reply's verifier it checks (RPCSEC_GSS). A transport that cannot
    /// (the default) fails the call.
    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        let _ = (call, signer);
        async { Err(RpcError::Transport("this transport cannot sign calls")) }
    }

    /// Performs one call whose results are built in the caller's buffer
    /// `dst` (its capacity is reused; its contents are overwritten). An
    /// RPC-over-RDMA transport registers `dst` as the Write chunk of the
    /// call's DDP-eligible result (`call.reply_hint.ddp`), so the server's
    /// RDMA Write places that item (e.g. READ data) straight into it and
    /// the results returned are a slice of `dst`'s memory (RFC 8166
    /// §3.4.6). By default the results are copied into `dst`.
    fn call_into(
        &self,
        call: RpcCall,
        mut dst: BytesMut,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        let fut = self.call(call);
        async move {
            let results = fut.await?;
            dst.clear();
            dst.extend_from_slice(&results);
            Ok(dst.freeze())
        }
    }
}

/// A borrowed transport is a transport: a client view that sends its own
/// credential on a shared connection (each call carries its credential,
/// RFC 5531 §8.2) borrows the transport instead of copying it.
impl<T: ClientTransport + ?Sized> ClientTransport for &T {
    fn call(&self, call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        (**self).call(call)
    }

    fn call_signed(
        &self,
        call: RpcCall,
        signer: Arc<dyn CallSigner>,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        (**self).call_signed(call, signer)
    }

    fn call_into(
        &self,
        call: RpcCall,
        dst: BytesMut,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
        (**self).call_into(call, dst)
    }
}

/// Retransmission policy. Over TCP a timeout is usually left unset (the
/// transport is reliable); over RDMA, and after any reconnect, calls are
/// retransmitted with their original XID so the server's duplicate-request
/// cache recognises them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetransmitPolicy {
    /// Time to wait for a reply before retransmitting; `None` waits forever.
    pub timeout: Option<Duration>,
    /// Retransmissions before the call fails with [`RpcError::TimedOut`].
    pub max_retransmits: u32,
}

/// Client core configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// Largest number of calls in flight.
    pub max_in_flight: usize,
    /// Timeouts and retransmission.
    pub retransmit: RetransmitPolicy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 128,
            retransmit: RetransmitPolicy::default(),
        }
    }
}

struct InFlight<T> {
    token: T,
    /// Program, version and procedure, to build a re-signed
    /// retransmission.
    proc_: (u32, u32, u32),
    message: XdrBuf,
    deadline: Option<Instant>,
    retransmits: u32,
    signer: Option<Arc<dyn CallSigner>>,
}

impl<T: core::fmt::Debug> core::fmt::Debug for InFlight<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InFlight")
            .field("token", &self.token)
            .field("message", &self.message.len())
            .field("deadline", &self.deadline)
            .field("retransmits", &self.retransmits)
            .field("signed", &self.signer.is_some())
            .finish()
    }
}

/// What [`ClientCore::handle_timeout`] asks the shell to do.
#[derive(Debug)]
pub struct TimeoutActions<T> {
    /// Messages to send again, with their original XIDs.
    pub retransmit: Vec<(u32, XdrBuf)>,
    /// Calls that exhausted their retransmissions.
    pub failed: Vec<(T, RpcError)>,
}

/// What to do about one call whose reply is late
/// ([`ClientCore::call_timed_out`]).
#[derive(Debug)]
pub enum CallTimeout<T> {
    /// Send this message again (same XID).
    Retransmit(XdrBuf),
    /// Retransmissions are exhausted: the call is removed; fail it.
    Failed(T),
    /// The call is no longer in flight (its reply just arrived).
    NotInFlight,
}

/// Decodes a reply message into its xid and either the procedure results
/// or the error the reply carries (RFC 5531 §9). Fails only when not even
/// the xid can be read.
pub fn decode_reply(record: &Bytes) -> Result<(u32, Result<Bytes, RpcError>), xdr::Error> {
    decode_reply_verf(record).map(|(xid, _, r)| (xid, r))
}

/// A decoded reply: its xid, the verifier of an accepted reply, and the
/// results or the error the reply carries.
pub type ReplyParts = (u32, Option<OpaqueAuth>, Result<Bytes, RpcError>);

/// [`decode_reply`], with the verifier of an accepted reply.
pub fn decode_reply_verf(record: &Bytes) -> Result<ReplyParts, xdr::Error> {
    let mut dec = Decoder::from_bytes(record);
    let xid = Decoder::new(record).u32()?;
    let hdr = match ReplyHeader::decode(&mut dec) {
        Ok(h) => h,
        Err(e) => return Ok((xid, None, Err(RpcError::Decode(e)))),
    };
    let (verifier, result) = match hdr.body {
        ReplyBody::Accepted { stat, verf } => (Some(verf), accepted_result(stat, &mut dec)),
        ReplyBody::Denied(Rejected::RpcMismatch { low, high }) => {
            (None, Err(RpcError::RpcMismatch { low, high }))
        }
        ReplyBody::Denied(Rejected::AuthError(s)) => (None, Err(RpcError::Auth(s))),
    };
    Ok((xid, verifier, result))
}

fn accepted_result(stat: Accepted, dec: &mut Decoder<'_>) -> Result<Bytes, RpcError> {
    match stat {
        Accepted::Success => Ok(dec.rest_bytes()),
        Accepted::ProgMismatch { low, high } => Err(RpcError::ProgMismatch { low, high }),
        Accepted::Other(AcceptStat::PROG_UNAVAIL) => Err(RpcError::ProgUnavail),
        Accepted::Other(AcceptStat::PROC_UNAVAIL) => Err(RpcError::ProcUnavail),
        Accepted::Other(AcceptStat::GARBAGE_ARGS) => Err(RpcError::GarbageArgs),
        Accepted::Other(AcceptStat::SYSTEM_ERR) => Err(RpcError::SystemErr),
        Accepted::Other(s) => Err(RpcError::UnknownAcceptStat(s)),
    }
}

/// Encodes a call message: the header (RFC 5531 §9) with the verifier
/// `signer` computes over it from the XID through the credential, or
/// AUTH_NONE, then the arguments (DDP marks kept, positions in the whole
/// message).
fn encode_call(
    xid: u32,
    (prog, vers, proc_): (u32, u32, u32),
    cred: &OpaqueAuth,
    args: &XdrBuf,
    signer: Option<&dyn CallSigner>,
) -> Result<XdrBuf, RpcError> {
    let mut hdr = CallHeader {
        xid,
        prog,
        vers,
        proc_,
        cred: cred.clone(),
        verf: OpaqueAuth::NONE,
    };
    if let Some(s) = signer {
        let mut head = Vec::with_capacity(hdr.encoded_len());
        hdr.encode(&mut head);
        head.truncate(head.len() - OpaqueAuth::NONE.encoded_len());
        hdr.verf = s.verifier(&head)?;
    }
    let mut msg = XdrBuf::with_capacity(hdr.encoded_len());
    hdr.encode(&mut msg);
    msg.append(args.clone());
    Ok(msg)
}

impl<T> InFlight<T> {
    /// The message to send again: re-signed when the signer asks for it
    /// (RPCSEC_GSS, RFC 2203 §5.3.3.1), else the same. If re-signing
    /// fails the old message goes again (the server may drop it as a
    /// replay; the retransmission policy then ends the call).
    fn resend(&mut self, xid: u32) -> XdrBuf {
        let Some(signer) = &self.signer else {
            return self.message.clone();
        };
        let fresh = signer.retransmission().and_then(|r| match r {
            Some((cred, args)) => {
                encode_call(xid, self.proc_, &cred, &args, Some(&**signer)).map(Some)
            }
            None => Ok(None),
        });
        match fresh {
            Ok(Some(m)) => self.message = m,
            Ok(None) => {}
            Err(e) => tracing::debug!(xid, error = %e, "retransmission not re-signed"),
        }
        self.message.clone()
    }
}

/// The sans-IO client core. `T` is whatever the shell needs to complete a
/// call (e.g. a oneshot sender). Time is passed in, never read.
#[derive(Debug)]
pub struct ClientCore<T> {
    next_xid: u32,
    calls: HashMap<u32, InFlight<T>>,
    config: ClientConfig,
}

impl<T> ClientCore<T> {
    /// A core whose XIDs start at `xid_seed` (inject randomness here; the
    /// core never reads a clock or an RNG).
    pub fn new(xid_seed: u32, config: ClientConfig) -> Self {
        Self {
            next_xid: xid_seed,
            calls: HashMap::new(),
            config,
        }
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn alloc_xid(&mut self) -> u32 {
        loop {
            let x = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.calls.contains_key(&x) {
                return x;
            }
        }
    }

    /// Registers a call and returns its XID and the full call message
    /// (RFC 5531 §9 header followed by the arguments, DDP marks kept with
    /// positions in the whole message). On error the token comes back.
    pub fn start_call(
        &mut self,
        call: &RpcCall,
        token: T,
        now: Instant,
    ) -> Result<(u32, XdrBuf), (T, RpcError)> {
        self.start_call_signed(call, None, token, now)
    }

    /// [`Self::start_call`] with a verifier computed by `signer` over the
    /// header through the credential, the reply's verifier checked by it
    /// (RPCSEC_GSS, RFC 2203 §5.3.1). Each retransmission asks the signer
    /// for a new credential and arguments ([`CallSigner::retransmission`]:
    /// a new sequence number, RFC 2203 §5.3.3.1) and keeps the XID.
    pub fn start_call_signed(
        &mut self,
        call: &RpcCall,
        signer: Option<Arc<dyn CallSigner>>,
        token: T,
        now: Instant,
    ) -> Result<(u32, XdrBuf), (T, RpcError)> {
        if self.calls.len() >= self.config.max_in_flight {
            return Err((token, RpcError::TooManyInFlight));
        }
        let xid = self.alloc_xid();
        let proc_ = (call.prog, call.vers, call.proc_);
        let msg = match encode_call(xid, proc_, &call.cred, &call.args, signer.as_deref()) {
            Ok(m) => m,
            Err(e) => return Err((token, e)),
        };
        self.calls.insert(
            xid,
            InFlight {
                token,
                proc_,
                message: msg.clone(),
                deadline: self.config.retransmit.timeout.map(|t| now + t),
                retransmits: 0,
                signer,
            },
        );
        Ok((xid, msg))
    }

    /// Matches a received reply to its call. Returns `None` for a reply
    /// whose xid is not in flight (late duplicate) or that has no xid.
    pub fn handle_reply(&mut self, record: &Bytes) -> Option<(u32, T, Result<Bytes, RpcError>)> {
        let (xid, verf, mut result) = decode_reply_verf(record).ok()?;
        let call = self.calls.remove(&xid)?;
        if let (Some(s), Some(v)) = (&call.signer, &verf) {
            if let Err(e) = s.check_reply(v) {
                result = Err(e);
            }
        }
        Some((xid, call.token, result))
    }

    /// Forgets a call (e.g. its caller gave up).
    pub fn cancel(&mut self, xid: u32) -> Option<T> {
        self.calls.remove(&xid).map(|c| c.token)
    }

    /// The earliest retransmission deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.calls.values().filter_map(|c| c.deadline).min()
    }

    /// Processes deadlines at `now`: calls past their deadline are
    /// retransmitted with the same XID or, past the policy's limit, failed.
    pub fn handle_timeout(&mut self, now: Instant) -> TimeoutActions<T> {
        let mut out = TimeoutActions {
            retransmit: Vec::new(),
            failed: Vec::new(),
        };
        let policy = self.config.retransmit;
        let expired: Vec<u32> = self
            .calls
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(x, _)| *x)
            .collect();
        for xid in expired {
            let Some(c) = self.calls.get_mut(&xid) else {
                continue;
            };
            if c.retransmits >= policy.max_retransmits {
                if let Some(c) = self.calls.remove(&xid) {
                    out.failed.push((c.token, RpcError::TimedOut));
                }
            } else {
                c.retransmits += 1;
                c.deadline = policy.timeout.map(|t| now + t);
                out.retransmit.push((xid, c.resend(xid)));
            }
        }
        out
    }

    /// Applies the retransmission policy to one call whose timer fired:
    /// retransmit with the same XID while the policy allows, then fail.
    pub fn call_timed_out(&mut self, xid: u32, now: Instant) -> CallTimeout<T> {
        let policy = self.config.retransmit;
        let Some(c) = self.calls.get_mut(&xid) else {
            return CallTimeout::NotInFlight;
        };
        if c.retransmits < policy.max_retransmits {
            c.retransmits += 1;
            c.deadline = policy.timeout.map(|t| now + t);
            return CallTimeout::Retransmit(c.resend(xid));
        }
        match self.calls.remove(&xid) {
            Some(c) => CallTimeout::Failed(c.token),
            None => CallTimeout::NotInFlight,
        }
    }

    /// Every call in flight with its original XID, for resending after a
    /// reconnect.
    pub fn retransmit_all(&mut self, now: Instant) -> Vec<(u32, XdrBuf)> {
        let timeout = self.config.retransmit.timeout;
        self.calls
            .iter_mut()
            .map(|(x, c)| {
                c.deadline = timeout.map(|t| now + t);
                (*x, c.resend(*x))
            })
            .collect()
    }

    /// Fails every call in flight with `err` (e.g. the connection is gone
    /// and will not be re-established).
    pub fn fail_all(&mut self, err: RpcError) -> Vec<(T, RpcError)> {
        self.calls.drain().map(|(_, c)| (c.token, err)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdr::Encoder;

    fn call() -> RpcCall {
        let mut args = XdrBuf::new();
        args.put_bulk(Bytes::from_static(b"abc"), true);
        RpcCall {
            prog: 7,
            vers: 1,
            proc_: 1,
            cred: OpaqueAuth::NONE,
            args,
            reply_hint: ReplyHint::default(),
        }
    }

    /// A transport answering every call with fixed results.
    struct Fixed(Bytes);

    impl ClientTransport for Fixed {
        fn call(&self, _call: RpcCall) -> impl Future<Output = Result<Bytes, RpcError>> + Send {
            let b = self.0.clone();
            async move { Ok(b) }
        }
    }

    #[tokio::test]
    async fn call_into_by_default_copies_results_into_the_callers_buffer() {
        let mut dst = BytesMut::with_capacity(64);
        dst.extend_from_slice(&[0xa5; 10]);
        let at = dst.as_ptr();
        let got = Fixed(Bytes::from_static(b"results"))
            .call_into(call(), dst)
            .await
            .unwrap();
        assert_eq!(&got[..], b"results");
        assert_eq!(got.as_ptr(), at, "results live in the caller's buffer");
    }

    fn reply(xid: u32, stat: Accepted, results: &[u8]) -> Bytes {
        let mut b = XdrBuf::new();
        ReplyHeader::accepted(xid, stat).encode(&mut b);
        b.put_raw(results);
        b.to_bytes()
    }

    #[test]
    fn allocates_sequential_xids_from_the_seed_and_matches_replies() {
        let now = Instant::now();
        let mut core = ClientCore::new(u32::MAX, ClientConfig::default());
        let (x1, m1) = core.start_call(&call(), 'a', now).unwrap();
        let (x2, _) = core.start_call(&call(), 'b', now).unwrap();
        assert_eq!((x1, x2), (u32::MAX, 0));
        // Header is 40 bytes; the DDP item data follows its length word.
        assert_eq!(m1.ddp_items().next().unwrap().0, 44);
        let (x, t, r) = core
            .handle_reply(&reply(0, Accepted::Success, &[1, 2, 3, 4]))
            .unwrap();
        assert_eq!((x, t), (0, 'b'));
        assert_eq!(r.unwrap().as_ref(), &[1, 2, 3, 4]);
        assert!(core
            .handle_reply(&reply(0, Accepted::Success, &[]))
            .is_none());
        assert_eq!(core.in_flight(), 1);
    }

    #[test]
    fn maps_every_error_reply() {
        let cases = [
            (
                Accepted::Other(AcceptStat::PROG_UNAVAIL),
                RpcError::ProgUnavail,
            ),
            (
                Accepted::ProgMismatch { low: 1, high: 3 },
                RpcError::ProgMismatch { low: 1, high: 3 },
            ),
            (
                Accepted::Other(AcceptStat::PROC_UNAVAIL),
                RpcError::ProcUnavail,
            ),
            (
                Accepted::Other(AcceptStat::GARBAGE_ARGS),
                RpcError::GarbageArgs,
            ),
            (Accepted::Other(AcceptStat::SYSTEM_ERR), RpcError::SystemErr),
            (
                Accepted::Other(AcceptStat(99)),
                RpcError::UnknownAcceptStat(AcceptStat(99)),
            ),
        ];
        for (stat, want) in cases {
            let (_, r) = decode_reply(&reply(3, stat, &[])).unwrap();
            assert_eq!(r.unwrap_err(), want);
        }
        let denied = xdr::to_bytes(&ReplyHeader::denied(
            3,
            Rejected::AuthError(AuthStat::AUTH_TOOWEAK),
        ));
        assert_eq!(
            decode_reply(&denied).unwrap().1.unwrap_err(),
            RpcError::Auth(AuthStat::AUTH_TOOWEAK)
        );
        let denied = xdr::to_bytes(&ReplyHeader::denied(
            3,
            Rejected::RpcMismatch { low: 2, high: 2 },
        ));
        assert_eq!(
            decode_reply(&denied).unwrap().1.unwrap_err(),
            RpcError::RpcMismatch { low: 2, high: 2 }
        );
        let (x, r) = decode_reply(&Bytes::from_static(&[0, 0, 0, 3, 0, 0, 0, 1])).unwrap();
        assert_eq!(x, 3);
        assert!(matches!(r, Err(RpcError::Decode(_))));
        assert!(decode_reply(&Bytes::from_static(&[0, 0])).is_err());
    }

    #[test]
    fn bounds_calls_in_flight() {
        let now = Instant::now();
        let mut core = ClientCore::new(
            1,
            ClientConfig {
                max_in_flight: 1,
                ..ClientConfig::default()
            },
        );
        core.start_call(&call(), 1, now).unwrap();
        let (tok, e) = core.start_call(&call(), 2, now).unwrap_err();
        assert_eq!((tok, e), (2, RpcError::TooManyInFlight));
    }

    #[test]
    fn retransmits_with_the_same_xid_then_times_out() {
        let t0 = Instant::now();
        let cfg = ClientConfig {
            max_in_flight: 4,
            retransmit: RetransmitPolicy {
                timeout: Some(Duration::from_secs(1)),
                max_retransmits: 1,
            },
        };
        let mut core = ClientCore::new(10, cfg);
        let (xid, msg) = core.start_call(&call(), (), t0).unwrap();
        assert_eq!(core.poll_timeout(), Some(t0 + Duration::from_secs(1)));
        assert!(core.handle_timeout(t0).retransmit.is_empty());
        let a = core.handle_timeout(t0 + Duration::from_secs(1));
        assert_eq!(a.retransmit.len(), 1);
        assert_eq!(a.retransmit[0].0, xid);
        assert_eq!(a.retransmit[0].1.to_bytes(), msg.to_bytes());
        let again = core.retransmit_all(t0 + Duration::from_secs(1));
        assert_eq!(again[0].0, xid);
        let b = core.handle_timeout(t0 + Duration::from_secs(3));
        assert_eq!(b.failed.len(), 1);
        assert_eq!(b.failed[0].1, RpcError::TimedOut);
        assert_eq!(core.in_flight(), 0);
    }

    #[test]
    fn per_call_timeout_retransmits_then_fails() {
        let t0 = Instant::now();
        let cfg = ClientConfig {
            max_in_flight: 4,
            retransmit: RetransmitPolicy {
                timeout: Some(Duration::from_secs(1)),
                max_retransmits: 2,
            },
        };
        let mut core = ClientCore::new(10, cfg);
        let (xid, msg) = core.start_call(&call(), 'x', t0).unwrap();
        for _ in 0..2 {
            match core.call_timed_out(xid, t0) {
                CallTimeout::Retransmit(m) => assert_eq!(m.to_bytes(), msg.to_bytes()),
                other => panic!("expected retransmit, got {other:?}"),
            }
        }
        assert!(matches!(
            core.call_timed_out(xid, t0),
            CallTimeout::Failed('x')
        ));
        assert!(matches!(
            core.call_timed_out(xid, t0),
            CallTimeout::NotInFlight
        ));
    }

    /// Signs with a counter as "verifier" and gives each retransmission a
    /// new credential (as RPCSEC_GSS gives a new sequence number).
    struct Counting(std::sync::atomic::AtomicU32);

    impl CallSigner for Counting {
        fn verifier(&self, header: &[u8]) -> Result<OpaqueAuth, RpcError> {
            Ok(OpaqueAuth {
                flavor: crate::msg::AuthFlavor(99),
                body: Bytes::copy_from_slice(&header[header.len() - 4..]),
            })
        }
        fn check_reply(&self, _verf: &OpaqueAuth) -> Result<(), RpcError> {
            Ok(())
        }
        fn retransmission(&self) -> Result<Option<(OpaqueAuth, XdrBuf)>, RpcError> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let cred = OpaqueAuth {
                flavor: crate::msg::AuthFlavor(99),
                body: Bytes::copy_from_slice(&n.to_be_bytes()),
            };
            let mut args = XdrBuf::new();
            args.put_u32(n);
            Ok(Some((cred, args)))
        }
    }

    #[test]
    fn signed_retransmissions_are_rebuilt_with_the_same_xid() {
        let t0 = Instant::now();
        let cfg = ClientConfig {
            max_in_flight: 4,
            retransmit: RetransmitPolicy {
                timeout: Some(Duration::from_secs(1)),
                max_retransmits: 5,
            },
        };
        let mut core = ClientCore::new(10, cfg);
        let signer = Arc::new(Counting(0.into()));
        let (xid, first) = core
            .start_call_signed(&call(), Some(signer), (), t0)
            .unwrap();
        let decode = |m: &XdrBuf| {
            let b = m.to_bytes();
            let mut dec = Decoder::from_bytes(&b);
            let hdr = CallHeader::decode(&mut dec).unwrap();
            (hdr, dec.rest_bytes())
        };
        let (h0, _) = decode(&first);
        let mut seen = vec![h0.cred.body.clone()];
        let again = [
            match core.call_timed_out(xid, t0) {
                CallTimeout::Retransmit(m) => m,
                other => panic!("{other:?}"),
            },
            core.handle_timeout(t0 + Duration::from_secs(1)).retransmit[0]
                .1
                .clone(),
            core.retransmit_all(t0).remove(0).1,
        ];
        for (i, m) in again.iter().enumerate() {
            let (h, args) = decode(m);
            let n = i as u32 + 1;
            assert_eq!((h.xid, h.prog, h.vers, h.proc_), (xid, 7, 1, 1));
            assert_eq!(&h.cred.body[..], &n.to_be_bytes());
            // The verifier is computed over the new header.
            assert_eq!(&h.verf.body[..], &n.to_be_bytes());
            assert_eq!(&args[..], &n.to_be_bytes());
            assert!(!seen.contains(&h.cred.body));
            seen.push(h.cred.body);
        }
    }
}
