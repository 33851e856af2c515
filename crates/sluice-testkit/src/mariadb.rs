//! [`MariaDbServer`]: one throwaway MariaDB server listening on 127.0.0.1 at a
//! free port, living in a temporary directory (`<scratch root>/sluice-mariadb-*`:
//! `data/`, `tls/`, `mariadbd.log`, the Unix socket `mysqld.sock`, the pid
//! file, a `client.cnf` for the `mariadb` CLI and an `owner` stamp). `mariadbd`
//! runs as our child (as root with `--user=root` when we are root, which it
//! accepts), is configured for speed rather than durability, and is SIGKILLed
//! and deleted on drop. `kill` simulates a crash; `restart` brings it back on
//! the same port and data directory (InnoDB crash recovery).

use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tempfile::TempDir;

use crate::mariadb_setup::{
    Layout, bins, create_data_dir, init_sql, quote_ident, quote_str, random_password, scrub_env,
    server_args,
};
use crate::pg_setup::check;
use crate::process::{alive, signal};
use crate::reap::{MARIADB_DIR_PREFIX, OWNER_FILE, owner_stamp, sweep_once};
use crate::template::scratch_root;
use crate::{free_port, tls};

/// How to set up a [`MariaDbServer`].
#[derive(Debug, Clone)]
pub struct MariaDbOptions {
    /// Enable TLS (`ssl_ca`, `ssl_cert`, `ssl_key`) with a certificate for
    /// `localhost` / `127.0.0.1` from a throwaway CA, see
    /// [`MariaDbServer::tls_ca_pem`]. Default: true.
    pub tls: bool,
    /// Server setting `local_infile` (and `--local-infile` for
    /// [`MariaDbServer::sql`]). Default: true.
    pub local_infile: bool,
    /// Binary log on (`log_bin`, `binlog_format=ROW`; `server_id` is always 1).
    /// Default: true.
    pub binlog: bool,
    /// Arguments appended to mariadbd's command line (after the testkit's
    /// own, so they override them), e.g. `--plugin-maturity=beta`.
    pub extra_args: Vec<String>,
    /// Load the HandlerSocket plugin (the reference for Sluice's key-value path) with a
    /// read and a write listener on free ports ([`MariaDbServer::handlersocket_ports`])
    /// and no secrets. Default: false.
    pub handlersocket: bool,
}

impl Default for MariaDbOptions {
    fn default() -> Self {
        MariaDbOptions {
            tls: true,
            local_infile: true,
            binlog: true,
            extra_args: Vec::new(),
            handlersocket: false,
        }
    }
}

/// A running (or killed/stopped) throwaway MariaDB server. See the module
/// documentation.
#[derive(Debug)]
pub struct MariaDbServer {
    dir: TempDir,
    layout: Layout,
    port: u16,
    /// The HandlerSocket read and write ports, when the plugin is loaded.
    handlersocket: Option<(u16, u16)>,
    password: String,
    opts: MariaDbOptions,
    tls: Option<tls::TlsFiles>,
    child: Option<Child>,
    /// Held while checking for / installing the ed25519 plugin.
    ed25519: Mutex<bool>,
}

/// How long a start may take before it is declared failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);
const SUPERUSER: &str = "root";

impl MariaDbServer {
    /// Starts a server with [`MariaDbOptions::default`].
    pub fn start() -> Result<MariaDbServer> {
        Self::start_with(MariaDbOptions::default())
    }

    /// Starts a server: fresh system tables (superuser `root` with a random
    /// password, database `test`), free port, configured per `opts`. Waits
    /// until it accepts TCP connections and `SELECT 1` works over its socket
    /// (30 s at most).
    pub fn start_with(opts: MariaDbOptions) -> Result<MariaDbServer> {
        let root = scratch_root();
        sweep_once(&root);
        crate::retry_port_conflicts(|| Self::try_start(&root, &opts))
    }

