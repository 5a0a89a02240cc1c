//! NFSv3, MOUNT and NFSv4.1/4.2 protocol types and the NFS upper-layer bindings for RPC-over-RDMA (RFC 8267). No IO.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
