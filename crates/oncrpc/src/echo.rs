//! A small test program for the CLI and the tests: program 0x2000_4E52
//! (in the user-defined range 0x20000000-0x3fffffff, RFC 5531 §8.3),
//! version 1, procedure 0 NULL and procedure 1 ECHO.
//!
//! ```text
//! program NFSRDMA_ECHO {
//!     version ECHO_V1 {
//!         void   NULL(void)        = 0;
//!         opaque ECHO(opaque<>)    = 1;  /* the data is DDP-eligible both ways */
//!     } = 1;
//! } = 0x20004E52;
//! ```

use core::ops::RangeInclusive;

use bytes::Bytes;
use xdr::{Decoder, Encoder, XdrBuf};

use crate::client::{ClientTransport, DdpReplyHint, ReplyHint, RpcCall, RpcError};
use crate::msg::OpaqueAuth;
use crate::server::{CallContext, RpcService, ServiceError};

/// The echo program number.
pub const ECHO_PROGRAM: u32 = 0x2000_4E52;
/// The echo program version.
pub const ECHO_VERSION: u32 = 1;
/// NULL procedure.
pub const PROC_NULL: u32 = 0;
/// ECHO procedure.
pub const PROC_ECHO: u32 = 1;
/// Default largest ECHO payload (16 MiB).
pub const DEFAULT_MAX_ECHO: usize = 16 * 1024 * 1024;

/// The echo service: NULL returns nothing, ECHO returns its argument as a
/// DDP-eligible bulk item (not copied).
#[derive(Debug, Clone)]
pub struct EchoService {
    max_len: usize,
}

impl EchoService {
    /// An echo service accepting payloads up to `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        Self { max_len }
    }
}

impl Default for EchoService {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_ECHO)
    }
}

impl RpcService for EchoService {
    fn program(&self) -> u32 {
        ECHO_PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        ECHO_VERSION..=ECHO_VERSION
    }

    async fn call(&self, ctx: CallContext, args: Bytes) -> Result<XdrBuf, ServiceError> {
        match ctx.proc_ {
            PROC_NULL => Ok(XdrBuf::new()),
            PROC_ECHO => {
                let mut dec = Decoder::from_bytes(&args);
                let data = dec.opaque_bytes(self.max_len)?;
                dec.finish()?;
                let mut out = XdrBuf::new();
                out.put_bulk(data, true);
                Ok(out)
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }
}

/// A typed client for the echo program over any [`ClientTransport`].
#[derive(Debug, Clone)]
pub struct EchoClient<T> {
    transport: T,
    cred: OpaqueAuth,
}

impl<T: ClientTransport> EchoClient<T> {
    /// A client using AUTH_NONE.
    pub fn new(transport: T) -> Self {
        Self {
            transport,
            cred: OpaqueAuth::NONE,
        }
    }

    /// Uses `cred` for subsequent calls.
    pub fn with_cred(mut self, cred: OpaqueAuth) -> Self {
        self.cred = cred;
        self
    }

    /// The underlying transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Calls NULL.
    pub async fn null(&self) -> Result<(), RpcError> {
        let results = self
            .transport
            .call(RpcCall {
                prog: ECHO_PROGRAM,
                vers: ECHO_VERSION,
                proc_: PROC_NULL,
                cred: self.cred.clone(),
                args: XdrBuf::new(),
                reply_hint: ReplyHint {
                    max_reply_len: 64,
                    ddp: None,
                },
            })
            .await?;
        Decoder::new(&results).finish()?;
        Ok(())
    }

    /// Calls ECHO with `data` and returns the echoed bytes.
    pub async fn echo(&self, data: Bytes) -> Result<Bytes, RpcError> {
        let len = data.len();
        let mut args = XdrBuf::new();
        args.put_bulk(data, true);
        let results = self
            .transport
            .call(RpcCall {
                prog: ECHO_PROGRAM,
                vers: ECHO_VERSION,
                proc_: PROC_ECHO,
                cred: self.cred.clone(),
                args,
                reply_hint: ReplyHint {
                    max_reply_len: 64 + xdr::padded_len(len),
                    ddp: Some(DdpReplyHint {
                        position: 4,
                        max_len: len,
                    }),
                },
            })
            .await?;
        let mut dec = Decoder::from_bytes(&results);
        let out = dec.opaque_bytes(len)?;
        dec.finish()?;
        Ok(out)
    }
}
