//! The exports table in exports(5) syntax, and which options apply to a
//! client address.
//!
//! A file holds one export per line:
//!
//! ```text
//! # comment
//! /srv/data   127.0.0.1(rw) 10.0.0.0/8(ro,all_squash,anonuid=1000) *.lan(ro)
//! "/srv/with space"  -rw,no_root_squash  192.168.1.7  fd00::/8(ro)
//! /srv/pub    (ro,sec=sys:none)
//! ```
//!
//! - The path comes first (double quotes allow spaces); then client
//!   specifications, each optionally followed, without a space, by an
//!   option list in parentheses. A parenthesised list with no client
//!   before it names every client (`*`), as in exports(5); beware that
//!   `host (rw)` therefore means "host with the defaults, and everyone
//!   read-write". `-opts` sets default options for the clients after it.
//!   A line ending in `\` continues on the next; `#` starts a comment.
//! - Clients: an IP address (v4 or v6), a network as `addr/prefix` or
//!   `addr/netmask`, `*` (everyone), or a host name. Host names are
//!   resolved once, when the table is loaded ([`Exports::resolve_hosts`]);
//!   a name that does not resolve matches no one (with a warning), and a
//!   later DNS change needs a restart. Wildcard host names (`*.lan`) and
//!   netgroups (`@group`) are parse errors.
//! - Options (exports(5)): `ro` (the default) / `rw`; `root_squash` (the
//!   default) / `no_root_squash` / `all_squash` / `no_all_squash`;
//!   `anonuid=N` / `anongid=N` (default 65534); `sec=sys`, `sec=none` or
//!   both (`sec=sys:none`, default `sys`); `sec=krb5`, `krb5i`, `krb5p`
//!   (RPCSEC_GSS with Kerberos, RFC 2203 / RFC 2623; the server needs a
//!   keytab, docs/security.md), any list of them in order of preference
//!   (`sec=krb5p:krb5i:sys`). Any other flavor is a parse error naming
//!   the line.
//!   `xprtsec=` lists the transport security a client's connection may
//!   have, as Linux's exports(5): `none` (no TLS), `tls` (RFC 9289 TLS
//!   without a client certificate), `mtls` (TLS with a verified client
//!   certificate), joined with `:`; default all three. A connection
//!   whose kind is not listed is refused (NFSv3 NFS3ERR_ACCES, NFSv4
//!   NFS4ERR_WRONGSEC); RPC-over-RDMA connections are `none`. The
//!   options that change nothing here (`sync`, `async`, `secure`,
//!   `insecure`, `subtree_check`, `no_subtree_check`, `wdelay`,
//!   `no_wdelay`, `hide`, `nohide`, `crossmnt`) are accepted and ignored;
//!   every other option is a parse error.
//! - When several specifications match a client, exports(5) order
//!   decides: a single host (address or host name) first, then networks,
//!   then `*`; among specifications of one kind, the first on the line.
//!
//! Parsing is pure ([`parse`]); resolving host names is a separate step.

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;

/// The uid and gid squashed callers get by default (Linux's `nobody`).
pub const ANON_ID: u32 = 65534;

/// Who a client specification names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSpec {
    /// `*`: every client.
    Any,
    /// One address.
    Addr(IpAddr),
    /// A network: the address with its host bits cleared and the prefix
    /// length.
    Net {
        /// Network address.
        addr: IpAddr,
        /// Prefix length in bits.
        prefix: u8,
    },
    /// A host name and the addresses it resolved to (empty until
    /// [`Exports::resolve_hosts`]).
    Host {
        /// The name as written.
        name: String,
        /// Its addresses.
        addrs: Vec<IpAddr>,
    },
}

/// Whose identity is replaced by the anonymous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Squash {
    /// Nobody (`no_root_squash`).
    None,
    /// uid 0 and gid 0 (`root_squash`, the default).
    Root,
    /// Everyone (`all_squash`).
    All,
}

/// An RPC security flavor an export accepts (RFC 5531 §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecFlavor {
    /// AUTH_SYS (`sec=sys`).
    Sys,
    /// AUTH_NONE (`sec=none`): callers are the anonymous identity.
    None,
    /// RPCSEC_GSS with Kerberos V5, authentication only (`sec=krb5`).
    Krb5,
    /// RPCSEC_GSS with Kerberos V5 and integrity (`sec=krb5i`).
    Krb5i,
    /// RPCSEC_GSS with Kerberos V5 and privacy (`sec=krb5p`).
    Krb5p,
}

