//! The default software RDMA device: the iwarp protocol driven over TCP sockets, interoperable with Linux siw.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
