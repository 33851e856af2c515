//! The scratch root all throwaway servers live in, and the per-machine cache of
//! template data directories that servers copy instead of initialising their
//! own (`initdb` or `mariadb-install-db` costs seconds; a copy on tmpfs costs
//! milliseconds).
//!
//! A template is `<scratch root>/<name>/` holding whatever the builder put
//! there plus a `READY` stamp. It is built under a temporary name and renamed
//! into place when complete, under an flock (`<name>.lock`) so concurrent test
//! processes do not all build it. Names carry the server version, a format
//! number and the uid, so a stale or foreign cache is never reused.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result};

/// Where throwaway directories go: `$SLUICE_TESTKIT_TMPDIR` if set, else
/// `/dev/shm` when it is a writable tmpfs with at least 2 GiB free (copying the
/// template there is several times faster than onto disk, and test data never
/// needs to reach a disk), else `/tmp`. It must be traversable by the server
/// user, which rules out e.g. `/root/tmp`.
pub(crate) fn scratch_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("SLUICE_TESTKIT_TMPDIR") {
            return PathBuf::from(dir);
        }
        if roomy_shm(Path::new("/dev/shm"), 2 << 30) {
            return PathBuf::from("/dev/shm");
        }
        PathBuf::from("/tmp")
    })
    .clone()
}

fn roomy_shm(dir: &Path, min_free: u64) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statvfs is a plain C struct; all-zero is a valid initial value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a live struct.
    let ok = unsafe {
        libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0
            && libc::statvfs(c.as_ptr(), &mut st) == 0
    };
    ok && (st.f_bavail as u64).saturating_mul(st.f_frsize as u64) >= min_free
}

/// True unless `SLUICE_TESTKIT_NO_TEMPLATE` is set (to anything but "" or "0").
pub(crate) fn templates_enabled() -> bool {
    !std::env::var("SLUICE_TESTKIT_NO_TEMPLATE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `s` reduced to characters safe in a file name (alphanumerics and dots).
pub(crate) fn file_name_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The template directory `<scratch root>/<name>`, built on first use by
/// `build`, which fills the empty work directory it is given and returns the
/// text of the `READY` stamp.
pub(crate) fn cached(name: &str, build: impl FnOnce(&Path) -> Result<String>) -> Result<PathBuf> {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());

    let root = scratch_root();
    let final_dir = root.join(name);
    if final_dir.join("READY").is_file() {
        return Ok(final_dir);
    }

    // Serialize builders across processes.
    let lock_path = root.join(format!("{name}.lock"));
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("open {}", lock_path.display()))?;
    let _flock = Flock::exclusive(&lock)?;
    if final_dir.join("READY").is_file() {
        return Ok(final_dir);
    }
    if final_dir.exists() {
        fs::remove_dir_all(&final_dir)
            .with_context(|| format!("remove incomplete {}", final_dir.display()))?;
    }

    let work = tempfile::Builder::new()
        .prefix(&format!("{name}.tmp-"))
        .tempdir_in(&root)
        .with_context(|| format!("create a temp dir in {}", root.display()))?;
    let stamp = build(work.path())?;
    fs::write(work.path().join("READY"), stamp).context("write READY")?;
    let built = work.keep();
    if let Err(e) = fs::rename(&built, &final_dir) {
        let _ = fs::remove_dir_all(&built);
        return Err(e).with_context(|| format!("rename template into {}", final_dir.display()));
    }
    Ok(final_dir)
}

/// Copies `template` (a directory) to `dest`, which must not exist.
pub(crate) fn copy_dir(template: &Path, dest: &Path) -> Result<()> {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg("--reflink=auto")
        .arg(template)
        .arg(dest)
        .output()
        .context("run cp")?;
    if !out.status.success() {
        anyhow::bail!(
            "copy {} to {} failed ({}): {}",
            template.display(),
            dest.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// An exclusive flock held until dropped.
struct Flock<'a>(&'a fs::File);

impl<'a> Flock<'a> {
    fn exclusive(file: &'a fs::File) -> Result<Self> {
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: the fd is owned by `file`, which outlives the lock.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Flock(file));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err).context("flock the template lock file");
            }
        }
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above.
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}
