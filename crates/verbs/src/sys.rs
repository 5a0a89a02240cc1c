//! The one module of the workspace that calls foreign code: libibverbs and
//! librdmacm, loaded at run time with `libloading` (no link-time dependency,
//! so the workspace builds and runs on a machine without rdma-core).
//!
//! Every `unsafe` block carries a SAFETY note. The structures below are the
//! rdma-core ABI (`infiniband/verbs.h`, `rdma/rdma_cma.h`, stable since
//! libibverbs 1.1 / librdmacm 1.0); only the prefixes this crate reads are
//! declared where the library hands out a pointer, and full layouts where
//! this crate allocates the structure. The inline functions of `verbs.h`
//! (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`)
//! are the context's operation table, called the way the header does.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use bytes::Bytes;
use rnic::BackendMem;

// ---- ABI: verbs.h -------------------------------------------------------

#[repr(C)]
struct IbvDevice {
    _ops: [*mut c_void; 2],
    node_type: c_int,
    transport_type: c_int,
    name: [c_char; 64],
}

/// `struct ibv_context_ops`: 32 pointers; the indexes used are named.
const OPS_POLL_CQ: usize = 11;
const OPS_REQ_NOTIFY_CQ: usize = 12;
const OPS_POST_SEND: usize = 25;
const OPS_POST_RECV: usize = 26;

#[repr(C)]
struct IbvContext {
    device: *mut IbvDevice,
    ops: [*mut c_void; 32],
}

#[repr(C)]
struct IbvDeviceAttr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    max_qp_wr: c_int,
    device_cap_flags: c_uint,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    max_cqe: c_int,
    max_mr: c_int,
    max_pd: c_int,
    max_qp_rd_atom: c_int,
    max_ee_rd_atom: c_int,
    max_res_rd_atom: c_int,
    max_qp_init_rd_atom: c_int,
    rest: [c_int; 16],
    tail: [u8; 64],
}

/// `struct ibv_port_attr` (the compat symbol fills a prefix of it).
#[repr(C)]
struct IbvPortAttr {
    state: c_int,
    max_mtu: c_int,
    active_mtu: c_int,
    gid_tbl_len: c_int,
    port_cap_flags: u32,
    max_msg_sz: u32,
    bad_pkey_cntr: u32,
    qkey_viol_cntr: u32,
    pkey_tbl_len: u16,
    lid: u16,
    sm_lid: u16,
    lmc: u8,
    max_vl_num: u8,
    sm_sl: u8,
    subnet_timeout: u8,
    init_type_reply: u8,
    active_width: u8,
    active_speed: u8,
    phys_state: u8,
    link_layer: u8,
    flags: u8,
    tail: [u8; 64],
}

#[repr(C)]
struct IbvPd {
    context: *mut IbvContext,
    handle: u32,
}

