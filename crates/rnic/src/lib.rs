//! The verbs model of an RDMA NIC: STags, protection domains, memory regions, queue pairs, completions, and an in-memory loopback device.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
