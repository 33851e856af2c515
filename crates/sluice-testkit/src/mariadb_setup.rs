//! Locating the MariaDB binaries, producing fresh data directories, the
//! `mariadbd` command line, and SQL quoting for the statements the testkit
//! issues.
//!
//! `mariadb-install-db` takes seconds, so the first server started on a
//! machine runs it once into a template directory shared by all test
//! processes (`<scratch root>/sluice-testkit-mariadb<version>-t<format>-u<uid>`,
//! see [`crate::template`]) and every server starts from a copy of it (about
//! 20 MB: the InnoDB files are kept small). The template holds the system
//! tables with `root@localhost` and `root@127.0.0.1` (no password yet: every
//! server sets its own random one through `--init-file` before it accepts
//! connections) and an empty database `test`. `SLUICE_TESTKIT_NO_TEMPLATE=1`
//! runs `mariadb-install-db` for every server instead.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

use crate::mariadb::MariaDbOptions;
use crate::pg_setup::check;
use crate::process::is_root;
use crate::template::{cached, copy_dir, file_name_safe, templates_enabled};
use crate::tls::TlsFiles;

/// Bump when the template's contents or [`STORAGE_ARGS`] change.
const TEMPLATE_FORMAT: u32 = 1;

/// InnoDB settings shared by the template's bootstrap and every server (file
/// sizes must agree): small files so the template copies fast, no native AIO
/// or O_DIRECT (neither works on tmpfs), write-but-do-not-fsync commits (a
/// commit survives [`kill`](crate::MariaDbServer::kill), not an OS crash).
pub(crate) const STORAGE_ARGS: &[&str] = &[
    "--innodb-buffer-pool-size=16M",
    "--innodb-log-file-size=16M",
    "--innodb-log-buffer-size=4M",
    "--innodb-data-file-path=ibdata1:1M:autoextend",
    "--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
    "--innodb-autoextend-increment=1",
    "--innodb-use-native-aio=0",
    "--innodb-flush-method=fsync",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--innodb-buffer-pool-load-at-startup=0",
    "--innodb-buffer-pool-dump-at-shutdown=0",
    "--performance-schema=OFF",
];

/// The MariaDB binaries this process uses.
#[derive(Debug)]
pub(crate) struct MariaDbBins {
    pub(crate) mariadbd: PathBuf,
    pub(crate) install_db: PathBuf,
    /// The `mariadb` command-line client.
    pub(crate) client: PathBuf,
    /// e.g. "10.11.19-MariaDB-0+deb12u1"
    pub(crate) version: String,
}

/// Finds the binaries in `$SLUICE_MARIADB_BINDIR`, `PATH`, `/usr/sbin`,
/// `/usr/bin`, `/usr/local/{sbin,bin}` (also under their `mysql*` names).
pub(crate) fn bins() -> Result<&'static MariaDbBins> {
    static BINS: OnceLock<std::result::Result<MariaDbBins, String>> = OnceLock::new();
    match BINS.get_or_init(|| find_bins().map_err(|e| format!("{e:#}"))) {
        Ok(b) => Ok(b),
        Err(e) => bail!("{e}"),
    }
}

fn find_bins() -> Result<MariaDbBins> {
    let missing = |what: &str| {
        format!(
            "MariaDB {what} not found (looked in $SLUICE_MARIADB_BINDIR, PATH, /usr/sbin, \
             /usr/bin, /usr/local); run scripts/install-deps.sh (Debian: mariadb-server, \
             mariadb-client)"
        )
    };
    let mariadbd =
        find_bin(&["mariadbd", "mysqld"]).with_context(|| missing("server (mariadbd)"))?;
    let install_db = find_bin(&["mariadb-install-db", "mysql_install_db"])
        .with_context(|| missing("mariadb-install-db"))?;
    let client = find_bin(&["mariadb", "mysql"]).with_context(|| missing("client (mariadb)"))?;
    let out = Command::new(&mariadbd)
        .arg("--version")
        .output()
        .with_context(|| format!("run {} --version", mariadbd.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)"
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "Ver")
        .nth(1)
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .with_context(|| format!("unexpected `mariadbd --version` output: {text:?}"))?
        .to_string();
    Ok(MariaDbBins {
        mariadbd,
        install_db,
        client,
        version,
    })
}

