//! NFS URLs: `nfs://host[:port]/export/path` (TCP) and
//! `nfs+rdma://host[:port]/export/path` (RPC-over-RDMA), with libnfs-style
//! query options `?mountport=N&nfsport=N&version=3`, and for
//! `nfs+rdma://` also `crc=1` (ask for MPA CRC32c, RFC 5044 §4.4).
//!
//! `version=` may be given more than once; each value names what it can:
//! `3`, `4.1`, `4.2` and `4` (the highest NFSv4 minor version the client
//! speaks, 4.2) choose the NFS version (default 3), and on `nfs+rdma://`
//! `1` and `2` choose the RPC-over-RDMA version to start with (version 2
//! falls back to 1 when the server answers ERR_VERS), as they did before
//! NFSv4 was offered: `nfs+rdma://h/e?version=4.1&version=2`.
//!
//! On `nfs://`, `xprtsec=tls` or `xprtsec=mtls` runs the NFS connection
//! over RPC-over-TLS (RFC 9289), as the Linux client's `xprtsec=` mount
//! option: `tls-ca=FILE` (or `$NFSRDMA_TLS_CA`) names the CA certificates
//! the server's certificate must chain to (checked against the URL's
//! host), and for `mtls` `tls-cert=FILE` and `tls-key=FILE` (or
//! `$NFSRDMA_TLS_CERT`, `$NFSRDMA_TLS_KEY`) the client's own. `xprtsec=none`
//! (the default) is plain RPC.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context};

use crate::device::{choose_for_peer, Chosen, DeviceChoice};

/// How an NFS URL reaches its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `nfs://`: ONC RPC over TCP.
    Tcp,
    /// `nfs+rdma://`: RPC-over-RDMA.
    Rdma,
}

/// The transport security a URL asks for (`xprtsec=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum XprtSec {
    /// Plain RPC.
    #[default]
    None,
    /// RPC-over-TLS, the client without a certificate.
    Tls,
    /// RPC-over-TLS with the client's certificate (mutual TLS).
    Mtls,
}

/// A parsed NFS URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NfsUrl {
    pub(crate) scheme: Scheme,
    /// Host name or address (IPv6 without brackets).
    pub(crate) host: String,
    /// NFS port from the authority or `nfsport=`.
    pub(crate) nfs_port: Option<u16>,
    /// MOUNT port from `mountport=`.
    pub(crate) mount_port: Option<u16>,
    /// Absolute, percent-decoded path: the export and the path inside it.
    pub(crate) path: String,
    /// The URL's path ended with `/` (a directory is meant).
    pub(crate) trailing_slash: bool,
    /// `crc=1`: ask for MPA CRC32c on the RDMA connection.
    pub(crate) crc: bool,
    /// `version=2`: start with RPC-over-RDMA version 2.
    pub(crate) rdma_v2: bool,
    /// `version=4.x`: NFSv4 with this minor version; `None` is NFSv3.
    pub(crate) nfs4_minor: Option<u32>,
    /// `device=soft|auto|NAME`: the RDMA device (default soft).
    pub(crate) device: DeviceChoice,
    /// `xprtsec=none|tls|mtls` (`nfs://` only).
    pub(crate) xprtsec: XprtSec,
    /// `tls-ca=FILE`: CA certificates for the server's certificate.
    pub(crate) tls_ca: Option<PathBuf>,
    /// `tls-cert=FILE`: the client's certificate chain (mtls).
    pub(crate) tls_cert: Option<PathBuf>,
    /// `tls-key=FILE`: its private key.
    pub(crate) tls_key: Option<PathBuf>,
    /// `sec=krb5|krb5i|krb5p`: RPCSEC_GSS with Kerberos, the service;
    /// `None` (`sec=sys`, the default) is AUTH_SYS.
    pub(crate) sec: Option<oncrpc::gss::GssService>,
    /// `nconnect=N` (1 to 16, default 1): NFSv3 over TCP opens N NFS
    /// connections and spreads its calls over them (nfs(5)).
    pub(crate) nconnect: usize,
}

/// The highest NFSv4 minor version the client speaks (`version=4`).
pub(crate) const NFS4_MAX_MINOR: u32 = 2;