/// The pseudo-flavor of Kerberos V5 with RPCSEC_GSS service NONE
/// (RFC 2623 §2.2: 390003 krb5, 390004 krb5i, 390005 krb5p); MOUNT lists
/// these numbers (RFC 2623 §2.7).
pub const KRB5_PSEUDO_FLAVOR: u32 = 390_003;

impl SecFlavor {
    /// The flavor number (RFC 5531 §8.2), or the Kerberos pseudo-flavor
    /// (RFC 2623 §2.2).
    pub fn number(self) -> u32 {
        match self {
            SecFlavor::None => 0,
            SecFlavor::Sys => 1,
            SecFlavor::Krb5 => KRB5_PSEUDO_FLAVOR,
            SecFlavor::Krb5i => KRB5_PSEUDO_FLAVOR + 1,
            SecFlavor::Krb5p => KRB5_PSEUDO_FLAVOR + 2,
        }
    }

    /// The name in an exports file.
    pub fn name(self) -> &'static str {
        match self {
            SecFlavor::None => "none",
            SecFlavor::Sys => "sys",
            SecFlavor::Krb5 => "krb5",
            SecFlavor::Krb5i => "krb5i",
            SecFlavor::Krb5p => "krb5p",
        }
    }

    /// Whether the flavor is RPCSEC_GSS (the server needs a keytab).
    pub fn is_gss(self) -> bool {
        matches!(self, SecFlavor::Krb5 | SecFlavor::Krb5i | SecFlavor::Krb5p)
    }
}

/// The transport security an export admits (`xprtsec=`, the Linux
/// server's `NFSEXP_XPRTSEC_*` modes): a connection is admitted when its
/// kind is listed, exactly (`xprtsec=tls` alone refuses a mutually
/// authenticated connection, as Linux's `check_xprtsec_policy` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XprtSec {
    /// `none`: connections without TLS.
    pub none: bool,
    /// `tls`: TLS connections whose client presented no certificate.
    pub tls: bool,
    /// `mtls`: TLS connections with a verified client certificate.
    pub mtls: bool,
}

impl XprtSec {
    /// Every kind (`xprtsec=none:tls:mtls`, the default).
    pub const ALL: Self = Self {
        none: true,
        tls: true,
        mtls: true,
    };

    /// Whether a connection of kind `security` is admitted.
    pub fn admits(self, security: oncrpc::TransportSecurity) -> bool {
        match security {
            oncrpc::TransportSecurity::None => self.none,
            oncrpc::TransportSecurity::Tls => self.tls,
            oncrpc::TransportSecurity::MutualTls => self.mtls,
        }
    }
}

impl Default for XprtSec {
    fn default() -> Self {
        Self::ALL
    }
}

impl fmt::Display for XprtSec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [(self.none, "none"), (self.tls, "tls"), (self.mtls, "mtls")]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
        f.write_str(&names.join(":"))
    }
}

/// What one client may do on one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportOptions {
    /// Refuse changes (ROFS).
    pub read_only: bool,
    /// Identity squashing.
    pub squash: Squash,
    /// The anonymous uid.
    pub anonuid: u32,
    /// The anonymous gid.
    pub anongid: u32,
    /// Accepted flavors, in preference order (never empty).
    pub sec: Vec<SecFlavor>,
    /// Accepted transport security (RFC 9289).
    pub xprtsec: XprtSec,
}

impl Default for ExportOptions {
    /// exports(5) defaults: `ro,root_squash,anonuid=65534,anongid=65534,sec=sys`.
    fn default() -> Self {
        Self {
            read_only: true,
            squash: Squash::Root,
            anonuid: ANON_ID,
            anongid: ANON_ID,
            sec: vec![SecFlavor::Sys],
            xprtsec: XprtSec::ALL,
        }
    }
}

impl ExportOptions {
    /// Read-write, root squashed, AUTH_SYS: what `nfsrdma serve DIR` gives
    /// the clients it allows.
    pub fn read_write() -> Self {
        Self {
            read_only: false,
            ..Self::default()
        }
    }

    /// Whether calls with flavor number `flavor` are accepted.
    pub fn accepts_flavor(&self, flavor: u32) -> bool {
        self.sec.iter().any(|s| s.number() == flavor)
    }
}

