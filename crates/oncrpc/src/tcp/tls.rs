//! RPC-over-TLS (RFC 9289) on the TCP shells, with rustls: the server
//! answers an AUTH_TLS probe at the start of a connection with STARTTLS
//! and runs the TLS handshake on that connection; the client sends the
//! probe, checks the answer and starts TLS. The probe logic itself is in
//! [`crate::tls`].
//!
//! Bounds: the probe and the handshake together must finish within
//! [`ServerTls::handshake_timeout`] (10 s by default), or the connection is
//! closed and `tls.handshake_timeout` trips; a failed handshake (bad
//! certificate, wrong protocol, no common cipher) trips
//! `tls.handshake_failed`. Connections in the handshake count under the
//! listener's connection caps like any other.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{client, server, TlsAcceptor, TlsConnector};

use crate::limits::Limit;
use crate::record::RecordDecoder;
use crate::tls::{
    check_probe_reply, one_record, peek_probe, probe_call, probe_reply, Peek, TransportSecurity,
    ALPN_SUNRPC, PROBE_RECORD_LEN,
};

static HANDSHAKE_TIMEOUT: Limit = Limit::new("tls.handshake_timeout");
static HANDSHAKE_FAILED: Limit = Limit::new("tls.handshake_failed");

/// Default bound on the probe and the TLS handshake of one connection.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the server looks again at a connection whose first bytes
/// may still become a probe.
const PEEK_PAUSE: Duration = Duration::from_millis(2);

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(invalid(format!("{}: no certificate", path.display())));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| invalid(format!("{}: {e}", path.display())))
}

fn roots(path: &Path) -> io::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path)? {
        roots
            .add(c)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    }
    Ok(roots)
}

/// A listener's TLS settings: its certificate, and optionally the CA its
/// clients' certificates must chain to.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    /// Bound on the probe and the handshake of one connection.
    pub handshake_timeout: Duration,
}

impl core::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ServerTls")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// From a rustls configuration (its ALPN list is set to `sunrpc`,
    /// RFC 9289 §5.2).
    pub fn new(mut config: rustls::ServerConfig) -> Self {
        config.alpn_protocols = vec![ALPN_SUNRPC.to_vec()];
        Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// From PEM files: the server's certificate chain and private key,
    /// and, for mutual TLS, the CA certificates client certificates must
    /// chain to. With `client_ca` a client may still connect without a
    /// certificate (its connection is [`TransportSecurity::Tls`]; exports
    /// with `xprtsec=mtls` refuse it), but one that presents a certificate
    /// the CA did not sign fails the handshake.
    pub fn from_pem(cert: &Path, key: &Path, client_ca: Option<&Path>) -> io::Result<Self> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(ca)?),
                    provider(),
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| invalid(format!("{}: {e}", ca.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| invalid(format!("{}: {e}", cert.display())))?;
        Ok(Self::new(config))
    }

    /// With another bound on the probe and handshake.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }
}

/// What a server connection turned into.
pub(super) enum Upgraded {
    /// No probe came first: plain RPC on the untouched stream.
    Plain(TcpStream),
    /// The client probed and the handshake succeeded.
    Tls(Box<server::TlsStream<TcpStream>>, TransportSecurity),
    /// Sent nothing within the idle timeout.
    Idle,
    /// Closed: the probe or handshake failed or took too long (logged and
    /// counted), or the client left.
    Closed,
}

/// Waits for the first bytes of `stream` (at most `idle`), and when they
/// are an AUTH_TLS probe answers STARTTLS and runs the handshake, all
/// within `tls.handshake_timeout` from the first byte. The bytes of a
/// plain connection are only peeked at, never consumed.
pub(super) async fn accept(
    stream: TcpStream,
    addr: Option<SocketAddr>,
    tls: &ServerTls,
    idle: Option<Duration>,
) -> Upgraded {
    let who = addr.map_or_else(|| "?".into(), |a| a.to_string());
    let mut head = [0u8; PROBE_RECORD_LEN];
    let first = stream.peek(&mut head);
    let n = match idle {
        Some(t) => match tokio::time::timeout(t, first).await {
            Ok(r) => r,
            Err(_) => return Upgraded::Idle,
        },
        None => first.await,
    };
    if !matches!(n, Ok(n) if n > 0) {
        return Upgraded::Closed;
    }
    let deadline = Instant::now() + tls.handshake_timeout;
    let upgrade = async {
        let Some(xid) = wait_for_probe(&stream, &mut head).await? else {
            return Ok(Upgraded::Plain(stream));
        };
        let mut stream = stream;
        stream.read_exact(&mut head).await?;
        stream
            .write_all(&one_record(&probe_reply(xid, true)))
            .await?;
        let tls_stream = tls.acceptor.accept(stream).await?;
        let security = match tls_stream.get_ref().1.peer_certificates() {
            Some(c) if !c.is_empty() => TransportSecurity::MutualTls,
            _ => TransportSecurity::Tls,
        };
        Ok::<_, io::Error>(Upgraded::Tls(Box::new(tls_stream), security))
    };
    match tokio::time::timeout_at(deadline.into(), upgrade).await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => {
            HANDSHAKE_FAILED.trip(format_args!("RPC-over-TLS with {who}: {e}"));
            Upgraded::Closed
        }
        Err(_) => {
            HANDSHAKE_TIMEOUT.trip(format_args!(
                "closed a connection from {who}: AUTH_TLS probe and TLS handshake not done in {:?}",
                tls.handshake_timeout
            ));
            Upgraded::Closed
        }
    }
}