/// `nconnect=N`: 1 to [`nfs_client::MAX_NCONNECT`] (16), as Linux's
/// mount refuses any other count.
pub(crate) fn nconnect(v: &str) -> anyhow::Result<usize> {
    let n: usize = v
        .parse()
        .map_err(|_| anyhow!("nconnect={v:?}: expected a number of connections"))?;
    Ok(nfs_client::nconnect::check_nconnect(n)?)
}

/// A `cp`/`ls` operand: a local path or an NFS URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    Local(PathBuf),
    Remote(NfsUrl),
}

impl Location {
    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        if s.contains("://") {
            Ok(Self::Remote(NfsUrl::parse(s)?))
        } else {
            Ok(Self::Local(PathBuf::from(s)))
        }
    }
}

fn percent_decode(s: &str) -> anyhow::Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).context("path is not UTF-8 after percent-decoding")
}

fn port(s: &str, what: &str) -> anyhow::Result<u16> {
    match s.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => bail!("bad {what} {s:?}: expected 1-65535"),
    }
}

impl NfsUrl {
    pub(crate) fn parse(s: &str) -> anyhow::Result<Self> {
        let (scheme, rest) = if let Some(r) = s.strip_prefix("nfs://") {
            (Scheme::Tcp, r)
        } else if let Some(r) = s.strip_prefix("nfs+rdma://") {
            (Scheme::Rdma, r)
        } else {
            bail!("{s:?}: expected nfs://host[:port]/path or nfs+rdma://host[:port]/path");
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        let (host, nfs_port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| anyhow!("{s:?}: unclosed '[' in host"))?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(port(p, "port")?)),
                None if after.is_empty() => (h, None),
                None => bail!("{s:?}: junk after ']'"),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(port(p, "port")?)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            bail!("{s:?}: no host");
        }
        let mut url = Self {
            scheme,
            host: host.to_owned(),
            nfs_port,
            mount_port: None,
            path: percent_decode(path)?,
            trailing_slash: path.len() > 1 && path.ends_with('/'),
            crc: false,
            rdma_v2: false,
            nfs4_minor: None,
            device: DeviceChoice::Soft,
            xprtsec: XprtSec::None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            sec: None,
            nconnect: 1,
        };
        for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("{s:?}: query option {kv:?} has no value"))?;
            match k {
                "mountport" => url.mount_port = Some(port(v, "mountport")?),
                "nfsport" => url.nfs_port = Some(port(v, "nfsport")?),
                // NFS versions 3 and 4.x; over RDMA, 1 and 2 name the
                // RPC-over-RDMA version instead.
                "version" if v == "3" => url.nfs4_minor = None,
                "version" if v == "4" => url.nfs4_minor = Some(NFS4_MAX_MINOR),
                "version" if v == "4.1" => url.nfs4_minor = Some(1),
                "version" if v == "4.2" => url.nfs4_minor = Some(2),
                "version" if scheme == Scheme::Rdma && (v == "1" || v == "2") => {
                    url.rdma_v2 = v == "2";
                }
                "version" => bail!(
                    "version {v} is not supported (NFS 3, 4, 4.1 or 4.2; RPC-over-RDMA 1 or 2 with nfs+rdma://)"
                ),
                "crc" if scheme == Scheme::Rdma => {
                    url.crc = match v {
                        "1" | "on" | "true" => true,
                        "0" | "off" | "false" => false,
                        _ => bail!("{s:?}: crc={v:?}: expected 0 or 1"),
                    }
                }
                "crc" => bail!("{s:?}: crc= applies to nfs+rdma:// only"),
                "device" if scheme == Scheme::Rdma => {
                    url.device = v.parse().with_context(|| format!("{s:?}: device="))?;
                }
                "device" => bail!("{s:?}: device= applies to nfs+rdma:// only"),
                "xprtsec" | "tls-ca" | "tls-cert" | "tls-key" if scheme == Scheme::Rdma => {
                    bail!("{s:?}: {k}= applies to nfs:// only (RPC-over-TLS runs on TCP)")
                }
                "xprtsec" => {
                    url.xprtsec = match v {
                        "none" => XprtSec::None,
                        "tls" => XprtSec::Tls,
                        "mtls" => XprtSec::Mtls,
                        _ => bail!("{s:?}: xprtsec={v:?}: expected none, tls or mtls"),
                    }
                }
                "sec" => {
                    use oncrpc::gss::GssService;
                    url.sec = match v {
                        "sys" => None,
                        "krb5" => Some(GssService::NONE),
                        "krb5i" => Some(GssService::INTEGRITY),
                        "krb5p" => Some(GssService::PRIVACY),
                        _ => bail!("{s:?}: sec={v:?}: expected sys, krb5, krb5i or krb5p"),
                    }
                }
                "tls-ca" => url.tls_ca = Some(PathBuf::from(percent_decode(v)?)),
                "tls-cert" => url.tls_cert = Some(PathBuf::from(percent_decode(v)?)),
                "tls-key" => url.tls_key = Some(PathBuf::from(percent_decode(v)?)),
                "nconnect" => url.nconnect = nconnect(v).with_context(|| format!("{s:?}"))?,
                _ => bail!(
                    "{s:?}: unknown option {k:?} (known: mountport, nfsport, version, crc, device, xprtsec, tls-ca, tls-cert, tls-key, sec, nconnect)"
                ),
            }
        }
        Ok(url)
    }

    /// The TLS settings `xprtsec=` asks for (files from the URL, else
    /// from `$NFSRDMA_TLS_CA`, `$NFSRDMA_TLS_CERT`, `$NFSRDMA_TLS_KEY`), or
    /// `None` for plain RPC.
    pub(crate) fn client_tls(&self) -> anyhow::Result<Option<oncrpc::tcp::ClientTls>> {
        let file = |given: &Option<PathBuf>, var: &str, opt: &str| {
            given
                .clone()
                .or_else(|| std::env::var_os(var).map(PathBuf::from))
                .ok_or_else(|| {
                    anyhow!(
                        "xprtsec={:?} needs {opt}=FILE in the URL or ${var}",
                        self.xprtsec
                    )
                })
        };
        let identity = match self.xprtsec {
            XprtSec::None => return Ok(None),
            XprtSec::Tls => None,
            XprtSec::Mtls => Some((
                file(&self.tls_cert, "NFSRDMA_TLS_CERT", "tls-cert")?,
                file(&self.tls_key, "NFSRDMA_TLS_KEY", "tls-key")?,
            )),
        };
        let ca = file(&self.tls_ca, "NFSRDMA_TLS_CA", "tls-ca")?;
        let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        let tls = oncrpc::tcp::ClientTls::from_pem(&ca, identity, &self.host)
            .context("loading the TLS certificates")?;
        Ok(Some(tls))
    }

    /// The last path component, if any.
    pub(crate) fn file_name(&self) -> Option<&str> {
        self.path.split('/').rfind(|c| !c.is_empty())
    }
}

