//! [`OpenFile`]: an open file's UNSTABLE writes, kept until a COMMIT
//! with the same write verifier confirms them, resent FILE_SYNC when the
//! verifier changes (the server restarted and may have lost them:
//! RFC 1813 §3.3.7, §3.3.21; RFC 8881 §18.32.3, §18.3.3). The same logic
//! serves both NFS versions through [`Target`].

use bytes::Bytes;
use fuser::Errno;
use nfs_client::nfs::v3::{NfsFh3, StableHow};
use nfs_client::Mount;
use oncrpc::ClientTransport;

use super::table::errno;

/// Verifier changes tolerated within one write before giving up.
const MAX_VERIFIER_CHANGES: u32 = 3;

/// A write verifier (`writeverf3`, `verifier4`: eight bytes either way).
pub(crate) type Verf = [u8; 8];

type Res<T> = Result<T, Errno>;

/// Where an open file's writes go: one file on the server, over NFSv3 or
/// NFSv4.
pub(crate) trait Target {
    /// Largest WRITE.
    fn write_size(&self) -> usize;
    /// Bytes kept pending before a COMMIT goes out unasked.
    fn commit_window(&self) -> u64;
    /// One WRITE of `data` at `offset`, FILE_SYNC when `sync` else
    /// UNSTABLE: the bytes written, and the verifier when they are not
    /// on stable storage yet.
    async fn write(&self, offset: u64, data: Bytes, sync: bool) -> Res<(u32, Option<Verf>)>;
    /// COMMIT of the whole file: the verifier.
    async fn commit(&self) -> Res<Verf>;
}

/// An NFSv3 file as a [`Target`] (RFC 1813 §3.3.7, §3.3.21).
pub(crate) struct V3<'a, T> {
    pub(crate) m: &'a Mount<T>,
    pub(crate) fh: &'a NfsFh3,
}

impl<T: ClientTransport> Target for V3<'_, T> {
    fn write_size(&self) -> usize {
        self.m.write_size() as usize
    }

    fn commit_window(&self) -> u64 {
        self.m.options().commit_window
    }

    async fn write(&self, offset: u64, data: Bytes, sync: bool) -> Res<(u32, Option<Verf>)> {
        let stable = if sync {
            StableHow::FILE_SYNC
        } else {
            StableHow::UNSTABLE
        };
        let r = self
            .m
            .client()
            .write(self.fh, offset, data, stable)
            .await
            .map_err(|e| errno(&e))?;
        let verf = (r.committed != StableHow::FILE_SYNC).then_some(r.verf.0);
        Ok((r.count, verf))
    }

    async fn commit(&self) -> Res<Verf> {
        let c = self.m.client().commit(self.fh, 0, 0).await;
        Ok(c.map_err(|e| errno(&e))?.verf.0)
    }
}

fn protocol(what: &str) -> Errno {
    tracing::warn!("server broke the protocol: {what}");
    Errno::EIO
}

/// UNSTABLE writes not yet confirmed by a COMMIT.
#[derive(Debug, Default)]
struct Unstable {
    /// The verifier the server returned with them.
    verf: Option<Verf>,
    /// The data, for a resend if the verifier changes.
    pending: Vec<(u64, Bytes)>,
    /// Bytes in `pending`.
    bytes: u64,
}

/// An open file's unconfirmed writes. Writes to one open file are
/// serialised.
#[derive(Debug, Default)]
pub(crate) struct OpenFile {
    unstable: tokio::sync::Mutex<Unstable>,
}

/// What a [`write_all`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// All of it is on stable storage.
    Stable,
    /// All of it was accepted UNSTABLE under this verifier.
    Unstable(Verf),
    /// The verifier changed between its WRITEs: the first ones may be
    /// lost.
    Changed,
}