/// One client specification with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRule {
    /// Who.
    pub spec: ClientSpec,
    /// What they may do.
    pub options: ExportOptions,
}

/// One line of the file: a directory and who may mount it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEntry {
    /// The exported directory (absolute).
    pub path: PathBuf,
    /// The clients, in the order written.
    pub clients: Vec<ClientRule>,
}

/// A whole exports file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exports {
    /// The exports, in file order.
    pub entries: Vec<ExportEntry>,
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportsErrorKind {
    /// The path is not absolute.
    #[error("export path {0:?} is not absolute")]
    RelativePath(String),
    /// A quote or parenthesis is not closed.
    #[error("unterminated {0}")]
    Unterminated(&'static str),
    /// A path with no client list.
    #[error("no client list for {0:?} (write `*` to export to everyone)")]
    NoClients(String),
    /// A client specification this server does not understand.
    #[error("bad client specification {0:?}")]
    BadClient(String),
    /// An option this server does not know.
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    /// An option with a bad value.
    #[error("bad value in option {0:?}")]
    BadValue(String),
    /// A security flavor other than `sys`, `none`, `krb5`, `krb5i`, `krb5p`.
    #[error("unsupported security flavor {0:?} (sec= takes sys, none, krb5, krb5i, krb5p)")]
    UnsupportedSec(String),
    /// The same path exported twice.
    #[error("{0:?} is exported twice")]
    Duplicate(String),
}

/// A parse error and the (1-based) line it is on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exports line {line}: {kind}")]
pub struct ExportsError {
    /// 1-based line number (the first line of a continued line).
    pub line: usize,
    /// What is wrong.
    pub kind: ExportsErrorKind,
}

/// Parses an exports file.
pub fn parse(text: &str) -> Result<Exports, ExportsError> {
    let mut out = Exports::default();
    for (line, logical) in logical_lines(text) {
        let err = |kind| ExportsError { line, kind };
        let toks = tokens(&logical).map_err(err)?;
        let Some(entry) = parse_entry(&toks).map_err(err)? else {
            continue;
        };
        if out.entries.iter().any(|e| e.path == entry.path) {
            return Err(err(ExportsErrorKind::Duplicate(
                entry.path.display().to_string(),
            )));
        }
        out.entries.push(entry);
    }
    Ok(out)
}

/// Joins `\`-continued lines; yields (first line number, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        if cur.is_empty() {
            start = i + 1;
        }
        match raw.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(raw);
                out.push((start, std::mem::take(&mut cur)));
            }
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