#[repr(C)]
struct IbvMr {
    context: *mut IbvContext,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

#[repr(C)]
struct IbvCompChannel {
    context: *mut IbvContext,
    fd: c_int,
    refcnt: c_int,
}

#[repr(C)]
struct IbvCq {
    context: *mut IbvContext,
}

#[repr(C)]
struct IbvQp {
    context: *mut IbvContext,
    qp_context: *mut c_void,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    handle: u32,
    qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
}

/// `struct ibv_send_wr`, 128 bytes: `wr.rdma` is the first two words of
/// the `wr` union.
#[repr(C)]
struct IbvSendWr {
    wr_id: u64,
    next: *mut IbvSendWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
    opcode: c_int,
    send_flags: c_uint,
    invalidate_rkey: u32,
    remote_addr: u64,
    rkey: u32,
    _wr_rest: [u32; 5],
    _qp_type: [u32; 2],
    _tail: [u64; 6],
}

#[repr(C)]
struct IbvRecvWr {
    wr_id: u64,
    next: *mut IbvRecvWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct IbvWc {
    wr_id: u64,
    status: c_int,
    opcode: c_int,
    vendor_err: u32,
    byte_len: u32,
    imm_or_inv: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: c_uint,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

#[repr(C)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

#[repr(C)]
struct IbvQpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    cap: IbvQpCap,
    qp_type: c_int,
    sq_sig_all: c_int,
}

// ---- ABI: rdma_cma.h ----------------------------------------------------

#[repr(C)]
struct RdmaEventChannel {
    fd: c_int,
}

#[repr(C)]
struct RdmaCmId {
    verbs: *mut IbvContext,
    channel: *mut RdmaEventChannel,
    context: *mut c_void,
    qp: *mut IbvQp,
    /// `route.addr`: source then destination `sockaddr_storage`.
    src: [u8; 128],
    dst: [u8; 128],
}

#[repr(C)]
struct RdmaConnParam {
    private_data: *const c_void,
    private_data_len: u8,
    responder_resources: u8,
    initiator_depth: u8,
    flow_control: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    srq: u8,
    qp_num: u32,
}

#[repr(C)]
struct RdmaCmEvent {
    id: *mut RdmaCmId,
    listen_id: *mut RdmaCmId,
    event: c_int,
    status: c_int,
    conn: RdmaConnParam,
}

const RDMA_PS_TCP: c_int = 0x0106;
const IBV_QPT_RC: c_int = 2;

// ---- the loaded libraries ---------------------------------------------------

type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;

macro_rules! api {
    ($($lib:ident: $name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        struct Api {
            $($name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            _verbs: libloading::Library,
            _cm: libloading::Library,
        }

        impl Api {
            fn load() -> Result<Api, String> {
                // SAFETY: loading rdma-core runs its constructors, which only
                // register providers; it is the documented way to use it.
                let verbs = unsafe { libloading::Library::new("libibverbs.so.1") }
                    .map_err(|e| format!("libibverbs.so.1: {e}"))?;
                // SAFETY: as above, for librdmacm.
                let cm = unsafe { libloading::Library::new("librdmacm.so.1") }
                    .map_err(|e| format!("librdmacm.so.1: {e}"))?;
                Ok(Api {
                    $($name: {
                        let lib = if stringify!($lib) == "verbs" { &verbs } else { &cm };
                        // SAFETY: the symbol is the rdma-core function of that
                        // name, whose C prototype the field's type repeats.
                        *unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        }
                        .map_err(|e| format!("{}: {e}", stringify!($name)))?
                    },)*
                    _verbs: verbs,
                    _cm: cm,
                })
            }
        }
    };
}

api! {
    verbs: ibv_get_device_list: fn(*mut c_int) -> *mut *mut IbvDevice;
    verbs: ibv_free_device_list: fn(*mut *mut IbvDevice);
    verbs: ibv_open_device: fn(*mut IbvDevice) -> *mut IbvContext;
    verbs: ibv_close_device: fn(*mut IbvContext) -> c_int;
    verbs: ibv_query_device: fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int;
    verbs: ibv_query_port: fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;
    verbs: ibv_alloc_pd: fn(*mut IbvContext) -> *mut IbvPd;
    verbs: ibv_dealloc_pd: fn(*mut IbvPd) -> c_int;
    verbs: ibv_reg_mr: fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr;
    verbs: ibv_reg_mr_iova: fn(*mut IbvPd, *mut c_void, usize, u64, c_int) -> *mut IbvMr;
    verbs: ibv_dereg_mr: fn(*mut IbvMr) -> c_int;
    verbs: ibv_create_comp_channel: fn(*mut IbvContext) -> *mut IbvCompChannel;
    verbs: ibv_destroy_comp_channel: fn(*mut IbvCompChannel) -> c_int;
    verbs: ibv_create_cq: fn(*mut IbvContext, c_int, *mut c_void, *mut IbvCompChannel, c_int) -> *mut IbvCq;
    verbs: ibv_destroy_cq: fn(*mut IbvCq) -> c_int;
    verbs: ibv_get_cq_event: fn(*mut IbvCompChannel, *mut *mut IbvCq, *mut *mut c_void) -> c_int;
    verbs: ibv_ack_cq_events: fn(*mut IbvCq, c_uint);
    cm: rdma_get_devices: fn(*mut c_int) -> *mut *mut IbvContext;
    cm: rdma_create_event_channel: fn() -> *mut RdmaEventChannel;
    cm: rdma_destroy_event_channel: fn(*mut RdmaEventChannel);
    cm: rdma_create_id: fn(*mut RdmaEventChannel, *mut *mut RdmaCmId, *mut c_void, c_int) -> c_int;
    cm: rdma_destroy_id: fn(*mut RdmaCmId) -> c_int;
    cm: rdma_migrate_id: fn(*mut RdmaCmId, *mut RdmaEventChannel) -> c_int;
    cm: rdma_bind_addr: fn(*mut RdmaCmId, *const c_void) -> c_int;
    cm: rdma_listen: fn(*mut RdmaCmId, c_int) -> c_int;
    cm: rdma_resolve_addr: fn(*mut RdmaCmId, *const c_void, *const c_void, c_int) -> c_int;
    cm: rdma_resolve_route: fn(*mut RdmaCmId, c_int) -> c_int;
    cm: rdma_create_qp: fn(*mut RdmaCmId, *mut IbvPd, *mut IbvQpInitAttr) -> c_int;
    cm: rdma_destroy_qp: fn(*mut RdmaCmId);
    cm: rdma_connect: fn(*mut RdmaCmId, *mut RdmaConnParam) -> c_int;
    cm: rdma_accept: fn(*mut RdmaCmId, *mut RdmaConnParam) -> c_int;
    cm: rdma_reject: fn(*mut RdmaCmId, *const c_void, u8) -> c_int;
    cm: rdma_disconnect: fn(*mut RdmaCmId) -> c_int;
    cm: rdma_get_cm_event: fn(*mut RdmaEventChannel, *mut *mut RdmaCmEvent) -> c_int;
    cm: rdma_ack_cm_event: fn(*mut RdmaCmEvent) -> c_int;
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

fn api() -> Result<&'static Api, String> {
    API.get_or_init(Api::load).as_ref().map_err(Clone::clone)
}

/// Whether rdma-core's libraries load; `Err` says which one is missing.
pub(crate) fn available() -> Result<(), String> {
    api().map(|_| ())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor the library owns and keeps open while
    // its channel lives; F_GETFL/F_SETFL touch only its status flags.
    let r = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Descriptors this module owns (a completion channel's, an event
/// channel's), for registration with tokio.
pub(crate) trait OwnedChannel: AsRawFd {}
impl OwnedChannel for Cq {}
impl OwnedChannel for EventChannel {}

/// Registers a channel's descriptor with tokio's reactor.
pub(crate) fn async_fd<T: OwnedChannel>(t: T) -> std::io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: the descriptor belongs to the channel inside `t`: rdma-core
    // opened it when the channel was created and closes it only when the
    // channel is destroyed, in `t`'s Drop, which runs after the AsyncFd
    // has deregistered it; `as_raw_fd` always returns that same number.
    unsafe { tokio::io::unix::AsyncFd::register(t) }.map_err(std::io::Error::from)
}

// ---- devices ------------------------------------------------------------------

/// How a device moves RDMA traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// iWARP (RDMAP/DDP/MPA over TCP): hardware iWARP NICs, Linux `siw`.
    Iwarp,
    /// RoCE (InfiniBand transport over Ethernet): RoCE NICs, Linux `rxe`.
    Roce,
    /// InfiniBand.
    Infiniband,
    /// Anything else rdma-core reports.
    Other,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            TransportKind::Iwarp => "iWARP",
            TransportKind::Roce => "RoCE",
            TransportKind::Infiniband => "InfiniBand",
            TransportKind::Other => "other",
        })
    }
}

