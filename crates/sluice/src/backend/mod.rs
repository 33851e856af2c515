//! The server side of each protocol: log in to a server, forward frames, reset a
//! connection before another client gets it. Below the pool in the flow; knows nothing
//! of clients.

pub mod pg;
