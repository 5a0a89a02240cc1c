//! The server's state directory: the secret that keys file handles and
//! the persistent handle index of each export.
//!
//! `nfsrdma serve --state-dir DIR` names it; the default is
//! `/var/lib/nfsrdma` when the server runs as root and can create it,
//! else `$XDG_STATE_HOME/nfsrdma` (or `~/.local/state/nfsrdma`). The
//! directory is created mode 0700 and the secret file `handle-key` mode
//! 0600 with 32 bytes from the operating system's random source
//! (`getrandom`). Handles minted by a server stay valid across restarts
//! with the same state directory; a server given another state directory
//! refuses them (NFS3ERR_BADHANDLE: their MAC does not check).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Length of the handle key.
pub const KEY_LEN: usize = 32;

/// Name of the secret file in the state directory.
const KEY_FILE: &str = "handle-key";

/// An opened state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// Opens `path`, creating it (and missing parents) mode 0700. An
    /// existing directory readable or writable by others is refused: it
    /// holds the secret that makes handles unforgeable.
    pub fn open(path: impl Into<PathBuf>) -> io::Result<Self> {
        let path = path.into();
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)?;
        let meta = fs::symlink_metadata(&path)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("state dir {} is not a directory", path.display()),
            ));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self { path })
    }

    /// The default location: `/var/lib/nfsrdma` for root when it can be
    /// created, else `$XDG_STATE_HOME/nfsrdma`, else
    /// `$HOME/.local/state/nfsrdma`, else a directory under the system's
    /// temporary directory named for the user id.
    pub fn default_path() -> PathBuf {
        let uid = rustix::process::getuid();
        if uid.is_root()
            && DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create("/var/lib/nfsrdma")
                .is_ok()
        {
            return PathBuf::from("/var/lib/nfsrdma");
        }
        if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
            return PathBuf::from(x).join("nfsrdma");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
            return PathBuf::from(h).join(".local/state/nfsrdma");
        }
        std::env::temp_dir().join(format!("nfsrdma-state-{}", uid.as_raw()))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The handle key: read from `handle-key`, or made and written there
    /// (mode 0600) on first use.
    pub fn handle_key(&self) -> io::Result<[u8; KEY_LEN]> {
        let p = self.path.join(KEY_FILE);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
        {
            Ok(mut f) => {
                let key = random_key()?;
                f.write_all(&key)?;
                f.sync_all()?;
                File::open(&self.path)?.sync_all()?;
                Ok(key)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_key(&p),
            Err(e) => Err(e),
        }
    }

    /// Where the handle index of export `export_id` lives.
    pub(crate) fn index_path(&self, export_id: u64) -> PathBuf {
        self.path.join(format!("index-{export_id:016x}.redb"))
    }
}

fn read_key(p: &Path) -> io::Result<[u8; KEY_LEN]> {
    let mut f = File::open(p)?;
    if f.metadata()?.permissions().mode() & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    let mut key = [0u8; KEY_LEN];
    let mut extra = [0u8; 1];
    f.read_exact(&mut key)?;
    if f.read(&mut extra)? != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a {KEY_LEN}-byte key", p.display()),
        ));
    }
    Ok(key)
}

/// Replaces file `path` in directory `dir` with `bytes` durably: written
/// to a temporary file (mode 0600) that is `fsync`ed and renamed over
/// `path`, then `dir` is `fsync`ed, so after a crash the file holds the
/// old bytes or the new ones, never a part.
pub(crate) fn write_durably(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// Removes file `path` from directory `dir` durably (`dir` is `fsync`ed);
/// a file that is not there is fine.
pub(crate) fn remove_durably(dir: &Path, path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => File::open(dir)?.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The number written in file `path` by an earlier run: 0 when there is
/// no file or it does not parse.
pub(crate) fn read_counter<T: std::str::FromStr + Default>(path: &Path) -> io::Result<T> {
    match fs::read_to_string(path) {
        Ok(s) => Ok(s.trim().parse().unwrap_or_default()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(e),
    }
}

/// A fresh random key for a server without a state directory.
pub(crate) fn random_key() -> io::Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| io::Error::other(format!("getrandom: {e}")))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_is_made_once_with_private_modes_and_kept() {
        let base = std::env::temp_dir().join(format!("statedir-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let sd = StateDir::open(base.join("a/b")).unwrap();
        let k1 = sd.handle_key().unwrap();
        let k2 = StateDir::open(base.join("a/b"))
            .unwrap()
            .handle_key()
            .unwrap();
        assert_eq!(k1, k2);
        assert_ne!(k1, [0u8; KEY_LEN]);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(sd.path()), 0o700);
        assert_eq!(mode(&sd.path().join(KEY_FILE)), 0o600);
        fs::write(sd.path().join(KEY_FILE), b"short").unwrap();
        assert!(sd.handle_key().is_err());
        let _ = fs::remove_dir_all(&base);
    }
}
