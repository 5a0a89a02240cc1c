//! The client side of RPCSEC_GSS version 1 (RFC 2203): context creation
//! through the mechanism's initiator (INIT, CONTINUE_INIT), then every
//! call signed, its arguments protected for the service and its reply
//! checked, over any [`ClientTransport`] that can sign calls.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use xdr::{Decoder, XdrBuf};

use super::mech::{GssError, Initiator, SecContext};
use super::server::{protect_body, unprotect_body, BodyError, REPLY_OVERHEAD};
use super::{GssCred, GssInitArg, GssInitRes, GssProc, GssService, MAXSEQ};
use crate::client::{CallSigner, ClientTransport, ReplyHint, RpcCall, RpcError};
use crate::msg::{AuthFlavor, OpaqueAuth};

fn gss_err(e: &GssError) -> RpcError {
    tracing::debug!(error = %e, "RPCSEC_GSS");
    RpcError::Gss {
        major: e.major,
        minor: e.minor,
    }
}

fn body_err(e: &BodyError) -> RpcError {
    tracing::debug!(error = %e, "RPCSEC_GSS reply body refused");
    match e {
        BodyError::Mechanism(g) => gss_err(g),
        _ => RpcError::Gss {
            major: super::mech::GSS_S_DEFECTIVE_TOKEN,
            minor: 0,
        },
    }
}

struct Context {
    ctx: Mutex<Box<dyn SecContext>>,
    handle: Bytes,
    next_seq: AtomicU32,
    window: u32,
}

impl Context {
    fn lock(&self) -> MutexGuard<'_, Box<dyn SecContext>> {
        self.ctx.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Context {
    fn next_seq(&self) -> Result<u32, RpcError> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        if seq >= MAXSEQ {
            // RFC 2203 §5.3.3.1: the context is used up.
            return Err(RpcError::Gss {
                major: super::mech::GSS_S_FAILURE,
                minor: 0,
            });
        }
        Ok(seq)
    }

    fn credential(&self, proc_: GssProc, service: GssService, seq: u32) -> OpaqueAuth {
        OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: xdr::to_bytes(&GssCred {
                proc_,
                seq_num: seq,
                service,
                handle: self.handle.clone(),
            }),
        }
    }
}

/// Sequence numbers a call's transmissions carried that a reply may
/// answer (Linux keeps 3); older ones are forgotten.
const SEQS_KEPT: usize = 4;

#[derive(Default)]
struct Seqs {
    /// Oldest first.
    sent: Vec<u32>,
    /// The one the reply's verifier proved.
    answered: Option<u32>,
}

/// Signs one DATA or DESTROY call: the header's MIC as verifier
/// (RFC 2203 §5.3.1), and the reply's verifier must be the MIC of the
/// call's sequence number (§5.3.3.2). Every retransmission takes a new
/// sequence number and protects the arguments again for it (§5.3.3.1);
/// the reply may answer any transmission, so its verifier is checked
/// against each number sent (the RFC's suggestion) and the body unwrapped
/// with the one that matched.
struct DataSigner {
    context: Arc<Context>,
    proc_: GssProc,
    service: GssService,
    /// The arguments before protection, to protect again.
    args: XdrBuf,
    seqs: Mutex<Seqs>,
}

impl DataSigner {
    fn new(context: &Arc<Context>, proc_: GssProc, service: GssService, seq: u32) -> Self {
        Self {
            context: Arc::clone(context),
            proc_,
            service,
            args: XdrBuf::new(),
            seqs: Mutex::new(Seqs {
                sent: vec![seq],
                answered: None,
            }),
        }
    }

    fn seqs(&self) -> MutexGuard<'_, Seqs> {
        self.seqs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sequence number the reply answered.
    fn answered(&self) -> Option<u32> {
        self.seqs().answered
    }
}

impl CallSigner for DataSigner {
    fn verifier(&self, header: &[u8]) -> Result<OpaqueAuth, RpcError> {
        let mic = self
            .context
            .lock()
            .get_mic(header)
            .map_err(|e| gss_err(&e))?;
        Ok(OpaqueAuth {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: Bytes::from(mic),
        })
    }

