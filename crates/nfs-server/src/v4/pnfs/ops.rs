//! The layout operations of the metadata server (RFC 8881 §18.40,
//! §18.42 to §18.44; RFC 7862 §15.6, §15.7) on [`Nfs4Service`].

use std::sync::Arc;

use bytes::Bytes;
use nfs::v3::{Ftype3, Sattr3, SetTime};
use nfs::v4::flexfiles::{
    decode_body, encode_body, FfDataServer4, FfDeviceAddr4, FfDeviceVersions4, FfLayout4,
    FfLayoutreturn4, FfMirror4, Netaddr4,
};
use nfs::v4::*;
use xdr::{Bounded, Encode};

use super::control::{ControlError, DataFh};
use super::layouts::{DataFile, LayoutTable};
use super::placement::good;
use super::{data_file_name, device_id, device_index, Mds, DATA_FILE_MODE};
use crate::storage::Storage;
use crate::v4::fileops::{cur, key, resolve_sid};
use crate::v4::{Cx, Nfs4Service};

type R<T> = Result<T, Nfsstat4>;

fn status(r: R<()>) -> Nfsstat4 {
    r.err().unwrap_or(Nfsstat4::NFS4_OK)
}

fn flex(t: Layouttype4) -> R<()> {
    if t == Layouttype4::LAYOUT4_FLEX_FILES {
        Ok(())
    } else {
        Err(Nfsstat4::NFS4ERR_UNKNOWN_LAYOUTTYPE)
    }
}

fn client(cx: &Cx) -> R<u64> {
    cx.clientid().ok_or(Nfsstat4::NFS4ERR_OP_NOT_IN_SESSION)
}

