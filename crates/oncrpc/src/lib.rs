//! ONC RPC (RFC 5531): messages, authentication flavors, record marking, sans-IO client and server cores, and a TCP transport.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
