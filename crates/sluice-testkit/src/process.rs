//! Process plumbing shared by the server launchers: dropping privileges when the
//! tests run as root (database servers refuse to run as root, so they are started
//! through `runuser` as an unprivileged OS user), looking up that user, sending
//! signals, checking whether a process is alive (zombies count as dead, because
//! the container's init may be slow to reap orphaned server processes), killing
//! a server together with its children, and cleaning up the System V shared memory
//! segment a SIGKILLed postmaster leaves behind.

use std::ffi::CString;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// An OS account that server processes run as.
#[derive(Debug, Clone)]
pub(crate) struct OsUser {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

/// True when this process runs with euid 0.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The account servers run as when we are root (`SLUICE_TESTKIT_OS_USER`, default
/// `postgres`); `None` when we are not root and servers simply run as ourselves.
pub(crate) fn server_user() -> Result<Option<&'static OsUser>> {
    static USER: OnceLock<std::result::Result<Option<OsUser>, String>> = OnceLock::new();
    let found = USER.get_or_init(|| {
        if !is_root() {
            return Ok(None);
        }
        let name =
            std::env::var("SLUICE_TESTKIT_OS_USER").unwrap_or_else(|_| "postgres".to_string());
        lookup_user(&name).map(Some).map_err(|e| format!("{e:#}"))
    });
    match found {
        Ok(user) => Ok(user.as_ref()),
        Err(e) => bail!("{e}"),
    }
}

fn lookup_user(name: &str) -> Result<OsUser> {
    let cname = CString::new(name).context("user name contains NUL")?;
    // SAFETY: passwd is a plain C struct; all-zero is a valid initial value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live, correctly sized memory owned by this frame.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        bail!(
            "running as root, but OS user {name:?} (needed to run database servers, which refuse \
             root) does not exist; install the postgresql package (scripts/install-deps.sh) or \
             set SLUICE_TESTKIT_OS_USER"
        );
    }
    Ok(OsUser {
        name: name.to_string(),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// A command for `program` that runs as the server user (through `runuser` when we
/// are root), with a clean `PG*` environment, C locale, and `cwd` as working
/// directory (the unprivileged user may not be able to read ours).
pub(crate) fn server_command(program: &Path, cwd: &Path) -> Result<Command> {
    let mut cmd = match server_user()? {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user.name, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    };
    scrub_env(&mut cmd);
    cmd.env("LC_ALL", "C").current_dir(cwd);
    Ok(cmd)
}

/// Removes libpq / server environment variables inherited from the caller that
/// could redirect or alter our commands (PGDATA, PGHOST, PGSSLMODE, ...).
pub(crate) fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
}

/// Gives `path` to the server user (no-op when not root).
pub(crate) fn chown_to_server_user(path: &Path) -> Result<()> {
    if let Some(user) = server_user()? {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
            .with_context(|| format!("chown {} to {}", path.display(), user.name))?;
    }
    Ok(())
}

/// Sends `sig` to `pid`; refuses pids <= 1 (which would mean a process group or init).
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if raw <= 1 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(raw, sig) == 0 }
}

/// Parses `/proc/<pid>/stat`, returning the fields after the command name
/// (index 0 is the state, 1 the parent pid, 19 the start time).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// True while `pid` exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    match stat_fields(pid) {
        Some(fields) => !matches!(fields.first().map(String::as_str), Some("Z" | "X" | "x")),
        None => false,
    }
}

/// The kernel start time of `pid` (clock ticks since boot), used to tell a live
/// process from a later one that reused its pid.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The parent of `pid`.
pub(crate) fn parent_pid(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Pids whose parent is `parent`.
pub(crate) fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parent = parent.to_string();
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat_fields(pid).is_some_and(|f| f.get(1).is_some_and(|p| *p == parent)))
        .collect()
}

/// Polls until none of `pids` is alive; false on timeout.
pub(crate) fn wait_dead(pids: &[u32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids.iter().all(|&p| !alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILLs a server's main process and all its children, like a host crash,
/// and waits (up to 10 s) until they are gone. Children orphaned by the main
/// process's death are found by their working directory, `workdir` (every
/// PostgreSQL process works in the data directory). The main process is not
/// SIGSTOPped first: `runuser`, its parent, would then stop itself too.
pub(crate) fn kill_tree(pid: u32, workdir: &Path) -> bool {
    let mut pids = children(pid);
    for &child in &pids {
        signal(child, libc::SIGKILL);
    }
    signal(pid, libc::SIGKILL);
    pids.push(pid);
    let mut all_dead = wait_dead(&[pid], Duration::from_secs(10));
    // The main process can no longer fork; sweep up everything left.
    if let Ok(workdir) = fs::canonicalize(workdir) {
        let stragglers = processes_in(&workdir);
        for &p in &stragglers {
            signal(p, libc::SIGKILL);
        }
        pids.extend(stragglers);
    }
    all_dead &= wait_dead(&pids, Duration::from_secs(10));
    all_dead
}

/// Live processes whose working directory is `dir`.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir) && alive(pid)
        })
        .collect()
}

/// Asks `pid` to exit with `sig`, waits up to `timeout`, and falls back to
/// [`kill_tree`].
pub(crate) fn terminate(pid: u32, sig: libc::c_int, timeout: Duration, workdir: &Path) {
    if alive(pid) {
        signal(pid, sig);
        if wait_dead(&[pid], timeout) {
            return;
        }
    }
    kill_tree(pid, workdir);
}

/// After a postmaster was SIGKILLed its System V shared memory segment survives
/// (PostgreSQL would reuse and remove it on the next start of the same data dir).
/// Before deleting the data dir, remove it so repeated test runs do not leak
/// segments. `pidfile` is the content of `postmaster.pid`; line 7 is "key id".
pub(crate) fn remove_stale_shm(pidfile: &str) {
    let Some(line) = pidfile.lines().nth(6) else {
        return;
    };
    let mut parts = line.split_whitespace();
    let (Some(key), Some(id)) = (parts.next(), parts.next()) else {
        return;
    };
    let (Ok(key), Ok(id)) = (key.parse::<libc::key_t>(), id.parse::<libc::c_int>()) else {
        return;
    };
    if key == 0 || id < 0 {
        return;
    }
    // SAFETY: shmget/shmctl take plain integers and a pointer to a local struct.
    unsafe {
        if libc::shmget(key, 0, 0) != id {
            return; // not (or no longer) the segment this server created
        }
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        if libc::shmctl(id, libc::IPC_STAT, &mut ds) == 0 && ds.shm_nattch == 0 {
            libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}