/// A mounted export over either transport.
pub(crate) enum Remote {
    /// Over ONC RPC on TCP.
    Tcp(nfs_client::TcpMount),
    /// Over RPC-over-RDMA on the software iWARP device.
    Rdma(nfs_client::RdmaMount<softrnic::SoftDevice>),
    /// Over RPC-over-RDMA on an RDMA NIC through rdma-core.
    Verbs(nfs_client::RdmaMount<verbs::VerbsDevice>),
}

/// Runs `$body` with `$m` bound to the [`nfs_client::Mounted`] inside a
/// [`Remote`], whichever its transport (the body is instantiated once per
/// transport).
macro_rules! with_remote {
    ($remote:expr, |$m:ident| $body:expr) => {
        match $remote {
            $crate::url::Remote::Tcp($m) => $body,
            $crate::url::Remote::Rdma($m) => $body,
            $crate::url::Remote::Verbs($m) => $body,
        }
    };
}
pub(crate) use with_remote;

/// A software iWARP device for one client run; its STag keys differ
/// between runs.
pub(crate) fn soft_device(crc: bool) -> softrnic::SoftDevice {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()).rotate_left(32);
    softrnic::SoftDevice::new(
        softrnic::SoftConfig {
            crc,
            ..softrnic::SoftConfig::default()
        },
        seed,
    )
}