/// Splits a line into whitespace-separated tokens, honouring double
/// quotes (which are removed), parentheses (no split inside) and `#`
/// comments.
fn tokens(line: &str) -> Result<Vec<String>, ExportsErrorKind> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut depth = 0usize;
    for ch in line.chars() {
        match ch {
            '"' => quoted = !quoted,
            '#' if !quoted && depth == 0 => break,
            '(' if !quoted => {
                depth += 1;
                cur.push(ch);
            }
            ')' if !quoted => {
                depth = depth.saturating_sub(1);
                cur.push(ch);
            }
            c if c.is_whitespace() && !quoted && depth == 0 => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(ExportsErrorKind::Unterminated("quote"));
    }
    if depth > 0 {
        return Err(ExportsErrorKind::Unterminated("parenthesis"));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

fn parse_entry(toks: &[String]) -> Result<Option<ExportEntry>, ExportsErrorKind> {
    let Some((path, rest)) = toks.split_first() else {
        return Ok(None);
    };
    if !path.starts_with('/') {
        return Err(ExportsErrorKind::RelativePath(path.clone()));
    }
    let mut defaults = ExportOptions::default();
    let mut clients = Vec::new();
    for t in rest {
        if let Some(opts) = t.strip_prefix('-') {
            defaults = apply_options(defaults, opts)?;
            continue;
        }
        let (who, opts) = match t.split_once('(') {
            Some((who, tail)) => {
                let opts = tail
                    .strip_suffix(')')
                    .filter(|o| !o.contains(['(', ')']))
                    .ok_or_else(|| ExportsErrorKind::BadClient(t.clone()))?;
                (who, Some(opts))
            }
            None => (t.as_str(), None),
        };
        let spec = if who.is_empty() {
            ClientSpec::Any
        } else {
            parse_client(who)?
        };
        let options = match opts {
            Some(o) => apply_options(defaults.clone(), o)?,
            None => defaults.clone(),
        };
        clients.push(ClientRule { spec, options });
    }
    if clients.is_empty() {
        return Err(ExportsErrorKind::NoClients(path.clone()));
    }
    Ok(Some(ExportEntry {
        path: PathBuf::from(path),
        clients,
    }))
}

/// An address, network, `*` or host name.
pub fn parse_client(s: &str) -> Result<ClientSpec, ExportsErrorKind> {
    let bad = || ExportsErrorKind::BadClient(s.to_owned());
    if s == "*" {
        return Ok(ClientSpec::Any);
    }
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok(ClientSpec::Addr(a.to_canonical()));
    }
    if let Some((a, m)) = s.split_once('/') {
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match m.parse::<u8>() {
            Ok(p) if p <= bits => p,
            Ok(_) => return Err(bad()),
            Err(_) => netmask_prefix(m).ok_or_else(bad)?,
        };
        return Ok(ClientSpec::Net {
            addr: mask(addr, prefix),
            prefix,
        });
    }
    let host_ok = !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if host_ok {
        Ok(ClientSpec::Host {
            name: s.to_owned(),
            addrs: Vec::new(),
        })
    } else {
        Err(bad())
    }
}

/// The prefix length of a contiguous IPv4 netmask (`255.255.255.0` → 24).
fn netmask_prefix(m: &str) -> Option<u8> {
    let m: std::net::Ipv4Addr = m.parse().ok()?;
    let bits = u32::from(m);
    let prefix = bits.leading_ones();
    (bits.checked_shl(prefix).unwrap_or(0) == 0).then_some(prefix as u8)
}

/// `addr` with the bits after `prefix` cleared.
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

fn parse_id(opt: &str, v: &str) -> Result<u32, ExportsErrorKind> {
    v.parse()
        .map_err(|_| ExportsErrorKind::BadValue(opt.to_owned()))
}

fn parse_sec(opt: &str, v: &str) -> Result<Vec<SecFlavor>, ExportsErrorKind> {
    let mut out = Vec::new();
    for f in v.split(':') {
        let flavor = match f {
            "sys" => SecFlavor::Sys,
            "none" => SecFlavor::None,
            "krb5" => SecFlavor::Krb5,
            "krb5i" => SecFlavor::Krb5i,
            "krb5p" => SecFlavor::Krb5p,
            "" => return Err(ExportsErrorKind::BadValue(opt.to_owned())),
            other => return Err(ExportsErrorKind::UnsupportedSec(other.to_owned())),
        };
        if !out.contains(&flavor) {
            out.push(flavor);
        }
    }
    Ok(out)
}

fn parse_xprtsec(opt: &str, v: &str) -> Result<XprtSec, ExportsErrorKind> {
    let mut out = XprtSec {
        none: false,
        tls: false,
        mtls: false,
    };
    for mode in v.split(':') {
        match mode {
            "none" => out.none = true,
            "tls" => out.tls = true,
            "mtls" => out.mtls = true,
            _ => return Err(ExportsErrorKind::BadValue(opt.to_owned())),
        }
    }
    Ok(out)
}

/// Applies a comma-separated option list to `o`.
fn apply_options(mut o: ExportOptions, list: &str) -> Result<ExportOptions, ExportsErrorKind> {
    for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match opt.split_once('=') {
            Some(("anonuid", v)) => o.anonuid = parse_id(opt, v)?,
            Some(("anongid", v)) => o.anongid = parse_id(opt, v)?,
            Some(("sec", v)) => o.sec = parse_sec(opt, v)?,
            Some(("xprtsec", v)) => o.xprtsec = parse_xprtsec(opt, v)?,
            Some(_) => return Err(ExportsErrorKind::UnknownOption(opt.to_owned())),
            None => match opt {
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                "root_squash" => o.squash = Squash::Root,
                "no_root_squash" => o.squash = Squash::None,
                "all_squash" => o.squash = Squash::All,
                "no_all_squash" if o.squash == Squash::All => o.squash = Squash::Root,
                "no_all_squash" | "sync" | "async" | "secure" | "insecure" | "subtree_check"
                | "no_subtree_check" | "wdelay" | "no_wdelay" | "hide" | "nohide" | "crossmnt" => {}
                _ => return Err(ExportsErrorKind::UnknownOption(opt.to_owned())),
            },
        }
    }
    Ok(o)
}

