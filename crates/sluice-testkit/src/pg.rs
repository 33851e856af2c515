//! [`PgServer`]: one throwaway PostgreSQL cluster listening on 127.0.0.1 at a
//! free port, living in a temporary directory (`<scratch root>/sluice-pg-*`: `data/`,
//! `tls/`, `postgres.log`, the Unix socket and an `owner` stamp). The postmaster
//! runs as our child (through `runuser` as the `postgres` OS user when we are
//! root, since PostgreSQL refuses root), is configured for
//! speed rather than durability, and stopped (immediate mode) and deleted on
//! drop. `kill` simulates a crash of the whole server (SIGKILL to the
//! postmaster and its children); `restart` brings it back on the same port and
//! data directory, running crash recovery if needed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::pg_conf::{hba_conf, quote_ident, quote_literal, server_conf};
use crate::pg_setup::{SUPERUSER, SUPERUSER_PASSWORD, bins, check, create_data_dir};
use crate::process::{
    alive, chown_to_server_user, kill_tree, parent_pid, remove_stale_shm, scrub_env,
    server_command, terminate,
};
use crate::reap::{OWNER_FILE, SERVER_DIR_PREFIX, owner_stamp, sweep_once};
use crate::template::scratch_root;
use crate::{free_port, tls};

/// How clients authenticate over TCP (the `pg_hba.conf` method), which also
/// decides how passwords are stored (`password_encryption`: `md5` for
/// [`PgAuth::Md5`], `scram-sha-256` otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PgAuth {
    /// SCRAM-SHA-256.
    #[default]
    Scram,
    /// MD5 challenge (passwords stored as MD5 hashes).
    Md5,
    /// Cleartext password.
    Password,
    /// No password at all.
    Trust,
}

impl PgAuth {
    pub(crate) fn hba_method(self) -> &'static str {
        match self {
            PgAuth::Scram => "scram-sha-256",
            PgAuth::Md5 => "md5",
            PgAuth::Password => "password",
            PgAuth::Trust => "trust",
        }
    }

    pub(crate) fn password_encryption(self) -> &'static str {
        match self {
            PgAuth::Md5 => "md5",
            _ => "scram-sha-256",
        }
    }
}

/// How to set up a [`PgServer`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Enable TLS (`ssl = on`) with a certificate from a throwaway CA, see
    /// [`PgServer::tls_ca_pem`]. Default: true.
    pub tls: bool,
    /// Authentication for TCP connections. Default: [`PgAuth::Scram`].
    pub auth: PgAuth,
    /// Lines appended to `postgresql.conf` (after the testkit's own settings,
    /// so they override them).
    pub extra_conf: Vec<String>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            tls: true,
            auth: PgAuth::Scram,
            extra_conf: Vec::new(),
        }
    }
}

/// A running (or killed/stopped) throwaway PostgreSQL server. See the module
/// documentation.
#[derive(Debug)]
pub struct PgServer {
    pub(crate) dir: TempDir,
    pub(crate) data: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) port: u16,
    pub(crate) opts: PgOptions,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) pid: Option<u32>,
    pub(crate) launcher: Option<Child>,
}

impl PgServer {
    /// Starts a server with [`PgOptions::default`].
    pub fn start() -> Result<PgServer> {
        Self::start_with(PgOptions::default())
    }

    /// Starts a server: fresh cluster (superuser `postgres`, databases
    /// `postgres` and `test`), free port, configured per `opts`. Waits until it
    /// accepts connections (30 s at most).
    pub fn start_with(opts: PgOptions) -> Result<PgServer> {
        let root = scratch_root();
        sweep_once(&root);
        crate::retry_port_conflicts(|| Self::try_start(&root, &opts))
    }

    fn try_start(root: &Path, opts: &PgOptions) -> Result<PgServer> {
        let dir = server_dir(root)?;

        let data = dir.path().join("data");
        create_data_dir(&data)?;
        let ca = if opts.tls {
            Some(tls::write_server_tls(&dir.path().join("tls"))?)
        } else {
            None
        };
        let port = free_port();
        append_conf(&data, &server_conf(dir.path(), port, opts, ca.as_ref()))?;
        let hba_path = data.join("pg_hba.conf");
        fs::write(&hba_path, hba_conf(opts)).context("write pg_hba.conf")?;
        chown_to_server_user(&hba_path)?;

        let mut server = PgServer {
            log: dir.path().join("postgres.log"),
            dir,
            data,
            port,
            opts: opts.clone(),
            ca: ca.map(|t| t.ca_cert),
            pid: None,
            launcher: None,
        };
        server.launch()?;
        if opts.auth == PgAuth::Md5 {
            // The template stored the superuser password as SCRAM, and the
            // server then answers md5 requests with SCRAM; store it as MD5.
            server.psql_socket(&format!(
                "ALTER ROLE {} PASSWORD {};",
                quote_ident(SUPERUSER),
                quote_literal(SUPERUSER_PASSWORD)
            ))?;
        }
        Ok(server)
    }

