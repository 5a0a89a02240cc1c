//! The side protocols a client needs before NFS: the port mapper's
//! GETPORT (RFC 1833 §3) and MOUNT v3 (RFC 1813 Appendix I).

use bytes::Bytes;
use nfs::mount::{Dirpath, Exports, Mountproc3, Mountres3, Mountres3Ok, MNTPATHLEN};
use nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, ReplyHint, RpcCall};
use xdr::{Decode, Decoder, Encode, Encoder, XdrBuf};

use crate::error::{Error, Result};

/// The port mapper's program number (RFC 1833 §3).
pub const PMAP_PROGRAM: u32 = 100_000;
/// The port mapper version with GETPORT (RFC 1833 §3).
pub const PMAP_V2: u32 = 2;
/// The port mapper's well-known port (RFC 1833 §3).
pub const PMAP_PORT: u16 = 111;
/// `PMAPPROC_GETPORT` (RFC 1833 §3).
pub const PMAPPROC_GETPORT: u32 = 3;
/// `IPPROTO_TCP` in a port mapper `mapping` (RFC 1833 §3).
pub const IPPROTO_TCP: u32 = 6;

/// A port mapper `mapping` (RFC 1833 §3): program, version, protocol and
/// port (ignored in a GETPORT request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// Program number.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Protocol (`IPPROTO_TCP`).
    pub prot: u32,
    /// Port.
    pub port: u32,
}

/// RFC 1833 §3 `struct mapping`.
impl Encode for Mapping {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        enc.put_u32(self.prog);
        enc.put_u32(self.vers);
        enc.put_u32(self.prot);
        enc.put_u32(self.port);
    }
}

impl<'a> Decode<'a> for Mapping {
    fn decode(dec: &mut Decoder<'a>) -> Result<Self, xdr::Error> {
        Ok(Self {
            prog: dec.u32()?,
            vers: dec.u32()?,
            prot: dec.u32()?,
            port: dec.u32()?,
        })
    }
}

/// Decodes a GETPORT result (RFC 1833 §3: `unsigned int`, 0 when the
/// program is not registered) into a TCP port.
pub fn decode_getport_reply(results: &[u8]) -> Result<Option<u16>> {
    let mut dec = Decoder::new(results);
    let port = dec.u32()?;
    dec.finish()?;
    match port {
        0 => Ok(None),
        p => u16::try_from(p)
            .map(Some)
            .map_err(|_| Error::Protocol("port mapper returned a port above 65535")),
    }
}

async fn call<T: ClientTransport>(
    rpc: &T,
    cred: &OpaqueAuth,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: XdrBuf,
) -> Result<Bytes> {
    let call = RpcCall {
        prog,
        vers,
        proc_,
        cred: cred.clone(),
        args,
        reply_hint: ReplyHint::default(),
    };
    Ok(rpc.call(call).await?)
}

/// Asks the port mapper on `rpc` for the TCP port of `prog`/`vers`
/// (PMAPPROC_GETPORT, RFC 1833 §3); `None` when it is not registered.
pub async fn getport<T: ClientTransport>(rpc: &T, prog: u32, vers: u32) -> Result<Option<u16>> {
    let m = Mapping {
        prog,
        vers,
        prot: IPPROTO_TCP,
        port: 0,
    };
    let res = call(
        rpc,
        &OpaqueAuth::NONE,
        PMAP_PROGRAM,
        PMAP_V2,
        PMAPPROC_GETPORT,
        xdr::to_xdr_buf(&m),
    )
    .await?;
    decode_getport_reply(&res)
}

/// A MOUNT v3 client (RFC 1813 Appendix I) over any transport (in
/// practice TCP: MOUNT is not carried over RPC-over-RDMA, RFC 8267 §6).
#[derive(Debug, Clone)]
pub struct MountClient<T> {
    rpc: T,
    cred: OpaqueAuth,
}

impl<T: ClientTransport> MountClient<T> {
    /// A MOUNT client sending `cred` with each call.
    pub fn new(rpc: T, cred: OpaqueAuth) -> Self {
        Self { rpc, cred }
    }

    async fn call(&self, proc: Mountproc3, args: XdrBuf) -> Result<Bytes> {
        call(&self.rpc, &self.cred, MOUNT_PROGRAM, MOUNT_V3, proc.0, args).await
    }

    /// MOUNTPROC3_NULL.
    pub async fn null(&self) -> Result<()> {
        let r = self.call(Mountproc3::NULL, XdrBuf::new()).await?;
        Decoder::new(&r).finish()?;
        Ok(())
    }

    /// MOUNTPROC3_MNT (RFC 1813 Appendix I): the root handle of the export
    /// at `path`, or [`Error::Mount`].
    pub async fn mnt(&self, path: &str) -> Result<Mountres3Ok> {
        let dp = dirpath(path)?;
        let r = self.call(Mountproc3::MNT, xdr::to_xdr_buf(&dp)).await?;
        let mut dec = Decoder::from_bytes(&r);
        let res: Mountres3 = dec.decode()?;
        dec.finish()?;
        match res {
            Mountres3::Ok(ok) => Ok(ok),
            Mountres3::Err(status) => Err(Error::Mount {
                path: path.to_owned(),
                status,
            }),
        }
    }