/// What rdma-core reports of one device (port 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The kernel's device name (`siw0`, `rxe0`, `mlx5_0`).
    pub name: String,
    /// iWARP, RoCE or InfiniBand.
    pub transport: TransportKind,
    /// Port 1's state (`ACTIVE`, `DOWN`...).
    pub port_state: &'static str,
    /// Largest memory region the device registers, in bytes.
    pub max_mr_size: u64,
    /// Largest scatter/gather list of one work request.
    pub max_sge: u32,
    /// Largest RDMA Read depth per queue pair (IRD/ORD).
    pub max_qp_rd_atom: u32,
}

fn port_state_name(s: c_int) -> &'static str {
    match s {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

fn device_name(dev: *mut IbvDevice) -> String {
    // SAFETY: `dev` comes from the library's device list, still allocated;
    // `name` is a NUL-terminated array inside it (IBV_SYSFS_NAME_MAX).
    unsafe { CStr::from_ptr((*dev).name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn query(api: &Api, ctx: *mut IbvContext) -> Option<DeviceInfo> {
    // SAFETY: both attribute structures are plain data sized at least as
    // the library's; zeroed is a valid value for them.
    let mut attr: IbvDeviceAttr = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut port: IbvPortAttr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx` is an open context; the out-pointers are valid.
    let (a, p) = unsafe {
        (
            (api.ibv_query_device)(ctx, &mut attr),
            (api.ibv_query_port)(ctx, 1, &mut port),
        )
    };
    if a != 0 {
        return None;
    }
    // SAFETY: an open context points at its device.
    let dev = unsafe { (*ctx).device };
    // SAFETY: the device outlives its contexts.
    let transport_type = unsafe { (*dev).transport_type };
    let transport = match (transport_type, port.link_layer) {
        (1, _) => TransportKind::Iwarp,
        (0, 2) => TransportKind::Roce,
        (0, _) => TransportKind::Infiniband,
        _ => TransportKind::Other,
    };
    Some(DeviceInfo {
        name: device_name(dev),
        transport,
        port_state: if p == 0 {
            port_state_name(port.state)
        } else {
            "unknown"
        },
        max_mr_size: attr.max_mr_size,
        max_sge: attr.max_sge.max(0) as u32,
        max_qp_rd_atom: attr.max_qp_rd_atom.max(0) as u32,
    })
}

/// Every device rdma-core sees, with its attributes.
pub(crate) fn list_devices() -> Result<Vec<DeviceInfo>, String> {
    let api = api()?;
    let mut n: c_int = 0;
    // SAFETY: the out-pointer is valid; the list is freed below.
    let list = unsafe { (api.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is from the list; the context is closed below.
        let ctx = unsafe { (api.ibv_open_device)(dev) };
        if ctx.is_null() {
            continue;
        }
        if let Some(info) = query(api, ctx) {
            out.push(info);
        }
        // SAFETY: opened above, used by nothing else.
        unsafe { (api.ibv_close_device)(ctx) };
    }
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { (api.ibv_free_device_list)(list) };
    Ok(out)
}

/// A device context opened by librdmacm (the one its connection ids use),
/// valid for the life of the process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context {
    ctx: *mut IbvContext,
}

// SAFETY: an ibv_context is used from any thread (rdma-core locks inside);
// librdmacm keeps it open for the life of the process here.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// librdmacm's context of the device called `name`.
    pub(crate) fn by_name(name: &str) -> Result<(Context, DeviceInfo), String> {
        let api = api()?;
        let mut n: c_int = 0;
        // SAFETY: the out-pointer is valid. The list is deliberately never
        // freed: the contexts must stay open while the process uses them.
        let list = unsafe { (api.rdma_get_devices)(&mut n) };
        if list.is_null() {
            return Err("rdma-core sees no RDMA device".into());
        }
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` context pointers.
            let ctx = unsafe { *list.add(i) };
            if let Some(info) = query(api, ctx) {
                if info.name == name {
                    return Ok((Context { ctx }, info));
                }
            }
        }
        Err(format!("rdma-core has no device called {name:?}"))
    }

    fn same(&self, other: *mut IbvContext) -> bool {
        self.ctx == other
    }
}

// ---- protection domains and memory regions ------------------------------------

/// A protection domain of a [`Context`].
#[derive(Debug)]
pub(crate) struct Pd {
    pd: *mut IbvPd,
}

// SAFETY: rdma-core's PD calls are thread-safe; the pointer is owned.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub(crate) fn alloc(ctx: Context) -> Result<Pd, i32> {
        let api = api().map_err(|_| libc::ENOSYS)?;
        // SAFETY: `ctx` is an open context.
        let pd = unsafe { (api.ibv_alloc_pd)(ctx.ctx) };
        if pd.is_null() {
            return Err(errno());
        }
        Ok(Pd { pd })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: allocated by ibv_alloc_pd and freed once; its regions
            // and queue pairs hold an Arc of it, so none is left.
            unsafe { (api.ibv_dealloc_pd)(self.pd) };
        }
    }
}

