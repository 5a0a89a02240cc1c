//! CB_GETATTR before answering another client's GETATTR of a file under
//! a write delegation (RFC 8881 §10.4.3, §20.1): the holder may have
//! written data the server has not seen, so the server asks it for size
//! and change and answers with those. A holder that does not answer
//! within [`CB_GETATTR_WAIT`] gets its delegation recalled and the
//! GETATTR is answered NFS4ERR_DELAY, as the Linux server does; the
//! wait running out is logged and counted (`nfs4.cb_getattr_wait`), and a
//! GETATTR of a file whose delegation is being recalled asks no one, so a
//! holder that never answers costs each of its delegations one wait.

use std::sync::Arc;
use std::time::Duration;

use nfs::v3::NfsFh3;
use nfs::v4::attr::{Bitmap4, FileAttrs, FATTR4_CHANGE, FATTR4_SIZE};
use nfs::v4::cb::{CbGetattr4Args, NfsCbArgop4, NfsCbResop4};
use nfs::v4::{NfsFh4, Nfsstat4, Res4};
use oncrpc::limits::Limit;

use super::callback::Callbacks;
use super::fileops::key;
use super::state::StateTable;
use super::{Cx, Nfs4Service};
use crate::storage::Storage;

/// How long a GETATTR waits for the holder's CB_GETATTR reply before it
/// recalls the delegation instead (limit `nfs4.cb_getattr_wait`).
pub(crate) const CB_GETATTR_WAIT: Duration = Duration::from_millis(500);

/// A holder did not answer CB_GETATTR within [`CB_GETATTR_WAIT`]: its
/// delegation is recalled, and later GETATTRs do not ask it again.
static WAIT: Limit = Limit::new("nfs4.cb_getattr_wait");

/// Asks `holder` for the size and change of `fh` (CB_GETATTR, RFC 8881
/// §20.1); `None` if it did not answer them.
async fn ask_holder(
    cbs: &Callbacks,
    state: &Arc<std::sync::Mutex<StateTable>>,
    holder: u64,
    fh: &NfsFh3,
) -> Option<(u64, u64)> {
    let mut want = Bitmap4::new();
    want.insert(FATTR4_CHANGE);
    want.insert(FATTR4_SIZE);
    let op = NfsCbArgop4::Getattr(CbGetattr4Args {
        fh: NfsFh4(key(fh)),
        attr_request: want,
    });
    // The callback runs to its own bound on a task of its own, so a slow
    // holder is marked down by it while this GETATTR gives up sooner.
    let (cbs, state) = (cbs.clone(), Arc::clone(state));
    let task = tokio::spawn(async move { cbs.compound(&state, holder, vec![op]).await });
    let Ok(res) = tokio::time::timeout(CB_GETATTR_WAIT, task).await else {
        WAIT.trip(format_args!(
            "client {holder:#x} did not answer CB_GETATTR within {CB_GETATTR_WAIT:?}: \
             recalling its write delegation"
        ));
        return None;
    };
    let res = res.ok()?.ok()?;
    let Some(NfsCbResop4::Getattr(Res4::Ok(fattr))) = res.resarray.0.get(1) else {
        return None;
    };
    let a = FileAttrs::from_fattr4(fattr).ok()?;
    Some((a.change?, a.size?))
}

impl<S: Storage> Nfs4Service<S> {
    /// The size and change to answer a GETATTR of `fh` with when another
    /// client holds a write delegation on it (RFC 8881 §10.4.3): the
    /// holder's, by CB_GETATTR, or NFS4ERR_DELAY while the delegation is
    /// recalled. `server` is the server's (change, size); `None`: answer
    /// the server's own.
    pub(super) async fn delegated_attrs(
        &self,
        fh: &NfsFh3,
        cx: &Cx,
        want: &Bitmap4,
        server: (u64, u64),
    ) -> Result<Option<(u64, u64)>, Nfsstat4> {
        if !(want.contains(FATTR4_SIZE) || want.contains(FATTR4_CHANGE)) {
            return Ok(None);
        }
        let clientid = cx.clientid().unwrap_or(0);
        let k = key(fh);
        let holder = self.state()?.delegs.write_holder(&k, clientid);
        let Some(h) = holder else { return Ok(None) };
        if !h.recalled {
            if let Some(attrs) = ask_holder(&self.cbs, &self.state, h.clientid, fh).await {
                let mut st = self.state()?;
                return Ok(st.delegs.holder_attrs(&k, attrs, server));
            }
            tracing::info!(
                holder = h.clientid,
                "CB_GETATTR not answered with size and change: recalling the write delegation"
            );
        }
        self.deleg_conflict(fh, cx, true).map(|()| None)
    }
}