impl ClientSpec {
    /// How specific the match is (exports(5): hosts, then networks, then
    /// wildcards), or `None` when `ip` is not named.
    fn rank(&self, ip: IpAddr) -> Option<u8> {
        match self {
            ClientSpec::Addr(a) => (*a == ip).then_some(0),
            ClientSpec::Host { addrs, .. } => addrs.contains(&ip).then_some(0),
            ClientSpec::Net { addr, prefix } => {
                let same_family = addr.is_ipv4() == ip.is_ipv4();
                (same_family && mask(ip, *prefix) == *addr).then_some(1)
            }
            ClientSpec::Any => Some(2),
        }
    }
}

impl ExportEntry {
    /// The options for a client at `ip`, or `None` when it may not use
    /// this export. IPv4-mapped IPv6 addresses count as IPv4.
    pub fn options_for(&self, ip: IpAddr) -> Option<&ExportOptions> {
        let ip = ip.to_canonical();
        self.clients
            .iter()
            .filter_map(|c| c.spec.rank(ip).map(|r| (r, c)))
            .min_by_key(|(r, _)| *r)
            .map(|(_, c)| &c.options)
    }
}

impl Exports {
    /// Resolves every host name with the system resolver (blocking),
    /// once, at load. A name that does not resolve is logged and matches
    /// no one.
    pub fn resolve_hosts(&mut self) {
        self.resolve_hosts_with(|name| {
            (name, 0)
                .to_socket_addrs()
                .map(|it| it.map(|a| a.ip().to_canonical()).collect())
                .unwrap_or_default()
        });
    }

    /// [`Self::resolve_hosts`] with a given resolver.
    pub fn resolve_hosts_with(&mut self, mut resolve: impl FnMut(&str) -> Vec<IpAddr>) {
        for e in &mut self.entries {
            for c in &mut e.clients {
                if let ClientSpec::Host { name, addrs } = &mut c.spec {
                    *addrs = resolve(name);
                    if addrs.is_empty() {
                        tracing::warn!(host = %name, export = %e.path.display(),
                            "exports: host name does not resolve; it matches no client");
                    }
                }
            }
        }
    }
}

impl fmt::Display for ClientSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientSpec::Any => f.write_str("*"),
            ClientSpec::Addr(a) => write!(f, "{a}"),
            ClientSpec::Net { addr, prefix } => write!(f, "{addr}/{prefix}"),
            ClientSpec::Host { name, .. } => f.write_str(name),
        }
    }
}

impl fmt::Display for ExportOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let squash = match self.squash {
            Squash::None => "no_root_squash",
            Squash::Root => "root_squash",
            Squash::All => "all_squash",
        };
        let sec: Vec<&str> = self.sec.iter().map(|s| s.name()).collect();
        write!(
            f,
            "{},{squash},anonuid={},anongid={},sec={}",
            if self.read_only { "ro" } else { "rw" },
            self.anonuid,
            self.anongid,
            sec.join(":")
        )?;
        if self.xprtsec != XprtSec::ALL {
            write!(f, ",xprtsec={}", self.xprtsec)?;
        }
        Ok(())
    }
}

impl fmt::Display for ExportEntry {
    /// One line that [`parse`] reads back as `self`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.path.display())?;
        for c in &self.clients {
            write!(f, " {}({})", c.spec, c.options)?;
        }
        Ok(())
    }
}

impl fmt::Display for Exports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.entries {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn one(text: &str) -> ExportEntry {
        let mut e = parse(text).unwrap();
        assert_eq!(e.entries.len(), 1);
        e.entries.remove(0)
    }

