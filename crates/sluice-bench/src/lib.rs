//! sluice-bench: Sluice's load generator and side-by-side benchmark runner.
//!
//! - [`spec`]: one run of one scenario against one address ([`spec::RunSpec`]);
//! - [`scenario`]: what the connections send (SQL over PostgreSQL or MySQL, simple or
//!   prepared; HandlerSocket lookups), closed or open loop;
//! - [`compare`]: a benchmark file's targets run in alternation, with the proxies'
//!   CPU time and memory read from /proc, and the connection-scale measurement; or a
//!   failover under load, round after round (`[failover]`);
//! - [`results`] and [`report`]: the JSON document and its markdown and SVG rendering.

pub mod compare;
pub mod relay;
pub mod report;
pub mod results;
pub mod scenario;
pub mod spec;
pub mod stats;