    /// Spawns the postmaster on the existing data dir (through `runuser` when
    /// root; it stays our child or grandchild, so its exit is noticed at once
    /// and it is reaped) and waits until `postmaster.pid` reports it ready.
    /// Polling ourselves rather than `pg_ctl -w` (which sleeps 100 ms between
    /// checks) makes starts noticeably faster.
    pub(crate) fn launch(&mut self) -> Result<()> {
        self.reap_launcher();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("open {}", self.log.display()))?;
        chown_to_server_user(&self.log)?;
        let log_err = log.try_clone().context("dup log file")?;
        let mut child = server_command(&bins()?.bin("postgres"), self.dir.path())?
            .arg("-D")
            .arg(&self.data)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .context("spawn postgres")?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(pid) = ready_postmaster(&self.data, child.id()) {
                self.pid = Some(pid);
                self.launcher = Some(child);
                return Ok(());
            }
            let failure = match child.try_wait() {
                Ok(Some(status)) => format!("postgres exited ({status})"),
                Ok(None) if Instant::now() >= deadline => {
                    format!("not ready after {START_TIMEOUT:?}")
                }
                Ok(None) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => format!("cannot wait for postgres: {e}"),
            };
            if let Some(pid) = postmaster_pid(&self.data)
                && is_child_or_self(pid, child.id())
            {
                kill_tree(pid, &self.data);
            }
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "PostgreSQL on port {} did not start: {failure}\n--- tail of {} ---\n{}",
                self.port,
                self.log.display(),
                self.log_tail(30)
            );
        }
    }

    /// Reaps the launcher process (`runuser`, or the postmaster itself) once
    /// the postmaster is gone.
    fn reap_launcher(&mut self) {
        if let Some(mut child) = self.launcher.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) {
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// The TCP port (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Always "127.0.0.1".
    pub fn host(&self) -> &str {
        "127.0.0.1"
    }

    /// The superuser name, "postgres".
    pub fn superuser(&self) -> &str {
        SUPERUSER
    }

    /// The superuser's password, "postgres-pw".
    pub fn password(&self) -> &str {
        SUPERUSER_PASSWORD
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The directory holding the server's Unix socket (`.s.PGSQL.<port>`),
    /// where connections are trusted.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the server log (empty if unreadable).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// PEM file of the CA that signed the server certificate (None without TLS).
    pub fn tls_ca_pem(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The options the server was started with.
    pub fn options(&self) -> &PgOptions {
        &self.opts
    }

    /// Runs `sql` (any number of statements, or psql meta-commands) through
    /// `psql -X -A -t -q -v ON_ERROR_STOP=1` as the superuser over TCP with the
    /// password, and returns its stdout (unaligned tuples, `|`-separated, one
    /// row per line; no command tags).
    pub fn psql(&self, db: &str, sql: &str) -> Result<String> {
        let mut cmd = Command::new(bins()?.bin("psql"));
        cmd.args(["-h", self.host(), "-p", &self.port.to_string()]);
        self.run_psql(cmd, db, sql)
    }

    /// Like [`psql`](Self::psql) but over the Unix socket (trusted, no password).
    pub(crate) fn psql_socket(&self, sql: &str) -> Result<String> {
        let mut cmd = Command::new(bins()?.bin("psql"));
        cmd.arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string()]);
        self.run_psql(cmd, "postgres", sql)
    }

    fn run_psql(&self, mut cmd: Command, db: &str, sql: &str) -> Result<String> {
        scrub_env(&mut cmd);
        cmd.args([
            "-X",
            "-A",
            "-t",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            SUPERUSER,
        ])
        .args(["-d", db, "-f", "-"])
        .env("PGPASSWORD", SUPERUSER_PASSWORD)
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGAPPNAME", "sluice-testkit")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("run psql")?;
        let stdin = child.stdin.take();
        let script = sql.as_bytes().to_vec();
        // Feed stdin from a thread so large outputs cannot deadlock us.
        let writer = std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&script);
            }
        });
        let out = child.wait_with_output().context("wait for psql")?;
        let _ = writer.join();
        check(&out, &format!("psql on port {} db {db:?}", self.port))?;
        String::from_utf8(out.stdout).context("psql output is not UTF-8")
    }

    /// Creates a login role with `password` (stored as MD5 on [`PgAuth::Md5`]
    /// servers, SCRAM otherwise).
    pub fn create_user(&self, name: &str, password: &str) -> Result<()> {
        self.psql(
            "postgres",
            &format!(
                "SET password_encryption = '{}';\nCREATE ROLE {} LOGIN PASSWORD {};\n",
                self.opts.auth.password_encryption(),
                quote_ident(name),
                quote_literal(password)
            ),
        )?;
        Ok(())
    }

    /// Creates database `name` owned by `owner`.
    pub fn create_database(&self, name: &str, owner: &str) -> Result<()> {
        self.psql(
            "postgres",
            &format!(
                "CREATE DATABASE {} OWNER {};\n",
                quote_ident(name),
                quote_ident(owner)
            ),
        )?;
        Ok(())
    }

    /// The postmaster's pid while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.pid.filter(|&p| alive(p))
    }

    /// Crashes the server: SIGKILL to the postmaster and all its backends
    /// (connections drop at once), waiting until they are gone. The data dir
    /// stays; [`restart`](Self::restart) runs crash recovery on it.
    pub fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            kill_tree(pid, &self.data);
        }
        self.reap_launcher();
        self.clear_stale_pidfile();
    }

    /// Fast shutdown (SIGINT: roll back open transactions, disconnect
    /// clients), waiting up to 60 s before resorting to SIGKILL.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid.take() {
            terminate(pid, libc::SIGINT, Duration::from_secs(60), &self.data);
        }
        self.reap_launcher();
        self.clear_stale_pidfile();
    }

    /// Starts the server again on the same port and data dir (stopping it
    /// first if it is running).
    pub fn restart(&mut self) -> Result<()> {
        if self.pid.is_some() {
            self.stop();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.launch() {
                Ok(()) => return Ok(()),
                // Rare: a dying backend still holds the old shared memory.
                Err(e)
                    if Instant::now() < deadline
                        && format!("{e:#}").contains("is still in use") =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// After the postmaster died without cleaning up (SIGKILL): free its
    /// shared memory and remove `postmaster.pid` and the socket lock file, so
    /// a zombie postmaster not yet reaped by init (kill(pid, 0) still succeeds
    /// on zombies) cannot block the next start.
    fn clear_stale_pidfile(&self) {
        let path = self.data.join("postmaster.pid");
        if let Ok(pidfile) = fs::read_to_string(&path) {
            let pid = pidfile.lines().next().and_then(|l| l.trim().parse().ok());
            if pid.is_none_or(|p| !alive(p)) {
                remove_stale_shm(&pidfile);
                let _ = fs::remove_file(&path);
                let socket = format!(".s.PGSQL.{}", self.port);
                let _ = fs::remove_file(self.dir.path().join(format!("{socket}.lock")));
                let _ = fs::remove_file(self.dir.path().join(socket));
            }
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            terminate(pid, libc::SIGQUIT, Duration::from_secs(10), &self.data);
        }
        self.reap_launcher();
        self.clear_stale_pidfile();
        // The TempDir field then deletes the directory.
    }
}

/// A new server directory under `root` (owned by the server user, stamped with its
/// owner for the sweeper).
pub(crate) fn server_dir(root: &Path) -> Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(SERVER_DIR_PREFIX)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .tempdir_in(root)
        .with_context(|| format!("create a temp dir in {}", root.display()))?;
    fs::write(dir.path().join(OWNER_FILE), owner_stamp()).context("write owner stamp")?;
    chown_to_server_user(dir.path())?;
    Ok(dir)
}

/// Appends `conf` to the data directory's postgresql.conf.
pub(crate) fn append_conf(data: &Path, conf: &str) -> Result<()> {
    let conf_path = data.join("postgresql.conf");
    fs::OpenOptions::new()
        .append(true)
        .open(&conf_path)
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .with_context(|| format!("append to {}", conf_path.display()))
}

/// How long a start may take before it is declared failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The postmaster's pid from `postmaster.pid`.
fn postmaster_pid(data: &Path) -> Option<u32> {
    let pidfile = fs::read_to_string(data.join("postmaster.pid")).ok()?;
    pidfile.lines().next()?.trim().parse().ok()
}

/// The pid of the postmaster we launched (`launcher` itself, or its child
/// when launched through runuser) once `postmaster.pid` says it is ready
/// (line 8: "ready", or "standby" for a hot standby).
fn ready_postmaster(data: &Path, launcher: u32) -> Option<u32> {
    let pidfile = fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: u32 = pidfile.lines().next()?.trim().parse().ok()?;
    let status = pidfile.lines().nth(7)?.trim();
    (matches!(status, "ready" | "standby") && is_child_or_self(pid, launcher)).then_some(pid)
}

fn is_child_or_self(pid: u32, launcher: u32) -> bool {
    pid == launcher || parent_pid(pid) == Some(launcher)
}