fn find_bin(names: &[&str]) -> Option<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("SLUICE_MARIADB_BINDIR") {
        dirs.push(PathBuf::from(d));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.extend(
        ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
            .iter()
            .map(PathBuf::from),
    );
    names
        .iter()
        .flat_map(|n| dirs.iter().map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// `--user=root` when we are root (mariadbd and the bootstrap refuse to run as
/// root without it); nothing otherwise, when they run as ourselves.
pub(crate) fn user_arg() -> Option<&'static str> {
    is_root().then_some("--user=root")
}

/// Removes client/server environment variables inherited from the caller that
/// could redirect or alter our commands (MYSQL_PWD, MYSQL_HOST, MYSQL_UNIX_PORT, ...).
pub(crate) fn scrub_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        if key_str.starts_with("MYSQL") || key_str.starts_with("MARIADB") {
            cmd.env_remove(key);
        }
    }
    cmd.env("LC_ALL", "C");
}

/// Fills `data` (which must not exist) with fresh system tables: template
/// copy, or `mariadb-install-db` when templates are disabled.
pub(crate) fn create_data_dir(data: &Path) -> Result<()> {
    let bins = bins()?;
    if !templates_enabled() {
        let parent = data.parent().context("data dir has no parent")?;
        return install(bins, data, parent);
    }
    let uid = {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() }
    };
    let version = file_name_safe(&bins.version);
    let name = format!("sluice-testkit-mariadb{version}-t{TEMPLATE_FORMAT}-u{uid}");
    let template = cached(&name, |work| {
        install(bins, &work.join("data"), work)?;
        Ok(format!("{}\n", bins.version))
    })?;
    copy_dir(&template.join("data"), data).context("copy the MariaDB template data dir")
}

/// SQL run by the bootstrap after the system tables exist: database `test`,
/// and only the root accounts the servers use.
const BOOTSTRAP_SQL: &str = "\
CREATE DATABASE IF NOT EXISTS test;
DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host NOT IN ('localhost', '127.0.0.1'));
DELETE FROM mysql.proxies_priv WHERE Host NOT IN ('localhost', '127.0.0.1');
DELETE FROM mysql.db WHERE User = '';
";

/// Runs `mariadb-install-db` into `data`; `work` is a scratch dir.
fn install(bins: &MariaDbBins, data: &Path, work: &Path) -> Result<()> {
    let extra = work.join("bootstrap.sql");
    std::fs::write(&extra, BOOTSTRAP_SQL).context("write bootstrap.sql")?;
    let mut cmd = Command::new(&bins.install_db);
    scrub_env(&mut cmd);
    cmd.arg("--no-defaults")
        .arg(path_arg("--datadir=", data))
        .arg(path_arg("--extra-file=", &extra))
        // Private temporary tables: concurrent bootstraps sharing /tmp
        // have been seen to lose theirs ("Unknown table 'mysql.tmp_user_sys'").
        .arg(path_arg("--tmpdir=", work))
        .args([
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
        ])
        .args(user_arg())
        .args(STORAGE_ARGS)
        .current_dir(work);
    let out = cmd.output().context("run mariadb-install-db")?;
    let _ = std::fs::remove_file(&extra);
    check(&out, "mariadb-install-db")?;
    if !data.join("mysql").is_dir() {
        bail!(
            "mariadb-install-db left no mysql/ directory in {}",
            data.display()
        );
    }
    Ok(())
}

/// Where a server's files live inside its directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) dir: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) socket: PathBuf,
    pub(crate) pid_file: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) init_file: PathBuf,
    pub(crate) client_cnf: PathBuf,
}

impl Layout {
    pub(crate) fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_path_buf(),
            data: dir.join("data"),
            socket: dir.join("mysqld.sock"),
            pid_file: dir.join(crate::reap::MARIADB_PID_FILE),
            log: dir.join("mariadbd.log"),
            init_file: dir.join("init.sql"),
            client_cnf: dir.join("client.cnf"),
        }
    }
}

