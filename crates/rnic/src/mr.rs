//! The one access-check table every device uses: protection domains, STag
//! slots, memory regions and their ownership.
//!
//! A buffer registered for remote access is owned by the table until it is
//! invalidated, and only then handed back to its owner (DESIGN.md, "The software
//! RDMA device"). Every remote access, and every local access a device makes on
//! a consumer's behalf, goes through [`MrTable`]'s checks: valid STag (index and
//! key), protection domain, access right, bounds, not invalidated
//! (RFC 5040 §2.1, §5 and §7; RFC 5041 §7.2).

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};

use crate::error::{AccessError, RegisterError};
use crate::stag::{Access, PdId, Stag};

static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Counters of how tagged payload reached registered memory.
///
/// A device that places payload straight from its source (the socket, or the
/// peer's memory in the loopback device) into the region counts
/// `bytes_placed_direct`; a device that first copies into an intermediate
/// buffer counts `bytes_copied_staging`. Tests read these to prove direct
/// placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacementStats {
    /// Bytes written into regions straight from their source.
    pub bytes_placed_direct: u64,
    /// Bytes written into regions from a staging buffer.
    pub bytes_copied_staging: u64,
    /// Tagged accesses refused by the checks.
    pub access_errors: u64,
}

/// Lifecycle state of a memory region, as its owner sees it.
///
/// Transitions: `Valid` → `Invalidated` (local invalidation, or remote by a Send
/// With Invalidate, RFC 5040 §5.3); the owner then takes its buffer back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MrState {
    /// Remote and device access allowed.
    Valid,
    /// Invalidated by the peer; the owner has not taken the buffer back yet.
    RemotelyInvalidated,
}

/// The memory behind a region: owned and writable, or shared read-only
/// bytes registered without a copy.
enum Mem {
    Owned(BytesMut),
    Shared(Bytes),
}

impl Mem {
    fn len(&self) -> usize {
        match self {
            Mem::Owned(b) => b.len(),
            Mem::Shared(b) => b.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Mem::Owned(b) => b,
            Mem::Shared(b) => b,
        }
    }

    /// Writable bytes; shared bytes never are.
    fn as_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Mem::Owned(b) => Some(b),
            Mem::Shared(_) => None,
        }
    }

    fn into_owned(self) -> BytesMut {
        match self {
            Mem::Owned(b) => b,
            // Only a ReadOnlyRegion holds shared bytes, and it takes them
            // back as Bytes; this arm serves a mismatched handle only.
            Mem::Shared(b) => BytesMut::from(&b[..]),
        }
    }

    fn into_shared(self) -> Bytes {
        match self {
            Mem::Owned(b) => b.freeze(),
            Mem::Shared(b) => b,
        }
    }
}

enum SlotState {
    Free,
    /// Allocated to a [`StagSlot`], holding no memory.
    Allocated,
    /// Memory in the slot's cell; remote and device access allowed.
    Valid {
        access: Access,
        base_to: u64,
        len: u64,
    },
    /// Memory still in the slot's cell, waiting for its owner; no access.
    Invalidated,
}

/// The memory under one slot, behind the slot's own lock, so that a device
/// can read from a socket into a region (or write a region to a socket)
/// without holding the whole table.
///
/// `gen` changes whenever the slot's state does (registration,
/// invalidation, the owner taking the memory back), under the table lock
/// and this one both: an access checked against the table at one
/// generation touches the memory only if the cell is still at it.
struct Cell {
    gen: u64,
    mem: Option<Mem>,
}

type CellRef = Arc<Mutex<Cell>>;

fn lock_cell(c: &CellRef) -> MutexGuard<'_, Cell> {
    // Every update completes between statements; a poisoned lock still
    // holds a consistent cell.
    c.lock().unwrap_or_else(|e| e.into_inner())
}

struct Slot {
    key: u8,
    pd: PdId,
    state: SlotState,
    /// The STag the backend gave the memory under this slot, if any.
    hw: Option<Stag>,
    /// Mirrors `cell.gen`; read under the table lock.
    gen: u64,
    cell: CellRef,
}

impl Slot {
    fn new(key: u8, pd: PdId) -> Self {
        Slot {
            key,
            pd,
            state: SlotState::Free,
            hw: None,
            gen: 0,
            cell: Arc::new(Mutex::new(Cell { gen: 0, mem: None })),
        }
    }

    /// Moves to `state`, puts `mem` in the cell and returns what was there,
    /// advancing the generation so accesses checked before now fail. Waits
    /// for an access in progress on this region (only this one) to end.
    fn transition(&mut self, state: SlotState, mem: Option<Mem>) -> Option<Mem> {
        self.state = state;
        self.gen = self.gen.wrapping_add(1);
        let mut c = lock_cell(&self.cell);
        c.gen = self.gen;
        std::mem::replace(&mut c.mem, mem)
    }

    /// Invalidates without taking the memory out of the cell.
    fn revoke(&mut self) {
        self.state = SlotState::Invalidated;
        self.gen = self.gen.wrapping_add(1);
        lock_cell(&self.cell).gen = self.gen;
    }
}

/// An access that passed the table's checks: the region's cell, the
/// generation it was checked at, and the byte range within its memory.
struct Checked {
    cell: CellRef,
    gen: u64,
    start: usize,
    len: usize,
}

impl Checked {
    /// The checked bytes, if the region has not changed since the check.
    fn slice<'c>(&self, c: &'c Cell) -> Option<&'c [u8]> {
        let mem = c.mem.as_ref().filter(|_| c.gen == self.gen)?;
        mem.as_slice()
            .get(self.start..self.start.checked_add(self.len)?)
    }

    /// The checked bytes, writable, if the region has not changed since
    /// the check and its memory is writable.
    fn slice_mut<'c>(&self, c: &'c mut Cell) -> Option<&'c mut [u8]> {
        if c.gen != self.gen {
            return None;
        }
        let end = self.start.checked_add(self.len)?;
        c.mem.as_mut()?.as_mut()?.get_mut(self.start..end)
    }
}

