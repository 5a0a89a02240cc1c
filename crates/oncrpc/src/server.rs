//! The sans-IO server core: program registry, call dispatch, error replies
//! (RFC 5531 §9) and the duplicate-request cache.
//!
//! A transport shell (TCP here, RPC-over-RDMA in `rpcrdma`) hands each
//! received call message to [`Server::handle_call`] and sends back the
//! [`XdrBuf`] it returns. The core performs no IO.

use core::future::Future;
use core::net::SocketAddr;
use core::ops::RangeInclusive;
use core::pin::Pin;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use xdr::{Decoder, Encode, XdrBuf};

use crate::drc::{ClientId, DrcConfig, DrcKey, DuplicateRequestCache, Lookup};
use crate::gss::{GssOutcome, GssServer, ReplyProtect};
use crate::msg::{
    AcceptStat, Accepted, AuthFlavor, AuthStat, CallHeader, CallHeaderError, Credential,
    OpaqueAuth, Rejected, ReplyHeader, RPC_VERSION,
};
use crate::stats::{self, CallStats};

/// The transport a call arrived on.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// RPC over TCP with record marking (RFC 5531 §11).
    Tcp,
    /// RPC-over-RDMA (RFC 8166).
    Rdma,
    /// Anything else (in-process tests).
    Other,
}

/// Who sent a call: a connection id unique within the process, the peer's
/// address when known, and the transport kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerInfo {
    /// Connection id assigned by the transport shell from
    /// [`next_conn_id`], unique within the process across transports.
    pub conn_id: u64,
    /// Peer address (the DRC uses only its IP part).
    pub addr: Option<SocketAddr>,
    /// Transport kind.
    pub transport: TransportKind,
    /// Whether the connection runs TLS, and with a verified client
    /// certificate (RFC 9289; only TCP connections upgrade).
    pub security: crate::tls::TransportSecurity,
}

/// A connection id unique within the process, shared by every transport
/// shell (TCP, RPC-over-RDMA), so a `conn_id` never names two live
/// connections of different transports.
pub fn next_conn_id() -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl PeerInfo {
    /// The client identity used by the duplicate-request cache: the IP
    /// address without the port, or the connection id.
    pub fn client_id(&self) -> ClientId {
        match self.addr {
            Some(a) => ClientId::Addr(a.ip()),
            None => ClientId::Connection(self.conn_id),
        }
    }
}

/// Everything a service learns about a call besides its arguments.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// The raw credential.
    pub cred: OpaqueAuth,
    /// The credential decoded (AUTH_NONE, AUTH_SYS, or a verified
    /// RPCSEC_GSS identity).
    pub credential: Credential,
    /// Where the call came from.
    pub peer: PeerInfo,
}

impl CallContext {
    /// Whether the reply may carry bulk data as a file range
    /// ([`XdrBuf::put_file`]) that the transport sends straight from the
    /// file: plain TCP, or RPC-over-RDMA (whose transport sends a range
    /// that goes by write chunk from the file when its device can, and
    /// reads the rest in), without RPCSEC_GSS (whose integrity and privacy
    /// services need the bytes). Elsewhere [`Server`] reads such ranges
    /// in before the reply leaves it.
    pub fn sends_files(&self) -> bool {
        matches!(
            self.peer.transport,
            TransportKind::Tcp | TransportKind::Rdma
        ) && self.peer.security == crate::tls::TransportSecurity::None
            && self.cred.flavor != AuthFlavor::RPCSEC_GSS
    }
}

/// How a service call failed; each maps to an RPC reply (RFC 5531 §9).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The arguments did not decode: MSG_ACCEPTED / GARBAGE_ARGS.
    #[error("cannot decode arguments: {0}")]
    GarbageArgs(xdr::Error),
    /// Unknown procedure: MSG_ACCEPTED / PROC_UNAVAIL.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// The service failed: MSG_ACCEPTED / SYSTEM_ERR.
    #[error("system error: {0}")]
    SystemErr(&'static str),
    /// Authentication refused: MSG_DENIED / AUTH_ERROR with this status.
    #[error("authentication error {0}")]
    Auth(AuthStat),
    /// Send no reply at all (the client will retransmit).
    #[error("reply dropped")]
    Drop,
}

