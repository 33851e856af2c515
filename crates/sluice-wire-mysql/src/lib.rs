//! MySQL / MariaDB client/server protocol for Sluice, without any IO.
//!
//! This crate sits at the bottom of the flow, beside `sluice-wire-pg`: the MySQL
//! frontend (client side) and backend (server side) of the `sluice` crate read bytes
//! from sockets and find packet boundaries with [`packet`], read fields with [`codec`],
//! run the connection phase with [`handshake`] and [`auth`], look at OK / ERR / EOF
//! packets through [`resp`], and follow a server connection's response stream with
//! [`track`] to know where each command's answer ends and what transaction state it
//! leaves; [`compress`] is the compressed protocol's layer below the packets. Packets
//! stay byte slices: nothing is parsed that routing and pooling do not
//! need.

pub mod auth;
pub mod codec;
pub mod compress;
pub mod consts;
pub mod handshake;
pub mod packet;
pub mod resp;
pub mod track;

#[cfg(test)]
mod testdata;

pub use packet::{Logical, PacketError, Reassembler};
pub use track::{Desync, Step, Tracker};
