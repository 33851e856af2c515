//! TLS configuration for both sides: certificates towards clients, verification policy
//! towards servers. Built once from the config; handshakes happen in listener/frontend
//! and backend.

use anyhow::{Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let certs = rustls_pemfile::certs(&mut &data[..])
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing certificates in {}", path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "no certificate found in {}",
        path.display()
    );
    Ok(certs)
}

/// Server-side (towards clients) TLS from a PEM certificate chain and key.
pub fn acceptor(cert: &Path, key: &Path) -> Result<crate::stream::Acceptor> {
    let chain = certs(cert)?;
    let data = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &data[..])
        .with_context(|| format!("parsing key in {}", key.display()))?
        .with_context(|| format!("no private key found in {}", key.display()))?;
    let cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(crate::stream::Acceptor::new(cfg))
}

/// Accepts any server certificate: libpq's `sslmode=require` (encryption without
/// authentication of the server).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Client-side (towards servers) TLS: verifying against `ca` when given, else
/// encryption only.
pub fn connector(ca: Option<&Path>) -> Result<tokio_rustls::TlsConnector> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let cfg = match ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca)? {
                roots.add(c)?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
            .with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}