impl From<xdr::Error> for ServiceError {
    fn from(e: xdr::Error) -> Self {
        Self::GarbageArgs(e)
    }
}

/// An RPC program implementation.
///
/// `call` receives the procedure arguments as [`Bytes`]: the call message
/// after the RPC header, zero-copy from the transport. An RPC-over-RDMA
/// shell reassembles DDP-eligible argument data at its XDR position before
/// calling. The result is the procedure results as an [`XdrBuf`] whose
/// DDP-eligible items an RDMA transport may return by Write chunk.
pub trait RpcService: Send + Sync + 'static {
    /// Program number.
    fn program(&self) -> u32;

    /// Versions implemented; others get PROG_MISMATCH.
    fn versions(&self) -> RangeInclusive<u32>;

    /// Executes procedure `ctx.proc_`.
    fn call(
        &self,
        ctx: CallContext,
        args: Bytes,
    ) -> impl Future<Output = Result<XdrBuf, ServiceError>> + Send;

    /// Whether replies to this procedure go in the duplicate-request cache
    /// (non-idempotent procedures). Default: none.
    fn is_cached(&self, _vers: u32, _proc: u32) -> bool {
        false
    }

    /// Whether the service still needs connection `conn_id` (by
    /// [`PeerInfo::conn_id`]) although its client sends nothing, e.g. an
    /// NFSv4.1 session whose back channel may use it. The TCP shell does
    /// not close such a connection as idle. Default: no.
    fn holds_connection(&self, _conn_id: u64) -> bool {
        false
    }

    /// The most bytes the results of this call can take, from its
    /// arguments (e.g. an NFS READ's count), if the service knows before
    /// running it; `None` when it does not. A transport that holds reply
    /// memory against a budget charges this instead of its largest reply
    /// ([`crate::tcp::TcpConfig::reply_reserve`]), so small calls in
    /// flight do not hold a large reservation each. A larger result is
    /// still sent; it is only charged late. Default: unknown.
    fn reply_size_bound(&self, _vers: u32, _proc: u32, _args: &[u8]) -> Option<usize> {
        None
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`RpcService`].
trait DynService: Send + Sync {
    fn versions(&self) -> RangeInclusive<u32>;
    fn call_boxed(
        &self,
        ctx: CallContext,
        args: Bytes,
    ) -> BoxFuture<'_, Result<XdrBuf, ServiceError>>;
    fn is_cached(&self, vers: u32, proc_: u32) -> bool;
    fn holds_connection(&self, conn_id: u64) -> bool;
    fn reply_size_bound(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<usize>;
}

impl<S: RpcService> DynService for S {
    fn versions(&self) -> RangeInclusive<u32> {
        RpcService::versions(self)
    }
    fn call_boxed(
        &self,
        ctx: CallContext,
        args: Bytes,
    ) -> BoxFuture<'_, Result<XdrBuf, ServiceError>> {
        Box::pin(self.call(ctx, args))
    }
    fn is_cached(&self, vers: u32, proc_: u32) -> bool {
        RpcService::is_cached(self, vers, proc_)
    }
    fn holds_connection(&self, conn_id: u64) -> bool {
        RpcService::holds_connection(self, conn_id)
    }
    fn reply_size_bound(&self, vers: u32, proc_: u32, args: &[u8]) -> Option<usize> {
        RpcService::reply_size_bound(self, vers, proc_, args)
    }
}

