//! Shared by the Kerberos tests: a test program that answers with the
//! caller's authenticated principal, and its client call.
#![allow(dead_code, unreachable_pub)]

use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use gss::Krb5Acceptor;
use oncrpc::client::{ReplyHint, RpcCall};
use oncrpc::echo::EchoService;
use oncrpc::gss::{GssConfig, GssServer};
use oncrpc::msg::{AuthStat, Credential, OpaqueAuth};
use oncrpc::{CallContext, ClientTransport, RpcService, Server, ServiceError};
use xdr::{Decoder, Encoder, XdrBuf};

/// The program's number (in the transient range).
pub const WHOAMI_PROG: u32 = 0x2000_0077;

/// Answers every call with the GSS principal it came from (AUTH_TOOWEAK
/// for any other flavor).
pub struct WhoAmI;

impl RpcService for WhoAmI {
    fn program(&self) -> u32 {
        WHOAMI_PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    async fn call(&self, ctx: CallContext, _args: Bytes) -> Result<XdrBuf, ServiceError> {
        let Credential::Gss(id) = ctx.credential else {
            return Err(ServiceError::Auth(AuthStat::AUTH_TOOWEAK));
        };
        let mut out = XdrBuf::new();
        out.put_opaque(id.principal.as_bytes());
        Ok(out)
    }
}

/// The principal the server saw for this call.
pub async fn whoami<T: ClientTransport>(t: &T) -> String {
    let r = t
        .call(RpcCall {
            prog: WHOAMI_PROG,
            vers: 1,
            proc_: 1,
            cred: OpaqueAuth::NONE,
            args: XdrBuf::new(),
            reply_hint: ReplyHint {
                max_reply_len: 1024,
                ddp: None,
            },
        })
        .await
        .unwrap();
    String::from_utf8(Decoder::from_bytes(&r).opaque(1024).unwrap().to_vec()).unwrap()
}

/// An RPC server taking RPCSEC_GSS with Kerberos (keys from the process's
/// keytab) that serves ECHO and [`WhoAmI`]; its GSS context table too.
pub fn krb5_server() -> (Arc<GssServer>, Server) {
    let gss = Arc::new(GssServer::new(
        Arc::new(Krb5Acceptor::new().expect("acceptor credentials from the keytab")),
        GssConfig::default(),
    ));
    let mut server = Server::new().with_gss(Arc::clone(&gss));
    server.register(EchoService::default());
    server.register(WhoAmI);
    (gss, server)
}
