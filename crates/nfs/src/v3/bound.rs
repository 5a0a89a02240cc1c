//! The largest reply an NFSv3 call can get, known from its arguments
//! before it runs, so a transport that budgets reply memory need not
//! reserve the largest READ for every call in flight.

use xdr::Decoder;

use super::{Nfsproc3, Read3Args, Readdir3Args, Readdirplus3Args, NFS3_MAXPATHLEN};

/// Bytes that bound every reply of the procedures without a variable
/// part: the largest are CREATE/MKDIR/SYMLINK/MKNOD (status, `post_op_fh3`
/// of 72, `post_op_attr` of 88, `wcc_data` of 116 bytes) and RENAME (two
/// `wcc_data`), all under 300 bytes (RFC 1813 §3.3).
const FIXED_REPLY: usize = 1024;

/// READ3resok beside its data (RFC 1813 §3.3.6): status, `post_op_attr`
/// (88), count, eof and the data's length word.
const READ_OVERHEAD: usize = 4 + 88 + 4 + 4 + 4;

/// Room for the status and attributes of a READDIR/READDIRPLUS reply
/// beyond the entries, in case a server fills `count` with entries alone.
const READDIR_SLACK: usize = 512;

/// The most bytes the results of `proc` can take (RPC header excluded),
/// from its encoded `args`: READ its `count` and header, READDIR its
/// `count`, READDIRPLUS its `maxcount` (RFC 1813 §3.3.16, §3.3.17: the
/// reply fits them), READLINK a longest path, the rest a fixed small size.
/// `None` for an unknown procedure; arguments that do not decode get a
/// GARBAGE_ARGS reply, which is small.
pub fn reply_size_bound(proc_: Nfsproc3, args: &[u8]) -> Option<usize> {
    let mut dec = Decoder::new(args);
    let n = match proc_ {
        Nfsproc3::READ => dec
            .decode::<Read3Args>()
            .map(|a| READ_OVERHEAD + pad4(a.count as usize)),
        Nfsproc3::READDIR => dec
            .decode::<Readdir3Args>()
            .map(|a| READDIR_SLACK + a.count as usize),
        Nfsproc3::READDIRPLUS => dec
            .decode::<Readdirplus3Args>()
            .map(|a| READDIR_SLACK + a.maxcount as usize),
        Nfsproc3::READLINK => Ok(FIXED_REPLY + NFS3_MAXPATHLEN),
        p if p.0 <= Nfsproc3::COMMIT.0 => Ok(FIXED_REPLY),
        _ => return None,
    };
    Some(n.unwrap_or(FIXED_REPLY))
}

fn pad4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v3::NfsFh3;
    use xdr::Encode;

    fn fh() -> NfsFh3 {
        NfsFh3::new(&[7; 32]).unwrap()
    }

    fn encoded<T: Encode>(v: &T) -> bytes::Bytes {
        xdr::to_bytes(v)
    }

    #[test]
    fn read_and_listing_replies_are_bounded_by_their_counts() {
        let read = Read3Args {
            file: fh(),
            offset: 1 << 20,
            count: 4097,
        };
        assert_eq!(
            reply_size_bound(Nfsproc3::READ, &encoded(&read)),
            Some(READ_OVERHEAD + 4100)
        );
        let rdp = Readdirplus3Args {
            dir: fh(),
            cookie: 0,
            cookieverf: xdr::FixedOpaque([0; 8]),
            dircount: 4096,
            maxcount: 32768,
        };
        assert_eq!(
            reply_size_bound(Nfsproc3::READDIRPLUS, &encoded(&rdp)),
            Some(READDIR_SLACK + 32768)
        );
    }

    #[test]
    fn other_procedures_are_small_and_unknown_ones_unbounded() {
        assert_eq!(reply_size_bound(Nfsproc3::GETATTR, &[]), Some(FIXED_REPLY));
        assert_eq!(
            reply_size_bound(Nfsproc3::READ, &[0, 0]),
            Some(FIXED_REPLY),
            "garbage arguments get a short error"
        );
        assert_eq!(
            reply_size_bound(Nfsproc3::READLINK, &[]),
            Some(FIXED_REPLY + NFS3_MAXPATHLEN)
        );
        assert_eq!(reply_size_bound(Nfsproc3(22), &[]), None);
    }
}