/// The server core: a registry of services by program number, and an
/// optional duplicate-request cache.
#[derive(Default)]
pub struct Server {
    programs: HashMap<u32, Vec<Arc<dyn DynService>>>,
    drc: Option<DuplicateRequestCache>,
    stats: CallStats,
    gss: Option<Arc<GssServer>>,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("programs", &self.programs.keys().collect::<Vec<_>>())
            .field("drc", &self.drc)
            .finish()
    }
}

/// Outcome of header processing, before the service runs.
enum Prepared {
    Reply(XdrBuf),
    Drop,
    Run {
        svc: Arc<dyn DynService>,
        ctx: CallContext,
        args: Bytes,
        protect: Option<ReplyProtect>,
    },
}

/// Bytes of an accepted reply's header with an AUTH_NONE verifier (xid,
/// message type, reply status, verifier, accept status): RFC 5531 §9.
const ACCEPTED_REPLY_HEADER: usize = 24;

/// A call whose RPC header has been checked ([`Server::accept`]), ready
/// to run ([`Server::execute`]).
pub struct AcceptedCall(Prepared);

impl core::fmt::Debug for AcceptedCall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            Prepared::Reply(r) => write!(f, "AcceptedCall::Reply({} bytes)", r.len()),
            Prepared::Drop => f.write_str("AcceptedCall::Drop"),
            Prepared::Run { ctx, .. } => write!(f, "AcceptedCall::Run(xid {})", ctx.xid),
        }
    }
}

impl AcceptedCall {
    /// The most bytes its reply can take, if known before it runs: a
    /// rejection's own size, nothing for a dropped call, or the service's
    /// [`RpcService::reply_size_bound`] plus the reply header.
    pub fn reply_bound(&self) -> Option<usize> {
        match &self.0 {
            Prepared::Reply(r) => Some(r.len()),
            Prepared::Drop => Some(0),
            Prepared::Run {
                svc,
                ctx,
                args,
                protect,
            } => svc.reply_size_bound(ctx.vers, ctx.proc_, args).map(|n| {
                let gss = if protect.is_some() {
                    crate::gss::server::REPLY_OVERHEAD
                } else {
                    0
                };
                n.saturating_add(ACCEPTED_REPLY_HEADER + gss)
            }),
        }
    }
}

fn reply_only(h: ReplyHeader) -> XdrBuf {
    xdr::to_xdr_buf(&h)
}

/// Removes an in-progress DRC entry if the call future is dropped before
/// completing (e.g. the connection closed), so a retransmission executes.
struct DrcGuard<'a> {
    drc: &'a DuplicateRequestCache,
    key: Option<DrcKey>,
}

impl Drop for DrcGuard<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.drc.abandon(k);
        }
    }
}

impl Server {
    /// A server with no programs and no duplicate-request cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enables the duplicate-request cache.
    pub fn with_drc(mut self, config: DrcConfig) -> Self {
        self.drc = Some(DuplicateRequestCache::new(config));
        self
    }

    /// Answers RPCSEC_GSS calls (RFC 2203) with `gss`; without it they
    /// are refused AUTH_ERROR / AUTH_BADCRED.
    pub fn with_gss(mut self, gss: Arc<GssServer>) -> Self {
        self.gss = Some(gss);
        self
    }

    /// The RPCSEC_GSS state, if enabled.
    pub fn gss(&self) -> Option<&Arc<GssServer>> {
        self.gss.as_ref()
    }

    /// The duplicate-request cache, if enabled.
    pub fn drc(&self) -> Option<&DuplicateRequestCache> {
        self.drc.as_ref()
    }

    /// Registers a service. Several services may share a program number
    /// with disjoint version ranges.
    pub fn register<S: RpcService>(&mut self, service: S) -> &mut Self {
        self.register_arc(Arc::new(service))
    }

    /// Registers a shared service.
    pub fn register_arc<S: RpcService>(&mut self, service: Arc<S>) -> &mut Self {
        let prog = service.program();
        self.programs.entry(prog).or_default().push(service);
        self
    }

