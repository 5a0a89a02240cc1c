//! [`OpenFile`]: an open file's UNSTABLE writes, kept until a COMMIT
//! with the same write verifier confirms them, resent FILE_SYNC when the
//! verifier changes (the server restarted and may have lost them:
//! RFC 1813 §3.3.7, §3.3.21).

use bytes::Bytes;
use nfs_client::nfs::v3::{NfsFh3, StableHow, Writeverf3};
use nfs_client::{Error, Mount, Result};
use oncrpc::ClientTransport;

/// Verifier changes tolerated within one write before giving up.
const MAX_VERIFIER_CHANGES: u32 = 3;

/// UNSTABLE writes not yet confirmed by a COMMIT.
#[derive(Debug, Default)]
struct Unstable {
    /// The verifier the server returned with them.
    verf: Option<Writeverf3>,
    /// The data, for a resend if the verifier changes.
    pending: Vec<(u64, Bytes)>,
    /// Bytes in `pending`.
    bytes: u64,
}

/// An open file: its handle and its unconfirmed writes. Writes to one
/// open file are serialised.
#[derive(Debug)]
pub(crate) struct OpenFile {
    /// The file's handle.
    pub(crate) fh: NfsFh3,
    unstable: tokio::sync::Mutex<Unstable>,
}

/// What a [`write_all`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// All of it is on stable storage.
    Stable,
    /// All of it was accepted UNSTABLE under this verifier.
    Unstable(Writeverf3),
    /// The verifier changed between its WRITEs: the first ones may be
    /// lost.
    Changed,
}

/// Sends `data` at `offset` with `stable`, in as many WRITEs as the
/// server's size and short writes take (RFC 1813 §3.3.7).
async fn write_all<T: ClientTransport>(
    m: &Mount<T>,
    fh: &NfsFh3,
    offset: u64,
    data: &Bytes,
    stable: StableHow,
) -> Result<Sent> {
    let ws = m.write_size() as usize;
    let mut done = 0usize;
    let mut verf = None;
    while done < data.len() {
        let end = done.saturating_add(ws).min(data.len());
        let at = offset.saturating_add(done as u64);
        let r = m
            .client()
            .write(fh, at, data.slice(done..end), stable)
            .await?;
        if r.count == 0 {
            return Err(Error::Protocol("WRITE made no progress"));
        }
        if r.committed != StableHow::FILE_SYNC {
            if stable == StableHow::FILE_SYNC {
                return Err(Error::Protocol("FILE_SYNC WRITE answered as not stable"));
            }
            if verf.is_some_and(|v| v != r.verf) {
                return Ok(Sent::Changed);
            }
            verf = Some(r.verf);
        }
        done += r.count as usize;
    }
    Ok(verf.map_or(Sent::Stable, Sent::Unstable))
}

/// Resends every pending write FILE_SYNC: the server's verifier changed,
/// so it may have lost them (RFC 1813 §3.3.7).
async fn resend<T: ClientTransport>(m: &Mount<T>, fh: &NfsFh3, st: &mut Unstable) -> Result<()> {
    tracing::warn!(
        writes = st.pending.len(),
        bytes = st.bytes,
        "server write verifier changed: resending unstable writes"
    );
    for (off, data) in &st.pending {
        if write_all(m, fh, *off, data, StableHow::FILE_SYNC).await? != Sent::Stable {
            return Err(Error::Protocol("FILE_SYNC WRITE answered as not stable"));
        }
    }
    st.pending.clear();
    st.bytes = 0;
    st.verf = None;
    Ok(())
}

/// COMMIT (RFC 1813 §3.3.21) of the pending writes; a verifier other
/// than the writes' resends them FILE_SYNC.
async fn commit<T: ClientTransport>(m: &Mount<T>, fh: &NfsFh3, st: &mut Unstable) -> Result<()> {
    if st.pending.is_empty() {
        return Ok(());
    }
    let c = m.client().commit(fh, 0, 0).await?;
    if st.verf != Some(c.verf) {
        return resend(m, fh, st).await;
    }
    st.pending.clear();
    st.bytes = 0;
    st.verf = None;
    Ok(())
}