    fn try_start(root: &Path, opts: &MariaDbOptions) -> Result<MariaDbServer> {
        let dir = tempfile::Builder::new()
            .prefix(MARIADB_DIR_PREFIX)
            .tempdir_in(root)
            .with_context(|| format!("create a temp dir in {}", root.display()))?;
        fs::write(dir.path().join(OWNER_FILE), owner_stamp()).context("write owner stamp")?;
        let layout = Layout::new(dir.path());
        create_data_dir(&layout.data)?;
        let tls = if opts.tls {
            Some(tls::write_own_tls(&dir.path().join("tls"))?)
        } else {
            None
        };
        let password = random_password();
        write_private(&layout.init_file, &init_sql(&password))?;
        write_private(
            &layout.client_cnf,
            &format!("[client]\nuser={SUPERUSER}\npassword={password}\n"),
        )?;
        let port = free_port();
        let handlersocket = opts.handlersocket.then(|| (free_port(), free_port()));
        let mut server = MariaDbServer {
            dir,
            layout,
            port,
            handlersocket,
            password,
            opts: opts.clone(),
            tls,
            child: None,
            ed25519: Mutex::new(false),
        };
        server.launch()?;
        Ok(server)
    }

    /// Spawns mariadbd on the existing data dir and waits until it is ready.
    fn launch(&mut self) -> Result<()> {
        let l = &self.layout;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&l.log)
            .with_context(|| format!("open {}", l.log.display()))?;
        let log_err = log.try_clone().context("dup log file")?;
        let mut cmd = Command::new(&bins()?.mariadbd);
        scrub_env(&mut cmd);
        let mut child = cmd
            .args(server_args(
                l,
                self.port,
                &self.opts,
                self.tls.as_ref(),
                self.handlersocket,
            ))
            .current_dir(&l.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .context("spawn mariadbd")?;
        let deadline = Instant::now() + START_TIMEOUT;
        let failure = loop {
            match child.try_wait() {
                Ok(Some(status)) => break format!("mariadbd exited ({status})"),
                Err(e) => break format!("cannot wait for mariadbd: {e}"),
                Ok(None) => {}
            }
            // The CLI blocks until the server accepts (after the init file
            // ran), so one try usually suffices once the socket exists.
            if l.socket.exists() && self.select_one().is_ok() && self.tcp_accepts() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                break format!("not ready after {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = child.kill();
        let _ = child.wait();
        bail!(
            "MariaDB on port {} did not start: {failure}\n--- tail of {} ---\n{}",
            self.port,
            l.log.display(),
            self.log_tail(30)
        );
    }

    fn select_one(&self) -> Result<()> {
        let out = self.sql("SELECT 1")?;
        if out.trim() != "1" {
            bail!("SELECT 1 returned {out:?}");
        }
        Ok(())
    }

    fn tcp_accepts(&self) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    }

    /// The TCP port (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HandlerSocket plugin's read and write ports (on 127.0.0.1), when it was
    /// loaded ([`MariaDbOptions::handlersocket`]).
    pub fn handlersocket_ports(&self) -> Option<(u16, u16)> {
        self.handlersocket
    }

    /// Always "127.0.0.1".
    pub fn host(&self) -> &str {
        "127.0.0.1"
    }

    /// The superuser's name, "root" (`root@127.0.0.1` over TCP,
    /// `root@localhost` over the socket, both with [`password`](Self::password)).
    pub fn user(&self) -> &str {
        SUPERUSER
    }

    /// The superuser's password (random, alphanumeric, `mysql_native_password`).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's Unix socket.
    pub fn socket_path(&self) -> &Path {
        &self.layout.socket
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.layout.data
    }

    /// The server log file (`log_error`).
    pub fn log_path(&self) -> &Path {
        &self.layout.log
    }

    /// The last `lines` lines of the server log (empty if unreadable).
    pub fn log_tail(&self, lines: usize) -> String {
        let bytes = fs::read(&self.layout.log).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// PEM file of the CA that signed the server certificate (None without TLS).
    pub fn tls_ca_pem(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// The options the server was started with.
    pub fn options(&self) -> &MariaDbOptions {
        &self.opts
    }

    /// mariadbd's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id).filter(|&p| alive(p))
    }

    /// Runs `sql` (any number of `;`-terminated statements) through the
    /// `mariadb` CLI as root over the Unix socket, in database `test`, in
    /// batch mode without column names (`-N -B`: tab-separated, one row per
    /// line), and returns its stdout. Fails with the CLI's stderr when a
    /// statement fails (the rest are skipped).
    pub fn sql(&self, sql: &str) -> Result<String> {
        let b = bins()?;
        let mut cmd = Command::new(&b.client);
        // --defaults-file must come first.
        let mut defaults = std::ffi::OsString::from("--defaults-file=");
        defaults.push(&self.layout.client_cnf);
        cmd.arg(defaults);
        let mut socket = std::ffi::OsString::from("--socket=");
        socket.push(&self.layout.socket);
        cmd.arg(socket).args([
            "--protocol=socket",
            "-N",
            "-B",
            "--connect-timeout=10",
            "--max-allowed-packet=1G",
            "--database=test",
        ]);
        if self.opts.local_infile {
            cmd.arg("--local-infile=1");
        }
        scrub_env(&mut cmd);
        cmd.current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("run mariadb")?;
        let stdin = child.stdin.take();
        let script = sql.as_bytes().to_vec();
        // Feed stdin from a thread so large outputs cannot deadlock us.
        let writer = std::thread::spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&script);
            }
        });
        let out = child.wait_with_output().context("wait for mariadb")?;
        let _ = writer.join();
        check(&out, &format!("mariadb (socket, port {})", self.port))?;
        String::from_utf8(out.stdout).context("mariadb output is not UTF-8")
    }

    /// Creates `'name'@'%'` identified by `password` through `plugin`
    /// ("mysql_native_password" or "ed25519"; any other plugin name is passed
    /// to `IDENTIFIED VIA` as is) with ALL PRIVILEGES on `*.*`. The ed25519
    /// plugin is installed on first use; its absence is an error saying so.
    pub fn create_user(&self, name: &str, password: &str, plugin: &str) -> Result<()> {
        let plugin = match plugin {
            "ed25519" | "client_ed25519" => {
                self.ensure_ed25519()?;
                "ed25519"
            }
            p if !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => p,
            p => bail!("invalid authentication plugin name {p:?}"),
        };
        let user = format!("{}@'%'", quote_str(name));
        self.sql(&format!(
            "CREATE USER {user} IDENTIFIED VIA {plugin} USING PASSWORD({});\n\
             GRANT ALL PRIVILEGES ON *.* TO {user};\n",
            quote_str(password)
        ))?;
        Ok(())
    }

    fn ensure_ed25519(&self) -> Result<()> {
        let mut ready = self.ed25519.lock().unwrap_or_else(|e| e.into_inner());
        if *ready {
            return Ok(());
        }
        let active = self.sql(
            "SELECT COUNT(*) FROM information_schema.PLUGINS \
             WHERE PLUGIN_NAME = 'ed25519' AND PLUGIN_STATUS = 'ACTIVE';",
        )?;
        if active.trim() != "1" {
            let dir = self.sql("SELECT @@plugin_dir;")?;
            let so = Path::new(dir.trim()).join("auth_ed25519.so");
            if !so.is_file() {
                bail!(
                    "MariaDB's ed25519 authentication plugin is not available ({} is missing; \
                     on Debian it ships with mariadb-server, see scripts/install-deps.sh)",
                    so.display()
                );
            }
            self.sql("INSTALL SONAME 'auth_ed25519';")
                .context("install the ed25519 authentication plugin")?;
        }
        *ready = true;
        Ok(())
    }

    /// Creates database `name` (utf8mb4).
    pub fn create_database(&self, name: &str) -> Result<()> {
        self.sql(&format!("CREATE DATABASE {};\n", quote_ident(name)))?;
        Ok(())
    }

    /// Crashes the server (SIGKILL; connections drop at once) and waits until
    /// it is gone. The data dir stays; [`restart`](Self::restart) runs crash
    /// recovery on it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_leftovers();
    }

    /// Normal shutdown (SIGTERM), waiting up to 60 s before resorting to
    /// SIGKILL.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(60);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_leftovers();
    }

    /// Starts the server again on the same port, data dir and password
    /// (stopping it first if it is running).
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            self.stop();
        }
        self.launch()
    }

    /// The socket and pid file a SIGKILLed server leaves behind (a stale
    /// socket would make the readiness check try it).
    fn remove_leftovers(&self) {
        let _ = fs::remove_file(&self.layout.socket);
        let _ = fs::remove_file(&self.layout.pid_file);
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.kill();
        // The TempDir field then deletes the directory.
    }
}

/// Writes `contents` to `path` readable by us only (it holds the password).
fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .with_context(|| format!("write {}", path.display()))
}
