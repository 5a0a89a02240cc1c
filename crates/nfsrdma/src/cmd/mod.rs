//! One module per subcommand.

pub(crate) mod bench;
pub(crate) mod cat;
pub(crate) mod config;
pub(crate) mod cp;
pub(crate) mod dataserver;
pub(crate) mod dump;
pub(crate) mod echo;
pub(crate) mod ls;
pub(crate) mod man;
pub(crate) mod metrics;
pub(crate) mod mount;
pub(crate) mod serve;
pub(crate) mod stat;