/// `IBV_ACCESS_*` bits.
pub(crate) const ACCESS_LOCAL_WRITE: c_int = 1;
pub(crate) const ACCESS_REMOTE_WRITE: c_int = 2;
pub(crate) const ACCESS_REMOTE_READ: c_int = 4;

/// What keeps a region's memory alive and in place.
enum Keep {
    /// Borrowed from an `rnic::MrTable` slot (see [`Mr::register_table`]).
    Table,
    /// Shared bytes held here.
    Bytes(#[allow(dead_code)] Bytes),
    /// An arena owned here (from `Box::into_raw`, freed on drop after the
    /// deregistration): the NIC writes it behind Rust's back, so it is only
    /// reached through raw copies, never a reference.
    Arena(*mut u8, usize),
}

/// A registered memory region; deregistered on drop.
pub(crate) struct Mr {
    mr: *mut IbvMr,
    keep: Keep,
    _pd: std::sync::Arc<Pd>,
}

// SAFETY: the region's pointer is owned; ibv_dereg_mr is thread-safe; the
// memory is either owned here or kept in place by the table's contract.
unsafe impl Send for Mr {}
// SAFETY: shared access only reads the keys.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl Mr {
    fn reg(
        pd: &std::sync::Arc<Pd>,
        ptr: *mut u8,
        len: usize,
        iova: Option<u64>,
        access: c_int,
        keep: Keep,
    ) -> Result<Mr, i32> {
        let api = api().map_err(|_| libc::ENOSYS)?;
        // SAFETY: `ptr..ptr+len` is memory that `keep` (or the table, for
        // Keep::Table) holds in place until this Mr is dropped, and drop
        // deregisters before `keep` is released.
        let mr = unsafe {
            match iova {
                Some(iova) => (api.ibv_reg_mr_iova)(pd.pd, ptr.cast(), len, iova, access),
                None => (api.ibv_reg_mr)(pd.pd, ptr.cast(), len, access),
            }
        };
        if mr.is_null() {
            return Err(errno());
        }
        Ok(Mr {
            mr,
            keep,
            _pd: std::sync::Arc::clone(pd),
        })
    }

    /// Registers memory an `rnic::MrTable` slot holds, at tagged offset
    /// `iova`. Sound because of `rnic::RegionBackend`'s contract: the table
    /// keeps the memory in place and untouched until the backend's
    /// `deregister`, which drops this Mr first.
    pub(crate) fn register_table(
        pd: &std::sync::Arc<Pd>,
        mem: BackendMem<'_>,
        iova: u64,
        access: c_int,
    ) -> Result<Mr, i32> {
        let (ptr, len) = match mem {
            BackendMem::Writable(b) => (b.as_mut_ptr(), b.len()),
            BackendMem::ReadOnly(b) => (b.as_ptr().cast_mut(), b.len()),
        };
        Self::reg(pd, ptr, len, Some(iova), access, Keep::Table)
    }

    /// Registers shared bytes for the local device to read (a Send or
    /// Write source), keeping them alive as long as the region.
    pub(crate) fn register_bytes(pd: &std::sync::Arc<Pd>, b: Bytes) -> Result<Mr, i32> {
        let (ptr, len) = (b.as_ptr().cast_mut(), b.len());
        Self::reg(pd, ptr, len, None, 0, Keep::Bytes(b))
    }