impl<S: Storage> Nfs4Service<S> {
    /// The layout operations: NFS4ERR_NOTSUPP unless this server is a
    /// metadata server.
    pub(in crate::v4) async fn exec_pnfs(&self, op: &NfsArgop4, cx: &mut Cx) -> NfsResop4 {
        use NfsArgop4 as A;
        use NfsResop4 as Z;
        let Some(mds) = self.mds.clone() else {
            return NfsResop4::error(op.opnum(), Nfsstat4::NFS4ERR_NOTSUPP);
        };
        match op {
            A::Layoutget(a) => Z::Layoutget(match self.layoutget(&mds, a, cx).await {
                Ok(r) => Layoutget4Res::Ok(r),
                Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER) => Layoutget4Res::TryLater(false),
                Err(e) => Layoutget4Res::Err(e),
            }),
            A::Getdeviceinfo(a) => {
                let rdma = cx.peer.transport == oncrpc::TransportKind::Rdma;
                if let Some(d) = device_index(&a.device_id).and_then(|i| mds.ds.get(i)) {
                    d.learn_limits().await;
                }
                Z::Getdeviceinfo(getdeviceinfo(&mds, a, rdma))
            }
            A::Layoutcommit(a) => Z::Layoutcommit(self.layoutcommit(&mds, a, cx).await.into()),
            A::Layoutreturn(a) => Z::Layoutreturn(self.layoutreturn(&mds, a, cx).await.into()),
            A::Layouterror(a) => Z::Layouterror(status(self.layouterror(&mds, a, cx).await)),
            A::Layoutstats(a) => Z::Layoutstats(status(layoutstats(&mds, a, cx))),
            other => NfsResop4::error(other.opnum(), Nfsstat4::NFS4ERR_NOTSUPP),
        }
    }

    /// LAYOUTGET (RFC 8881 §18.43.3): a whole-file flex-files layout with
    /// one mirror per good copy of the file (RFC 8435 §8), each data file
    /// created first.
    async fn layoutget(&self, mds: &Mds, a: &Layoutget4Args, cx: &Cx) -> R<Layoutget4ResOk> {
        let c = client(cx)?;
        let fh = cur(cx)?;
        flex(a.layout_type)?;
        // RFC 8881 §18.43.3 (and §12.7.4): a metadata server that keeps
        // no layouts across a restart answers NFS4ERR_GRACE during its
        // grace period, while clients reclaim (LAYOUTCOMMIT with
        // `loca_reclaim`).
        self.state()?.may_take_state(c, false)?;
        let rw = match a.iomode {
            Layoutiomode4::LAYOUTIOMODE4_READ => false,
            Layoutiomode4::LAYOUTIOMODE4_RW => true,
            _ => return Err(Nfsstat4::NFS4ERR_BADIOMODE),
        };
        let end_ok = a.length == u64::MAX || a.offset.checked_add(a.length).is_some();
        if a.length == 0 || a.minlength > a.length || !end_ok {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        if rw && cx.read_only {
            return Err(Nfsstat4::NFS4ERR_ROFS);
        }
        let attr = self.regular(&fh).await?;
        // §18.43.3: an open, lock or delegation stateid of this file, or
        // the client's layout stateid; never a special one.
        let sid = resolve_sid(cx, &a.stateid)?;
        if sid.is_special() {
            return Err(Nfsstat4::NFS4ERR_BAD_STATEID);
        }
        let file = key(&fh);
        if !LayoutTable::is_layout_stateid(&sid) {
            self.state()?.io_check(&sid, c, &file, rw)?;
        }
        // Placing a file records it in the state directory: a failure
        // there is the server's, for now.
        let placed = mds.place(&attr).ok_or(Nfsstat4::NFS4ERR_LAYOUTTRYLATER)?;
        // RFC 8435 §8.3: no writer while a stale mirror is rebuilt.
        if rw && mds.writes_held(&attr) {
            return Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER);
        }
        // RFC 8435 §9.1.2: a client that reported every good copy's data
        // server unreachable does its I/O through the metadata server
        // for a while ([`super::holds`]).
        let good_ds: Vec<usize> = good(&placed).collect();
        if !good_ds.is_empty() && good_ds.iter().all(|&i| mds.held(c, i, self.clock.now())) {
            return Err(Nfsstat4::NFS4ERR_LAYOUTUNAVAILABLE);
        }
        let name = data_file_name(attr.fsid, attr.fileid);
        let (mirrors, at) = self.mirrors(mds, &attr, &name, good_ds).await?;
        let body = FfLayout4 {
            stripe_unit: 0,
            mirrors: Bounded(mirrors),
            // RFC 8435 §5.1: I/O through the metadata server works
            // ([`super::proxy`]), so FF_FLAGS_NO_IO_THRU_MDS is not set;
            // §8.2.2: the client writes every mirror itself, so
            // FF_FLAGS_WRITE_ONE_MIRROR is not set either.
            flags: 0,
            stats_collect_hint: 0,
        };
        let mut ok = Layoutget4ResOk {
            return_on_close: false,
            stateid: sid,
            layout: Bounded(vec![Layout4 {
                offset: 0,
                length: u64::MAX,
                iomode: a.iomode,
                content: LayoutContent4 {
                    layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
                    body: encode_body(&body),
                },
            }]),
        };
        // §18.43.3: a reply body larger than loga_maxcount is TOOSMALL.
        if ok.encoded_len() > a.maxcount as usize {
            return Err(Nfsstat4::NFS4ERR_TOOSMALL);
        }
        // RFC 8881 §12.7.4: what the client writes through the layout
        // reaches the size here only by LAYOUTCOMMIT; the mark lets a
        // restarted server learn it from the data servers ([`written`]).
        if rw {
            mds.mark_written(&attr, &fh).map_err(|e| {
                tracing::error!(error = %e, "pNFS written mark not recorded");
                Nfsstat4::NFS4ERR_LAYOUTTRYLATER
            })?;
        }
        let mut t = mds
            .layouts
            .lock()
            .map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)?;
        // Checked again under the layout lock: a rebuild that began
        // meanwhile waits for the layouts it finds, so none may follow.
        if rw && mds.writes_held(&attr) {
            return Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER);
        }
        ok.stateid = t.grant(c, &file, a.iomode, &sid, &at)?;
        Ok(ok)
    }

    /// The layout's mirrors (RFC 8435 §5.1, §8): one per copy on the data
    /// servers `good`, each data file created if missing, and where they
    /// are. A copy whose data server cannot be reached is left out and
    /// marked stale (§8.2.3) when another is there; with none, a server
    /// that cannot be reached is LAYOUTTRYLATER, one refusing the data
    /// file LAYOUTUNAVAILABLE.
    async fn mirrors(
        &self,
        mds: &Mds,
        attr: &nfs::v3::Fattr3,
        name: &str,
        good: Vec<usize>,
    ) -> R<(Vec<FfMirror4>, Vec<DataFile>)> {
        let mut mirrors = Vec::new();
        let mut at = Vec::new();
        let mut lost = Vec::new();
        let mut refused = false;
        for i in good {
            match mds.ds[i]
                .ensure(name, mds.cfg.uid, mds.cfg.gid, DATA_FILE_MODE)
                .await
            {
                Ok(d) => {
                    mirrors.push(mirror(i, &d));
                    at.push(DataFile {
                        ds: i,
                        name: name.to_owned(),
                    });
                }
                Err(e) => {
                    tracing::warn!(ds = i, file = %name, error = ?e, "pNFS data file not available");
                    match e {
                        ControlError::Unreachable => {
                            mds.ds_lost(i);
                            lost.push(i);
                        }
                        ControlError::Nfs(_) => refused = true,
                    }
                }
            }
        }
        if refused {
            return Err(Nfsstat4::NFS4ERR_LAYOUTUNAVAILABLE);
        }
        if mirrors.is_empty() {
            return Err(Nfsstat4::NFS4ERR_LAYOUTTRYLATER);
        }
        for i in lost {
            mds.mirror_failed(attr.fsid, attr.fileid, i);
        }
        Ok((mirrors, at))
    }

    /// LAYOUTCOMMIT (RFC 8881 §18.42.3): the size grows to the last byte
    /// written and the mtime becomes the client's (or the server's) time.
    async fn layoutcommit(
        &self,
        mds: &Mds,
        a: &Layoutcommit4Args,
        cx: &Cx,
    ) -> R<Layoutcommit4ResOk> {
        let c = client(cx)?;
        let fh = cur(cx)?;
        flex(a.layoutupdate.layout_type)?;
        if a.reclaim {
            // §18.42.3, §12.7.4: after a restart of the metadata server,
            // in its grace period, a client of the previous instance
            // commits what it wrote through the layout it held then
            // (before its RECLAIM_COMPLETE); this instance never granted
            // that layout, so there is no layout stateid to check. Any
            // other reclaim is NFS4ERR_NO_GRACE.
            self.state()?.may_reclaim(c)?;
        } else {
            let sid = resolve_sid(cx, &a.stateid)?;
            let t = mds
                .layouts
                .lock()
                .map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)?;
            if !t.check(c, &key(&fh), &sid)?.rw {
                return Err(Nfsstat4::NFS4ERR_BADIOMODE);
            }
        }
        let attr = self.regular(&fh).await?;
        let end = a.last_write_offset.map(|o| o.saturating_add(1));
        let size = end.filter(|&e| e > attr.size);
        let mtime = match a.time_modify {
            Some(t) => SetTime::ClientTime(nfs::v3::Nfstime3 {
                seconds: u32::try_from(t.seconds).map_err(|_| Nfsstat4::NFS4ERR_INVAL)?,
                nseconds: t.nseconds.min(999_999_999),
            }),
            None => SetTime::ServerTime,
        };
        let s = Sattr3 {
            size,
            mtime,
            ..Sattr3::default()
        };
        // The server's own change for the layout's holder: not a local
        // change to a file it may hold a delegation on (v4::watch).
        let own = self.watch.changing(&key(&fh));
        let r = self.fs.setattr(&fh, &s, None).await;
        drop(own);
        r.map_err(crate::v4::attrs::st4)?;
        Ok(Layoutcommit4ResOk { newsize: size })
    }

    /// LAYOUTRETURN (RFC 8881 §18.44.3); the flex-files body's error and
    /// statistics reports (RFC 8435 §9.3) are logged, and a mirror whose
    /// data server failed the client is marked stale (§8.2.3) once the
    /// return is done.
    async fn layoutreturn(
        &self,
        mds: &Mds,
        a: &Layoutreturn4Args,
        cx: &Cx,
    ) -> R<Layoutreturn4ResOk> {
        let c = client(cx)?;
        flex(a.layout_type)?;
        if !(1..=3).contains(&a.iomode.0) {
            return Err(Nfsstat4::NFS4ERR_INVAL);
        }
        let (r, failed) = {
            let mut t = mds
                .layouts
                .lock()
                .map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)?;
            match &a.layoutreturn {
                Layoutreturn4::File(f) => {
                    let fh = cur(cx)?;
                    let errors = return_body_errors(c, &f.body.0);
                    let mut failed = Vec::new();
                    for e in &errors {
                        note_failed(&mut failed, e, mds.ds.len());
                        self.note_unreachable(mds, c, e);
                    }
                    let sid = resolve_sid(cx, &f.stateid)?;
                    (t.return_file(c, &key(&fh), a.iomode, &sid), failed)
                }
                Layoutreturn4::Fsid | Layoutreturn4::All => {
                    t.return_all(c);
                    (Ok(None), Vec::new())
                }
            }
        };
        tracing::debug!(client = c, iomode = a.iomode.0, result = ?r.as_ref().map(|_| ()), "LAYOUTRETURN");
        if r.is_ok() && !failed.is_empty() {
            self.mirrors_failed(mds, cx, &failed).await;
        }
        if let (Ok(_), Layoutreturn4::File(_)) = (&r, &a.layoutreturn) {
            self.settle_when_returned(cx).await;
        }
        r
    }

    /// After a LAYOUTRETURN of a file: once no read-write layout of it
    /// is left, its size is compared with its data files' and its mark
    /// settled ([`written`]), in the background.
    async fn settle_when_returned(&self, cx: &Cx) {
        let (Some(mds), Ok(fh)) = (self.mds.clone(), cur(cx)) else {
            return;
        };
        let file = key(&fh);
        let writers = mds
            .layouts
            .lock()
            .map_or(true, |t| t.any(|f, l| *f == file && l.rw));
        if writers {
            return;
        }
        let Ok(attr) = self.fs.getattr(&fh).await else {
            return;
        };
        let m = super::written::Marked {
            fsid: attr.fsid,
            fileid: attr.fileid,
            fh: file,
        };
        let fs = Arc::clone(&self.fs);
        let (watch, k) = (Arc::clone(&self.watch), key(&fh));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let own = watch.changing(&k);
                mds.settle_size(&*fs, &m).await;
                drop(own);
            });
        }
    }

    /// The client reported I/O errors on the data servers `failed` for
    /// the current file: their mirrors of it are marked stale (RFC 8435
    /// §8.2.3), never the last good one.
    async fn mirrors_failed(&self, mds: &Mds, cx: &Cx, failed: &[usize]) {
        let Ok(fh) = cur(cx) else { return };
        let Ok(attr) = self.regular(&fh).await else {
            return;
        };
        for &i in failed {
            mds.mirror_failed(attr.fsid, attr.fileid, i);
        }
    }

    /// A client reported data server `e` unreachable (NFS4ERR_NXIO, RFC
    /// 8435 §9.1.2): its LAYOUTGETs of files there are refused for a
    /// while ([`super::holds`]).
    fn note_unreachable(&self, mds: &Mds, c: u64, e: &DeviceError4) {
        let Some(i) = device_index(&e.deviceid).filter(|&i| i < mds.ds.len()) else {
            return;
        };
        if e.status != Nfsstat4::NFS4ERR_NXIO {
            return;
        }
        let hold = mds.cfg.ds_error_hold;
        if let Ok(mut h) = mds.holds.lock() {
            h.hold(c, i, self.clock.now().saturating_add(hold));
        }
        tracing::info!(
            client = c,
            ds = i,
            secs = hold.as_secs(),
            "pNFS client cannot reach a data server: its layouts of files there are LAYOUTUNAVAILABLE meanwhile (I/O through the metadata server)"
        );
    }

    /// LAYOUTERROR (RFC 7862 §15.6.3): each device error is logged, and
    /// the mirrors on the data servers named are marked stale (RFC 8435
    /// §8.2.3).
    async fn layouterror(&self, mds: &Mds, a: &Layouterror4Args, cx: &Cx) -> R<()> {
        let c = layout_holder(mds, cx, &a.stateid)?;
        let mut failed = Vec::new();
        for e in &a.errors.0 {
            tracing::warn!(
                client = c,
                ds = ?device_index(&e.deviceid),
                status = ?e.status,
                op = e.opnum,
                offset = a.offset,
                length = a.length,
                "pNFS client reports a data server error"
            );
            note_failed(&mut failed, e, mds.ds.len());
            self.note_unreachable(mds, c, e);
        }
        self.mirrors_failed(mds, cx, &failed).await;
        Ok(())
    }

    /// The file `attr` (of `fh`) was removed: its layouts go and so does
    /// its data file ([`Mds::removed`]).
    pub(in crate::v4) async fn pnfs_removed(&self, fh: &nfs::v3::NfsFh3, attr: &nfs::v3::Fattr3) {
        if let Some(mds) = &self.mds {
            Box::pin(mds.removed(fh, attr)).await;
        }
    }

    /// RFC 8881 §5.12: a metadata server offers flex-files layouts on
    /// every file system (`fs_layout_types`) and prefers I/O of
    /// `layout_blksize` bytes; both join `supported_attrs`.
    pub(in crate::v4) fn pnfs_attrs(&self, attrs: &mut nfs::v4::attr::FileAttrs) {
        use nfs::v4::attr::{FATTR4_FS_LAYOUT_TYPES, FATTR4_LAYOUT_BLKSIZE};
        let Some(mds) = &self.mds else { return };
        attrs.fs_layout_types = Some(Bounded(vec![Layouttype4::LAYOUT4_FLEX_FILES]));
        attrs.layout_blksize = Some(mds.cfg.io_size);
        if let Some(s) = attrs.supported_attrs.as_mut() {
            s.insert(FATTR4_FS_LAYOUT_TYPES);
            s.insert(FATTR4_LAYOUT_BLKSIZE);
        }
    }

    /// RFC 8435 §6: while a client holds a read-write layout on a
    /// regular file, its size is the larger of the metadata server's and
    /// the data file's (writes reach the data server before LAYOUTCOMMIT).
    pub(in crate::v4) async fn pnfs_size(
        &self,
        fh: &nfs::v3::NfsFh3,
        attr: &nfs::v3::Fattr3,
    ) -> Option<u64> {
        let mds = self.mds.as_ref()?;
        if attr.ftype != Ftype3::NF3REG || !mds.layouts.lock().ok()?.writers(&key(fh)) {
            return None;
        }
        // The first good mirror that answers (every one takes each write,
        // RFC 8435 §8.2).
        let m = mds.placed(attr)?;
        let name = data_file_name(attr.fsid, attr.fileid);
        for i in good(&m) {
            match Box::pin(mds.ds[i].size(&name)).await {
                Ok(ds) => return Some(ds.max(attr.size)),
                Err(e) => {
                    mds.control_failed(i, e);
                }
            }
        }
        None
    }

    /// A SETATTR of `s` applied to the file `fh` (`attr` before it):
    /// layouts recalled, the data file truncated ([`Mds::attrs_set`]).
    pub(in crate::v4) async fn pnfs_setattr(
        &self,
        fh: &nfs::v3::NfsFh3,
        attr: &nfs::v3::Fattr3,
        s: &Sattr3,
    ) -> R<()> {
        match &self.mds {
            Some(mds) => Box::pin(mds.attrs_set(fh, attr, s))
                .await
                .map_err(crate::v4::attrs::st4),
            None => Ok(()),
        }
    }

    /// Whether `op` is an NFSv4.2 data operation this server does not
    /// offer because it is a metadata server, whose files hold no data
    /// (SEEK, READ_PLUS, COPY, CLONE, ALLOCATE, DEALLOCATE: RFC 7862
    /// §15 lets a server answer NFS4ERR_NOTSUPP; clients fall back to
    /// READ, WRITE and local copies, which reach the data servers).
    pub(in crate::v4) fn pnfs_data_op_absent(&self, op: &NfsArgop4) -> bool {
        use NfsArgop4 as A;
        self.mds.is_some()
            && matches!(
                op,
                A::Seek(_)
                    | A::ReadPlus(_)
                    | A::Copy(_)
                    | A::Clone(_)
                    | A::Allocate(_)
                    | A::Deallocate(_)
            )
    }

    /// Lets the metadata server recall layouts through this service's
    /// back channels (again after they change).
    pub(in crate::v4) fn bind_mds(&self) {
        if let Some(mds) = &self.mds {
            if let Ok(mut st) = self.state.lock() {
                st.mds = Some(Arc::downgrade(mds));
            }
            mds.bind(super::recall::Recaller {
                state: Arc::clone(&self.state),
                cbs: self.cbs.clone(),
                clock: Arc::clone(&self.clock),
                mds: Arc::downgrade(mds),
            });
            mds.recover_sizes(Arc::clone(&self.fs));
        }
    }

    /// The metadata server, if this server is one.
    pub fn mds(&self) -> Option<&Arc<Mds>> {
        self.mds.as_ref()
    }
}

