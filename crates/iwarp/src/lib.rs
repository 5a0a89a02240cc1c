//! Sans-IO iWARP: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040) wire formats and state machines.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