impl OpenFile {
    /// An open file with nothing pending.
    pub(crate) fn new(fh: NfsFh3) -> Self {
        Self {
            fh,
            unstable: tokio::sync::Mutex::new(Unstable::default()),
        }
    }

    /// An UNSTABLE write (RFC 1813 §3.3.7) of `data` at `offset`, kept
    /// for a resend until a COMMIT confirms it; commits when the mount's
    /// commit window fills. A reply with a new verifier means earlier
    /// writes may be lost: they are resent (and this one too when the
    /// change came in the middle of it).
    pub(crate) async fn write<T: ClientTransport>(
        &self,
        m: &Mount<T>,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let data = Bytes::copy_from_slice(data);
        let mut st = self.unstable.lock().await;
        let mut changes = 0;
        loop {
            match write_all(m, &self.fh, offset, &data, StableHow::UNSTABLE).await? {
                Sent::Stable => return Ok(()),
                Sent::Unstable(verf) => {
                    if st.verf.is_some_and(|v| v != verf) {
                        // This write went to the new instance; the
                        // earlier ones may be lost.
                        resend(m, &self.fh, &mut st).await?;
                    }
                    st.verf = Some(verf);
                    break;
                }
                Sent::Changed => {
                    changes += 1;
                    if changes > MAX_VERIFIER_CHANGES {
                        return Err(Error::Protocol("write verifier keeps changing"));
                    }
                    resend(m, &self.fh, &mut st).await?;
                }
            }
        }
        st.bytes = st.bytes.saturating_add(data.len() as u64);
        st.pending.push((offset, data));
        if st.bytes >= m.options().commit_window {
            commit(m, &self.fh, &mut st).await?;
        }
        Ok(())
    }

    /// COMMITs what is pending (RFC 1813 §3.3.21), resending it FILE_SYNC
    /// if the server's verifier changed.
    pub(crate) async fn commit<T: ClientTransport>(&self, m: &Mount<T>) -> Result<()> {
        let mut st = self.unstable.lock().await;
        commit(m, &self.fh, &mut st).await
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
        (fake, m, OpenFile::new(NfsFh3::new(&[2; 8]).unwrap()))
    }

    fn data(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8 ^ seed).collect()
    }

    #[tokio::test]
    async fn commit_with_the_same_verifier_confirms_unstable_writes() {
        let (fake, m, f) = setup(State::default(), IoOptions::default()).await;
        let a = data(10_000, 1);
        f.write(&m, 0, &a).await.unwrap();
        assert!(fake.0.lock().unwrap().disk.is_empty());
        assert_eq!(f.pending_bytes().await, 10_000);
        f.commit(&m).await.unwrap();
        {
            let s = fake.0.lock().unwrap();
            assert_eq!(s.disk, a);
            assert_eq!((s.commits, s.sync_writes), (1, 0));
        }
        assert_eq!(f.pending_bytes().await, 0);
        // Nothing pending: no COMMIT goes out.
        f.commit(&m).await.unwrap();
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
        f.write(&m, 0, &a).await.unwrap();
        f.write(&m, 6000, &b).await.unwrap();
        f.commit(&m).await.unwrap();
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
        f.write(&m, 0, &a).await.unwrap();
        f.write(&m, 4096, &b).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().sync_writes, 1, "a resent");
        f.commit(&m).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().disk, [a, b].concat());
    }

    #[tokio::test]
    async fn full_commit_window_commits_without_waiting_for_close() {
        let io = IoOptions {
            commit_window: 8192,
            ..IoOptions::default()
        };
        let (fake, m, f) = setup(State::default(), io).await;
        f.write(&m, 0, &data(4096, 6)).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().commits, 0);
        f.write(&m, 4096, &data(4096, 7)).await.unwrap();
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
        f.write(&m, 0, &a).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().writes, 4, "two WRITEs, twice");
        f.commit(&m).await.unwrap();
        assert_eq!(fake.0.lock().unwrap().disk, a);
    }

    #[tokio::test]
    async fn a_verifier_that_keeps_changing_is_an_error() {
        let state = State {
            restart_every_write: true,
            ..State::default()
        };
        let (_, m, f) = setup(state, IoOptions::default()).await;
        let r = f.write(&m, 0, &data(8192, 11)).await;
        assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
    }
}