/// Mounts the export holding `url`'s path over the URL's transport:
/// `nfs://` over TCP, `nfs+rdma://` with MOUNT over TCP and NFS over
/// RPC-over-RDMA on a [`softrnic::SoftDevice`] (port 20049 unless given).
pub(crate) async fn open(url: &NfsUrl, io: nfs_client::IoOptions) -> anyhow::Result<Remote> {
    if let Some(minor) = url.nfs4_minor {
        bail!("this command speaks NFSv3 only (version=4.{minor} works with ls, cat and cp)");
    }
    if url.sec.is_some() {
        bail!("this command speaks AUTH_SYS only (sec=krb5* works with ls, cat and cp)");
    }
    match url.scheme {
        Scheme::Tcp => connect(url, io).await.map(Remote::Tcp),
        Scheme::Rdma => {
            if url.nconnect > 1 {
                // As Linux's NFSv4 client long did over RDMA: one
                // connection, the option ignored (docs/client.md).
                tracing::warn!(
                    nconnect = url.nconnect,
                    "nconnect is not spread over RDMA: one connection"
                );
            }
            let target = nfs_client::RdmaTarget {
                host: url.host.clone(),
                rdma_port: url.nfs_port,
                mount_port: url.mount_port,
                path: url.path.clone(),
            };
            let opts = rdma_options(url, io);
            let what = || format!("mounting {}:{} over RDMA", url.host, url.path);
            let peer = match url.device {
                DeviceChoice::Auto => peer_ip(&url.host),
                _ => None,
            };
            match choose_for_peer(&url.device, peer, seed())? {
                Chosen::Soft => nfs_client::connect_rdma(&soft_device(url.crc), &target, &opts)
                    .await
                    .map(Remote::Rdma)
                    .with_context(what),
                Chosen::Verbs(dev) => {
                    // Regions of user memory on a NIC are not remotely
                    // invalidatable everywhere: do not offer it.
                    let opts = nfs_client::RdmaOptions {
                        send_with_invalidate: false,
                        ..opts
                    };
                    nfs_client::connect_rdma(&dev, &target, &opts)
                        .await
                        .map(Remote::Verbs)
                        .with_context(what)
                }
            }
        }
    }
}

/// The RPC-over-RDMA settings of `url` (its `version=1|2`).
pub(crate) fn rdma_options(url: &NfsUrl, io: nfs_client::IoOptions) -> nfs_client::RdmaOptions {
    nfs_client::RdmaOptions {
        io,
        version: if url.rdma_v2 {
            nfs_client::rpcrdma::plan::Version::V2
        } else {
            nfs_client::rpcrdma::plan::Version::V1
        },
        ..nfs_client::RdmaOptions::default()
    }
}

/// The server's address, for `device=auto` (the device that routes to it).
pub(crate) fn peer_ip(host: &str) -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    host.parse()
        .ok()
        .or_else(|| (host, 0).to_socket_addrs().ok()?.next().map(|a| a.ip()))
}

pub(crate) fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()).rotate_left(32)
}

/// Mounts the export holding `url`'s path over TCP. Commands that take
/// either transport use [`open`]; this one refuses `nfs+rdma://`.
pub(crate) async fn connect(
    url: &NfsUrl,
    io: nfs_client::IoOptions,
) -> anyhow::Result<nfs_client::TcpMount> {
    if url.scheme == Scheme::Rdma {
        bail!(
            "this command runs over TCP only: use nfs:// (ls, cat, cp and bench take nfs+rdma://)"
        );
    }
    let target = nfs_client::TcpTarget {
        host: url.host.clone(),
        nfs_port: url.nfs_port,
        mount_port: url.mount_port,
        path: url.path.clone(),
    };
    let opts = nfs_client::TcpOptions {
        io,
        tls: url.client_tls()?,
        nconnect: url.nconnect,
        ..nfs_client::TcpOptions::default()
    };
    nfs_client::connect_tcp(&target, &opts)
        .await
        .with_context(|| format!("mounting {}:{}", url.host, url.path))
}