    /// A zeroed arena of `len` bytes the local device writes (receive
    /// buffers) and reads (send staging).
    pub(crate) fn arena(pd: &std::sync::Arc<Pd>, len: usize) -> Result<Mr, i32> {
        let len = len.max(1);
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let r = Self::reg(
            pd,
            ptr,
            len,
            None,
            ACCESS_LOCAL_WRITE,
            Keep::Arena(ptr, len),
        );
        if r.is_err() {
            // SAFETY: from Box::into_raw above with this length, not
            // registered, freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
        r
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: a live region returned by ibv_reg_mr*.
        unsafe { (*self.mr).lkey }
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    /// The address local work requests name for the region's first byte.
    pub(crate) fn addr(&self) -> u64 {
        match &self.keep {
            Keep::Arena(p, _) => *p as u64,
            // SAFETY: as above.
            _ => unsafe { (*self.mr).addr as u64 },
        }
    }

    /// Copies `bytes` into the arena at `off` (staging a Send). Returns
    /// false when it does not fit or this is not an arena.
    pub(crate) fn arena_write(&mut self, off: usize, bytes: &[u8]) -> bool {
        match self.keep {
            Keep::Arena(p, len) if off.checked_add(bytes.len()).is_some_and(|e| e <= len) => {
                // SAFETY: in bounds of the arena; the caller owns this slot
                // (no request using it is posted), so the NIC is not reading
                // it; `bytes` is other memory.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(off), bytes.len()) };
                true
            }
            _ => false,
        }
    }

    /// Appends `len` bytes of the arena at `off` (a received message) to
    /// `dst`. Returns false when out of bounds or not an arena.
    pub(crate) fn arena_read(&self, off: usize, len: usize, dst: &mut bytes::BytesMut) -> bool {
        match self.keep {
            Keep::Arena(p, total) if off.checked_add(len).is_some_and(|e| e <= total) => {
                // SAFETY: in bounds; the slot's receive completed, so the NIC
                // no longer writes it until it is posted again; copied out
                // without forming a reference to NIC-written memory.
                let src = unsafe { std::slice::from_raw_parts(p.add(off), len) };
                dst.extend_from_slice(src);
                true
            }
            _ => false,
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: registered by ibv_reg_mr*, deregistered once, before
            // the memory is released below (or by `keep`'s own drop).
            unsafe { (api.ibv_dereg_mr)(self.mr) };
        }
        if let Keep::Arena(p, len) = self.keep {
            // SAFETY: from Box::into_raw in `arena` with this length; the
            // NIC lost access above; freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) });
        }
    }
}

// ---- completion queues ------------------------------------------------------

/// A completion queue with its own completion channel.
pub(crate) struct Cq {
    cq: *mut IbvCq,
    channel: *mut IbvCompChannel,
    fd: RawFd,
}

// SAFETY: rdma-core's CQ calls are thread-safe; the pointers are owned.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

/// One work completion, copied out of the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wc {
    pub(crate) wr_id: u64,
    pub(crate) status: i32,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    /// The rkey a Send With Invalidate invalidated, when `IBV_WC_WITH_INV`.
    pub(crate) invalidated: Option<u32>,
}

impl Cq {
    pub(crate) fn new(ctx: Context, entries: u32) -> Result<Cq, String> {
        let api = api()?;
        // SAFETY: `ctx` is open.
        let channel = unsafe { (api.ibv_create_comp_channel)(ctx.ctx) };
        if channel.is_null() {
            return Err(format!("ibv_create_comp_channel: errno {}", errno()));
        }
        // SAFETY: the channel is live; no user context.
        let cq = unsafe {
            (api.ibv_create_cq)(ctx.ctx, entries.max(1) as c_int, null_mut(), channel, 0)
        };
        if cq.is_null() {
            let e = errno();
            // SAFETY: created above, unused.
            unsafe { (api.ibv_destroy_comp_channel)(channel) };
            return Err(format!("ibv_create_cq({entries}): errno {e}"));
        }
        // SAFETY: the channel is live.
        let fd = unsafe { (*channel).fd };
        let out = Cq { cq, channel, fd };
        set_nonblocking(fd).map_err(|e| e.to_string())?;
        out.arm()?;
        Ok(out)
    }

    /// Asks for an event on the channel at the next completion.
    pub(crate) fn arm(&self) -> Result<(), String> {
        let api = api()?;
        // SAFETY: reading the op table of the CQ's live context, as the
        // inline ibv_req_notify_cq does.
        let r = unsafe {
            let f: ReqNotifyFn = std::mem::transmute((*(*self.cq).context).ops[OPS_REQ_NOTIFY_CQ]);
            f(self.cq, 0)
        };
        let _ = api;
        if r != 0 {
            return Err(format!("ibv_req_notify_cq: {r}"));
        }
        Ok(())
    }

    /// Takes the pending channel events (non-blocking) and acknowledges
    /// them; returns how many there were.
    pub(crate) fn take_events(&self) -> u32 {
        let Ok(api) = api() else { return 0 };
        let mut n = 0;
        loop {
            let mut cq = null_mut();
            let mut ctx = null_mut();
            // SAFETY: the channel is live and non-blocking; out-pointers valid.
            let r = unsafe { (api.ibv_get_cq_event)(self.channel, &mut cq, &mut ctx) };
            if r != 0 {
                break;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: acknowledges exactly the events taken above.
            unsafe { (api.ibv_ack_cq_events)(self.cq, n) };
        }
        n
    }

    /// Polls up to `max` completions.
    pub(crate) fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<(), String> {
        let mut buf = [IbvWc {
            wr_id: 0,
            status: 0,
            opcode: 0,
            vendor_err: 0,
            byte_len: 0,
            imm_or_inv: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
        }; 16];
        while out.len() < max {
            // SAFETY: the op table's poll_cq, as the inline ibv_poll_cq, with
            // room for `buf.len()` entries.
            let n = unsafe {
                let f: PollCqFn = std::mem::transmute((*(*self.cq).context).ops[OPS_POLL_CQ]);
                f(self.cq, buf.len() as c_int, buf.as_mut_ptr())
            };
            if n < 0 {
                return Err(format!("ibv_poll_cq: {n}"));
            }
            for wc in buf.iter().take(n as usize) {
                out.push(Wc {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    vendor_err: wc.vendor_err,
                    byte_len: wc.byte_len,
                    invalidated: (wc.wc_flags & 8 != 0).then_some(wc.imm_or_inv),
                });
            }
            if (n as usize) < buf.len() {
                break;
            }
        }
        Ok(())
    }
}

impl AsRawFd for Cq {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: every event was acknowledged (take_events); the queue
            // pair using the CQ was destroyed first (Conn's field order).
            unsafe {
                (api.ibv_destroy_cq)(self.cq);
                (api.ibv_destroy_comp_channel)(self.channel);
            }
        }
    }
}

// ---- connection management --------------------------------------------------

