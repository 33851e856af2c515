//! The client side of each protocol: startup, TLS, authentication, reading whole
//! requests and relaying answers. Everything below (session, router, pool) is shared.

pub mod pg;