    /// MOUNTPROC3_UMNT (RFC 1813 Appendix I): forget the mount of `path`.
    pub async fn umnt(&self, path: &str) -> Result<()> {
        let dp = dirpath(path)?;
        let r = self.call(Mountproc3::UMNT, xdr::to_xdr_buf(&dp)).await?;
        Decoder::new(&r).finish()?;
        Ok(())
    }

    /// MOUNTPROC3_EXPORT (RFC 1813 Appendix I): the export list.
    pub async fn export(&self) -> Result<Exports> {
        let r = self.call(Mountproc3::EXPORT, XdrBuf::new()).await?;
        let mut dec = Decoder::from_bytes(&r);
        let ex: Exports = dec.decode()?;
        dec.finish()?;
        Ok(ex)
    }
}

fn dirpath(path: &str) -> Result<Dirpath> {
    if path.len() > MNTPATHLEN {
        return Err(Error::InvalidName(path.to_owned()));
    }
    Ok(Dirpath(Bytes::copy_from_slice(path.as_bytes())))
}

/// The candidate export paths for `path`, most specific first: every
/// component prefix from `path` itself down to `/` (`/a/b` gives `/a/b`,
/// `/a`, `/`). At most `max` are returned.
pub fn export_candidates(path: &str, max: usize) -> Vec<String> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    (0..=comps.len())
        .rev()
        .map(|n| format!("/{}", comps.get(..n).unwrap_or(&[]).join("/")))
        .take(max)
        .collect()
}

/// The export among `exports` that is the longest component prefix of
/// `path`, if any.
pub fn best_export<'e>(path: &str, exports: impl IntoIterator<Item = &'e [u8]>) -> Option<String> {
    let p = normalize(path);
    exports
        .into_iter()
        .filter_map(|e| std::str::from_utf8(e).ok())
        .map(normalize)
        .filter(|e| e == "/" || p == *e || p.starts_with(&format!("{e}/")))
        .max_by_key(|e| e.len())
}

/// `/`-joined components with no empty or trailing parts.
fn normalize(p: &str) -> String {
    let comps: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    format!("/{}", comps.join("/"))
}

/// What remains of `path` below `export` (empty for the export itself).
pub fn path_below(path: &str, export: &str) -> String {
    let p = normalize(path);
    let e = normalize(export);
    if e == "/" {
        return p.trim_start_matches('/').to_owned();
    }
    p.strip_prefix(&e)
        .unwrap_or("")
        .trim_start_matches('/')
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GETPORT_CALL_ARGS: [u8; 16] =
        [0x00, 0x01, 0x86, 0xa5, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 0, 0];

    #[test]
    fn mapping_emits_getport_arguments() {
        let m = Mapping {
            prog: MOUNT_PROGRAM,
            vers: 3,
            prot: IPPROTO_TCP,
            port: 0,
        };
        let mut out = vec![0xa5u8; 0];
        m.encode(&mut out);
        assert_eq!(out, GETPORT_CALL_ARGS);
        assert_eq!(xdr::from_slice::<Mapping>(&GETPORT_CALL_ARGS).unwrap(), m);
    }

    #[test]
    fn getport_reply_zero_means_unregistered() {
        assert_eq!(
            decode_getport_reply(&[0, 0, 0x4e, 0x50]).unwrap(),
            Some(20048)
        );
        assert_eq!(decode_getport_reply(&[0, 0, 0, 0]).unwrap(), None);
    }

    #[test]
    fn rejects_truncated_or_oversized_getport_reply() {
        assert!(decode_getport_reply(&[0, 0]).is_err());
        assert!(decode_getport_reply(&[0, 1, 0, 0]).is_err());
        assert!(decode_getport_reply(&[0, 0, 0, 1, 0]).is_err());
    }

    #[test]
    fn candidates_run_from_the_full_path_to_the_root() {
        assert_eq!(export_candidates("/a/b/", 8), ["/a/b", "/a", "/"]);
        assert_eq!(export_candidates("/", 8), ["/"]);
        assert_eq!(export_candidates("/a/b/c", 2), ["/a/b/c", "/a/b"]);
    }

    #[test]
    fn best_export_is_the_longest_component_prefix() {
        let ex: [&[u8]; 3] = [b"/export", b"/export/sub", b"/exp"];
        assert_eq!(
            best_export("/export/sub/f", ex).as_deref(),
            Some("/export/sub")
        );
        assert_eq!(best_export("/export/x", ex).as_deref(), Some("/export"));
        assert_eq!(best_export("/exportx", ex), None);
        assert_eq!(path_below("/export/sub/f", "/export"), "sub/f");
        assert_eq!(path_below("/export", "/export/"), "");
        assert_eq!(path_below("/a/b", "/"), "a/b");
    }
}
