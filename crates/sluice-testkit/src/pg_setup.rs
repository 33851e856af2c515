//! Locating the PostgreSQL binaries and producing fresh data directories.
//!
//! `initdb` costs most of a second, so the first server started on a machine
//! runs it once into a template directory shared by all test processes
//! (`<scratch root>/sluice-testkit-pg<version>-t<format>-u<uid>`, see
//! [`crate::template`]), and every server then starts from a copy of
//! it (the copy is the main cost of a start, hence the preference for a
//! tmpfs scratch root, see [`crate::template::scratch_root`]). The template holds a cluster with superuser `postgres` (password
//! [`SUPERUSER_PASSWORD`]) and an extra database `test`. Setting
//! `SLUICE_TESTKIT_NO_TEMPLATE=1` runs `initdb` for every server instead.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

use crate::process::{chown_to_server_user, server_command, server_user};
use crate::template::{cached, copy_dir, file_name_safe, templates_enabled};

/// The superuser's password in every cluster the testkit creates.
pub(crate) const SUPERUSER_PASSWORD: &str = "postgres-pw";
/// The superuser's name.
pub(crate) const SUPERUSER: &str = "postgres";
/// Bump when the template's contents change, so stale caches are not reused.
const TEMPLATE_FORMAT: u32 = 1;

/// The PostgreSQL server binaries this process uses.
#[derive(Debug)]
pub(crate) struct PgBins {
    dir: PathBuf,
    /// e.g. "15.20"
    pub(crate) version: String,
}

impl PgBins {
    pub(crate) fn bin(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Finds the binaries: `$SLUICE_PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/<N>/bin` (Debian), else `pg_config --bindir`, else the
/// directory of `initdb` on `PATH`.
pub(crate) fn bins() -> Result<&'static PgBins> {
    static BINS: OnceLock<std::result::Result<PgBins, String>> = OnceLock::new();
    match BINS.get_or_init(|| find_bins().map_err(|e| format!("{e:#}"))) {
        Ok(b) => Ok(b),
        Err(e) => bail!("{e}"),
    }
}

fn find_bins() -> Result<PgBins> {
    let dir = bin_dir_candidates()
        .into_iter()
        .find(|d| d.join("postgres").is_file() && d.join("initdb").is_file())
        .context(
            "PostgreSQL server binaries not found (looked at $SLUICE_PG_BINDIR, \
             /usr/lib/postgresql/*/bin, pg_config --bindir, PATH); run scripts/install-deps.sh",
        )?;
    let out = Command::new(dir.join("postgres"))
        .arg("--version")
        .output()
        .with_context(|| format!("run {}/postgres --version", dir.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
    let version = text
        .split_whitespace()
        .nth(2)
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .with_context(|| format!("unexpected `postgres --version` output: {text:?}"))?
        .to_string();
    Ok(PgBins { dir, version })
}

fn bin_dir_candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("SLUICE_PG_BINDIR") {
        dirs.push(PathBuf::from(d));
    }
    let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                let major = e.file_name().to_str()?.parse::<u32>().ok()?;
                Some((major, e.path().join("bin")))
            })
            .collect()
        })
        .unwrap_or_default();
    debian.sort();
    dirs.extend(debian.into_iter().rev().map(|(_, d)| d));
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&path) {
            if let Ok(real) = fs::canonicalize(d.join("initdb"))
                && let Some(parent) = real.parent()
            {
                dirs.push(parent.to_path_buf());
            }
        }
    }
    dirs
}

/// Fills `data` (which must not exist; its parent must belong to the server
/// user) with a fresh cluster: template copy, or initdb when disabled.
pub(crate) fn create_data_dir(data: &Path) -> Result<()> {
    let bins = bins()?;
    if !templates_enabled() {
        let parent = data.parent().context("data dir has no parent")?;
        return init_cluster(bins, data, parent);
    }
    let template = template_dir(bins)?;
    copy_dir(&template.join("data"), data).context("copy the template data dir")
}

/// Runs initdb into `data` and creates the `test` database (single-user mode,
/// so no server has to be started). `work` is a server-user-owned scratch dir.
fn init_cluster(bins: &PgBins, data: &Path, work: &Path) -> Result<()> {
    let pwfile = work.join("superuser.pw");
    fs::write(&pwfile, SUPERUSER_PASSWORD).context("write password file")?;
    fs::set_permissions(&pwfile, fs::Permissions::from_mode(0o600))?;
    chown_to_server_user(&pwfile)?;
    let out = server_command(&bins.bin("initdb"), work)?
        .arg("-D")
        .arg(data)
        .args([
            "-U",
            SUPERUSER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
        .output()
        .context("run initdb")?;
    let _ = fs::remove_file(&pwfile);
    check(&out, "initdb")?;

    let mut child = server_command(&bins.bin("postgres"), work)?
        .args(["--single", "-F", "-D"])
        .arg(data)
        .args(["-c", "exit_on_error=true", "postgres"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("run postgres --single")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(b"CREATE DATABASE test;\n")
            .context("write to postgres --single")?;
    }
    let out = child
        .wait_with_output()
        .context("wait for postgres --single")?;
    check(&out, "create database test (postgres --single)")?;
    if !data.join("base").is_dir() {
        bail!("initdb left no base/ directory in {}", data.display());
    }
    Ok(())
}

/// The shared template directory (containing `data/` and `READY`), built on
/// first use.
fn template_dir(bins: &'static PgBins) -> Result<PathBuf> {
    let uid = server_user()?.map_or_else(
        // SAFETY: geteuid cannot fail.
        || unsafe { libc::geteuid() },
        |u| u.uid,
    );
    let version = file_name_safe(&bins.version);
    let name = format!("sluice-testkit-pg{version}-t{TEMPLATE_FORMAT}-u{uid}");
    cached(&name, |work| {
        chown_to_server_user(work)?;
        init_cluster(bins, &work.join("data"), work)?;
        Ok(format!("{}\n", bins.version))
    })
}

/// Turns a failed command into an error carrying its output.
pub(crate) fn check(out: &Output, what: &str) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    bail!(
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
