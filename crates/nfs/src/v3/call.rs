//! Procedure numbers and a decoder of any procedure's arguments.

use xdr::{Decoder, Encode, Encoder};

use super::{
    Access3Args, Commit3Args, Create3Args, Fsroot3Args, Getattr3Args, Link3Args, Lookup3Args,
    Mkdir3Args, Mknod3Args, Read3Args, Readdir3Args, Readdirplus3Args, Readlink3Args, Remove3Args,
    Rename3Args, Setattr3Args, Symlink3Args, Write3Args,
};

xdr::open_code! {
    /// NFSv3 procedure numbers (RFC 1813 §3.3).
    pub struct Nfsproc3 {
        /// §3.3.0
        NULL = 0,
        /// §3.3.1
        GETATTR = 1,
        /// §3.3.2
        SETATTR = 2,
        /// §3.3.3
        LOOKUP = 3,
        /// §3.3.4
        ACCESS = 4,
        /// §3.3.5
        READLINK = 5,
        /// §3.3.6
        READ = 6,
        /// §3.3.7
        WRITE = 7,
        /// §3.3.8
        CREATE = 8,
        /// §3.3.9
        MKDIR = 9,
        /// §3.3.10
        SYMLINK = 10,
        /// §3.3.11
        MKNOD = 11,
        /// §3.3.12
        REMOVE = 12,
        /// §3.3.13
        RMDIR = 13,
        /// §3.3.14
        RENAME = 14,
        /// §3.3.15
        LINK = 15,
        /// §3.3.16
        READDIR = 16,
        /// §3.3.17
        READDIRPLUS = 17,
        /// §3.3.18
        FSSTAT = 18,
        /// §3.3.19
        FSINFO = 19,
        /// §3.3.20
        PATHCONF = 20,
        /// §3.3.21
        COMMIT = 21,
    }
}

/// Why a call's arguments could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// The procedure number is not one of the 22 (PROC_UNAVAIL).
    #[error("no NFSv3 procedure {0}")]
    UnknownProcedure(u32),
    /// The arguments are malformed (GARBAGE_ARGS).
    #[error("malformed {proc} arguments: {source}")]
    Garbage {
        /// The procedure.
        proc: Nfsproc3,
        /// The decode failure.
        source: xdr::Error,
    },
}

/// The arguments of any NFSv3 call, by procedure (RFC 1813 §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args3 {
    /// NULL (void).
    Null,
    /// GETATTR.
    Getattr(Getattr3Args),
    /// SETATTR.
    Setattr(Setattr3Args),
    /// LOOKUP.
    Lookup(Lookup3Args),
    /// ACCESS.
    Access(Access3Args),
    /// READLINK.
    Readlink(Readlink3Args),
    /// READ.
    Read(Read3Args),
    /// WRITE.
    Write(Write3Args),
    /// CREATE.
    Create(Create3Args),
    /// MKDIR.
    Mkdir(Mkdir3Args),
    /// SYMLINK.
    Symlink(Symlink3Args),
    /// MKNOD.
    Mknod(Mknod3Args),
    /// REMOVE.
    Remove(Remove3Args),
    /// RMDIR (same body as REMOVE).
    Rmdir(Remove3Args),
    /// RENAME.
    Rename(Rename3Args),
    /// LINK.
    Link(Link3Args),
    /// READDIR.
    Readdir(Readdir3Args),
    /// READDIRPLUS.
    Readdirplus(Readdirplus3Args),
    /// FSSTAT.
    Fsstat(Fsroot3Args),
    /// FSINFO.
    Fsinfo(Fsroot3Args),
    /// PATHCONF.
    Pathconf(Fsroot3Args),
    /// COMMIT.
    Commit(Commit3Args),
}

impl Args3 {
    /// Decodes the arguments of procedure `proc` from `input`, which must
    /// hold exactly them (trailing bytes are an error; a server that
    /// tolerates them uses [`Args3::decode_from`]). Bulk data is copied; use [`Args3::decode_from`]
    /// with a [`Decoder::from_bytes`] decoder for zero-copy WRITE data.
    pub fn decode(proc: Nfsproc3, input: &[u8]) -> Result<Self, ArgsError> {
        let mut dec = Decoder::new(input);
        let args = Self::decode_from(proc, &mut dec)?;
        dec.finish()
            .map_err(|source| ArgsError::Garbage { proc, source })?;
        Ok(args)
    }

