//! The in-memory index's storage: a byte vector behind a lock, as redb's
//! own `InMemoryBackend`, except that growing it is one `resize` (a
//! `memset`) where redb's pushes the new bytes one at a time. A new redb
//! database is over 1 MiB and its drop grows it again for the durable
//! commit of its allocator state, so with redb's backend every
//! [`LocalFs::new`](crate::LocalFs::new) and its drop cost millions of
//! pushes: most of the time of a fuzz input of `nfs_server_rpc`, which
//! makes a fresh export for each (docs/fuzzing.md).

use std::io;
use std::sync::RwLock;

use redb::StorageBackend;

/// Storage that lives as long as the database in it.
#[derive(Debug, Default)]
pub(super) struct Memory(RwLock<Vec<u8>>);

fn out_of_range() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "handle index memory: out of range",
    )
}

fn poisoned() -> io::Error {
    io::Error::other("handle index memory: lock poisoned")
}

/// The range `offset..offset + len` of a store of `have` bytes, if inside it.
fn range(offset: u64, len: usize, have: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(offset).map_err(|_| out_of_range())?;
    let end = start.checked_add(len).ok_or_else(out_of_range)?;
    if end > have {
        return Err(out_of_range());
    }
    Ok(start..end)
}

impl StorageBackend for Memory {
    fn len(&self) -> io::Result<u64> {
        let v = self.0.read().map_err(|_| poisoned())?;
        Ok(v.len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let v = self.0.read().map_err(|_| poisoned())?;
        Ok(v[range(offset, len, v.len())?].to_vec())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| out_of_range())?;
        let mut v = self.0.write().map_err(|_| poisoned())?;
        v.resize(len, 0);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut v = self.0.write().map_err(|_| poisoned())?;
        let r = range(offset, data.len(), v.len())?;
        v[r].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_zeroed_shrinks_and_refuses_outside() {
        let m = Memory::default();
        m.set_len(8).unwrap();
        m.write(2, b"abc").unwrap();
        assert_eq!(m.read(0, 8).unwrap(), b"\0\0abc\0\0\0");
        m.set_len(4).unwrap();
        assert_eq!(m.len().unwrap(), 4);
        m.set_len(6).unwrap();
        assert_eq!(
            m.read(0, 6).unwrap(),
            b"\0\0ab\0\0",
            "regrown bytes are zero"
        );
        assert!(m.read(5, 2).is_err());
        assert!(m.write(6, b"x").is_err());
        assert!(m.read(u64::MAX, 1).is_err());
        assert!(m.write(1, &[]).is_ok());
    }
}