/// Peeks at the first bytes until they are a whole probe (its xid) or
/// cannot be one (`None`).
async fn wait_for_probe(
    stream: &TcpStream,
    head: &mut [u8; PROBE_RECORD_LEN],
) -> io::Result<Option<u32>> {
    let mut seen = 0;
    loop {
        let n = stream.peek(head).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let Some(bytes) = head.get(..n) else {
            return Ok(None);
        };
        match peek_probe(bytes) {
            Peek::Probe { xid } => return Ok(Some(xid)),
            Peek::NotProbe => return Ok(None),
            Peek::NeedMore if n == seen => tokio::time::sleep(PEEK_PAUSE).await,
            Peek::NeedMore => {}
        }
        seen = n;
    }
}

/// A client's TLS settings: the CA that signed the server's certificate,
/// the name to check it against, and optionally a certificate of its own
/// (mutual TLS).
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    /// The program and version the probe names (RFC 9289 §4.1: a NULL
    /// call of the program the connection is for). Default NFS v3.
    pub probe_program: (u32, u32),
    /// Bound on the probe and the handshake.
    pub handshake_timeout: Duration,
}

impl core::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("probe_program", &self.probe_program)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// From a rustls configuration (its ALPN list is set to `sunrpc`) and
    /// the server's name (a DNS name or an IP address).
    pub fn new(mut config: rustls::ClientConfig, server_name: &str) -> io::Result<Self> {
        config.alpn_protocols = vec![ALPN_SUNRPC.to_vec()];
        let server_name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| invalid(format!("server name {server_name:?}: {e}")))?;
        Ok(Self {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            probe_program: (100_003, 3),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        })
    }

    /// From PEM files: the CA certificates the server's must chain to,
    /// and for mutual TLS the client's certificate chain and key.
    pub fn from_pem(
        ca: &Path,
        identity: Option<(&Path, &Path)>,
        server_name: &str,
    ) -> io::Result<Self> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(invalid)?
            .with_root_certificates(roots(ca)?);
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
                .map_err(|e| invalid(format!("{}: {e}", cert.display())))?,
        };
        Self::new(config, server_name)
    }

    /// With the program and version the probe names.
    pub fn with_probe_program(mut self, prog: u32, vers: u32) -> Self {
        self.probe_program = (prog, vers);
        self
    }

    /// Probes `stream`'s server with xid `xid`, and on STARTTLS runs the
    /// handshake, all within [`Self::handshake_timeout`]. Fails (the
    /// client does not fall back to plain RPC) when the server does not
    /// answer STARTTLS or the handshake fails.
    pub(super) async fn connect(
        &self,
        mut stream: TcpStream,
        xid: u32,
    ) -> io::Result<client::TlsStream<TcpStream>> {
        let (prog, vers) = self.probe_program;
        let run = async {
            stream
                .write_all(&one_record(&probe_call(xid, prog, vers)))
                .await?;
            let reply = read_one_record(&mut stream).await?;
            check_probe_reply(&reply, xid)
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionRefused, e))?;
            self.connector
                .connect(self.server_name.clone(), stream)
                .await
        };
        tokio::time::timeout(self.handshake_timeout, run)
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    "AUTH_TLS probe and TLS handshake timed out",
                )
            })?
    }
}

/// The largest answer to a probe read (a reply header with a 400-byte
/// verifier fits).
const MAX_PROBE_REPLY: usize = 1024;

async fn read_one_record(stream: &mut TcpStream) -> io::Result<bytes::Bytes> {
    let mut deframer = RecordDecoder::new(MAX_PROBE_REPLY);
    loop {
        if let Some(r) = deframer
            .next_record()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
        {
            return Ok(r);
        }
        deframer.read_buf().reserve(MAX_PROBE_REPLY);
        if stream.read_buf(deframer.read_buf()).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}
