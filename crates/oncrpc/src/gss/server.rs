//! The server side of RPCSEC_GSS version 1 (RFC 2203 §5.2-§5.4): context
//! creation through the mechanism's acceptor, a bounded context table,
//! DATA calls verified (header MIC, sequence window, then the service's
//! unwrapping of the arguments), replies protected, DESTROY. Sans-IO: the
//! caller passes the time; the mechanism is a trait object.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use xdr::{Decoder, Encode, Encoder, XdrBuf};

use super::mech::{Acceptor, GssError, SecContext, GSS_S_CONTINUE_NEEDED, GSS_S_FAILURE};
use super::{GssCred, GssInitArg, GssInitRes, GssProc, GssService, SeqCheck, SeqWindow};
use crate::drc::ClientId;
use crate::limits::Limit;
use crate::msg::{
    AcceptStat, Accepted, AuthFlavor, AuthStat, CallHeader, OpaqueAuth, Rejected, ReplyBody,
    ReplyHeader,
};
use crate::server::PeerInfo;

static CONTEXTS_TOTAL: Limit = Limit::new("gss.contexts");
static CONTEXTS_PER_CLIENT: Limit = Limit::new("gss.contexts_per_client");
static BAD_HEADER_MIC: Limit = Limit::new("gss.bad_header_mic");
static BAD_BODY: Limit = Limit::new("gss.bad_body");
static REPLAYED: Limit = Limit::new("gss.replayed");
static INIT_FAILED: Limit = Limit::new("gss.init_failed");

/// Bounds of the server's context table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GssConfig {
    /// Contexts held in total (established or being established).
    pub max_contexts: usize,
    /// Contexts held per client address.
    pub max_contexts_per_client: usize,
    /// A context unused this long is forgotten (the client then gets
    /// RPCSEC_GSS_CREDPROBLEM and makes a new one, RFC 2203 §5.3.3.3).
    pub idle_timeout: Duration,
    /// The sequence window told to clients (RFC 2203 §5.2.3.1).
    pub window: u32,
}

impl Default for GssConfig {
    fn default() -> Self {
        Self {
            max_contexts: 4096,
            max_contexts_per_client: 64,
            idle_timeout: Duration::from_secs(3600),
            window: 128,
        }
    }
}

/// Who an RPCSEC_GSS call comes from, as the services see it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GssIdentity {
    /// The client's principal (`user@REALM`), as the mechanism names it.
    pub principal: Arc<str>,
    /// The local user name the mechanism maps the principal to, if any
    /// ([`SecContext::local_name`]).
    pub local_name: Option<Arc<str>>,
    /// How the call's arguments and results are protected.
    pub service: GssService,
}

struct EntryState {
    ctx: Box<dyn SecContext>,
    principal: Option<Arc<str>>,
    local_name: Option<Arc<str>>,
    window: SeqWindow,
    last_used: Instant,
}

struct Entry {
    client: ClientId,
    state: Mutex<EntryState>,
}

impl Entry {
    fn lock(&self) -> MutexGuard<'_, EntryState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct Table {
    map: HashMap<Bytes, Arc<Entry>>,
    per_client: HashMap<ClientId, usize>,
    next: u64,
}

impl Table {
    fn remove(&mut self, handle: &[u8]) -> Option<Arc<Entry>> {
        let e = self.map.remove(handle)?;
        if let Some(n) = self.per_client.get_mut(&e.client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&e.client);
            }
        }
        Some(e)
    }
}

/// What the RPC core does with an RPCSEC_GSS call.
pub enum GssOutcome {
    /// Send this reply (context creation, destruction, or an error).
    Reply(XdrBuf),
    /// Send nothing (a replayed or too old sequence number, RFC 2203
    /// §5.3.3.1).
    Drop,
    /// A verified DATA call: run the procedure on `args` for `identity`,
    /// and protect its reply with `protect`.
    Data {
        /// The procedure's arguments, unwrapped.
        args: Bytes,
        /// The caller.
        identity: GssIdentity,
        /// The reply's verifier and wrapping.
        protect: ReplyProtect,
    },
}

impl core::fmt::Debug for GssOutcome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Reply(r) => write!(f, "Reply({} bytes)", r.len()),
            Self::Drop => f.write_str("Drop"),
            Self::Data { identity, .. } => write!(f, "Data({identity:?})"),
        }
    }
}

/// How to protect the reply of a verified DATA call (RFC 2203 §5.3.3.2,
/// §5.3.2.2-§5.3.2.3).
pub struct ReplyProtect {
    entry: Arc<Entry>,
    seq: u32,
    service: GssService,
}