/// Sends `data` at `offset`, in as many WRITEs as the server's size and
/// short writes take (RFC 1813 §3.3.7).
async fn write_all<W: Target>(w: &W, offset: u64, data: &Bytes, sync: bool) -> Res<Sent> {
    let ws = w.write_size().max(1);
    let mut done = 0usize;
    let mut verf = None;
    while done < data.len() {
        let end = done.saturating_add(ws).min(data.len());
        let at = offset.saturating_add(done as u64);
        let (count, v) = w.write(at, data.slice(done..end), sync).await?;
        if count == 0 {
            return Err(protocol("WRITE made no progress"));
        }
        if let Some(v) = v {
            if sync {
                return Err(protocol("FILE_SYNC WRITE answered as not stable"));
            }
            if verf.is_some_and(|x| x != v) {
                return Ok(Sent::Changed);
            }
            verf = Some(v);
        }
        done += count as usize;
    }
    Ok(verf.map_or(Sent::Stable, Sent::Unstable))
}

/// Resends every pending write FILE_SYNC: the server's verifier changed,
/// so it may have lost them.
async fn resend<W: Target>(w: &W, st: &mut Unstable) -> Res<()> {
    tracing::warn!(
        writes = st.pending.len(),
        bytes = st.bytes,
        "server write verifier changed: resending unstable writes"
    );
    for (off, data) in &st.pending {
        if write_all(w, *off, data, true).await? != Sent::Stable {
            return Err(protocol("FILE_SYNC WRITE answered as not stable"));
        }
    }
    st.pending.clear();
    st.bytes = 0;
    st.verf = None;
    Ok(())
}

/// COMMIT of the pending writes; a verifier other than the writes'
/// resends them FILE_SYNC.
async fn commit<W: Target>(w: &W, st: &mut Unstable) -> Res<()> {
    if st.pending.is_empty() {
        return Ok(());
    }
    let c = w.commit().await?;
    if st.verf != Some(c) {
        return resend(w, st).await;
    }
    st.pending.clear();
    st.bytes = 0;
    st.verf = None;
    Ok(())
}

impl OpenFile {
    /// An UNSTABLE write of `data` at `offset`, kept for a resend until
    /// a COMMIT confirms it; commits when the commit window fills. A
    /// reply with a new verifier means earlier writes may be lost: they
    /// are resent (and this one too when the change came in the middle
    /// of it).
    pub(crate) async fn write<W: Target>(&self, w: &W, offset: u64, data: &[u8]) -> Res<()> {
        let data = Bytes::copy_from_slice(data);
        let mut st = self.unstable.lock().await;
        let mut changes = 0;
        loop {
            match write_all(w, offset, &data, false).await? {
                Sent::Stable => return Ok(()),
                Sent::Unstable(verf) => {
                    if st.verf.is_some_and(|v| v != verf) {
                        // This write went to the new instance; the
                        // earlier ones may be lost.
                        resend(w, &mut st).await?;
                    }
                    st.verf = Some(verf);
                    break;
                }
                Sent::Changed => {
                    changes += 1;
                    if changes > MAX_VERIFIER_CHANGES {
                        return Err(protocol("write verifier keeps changing"));
                    }
                    resend(w, &mut st).await?;
                }
            }
        }
        st.bytes = st.bytes.saturating_add(data.len() as u64);
        st.pending.push((offset, data));
        if st.bytes >= w.commit_window() {
            commit(w, &mut st).await?;
        }
        Ok(())
    }

    /// COMMITs what is pending, resending it FILE_SYNC if the server's
    /// verifier changed.
    pub(crate) async fn commit<W: Target>(&self, w: &W) -> Res<()> {
        let mut st = self.unstable.lock().await;
        commit(w, &mut st).await
    }

