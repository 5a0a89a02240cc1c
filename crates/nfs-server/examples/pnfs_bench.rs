//! The pNFS scaling benchmark's client (issue 18; `scripts/bench-pnfs.sh`,
//! docs/pnfs.md): FILES files of MIB MiB written, then read back and
//! checked, all files in parallel, through a pNFS metadata server and its
//! flex-files data servers (`pnfs`) or straight to one plain server over
//! NFSv3 (`plain`). The data moves the same way in both (one NFSv3
//! connection per file, 1 MiB UNSTABLE WRITEs then a COMMIT, 1 MiB
//! READs), so the two differ only in where the bytes go. Setup (OPEN,
//! LAYOUTGET, GETDEVICEINFO, CREATE) is not timed.
//!
//! ```text
//! pnfs_bench pnfs  MDS_IP:PORT EXPORT FILES MIB
//! pnfs_bench plain IP:PORT MOUNT_PORT EXPORT FILES MIB
//! ```
//!
//! Prints `write MIB_PER_S`, `read MIB_PER_S` and, for pNFS, the data
//! server each file went to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use nfs::v3::{Createhow3, NfsFh3, Sattr3, StableHow};
use nfs::v4::flexfiles::{decode_body, FfDeviceAddr4, FfLayout4};
use nfs::v4::*;
use nfs_client::v4::{OpenOptions, Session, SessionOptions};
use nfs_client::{connect_tcp, Nfs3Client, TcpOptions, TcpTarget};
use oncrpc::client::ClientConfig;
use oncrpc::msg::{AuthSys, OpaqueAuth};
use oncrpc::tcp::{TcpClient, TcpConfig};
use xdr::Bounded;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const CHUNK: usize = 1 << 20;

/// Where one file's bytes go: a data server (or the plain server), the
/// handle there and the credential to use.
struct Target {
    addr: SocketAddr,
    fh: NfsFh3,
    uid: u32,
    gid: u32,
}

fn cred(uid: u32, gid: u32) -> OpaqueAuth {
    AuthSys {
        stamp: 1,
        machinename: Bytes::from_static(b"pnfs-bench"),
        uid,
        gid,
        gids: vec![],
    }
    .to_opaque_auth()
}

/// The bytes of file `f` at `offset`: a pattern the read checks.
fn chunk(f: usize, offset: u64) -> Bytes {
    let seed = (f as u64) << 40 | offset;
    let v: Vec<u8> = (0..CHUNK as u64)
        .map(|i| ((seed + i).wrapping_mul(0x9e37_79b9) >> 13) as u8)
        .collect();
    Bytes::from(v)
}

async fn nfs3(t: &Target) -> Res<Nfs3Client<TcpClient>> {
    let rpc = TcpClient::connect(t.addr, 9, ClientConfig::default(), TcpConfig::default()).await?;
    Ok(Nfs3Client::new(rpc, cred(t.uid, t.gid)))
}

async fn write_file(f: usize, t: Arc<Target>, mib: u64) -> Res<()> {
    let c = nfs3(&t).await?;
    for k in 0..mib {
        let off = k * CHUNK as u64;
        c.write(&t.fh, off, chunk(f, off), StableHow::UNSTABLE)
            .await?;
    }
    c.commit(&t.fh, 0, 0).await?;
    Ok(())
}

async fn read_file(f: usize, t: Arc<Target>, mib: u64) -> Res<()> {
    let c = nfs3(&t).await?;
    for k in 0..mib {
        let off = k * CHUNK as u64;
        let r = c.read(&t.fh, off, CHUNK as u32).await?;
        if r.data.0 != chunk(f, off) {
            return Err(format!("file {f}: wrong bytes at {off}").into());
        }
    }
    Ok(())
}