/// An rdma_cm event channel.
pub(crate) struct EventChannel {
    ch: *mut RdmaEventChannel,
}

// SAFETY: librdmacm's channel calls are thread-safe; the pointer is owned.
unsafe impl Send for EventChannel {}
// SAFETY: as above.
unsafe impl Sync for EventChannel {}

/// The kinds of rdma_cm events (`enum rdma_cm_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmEventKind {
    AddrResolved,
    RouteResolved,
    ConnectRequest,
    Established,
    Rejected,
    Disconnected,
    /// Address or route errors, unreachable, connect errors.
    Failed,
    Other(i32),
}

/// One rdma_cm event, copied out and acknowledged.
pub(crate) struct CmEvent {
    pub(crate) kind: CmEventKind,
    pub(crate) status: i32,
    /// For a connection request: the new id (owned by the receiver).
    pub(crate) new_id: Option<CmId>,
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl EventChannel {
    pub(crate) fn new() -> Result<EventChannel, String> {
        let api = api()?;
        // SAFETY: no arguments; the result is checked.
        let ch = unsafe { (api.rdma_create_event_channel)() };
        if ch.is_null() {
            return Err(format!("rdma_create_event_channel: errno {}", errno()));
        }
        let out = EventChannel { ch };
        set_nonblocking(out.as_raw_fd()).map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// The next event, if one is ready (the channel is non-blocking).
    pub(crate) fn next(&self) -> Option<CmEvent> {
        let api = api().ok()?;
        let mut ev = null_mut();
        // SAFETY: the channel is live; the out-pointer is valid.
        if unsafe { (api.rdma_get_cm_event)(self.ch, &mut ev) } != 0 {
            return None;
        }
        // SAFETY: a returned event is valid until acknowledged below; the
        // private data pointer, when set, holds `private_data_len` bytes.
        let out = unsafe {
            let e = &*ev;
            let kind = match e.event {
                0 => CmEventKind::AddrResolved,
                2 => CmEventKind::RouteResolved,
                4 => CmEventKind::ConnectRequest,
                5 | 9 => CmEventKind::Established,
                8 => CmEventKind::Rejected,
                10 | 11 | 15 => CmEventKind::Disconnected,
                1 | 3 | 6 | 7 => CmEventKind::Failed,
                n => CmEventKind::Other(n),
            };
            let pd = if e.conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    e.conn.private_data.cast::<u8>(),
                    e.conn.private_data_len as usize,
                )
                .to_vec()
            };
            CmEvent {
                kind,
                status: e.status,
                new_id: (kind == CmEventKind::ConnectRequest).then(|| CmId {
                    id: e.id,
                    qp: false,
                }),
                private_data: pd,
                responder_resources: e.conn.responder_resources,
                initiator_depth: e.conn.initiator_depth,
            }
        };
        // SAFETY: acknowledged once, after everything was copied out.
        unsafe { (api.rdma_ack_cm_event)(ev) };
        Some(out)
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: the channel is live.
        unsafe { (*self.ch).fd }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: every id on it was destroyed or migrated first.
            unsafe { (api.rdma_destroy_event_channel)(self.ch) };
        }
    }
}

/// An rdma_cm connection id (and its queue pair, once created).
pub(crate) struct CmId {
    id: *mut RdmaCmId,
    qp: bool,
}

// SAFETY: librdmacm's id calls are thread-safe; the pointer is owned.
unsafe impl Send for CmId {}
// SAFETY: posting through the id's QP is thread-safe in the providers.
unsafe impl Sync for CmId {}

fn sockaddr(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

fn parse_sockaddr(b: &[u8; 128]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([b[0], b[1]]);
    let port = u16::from_be_bytes([b[2], b[3]]);
    if family == libc::AF_INET as u16 {
        let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
    } else if family == libc::AF_INET6 as u16 {
        let mut o = [0u8; 16];
        o.copy_from_slice(&b[8..24]);
        Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(o),
            port,
            0,
            0,
        )))
    } else {
        None
    }
}

/// Work request opcodes (`enum ibv_wr_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opcode {
    Write,
    Send,
    Read,
    SendInv(u32),
}

/// One local buffer piece of a work request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) lkey: u32,
}

/// A send-queue work request, signaled.
pub(crate) struct SendDesc<'a> {
    pub(crate) wr_id: u64,
    pub(crate) opcode: Opcode,
    pub(crate) sges: &'a [Sge],
    pub(crate) solicited: bool,
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
}

impl CmId {
    pub(crate) fn new(ch: &EventChannel) -> Result<CmId, String> {
        let api = api()?;
        let mut id = null_mut();
        // SAFETY: the channel is live; the out-pointer is valid.
        let r = unsafe { (api.rdma_create_id)(ch.ch, &mut id, null_mut(), RDMA_PS_TCP) };
        if r != 0 {
            return Err(format!("rdma_create_id: errno {}", errno()));
        }
        Ok(CmId { id, qp: false })
    }

    fn check(r: c_int, what: &str) -> Result<(), (i32, String)> {
        if r == 0 {
            Ok(())
        } else {
            let e = errno();
            Err((
                e,
                format!("{what}: {}", std::io::Error::from_raw_os_error(e)),
            ))
        }
    }

    pub(crate) fn bind(&self, addr: &SocketAddr) -> Result<(), (i32, String)> {
        let api = api().map_err(|e| (0, e))?;
        let ss = sockaddr(addr);
        // SAFETY: the id is live; `ss` is a valid sockaddr for the call.
        Self::check(
            unsafe { (api.rdma_bind_addr)(self.id, (&ss as *const libc::sockaddr_storage).cast()) },
            "rdma_bind_addr",
        )
    }