    fn check_reply(&self, verf: &OpaqueAuth) -> Result<(), RpcError> {
        if verf.flavor != AuthFlavor::RPCSEC_GSS {
            return Err(RpcError::BadReplyVerifier);
        }
        let mut seqs = self.seqs();
        let mut ctx = self.context.lock();
        let hit = seqs
            .sent
            .iter()
            .rev()
            .copied()
            .find(|seq| ctx.verify_mic(&seq.to_be_bytes(), &verf.body).is_ok());
        seqs.answered = hit;
        hit.map(|_| ()).ok_or(RpcError::BadReplyVerifier)
    }

    fn retransmission(&self) -> Result<Option<(OpaqueAuth, XdrBuf)>, RpcError> {
        let seq = self.context.next_seq()?;
        let args = if self.service == GssService::NONE || self.proc_ != GssProc::RPCSEC_GSS_DATA {
            self.args.clone()
        } else {
            protect_body(&mut **self.context.lock(), self.service, seq, &self.args)
                .map_err(|e| gss_err(&e))?
        };
        let mut seqs = self.seqs();
        if seqs.sent.len() == SEQS_KEPT {
            seqs.sent.remove(0);
        }
        seqs.sent.push(seq);
        let cred = self.context.credential(self.proc_, self.service, seq);
        Ok(Some((cred, args)))
    }
}

/// Context creation calls carry an AUTH_NONE verifier (RFC 2203 §5.2.2);
/// the final reply's verifier is kept to check once the window is known.
#[derive(Default)]
struct InitSigner {
    reply: Mutex<Option<OpaqueAuth>>,
}

impl CallSigner for InitSigner {
    fn verifier(&self, _header: &[u8]) -> Result<OpaqueAuth, RpcError> {
        Ok(OpaqueAuth::NONE)
    }

    fn check_reply(&self, verf: &OpaqueAuth) -> Result<(), RpcError> {
        *self.reply.lock().unwrap_or_else(|p| p.into_inner()) = Some(verf.clone());
        Ok(())
    }
}

/// A client transport whose calls run under one RPCSEC_GSS context.
pub struct GssClient<T> {
    inner: T,
    service: GssService,
    context: Arc<Context>,
    prog: u32,
    vers: u32,
}

impl<T> core::fmt::Debug for GssClient<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("GssClient")
            .field("service", &self.service.0)
            .field("window", &self.context.window)
            .finish()
    }
}

/// `GSS_S_COMPLETE` and the routine-error mask of a major status
/// (RFC 2203 Appendix A): the error codes sit in bits 16-23 and 24-31.
fn is_gss_error(major: u32) -> bool {
    major >> 16 != 0
}

impl<T: ClientTransport> GssClient<T> {
    /// Creates a context with the server behind `inner` (RFC 2203 §5.2):
    /// the initiator's tokens go in INIT / CONTINUE_INIT calls to the
    /// NULL procedure of program `prog` version `vers`, until both sides
    /// are complete; the final reply's verifier must be the MIC of the
    /// window (§5.2.3.1.1). `target` is the server's host-based service
    /// name (`nfs@host`).
    pub async fn establish(
        inner: T,
        initiator: &dyn Initiator,
        target: &str,
        prog: u32,
        vers: u32,
        service: GssService,
    ) -> Result<Self, RpcError> {
        let mut ctx = initiator.new_context(target).map_err(|e| gss_err(&e))?;
        let mut step = ctx.step(&[]).map_err(|e| gss_err(&e))?;
        let mut handle = Bytes::new();
        let mut proc_ = GssProc::RPCSEC_GSS_INIT;
        // Kerberos takes one round trip; a bound on rounds keeps a server
        // that always asks for more from holding the client.
        for _ in 0..8 {
            let cred = GssCred {
                proc_,
                seq_num: 0,
                service,
                handle: handle.clone(),
            };
            let call = RpcCall {
                prog,
                vers,
                proc_: 0,
                cred: OpaqueAuth {
                    flavor: AuthFlavor::RPCSEC_GSS,
                    body: xdr::to_bytes(&cred),
                },
                args: xdr::to_xdr_buf(&GssInitArg {
                    gss_token: Bytes::from(core::mem::take(&mut step.token)),
                }),
                reply_hint: ReplyHint {
                    max_reply_len: super::MAX_GSS_TOKEN + 1024,
                    ddp: None,
                },
            };
            let signer = Arc::new(InitSigner::default());
            let results = inner.call_signed(call, signer.clone()).await?;
            let mut dec = Decoder::from_bytes(&results);
            let res = GssInitRes::decode(&mut dec)?;
            if is_gss_error(res.gss_major) {
                return Err(RpcError::Gss {
                    major: res.gss_major,
                    minor: res.gss_minor,
                });
            }
            handle = res.handle;
            if !res.gss_token.is_empty() {
                step = ctx.step(&res.gss_token).map_err(|e| gss_err(&e))?;
            }
            if res.gss_major == 0 {
                if !step.complete {
                    return Err(RpcError::Gss {
                        major: super::mech::GSS_S_DEFECTIVE_TOKEN,
                        minor: 0,
                    });
                }
                let verf = signer
                    .reply
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                let ok = verf.is_some_and(|v| {
                    v.flavor == AuthFlavor::RPCSEC_GSS
                        && ctx
                            .verify_mic(&res.seq_window.to_be_bytes(), &v.body)
                            .is_ok()
                });
                if !ok {
                    return Err(RpcError::BadReplyVerifier);
                }
                return Ok(Self {
                    inner,
                    service,
                    context: Arc::new(Context {
                        ctx: Mutex::new(ctx),
                        handle,
                        next_seq: AtomicU32::new(1),
                        window: res.seq_window,
                    }),
                    prog,
                    vers,
                });
            }
            proc_ = GssProc::RPCSEC_GSS_CONTINUE_INIT;
        }
        Err(RpcError::Gss {
            major: super::mech::GSS_S_FAILURE,
            minor: 0,
        })
    }