/// The memory a [`RegionBackend`] registers: writable (owned) or read-only
/// (shared) bytes.
#[derive(Debug)]
pub enum BackendMem<'a> {
    /// Owned bytes the device may write (RDMA Write target, Read sink).
    Writable(&'a mut [u8]),
    /// Shared bytes the device may only read.
    ReadOnly(&'a [u8]),
}

/// A device's own memory-region table behind an [`MrTable`]: an RDMA NIC
/// whose hardware checks remote accesses and places payload itself.
///
/// The table calls [`register`](Self::register) when memory is put under a
/// slot, and advertises the STag and base tagged offset it returns instead
/// of its own (a NIC may not take any base: Linux wants the I/O virtual
/// address to share the memory's offset within its page); it calls
/// [`deregister`](Self::deregister) before that memory leaves the slot
/// (invalidation, drop), so the device never touches memory its owner has
/// taken back. Between the two calls the table keeps the memory at the
/// address it had when registered (a `BytesMut` or `Bytes` held in the slot
/// never moves its bytes) and never reads or writes it itself, as long as
/// the device does not call the table's placement methods for it.
pub trait RegionBackend: Send + Sync + 'static {
    /// Registers `mem` for `access` in protection domain `pd`, at base
    /// tagged offset `base_to` if the device can; returns the STag peers
    /// must use and the base tagged offset it registered at.
    fn register(
        &self,
        pd: PdId,
        mem: BackendMem<'_>,
        access: Access,
        base_to: u64,
    ) -> Result<(Stag, u64), RegisterError>;

    /// Revokes every access to the region `stag` (returned by `register`);
    /// when it returns, the device no longer reads or writes its memory.
    fn deregister(&self, stag: Stag);
}

struct TableInner {
    /// Index 0 is never allocated, so `Stag(0)`..`Stag(0xff)` never name a region.
    slots: Vec<Slot>,
    free: Vec<u32>,
    max_regions: u32,
    rng: u64,
}

impl Mem {
    fn backend_mem(&mut self) -> BackendMem<'_> {
        match self {
            Mem::Owned(b) => BackendMem::Writable(b),
            Mem::Shared(b) => BackendMem::ReadOnly(b),
        }
    }
}

/// The access-check table of one device: every STag it owns, with its memory.
///
/// Shared (behind an [`Arc`]) by the device and by the consumer's handles
/// ([`ProtectionDomain`], [`StagSlot`], [`MemoryRegion`]).
pub struct MrTable {
    id: u64,
    next_pd: AtomicU32,
    inner: Mutex<TableInner>,
    direct: AtomicU64,
    staged: AtomicU64,
    errors: AtomicU64,
    backend: Option<Arc<dyn RegionBackend>>,
}

impl fmt::Debug for MrTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrTable")
            .field("id", &self.id)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Why a device-internal transfer between two regions failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The source region refused the access.
    #[error("source: {0}")]
    Source(AccessError),
    /// The sink region refused the access.
    #[error("sink: {0}")]
    Sink(AccessError),
}

/// A region reference to check: which STag, in which domain, where, how much,
/// and with which right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaggedAccess {
    /// Protection domain of the stream (queue pair) making the access.
    pub pd: PdId,
    /// The STag named.
    pub stag: Stag,
    /// Tagged offset of the first byte.
    pub to: u64,
    /// Number of bytes.
    pub len: u64,
    /// The right the access needs.
    pub need: Access,
}

impl MrTable {
    /// Default bound on the number of regions of one table.
    pub const DEFAULT_MAX_REGIONS: u32 = 1 << 16;

    /// A table with the default bound, whose initial STag keys derive from `seed`
    /// (so simulations replay exactly).
    pub fn new(seed: u64) -> Arc<Self> {
        Self::with_max_regions(seed, Self::DEFAULT_MAX_REGIONS)
    }

    /// A table holding at most `max_regions` regions (capped at 2^24 - 1).
    pub fn with_max_regions(seed: u64, max_regions: u32) -> Arc<Self> {
        Self::build(seed, max_regions, None)
    }

    /// A table whose regions are also registered with `backend` (a
    /// hardware device's own table), which chooses the STags peers see.
    pub fn with_backend(seed: u64, max_regions: u32, backend: Arc<dyn RegionBackend>) -> Arc<Self> {
        Self::build(seed, max_regions, Some(backend))
    }

    fn build(seed: u64, max_regions: u32, backend: Option<Arc<dyn RegionBackend>>) -> Arc<Self> {
        Arc::new(MrTable {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            next_pd: AtomicU32::new(1),
            inner: Mutex::new(TableInner {
                slots: vec![Slot::new(0, PdId(0))],
                free: Vec::new(),
                max_regions: max_regions.min(Stag::MAX_INDEX),
                rng: seed,
            }),
            direct: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            backend,
        })
    }

    fn lock(&self) -> MutexGuard<'_, TableInner> {
        // Every mutation completes between statements; a poisoned lock still
        // holds a consistent table.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a new protection domain in this table.
    pub fn alloc_pd(self: &Arc<Self>) -> ProtectionDomain {
        ProtectionDomain {
            id: PdId(self.next_pd.fetch_add(1, Ordering::Relaxed)),
            table: Arc::clone(self),
        }
    }

    /// The placement counters.
    pub fn stats(&self) -> PlacementStats {
        PlacementStats {
            bytes_placed_direct: self.direct.load(Ordering::Relaxed),
            bytes_copied_staging: self.staged.load(Ordering::Relaxed),
            access_errors: self.errors.load(Ordering::Relaxed),
        }
    }

    /// Number of regions currently valid (registered and not invalidated).
    pub fn valid_regions(&self) -> usize {
        self.lock()
            .slots
            .iter()
            .filter(|s| matches!(s.state, SlotState::Valid { .. }))
            .count()
    }

    /// Checks an access without touching memory.
    pub fn check(&self, a: TaggedAccess) -> Result<(), AccessError> {
        let g = self.lock();
        self.count_err(check_slot(&g, a).map(|_| ()))
    }

    /// How often an access retries when its region changed between the
    /// table's check and the region lock (an owner re-registering it in a
    /// loop); after that it is refused as invalidated.
    const RETRIES: usize = 4;

    /// Checks `a` under the table lock, then runs `f` on the region's cell
    /// under the region's own lock only (the table is free meanwhile), if
    /// the region is still as checked; otherwise checks again, so a region
    /// invalidated or re-registered in between is never touched and the
    /// access gets the error the new state calls for.
    fn with_cell<R>(
        &self,
        a: TaggedAccess,
        mut f: impl FnMut(&Checked, &mut Cell) -> Option<R>,
    ) -> Result<R, AccessError> {
        for _ in 0..Self::RETRIES {
            let checked = checked(&self.lock(), a)?;
            let mut c = lock_cell(&checked.cell);
            if c.gen != checked.gen {
                continue;
            }
            // Same generation: the bounds were checked against this memory.
            return f(&checked, &mut c).ok_or(AccessError::Invalidated(a.stag));
        }
        Err(AccessError::Invalidated(a.stag))
    }