    #[test]
    fn xprtsec_lists_the_admitted_connections() {
        use oncrpc::TransportSecurity as T;
        let e = one("/srv/a *(xprtsec=tls:mtls) 10.0.0.1(xprtsec=mtls) 10.0.0.2");
        let any = e.options_for(ip("192.0.2.9")).unwrap().xprtsec;
        assert!(!any.admits(T::None) && any.admits(T::Tls) && any.admits(T::MutualTls));
        let m = e.options_for(ip("10.0.0.1")).unwrap().xprtsec;
        assert!(!m.admits(T::None) && !m.admits(T::Tls) && m.admits(T::MutualTls));
        let d = e.options_for(ip("10.0.0.2")).unwrap().xprtsec;
        assert_eq!(d, XprtSec::ALL);
        // Written back only when not the default, and read back the same.
        let text = e.to_string();
        assert!(text.contains("xprtsec=tls:mtls") && text.contains("xprtsec=mtls"));
        assert_eq!(one(&text), e);
        for bad in ["xprtsec=", "xprtsec=ssl", "xprtsec=tls:"] {
            let err = parse(&format!("/srv/a *({bad})")).unwrap_err();
            assert_eq!(err.kind, ExportsErrorKind::BadValue(bad.into()), "{bad}");
        }
    }

    #[test]
    fn parses_clients_options_and_defaults() {
        let e = one("/srv/a 127.0.0.1(rw,no_root_squash) 10.0.0.0/8(all_squash,anonuid=7,anongid=8) fd00::/8 *(sec=sys:none)");
        assert_eq!(e.path, PathBuf::from("/srv/a"));
        let o = e.options_for(ip("127.0.0.1")).unwrap();
        assert!(!o.read_only);
        assert_eq!(o.squash, Squash::None);
        let o = e.options_for(ip("10.1.2.3")).unwrap();
        assert_eq!(
            (o.squash, o.anonuid, o.anongid, o.read_only),
            (Squash::All, 7, 8, true)
        );
        let o = e.options_for(ip("fd00::1")).unwrap();
        assert_eq!(o, &ExportOptions::default());
        let o = e.options_for(ip("192.0.2.1")).unwrap();
        assert_eq!(o.sec, vec![SecFlavor::Sys, SecFlavor::None]);
    }

    #[test]
    fn most_specific_match_wins_whatever_the_order() {
        let e = one("/x *(ro) 10.0.0.0/8(rw,all_squash) 10.0.0.5(rw,no_root_squash)");
        assert_eq!(e.options_for(ip("10.0.0.5")).unwrap().squash, Squash::None);
        assert_eq!(e.options_for(ip("10.9.0.5")).unwrap().squash, Squash::All);
        assert!(e.options_for(ip("11.0.0.1")).unwrap().read_only);
        // IPv4-mapped IPv6 peers are their IPv4 address.
        assert_eq!(
            e.options_for(ip("::ffff:10.0.0.5")).unwrap().squash,
            Squash::None
        );
    }

    #[test]
    fn unlisted_clients_get_nothing() {
        let e = one("/x 10.0.0.0/255.0.0.0(rw) 2001:db8::/32");
        assert!(e.options_for(ip("127.0.0.1")).is_none());
        assert!(e.options_for(ip("10.255.0.1")).is_some());
        assert!(e.options_for(ip("2001:db8:1::1")).is_some());
        assert!(e.options_for(ip("2001:db9::1")).is_none());
    }

    #[test]
    fn quotes_comments_continuations_and_default_options() {
        let text = "# header\n\n\"/srv/with space\" -rw,no_root_squash \\\n  192.0.2.1 192.0.2.2(ro) # tail\n/b (ro)\n";
        let ex = parse(text).unwrap();
        assert_eq!(ex.entries.len(), 2);
        let e = &ex.entries[0];
        assert_eq!(e.path, PathBuf::from("/srv/with space"));
        let o1 = e.options_for(ip("192.0.2.1")).unwrap();
        assert_eq!((o1.read_only, o1.squash), (false, Squash::None));
        assert!(e.options_for(ip("192.0.2.2")).unwrap().read_only);
        assert_eq!(ex.entries[1].clients[0].spec, ClientSpec::Any);
    }

    #[test]
    fn kerberos_flavors_parse_in_order_and_round_trip() {
        let e = one("/srv/k *(rw,sec=krb5p:krb5i:sys:krb5p)");
        let o = &e.clients[0].options;
        assert_eq!(
            o.sec,
            vec![SecFlavor::Krb5p, SecFlavor::Krb5i, SecFlavor::Sys]
        );
        assert_eq!(
            o.sec.iter().map(|f| f.number()).collect::<Vec<_>>(),
            vec![390_005, 390_004, 1]
        );
        assert!(o.accepts_flavor(390_004) && !o.accepts_flavor(390_003));
        assert!(o.sec[0].is_gss() && !o.sec[2].is_gss());
        let text = o.to_string();
        assert!(text.contains("sec=krb5p:krb5i:sys"), "{text}");
        assert_eq!(one(&format!("/srv/k *({text})")).clients[0].options, *o);
        let e = one("/srv/k *(sec=krb5)");
        assert_eq!(e.clients[0].options.sec, vec![SecFlavor::Krb5]);
    }