    /// The transport underneath.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The service calls are protected with.
    pub fn service(&self) -> GssService {
        self.service
    }

    /// The sequence window the server keeps (RFC 2203 §5.2.3.1): keep at
    /// most this many calls in flight, or the oldest may be dropped.
    pub fn window(&self) -> u32 {
        self.context.window
    }

    async fn protected_call(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let seq = self.context.next_seq()?;
        let protected = self.service != GssService::NONE;
        let mut signer =
            DataSigner::new(&self.context, GssProc::RPCSEC_GSS_DATA, self.service, seq);
        let args = if protected {
            let args = protect_body(&mut **self.context.lock(), self.service, seq, &call.args)
                .map_err(|e| gss_err(&e))?;
            signer.args = call.args;
            args
        } else {
            signer.args = call.args.clone();
            call.args
        };
        // RFC 8166 §9.2.2: with integrity or privacy nothing in the reply
        // is DDP-eligible; every reply is larger by the verifier and the
        // protection.
        let reply_hint = ReplyHint {
            max_reply_len: call.reply_hint.max_reply_len + REPLY_OVERHEAD,
            ddp: if protected { None } else { call.reply_hint.ddp },
        };
        let call = RpcCall {
            cred: self
                .context
                .credential(GssProc::RPCSEC_GSS_DATA, self.service, seq),
            args,
            reply_hint,
            ..call
        };
        let signer = Arc::new(signer);
        let results = self.inner.call_signed(call, signer.clone()).await?;
        if !protected {
            return Ok(results);
        }
        // The body is protected with the sequence number of the
        // transmission the reply answers (RFC 2203 §5.3.3.1).
        let seq = signer.answered().unwrap_or(seq);
        unprotect_body(&mut **self.context.lock(), self.service, seq, &results)
            .map_err(|e| body_err(&e))
    }

    /// Destroys the context on the server (RFC 2203 §5.4).
    pub async fn destroy(&self) -> Result<(), RpcError> {
        let seq = self.context.next_seq()?;
        let call = RpcCall {
            prog: self.prog,
            vers: self.vers,
            proc_: 0,
            cred: self
                .context
                .credential(GssProc::RPCSEC_GSS_DESTROY, self.service, seq),
            args: xdr::XdrBuf::new(),
            reply_hint: ReplyHint {
                max_reply_len: REPLY_OVERHEAD,
                ddp: None,
            },
        };
        let signer = Arc::new(DataSigner::new(
            &self.context,
            GssProc::RPCSEC_GSS_DESTROY,
            self.service,
            seq,
        ));
        self.inner.call_signed(call, signer).await.map(|_| ())
    }
}

impl<T: ClientTransport> ClientTransport for GssClient<T> {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl core::future::Future<Output = Result<Bytes, RpcError>> + Send {
        self.protected_call(call)
    }
}
