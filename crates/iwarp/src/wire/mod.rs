//! Wire views of the iWARP protocols, smoltcp style: a `Packet<T>` view with
//! `new_checked`/`check_len` and getters/setters over `field::` ranges, and a
//! `Repr` with `parse`/`emit`/`buffer_len`. After `check_len` succeeds no
//! accessor panics; `parse` never panics on any input.

pub mod ddp;
pub mod fpdu;
pub mod mpa;
pub mod rdmap;
pub mod terminate;

pub use ddp::{Buffer as DdpBuffer, DdpError, Packet as DdpPacket, Repr as DdpRepr};
pub use fpdu::{Crc, FpduError, Packet as FpduPacket, Repr as FpduRepr};
pub use mpa::{FrameKind, IrdOrd, MpaError, Packet as MpaPacket, Repr as MpaRepr};
pub use rdmap::{Opcode, ReadRequest, ReadRequestError};
pub use terminate::{Layer, Repr as TerminateRepr, TermError, TerminateError};
