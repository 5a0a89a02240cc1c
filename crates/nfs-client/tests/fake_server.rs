//! The client's recovery logic against a scripted in-process transport: a
//! server that loses its unstable writes (a reboot: new write verifier),
//! and one whose READDIRPLUS never progresses.

use std::sync::Mutex;

use bytes::Bytes;
use nfs::v3::*;
use nfs_client::{Error, IoOptions, Mount, Nfs3Client};
use oncrpc::msg::OpaqueAuth;
use oncrpc::{ClientTransport, RpcCall, RpcError};
use xdr::FixedOpaque;

#[derive(Default)]
struct State {
    stable: Vec<u8>,
    volatile: Vec<(u64, Bytes)>,
    verf: u64,
    commits: u32,
    reboot_at_commit: Option<u32>,
    stuck_readdir: bool,
}

#[derive(Default)]
struct Fake(Mutex<State>);

fn apply(buf: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[off as usize..end].copy_from_slice(data);
}

fn fattr(size: u64, ftype: Ftype3) -> Fattr3 {
    Fattr3 {
        ftype,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: Specdata3::default(),
        fsid: 1,
        fileid: 2,
        atime: Nfstime3::default(),
        mtime: Nfstime3::default(),
        ctime: Nfstime3::default(),
    }
}

impl Fake {
    fn answer(&self, call: RpcCall) -> Result<Bytes, RpcError> {
        let wire = call.args.to_bytes();
        let args = Args3::decode(Nfsproc3(call.proc_), &wire).map_err(|_| RpcError::GarbageArgs)?;
        let mut s = self.0.lock().unwrap();
        let verf = FixedOpaque(s.verf.to_be_bytes());
        Ok(match args {
            Args3::Fsinfo(_) => xdr::to_bytes(&Fsinfo3Res::Ok(Fsinfo3ResOk {
                obj_attributes: None,
                rtmax: 65536,
                rtpref: 65536,
                rtmult: 4096,
                wtmax: 65536,
                wtpref: 65536,
                wtmult: 4096,
                dtpref: 4096,
                maxfilesize: u64::MAX,
                time_delta: Nfstime3 {
                    seconds: 0,
                    nseconds: 1,
                },
                properties: 0,
            })),
            Args3::Write(a) => {
                let committed = if a.stable == StableHow::UNSTABLE {
                    s.volatile.push((a.offset, a.data.0.clone()));
                    StableHow::UNSTABLE
                } else {
                    apply(&mut s.stable, a.offset, &a.data.0);
                    StableHow::FILE_SYNC
                };
                xdr::to_bytes(&Write3Res::Ok(Write3ResOk {
                    file_wcc: WccData::default(),
                    count: a.count,
                    committed,
                    verf,
                }))
            }
            Args3::Commit(_) => {
                s.commits += 1;
                if s.reboot_at_commit == Some(s.commits) {
                    s.volatile.clear();
                    s.verf += 1;
                } else {
                    let v = std::mem::take(&mut s.volatile);
                    for (o, d) in v {
                        apply(&mut s.stable, o, &d);
                    }
                }
                xdr::to_bytes(&Commit3Res::Ok(Commit3ResOk {
                    file_wcc: WccData::default(),
                    verf: FixedOpaque(s.verf.to_be_bytes()),
                }))
            }
            Args3::Readdirplus(a) if s.stuck_readdir => {
                let entries = vec![Entryplus3 {
                    fileid: 3,
                    name: Filename3::from_static("same"),
                    cookie: a.cookie.max(7),
                    name_attributes: None,
                    name_handle: None,
                }];
                xdr::to_bytes(&Readdirplus3Res::Ok(Readdirplus3ResOk {
                    dir_attributes: Some(fattr(0, Ftype3::NF3DIR)),
                    cookieverf: FixedOpaque([1; 8]),
                    entries,
                    eof: false,
                }))
            }
            _ => return Err(RpcError::ProcUnavail),
        })
    }
}

impl ClientTransport for Fake {
    fn call(
        &self,
        call: RpcCall,
    ) -> impl std::future::Future<Output = Result<Bytes, RpcError>> + Send {
        let r = self.answer(call);
        async move { r }
    }
}

async fn mount(state: State, io: IoOptions) -> Mount<Fake> {
    let fake = Fake(Mutex::new(state));
    let root = NfsFh3::new(&[1; 8]).unwrap();
    Mount::new(Nfs3Client::new(fake, OpaqueAuth::NONE), root, io)
        .await
        .unwrap()
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test]
async fn changed_write_verifier_resends_the_lost_unstable_data() {
    let m = mount(
        State {
            reboot_at_commit: Some(1),
            ..State::default()
        },
        IoOptions::default(),
    )
    .await;
    let want = data(1 << 20);
    let fh = NfsFh3::new(&[2; 8]).unwrap();
    let mut w = m.writer(&fh, 0);
    w.write(Bytes::from(want.clone())).await.unwrap();
    let stats = w.finish().await.unwrap();
    assert_eq!(stats.resent_bytes, want.len() as u64);
    assert_eq!(stats.writes, 32);
    assert_eq!(stats.commits, 1);
    let s = m.client().transport().0.lock().unwrap();
    assert!(s.stable == want, "stable data differs after the resend");
    assert!(s.volatile.is_empty());
}

#[tokio::test]
async fn commit_window_bounds_unstable_data_and_keeps_later_writes_after_a_reboot() {
    let io = IoOptions {
        commit_window: 256 << 10,
        in_flight: 4,
        ..IoOptions::default()
    };
    let m = mount(
        State {
            reboot_at_commit: Some(2),
            ..State::default()
        },
        io,
    )
    .await;
    let want = data(1 << 20);
    let fh = NfsFh3::new(&[2; 8]).unwrap();
    let mut w = m.writer(&fh, 0);
    for chunk in want.chunks(100_000) {
        w.write(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    let stats = w.finish().await.unwrap();
    assert!(stats.commits >= 3, "{stats:?}");
    assert!(
        stats.resent_bytes > 0 && stats.resent_bytes <= 512 << 10,
        "{stats:?}"
    );
    let s = m.client().transport().0.lock().unwrap();
    assert!(s.stable == want, "stable data differs");
}

#[tokio::test]
async fn readdirplus_without_progress_is_a_protocol_error() {
    let m = mount(
        State {
            stuck_readdir: true,
            ..State::default()
        },
        IoOptions::default(),
    )
    .await;
    let root = m.root().clone();
    let e = m.list_dir(&root).await.unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e}");
}

#[tokio::test]
async fn rpc_errors_surface_as_rpc_variants() {
    let m = mount(State::default(), IoOptions::default()).await;
    let e = m.client().getattr(m.root()).await.unwrap_err();
    assert!(matches!(e, Error::Rpc(RpcError::ProcUnavail)), "{e}");
}