/// GETDEVICEINFO (RFC 8881 §18.40.3; RFC 8435 §5.1): the data server's
/// `tcp` address and, if it serves RPC-over-RDMA, its `rdma` one, NFSv3.
/// The order is the preference (§5.1: `ffda_netaddrs` in the order the
/// client should try them; Linux takes the first that connects): `rdma`
/// first to a client that reached the metadata server over RPC-over-RDMA
/// (`over_rdma`), `tcp` first to the others. A `maxcount` of zero sets no
/// limit; a body above a non-zero one is NFS4ERR_TOOSMALL with the size
/// needed.
fn getdeviceinfo(mds: &Mds, a: &Getdeviceinfo4Args, over_rdma: bool) -> Getdeviceinfo4Res {
    if let Err(e) = flex(a.layout_type) {
        return Getdeviceinfo4Res::Err(e);
    }
    let Some(i) = device_index(&a.device_id).filter(|&i| i < mds.ds.len()) else {
        return Getdeviceinfo4Res::Err(Nfsstat4::NFS4ERR_NOENT);
    };
    let ds = &mds.cfg.data_servers[i];
    // RFC 8435 §5.1: ffdv_rsize / ffdv_wsize, within what the data
    // server's FSINFO allows (learnt by the LAYOUTGET that named it).
    let (rsize, wsize) = mds.ds[i].io_sizes(mds.cfg.io_size);
    let netid = |base: &str, sa: std::net::SocketAddr| {
        let six = if sa.is_ipv6() { "6" } else { "" };
        Netaddr4::from_socket(&format!("{base}{six}"), sa)
    };
    let seen = |sa: std::net::SocketAddr| match ds.advertise {
        Some(ip) => std::net::SocketAddr::new(ip, sa.port()),
        None => sa,
    };
    let mut netaddrs = vec![netid("tcp", seen(ds.tcp))];
    if let Some(r) = ds.rdma {
        let at = if over_rdma { 0 } else { 1 };
        netaddrs.insert(at, netid("rdma", seen(r)));
    }
    let addr = FfDeviceAddr4 {
        netaddrs: Bounded(netaddrs),
        versions: Bounded(vec![FfDeviceVersions4 {
            version: 3,
            minorversion: 0,
            rsize,
            wsize,
            tightly_coupled: false,
        }]),
    };
    let ok = Getdeviceinfo4ResOk {
        device_addr: DeviceAddr4 {
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            addr_body: encode_body(&addr),
        },
        notification: nfs::v4::attr::Bitmap4::new(),
    };
    let need = ok.encoded_len();
    if a.maxcount != 0 && need > a.maxcount as usize {
        return Getdeviceinfo4Res::TooSmall(need as u32);
    }
    Getdeviceinfo4Res::Ok(ok)
}