    pub(crate) fn listen(&self, backlog: i32) -> Result<(), (i32, String)> {
        let api = api().map_err(|e| (0, e))?;
        // SAFETY: the id is live and bound.
        Self::check(
            unsafe { (api.rdma_listen)(self.id, backlog) },
            "rdma_listen",
        )
    }

    pub(crate) fn resolve_addr(&self, dst: &SocketAddr, ms: i32) -> Result<(), (i32, String)> {
        let api = api().map_err(|e| (0, e))?;
        let ss = sockaddr(dst);
        // SAFETY: the id is live; no source address; `ss` is valid.
        Self::check(
            unsafe {
                (api.rdma_resolve_addr)(
                    self.id,
                    null(),
                    (&ss as *const libc::sockaddr_storage).cast(),
                    ms,
                )
            },
            "rdma_resolve_addr",
        )
    }

    pub(crate) fn resolve_route(&self, ms: i32) -> Result<(), (i32, String)> {
        let api = api().map_err(|e| (0, e))?;
        // SAFETY: the id is live with its address resolved.
        Self::check(
            unsafe { (api.rdma_resolve_route)(self.id, ms) },
            "rdma_resolve_route",
        )
    }

    /// Whether the id is bound to `ctx`'s device (after bind or resolve).
    pub(crate) fn on(&self, ctx: Context) -> bool {
        // SAFETY: the id is live; `verbs` is set by bind/resolve.
        ctx.same(unsafe { (*self.id).verbs })
    }

    /// The name of the device the id is bound to, if any (a specific
    /// local address owned by an RDMA device's netdev or GID).
    pub(crate) fn device_name(&self) -> Option<String> {
        // SAFETY: the id is live; `verbs`, when set, is an open context.
        let ctx = unsafe { (*self.id).verbs };
        if ctx.is_null() {
            return None;
        }
        // SAFETY: an open context points at its device.
        Some(device_name(unsafe { (*ctx).device }))
    }

