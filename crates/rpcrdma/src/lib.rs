//! RPC-over-RDMA versions 1 (RFC 8166, RFC 8167, RFC 8797) and 2: transport headers, chunks, credits and transports over any rnic device.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
