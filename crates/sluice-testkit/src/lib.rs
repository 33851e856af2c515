//! Throwaway real database servers for Sluice's integration tests, benchmarks
//! and demo. [`PgServer`] starts a private PostgreSQL cluster from the installed
//! binaries on a free port in a temporary directory (TLS with a throwaway CA,
//! chosen password authentication, fast-but-unsafe durability settings), offers
//! `psql` helpers, fault injection (`kill`, `restart`) and removes everything
//! on drop. When the tests run as root the servers run as the `postgres` OS user.
//!
//! ```no_run
//! use sluice_testkit::{PgAuth, PgOptions, PgServer};
//!
//! # fn main() -> anyhow::Result<()> {
//! let mut pg = PgServer::start_with(PgOptions { auth: PgAuth::Md5, ..PgOptions::default() })?;
//! pg.create_user("app", "app-pw")?;
//! pg.create_database("appdb", "app")?;
//! assert_eq!(pg.psql("appdb", "select 1")?.trim(), "1");
//! // connect a client to pg.host():pg.port() (TLS: trust pg.tls_ca_pem()) ...
//! pg.kill(); // crash it
//! pg.restart()?; // same port and data, after crash recovery
//! # Ok(()) }
//! ```
//!
//! A start takes about 0.1 s: the first server on a machine runs `initdb` once
//! into a template that later servers copy (see `SLUICE_TESTKIT_NO_TEMPLATE`).
//!
//! All functions block (they spawn processes and wait for them); from async
//! code call them before spawning tasks or through `spawn_blocking`.
//!
//! [`MariaDbServer`] does the same for MariaDB from the installed `mariadbd`,
//! `mariadb-install-db` and `mariadb` CLI: superuser `root` with a random
//! password over TCP, database `test`, TLS, binary log, `sql` / `create_user`
//! (`mysql_native_password` or `ed25519`) helpers, `kill` / `stop` / `restart`:
//!
//! ```no_run
//! use sluice_testkit::MariaDbServer;
//!
//! # fn main() -> anyhow::Result<()> {
//! let db = MariaDbServer::start()?;
//! db.create_user("app", "app-pw", "ed25519")?;
//! assert_eq!(db.sql("select 1")?.trim(), "1");
//! // connect a client to db.host():db.port() as db.user() / db.password() ...
//! # Ok(()) }
//! ```
//!
//! Its first start on a machine runs `mariadb-install-db` into a template;
//! later starts copy it and take about 0.1 s.
//!
//! Environment knobs: `SLUICE_PG_BINDIR` (PostgreSQL binaries),
//! `SLUICE_MARIADB_BINDIR` (MariaDB binaries, else `PATH`, `/usr/sbin`, ...),
//! `SLUICE_TESTKIT_TMPDIR` (scratch root; default `/dev/shm` if it is a roomy
//! tmpfs, else `/tmp`),
//! `SLUICE_TESTKIT_OS_USER` (server user when root, default `postgres`),
//! `SLUICE_TESTKIT_NO_TEMPLATE=1` (run initdb / mariadb-install-db per server
//! instead of copying a cached template).

mod mariadb;
mod mariadb_replica;
mod mariadb_setup;
mod patroni;
mod pg;
mod pg_conf;
mod pg_replica;
mod pg_setup;
mod process;
mod reap;
mod template;
mod tls;

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

pub use mariadb::{MariaDbOptions, MariaDbServer};
pub use patroni::PatroniCluster;
pub use pg::{PgAuth, PgOptions, PgServer};

/// Returns a TCP port on 127.0.0.1 that was free a moment ago: binds port 0,
/// reads the port the kernel picked and closes the socket. A port is never
/// handed out twice within one process.
/// Runs `start` up to three times while it fails because another process took the port
/// between [`free_port`] and the bind.
pub(crate) fn retry_port_conflicts<T>(
    mut start: impl FnMut() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut last_err = None;
    for _ in 0..3 {
        match start() {
            Ok(server) => return Ok(server),
            Err(e) if format!("{e:#}").contains("Address already in use") => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    use anyhow::Context;
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no attempt made"))).context("port conflicts")
}

pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut guard = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let used = guard.get_or_insert_with(HashSet::new);
    for _ in 0..256 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port());
        if let Ok(port) = port
            && used.insert(port)
        {
            return port;
        }
    }
    // Binding keeps failing (or every port came back twice): fall back to a
    // pseudo-random unused port in the dynamic range.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id();
    let mut port = 20_000 + (seed % 30_000) as u16;
    while !used.insert(port) {
        port = if port >= 59_999 { 20_000 } else { port + 1 };
    }
    port
}

/// Writes a throwaway CA and a certificate for `localhost` / `127.0.0.1` signed by it
/// into `dir`, for a test's own TLS listener: returns (CA cert, cert, key) paths.
pub fn tls_files(
    dir: &std::path::Path,
) -> anyhow::Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let f = tls::write_server_tls(dir)?;
    Ok((f.ca_cert, f.server_cert, f.server_key))
}