    /// The local address the id is bound to (its port, once listening).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; route.addr.src is a sockaddr_storage.
        parse_sockaddr(unsafe { &(*self.id).src })
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; route.addr.dst is a sockaddr_storage.
        parse_sockaddr(unsafe { &(*self.id).dst })
    }

    pub(crate) fn migrate(&self, ch: &EventChannel) -> Result<(), (i32, String)> {
        let api = api().map_err(|e| (0, e))?;
        // SAFETY: the id and channel are live; no event of the id is held.
        Self::check(
            unsafe { (api.rdma_migrate_id)(self.id, ch.ch) },
            "rdma_migrate_id",
        )
    }

    /// Creates the id's RC queue pair on `pd`, both queues on `cq`.
    pub(crate) fn create_qp(
        &mut self,
        pd: &Pd,
        cq: &Cq,
        send_wr: u32,
        recv_wr: u32,
        send_sge: u32,
    ) -> Result<u32, String> {
        let api = api()?;
        let mut attr = IbvQpInitAttr {
            qp_context: null_mut(),
            send_cq: cq.cq,
            recv_cq: cq.cq,
            srq: null_mut(),
            cap: IbvQpCap {
                max_send_wr: send_wr,
                max_recv_wr: recv_wr,
                max_send_sge: send_sge,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: id, pd and cq are live and of the same device.
        let r = unsafe { (api.rdma_create_qp)(self.id, pd.pd, &mut attr) };
        if r != 0 {
            return Err(format!(
                "rdma_create_qp: {}",
                std::io::Error::from_raw_os_error(errno())
            ));
        }
        self.qp = true;
        // SAFETY: rdma_create_qp set the id's qp.
        Ok(unsafe { (*(*self.id).qp).qp_num })
    }

    fn conn_param(private_data: &[u8], ird: u8, ord: u8) -> RdmaConnParam {
        RdmaConnParam {
            private_data: if private_data.is_empty() {
                null()
            } else {
                private_data.as_ptr().cast()
            },
            private_data_len: private_data.len().min(255) as u8,
            responder_resources: ird,
            initiator_depth: ord,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }

    pub(crate) fn connect(&self, private_data: &[u8], ird: u8, ord: u8) -> Result<(), String> {
        let api = api()?;
        let mut p = Self::conn_param(private_data, ird, ord);
        // SAFETY: the id is live with a QP; `p` points at `private_data`,
        // which outlives the call (librdmacm copies it).
        Self::check(
            unsafe { (api.rdma_connect)(self.id, &mut p) },
            "rdma_connect",
        )
        .map_err(|e| e.1)
    }

    pub(crate) fn accept(&self, private_data: &[u8], ird: u8, ord: u8) -> Result<(), String> {
        let api = api()?;
        let mut p = Self::conn_param(private_data, ird, ord);
        // SAFETY: as for connect.
        Self::check(unsafe { (api.rdma_accept)(self.id, &mut p) }, "rdma_accept").map_err(|e| e.1)
    }

    pub(crate) fn reject(&self, private_data: &[u8]) -> Result<(), String> {
        let api = api()?;
        let len = private_data.len().min(255);
        let ptr = if len == 0 {
            null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: the id is a pending request; the data outlives the call.
        Self::check(
            unsafe { (api.rdma_reject)(self.id, ptr, len as u8) },
            "rdma_reject",
        )
        .map_err(|e| e.1)
    }

    pub(crate) fn disconnect(&self) {
        if let Ok(api) = api() {
            // SAFETY: the id is live; disconnecting twice only fails.
            unsafe { (api.rdma_disconnect)(self.id) };
        }
    }

    fn qp_ptr(&self) -> Option<*mut IbvQp> {
        if !self.qp {
            return None;
        }
        // SAFETY: the id is live and its QP was created.
        let qp = unsafe { (*self.id).qp };
        (!qp.is_null()).then_some(qp)
    }

    /// Posts one signaled send-queue work request. `Err` is the provider's
    /// error number (ENOMEM: queue full).
    pub(crate) fn post_send(&self, d: &SendDesc<'_>) -> Result<(), i32> {
        let qp = self.qp_ptr().ok_or(libc::EINVAL)?;
        let mut sges: Vec<IbvSge> = d
            .sges
            .iter()
            .map(|s| IbvSge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            })
            .collect();
        let (opcode, inv) = match d.opcode {
            Opcode::Write => (0, 0),
            Opcode::Send => (2, 0),
            Opcode::Read => (4, 0),
            Opcode::SendInv(rkey) => (9, rkey),
        };
        let mut wr = IbvSendWr {
            wr_id: d.wr_id,
            next: null_mut(),
            sg_list: if sges.is_empty() {
                null_mut()
            } else {
                sges.as_mut_ptr()
            },
            num_sge: sges.len() as c_int,
            opcode,
            send_flags: 2 | if d.solicited { 4 } else { 0 },
            invalidate_rkey: inv,
            remote_addr: d.remote_addr,
            // A Send With Invalidate also names its STag in `wr.rdma.rkey`:
            // providers ignore the field for Sends, and the siw user
            // provider reads the STag to invalidate from there.
            rkey: if inv != 0 { inv } else { d.rkey },
            _wr_rest: [0; 5],
            _qp_type: [0; 2],
            _tail: [0; 6],
        };
        let mut bad = null_mut();
        // SAFETY: the op table's post_send, as the inline ibv_post_send; the
        // work request and its SGE list live across the call (the provider
        // copies them into its queue).
        let r = unsafe {
            let f: PostSendFn = std::mem::transmute((*(*qp).context).ops[OPS_POST_SEND]);
            f(qp, &mut wr, &mut bad)
        };
        if r != 0 {
            return Err(r);
        }
        Ok(())
    }

    /// Posts one receive of `sge`.
    pub(crate) fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), i32> {
        let qp = self.qp_ptr().ok_or(libc::EINVAL)?;
        let mut s = IbvSge {
            addr: sge.addr,
            length: sge.len,
            lkey: sge.lkey,
        };
        let mut wr = IbvRecvWr {
            wr_id,
            next: null_mut(),
            sg_list: &mut s,
            num_sge: 1,
        };
        let mut bad = null_mut();
        // SAFETY: the op table's post_recv, as the inline ibv_post_recv.
        let r = unsafe {
            let f: PostRecvFn = std::mem::transmute((*(*qp).context).ops[OPS_POST_RECV]);
            f(qp, &mut wr, &mut bad)
        };
        if r != 0 {
            return Err(r);
        }
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            // SAFETY: the QP (if any) then the id are destroyed once; every
            // event of the id was acknowledged when it was read.
            unsafe {
                if self.qp {
                    (api.rdma_destroy_qp)(self.id);
                }
                (api.rdma_destroy_id)(self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_match_rdma_core() {
        assert_eq!(std::mem::size_of::<IbvSendWr>(), 128);
        assert_eq!(std::mem::size_of::<IbvWc>(), 48);
        assert_eq!(std::mem::size_of::<IbvSge>(), 16);
        assert_eq!(std::mem::size_of::<IbvRecvWr>(), 32);
        assert_eq!(std::mem::size_of::<RdmaConnParam>(), 24);
        assert_eq!(std::mem::offset_of!(RdmaCmEvent, conn), 24);
        assert_eq!(std::mem::offset_of!(RdmaCmId, src), 32);
        assert_eq!(std::mem::offset_of!(RdmaCmId, dst), 160);
        assert_eq!(std::mem::offset_of!(IbvQpInitAttr, cap), 32);
        assert_eq!(std::mem::size_of::<IbvQpInitAttr>(), 64);
        assert_eq!(std::mem::offset_of!(IbvDeviceAttr, max_mr_size), 80);
        assert_eq!(std::mem::offset_of!(IbvPortAttr, link_layer), 46);
        assert_eq!(std::mem::offset_of!(IbvQp, qp_num), 52);
        assert_eq!(std::mem::offset_of!(IbvMr, lkey), 36);
        assert_eq!(std::mem::offset_of!(IbvDevice, name), 24);
        assert_eq!(std::mem::offset_of!(IbvContext, ops), 8);
    }

    #[test]
    fn socket_addresses_round_trip_through_sockaddr() {
        for a in ["10.0.2.15:20049", "[fe80::1]:2049"] {
            let a: SocketAddr = a.parse().unwrap();
            let ss = sockaddr(&a);
            // SAFETY: reading the storage as bytes.
            let bytes: [u8; 128] = unsafe { std::mem::transmute(ss) };
            assert_eq!(parse_sockaddr(&bytes), Some(a));
        }
    }
}
