//! The secret of a HandlerSocket listener kept in a file (`secret_file`): read at start,
//! or generated into the file when it does not exist, readable only by the user running
//! Sluice. The built-in default runs HandlerSocket requests as the server's `root`, so
//! without a secret any local account could read and write every table with root's
//! rights; with one, only those who can read the file (or are told the secret) can.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `~/...` as the home directory of the user running Sluice.
fn expand(path: &Path) -> Result<PathBuf> {
    let Ok(rest) = path.strip_prefix("~") else {
        return Ok(path.to_path_buf());
    };
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("HOME is not set, so ~ cannot be expanded")?;
    Ok(PathBuf::from(home).join(rest))
}

/// The secret in `path`, generating the file when it does not exist.
pub fn load_or_create(path: &Path) -> Result<String> {
    let path = expand(path)?;
    match std::fs::metadata(&path) {
        Ok(meta) => {
            if meta.permissions().mode() & 0o077 != 0 {
                bail!(
                    "{} can be read by other users; make it private (chmod 600)",
                    path.display()
                );
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let secret = text.trim();
            if secret.is_empty() || secret.bytes().any(|b| b < 0x20) {
                bail!(
                    "{} must hold the secret on one line, without control bytes",
                    path.display()
                );
            }
            Ok(secret.to_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(&path),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn create(path: &Path) -> Result<String> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let secret: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{secret}").with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(file = %path.display(), "generated a HandlerSocket secret");
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/hs.secret");
        let s = load_or_create(&path).unwrap();
        assert_eq!(s.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            load_or_create(&path).unwrap(),
            s,
            "the same secret next start"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = load_or_create(&path).unwrap_err().to_string();
        assert!(e.contains("other users"), "{e}");
    }
}