/// `--in-flight` and `--block-size`, shared by the transfer commands.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct IoArgs {
    /// READs or WRITEs kept in flight at once.
    #[arg(long, default_value_t = 16)]
    pub(crate) in_flight: usize,
    /// READ/WRITE size in bytes (suffixes k, m); default: the server's
    /// preferred size, capped by its maximum.
    #[arg(long, value_parser = parse_size)]
    pub(crate) block_size: Option<u32>,
}

impl IoArgs {
    pub(crate) fn options(&self) -> nfs_client::IoOptions {
        nfs_client::IoOptions {
            in_flight: self.in_flight.max(1),
            block_size: self.block_size,
            ..nfs_client::IoOptions::default()
        }
    }
}

/// `Ok(())` when `r` failed only because standard output was closed
/// (`nfsrdma ls URL | head`): that ends the command quietly.
pub(crate) fn quiet_broken_pipe(r: anyhow::Result<()>) -> anyhow::Result<()> {
    match r {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        r => r,
    }
}

/// Parses `4096`, `64k`, `1m`.
pub(crate) fn parse_size(s: &str) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = match lower.strip_suffix('k') {
        Some(n) => (n, 1024u64),
        None => match lower.strip_suffix('m') {
            Some(n) => (n, 1 << 20),
            None => (lower.as_str(), 1),
        },
    };
    let v = num
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad size {s:?}"))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn parses_host_port_path_and_options() {
        let u = NfsUrl::parse("nfs://server:2050/export/a%20b/c?mountport=20048").unwrap();
        assert_eq!(u.scheme, Scheme::Tcp);
        assert_eq!(u.host, "server");
        assert_eq!(u.nfs_port, Some(2050));
        assert_eq!(u.mount_port, Some(20048));
        assert_eq!(u.path, "/export/a b/c");
        assert_eq!(u.file_name(), Some("c"));
        assert!(!u.trailing_slash);
    }

    #[test]
    fn nconnect_is_1_to_16() {
        let n = |u: &str| NfsUrl::parse(u).map(|u| u.nconnect);
        assert_eq!(n("nfs://h/e").unwrap(), 1);
        assert_eq!(n("nfs://h/e?nconnect=4").unwrap(), 4);
        assert_eq!(n("nfs+rdma://h/e?nconnect=16").unwrap(), 16);
        for bad in ["0", "17", "-1", "four"] {
            assert!(n(&format!("nfs://h/e?nconnect={bad}")).is_err(), "{bad}");
        }
    }

    #[test]
    fn sec_asks_for_kerberos_on_both_transports() {
        use oncrpc::gss::GssService;
        let sec = |u: &str| NfsUrl::parse(u).unwrap().sec;
        assert_eq!(sec("nfs://h/e"), None);
        assert_eq!(sec("nfs://h/e?sec=sys"), None);
        assert_eq!(sec("nfs://h/e?sec=krb5"), Some(GssService::NONE));
        assert_eq!(sec("nfs://h/e?sec=krb5i"), Some(GssService::INTEGRITY));
        assert_eq!(
            sec("nfs://h/e?sec=krb5p&version=4.1"),
            Some(GssService::PRIVACY)
        );
        assert_eq!(sec("nfs+rdma://h/e?sec=sys"), None);
        assert_eq!(
            sec("nfs+rdma://h/e?sec=krb5p&version=2"),
            Some(GssService::PRIVACY)
        );
        for bad in [
            "nfs://h/e?sec=krb4",
            "nfs://h/e?sec=",
            "nfs+rdma://h/e?sec=krb6",
        ] {
            assert!(NfsUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn xprtsec_asks_for_tls_on_tcp_only() {
        let u = NfsUrl::parse(
            "nfs://h/e?xprtsec=mtls&tls-ca=/c%20a.pem&tls-cert=/m.pem&tls-key=/m.key",
        )
        .unwrap();
        assert_eq!(u.xprtsec, XprtSec::Mtls);
        assert_eq!(u.tls_ca.as_deref(), Some(Path::new("/c a.pem")));
        assert_eq!(u.tls_cert.as_deref(), Some(Path::new("/m.pem")));
        assert_eq!(u.tls_key.as_deref(), Some(Path::new("/m.key")));
        assert_eq!(NfsUrl::parse("nfs://h/e").unwrap().xprtsec, XprtSec::None);
        assert!(NfsUrl::parse("nfs://h/e")
            .unwrap()
            .client_tls()
            .unwrap()
            .is_none());
        let u = NfsUrl::parse("nfs://h/e?xprtsec=tls&tls-ca=/nonexistent/ca.pem").unwrap();
        assert!(u.client_tls().is_err(), "a missing CA file is an error");
        for bad in [
            "nfs://h/e?xprtsec=ssl",
            "nfs+rdma://h/e?xprtsec=tls",
            "nfs+rdma://h/e?tls-ca=/x",
        ] {
            assert!(NfsUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn parses_rdma_ipv6_and_defaults() {
        let u = NfsUrl::parse("nfs+rdma://[::1]/x/").unwrap();
        assert_eq!(u.scheme, Scheme::Rdma);
        assert_eq!(u.host, "::1");
        assert_eq!(u.nfs_port, None);
        assert!(u.trailing_slash);
        let u = NfsUrl::parse("nfs://h?nfsport=7&version=3").unwrap();
        assert_eq!((u.path.as_str(), u.nfs_port), ("/", Some(7)));
        assert!(!u.crc && !u.rdma_v2);
    }

    #[test]
    fn rdma_urls_take_crc_and_transport_version() {
        let u = NfsUrl::parse("nfs+rdma://h:20050/e/f?mountport=20048&crc=1&version=2").unwrap();
        assert_eq!(u.scheme, Scheme::Rdma);
        assert_eq!((u.nfs_port, u.mount_port), (Some(20050), Some(20048)));
        assert!(u.crc && u.rdma_v2);
        let u = NfsUrl::parse("nfs+rdma://h/e?crc=0&version=1").unwrap();
        assert!(!u.crc && !u.rdma_v2);
        for bad in [
            "nfs://h/e?crc=1",
            "nfs://h/e?version=2",
            "nfs+rdma://h/e?version=4.3",
            "nfs+rdma://h/e?crc=yes",
        ] {
            assert!(NfsUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn version_names_the_nfs_version_or_over_rdma_the_transport_one() {
        let v = |s: &str| {
            let u = NfsUrl::parse(s).unwrap();
            (u.nfs4_minor, u.rdma_v2)
        };
        assert_eq!(v("nfs://h/e"), (None, false));
        assert_eq!(v("nfs://h/e?version=3"), (None, false));
        assert_eq!(v("nfs://h/e?version=4.1"), (Some(1), false));
        assert_eq!(v("nfs://h/e?version=4.2"), (Some(2), false));
        assert_eq!(v("nfs://h/e?version=4"), (Some(NFS4_MAX_MINOR), false));
        assert_eq!(v("nfs+rdma://h/e?version=4.1"), (Some(1), false));
        assert_eq!(v("nfs+rdma://h/e?version=2"), (None, true));
        assert_eq!(v("nfs+rdma://h/e?version=4.1&version=2"), (Some(1), true));
        assert_eq!(v("nfs+rdma://h/e?version=1&version=4"), (Some(2), false));
        assert_eq!(v("nfs://h/e?version=4.1&version=3"), (None, false));
        let e = NfsUrl::parse("nfs://h/e?version=2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("RPC-over-RDMA 1 or 2 with nfs+rdma://"), "{e}");
    }

    #[test]
    fn rejects_bad_urls() {
        for bad in [
            "http://h/x",
            "nfs:///x",
            "nfs://h:0/x",
            "nfs://h:70000/x",
            "nfs://h/x?foo=1",
            "nfs://h/x?version=4.0",
            "nfs://h/x?version=5",
            "nfs://h/%zz",
            "nfs://[::1/x",
        ] {
            assert!(NfsUrl::parse(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn sizes_take_k_and_m_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("5000m").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn location_tells_local_from_remote() {
        assert!(matches!(
            Location::parse("/tmp/x").unwrap(),
            Location::Local(_)
        ));
        assert!(matches!(
            Location::parse("nfs://h/x").unwrap(),
            Location::Remote(_)
        ));
        assert!(Location::parse("ftp://h/x").is_err());
    }
}