    /// Decodes the arguments of procedure `proc` from `dec`, leaving any
    /// bytes after them unread.
    pub fn decode_from(proc: Nfsproc3, dec: &mut Decoder<'_>) -> Result<Self, ArgsError> {
        let g = |source| ArgsError::Garbage { proc, source };
        Ok(match proc {
            Nfsproc3::NULL => Args3::Null,
            Nfsproc3::GETATTR => Args3::Getattr(dec.decode().map_err(g)?),
            Nfsproc3::SETATTR => Args3::Setattr(dec.decode().map_err(g)?),
            Nfsproc3::LOOKUP => Args3::Lookup(dec.decode().map_err(g)?),
            Nfsproc3::ACCESS => Args3::Access(dec.decode().map_err(g)?),
            Nfsproc3::READLINK => Args3::Readlink(dec.decode().map_err(g)?),
            Nfsproc3::READ => Args3::Read(dec.decode().map_err(g)?),
            Nfsproc3::WRITE => Args3::Write(dec.decode().map_err(g)?),
            Nfsproc3::CREATE => Args3::Create(dec.decode().map_err(g)?),
            Nfsproc3::MKDIR => Args3::Mkdir(dec.decode().map_err(g)?),
            Nfsproc3::SYMLINK => Args3::Symlink(dec.decode().map_err(g)?),
            Nfsproc3::MKNOD => Args3::Mknod(dec.decode().map_err(g)?),
            Nfsproc3::REMOVE => Args3::Remove(dec.decode().map_err(g)?),
            Nfsproc3::RMDIR => Args3::Rmdir(dec.decode().map_err(g)?),
            Nfsproc3::RENAME => Args3::Rename(dec.decode().map_err(g)?),
            Nfsproc3::LINK => Args3::Link(dec.decode().map_err(g)?),
            Nfsproc3::READDIR => Args3::Readdir(dec.decode().map_err(g)?),
            Nfsproc3::READDIRPLUS => Args3::Readdirplus(dec.decode().map_err(g)?),
            Nfsproc3::FSSTAT => Args3::Fsstat(dec.decode().map_err(g)?),
            Nfsproc3::FSINFO => Args3::Fsinfo(dec.decode().map_err(g)?),
            Nfsproc3::PATHCONF => Args3::Pathconf(dec.decode().map_err(g)?),
            Nfsproc3::COMMIT => Args3::Commit(dec.decode().map_err(g)?),
            other => return Err(ArgsError::UnknownProcedure(other.0)),
        })
    }

    /// The procedure these arguments belong to.
    pub fn procedure(&self) -> Nfsproc3 {
        match self {
            Args3::Null => Nfsproc3::NULL,
            Args3::Getattr(_) => Nfsproc3::GETATTR,
            Args3::Setattr(_) => Nfsproc3::SETATTR,
            Args3::Lookup(_) => Nfsproc3::LOOKUP,
            Args3::Access(_) => Nfsproc3::ACCESS,
            Args3::Readlink(_) => Nfsproc3::READLINK,
            Args3::Read(_) => Nfsproc3::READ,
            Args3::Write(_) => Nfsproc3::WRITE,
            Args3::Create(_) => Nfsproc3::CREATE,
            Args3::Mkdir(_) => Nfsproc3::MKDIR,
            Args3::Symlink(_) => Nfsproc3::SYMLINK,
            Args3::Mknod(_) => Nfsproc3::MKNOD,
            Args3::Remove(_) => Nfsproc3::REMOVE,
            Args3::Rmdir(_) => Nfsproc3::RMDIR,
            Args3::Rename(_) => Nfsproc3::RENAME,
            Args3::Link(_) => Nfsproc3::LINK,
            Args3::Readdir(_) => Nfsproc3::READDIR,
            Args3::Readdirplus(_) => Nfsproc3::READDIRPLUS,
            Args3::Fsstat(_) => Nfsproc3::FSSTAT,
            Args3::Fsinfo(_) => Nfsproc3::FSINFO,
            Args3::Pathconf(_) => Nfsproc3::PATHCONF,
            Args3::Commit(_) => Nfsproc3::COMMIT,
        }
    }
}

/// Encodes the arguments alone (no procedure number): what a client puts
/// after the RPC call header (RFC 1813 §3.3).
impl Encode for Args3 {
    fn encode<E: Encoder + ?Sized>(&self, enc: &mut E) {
        match self {
            Args3::Null => {}
            Args3::Getattr(a) => a.encode(enc),
            Args3::Setattr(a) => a.encode(enc),
            Args3::Lookup(a) => a.encode(enc),
            Args3::Access(a) => a.encode(enc),
            Args3::Readlink(a) => a.encode(enc),
            Args3::Read(a) => a.encode(enc),
            Args3::Write(a) => a.encode(enc),
            Args3::Create(a) => a.encode(enc),
            Args3::Mkdir(a) => a.encode(enc),
            Args3::Symlink(a) => a.encode(enc),
            Args3::Mknod(a) => a.encode(enc),
            Args3::Remove(a) | Args3::Rmdir(a) => a.encode(enc),
            Args3::Rename(a) => a.encode(enc),
            Args3::Link(a) => a.encode(enc),
            Args3::Readdir(a) => a.encode(enc),
            Args3::Readdirplus(a) => a.encode(enc),
            Args3::Fsstat(a) | Args3::Fsinfo(a) | Args3::Pathconf(a) => a.encode(enc),
            Args3::Commit(a) => a.encode(enc),
        }
    }
}