/// The client of `cx`, once `stateid` is checked to name its layout of
/// the current file (LAYOUTERROR, LAYOUTSTATS).
fn layout_holder(mds: &Mds, cx: &Cx, stateid: &Stateid4) -> R<u64> {
    let c = client(cx)?;
    let fh = cur(cx)?;
    let sid = resolve_sid(cx, stateid)?;
    mds.layouts
        .lock()
        .map_err(|_| Nfsstat4::NFS4ERR_SERVERFAULT)?
        .check(c, &key(&fh), &sid)?;
    Ok(c)
}

/// LAYOUTSTATS (RFC 7862 §15.7.3): logged at debug level.
fn layoutstats(mds: &Mds, a: &Layoutstats4Args, cx: &Cx) -> R<()> {
    let c = layout_holder(mds, cx, &a.stateid)?;
    tracing::debug!(
        client = c,
        ds = ?device_index(&a.deviceid),
        read_ops = a.read.count,
        read_bytes = a.read.bytes,
        write_ops = a.write.count,
        write_bytes = a.write.bytes,
        "pNFS layout statistics"
    );
    Ok(())
}

/// A layout's mirror on data server `i` (RFC 8435 §5.1): one data
/// server, the anonymous stateid (an NFSv3 data server has none), the
/// data file's owner now as user and group (the synthetic ids, or their
/// successors after fencing, §2.2).
fn mirror(i: usize, d: &DataFh) -> FfMirror4 {
    FfMirror4 {
        data_servers: Bounded(vec![FfDataServer4 {
            deviceid: device_id(i),
            efficiency: 0,
            stateid: Stateid4::ANONYMOUS,
            fh_vers: Bounded(vec![NfsFh4(Bytes::copy_from_slice(d.fh.as_bytes()))]),
            user: Bounded(Bytes::from(d.uid.to_string())),
            group: Bounded(Bytes::from(d.gid.to_string())),
        }]),
    }
}

