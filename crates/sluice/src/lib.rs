//! Sluice: a SQL proxy for PostgreSQL and MySQL/MariaDB, with pooling and routing.
//!
//! The flow, top to bottom: [`listener`] accepts clients and picks the protocol;
//! [`frontend`] speaks the client side of it (startup, TLS, auth, requests); [`session`]
//! keeps the per-client state ledger and decides how long a server connection is held;
//! [`router`] picks the server (a pure function of the listener's route and the
//! [`topology`], which the health checker keeps); [`pool`] leases server connections;
//! [`backend`] speaks the server side. Answers go straight back to the client, or, for
//! statements pipelined on a shared connection, through [`mux`]. HandlerSocket listeners
//! (`frontend::hs`) hand their requests to [`kv`], which runs them as grouped SQL.

pub mod admin;
pub mod backend;
pub mod cancel;
pub mod control;
pub mod error;
pub mod firewall;
pub mod frontend;
pub mod hs_secret;
pub mod intern;
pub mod kv;
pub mod limits;
pub mod listener;
pub mod mux;
pub mod pool;
pub mod reload;
pub mod router;
pub mod rules;
pub mod running;
pub mod server;
pub mod session;
pub mod sets;
pub mod shared;
pub mod stats;
pub mod stmt_cache;
pub mod stream;
pub mod tls;
pub mod topology;
