//! Embeddable NFS client library over any ONC RPC transport (TCP or RPC-over-RDMA).
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
