//! TLS for the connection: a rustls client (the ring provider, as the HTTP adapters use)
//! configured as libpq's `sslmode` says: which certificates are checked, against which CAs,
//! and the client certificate when one is given.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::url::{SslMode, TlsSettings};

/// The connector tokio-postgres is given: rustls, configured for the URL's mode (with
/// `sslmode=disable` it is never used).
pub(crate) type Connector = MakeRustlsConnect;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where libpq looks for a file when the URL names none: `~/.postgresql/NAME`, if it exists.
fn default_file(name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql").join(name);
    path.is_file().then_some(path)
}

/// The connector for `tls`.
///
/// # Errors
/// A setting that cannot be used, worded with the setting and the file: a CA file that cannot
/// be read or holds no certificate, `verify-ca`/`verify-full` without a CA, a client key
/// others may read, a client certificate without its key.
pub(crate) fn connector(tls: &TlsSettings) -> Result<Connector, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let roots = match tls.mode {
        SslMode::Disable => None,
        _ => roots(tls)?,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (tls.mode, roots) {
        (SslMode::VerifyFull, Some(roots)) => full(roots, &provider)?,
        (SslMode::VerifyCa | SslMode::Require, Some(roots)) => {
            Arc::new(AnyName(full(roots, &provider)?))
        }
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={} checks the server's certificate, so it needs the CA that signed it: add sslrootcert=PATH (a PEM file), or sslrootcert=system for the system's CAs",
                tls.mode.as_str()
            ));
        }
        _ => Arc::new(Unchecked(provider.signature_verification_algorithms)),
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match client_identity(tls)? {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("sslcert/sslkey: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    // What libpq 17 offers, and what a server taking direct TLS (`sslnegotiation=direct`) asks.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(config))
}

/// The trusted CAs: `sslrootcert`, `system` for the platform's, or `~/.postgresql/root.crt`.
fn roots(tls: &TlsSettings) -> Result<Option<RootCertStore>, String> {
    let mut store = RootCertStore::empty();
    let path = match tls.root_cert.as_deref() {
        Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("sslrootcert=system: no CA certificate found on this system".to_owned());
            }
            return Ok(Some(store));
        }
        Some(path) => PathBuf::from(path),
        None => match default_file("root.crt") {
            Some(path) => path,
            None => return Ok(None),
        },
    };
    let fail = |e: &dyn std::fmt::Display| format!("sslrootcert {}: {e}", path.display());
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| fail(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(&e))?;
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(fail(&"no CA certificate in the file"));
    }
    Ok(Some(store))
}

fn full(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("sslrootcert: {e}"))
}

/// The client certificate and key: `sslcert` and `sslkey`, or libpq's defaults
/// (`~/.postgresql/postgresql.crt` and `.key`) when both exist.
fn client_identity(
    tls: &TlsSettings,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
    let (cert, key) = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        (Some(cert), None) => {
            let key = cert.with_extension("key");
            if !key.is_file() {
                return Err(format!(
                    "sslcert {}: no sslkey given, and no {} beside it",
                    cert.display(),
                    key.display()
                ));
            }
            (cert.clone(), key)
        }
        (None, Some(key)) => {
            return Err(format!("sslkey {}: no sslcert given for it", key.display()));
        }
        (None, None) => match (
            default_file("postgresql.crt"),
            default_file("postgresql.key"),
        ) {
            (Some(cert), Some(key)) => (cert, key),
            _ => return Ok(None),
        },
    };
    let certs = CertificateDer::pem_file_iter(&cert)
        .map_err(|e| format!("sslcert {}: {e}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslcert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "sslcert {}: no certificate in the file",
            cert.display()
        ));
    }
    check_key_mode(&key)?;
    let key =
        PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("sslkey {}: {e}", key.display()))?;
    Ok(Some((certs, key)))
}

/// A private key others may read is refused, as libpq refuses it.
fn check_key_mode(key: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(key).map_err(|e| format!("sslkey {}: {e}", key.display()))?;
        if meta.mode() & 0o077 != 0 {
            return Err(format!(
                "sslkey {}: the private key may be read by others (mode {:o}); it must be 0600 or stricter (chmod 600)",
                key.display(),
                meta.mode() & 0o777
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = key;
    Ok(())
}

/// `sslmode=verify-ca` (and `require` with a CA): the chain must lead to a trusted CA; the
/// name on the certificate is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `sslmode=prefer` and `require` without a CA: the connection is encrypted, the certificate
/// not checked (libpq's behaviour; the handshake's signatures still are).
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
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