    /// Whether a registered service still needs connection `conn_id`
    /// ([`RpcService::holds_connection`]), so it must not be closed as idle.
    pub fn holds_connection(&self, conn_id: u64) -> bool {
        self.programs
            .values()
            .flatten()
            .any(|s| s.holds_connection(conn_id))
    }

    /// Handles one call message (a whole RPC record) and returns the reply
    /// message, or `None` when no reply is sent (not a call, no xid to
    /// answer, a retransmission of a call in progress, or a service that
    /// chose to drop).
    ///
    /// Error replies follow RFC 5531 §9 and Linux knfsd: `rpcvers` ≠ 2 →
    /// MSG_DENIED / RPC_MISMATCH 2..2; a credential that is malformed,
    /// over 400 bytes (§8.2) or of an unsupported flavor → MSG_DENIED /
    /// AUTH_ERROR / AUTH_BADCRED; a bad verifier → AUTH_BADVERF; a header
    /// truncated after `rpcvers` → MSG_ACCEPTED / GARBAGE_ARGS; unknown
    /// program → PROG_UNAVAIL; unknown version → PROG_MISMATCH with the
    /// registered range; the rest comes from the service.
    pub async fn handle_call(&self, record: Bytes, peer: &PeerInfo) -> Option<XdrBuf> {
        self.execute(self.accept(&record, peer)).await
    }

    /// The first half of [`Self::handle_call`]: checks the call's RPC
    /// header and finds its service, without running it.
    pub fn accept(&self, record: &Bytes, peer: &PeerInfo) -> AcceptedCall {
        AcceptedCall(self.prepare(record, peer))
    }

    /// The second half of [`Self::handle_call`]: the reply to an accepted
    /// call (`None` when none is sent).
    pub async fn execute(&self, call: AcceptedCall) -> Option<XdrBuf> {
        match call.0 {
            Prepared::Reply(r) => Some(r),
            Prepared::Drop => None,
            Prepared::Run {
                svc,
                ctx,
                args,
                protect,
            } => self.run(svc, ctx, args, protect).await,
        }
    }

