//! TLS for the load generator's logins. The server's certificate is not checked (its
//! signatures are): a benchmark measures what the handshake costs the target, and the
//! targets are throwaway processes with throwaway certificates.

use anyhow::{Context, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::{Arc, OnceLock};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Accepts any certificate; checks the handshake's signatures with the provider's
/// algorithms.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// The client configuration every TLS login shares (built once).
fn client_config() -> Result<rustls::ClientConfig> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let verifier = AnyCertificate(provider.signature_verification_algorithms);
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| {
                    let mut cfg = b
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(verifier))
                        .with_no_client_auth();
                    // Every login a full handshake: a storm measures what one costs.
                    cfg.resumption = rustls::client::Resumption::disabled();
                    cfg
                })
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(anyhow::Error::msg)
        .context("TLS client configuration")
}

/// The connector a PostgreSQL login over TLS uses.
pub fn pg() -> Result<MakeRustlsConnect> {
    Ok(MakeRustlsConnect::new(client_config()?))
}

/// The TLS options of a MySQL login.
pub fn mysql() -> mysql_async::SslOpts {
    mysql_async::SslOpts::default()
        .with_danger_accept_invalid_certs(true)
        .with_danger_skip_domain_validation(true)
}