    #[test]
    fn errors_name_the_line() {
        let cases: &[(&str, usize, ExportsErrorKind)] = &[
            ("\n\nsrv *", 3, ExportsErrorKind::RelativePath("srv".into())),
            (
                "/a *(rw,krb)",
                1,
                ExportsErrorKind::UnknownOption("krb".into()),
            ),
            ("/a\n", 1, ExportsErrorKind::NoClients("/a".into())),
            (
                "# c\n/a *(sec=krb5:lkey)",
                2,
                ExportsErrorKind::UnsupportedSec("lkey".into()),
            ),
            (
                "/a *(anonuid=x)",
                1,
                ExportsErrorKind::BadValue("anonuid=x".into()),
            ),
            (
                "/a 10.0.0.0/33",
                1,
                ExportsErrorKind::BadClient("10.0.0.0/33".into()),
            ),
            (
                "/a 10.0.0.0/255.0.255.0",
                1,
                ExportsErrorKind::BadClient("10.0.0.0/255.0.255.0".into()),
            ),
            (
                "/a @netgroup",
                1,
                ExportsErrorKind::BadClient("@netgroup".into()),
            ),
            ("/a *(rw", 1, ExportsErrorKind::Unterminated("parenthesis")),
            ("\"/a *", 1, ExportsErrorKind::Unterminated("quote")),
        ];
        for (text, line, kind) in cases {
            let got = parse(text);
            assert_eq!(
                got,
                Err(ExportsError {
                    line: *line,
                    kind: kind.clone()
                }),
                "{text}"
            );
        }
        assert!(parse("/a *.lan(rw)").is_err(), "wildcard host names");
        assert_eq!(
            parse("/a *\n/a 1.2.3.4").unwrap_err(),
            ExportsError {
                line: 2,
                kind: ExportsErrorKind::Duplicate("/a".into())
            }
        );
    }

    #[test]
    fn display_round_trips() {
        let text = "/srv/a 127.0.0.1(rw,no_root_squash) 10.0.0.7/8(all_squash,anonuid=7) fd00::/8(sec=none:sys)\n\"/b c\" host.example(ro) *(rw)\n";
        let ex = parse(text).unwrap();
        let again = parse(&ex.to_string()).unwrap();
        assert_eq!(ex, again);
        // Networks are kept with the host bits cleared.
        assert!(ex.to_string().contains("10.0.0.0/8("));
    }

    #[test]
    fn host_names_match_what_they_resolved_to() {
        let mut ex = parse("/a box.lan(rw) ghost.lan").unwrap();
        ex.resolve_hosts_with(|n| {
            if n == "box.lan" {
                vec![ip("192.0.2.9")]
            } else {
                vec![]
            }
        });
        let e = &ex.entries[0];
        assert!(!e.options_for(ip("192.0.2.9")).unwrap().read_only);
        assert!(e.options_for(ip("192.0.2.10")).is_none());
    }

    /// A small in-suite stand-in for the `nfs_exports` fuzz target:
    /// mutated files never panic, and what parses round-trips.
    #[test]
    fn mutated_files_never_panic_and_round_trip() {
        let seed = "/srv/a 127.0.0.1(rw,no_root_squash) 10.0.0.0/8(all_squash)\n\"/b c\" -ro *(sec=sys:none) \\\n fd00::/8 h.lan\n";
        let alphabet = b" \t\n\\\"#()*/,:=-.0123456789abcdefrwsx";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            let mut b = seed.as_bytes().to_vec();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % (b.len() + 1);
                let ch = alphabet[(x >> 32) as usize % alphabet.len()];
                match (x >> 20) % 3 {
                    0 if pos < b.len() => b[pos] = ch,
                    1 if pos < b.len() => {
                        b.remove(pos);
                    }
                    _ => b.insert(pos, ch),
                }
            }
            let text = String::from_utf8_lossy(&b);
            if let Ok(ex) = parse(&text) {
                assert_eq!(parse(&ex.to_string()).as_ref(), Ok(&ex), "{text:?}");
            }
        }
    }
}
