//! Throwaway TLS material for test servers: a fresh certificate authority and a
//! server certificate for `localhost` / `127.0.0.1` signed by it, written as PEM
//! files the database server can load (the key readable only by the server user,
//! as PostgreSQL insists).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::process::chown_to_server_user;

/// Paths of the PEM files written by [`write_server_tls`].
#[derive(Debug, Clone)]
pub(crate) struct TlsFiles {
    pub(crate) ca_cert: PathBuf,
    pub(crate) server_cert: PathBuf,
    pub(crate) server_key: PathBuf,
}

/// Generates a CA and a server certificate and writes `ca.crt`, `server.crt` and
/// `server.key` (mode 0600) into `dir`, all owned by the server user.
pub(crate) fn write_server_tls(dir: &Path) -> Result<TlsFiles> {
    write_tls(dir, true)
}

/// Like [`write_server_tls`] but the files stay ours (for servers that run as
/// this process's user, such as MariaDB's, which accepts `--user=root`).
pub(crate) fn write_own_tls(dir: &Path) -> Result<TlsFiles> {
    write_tls(dir, false)
}

fn write_tls(dir: &Path, chown: bool) -> Result<TlsFiles> {
    let ca_key = KeyPair::generate().context("generate CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).context("CA params")?;
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "sluice-testkit throwaway CA");
    ca_params.distinguished_name = ca_name;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).context("self-sign CA")?;

    let server_key = KeyPair::generate().context("generate server key")?;
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .context("server cert params")?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "localhost");
    params.distinguished_name = name;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params
        .signed_by(&server_key, &ca_cert, &ca_key)
        .context("sign server cert")?;

    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    if chown {
        chown_to_server_user(dir)?;
    }
    let files = TlsFiles {
        ca_cert: dir.join("ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
    };
    write_file(&files.ca_cert, &ca_cert.pem(), 0o644, chown)?;
    write_file(&files.server_cert, &server_cert.pem(), 0o644, chown)?;
    write_file(&files.server_key, &server_key.serialize_pem(), 0o600, chown)?;
    Ok(files)
}

fn write_file(path: &Path, contents: &str, mode: u32, chown: bool) -> Result<()> {
    fs::write(path, contents).with_context(|| format!("write {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))?;
    if chown {
        chown_to_server_user(path)?;
    }
    Ok(())
}
