//! NFS server: NFSv3 and MOUNT dispatch, the NFSv4.1/4.2 COMPOUND engine, and a local-directory storage back end.
//!
//! This layer is not built yet: the crate is a placeholder in the workspace
//! layout of DESIGN.md and exports nothing.