    fn prepare(&self, record: &Bytes, peer: &PeerInfo) -> Prepared {
        let mut dec = Decoder::from_bytes(record);
        let hdr = match CallHeader::decode(&mut dec) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "rejecting call header");
                return match e {
                    CallHeaderError::NoPrefix(_) | CallHeaderError::NotACall { .. } => {
                        Prepared::Drop
                    }
                    CallHeaderError::RpcVersion { xid, .. } => {
                        stats::rejected(stats::Rejected::RpcMismatch);
                        Prepared::Reply(reply_only(ReplyHeader::denied(
                            xid,
                            Rejected::RpcMismatch {
                                low: RPC_VERSION,
                                high: RPC_VERSION,
                            },
                        )))
                    }
                    CallHeaderError::BadCred { xid, .. } => {
                        stats::rejected(stats::Rejected::BadCred);
                        Prepared::Reply(reply_only(ReplyHeader::denied(
                            xid,
                            Rejected::AuthError(AuthStat::AUTH_BADCRED),
                        )))
                    }
                    CallHeaderError::BadVerf { xid, .. } => {
                        stats::rejected(stats::Rejected::BadVerf);
                        Prepared::Reply(reply_only(ReplyHeader::denied(
                            xid,
                            Rejected::AuthError(AuthStat::AUTH_BADVERF),
                        )))
                    }
                    CallHeaderError::Truncated { xid, .. } => {
                        stats::rejected(stats::Rejected::GarbageHeader);
                        Prepared::Reply(reply_only(ReplyHeader::accepted(
                            xid,
                            Accepted::Other(AcceptStat::GARBAGE_ARGS),
                        )))
                    }
                };
            }
        };
        let xid = hdr.xid;
        let args_at = dec.position();
        let (credential, args, protect) = match self.check_auth(&hdr, record, args_at, peer) {
            Ok(v) => v,
            Err(p) => return p,
        };
        let accepted = |stat| Prepared::Reply(reply_only(ReplyHeader::accepted(xid, stat)));
        let Some(svcs) = self.programs.get(&hdr.prog) else {
            stats::rejected(stats::Rejected::ProgUnavail);
            return accepted(Accepted::Other(AcceptStat::PROG_UNAVAIL));
        };
        let Some(svc) = svcs.iter().find(|s| s.versions().contains(&hdr.vers)) else {
            let low = svcs
                .iter()
                .map(|s| *s.versions().start())
                .min()
                .unwrap_or(0);
            let high = svcs.iter().map(|s| *s.versions().end()).max().unwrap_or(0);
            stats::rejected(stats::Rejected::ProgMismatch);
            return accepted(Accepted::ProgMismatch { low, high });
        };
        Prepared::Run {
            svc: Arc::clone(svc),
            ctx: CallContext {
                xid,
                prog: hdr.prog,
                vers: hdr.vers,
                proc_: hdr.proc_,
                cred: hdr.cred,
                credential,
                peer: *peer,
            },
            args,
            protect,
        }
    }

    /// The call's credential and verifier: AUTH_NONE and AUTH_SYS checked
    /// here, RPCSEC_GSS by the [`GssServer`] (which may answer the call
    /// itself: context creation and destruction, errors, replays).
    #[allow(clippy::result_large_err)]
    fn check_auth(
        &self,
        hdr: &CallHeader,
        record: &Bytes,
        args_at: usize,
        peer: &PeerInfo,
    ) -> Result<(Credential, Bytes, Option<ReplyProtect>), Prepared> {
        let xid = hdr.xid;
        let deny = |s| {
            stats::rejected(if s == AuthStat::AUTH_BADVERF {
                stats::Rejected::BadVerf
            } else {
                stats::Rejected::BadCred
            });
            Prepared::Reply(reply_only(ReplyHeader::denied(xid, Rejected::AuthError(s))))
        };
        if hdr.cred.flavor == AuthFlavor::RPCSEC_GSS {
            let Some(gss) = &self.gss else {
                return Err(deny(AuthStat::AUTH_BADCRED));
            };
            return match gss.handle(hdr, record, args_at, peer, Instant::now()) {
                GssOutcome::Reply(r) => Err(Prepared::Reply(r)),
                GssOutcome::Drop => Err(Prepared::Drop),
                GssOutcome::Data {
                    args,
                    identity,
                    protect,
                } => Ok((Credential::Gss(identity), args, Some(protect))),
            };
        }
        let credential = match Credential::from_opaque(&hdr.cred) {
            Ok(Credential::Other(_) | Credential::Gss(_)) | Err(_) => {
                return Err(deny(AuthStat::AUTH_BADCRED))
            }
            Ok(Credential::None) if !hdr.cred.body.is_empty() => {
                return Err(deny(AuthStat::AUTH_BADCRED))
            }
            Ok(c) => c,
        };
        // RFC 5531 §10.1-10.2: AUTH_NONE and AUTH_SYS calls carry an
        // AUTH_NONE verifier.
        if hdr.verf.flavor != AuthFlavor::AUTH_NONE || !hdr.verf.body.is_empty() {
            return Err(deny(AuthStat::AUTH_BADVERF));
        }
        Ok((credential, record.slice(args_at..), None))
    }

    async fn run(
        &self,
        svc: Arc<dyn DynService>,
        ctx: CallContext,
        args: Bytes,
        protect: Option<ReplyProtect>,
    ) -> Option<XdrBuf> {
        let xid = ctx.xid;
        let mut guard = None;
        if let Some(drc) = &self.drc {
            if svc.is_cached(ctx.vers, ctx.proc_) {
                let key = DrcKey::new(
                    xid,
                    ctx.peer.client_id(),
                    ctx.prog,
                    ctx.vers,
                    ctx.proc_,
                    &args,
                );
                match drc.begin(key) {
                    Lookup::New => {
                        guard = Some(DrcGuard {
                            drc,
                            key: Some(key),
                        })
                    }
                    Lookup::InProgress => {
                        tracing::debug!(xid, "dropping retransmission of a call in progress");
                        return None;
                    }
                    Lookup::Replay(r) => {
                        tracing::debug!(xid, "replaying cached reply");
                        return Some(r);
                    }
                }
            }
        }
        let key = (ctx.prog, ctx.vers, ctx.proc_);
        let sends_files = ctx.sends_files() && protect.is_none();
        let started = Instant::now();
        let result = match svc.call_boxed(ctx, args).await {
            Ok(mut body) if !sends_files && body.has_files() => match body.load_files() {
                Ok(()) => Ok(body),
                Err(e) => {
                    tracing::debug!(xid, error = %e, "reading a reply's file range");
                    Err(ServiceError::SystemErr("reading the reply's data"))
                }
            },
            r => r,
        };
        self.stats
            .record(key, outcome_of(&result), started.elapsed());
        let reply = match (result, &protect) {
            (Ok(body), Some(p)) => p.success(xid, body),
            (Ok(body), None) => {
                let mut r = XdrBuf::with_capacity(24);
                ReplyHeader::accepted(xid, Accepted::Success).encode(&mut r);
                r.append(body);
                Some(r)
            }
            (Err(e), Some(p)) if !matches!(e, ServiceError::Auth(_) | ServiceError::Drop) => {
                tracing::debug!(xid, error = %e, "service error");
                p.error_reply(xid, accepted_error(e))
            }
            (Err(e), _) => {
                tracing::debug!(xid, error = %e, "service error");
                let h = match e {
                    ServiceError::GarbageArgs(_) => {
                        ReplyHeader::accepted(xid, Accepted::Other(AcceptStat::GARBAGE_ARGS))
                    }
                    ServiceError::ProcUnavail => {
                        ReplyHeader::accepted(xid, Accepted::Other(AcceptStat::PROC_UNAVAIL))
                    }
                    ServiceError::SystemErr(_) => {
                        ReplyHeader::accepted(xid, Accepted::Other(AcceptStat::SYSTEM_ERR))
                    }
                    ServiceError::Auth(s) => ReplyHeader::denied(xid, Rejected::AuthError(s)),
                    ServiceError::Drop => return None,
                };
                Some(reply_only(h))
            }
        };
        if let (Some(g), Some(r)) = (guard.as_mut(), reply.as_ref()) {
            if let Some(k) = g.key.take() {
                g.drc.complete(k, r);
            }
        }
        reply
    }
}

/// The accepted-reply status of a service error that is not an
/// authentication error or a drop (RFC 5531 §9).
fn accepted_error(e: ServiceError) -> Accepted {
    Accepted::Other(match e {
        ServiceError::GarbageArgs(_) => AcceptStat::GARBAGE_ARGS,
        ServiceError::ProcUnavail => AcceptStat::PROC_UNAVAIL,
        _ => AcceptStat::SYSTEM_ERR,
    })
}

/// How a service's result shows in the call counts.
fn outcome_of(result: &Result<XdrBuf, ServiceError>) -> stats::Outcome {
    match result {
        Ok(_) => stats::Outcome::Success,
        Err(ServiceError::GarbageArgs(_)) => stats::Outcome::GarbageArgs,
        Err(ServiceError::ProcUnavail) => stats::Outcome::ProcUnavail,
        Err(ServiceError::SystemErr(_)) => stats::Outcome::SystemErr,
        Err(ServiceError::Auth(_)) => stats::Outcome::AuthError,
        Err(ServiceError::Drop) => stats::Outcome::Dropped,
    }
}
