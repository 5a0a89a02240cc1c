//! Test support shared by the workspace's tests; a dev-dependency only, so
//! none of it ships in the libraries.
//!
//! - [`conformance`]: the RNIC behaviour tests, written once and run on every
//!   `rnic::Device` ([`conformance_suite!`] turns them into `#[test]`s);
//! - [`TempDir`]: a scratch directory removed on drop;
//! - [`hex`]: test vectors written as hex (from packet captures);
//! - [`tls`]: a CA and certificates for RPC-over-TLS tests;
//! - [`krb5`]: a throw-away Kerberos realm (MIT `krb5kdc`) for RPCSEC_GSS tests;
//! - [`ranges`]: an RPC service replying with byte ranges of a file, for the
//!   TCP and RPC-over-RDMA file-reply tests;
//! - [`rpc`]: raw ONC RPC call records, for tests that write a server's socket.

pub mod conformance;
pub mod krb5;
pub mod ranges;
pub mod rpc;
pub mod tls;

use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, its path
/// canonical (exports compare canonical paths), removed with everything in
/// it when dropped.
#[derive(Debug)]
pub struct TempDir {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl TempDir {
    /// A new directory whose name starts with `tag` (to tell tests apart
    /// in /tmp when one leaves something behind).
    pub fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("nfsrdma-test-{tag}-"))
            .tempdir()
            .expect("a temporary directory");
        let path = dir.path().canonicalize().expect("canonical temp dir");
        Self { dir, path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        let _ = &self.dir;
        &self.path
    }
}

/// The bytes of `s`, pairs of hex digits (whitespace ignored); panics on
/// anything else, as a test vector typo should.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.split_whitespace().collect();
    ::hex::decode(digits).expect("a hex test vector")
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_reads_vectors_with_whitespace() {
        assert_eq!(super::hex("80 00\n00 2a"), [0x80, 0, 0, 0x2a]);
    }

    #[test]
    fn temp_dir_goes_on_drop() {
        let d = super::TempDir::new("kit");
        let p = d.path().to_path_buf();
        std::fs::write(p.join("f"), b"x").unwrap();
        drop(d);
        assert!(!p.exists());
    }
}
