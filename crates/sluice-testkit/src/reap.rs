//! Cleanup of servers leaked by test processes that died without running their
//! destructors (a test harness timeout, SIGKILL, `std::process::exit`, ...).
//!
//! Every server directory (`<scratch root>/sluice-pg-*`, `<scratch root>/sluice-mariadb-*`)
//! carries an `owner` file with the
//! pid and kernel start time of the process that created it. The first time a
//! process starts a server it sweeps the scratch directory: for each server
//! directory whose owner is gone, it kills the server if it still runs there
//! (checked through `/proc/<pid>/cwd`, which a postmaster and mariadbd set to
//! their data directory), frees its shared memory and deletes the directory. Directories
//! without an owner file are left alone (they may be in the middle of being set
//! up).

use std::fs;
use std::path::Path;
use std::sync::Once;

use crate::process::{alive, kill_tree, remove_stale_shm, start_time};

/// Prefix of PostgreSQL server directories in the scratch root.
pub(crate) const SERVER_DIR_PREFIX: &str = "sluice-pg-";
/// Prefix of MariaDB server directories in the scratch root.
pub(crate) const MARIADB_DIR_PREFIX: &str = "sluice-mariadb-";
/// mariadbd's pid file, directly in a MariaDB server directory.
pub(crate) const MARIADB_PID_FILE: &str = "mariadbd.pid";
/// Name of the owner file inside a server directory.
pub(crate) const OWNER_FILE: &str = "owner";

/// Content of the owner file for this process: "<pid> <starttime>".
pub(crate) fn owner_stamp() -> String {
    let pid = std::process::id();
    format!("{pid} {}\n", start_time(pid).unwrap_or(0))
}

/// Sweeps the scratch root once per process.
pub(crate) fn sweep_once(root: &Path) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| sweep(root));
}

fn sweep(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let mariadb = name.starts_with(MARIADB_DIR_PREFIX);
        if !name.starts_with(SERVER_DIR_PREFIX) && !mariadb {
            continue;
        }
        let dir = entry.path();
        let Ok(owner) = fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        if owner_alive(&owner) {
            continue;
        }
        if mariadb {
            reap_mariadb_dir(&dir);
        } else {
            reap_dir(&dir);
        }
    }
}

fn owner_alive(stamp: &str) -> bool {
    let mut parts = stamp.split_whitespace();
    let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
        return true; // unreadable: leave it alone
    };
    let started = parts.next().and_then(|s| s.parse::<u64>().ok());
    alive(pid) && (started.is_none_or(|s| s == 0 || start_time(pid) == Some(s)))
}

fn reap_dir(dir: &Path) {
    let data = dir.join("data");
    if let Ok(pidfile) = fs::read_to_string(data.join("postmaster.pid")) {
        kill_if_running_in(&pidfile, &data);
        remove_stale_shm(&pidfile);
    }
    let _ = fs::remove_dir_all(dir);
}

fn reap_mariadb_dir(dir: &Path) {
    let data = dir.join("data");
    if let Ok(pidfile) = fs::read_to_string(dir.join(MARIADB_PID_FILE)) {
        kill_if_running_in(&pidfile, &data);
    }
    let _ = fs::remove_dir_all(dir);
}

/// Kills the server whose pid is the first line of `pidfile` if it still runs
/// with `data` as its working directory.
fn kill_if_running_in(pidfile: &str, data: &Path) {
    if let Some(pid) = pidfile
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
    {
        let runs_here = fs::read_link(format!("/proc/{pid}/cwd"))
            .ok()
            .zip(fs::canonicalize(data).ok())
            .is_some_and(|(cwd, data)| cwd == data);
        if runs_here && alive(pid) {
            kill_tree(pid, data);
        }
    }
}