/// Adds the data server a device error names to `failed` (once), when it
/// is one of the `n` and the status is an error: what LAYOUTERROR and a
/// LAYOUTRETURN's I/O error report both mark stale (RFC 8435 §8.2.3).
fn note_failed(failed: &mut Vec<usize>, e: &DeviceError4, n: usize) {
    if let Some(i) = device_index(&e.deviceid).filter(|&i| i < n) {
        if e.status != Nfsstat4::NFS4_OK && !failed.contains(&i) {
            failed.push(i);
        }
    }
}

/// RFC 8435 §9.3: logs the `ff_layoutreturn4` of a LAYOUTRETURN (an
/// empty body is allowed; one that does not decode is logged and
/// ignored, the return itself stands); the device errors it reports.
fn return_body_errors(c: u64, body: &[u8]) -> Vec<DeviceError4> {
    let mut failed = Vec::new();
    if body.is_empty() {
        return failed;
    }
    let r: FfLayoutreturn4 = match decode_body(body) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(client = c, error = %e, "flex-files LAYOUTRETURN body does not decode");
            return failed;
        }
    };
    for ioerr in &r.ioerr_report.0 {
        for e in &ioerr.errors.0 {
            tracing::warn!(
                client = c,
                ds = ?device_index(&e.deviceid),
                status = ?e.status,
                op = e.opnum,
                "pNFS client returned a layout after a data server error"
            );
            failed.push(e.clone());
        }
    }
    for s in &r.iostats_report.0 {
        tracing::debug!(
            client = c,
            ds = ?device_index(&s.deviceid),
            read_bytes = s.read.bytes,
            write_bytes = s.write.bytes,
            "pNFS layout return statistics"
        );
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::super::{DataServer, MdsConfig};
    use super::*;
    use std::net::SocketAddr;

    fn device(mds: &Mds, over_rdma: bool) -> FfDeviceAddr4 {
        let a = Getdeviceinfo4Args {
            device_id: device_id(0),
            layout_type: Layouttype4::LAYOUT4_FLEX_FILES,
            maxcount: 0,
            notify_types: nfs::v4::attr::Bitmap4::new(),
        };
        let Getdeviceinfo4Res::Ok(ok) = getdeviceinfo(mds, &a, over_rdma) else {
            panic!("GETDEVICEINFO failed");
        };
        decode_body(&ok.device_addr.addr_body.0).unwrap()
    }

    fn netids(mds: &Mds, over_rdma: bool) -> Vec<String> {
        let addr = device(mds, over_rdma);
        addr.netaddrs.0.iter().map(|n| n.netid.0.clone()).collect()
    }

    #[test]
    fn getdeviceinfo_lists_rdma_first_to_a_client_that_came_over_rdma() {
        let ds = |rdma: Option<u16>| DataServer {
            tcp: SocketAddr::from(([192, 0, 2, 1], 2049)),
            rdma: rdma.map(|p| SocketAddr::from(([192, 0, 2, 1], p))),
            mount_port: None,
            export: "/ds".into(),
            advertise: None,
        };
        let both = Mds::new(MdsConfig::new(vec![ds(Some(20049))]));
        assert_eq!(netids(&both, true), ["rdma", "tcp"]);
        assert_eq!(netids(&both, false), ["tcp", "rdma"]);
        let tcp_only = Mds::new(MdsConfig::new(vec![ds(None)]));
        assert_eq!(netids(&tcp_only, true), ["tcp"]);

        // The I/O sizes: 1 MiB until the data server's FSINFO is known,
        // then no more than its rtmax / wtmax.
        let v = |m: &Mds| {
            let d = &device(m, false).versions.0[0];
            (d.rsize, d.wsize)
        };
        assert_eq!(v(&both), (1 << 20, 1 << 20));
        both.ds[0].set_limits(262_144, 524_288);
        assert_eq!(v(&both), (262_144, 524_288));
        both.ds[0].set_limits(8 << 20, 8 << 20);
        assert_eq!(v(&both), (1 << 20, 1 << 20));
    }
}