/// The `mariadbd` command line (after the program name).
pub(crate) fn server_args(
    l: &Layout,
    port: u16,
    opts: &MariaDbOptions,
    tls: Option<&TlsFiles>,
    handlersocket: Option<(u16, u16)>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--no-defaults".into()];
    args.extend(user_arg().map(OsString::from));
    args.push(path_arg("--datadir=", &l.data));
    args.push(path_arg("--socket=", &l.socket));
    args.push(path_arg("--pid-file=", &l.pid_file));
    args.push(path_arg("--log-error=", &l.log));
    args.push(path_arg("--tmpdir=", &l.dir));
    args.push(path_arg("--init-file=", &l.init_file));
    args.push(format!("--port={port}").into());
    let fixed = [
        "--bind-address=127.0.0.1",
        "--skip-name-resolve",
        "--max-allowed-packet=1G",
        "--max-connections=200",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        "--server-id=1",
    ];
    args.extend(fixed.iter().map(OsString::from));
    args.extend(STORAGE_ARGS.iter().map(OsString::from));
    args.push(format!("--local-infile={}", u8::from(opts.local_infile)).into());
    if opts.binlog {
        args.extend(["--log-bin=mysql-bin", "--binlog-format=ROW"].map(OsString::from));
    } else {
        args.push("--skip-log-bin".into());
    }
    if let Some(t) = tls {
        args.push(path_arg("--ssl-ca=", &t.ca_cert));
        args.push(path_arg("--ssl-cert=", &t.server_cert));
        args.push(path_arg("--ssl-key=", &t.server_key));
    }
    if let Some((read, write)) = handlersocket {
        // Debian's build starts with a secret of its own unless both are set: empty
        // turns authentication off.
        args.extend(
            [
                "--plugin-maturity=beta".to_string(),
                "--plugin-load-add=handlersocket".to_string(),
                "--handlersocket-address=127.0.0.1".to_string(),
                format!("--handlersocket-port={read}"),
                format!("--handlersocket-port-wr={write}"),
                "--handlersocket-plain-secret=".to_string(),
                "--handlersocket-plain-secret-wr=".to_string(),
            ]
            .map(OsString::from),
        );
    }
    args.extend(opts.extra_args.iter().map(OsString::from));
    args
}

/// The `--init-file` every start runs before accepting connections: gives
/// both root accounts `password` (kept out of the binlog).
pub(crate) fn init_sql(password: &str) -> String {
    let pw = quote_str(password);
    format!(
        "SET sql_log_bin = 0;\n\
         CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';\n\
         GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;\n\
         ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD({pw});\n\
         ALTER USER 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD({pw});\n"
    )
}

fn path_arg(flag: &str, path: &Path) -> OsString {
    let mut s = OsString::from(flag);
    s.push(path);
    s
}

/// A random 24-character alphanumeric password.
pub(crate) fn random_password() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut buf = [0u8; 24];
    // SAFETY: `buf` is a live, writable buffer of the given length.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if usize::try_from(n).ok() != Some(buf.len()) {
        use std::hash::{BuildHasher, Hasher};
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for chunk in buf.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(nanos);
            h.write_u32(std::process::id());
            chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
        }
    }
    buf.iter()
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// A MariaDB string literal (backslash escapes on, the default SQL mode).
pub(crate) fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// A backquoted MariaDB identifier.
pub(crate) fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote_str(r"it's a \ "), r"'it''s a \\ '");
        assert_eq!(quote_ident("a`b"), "`a``b`");
    }

    #[test]
    fn passwords_are_random_alphanumerics() {
        let a = random_password();
        assert_eq!(a.len(), 24);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, random_password());
    }

    #[test]
    fn args_follow_options() {
        let l = Layout::new(Path::new("/x"));
        let opts = MariaDbOptions {
            tls: false,
            local_infile: false,
            binlog: true,
            extra_args: vec!["--plugin-maturity=beta".to_string()],
            handlersocket: false,
        };
        let args: Vec<String> = server_args(&l, 4242, &opts, None, None)
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[0], "--no-defaults");
        for want in [
            "--port=4242",
            "--socket=/x/mysqld.sock",
            "--datadir=/x/data",
            "--local-infile=0",
            "--log-bin=mysql-bin",
            "--binlog-format=ROW",
            "--max-allowed-packet=1G",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
        assert!(!args.iter().any(|a| a.starts_with("--ssl")));
        assert_eq!(
            args.last().map(String::as_str),
            Some("--plugin-maturity=beta")
        );
    }
}
