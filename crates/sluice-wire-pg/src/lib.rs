//! PostgreSQL wire protocol for Sluice, without any IO.
//!
//! This crate sits at the bottom of the flow: the frontend (client side) and backend
//! (server side) modules of the `sluice` crate read bytes from sockets and hand them to
//! the frame reader here, look at messages through the lazy views in [`msg`], build the
//! few messages Sluice sends itself with [`encode`], follow the response stream of a
//! server connection with [`track`], and check client passwords with [`scram`] and
//! [`md5`]. Frames stay `Bytes`/byte slices: nothing is parsed that routing and pooling
//! do not need.

pub mod encode;
pub mod frame;
pub mod md5;
pub mod msg;
pub mod scram;
pub mod track;

pub use frame::{FrameError, Header, Item, Scanner};
