//! XDR (RFC 4506) encoding and decoding with a panic-free bounded reader and a gather buffer for DDP-eligible bulk data.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