/// The most bytes the protection adds to a reply: the verifier's MIC and,
/// for integrity and privacy, the body's lengths, sequence number and MIC
/// or wrap token (Kerberos AES: a 28-byte MIC, a wrap adds 60 bytes and
/// padding).
pub const REPLY_OVERHEAD: usize = 256;

impl ReplyProtect {
    /// The service protecting the reply.
    pub fn service(&self) -> GssService {
        self.service
    }

    /// The reply verifier: the MIC of the sequence number (RFC 2203
    /// §5.3.3.2). `None` when the mechanism fails: the reply is dropped
    /// (RFC 2203 §5.3.3.4.1).
    pub fn verifier(&self) -> Option<OpaqueAuth> {
        let mic = self
            .entry
            .lock()
            .ctx
            .get_mic(&self.seq.to_be_bytes())
            .ok()?;
        Some(OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: Bytes::from(mic),
        })
    }

    /// An accepted reply with status `stat` and no results.
    pub fn error_reply(&self, xid: u32, stat: Accepted) -> Option<XdrBuf> {
        let verf = self.verifier()?;
        Some(xdr::to_xdr_buf(&ReplyHeader {
            xid,
            body: ReplyBody::Accepted { verf, stat },
        }))
    }

    /// The SUCCESS reply carrying `results`, wrapped for the service:
    /// as is (krb5), `rpc_gss_integ_data` (krb5i) or `rpc_gss_priv_data`
    /// (krb5p). With integrity or privacy the results are flattened: they
    /// are not DDP-eligible (RFC 8166 §9.2.2).
    pub fn success(&self, xid: u32, results: XdrBuf) -> Option<XdrBuf> {
        let verf = self.verifier()?;
        let mut out = xdr::to_xdr_buf(&ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf,
                stat: Accepted::Success,
            },
        });
        match self.service {
            GssService::INTEGRITY | GssService::PRIVACY => {
                let body = protect_body(
                    &mut *self.entry.lock().ctx,
                    self.service,
                    self.seq,
                    &results,
                )
                .ok()?;
                out.append(body);
            }
            _ => out.append(results),
        }
        Some(out)
    }
}

/// `rpc_gss_data_t` (seq_num, then the body) protected for `service`:
/// `rpc_gss_integ_data` (RFC 2203 §5.3.2.2) or `rpc_gss_priv_data`
/// (§5.3.2.3), encoded. Shared by server replies and client calls.
pub fn protect_body(
    ctx: &mut dyn SecContext,
    service: GssService,
    seq: u32,
    body: &XdrBuf,
) -> Result<XdrBuf, GssError> {
    let mut data = BytesMut::with_capacity(4 + body.len());
    data.extend_from_slice(&seq.to_be_bytes());
    body.write_to(&mut data);
    let mut out = XdrBuf::new();
    // Not DDP-eligible (RFC 8166 §9.2.2): the token travels inline or in
    // a Reply/Position-zero chunk.
    if service == GssService::PRIVACY {
        let token = ctx.wrap(&data)?;
        out.put_bulk(Bytes::from(token), false);
    } else {
        let mic = ctx.get_mic(&data)?;
        out.put_bulk(data.freeze(), false);
        out.put_opaque(&mic);
    }
    Ok(out)
}

/// Why a protected body is refused (RFC 2203 §5.3.3.4.2-§5.3.3.4.3: the
/// answer is GARBAGE_ARGS).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The XDR around the token does not decode.
    #[error("malformed protected body: {0}")]
    Malformed(xdr::Error),
    /// The MIC did not verify or the token did not unwrap.
    #[error("{0}")]
    Mechanism(GssError),
    /// The sequence number inside differs from the credential's.
    #[error("sequence number {inside} inside, {outside} in the credential")]
    SeqMismatch {
        /// In the body.
        inside: u32,
        /// Expected.
        outside: u32,
    },
}

/// The inverse of [`protect_body`]: checks and strips the protection and
/// the sequence number, which must be `seq`.
pub fn unprotect_body(
    ctx: &mut dyn SecContext,
    service: GssService,
    seq: u32,
    body: &Bytes,
) -> Result<Bytes, BodyError> {
    let mut dec = Decoder::from_bytes(body);
    let m = BodyError::Malformed;
    let data = if service == GssService::PRIVACY {
        let token = dec.opaque(dec.remaining()).map_err(m)?;
        dec.finish().map_err(m)?;
        Bytes::from(ctx.unwrap(token).map_err(BodyError::Mechanism)?)
    } else {
        let data = dec.opaque_bytes(dec.remaining()).map_err(m)?;
        let mic = dec.opaque(dec.remaining()).map_err(m)?;
        dec.finish().map_err(m)?;
        ctx.verify_mic(&data, mic).map_err(BodyError::Mechanism)?;
        data
    };
    let inside = Decoder::new(&data).u32().map_err(m)?;
    if inside != seq {
        return Err(BodyError::SeqMismatch {
            inside,
            outside: seq,
        });
    }
    Ok(data.slice(4..))
}

