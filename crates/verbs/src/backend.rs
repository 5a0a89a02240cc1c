//! The device's memory registrations: the `rnic::RegionBackend` that
//! registers every region of the device's `MrTable` with the NIC
//! (`ibv_reg_mr_iova`, at the region's tagged offset), and the protection
//! domains behind the table's domain ids.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic::{Access, BackendMem, PdId, RegionBackend, RegisterError, Stag};

use crate::sys::{self, Context, Mr, Pd};

/// A hardware region as a local work request names it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalRegion {
    pub(crate) lkey: u32,
    /// Tagged offset of the first byte (the IOVA it was registered at).
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) writable: bool,
}

/// The tagged offset a region's first byte is registered at: always the
/// memory's own address, whatever base the table asked for (`_base_to`).
///
/// The kernel refuses an IOVA whose offset within a page differs from the
/// memory's (ib_uverbs_reg_mr), and where it takes one, not every provider
/// honours it: siw ignores it (`siw_reg_user_mr`, "rnic_va: not used by
/// siw"; the region's base is the user address), so a peer that wrote or a
/// Read Response that landed at the asked-for tagged offset was out of the
/// region's bounds: a DDP tagged "base or bounds" Terminate (RFC 5041
/// §7.2; seen in the VM phase as the kernel client reconnecting and as
/// `nfsrdma cp` from knfsd failing). The memory's address is the base
/// every provider uses the same way; the table advertises the base this
/// returns.
fn region_base(_base_to: u64, addr: u64) -> u64 {
    addr
}

#[derive(Default)]
struct Maps {
    pds: HashMap<PdId, Arc<Pd>>,
    regions: HashMap<u32, (Mr, LocalRegion)>,
}

/// Registrations of one device.
pub(crate) struct Backend {
    ctx: Context,
    iwarp: bool,
    maps: Mutex<Maps>,
}

impl Backend {
    pub(crate) fn new(ctx: Context, iwarp: bool) -> Self {
        Backend {
            ctx,
            iwarp,
            maps: Mutex::new(Maps::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Maps> {
        self.maps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The NIC's protection domain behind `pd` (allocated on first use).
    pub(crate) fn pd(&self, pd: PdId) -> Result<Arc<Pd>, i32> {
        let mut g = self.lock();
        if let Some(p) = g.pds.get(&pd) {
            return Ok(Arc::clone(p));
        }
        let p = Arc::new(Pd::alloc(self.ctx)?);
        g.pds.insert(pd, Arc::clone(&p));
        Ok(p)
    }

    /// The region a local work request names by STag.
    pub(crate) fn local(&self, stag: Stag) -> Option<LocalRegion> {
        self.lock().regions.get(&stag.0).map(|r| r.1)
    }
}

/// The verbs access bits for an `rnic::Access` (a remotely writable region
/// must be locally writable too, as verbs require). On iWARP an RDMA Read
/// Response is a tagged write into the sink (RFC 5040 §4.4), so iWARP NICs
/// want a Read sink (local write) remotely writable as well; its STag is
/// never advertised.
fn access_bits(access: Access, writable: bool, iwarp: bool) -> i32 {
    let mut bits = 0;
    if writable && iwarp && access.contains(Access::LOCAL_WRITE) {
        bits |= sys::ACCESS_REMOTE_WRITE;
    }
    if writable && access.intersects(Access::LOCAL_WRITE | Access::REMOTE_WRITE) {
        bits |= sys::ACCESS_LOCAL_WRITE;
    }
    if writable && access.contains(Access::REMOTE_WRITE) {
        bits |= sys::ACCESS_REMOTE_WRITE;
    }
    if access.contains(Access::REMOTE_READ) {
        bits |= sys::ACCESS_REMOTE_READ;
    }
    bits
}

impl RegionBackend for Backend {
    fn register(
        &self,
        pd: PdId,
        mem: BackendMem<'_>,
        access: Access,
        base_to: u64,
    ) -> Result<(Stag, u64), RegisterError> {
        let (writable, len, addr) = match &mem {
            BackendMem::Writable(b) => (true, b.len(), b.as_ptr() as u64),
            BackendMem::ReadOnly(b) => (false, b.len(), b.as_ptr() as u64),
        };
        if len == 0 {
            // Nothing for the NIC to reach; no STag a peer could use.
            return Ok((Stag(0), base_to));
        }
        let iova = region_base(base_to, addr);
        let hw_pd = self.pd(pd).map_err(RegisterError::Device)?;
        let bits = access_bits(access, writable, self.iwarp);
        let mr = Mr::register_table(&hw_pd, mem, iova, bits).map_err(|e| {
            tracing::warn!(errno = e, len, "ibv_reg_mr failed");
            RegisterError::Device(e)
        })?;
        // A region no peer may reach has no rkey on every provider (rxe
        // gives 0 to all of them): it is named by its lkey, which local work
        // requests (an RDMA Read's sink) use anyway.
        let remote = bits & (sys::ACCESS_REMOTE_READ | sys::ACCESS_REMOTE_WRITE) != 0;
        let stag = Stag(if remote { mr.rkey() } else { mr.lkey() });
        let local = LocalRegion {
            lkey: mr.lkey(),
            base: iova,
            len: len as u64,
            writable,
        };
        self.lock().regions.insert(stag.0, (mr, local));
        Ok((stag, iova))
    }

    fn deregister(&self, stag: Stag) {
        // Dropping the Mr deregisters it (ibv_dereg_mr) before this returns.
        let gone = self.lock().regions.remove(&stag.0);
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_implies_local_write_and_read_only_memory_is_never_writable() {
        let (lw, rw, rr) = (
            sys::ACCESS_LOCAL_WRITE,
            sys::ACCESS_REMOTE_WRITE,
            sys::ACCESS_REMOTE_READ,
        );
        assert_eq!(access_bits(Access::REMOTE_WRITE, true, false), lw | rw);
        assert_eq!(access_bits(Access::LOCAL_WRITE, true, false), lw);
        // iWARP: a Read sink takes the Read Response as a tagged write.
        assert_eq!(access_bits(Access::LOCAL_WRITE, true, true), lw | rw);
        let both = Access::REMOTE_READ | Access::REMOTE_WRITE;
        assert_eq!(access_bits(both, false, false), rr);
    }

    #[test]
    fn regions_are_based_at_their_address_even_when_the_page_offset_matches() {
        // siw ignores a chosen IOVA: a base the table asked for would put
        // peers' tagged offsets out of the region's bounds.
        let addr = 0x7f12_3456_7010;
        assert_eq!(region_base(0x10, addr), addr);
        assert_eq!(region_base(0, addr), addr);
        assert_eq!(region_base(addr, addr), addr);
    }
}
