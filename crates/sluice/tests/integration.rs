//! Sluice's integration tests, one module per file beside this one, built as one test
//! binary (one link instead of one per file: the workspace's test build is most of CI's
//! compile time). Each test still runs in a process of its own under cargo-nextest; a
//! file's tests are `FILE::name` (e.g. `cargo nextest run -p sluice -E 'test(/^pg_routes::/)'`
//! or `cargo test -p sluice --test integration pg_routes::`).

mod common;

mod admin_http;
mod admin_my;
mod admin_pg;
mod admin_reload;
mod bench;
mod busy_poll;
mod cli;
mod dashboard;
mod digests;
mod firewall;
mod hs_conformance;
mod hs_kv;
mod hs_kv_pg;
mod hs_portable;
mod lazy_session;
mod my_auth;
mod my_auth_query;
mod my_bad_input;
mod my_bulk;
mod my_change_user;
mod my_compat;
mod my_compress;
mod my_routes;
mod my_rules;
mod my_server_budget;
mod my_session;
mod my_timeouts;
mod my_tools;
mod my_transaction;
mod pg_auth_query;
mod pg_bad_input;
mod pg_compat;
mod pg_patroni;
mod pg_pids;
mod pg_pooling_edges;
mod pg_routes;
mod pg_rules;
mod pg_server_auth;
mod pg_server_budget;
mod pg_session;
mod pg_timeouts;
mod pg_tls_shutdown;
mod pg_tools;
mod pg_transaction;
mod restart;
mod routes_outlive;
mod routes_retry;
mod rules_mirror;
mod rules_tables;