/// Length of the call header up to and including the credential: xid,
/// msg_type, rpcvers, prog, vers, proc, then the credential (RFC 5531 §9),
/// what the call's verifier checksums (RFC 2203 §5.3.1).
pub fn header_len_through_cred(cred: &OpaqueAuth) -> usize {
    24 + 8 + cred.body.len().div_ceil(4) * 4
}

/// The server's RPCSEC_GSS state: the acceptor and the context table.
pub struct GssServer {
    acceptor: Arc<dyn Acceptor>,
    config: GssConfig,
    table: Mutex<Table>,
    /// Distinguishes this server's handles from another run's.
    boot: u32,
}

impl core::fmt::Debug for GssServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GssServer")
            .field("config", &self.config)
            .field("contexts", &self.contexts())
            .finish()
    }
}

fn deny(xid: u32, stat: AuthStat) -> GssOutcome {
    GssOutcome::Reply(xdr::to_xdr_buf(&ReplyHeader::denied(
        xid,
        Rejected::AuthError(stat),
    )))
}

fn accepted(xid: u32, verf: OpaqueAuth, stat: Accepted) -> XdrBuf {
    xdr::to_xdr_buf(&ReplyHeader {
        xid,
        body: ReplyBody::Accepted { verf, stat },
    })
}