/// Runs `job` on every file at once; MiB/s over the wall time.
async fn timed<F, Fut>(ts: &[Arc<Target>], mib: u64, job: F) -> Res<f64>
where
    F: Fn(usize, Arc<Target>, u64) -> Fut,
    Fut: std::future::Future<Output = Res<()>> + Send + 'static,
{
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for (f, t) in ts.iter().enumerate() {
        set.spawn(job(f, Arc::clone(t), mib));
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok((ts.len() as u64 * mib) as f64 / t0.elapsed().as_secs_f64())
}

fn op<T>(r: &[NfsResop4], pick: impl Fn(&NfsResop4) -> Option<T>) -> Res<T> {
    r.iter()
        .rev()
        .find_map(pick)
        .ok_or_else(|| format!("unexpected reply {:?}", r.last()).into())
}

/// The pNFS targets: each file OPENed at the metadata server, its RW
/// layout's data server, handle and synthetic ids.
async fn pnfs_targets(mds: SocketAddr, export: &str, files: usize) -> Res<Vec<Arc<Target>>> {
    let rpc = TcpClient::connect(mds, 9, ClientConfig::default(), TcpConfig::default()).await?;
    let s = Session::establish(rpc, cred(0, 0), &SessionOptions::for_io_size(1 << 20)).await?;
    let dir = s.mount(export).await?;
    let mut out = Vec::new();
    for f in 0..files {
        let how = OpenOptions {
            create_mode: Some(0o644),
            ..OpenOptions::default()
        };
        let file = s.open(&dir, &format!("bench{f}"), how).await?;
        let r = s
            .compound(vec![
                NfsArgop4::Putfh(Putfh4Args {
                    object: file.fh.clone(),
                }),
                NfsArgop4::Layoutget(Layoutget4Args {
                    signal_layout_avail: false,
                    layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    iomode: Layoutiomode4::LAYOUTIOMODE4_RW,
                    offset: 0,
                    length: u64::MAX,
                    minlength: 0,
                    stateid: file.stateid,
                    maxcount: 65536,
                }),
            ])
            .await?;
        let lg = op(&r, |o| match o {
            NfsResop4::Layoutget(Layoutget4Res::Ok(l)) => Some(l.clone()),
            _ => None,
        })?;
        let ff: FfLayout4 = decode_body(&lg.layout.0[0].content.body.0)?;
        let d = ff.mirrors.0[0].data_servers.0[0].clone();
        let r = s
            .compound(vec![NfsArgop4::Getdeviceinfo(Getdeviceinfo4Args {
                device_id: d.deviceid,
                layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                maxcount: 0,
                notify_types: nfs::v4::attr::Bitmap4::new(),
            })])
            .await?;
        let gd = op(&r, |o| match o {
            NfsResop4::Getdeviceinfo(Getdeviceinfo4Res::Ok(g)) => Some(g.clone()),
            _ => None,
        })?;
        let addr: FfDeviceAddr4 = decode_body(&gd.device_addr.addr_body.0)?;
        let ds = addr
            .netaddrs
            .0
            .iter()
            .find(|n| n.netid.0.starts_with("tcp"))
            .and_then(|n| n.to_socket())
            .ok_or("no tcp address for the data server")?;
        let id = |b: &Bounded<Bytes, _>| -> Res<u32> { Ok(std::str::from_utf8(&b.0)?.parse()?) };
        println!("file bench{f} on data server {ds}");
        out.push(Arc::new(Target {
            addr: ds,
            fh: NfsFh3::new(d.fh_vers.0[0].as_bytes()).ok_or("bad handle")?,
            uid: id(&d.user)?,
            gid: id(&d.group)?,
        }));
    }
    // The session is dropped: layouts and opens stay until the lease
    // runs out, which outlasts the run.
    Ok(out)
}

/// The plain targets: each file CREATEd in the export's root.
async fn plain_targets(
    srv: SocketAddr,
    mount_port: u16,
    export: &str,
    files: usize,
) -> Res<Vec<Arc<Target>>> {
    let target = TcpTarget {
        host: srv.ip().to_string(),
        nfs_port: Some(srv.port()),
        mount_port: Some(mount_port),
        path: export.to_owned(),
    };
    let m = connect_tcp(&target, &TcpOptions::default()).await?.mount;
    let mut out = Vec::new();
    for f in 0..files {
        let c = m
            .client()
            .create(
                m.root(),
                format!("bench{f}"),
                Createhow3::Unchecked(Sattr3::default()),
            )
            .await?;
        let fh = match c.obj {
            Some(fh) => fh,
            None => {
                m.client()
                    .lookup(m.root(), format!("bench{f}"))
                    .await?
                    .object
            }
        };
        out.push(Arc::new(Target {
            addr: srv,
            fh,
            uid: 0,
            gid: 0,
        }));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: pnfs_bench pnfs MDS:PORT EXPORT FILES MIB | plain SRV:PORT MOUNT_PORT EXPORT FILES MIB";
    let (targets, mib) = match a.first().map(String::as_str) {
        Some("pnfs") if a.len() == 5 => {
            let files: usize = a[3].parse()?;
            (
                pnfs_targets(a[1].parse()?, &a[2], files).await?,
                a[4].parse()?,
            )
        }
        Some("plain") if a.len() == 6 => {
            let files: usize = a[4].parse()?;
            let t = plain_targets(a[1].parse()?, a[2].parse()?, &a[3], files).await?;
            (t, a[5].parse()?)
        }
        _ => return Err(usage.into()),
    };
    let w = timed(&targets, mib, write_file).await?;
    println!("write {w:.1}");
    let r = timed(&targets, mib, read_file).await?;
    println!("read {r:.1}");
    Ok(())
}