    /// Places `a.len` bytes into a region: checks the access and, only if it
    /// passes, hands the closure the region's bytes `[a.to, a.to + a.len)` to
    /// fill straight from the source (a socket read, the peer's memory). The
    /// closure returns how many bytes it wrote; they are counted as direct
    /// placement. On a refused access no byte is touched.
    ///
    /// Only the region's own lock is held while the closure runs (not the
    /// table's): the region's owner cannot invalidate it meanwhile, every
    /// other region stays usable. The closure must not block.
    pub fn place_direct<E>(
        &self,
        a: TaggedAccess,
        f: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Result<usize, E>, AccessError> {
        let mut f = Some(f);
        let out = self.with_cell(a, |ch, c| {
            let f = f.take()?;
            // Shared (read-only) memory is never writable.
            Some(
                ch.slice_mut(c)
                    .map(f)
                    .ok_or(AccessError::AccessRights(a.stag)),
            )
        });
        let out = self.count_err(out.and_then(|r| r))?;
        if let Ok(n) = out {
            self.direct
                .fetch_add(n.min(a.len as usize) as u64, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// Places `data` into a region by copying it from a staging buffer; counted
    /// as a staging copy. `a.len` must equal `data.len()`.
    pub fn place_copy(&self, a: TaggedAccess, data: &[u8]) -> Result<(), AccessError> {
        let a = TaggedAccess {
            len: data.len() as u64,
            ..a
        };
        let r = self.with_cell(a, |ch, c| match ch.slice_mut(c) {
            Some(s) => {
                s.copy_from_slice(data);
                Some(Ok(()))
            }
            None => Some(Err(AccessError::AccessRights(a.stag))),
        });
        self.count_err(r.and_then(|r| r))?;
        self.staged.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `[a.to, a.to + a.len)` of a region after checking the access (the
    /// source of an RDMA Read response, RFC 5040 §5.2). Only the region's
    /// own lock is held while `f` runs; `f` must not block.
    pub fn fetch<R>(&self, a: TaggedAccess, f: impl FnOnce(&[u8]) -> R) -> Result<R, AccessError> {
        let mut f = Some(f);
        let r = self.with_cell(a, |ch, c| {
            let s = ch.slice(c)?;
            f.take().map(|f| f(s))
        });
        self.count_err(r)
    }

    /// Copies between two regions, possibly of two tables, without an
    /// intermediate buffer (the loopback device's RDMA Read). Both accesses are
    /// checked before a byte moves; the source's `len` is used for both.
    /// Counted as direct placement into the sink. The tables are not held
    /// during the copy, only the two regions (locked in a fixed order).
    pub fn transfer(
        src_table: &MrTable,
        src: TaggedAccess,
        dst_table: &MrTable,
        dst: TaggedAccess,
    ) -> Result<(), TransferError> {
        let dst = TaggedAccess {
            len: src.len,
            ..dst
        };
        for _ in 0..Self::RETRIES {
            let (s, d) = check_pair(src_table, src, dst_table, dst)?;
            match copy_checked(&s, &d) {
                Copied::Done => {
                    dst_table.direct.fetch_add(src.len, Ordering::Relaxed);
                    return Ok(());
                }
                Copied::ReadOnlySink => {
                    dst_table.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(TransferError::Sink(AccessError::AccessRights(dst.stag)));
                }
                Copied::Changed => continue,
            }
        }
        dst_table.errors.fetch_add(1, Ordering::Relaxed);
        Err(TransferError::Sink(AccessError::Invalidated(dst.stag)))
    }

    /// Invalidates a region on the peer's request (Send With Invalidate,
    /// RFC 5040 §5.3 and §6.7.2): the STag must be valid and of the stream's
    /// protection domain. Remote access stops at once; the owner takes the
    /// buffer back through its [`MemoryRegion`] handle.
    pub fn invalidate_remote(&self, pd: PdId, stag: Stag) -> Result<(), AccessError> {
        let mut g = self.lock();
        let a = TaggedAccess {
            pd,
            stag,
            to: 0,
            len: 0,
            need: Access::empty(),
        };
        let idx = self.count_err(lookup(&g, a))?;
        let Some(slot) = g.slots.get_mut(idx) else {
            return Err(AccessError::UnknownStag(stag));
        };
        if matches!(slot.state, SlotState::Valid { .. }) {
            slot.revoke();
        }
        Ok(())
    }

    fn count_err<T>(&self, r: Result<T, AccessError>) -> Result<T, AccessError> {
        if r.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn alloc_index(&self, pd: PdId) -> Result<(u32, u8), RegisterError> {
        let mut g = self.lock();
        let idx = match g.free.pop() {
            Some(i) => i,
            None => {
                let n = g.slots.len() as u32;
                if n > g.max_regions {
                    return Err(RegisterError::TableFull);
                }
                g.rng = splitmix64(g.rng);
                let key = (g.rng >> 56) as u8;
                g.slots.push(Slot::new(key, pd));
                n
            }
        };
        let slot = g
            .slots
            .get_mut(idx as usize)
            .ok_or(RegisterError::TableFull)?;
        slot.pd = pd;
        slot.state = SlotState::Allocated;
        Ok((idx, slot.key))
    }

    fn free_index(&self, idx: u32) {
        let mut g = self.lock();
        if let Some(slot) = g.slots.get_mut(idx as usize) {
            self.deregister(slot.hw.take());
            // The memory of a region dropped without invalidation goes
            // with it (dropped after the locks are released).
            let mem = slot.transition(SlotState::Free, None);
            g.free.push(idx);
            drop(g);
            drop(mem);
        }
    }

    fn deregister(&self, hw: Option<Stag>) {
        if let (Some(b), Some(stag)) = (&self.backend, hw) {
            b.deregister(stag);
        }
    }

    /// Puts memory under a slot with a fresh key (and, with a backend, the
    /// backend's registration); returns the STag to advertise and the base
    /// tagged offset.
    fn fill_slot(
        &self,
        idx: u32,
        access: Access,
        base_to: u64,
        mut buf: Mem,
    ) -> Result<(Stag, u64), RegisterError> {
        let mut g = self.lock();
        let Some(slot) = g.slots.get_mut(idx as usize) else {
            return Err(RegisterError::ForeignSlot);
        };
        let hw = match &self.backend {
            Some(b) => Some(b.register(slot.pd, buf.backend_mem(), access, base_to)?),
            None => None,
        };
        self.deregister(std::mem::replace(&mut slot.hw, hw.map(|h| h.0)));
        slot.key = slot.key.wrapping_add(1);
        let base_to = hw.map_or(base_to, |h| h.1);
        let len = buf.len() as u64;
        let old = slot.transition(
            SlotState::Valid {
                access,
                base_to,
                len,
            },
            Some(buf),
        );
        let stag = hw.unwrap_or((Stag::new(idx, slot.key), base_to));
        drop(g);
        drop(old);
        Ok(stag)
    }

    /// Takes the memory out of a slot, invalidating it; the slot stays allocated.
    fn empty_slot(&self, idx: u32) -> Mem {
        let mut g = self.lock();
        let Some(slot) = g.slots.get_mut(idx as usize) else {
            return Mem::Owned(BytesMut::new());
        };
        if !matches!(slot.state, SlotState::Valid { .. } | SlotState::Invalidated) {
            return Mem::Owned(BytesMut::new());
        }
        // The device lets go of the memory before its owner gets it.
        self.deregister(slot.hw.take());
        slot.transition(SlotState::Allocated, None)
            .unwrap_or_else(|| Mem::Owned(BytesMut::new()))
    }

    fn slot_key(&self, idx: u32) -> u8 {
        self.lock().slots.get(idx as usize).map_or(0, |s| s.key)
    }

    fn region_state(&self, idx: u32) -> Option<MrState> {
        let g = self.lock();
        match g.slots.get(idx as usize).map(|s| &s.state) {
            Some(SlotState::Valid { .. }) => Some(MrState::Valid),
            Some(SlotState::Invalidated) => Some(MrState::RemotelyInvalidated),
            _ => None,
        }
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// STag lookup: index, key, protection domain, validity. RFC 5040 §4.8 codes
/// 0x00 (invalid STag) and 0x03 (not associated with the stream).
fn lookup(g: &TableInner, a: TaggedAccess) -> Result<usize, AccessError> {
    let idx = a.stag.index() as usize;
    let slot = match g.slots.get(idx) {
        Some(s) if idx != 0 => s,
        _ => return Err(AccessError::UnknownStag(a.stag)),
    };
    match slot.state {
        SlotState::Free | SlotState::Allocated => return Err(AccessError::UnknownStag(a.stag)),
        SlotState::Valid { .. } | SlotState::Invalidated => {}
    }
    if slot.key != a.stag.key() {
        return Err(AccessError::KeyMismatch(a.stag));
    }
    if matches!(slot.state, SlotState::Invalidated) {
        return Err(AccessError::Invalidated(a.stag));
    }
    if slot.pd != a.pd {
        return Err(AccessError::PdMismatch(a.stag));
    }
    Ok(idx)
}

/// The full check; returns the slot index and the byte offset into its buffer.
/// RFC 5040 §4.8 codes 0x01 (bounds), 0x02 (rights), 0x04 (TO wrap).
fn check_slot(g: &TableInner, a: TaggedAccess) -> Result<(usize, usize), AccessError> {
    let idx = lookup(g, a)?;
    let Some(Slot {
        state:
            SlotState::Valid {
                access,
                base_to,
                len,
            },
        ..
    }) = g.slots.get(idx)
    else {
        return Err(AccessError::UnknownStag(a.stag));
    };
    if !access.contains(a.need) {
        return Err(AccessError::AccessRights(a.stag));
    }
    let end = a.to.checked_add(a.len).ok_or(AccessError::ToWrap(a.stag))?;
    let region_end = base_to.saturating_add(*len);
    if a.to < *base_to || end > region_end {
        return Err(AccessError::BoundsViolation {
            stag: a.stag,
            to: a.to,
            len: a.len,
        });
    }
    let start = usize::try_from(a.to - base_to).map_err(|_| AccessError::BoundsViolation {
        stag: a.stag,
        to: a.to,
        len: a.len,
    })?;
    Ok((idx, start))
}

/// The full check, and what an access needs to reach the memory under the
/// region's own lock.
fn checked(g: &TableInner, a: TaggedAccess) -> Result<Checked, AccessError> {
    let (idx, start) = check_slot(g, a)?;
    let slot = g.slots.get(idx).ok_or(AccessError::UnknownStag(a.stag))?;
    let len = usize::try_from(a.len).map_err(|_| AccessError::BoundsViolation {
        stag: a.stag,
        to: a.to,
        len: a.len,
    })?;
    Ok(Checked {
        cell: Arc::clone(&slot.cell),
        gen: slot.gen,
        start,
        len,
    })
}

/// Checks both sides of a transfer, each under its own table's lock (never
/// both at once).
fn check_pair(
    src_table: &MrTable,
    src: TaggedAccess,
    dst_table: &MrTable,
    dst: TaggedAccess,
) -> Result<(Checked, Checked), TransferError> {
    let s = src_table
        .count_err(checked(&src_table.lock(), src))
        .map_err(TransferError::Source)?;
    let d = dst_table
        .count_err(checked(&dst_table.lock(), dst))
        .map_err(TransferError::Sink)?;
    Ok((s, d))
}

/// What [`copy_checked`] did.
enum Copied {
    Done,
    /// The sink's memory is shared (read-only).
    ReadOnlySink,
    /// A region changed after its check: check again.
    Changed,
}

/// Copies a checked source range into a checked sink range under the two
/// regions' locks, taken in the order of their addresses so that two transfers
/// never wait on each other crosswise; one lock when both are one region.
fn copy_checked(s: &Checked, d: &Checked) -> Copied {
    if Arc::ptr_eq(&s.cell, &d.cell) {
        let mut c = lock_cell(&s.cell);
        if c.gen != s.gen || c.gen != d.gen {
            return Copied::Changed;
        }
        let Some(b) = c.mem.as_mut().and_then(Mem::as_mut) else {
            return Copied::ReadOnlySink;
        };
        if let (Some(s_end), Some(d_end)) = (s.start.checked_add(s.len), d.start.checked_add(d.len))
        {
            if s_end <= b.len() && d_end <= b.len() {
                b.copy_within(s.start..s_end, d.start);
            }
        }
        return Copied::Done;
    }
    let (sc, mut dc);
    if Arc::as_ptr(&s.cell) < Arc::as_ptr(&d.cell) {
        sc = lock_cell(&s.cell);
        dc = lock_cell(&d.cell);
    } else {
        dc = lock_cell(&d.cell);
        sc = lock_cell(&s.cell);
    }
    if sc.gen != s.gen || dc.gen != d.gen {
        return Copied::Changed;
    }
    let Some(dst) = d.slice_mut(&mut dc) else {
        return Copied::ReadOnlySink;
    };
    if let Some(src) = s.slice(&sc) {
        dst.copy_from_slice(src);
    }
    Copied::Done
}

/// A protection domain: the scope within which STags and queue pairs may be
/// used together (RFC 5040 §2.1).
#[derive(Clone)]
pub struct ProtectionDomain {
    id: PdId,
    table: Arc<MrTable>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("id", &self.id)
            .finish()
    }
}

impl ProtectionDomain {
    /// The domain's identifier.
    pub fn id(&self) -> PdId {
        self.id
    }

    /// The table the domain's regions live in.
    pub fn table(&self) -> &Arc<MrTable> {
        &self.table
    }

    /// Allocates an STag index with no memory behind it, for later fast
    /// registration (verbs "allocate MR").
    pub fn alloc_slot(&self) -> Result<StagSlot, RegisterError> {
        let (index, key) = self.table.alloc_index(self.id)?;
        Ok(StagSlot {
            table: Arc::clone(&self.table),
            pd: self.id,
            index,
            key,
        })
    }

    /// Registers `buf` (its `len()` bytes) with `access`, at base tagged offset 0.
    pub fn register(&self, buf: BytesMut, access: Access) -> Result<MemoryRegion, RegisterError> {
        self.register_at(buf, access, 0)
    }

    /// Registers `buf` with `access` at base tagged offset `base_to` (Linux uses
    /// the buffer's I/O virtual address; any value works if the peer is told).
    pub fn register_at(
        &self,
        buf: BytesMut,
        access: Access,
        base_to: u64,
    ) -> Result<MemoryRegion, RegisterError> {
        self.alloc_slot()?.fast_register(buf, access, base_to)
    }

    /// Registers shared, immutable bytes for remote reading only, without
    /// copying them: the source of the peer's RDMA Reads (for example an
    /// RPC-over-RDMA read chunk, RFC 8166 §3.4.5). Access is
    /// [`Access::REMOTE_READ`]; any write to the region is an access rights
    /// violation.
    pub fn register_read_only(
        &self,
        buf: Bytes,
        base_to: u64,
    ) -> Result<ReadOnlyRegion, RegisterError> {
        self.alloc_slot()?.fast_register_read_only(buf, base_to)
    }
}

/// An STag index owned by a consumer, with no memory registered under it.
///
/// Dropping it frees the index. Its key persists across registrations and is
/// advanced by each one, so an STag of an earlier registration never matches a
/// later one (until the 8-bit key wraps).
pub struct StagSlot {
    table: Arc<MrTable>,
    pd: PdId,
    index: u32,
    key: u8,
}

impl fmt::Debug for StagSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagSlot")
            .field("pd", &self.pd)
            .field("index", &self.index)
            .finish()
    }
}

impl StagSlot {
    /// The STag this slot would carry at its current key (not yet valid).
    pub fn stag(&self) -> Stag {
        Stag::new(self.index, self.key)
    }

    /// Fast registration: puts `buf` under this index with a fresh key
    /// (RFC 5040 §2.1: the consumer-owned key portion changes per registration).
    pub fn fast_register(
        mut self,
        buf: BytesMut,
        access: Access,
        base_to: u64,
    ) -> Result<MemoryRegion, RegisterError> {
        let len = buf.len() as u64;
        if base_to.checked_add(len).is_none() {
            return Err(RegisterError::ToOverflow);
        }
        let (stag, base_to) = self
            .table
            .fill_slot(self.index, access, base_to, Mem::Owned(buf))?;
        self.key = self.table.slot_key(self.index);
        Ok(MemoryRegion {
            slot: self,
            stag,
            base_to,
            len,
            access,
        })
    }
}

impl StagSlot {
    /// Fast registration of shared, immutable bytes for remote reading only
    /// (see [`ProtectionDomain::register_read_only`]), under a fresh key.
    pub fn fast_register_read_only(
        mut self,
        buf: Bytes,
        base_to: u64,
    ) -> Result<ReadOnlyRegion, RegisterError> {
        let len = buf.len() as u64;
        if base_to.checked_add(len).is_none() {
            return Err(RegisterError::ToOverflow);
        }
        let (stag, base_to) =
            self.table
                .fill_slot(self.index, Access::REMOTE_READ, base_to, Mem::Shared(buf))?;
        self.key = self.table.slot_key(self.index);
        Ok(ReadOnlyRegion {
            slot: self,
            stag,
            base_to,
            len,
        })
    }
}

impl Drop for StagSlot {
    fn drop(&mut self) {
        self.table.free_index(self.index);
    }
}

/// A registered memory region: the consumer's handle to a buffer the device
/// owns until invalidation.
///
/// The buffer comes back only through [`invalidate`](Self::invalidate), which
/// first revokes every access, so no peer can touch memory its owner has taken
/// back. If the peer already invalidated the region (Send With Invalidate),
/// `invalidate` simply hands the buffer back. Dropping the handle drops the
/// buffer and frees the STag.
pub struct MemoryRegion {
    slot: StagSlot,
    stag: Stag,
    base_to: u64,
    len: u64,
    access: Access,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("stag", &self.stag)
            .field("base_to", &self.base_to)
            .field("len", &self.len)
            .field("access", &self.access)
            .finish()
    }
}

/// What [`MemoryRegion::invalidate`] hands back.
#[derive(Debug)]
pub struct Deregistered {
    /// The buffer, with whatever the device placed in it.
    pub buf: BytesMut,
    /// The STag index, ready for another fast registration.
    pub slot: StagSlot,
}

impl MemoryRegion {
    /// The STag to advertise to the peer.
    pub fn stag(&self) -> Stag {
        self.stag
    }

    /// The tagged offset of the region's first byte.
    pub fn base_to(&self) -> u64 {
        self.base_to
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The protection domain it belongs to.
    pub fn pd(&self) -> PdId {
        self.slot.pd
    }

    /// Current lifecycle state.
    pub fn state(&self) -> MrState {
        self.slot
            .table
            .region_state(self.slot.index)
            .unwrap_or(MrState::RemotelyInvalidated)
    }

    /// Local invalidation: revokes all access at once and returns the buffer and
    /// the STag slot (RFC 5040 §2.1, invalidation; the local half of
    /// RFC 8166 §3.4.3's fencing rule). Also used after a remote invalidation.
    pub fn invalidate(self) -> Deregistered {
        let buf = self.slot.table.empty_slot(self.slot.index).into_owned();
        Deregistered {
            buf,
            slot: self.slot,
        }
    }
}

/// A read-only region over shared bytes: the consumer's handle while the peer
/// may read them. [`invalidate`](Self::invalidate) revokes access and gives
/// the bytes back; dropping the handle frees the STag.
pub struct ReadOnlyRegion {
    slot: StagSlot,
    stag: Stag,
    base_to: u64,
    len: u64,
}

impl fmt::Debug for ReadOnlyRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyRegion")
            .field("stag", &self.stag)
            .field("base_to", &self.base_to)
            .field("len", &self.len)
            .finish()
    }
}

/// What [`ReadOnlyRegion::invalidate`] hands back.
#[derive(Debug)]
pub struct DeregisteredBytes {
    /// The bytes, unchanged.
    pub buf: Bytes,
    /// The STag index, ready for another fast registration.
    pub slot: StagSlot,
}

impl ReadOnlyRegion {
    /// The STag to advertise to the peer.
    pub fn stag(&self) -> Stag {
        self.stag
    }

    /// The tagged offset of the region's first byte.
    pub fn base_to(&self) -> u64 {
        self.base_to
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The protection domain it belongs to.
    pub fn pd(&self) -> PdId {
        self.slot.pd
    }

    /// Current lifecycle state.
    pub fn state(&self) -> MrState {
        self.slot
            .table
            .region_state(self.slot.index)
            .unwrap_or(MrState::RemotelyInvalidated)
    }

    /// Revokes all access at once and gives the bytes back.
    pub fn invalidate(self) -> DeregisteredBytes {
        let buf = self.slot.table.empty_slot(self.slot.index).into_shared();
        DeregisteredBytes {
            buf,
            slot: self.slot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn rw() -> Access {
        Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
    }

    fn acc(pd: &ProtectionDomain, stag: Stag, to: u64, len: u64, need: Access) -> TaggedAccess {
        TaggedAccess {
            pd: pd.id(),
            stag,
            to,
            len,
            need,
        }
    }

    fn write(t: &MrTable, a: TaggedAccess, byte: u8) -> Result<usize, AccessError> {
        t.place_direct(a, |s| {
            s.fill(byte);
            Ok::<_, Infallible>(s.len())
        })
        .map(|r| r.unwrap_or_else(|e| match e {}))
    }

    #[test]
    fn stag_index_zero_is_never_allocated() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(8), rw()).unwrap();
        assert_ne!(mr.stag().index(), 0);
        for key in 0..=255u8 {
            assert_eq!(
                t.check(acc(&pd, Stag::new(0, key), 0, 1, Access::empty())),
                Err(AccessError::UnknownStag(Stag::new(0, key)))
            );
        }
    }

    #[test]
    fn places_inside_bounds_and_returns_buffer_on_invalidate() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register_at(BytesMut::zeroed(8), rw(), 0x1000).unwrap();
        assert_eq!(
            write(
                &t,
                acc(&pd, mr.stag(), 0x1002, 3, Access::REMOTE_WRITE),
                0x5a
            ),
            Ok(3)
        );
        assert_eq!(t.stats().bytes_placed_direct, 3);
        let back = mr.invalidate();
        assert_eq!(&back.buf[..], &[0, 0, 0x5a, 0x5a, 0x5a, 0, 0, 0]);
    }

    #[test]
    fn rejects_wrong_key_without_touching_memory() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let bad = Stag::new(mr.stag().index(), mr.stag().key().wrapping_add(1));
        assert_eq!(
            write(&t, acc(&pd, bad, 0, 4, Access::REMOTE_WRITE), 1),
            Err(AccessError::KeyMismatch(bad))
        );
        assert_eq!(&mr.invalidate().buf[..], &[0; 4]);
        assert_eq!(t.stats().access_errors, 1);
    }

    #[test]
    fn rejects_out_of_bounds_below_and_above() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register_at(BytesMut::zeroed(4), rw(), 100).unwrap();
        let s = mr.stag();
        assert!(matches!(
            t.check(acc(&pd, s, 99, 1, Access::REMOTE_WRITE)),
            Err(AccessError::BoundsViolation { .. })
        ));
        assert!(matches!(
            t.check(acc(&pd, s, 101, 4, Access::REMOTE_WRITE)),
            Err(AccessError::BoundsViolation { .. })
        ));
        assert_eq!(t.check(acc(&pd, s, 100, 4, Access::REMOTE_WRITE)), Ok(()));
        assert_eq!(
            t.check(acc(&pd, s, u64::MAX, 2, Access::REMOTE_WRITE)),
            Err(AccessError::ToWrap(s))
        );
    }

    #[test]
    fn rejects_missing_right_and_foreign_pd() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let other = t.alloc_pd();
        let mr = pd
            .register(BytesMut::zeroed(4), Access::REMOTE_READ)
            .unwrap();
        let s = mr.stag();
        assert_eq!(
            t.check(acc(&pd, s, 0, 4, Access::REMOTE_WRITE)),
            Err(AccessError::AccessRights(s))
        );
        assert_eq!(
            t.check(acc(&other, s, 0, 4, Access::REMOTE_READ)),
            Err(AccessError::PdMismatch(s))
        );
        assert_eq!(
            t.fetch(acc(&pd, s, 0, 4, Access::REMOTE_READ), |b| b.len()),
            Ok(4)
        );
    }

    #[test]
    fn remote_invalidation_revokes_access_and_owner_gets_buffer_back() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::from(&b"abcd"[..]), rw()).unwrap();
        let s = mr.stag();
        assert_eq!(t.invalidate_remote(pd.id(), s), Ok(()));
        assert_eq!(mr.state(), MrState::RemotelyInvalidated);
        assert_eq!(
            t.check(acc(&pd, s, 0, 1, Access::REMOTE_READ)),
            Err(AccessError::Invalidated(s))
        );
        assert_eq!(
            t.invalidate_remote(pd.id(), s),
            Err(AccessError::Invalidated(s))
        );
        assert_eq!(&mr.invalidate().buf[..], b"abcd");
    }

    #[test]
    fn remote_invalidation_needs_the_streams_pd() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let other = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(1), rw()).unwrap();
        assert_eq!(
            t.invalidate_remote(other.id(), mr.stag()),
            Err(AccessError::PdMismatch(mr.stag()))
        );
        assert_eq!(mr.state(), MrState::Valid);
    }

    #[test]
    fn fast_registration_uses_a_fresh_key_and_stale_stag_fails() {
        let t = MrTable::new(7);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let old = mr.stag();
        let Deregistered { slot, .. } = mr.invalidate();
        let mr2 = slot.fast_register(BytesMut::zeroed(4), rw(), 0).unwrap();
        assert_eq!(mr2.stag().index(), old.index());
        assert_ne!(mr2.stag().key(), old.key());
        assert_eq!(
            t.check(acc(&pd, old, 0, 1, Access::REMOTE_WRITE)),
            Err(AccessError::KeyMismatch(old))
        );
        assert_eq!(
            t.check(acc(&pd, mr2.stag(), 0, 1, Access::REMOTE_WRITE)),
            Ok(())
        );
    }

    #[test]
    fn dropping_a_region_frees_its_index() {
        let t = MrTable::with_max_regions(1, 1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(1), rw()).unwrap();
        assert_eq!(
            pd.register(BytesMut::zeroed(1), rw()).err(),
            Some(RegisterError::TableFull)
        );
        let s = mr.stag();
        drop(mr);
        assert_eq!(
            t.check(acc(&pd, s, 0, 1, Access::empty())),
            Err(AccessError::UnknownStag(s))
        );
        assert!(pd.register(BytesMut::zeroed(1), rw()).is_ok());
    }

    #[test]
    fn rejects_base_plus_length_overflow() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        assert_eq!(
            pd.register_at(BytesMut::zeroed(2), rw(), u64::MAX).err(),
            Some(RegisterError::ToOverflow)
        );
    }

    #[test]
    fn transfer_between_tables_checks_both_sides_first() {
        let a = MrTable::new(1);
        let b = MrTable::new(2);
        let pa = a.alloc_pd();
        let pb = b.alloc_pd();
        let src = pa
            .register(BytesMut::from(&b"hello"[..]), Access::REMOTE_READ)
            .unwrap();
        let dst = pb
            .register(BytesMut::zeroed(5), Access::LOCAL_WRITE)
            .unwrap();
        let bad = pb
            .register(BytesMut::zeroed(5), Access::REMOTE_READ)
            .unwrap();
        let s = acc(&pa, src.stag(), 0, 5, Access::REMOTE_READ);
        let r = MrTable::transfer(&a, s, &b, acc(&pb, bad.stag(), 0, 5, Access::LOCAL_WRITE));
        assert_eq!(
            r,
            Err(TransferError::Sink(AccessError::AccessRights(bad.stag())))
        );
        MrTable::transfer(&a, s, &b, acc(&pb, dst.stag(), 0, 5, Access::LOCAL_WRITE)).unwrap();
        assert_eq!(&dst.invalidate().buf[..], b"hello");
        assert_eq!(b.stats().bytes_placed_direct, 5);
        assert_eq!(b.stats().bytes_copied_staging, 0);
    }

    #[test]
    fn transfer_within_one_table_copies_between_regions() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let src = pd.register(BytesMut::from(&b"xyz"[..]), rw()).unwrap();
        let dst = pd.register(BytesMut::zeroed(3), rw()).unwrap();
        MrTable::transfer(
            &t,
            acc(&pd, src.stag(), 0, 3, Access::REMOTE_READ),
            &t,
            acc(&pd, dst.stag(), 0, 3, Access::LOCAL_WRITE),
        )
        .unwrap();
        assert_eq!(&dst.invalidate().buf[..], b"xyz");
    }

    #[test]
    fn place_copy_counts_staging() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(3), rw()).unwrap();
        t.place_copy(acc(&pd, mr.stag(), 0, 3, Access::REMOTE_WRITE), b"abc")
            .unwrap();
        assert_eq!(t.stats().bytes_copied_staging, 3);
        assert_eq!(t.stats().bytes_placed_direct, 0);
    }

    #[test]
    fn read_only_region_serves_reads_and_refuses_every_write() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let data = Bytes::from_static(b"chunk data");
        let ro = pd.register_read_only(data.clone(), 0x10).unwrap();
        let s = ro.stag();
        assert_eq!(
            t.fetch(acc(&pd, s, 0x10, 5, Access::REMOTE_READ), |b| b.to_vec()),
            Ok(b"chunk".to_vec())
        );
        assert_eq!(
            write(&t, acc(&pd, s, 0x10, 1, Access::REMOTE_WRITE), 0),
            Err(AccessError::AccessRights(s))
        );
        // Even a placement that asks for no right cannot write shared bytes.
        assert_eq!(
            write(&t, acc(&pd, s, 0x10, 1, Access::empty()), 0),
            Err(AccessError::AccessRights(s))
        );
        let sink = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        MrTable::transfer(
            &t,
            acc(&pd, s, 0x16, 4, Access::REMOTE_READ),
            &t,
            acc(&pd, sink.stag(), 0, 4, Access::LOCAL_WRITE),
        )
        .unwrap();
        assert_eq!(&sink.invalidate().buf[..], b"data");
        let back = ro.invalidate();
        assert_eq!(back.buf, data);
        assert_eq!(
            t.check(acc(&pd, s, 0x10, 1, Access::REMOTE_READ)),
            Err(AccessError::UnknownStag(s))
        );
    }

    #[test]
    fn transfer_into_a_read_only_region_is_refused() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let src = pd.register(BytesMut::from(&b"abcd"[..]), rw()).unwrap();
        let ro = pd
            .register_read_only(Bytes::from_static(b"wxyz"), 0)
            .unwrap();
        let r = MrTable::transfer(
            &t,
            acc(&pd, src.stag(), 0, 4, Access::REMOTE_READ),
            &t,
            acc(&pd, ro.stag(), 0, 4, Access::empty()),
        );
        assert_eq!(
            r,
            Err(TransferError::Sink(AccessError::AccessRights(ro.stag())))
        );
        assert_eq!(&ro.invalidate().buf[..], b"wxyz");
    }

    #[test]
    fn placing_into_one_region_leaves_the_table_free_for_others() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let a = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let b = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let b_stag = b.stag();
        let (tx, rx) = std::sync::mpsc::channel();
        let (t2, pd2) = (Arc::clone(&t), pd.clone());
        let mut got = None;
        let placed = t.place_direct(acc(&pd, a.stag(), 0, 4, Access::REMOTE_WRITE), |s| {
            // While this placement runs (a socket read, in a device), another
            // thread registers, checks, reads and invalidates other regions.
            std::thread::spawn(move || {
                let c = pd2.register(BytesMut::zeroed(2), rw()).unwrap();
                let seen = t2.fetch(acc(&pd2, b_stag, 0, 4, Access::REMOTE_READ), |x| x.to_vec());
                let back = b.invalidate();
                drop(c);
                tx.send((seen, back.buf.len())).unwrap();
            });
            got = Some(rx.recv_timeout(std::time::Duration::from_secs(10)));
            s.fill(7);
            Ok::<_, Infallible>(4)
        });
        assert_eq!(placed, Ok(Ok(4)));
        assert_eq!(
            got.unwrap(),
            Ok((Ok(vec![0; 4]), 4)),
            "other regions were blocked behind a placement"
        );
        assert_eq!(&a.invalidate().buf[..], &[7; 4]);
    }

    #[test]
    fn invalidation_waits_for_a_placement_in_progress_and_stops_later_ones() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let a = acc(&pd, mr.stag(), 0, 4, Access::REMOTE_WRITE);
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let t2 = Arc::clone(&t);
        let placer = std::thread::spawn(move || {
            t2.place_direct(a, |s| {
                started_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                s.fill(9);
                Ok::<_, Infallible>(4)
            })
        });
        started.recv().unwrap();
        let owner = std::thread::spawn(move || mr.invalidate());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!owner.is_finished(), "the owner took memory being written");
        go.send(()).unwrap();
        assert_eq!(placer.join().unwrap(), Ok(Ok(4)));
        let back = owner.join().unwrap();
        assert_eq!(&back.buf[..], &[9; 4], "the placement came first");
        assert_eq!(write(&t, a, 1), Err(AccessError::UnknownStag(a.stag)));
    }

    #[test]
    fn an_access_checked_before_a_re_registration_never_reaches_the_new_memory() {
        let t = MrTable::new(1);
        let pd = t.alloc_pd();
        let mr = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        let a = acc(&pd, mr.stag(), 0, 4, Access::REMOTE_WRITE);
        // Checked against the table; the region lock not yet taken.
        let ch = checked(&t.lock(), a).unwrap();
        let again = mr
            .invalidate()
            .slot
            .fast_register(BytesMut::zeroed(4), rw(), 0)
            .unwrap();
        let mut c = lock_cell(&ch.cell);
        assert!(ch.slice_mut(&mut c).is_none());
        assert!(ch.slice(&c).is_none());
        drop(c);
        // Checked again, the stale STag is refused by its key.
        assert_eq!(write(&t, a, 1), Err(AccessError::KeyMismatch(a.stag)));
        assert_eq!(&again.invalidate().buf[..], &[0; 4]);
    }

    /// A backend that hands out its own STags and records what it saw.
    #[derive(Default)]
    struct FakeNic {
        log: Mutex<Vec<String>>,
        next: AtomicU32,
        refuse: std::sync::atomic::AtomicBool,
    }

    impl RegionBackend for FakeNic {
        fn register(
            &self,
            pd: PdId,
            mem: BackendMem<'_>,
            access: Access,
            base_to: u64,
        ) -> Result<(Stag, u64), RegisterError> {
            if self.refuse.load(Ordering::Relaxed) {
                return Err(RegisterError::Device(12));
            }
            let (kind, len) = match mem {
                BackendMem::Writable(b) => ("rw", b.len()),
                BackendMem::ReadOnly(b) => ("ro", b.len()),
            };
            let stag = Stag(0xab00_0000 + self.next.fetch_add(1, Ordering::Relaxed));
            self.log.lock().unwrap().push(format!(
                "reg {stag} pd{} {kind} {len} {access:?} {base_to}",
                pd.0
            ));
            // A NIC that moves odd bases up by 0x1000.
            Ok((
                stag,
                if base_to % 2 == 1 {
                    base_to + 0x1000
                } else {
                    base_to
                },
            ))
        }

        fn deregister(&self, stag: Stag) {
            self.log.lock().unwrap().push(format!("dereg {stag}"));
        }
    }

    #[test]
    fn a_backend_chooses_the_stag_and_lets_go_before_the_owner_gets_memory() {
        let nic = Arc::new(FakeNic::default());
        let t = MrTable::with_backend(1, 16, nic.clone());
        let pd = t.alloc_pd();
        let mr = pd.register_at(BytesMut::zeroed(8), rw(), 0x40).unwrap();
        assert_eq!(mr.stag(), Stag(0xab00_0000));
        assert_eq!(mr.base_to(), 0x40);
        let odd = pd.register_at(BytesMut::zeroed(1), rw(), 0x41).unwrap();
        assert_eq!(odd.base_to(), 0x1041, "the backend's base is the region's");
        drop(odd);
        let ro = pd
            .register_read_only(Bytes::from_static(b"abc"), 0)
            .unwrap();
        assert_eq!(ro.stag(), Stag(0xab00_0002));
        let back = mr.invalidate();
        assert_eq!(back.buf.len(), 8);
        // The slot's next registration is the backend's again.
        let again = back
            .slot
            .fast_register(BytesMut::zeroed(2), rw(), 0)
            .unwrap();
        assert_eq!(again.stag(), Stag(0xab00_0003));
        drop(again);
        drop(ro);
        let log = nic.log.lock().unwrap().clone();
        assert_eq!(
            log,
            vec![
                format!("reg 0xab000000 pd{} rw 8 {:?} 64", pd.id().0, rw()),
                format!("reg 0xab000001 pd{} rw 1 {:?} 65", pd.id().0, rw()),
                "dereg 0xab000001".to_string(),
                format!(
                    "reg 0xab000002 pd{} ro 3 {:?} 0",
                    pd.id().0,
                    Access::REMOTE_READ
                ),
                "dereg 0xab000000".to_string(),
                format!("reg 0xab000003 pd{} rw 2 {:?} 0", pd.id().0, rw()),
                "dereg 0xab000003".to_string(),
                "dereg 0xab000002".to_string(),
            ]
        );
    }

    #[test]
    fn a_backend_refusal_is_a_typed_error_and_frees_nothing_twice() {
        let nic = Arc::new(FakeNic::default());
        nic.refuse.store(true, Ordering::Relaxed);
        let t = MrTable::with_backend(1, 1, nic.clone());
        let pd = t.alloc_pd();
        assert_eq!(
            pd.register(BytesMut::zeroed(4), rw()).err(),
            Some(RegisterError::Device(12))
        );
        // The index came back: a table of one region can register again.
        nic.refuse.store(false, Ordering::Relaxed);
        let mr = pd.register(BytesMut::zeroed(4), rw()).unwrap();
        drop(mr);
        assert_eq!(
            nic.log
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with("dereg"))
                .count(),
            1
        );
    }
}