impl GssServer {
    /// A server accepting contexts with `acceptor`.
    pub fn new(acceptor: Arc<dyn Acceptor>, config: GssConfig) -> Self {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
            .unwrap_or(0);
        Self {
            acceptor,
            config,
            table: Mutex::new(Table::default()),
            boot,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GssConfig {
        &self.config
    }

    /// Contexts held (established or being established).
    pub fn contexts(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lookup(&self, handle: &[u8]) -> Option<Arc<Entry>> {
        self.lock().map.get(handle).cloned()
    }

    /// Handles a call whose credential is RPCSEC_GSS: `record` is the
    /// whole call message, `hdr` its decoded header and `args_at` where
    /// the arguments start.
    pub fn handle(
        &self,
        hdr: &CallHeader,
        record: &Bytes,
        args_at: usize,
        peer: &PeerInfo,
        now: Instant,
    ) -> GssOutcome {
        let xid = hdr.xid;
        // RFC 2203 §5.3.3.3: a credential that does not decode, or of
        // another version, is AUTH_BADCRED.
        let Ok(cred) = GssCred::decode_body(&hdr.cred.body) else {
            return deny(xid, AuthStat::AUTH_BADCRED);
        };
        if !matches!(
            cred.service,
            GssService::NONE | GssService::INTEGRITY | GssService::PRIVACY
        ) {
            return deny(xid, AuthStat::AUTH_BADCRED);
        }
        let args = record.slice(args_at.min(record.len())..);
        match cred.proc_ {
            GssProc::RPCSEC_GSS_INIT | GssProc::RPCSEC_GSS_CONTINUE_INIT => {
                self.init(xid, &cred, &args, peer, now)
            }
            GssProc::RPCSEC_GSS_DATA | GssProc::RPCSEC_GSS_DESTROY => {
                self.data(hdr, &cred, record, args, now)
            }
            _ => deny(xid, AuthStat::AUTH_BADCRED),
        }
    }

    /// INIT and CONTINUE_INIT (RFC 2203 §5.2.2-§5.2.3): one acceptor step.
    fn init(
        &self,
        xid: u32,
        cred: &GssCred,
        args: &Bytes,
        peer: &PeerInfo,
        now: Instant,
    ) -> GssOutcome {
        let mut dec = Decoder::from_bytes(args);
        let Ok(arg) = GssInitArg::decode(&mut dec).and_then(|a| dec.finish().map(|()| a)) else {
            return GssOutcome::Reply(accepted(
                xid,
                OpaqueAuth::NONE,
                Accepted::Other(AcceptStat::GARBAGE_ARGS),
            ));
        };
        let (handle, entry) = if cred.proc_ == GssProc::RPCSEC_GSS_INIT {
            match self.new_entry(peer, now) {
                Ok(v) => v,
                Err(e) => return GssOutcome::Reply(init_failure(xid, &e)),
            }
        } else {
            match self.lookup(&cred.handle) {
                Some(e) if e.lock().principal.is_none() => (cred.handle.clone(), e),
                _ => return deny(xid, AuthStat::RPCSEC_GSS_CREDPROBLEM),
            }
        };
        let mut st = entry.lock();
        let step = match st.ctx.step(&arg.gss_token) {
            Ok(s) => s,
            Err(e) => {
                drop(st);
                self.lock().remove(&handle);
                INIT_FAILED.trip(format_args!(
                    "RPCSEC_GSS context creation from {:?} failed: {e}",
                    peer.addr
                ));
                return GssOutcome::Reply(init_failure(xid, &e));
            }
        };
        st.last_used = now;
        let window = st.window.size();
        let mut verf = OpaqueAuth::NONE;
        if step.complete {
            let name = match st.ctx.peer_name() {
                Ok(n) => n,
                Err(e) => {
                    drop(st);
                    self.lock().remove(&handle);
                    return GssOutcome::Reply(init_failure(xid, &e));
                }
            };
            st.principal = Some(name.into());
            st.local_name = st.ctx.local_name().map(Arc::from);
            // RFC 2203 §5.2.3.1: the verifier of the final reply is the
            // MIC of the window, in network byte order.
            match st.ctx.get_mic(&window.to_be_bytes()) {
                Ok(mic) => {
                    verf = OpaqueAuth {
                        flavor: AuthFlavor::RPCSEC_GSS,
                        body: Bytes::from(mic),
                    }
                }
                Err(e) => {
                    drop(st);
                    self.lock().remove(&handle);
                    return GssOutcome::Reply(init_failure(xid, &e));
                }
            }
        }
        let res = GssInitRes {
            handle,
            gss_major: if step.complete {
                0
            } else {
                GSS_S_CONTINUE_NEEDED
            },
            gss_minor: 0,
            seq_window: window,
            gss_token: Bytes::from(step.token),
        };
        let mut out = accepted(xid, verf, Accepted::Success);
        res.encode(&mut out);
        GssOutcome::Reply(out)
    }

    /// A new, unestablished context for `peer`, within the bounds; the
    /// idle contexts are forgotten first.
    fn new_entry(&self, peer: &PeerInfo, now: Instant) -> Result<(Bytes, Arc<Entry>), GssError> {
        let client = peer.client_id();
        let mut t = self.lock();
        self.expire(&mut t, now);
        if t.map.len() >= self.config.max_contexts {
            CONTEXTS_TOTAL.trip(format_args!(
                "RPCSEC_GSS context table full ({} contexts); refusing {:?}",
                t.map.len(),
                peer.addr
            ));
            return Err(GssError::new(GSS_S_FAILURE, "context table full"));
        }
        if t.per_client.get(&client).copied().unwrap_or(0) >= self.config.max_contexts_per_client {
            CONTEXTS_PER_CLIENT.trip(format_args!(
                "client {:?} holds {} RPCSEC_GSS contexts; refusing another",
                peer.addr, self.config.max_contexts_per_client
            ));
            return Err(GssError::new(GSS_S_FAILURE, "too many contexts"));
        }
        let ctx = self.acceptor.new_context()?;
        t.next += 1;
        let mut h = Vec::with_capacity(12);
        h.extend_from_slice(&self.boot.to_be_bytes());
        h.extend_from_slice(&t.next.to_be_bytes());
        let handle = Bytes::from(h);
        let entry = Arc::new(Entry {
            client,
            state: Mutex::new(EntryState {
                ctx,
                principal: None,
                local_name: None,
                window: SeqWindow::new(self.config.window),
                last_used: now,
            }),
        });
        t.map.insert(handle.clone(), Arc::clone(&entry));
        *t.per_client.entry(client).or_default() += 1;
        Ok((handle, entry))
    }

    fn expire(&self, t: &mut Table, now: Instant) {
        let idle = self.config.idle_timeout;
        let old: Vec<Bytes> = t
            .map
            .iter()
            .filter(|(_, e)| {
                // A context in use right now is not idle.
                e.state
                    .try_lock()
                    .is_ok_and(|s| now.saturating_duration_since(s.last_used) >= idle)
            })
            .map(|(h, _)| h.clone())
            .collect();
        for h in old {
            t.remove(&h);
        }
    }

    /// DATA and DESTROY (RFC 2203 §5.3.3.1, §5.4): the context, the
    /// header's MIC, the window, then the body.
    fn data(
        &self,
        hdr: &CallHeader,
        cred: &GssCred,
        record: &Bytes,
        args: Bytes,
        now: Instant,
    ) -> GssOutcome {
        let xid = hdr.xid;
        let Some(entry) = self.lookup(&cred.handle) else {
            return deny(xid, AuthStat::RPCSEC_GSS_CREDPROBLEM);
        };
        let mut st = entry.lock();
        let Some(principal) = st.principal.clone() else {
            return deny(xid, AuthStat::RPCSEC_GSS_CREDPROBLEM);
        };
        let local_name = st.local_name.clone();
        let header = &record[..header_len_through_cred(&hdr.cred).min(record.len())];
        if hdr.verf.flavor != AuthFlavor::RPCSEC_GSS
            || st.ctx.verify_mic(header, &hdr.verf.body).is_err()
        {
            BAD_HEADER_MIC.trip(format_args!(
                "RPCSEC_GSS call xid {xid:#x} from {principal}: header checksum does not verify"
            ));
            return deny(xid, AuthStat::RPCSEC_GSS_CREDPROBLEM);
        }
        match st.window.check(cred.seq_num) {
            SeqCheck::Accept => {}
            SeqCheck::Replay | SeqCheck::BelowWindow => {
                REPLAYED.trip(format_args!(
                    "RPCSEC_GSS call xid {xid:#x} from {principal}: sequence number {} replayed \
                     or below the window; dropped",
                    cred.seq_num
                ));
                return GssOutcome::Drop;
            }
            SeqCheck::Exhausted => return deny(xid, AuthStat::RPCSEC_GSS_CTXPROBLEM),
        }
        st.last_used = now;
        drop(st);
        let protect = ReplyProtect {
            entry: Arc::clone(&entry),
            seq: cred.seq_num,
            service: cred.service,
        };
        if cred.proc_ == GssProc::RPCSEC_GSS_DESTROY {
            let reply = protect.error_reply(xid, Accepted::Success);
            self.lock().remove(&cred.handle);
            return reply.map_or(GssOutcome::Drop, GssOutcome::Reply);
        }
        let args = if cred.service == GssService::NONE {
            args
        } else {
            // The guard must not outlive the call: the error reply locks
            // the entry again.
            let unprotected = {
                let mut st = entry.lock();
                unprotect_body(&mut *st.ctx, cred.service, cred.seq_num, &args)
            };
            match unprotected {
                Ok(a) => a,
                Err(e) => {
                    BAD_BODY.trip(format_args!(
                        "RPCSEC_GSS call xid {xid:#x} from {principal}: {e}"
                    ));
                    return protect
                        .error_reply(xid, Accepted::Other(AcceptStat::GARBAGE_ARGS))
                        .map_or(GssOutcome::Drop, GssOutcome::Reply);
                }
            }
        };
        GssOutcome::Data {
            args,
            identity: GssIdentity {
                principal,
                local_name,
                service: cred.service,
            },
            protect,
        }
    }
}

/// The answer to a context creation step that failed (RFC 2203
/// §5.2.3.2): an accepted reply whose results carry the GSS status.
fn init_failure(xid: u32, e: &GssError) -> XdrBuf {
    let mut out = accepted(xid, OpaqueAuth::NONE, Accepted::Success);
    GssInitRes {
        handle: Bytes::new(),
        gss_major: e.major.max(1 << 16),
        gss_minor: e.minor,
        seq_window: 0,
        gss_token: Bytes::new(),
    }
    .encode(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gss::fake::{FakeAcceptor, FakeInitiator};
    use crate::gss::mech::Initiator;
    use crate::gss::MAXSEQ;
    use crate::msg::ReplyHeader;
    use crate::server::TransportKind;
    use crate::tls::TransportSecurity;

    const KEY: u64 = 0x5eed;

    fn peer(n: u8) -> PeerInfo {
        PeerInfo {
            conn_id: u64::from(n),
            addr: Some(([127, 0, 0, n], 700).into()),
            transport: TransportKind::Tcp,
            security: TransportSecurity::None,
        }
    }

    fn server(config: GssConfig) -> GssServer {
        GssServer::new(
            Arc::new(FakeAcceptor {
                key: KEY,
                rounds: 1,
            }),
            config,
        )
    }

    /// A call record: header with `cred` and `verf`, then `args`.
    fn record(
        xid: u32,
        cred: &GssCred,
        verf: impl FnOnce(&[u8]) -> OpaqueAuth,
        args: &[u8],
    ) -> (CallHeader, Bytes, usize) {
        let mut hdr = CallHeader {
            xid,
            prog: 100_003,
            vers: 3,
            proc_: 1,
            cred: OpaqueAuth {
                flavor: AuthFlavor::RPCSEC_GSS,
                body: xdr::to_bytes(cred),
            },
            verf: OpaqueAuth::NONE,
        };
        let head = xdr::to_bytes(&hdr);
        hdr.verf = verf(&head[..header_len_through_cred(&hdr.cred)]);
        let mut rec = xdr::to_bytes(&hdr).to_vec();
        let at = rec.len();
        rec.extend_from_slice(args);
        (hdr, Bytes::from(rec), at)
    }

    fn reply_of(o: GssOutcome) -> (ReplyHeader, Bytes) {
        let GssOutcome::Reply(r) = o else {
            panic!("expected a reply, got {o:?}");
        };
        let b = r.to_bytes();
        let mut dec = Decoder::from_bytes(&b);
        let h = ReplyHeader::decode(&mut dec).unwrap();
        (h, dec.rest_bytes())
    }

    fn auth_error(o: GssOutcome) -> AuthStat {
        match reply_of(o).0.body {
            ReplyBody::Denied(Rejected::AuthError(s)) => s,
            b => panic!("expected AUTH_ERROR, got {b:?}"),
        }
    }

    /// Establishes a context for `who` from `p`; the client's context and
    /// the handle.
    fn establish(s: &GssServer, p: &PeerInfo, who: &str) -> (Box<dyn SecContext>, Bytes) {
        let mut c = FakeInitiator {
            principal: who.into(),
            key: KEY,
        }
        .new_context("nfs@host")
        .unwrap();
        let tok = c.step(&[]).unwrap().token;
        let cred = GssCred {
            proc_: GssProc::RPCSEC_GSS_INIT,
            seq_num: 0,
            service: GssService::NONE,
            handle: Bytes::new(),
        };
        let args = xdr::to_bytes(&GssInitArg {
            gss_token: Bytes::from(tok),
        });
        let (hdr, rec, at) = record(1, &cred, |_| OpaqueAuth::NONE, &args);
        let (h, body) = reply_of(s.handle(&hdr, &rec, at, p, Instant::now()));
        let ReplyBody::Accepted { verf, .. } = h.body else {
            panic!("{h:?}")
        };
        let res = GssInitRes::decode(&mut Decoder::from_bytes(&body)).unwrap();
        assert_eq!(res.gss_major, 0);
        assert!(c.step(&res.gss_token).unwrap().complete);
        c.verify_mic(&res.seq_window.to_be_bytes(), &verf.body)
            .unwrap();
        (c, res.handle)
    }

    fn data(
        c: &mut Box<dyn SecContext>,
        handle: &Bytes,
        seq: u32,
        service: GssService,
        args: &[u8],
    ) -> (CallHeader, Bytes, usize) {
        let cred = GssCred {
            proc_: GssProc::RPCSEC_GSS_DATA,
            seq_num: seq,
            service,
            handle: handle.clone(),
        };
        let body = if service == GssService::NONE {
            Bytes::copy_from_slice(args)
        } else {
            protect_body(
                &mut **c,
                service,
                seq,
                &XdrBuf::from_bytes(Bytes::copy_from_slice(args)),
            )
            .unwrap()
            .to_bytes()
        };
        let mic = |h: &[u8]| OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: Bytes::from(c.get_mic(h).unwrap()),
        };
        record(seq + 100, &cred, mic, &body)
    }

    #[test]
    fn the_three_services_verify_and_protect_round_trip() {
        let s = server(GssConfig::default());
        let p = peer(1);
        let (mut c, handle) = establish(&s, &p, "alice@REALM");
        for (seq, svc) in [
            (1, GssService::NONE),
            (2, GssService::INTEGRITY),
            (3, GssService::PRIVACY),
        ] {
            let (hdr, rec, at) = data(&mut c, &handle, seq, svc, b"argument bytes..");
            let GssOutcome::Data {
                args,
                identity,
                protect,
            } = s.handle(&hdr, &rec, at, &p, Instant::now())
            else {
                panic!("not accepted")
            };
            assert_eq!(&args[..], b"argument bytes..");
            assert_eq!(&*identity.principal, "alice@REALM");
            assert_eq!(identity.service, svc);
            let reply = protect
                .success(hdr.xid, XdrBuf::from_bytes(Bytes::from_static(b"results!")))
                .unwrap()
                .to_bytes();
            let mut dec = Decoder::from_bytes(&reply);
            let h = ReplyHeader::decode(&mut dec).unwrap();
            let ReplyBody::Accepted { verf, .. } = h.body else {
                panic!()
            };
            c.verify_mic(&seq.to_be_bytes(), &verf.body).unwrap();
            let body = dec.rest_bytes();
            let results = if svc == GssService::NONE {
                body
            } else {
                // The body is not readable without the context under
                // privacy, and carries the sequence number inside.
                if svc == GssService::PRIVACY {
                    assert!(!body.windows(8).any(|w| w == b"results!"));
                }
                unprotect_body(&mut *c, svc, seq, &body).unwrap()
            };
            assert_eq!(&results[..], b"results!");
        }
    }

    #[test]
    fn replays_are_dropped_and_tampering_refused() {
        let s = server(GssConfig::default());
        let p = peer(1);
        let (mut c, handle) = establish(&s, &p, "bob@REALM");
        let (hdr, rec, at) = data(&mut c, &handle, 5, GssService::INTEGRITY, b"abcd");
        assert!(matches!(
            s.handle(&hdr, &rec, at, &p, Instant::now()),
            GssOutcome::Data { .. }
        ));
        // The same message again: a replay, no answer.
        assert!(matches!(
            s.handle(&hdr, &rec, at, &p, Instant::now()),
            GssOutcome::Drop
        ));
        // A header byte changed (the procedure): the MIC fails.
        let mut bad = rec.to_vec();
        bad[23] ^= 1;
        let bad = Bytes::from(bad);
        let mut h2 = hdr.clone();
        h2.proc_ ^= 1;
        assert_eq!(
            auth_error(s.handle(&h2, &bad, at, &p, Instant::now())),
            AuthStat::RPCSEC_GSS_CREDPROBLEM
        );
        // A body byte changed under integrity: GARBAGE_ARGS with a verifier.
        let (hdr, rec, at) = data(&mut c, &handle, 6, GssService::INTEGRITY, b"abcd");
        let mut bad = rec.to_vec();
        bad[at + 8] ^= 0x40;
        let (h, _) = reply_of(s.handle(&hdr, &Bytes::from(bad), at, &p, Instant::now()));
        assert!(matches!(
            h.body,
            ReplyBody::Accepted {
                stat: Accepted::Other(AcceptStat::GARBAGE_ARGS),
                ..
            }
        ));
        // A body whose inner sequence number is not the credential's.
        let (hdr7, _, at7) = data(&mut c, &handle, 7, GssService::INTEGRITY, b"abcd");
        let (_, rec8, _) = data(&mut c, &handle, 8, GssService::INTEGRITY, b"abcd");
        let mut spliced = xdr::to_bytes(&hdr7).to_vec();
        spliced.extend_from_slice(&rec8[at7..]);
        let (h, _) = reply_of(s.handle(&hdr7, &Bytes::from(spliced), at7, &p, Instant::now()));
        assert!(matches!(
            h.body,
            ReplyBody::Accepted {
                stat: Accepted::Other(AcceptStat::GARBAGE_ARGS),
                ..
            }
        ));
        // Another key cannot forge a header.
        let mut other = FakeInitiator {
            principal: "eve@REALM".into(),
            key: KEY ^ 1,
        }
        .new_context("nfs@host")
        .unwrap();
        let (hdr, rec, at) = data(&mut other, &handle, 9, GssService::NONE, b"abcd");
        assert_eq!(
            auth_error(s.handle(&hdr, &rec, at, &p, Instant::now())),
            AuthStat::RPCSEC_GSS_CREDPROBLEM
        );
    }

    #[test]
    fn window_edges_unknown_handles_destroy_and_maxseq() {
        let s = server(GssConfig {
            window: 4,
            ..GssConfig::default()
        });
        let p = peer(1);
        let (mut c, handle) = establish(&s, &p, "carol@REALM");
        let run = |c: &mut Box<dyn SecContext>, seq| {
            let (hdr, rec, at) = data(c, &handle, seq, GssService::NONE, b"");
            s.handle(&hdr, &rec, at, &p, Instant::now())
        };
        assert!(matches!(run(&mut c, 10), GssOutcome::Data { .. }));
        // 7 is the oldest number the window of 4 still holds; 6 is below.
        assert!(matches!(run(&mut c, 7), GssOutcome::Data { .. }));
        assert!(matches!(run(&mut c, 6), GssOutcome::Drop));
        assert!(matches!(run(&mut c, 7), GssOutcome::Drop));
        let (hdr, rec, at) = data(&mut c, &handle, MAXSEQ, GssService::NONE, b"");
        assert_eq!(
            auth_error(s.handle(&hdr, &rec, at, &p, Instant::now())),
            AuthStat::RPCSEC_GSS_CTXPROBLEM
        );
        let bogus = Bytes::from_static(b"no-such-handle");
        let (hdr, rec, at) = data(&mut c, &bogus, 11, GssService::NONE, b"");
        assert_eq!(
            auth_error(s.handle(&hdr, &rec, at, &p, Instant::now())),
            AuthStat::RPCSEC_GSS_CREDPROBLEM
        );
        // DESTROY answers with the sequence number's MIC, then the
        // context is gone.
        let cred = GssCred {
            proc_: GssProc::RPCSEC_GSS_DESTROY,
            seq_num: 12,
            service: GssService::NONE,
            handle: handle.clone(),
        };
        let (hdr, rec, at) = record(
            1,
            &cred,
            |h| OpaqueAuth {
                flavor: AuthFlavor::RPCSEC_GSS,
                body: Bytes::from(c.get_mic(h).unwrap()),
            },
            &[],
        );
        let (h, _) = reply_of(s.handle(&hdr, &rec, at, &p, Instant::now()));
        let ReplyBody::Accepted { verf, .. } = h.body else {
            panic!()
        };
        c.verify_mic(&12u32.to_be_bytes(), &verf.body).unwrap();
        assert_eq!(s.contexts(), 0);
        assert_eq!(
            auth_error(run(&mut c, 13)),
            AuthStat::RPCSEC_GSS_CREDPROBLEM
        );
    }

    #[test]
    fn failed_init_is_answered_with_the_gss_status_and_holds_nothing() {
        let s = server(GssConfig::default());
        let cred = GssCred {
            proc_: GssProc::RPCSEC_GSS_INIT,
            seq_num: 0,
            service: GssService::NONE,
            handle: Bytes::new(),
        };
        let args = xdr::to_bytes(&GssInitArg {
            gss_token: Bytes::from_static(b"not a token"),
        });
        let (hdr, rec, at) = record(1, &cred, |_| OpaqueAuth::NONE, &args);
        let (_, body) = reply_of(s.handle(&hdr, &rec, at, &peer(1), Instant::now()));
        let res = GssInitRes::decode(&mut Decoder::from_bytes(&body)).unwrap();
        assert!(res.gss_major >> 16 != 0, "{res:?}");
        assert!(res.handle.is_empty());
        assert_eq!(s.contexts(), 0);
        // Truncated arguments: GARBAGE_ARGS.
        let (hdr, rec, at) = record(2, &cred, |_| OpaqueAuth::NONE, &[0, 0, 1]);
        let (h, _) = reply_of(s.handle(&hdr, &rec, at, &peer(1), Instant::now()));
        assert!(matches!(
            h.body,
            ReplyBody::Accepted {
                stat: Accepted::Other(AcceptStat::GARBAGE_ARGS),
                ..
            }
        ));
    }

    /// Hostile client: contexts opened and never used are bounded per
    /// client and in total, counted, and forgotten when idle.
    #[test]
    fn the_context_table_is_bounded_and_idle_contexts_expire() {
        let s = server(GssConfig {
            max_contexts: 5,
            max_contexts_per_client: 3,
            idle_timeout: Duration::from_secs(60),
            window: 16,
        });
        let per_client = CONTEXTS_PER_CLIENT.count();
        let total = CONTEXTS_TOTAL.count();
        for _ in 0..3 {
            establish(&s, &peer(1), "mallory@REALM");
        }
        let try_init = |p: &PeerInfo, now: Instant| {
            let cred = GssCred {
                proc_: GssProc::RPCSEC_GSS_INIT,
                seq_num: 0,
                service: GssService::NONE,
                handle: Bytes::new(),
            };
            let mut c = FakeInitiator {
                principal: "x@REALM".into(),
                key: KEY,
            }
            .new_context("nfs@host")
            .unwrap();
            let args = xdr::to_bytes(&GssInitArg {
                gss_token: Bytes::from(c.step(&[]).unwrap().token),
            });
            let (hdr, rec, at) = record(1, &cred, |_| OpaqueAuth::NONE, &args);
            let (_, body) = reply_of(s.handle(&hdr, &rec, at, p, now));
            GssInitRes::decode(&mut Decoder::from_bytes(&body)).unwrap()
        };
        assert_eq!(try_init(&peer(1), Instant::now()).gss_major, GSS_S_FAILURE);
        assert!(CONTEXTS_PER_CLIENT.count() > per_client);
        assert_eq!(s.contexts(), 3);
        // Other clients fill the table to its total.
        assert_eq!(try_init(&peer(2), Instant::now()).gss_major, 0);
        assert_eq!(try_init(&peer(3), Instant::now()).gss_major, 0);
        assert_eq!(try_init(&peer(4), Instant::now()).gss_major, GSS_S_FAILURE);
        assert!(CONTEXTS_TOTAL.count() > total);
        assert_eq!(s.contexts(), 5);
        // An hour later every context is idle: a new client gets one.
        let later = Instant::now() + Duration::from_secs(61);
        assert_eq!(try_init(&peer(4), later).gss_major, 0);
        assert_eq!(s.contexts(), 1);
    }
}