    /// Bytes written but not yet confirmed.
    #[cfg(test)]
    async fn pending_bytes(&self) -> u64 {
        self.unstable.lock().await.bytes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use nfs_client::nfs::v3::*;
    use nfs_client::nfs::xdr::{self, FixedOpaque};
    use nfs_client::{IoOptions, Nfs3Client};
    use oncrpc::msg::OpaqueAuth;
    use oncrpc::{RpcCall, RpcError};

    use super::*;

    /// A server whose unstable data sits in memory until COMMIT, and
    /// which can "restart" (drop it, new verifier) on demand.
    #[derive(Default)]
    struct State {
        disk: Vec<u8>,
        volatile: Vec<(u64, Bytes)>,
        verf: u64,
        writes: u32,
        commits: u32,
        sync_writes: u32,
        /// Restart just before answering this WRITE (1-based).
        restart_at_write: Option<u32>,
        /// Restart before answering every WRITE.
        restart_every_write: bool,
        /// Restart just before answering this COMMIT (1-based).
        restart_at_commit: Option<u32>,
    }

    impl State {
        fn restart(&mut self) {
            self.volatile.clear();
            self.verf += 1;
        }
    }

    #[derive(Clone, Default)]
    struct Fake(Arc<Mutex<State>>);

    fn apply(buf: &mut Vec<u8>, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if buf.len() < end {
            buf.resize(end, 0);
        }
        buf[off as usize..end].copy_from_slice(data);
    }

    impl Fake {
        fn answer(&self, call: RpcCall) -> Result<Bytes, RpcError> {
            let wire = call.args.to_bytes();
            let args =
                Args3::decode(Nfsproc3(call.proc_), &wire).map_err(|_| RpcError::GarbageArgs)?;
            let mut s = self.0.lock().unwrap();
            Ok(match args {
                Args3::Fsinfo(_) => xdr::to_bytes(&Fsinfo3Res::Ok(Fsinfo3ResOk {
                    obj_attributes: None,
                    rtmax: 4096,
                    rtpref: 4096,
                    rtmult: 4096,
                    wtmax: 4096,
                    wtpref: 4096,
                    wtmult: 4096,
                    dtpref: 4096,
                    maxfilesize: u64::MAX,
                    time_delta: Nfstime3::default(),
                    properties: 0,
                })),
                Args3::Write(a) => {
                    s.writes += 1;
                    if s.restart_at_write == Some(s.writes) || s.restart_every_write {
                        s.restart();
                    }
                    let committed = if a.stable == StableHow::UNSTABLE {
                        s.volatile.push((a.offset, a.data.0.clone()));
                        StableHow::UNSTABLE
                    } else {
                        s.sync_writes += 1;
                        apply(&mut s.disk, a.offset, &a.data.0);
                        StableHow::FILE_SYNC
                    };
                    xdr::to_bytes(&Write3Res::Ok(Write3ResOk {
                        file_wcc: WccData::default(),
                        count: a.count,
                        committed,
                        verf: FixedOpaque(s.verf.to_be_bytes()),
                    }))
                }
                Args3::Commit(_) => {
                    s.commits += 1;
                    if s.restart_at_commit == Some(s.commits) {
                        s.restart();
                    }
                    for (o, d) in std::mem::take(&mut s.volatile) {
                        apply(&mut s.disk, o, &d);
                    }
                    xdr::to_bytes(&Commit3Res::Ok(Commit3ResOk {
                        file_wcc: WccData::default(),
                        verf: FixedOpaque(s.verf.to_be_bytes()),
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

    async fn setup(state: State, io: IoOptions) -> (Fake, Mount<Fake>, OpenFile) {
        let fake = Fake(Arc::new(Mutex::new(state)));
        let root = NfsFh3::new(&[1; 8]).unwrap();
        let m = Mount::new(Nfs3Client::new(fake.clone(), OpaqueAuth::NONE), root, io)
            .await
            .unwrap();
        (fake, m, OpenFile::default())
    }

    fn file() -> NfsFh3 {
        NfsFh3::new(&[2; 8]).unwrap()
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8 ^ seed).collect()
    }

    #[tokio::test]
    async fn commit_with_the_same_verifier_confirms_unstable_writes() {
        let (fake, m, f) = setup(State::default(), IoOptions::default()).await;
        let a = data(10_000, 1);
        f.write(&V3 { m: &m, fh: &file() }, 0, &a).await.unwrap();
        assert!(fake.0.lock().unwrap().disk.is_empty());
        assert_eq!(f.pending_bytes().await, 10_000);
        f.commit(&V3 { m: &m, fh: &file() }).await.unwrap();
        {
            let s = fake.0.lock().unwrap();
            assert_eq!(s.disk, a);
            assert_eq!((s.commits, s.sync_writes), (1, 0));
        }
        assert_eq!(f.pending_bytes().await, 0);
        // Nothing pending: no COMMIT goes out.
        f.commit(&V3 { m: &m, fh: &file() }).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().commits, 1);
    }

    #[tokio::test]
    async fn restart_before_commit_resends_the_writes_file_sync() {
        let state = State {
            restart_at_commit: Some(1),
            ..State::default()
        };
        let (fake, m, f) = setup(state, IoOptions::default()).await;
        let a = data(6000, 2);
        let b = data(3000, 3);
        f.write(&V3 { m: &m, fh: &file() }, 0, &a).await.unwrap();
        f.write(&V3 { m: &m, fh: &file() }, 6000, &b).await.unwrap();
        f.commit(&V3 { m: &m, fh: &file() }).await.unwrap();
        let s = fake.0.lock().unwrap();
        assert_eq!(s.disk, [a, b].concat());
        // 6000 bytes in two 4 KiB WRITEs, 3000 in one.
        assert_eq!(s.sync_writes, 3);
    }

    #[tokio::test]
    async fn restart_between_writes_resends_the_earlier_ones() {
        let state = State {
            restart_at_write: Some(2),
            ..State::default()
        };
        let (fake, m, f) = setup(state, IoOptions::default()).await;
        let a = data(4096, 4);
        let b = data(4096, 5);
        f.write(&V3 { m: &m, fh: &file() }, 0, &a).await.unwrap();
        f.write(&V3 { m: &m, fh: &file() }, 4096, &b).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().sync_writes, 1, "a resent");
        f.commit(&V3 { m: &m, fh: &file() }).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().disk, [a, b].concat());
    }

    #[tokio::test]
    async fn full_commit_window_commits_without_waiting_for_close() {
        let io = IoOptions {
            commit_window: 8192,
            ..IoOptions::default()
        };
        let (fake, m, f) = setup(State::default(), io).await;
        f.write(&V3 { m: &m, fh: &file() }, 0, &data(4096, 6))
            .await
            .unwrap();
        assert_eq!(fake.0.lock().unwrap().commits, 0);
        f.write(&V3 { m: &m, fh: &file() }, 4096, &data(4096, 7))
            .await
            .unwrap();
        assert_eq!(fake.0.lock().unwrap().commits, 1);
        assert_eq!(fake.0.lock().unwrap().disk.len(), 8192);
        assert_eq!(f.pending_bytes().await, 0);
    }

    #[tokio::test]
    async fn restart_within_a_write_sends_it_again() {
        let state = State {
            restart_at_write: Some(2),
            ..State::default()
        };
        let (fake, m, f) = setup(state, IoOptions::default()).await;
        let a = data(8192, 10);
        f.write(&V3 { m: &m, fh: &file() }, 0, &a).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().writes, 4, "two WRITEs, twice");
        f.commit(&V3 { m: &m, fh: &file() }).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().disk, a);
    }

    #[tokio::test]
    async fn a_verifier_that_keeps_changing_is_an_error() {
        let state = State {
            restart_every_write: true,
            ..State::default()
        };
        let (_, m, f) = setup(state, IoOptions::default()).await;
        let r = f
            .write(&V3 { m: &m, fh: &file() }, 0, &data(8192, 11))
            .await;
        assert_eq!(r, Err(Errno::EIO));
    }
}
