//! TLS settings of the SQL backends, read from URL options with one vocabulary for
//! PostgreSQL and MySQL/MariaDB (see [`SqlBackendBuilder`](super::SqlBackendBuilder)).
//!
//! | option | meaning |
//! |---|---|
//! | `sslmode` | `disable`, `prefer`, `require`, `verify-ca` or `verify-full` (libpq's meanings, below) |
//! | `ca` (or `sslrootcert`) | PEM file of the CA certificates to trust |
//! | `cert` (or `sslcert`), `key` (or `sslkey`) | PEM files of a client certificate and its key, both or neither |
//!
//! * `disable`: plaintext. The default when no other TLS option is given (also where the
//!   server offers TLS), so a URL without TLS options behaves as before TLS was built in.
//! * `prefer`: TLS when the server offers it, else plaintext (the only mode that ever falls
//!   back to plaintext).
//! * `require`: TLS or fail. Without `ca` the server's certificate is not checked (encryption
//!   without authentication, as in libpq); with `ca` its chain is checked as in `verify-ca`.
//! * `verify-ca`: TLS, the certificate chain must lead to `ca` (default: the platform's roots
//!   for PostgreSQL, the Mozilla roots for MySQL) and be valid now; the host name is not
//!   checked.
//! * `verify-full`: `verify-ca`, and the host (name or IP address) of the URL must be one the
//!   certificate names. The default when `ca`, `cert` or `key` is given without `sslmode`.
//!
//! A TLS option with `sslmode=disable`, an unreadable file or one without a PEM certificate
//! (`ca`, `cert`) or key (`key`) is an [`Error::InvalidConfig`] naming the option; TLS
//! without the Cargo feature `tls` is an [`Error::InvalidConfig`] naming `sslmode`. A failed
//! handshake (unknown CA, expired certificate, wrong host name) fails with [`Error::Tls`]
//! naming the [`TlsFailure`](crate::TlsFailure).

#![cfg_attr(
    not(all(feature = "tls", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]

use crate::backends::options;
use crate::backends::BackendUrl;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The URL options read here, for `check_params`.
pub(crate) const OPTIONS: [&str; 7] = [
    "sslmode",
    "ca",
    "sslrootcert",
    "cert",
    "sslcert",
    "key",
    "sslkey",
];

/// The other name of a TLS option (`ca` ↔ `sslrootcert`, `cert` ↔ `sslcert`, `key` ↔
/// `sslkey`); `sslmode` has none.
pub(crate) fn alias(option: &str) -> &'static str {
    match option {
        "ca" => "sslrootcert",
        "sslrootcert" => "ca",
        "cert" => "sslcert",
        "sslcert" => "cert",
        "key" => "sslkey",
        "sslkey" => "key",
        _ => "sslmode",
    }
}

/// How a connection uses TLS (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum SslMode {
    /// Plaintext.
    #[default]
    Disable,
    /// TLS if the server offers it.
    Prefer,
    /// TLS; the certificate is checked only when a CA file is given.
    Require,
    /// TLS; the chain is checked, the host name is not.
    VerifyCa,
    /// TLS; the chain and the host name are checked.
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Result<Self> {
        Ok(match v {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(Error::config(
                    "sslmode",
                    format!(
                        "{} is not one of disable, prefer, require, verify-ca, verify-full",
                        options::quote(v)
                    ),
                ))
            }
        })
    }

    /// Whether the server's certificate chain is checked (given `ca` or not).
    pub(crate) fn verifies(self, has_ca: bool) -> bool {
        match self {
            SslMode::Disable => false,
            SslMode::Prefer | SslMode::Require => has_ca,
            SslMode::VerifyCa | SslMode::VerifyFull => true,
        }
    }
}

/// A PEM file named by an option, read (and checked) when the URL was parsed.
#[derive(Clone)]
pub(crate) struct PemFile {
    /// The option that named it (`ca` or `sslrootcert`, …), for errors.
    pub(crate) option: &'static str,
    pub(crate) path: PathBuf,
    pub(crate) pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the contents: a key file holds a secret.
        write!(f, "{}={:?}", self.option, self.path)
    }
}

/// The TLS settings of one SQL URL.
#[derive(Clone, Debug, Default)]
pub(crate) struct SqlTls {
    /// Whether any TLS option was given (even `sslmode=disable`).
    pub(crate) given: bool,
    pub(crate) mode: SslMode,
    pub(crate) ca: Option<PemFile>,
    /// Client certificate and key.
    pub(crate) client: Option<(PemFile, PemFile)>,
}

/// The value of option `name` or its `alias` (not both).
fn either<'u>(
    u: &'u BackendUrl,
    name: &'static str,
    alias: &'static str,
) -> Result<Option<(&'static str, &'u str)>> {
    match (u.param(name), u.param(alias)) {
        (Some(_), Some(_)) => Err(Error::config(
            alias,
            format!("give `{name}` or `{alias}`, not both"),
        )),
        (Some(v), None) => Ok(Some((name, v))),
        (None, Some(v)) => Ok(Some((alias, v))),
        (None, None) => Ok(None),
    }
}

/// Reads the PEM file of option `option`; `what` says what it must hold.
fn read(option: &'static str, path: &str) -> Result<PemFile> {
    if path.is_empty() {
        return Err(Error::config(option, "needs the path of a PEM file"));
    }
    let key = matches!(option, "key" | "sslkey");
    let pem = crate::backends::pem::read(option, Path::new(path), key)?;
    Ok(PemFile {
        option,
        path: PathBuf::from(path),
        pem,
    })
}

impl SqlTls {
    /// Reads the TLS options of `u` (see the module documentation).
    pub(crate) fn from_url(u: &BackendUrl) -> Result<Self> {
        let ca = either(u, "ca", "sslrootcert")?;
        let cert = either(u, "cert", "sslcert")?;
        let key = either(u, "key", "sslkey")?;
        let files = [ca, cert, key];
        let given = u.param("sslmode").is_some() || files.iter().any(Option::is_some);
        let mode = match u.param("sslmode") {
            Some(v) => SslMode::parse(v)?,
            None if files.iter().any(Option::is_some) => SslMode::VerifyFull,
            None => SslMode::Disable,
        };
        if mode == SslMode::Disable {
            if let Some((name, _)) = files.iter().flatten().next() {
                return Err(Error::config(
                    *name,
                    "a TLS option needs an sslmode other than disable",
                ));
            }
            return Ok(SqlTls {
                given,
                ..SqlTls::default()
            });
        }
        if !cfg!(feature = "tls") {
            return Err(Error::config(
                "sslmode",
                "TLS needs the `tls` feature of simba-lease",
            ));
        }
        let ca = ca.map(|(o, p)| read(o, p)).transpose()?;
        let client = match (cert, key) {
            (Some((co, cp)), Some((ko, kp))) => Some((read(co, cp)?, read(ko, kp)?)),
            (None, None) => None,
            (Some((co, _)), None) => {
                return Err(Error::config(co, "a client certificate needs `key`"))
            }
            (None, Some((ko, _))) => return Err(Error::config(ko, "a client key needs `cert`")),
        };
        Ok(SqlTls {
            given,
            mode,
            ca,
            client,
        })
    }
}

/// The rustls pieces: the crypto provider and the certificate verifiers for each mode.
#[cfg(feature = "tls")]
pub(crate) mod rustls_config {
    use super::{SqlTls, SslMode};
    use crate::error::{Error, Result};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
    use rustls::{Error as TlsError, SignatureScheme};
    use std::sync::Arc;

    /// Installs ring as the process's default rustls provider if none is (the `mysql`
    /// crate builds its `ClientConfig` with the default one).
    pub(crate) fn install_provider() {
        if CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }

    /// Checks the chain only: a certificate valid for another host name is accepted
    /// (`verify-ca`).
    #[derive(Debug)]
    struct ChainOnly(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, TlsError> {
            // webpki checks the chain (issuer, validity period, usage) before the name, so a
            // name error means the chain itself was accepted.
            match self
                .0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Err(TlsError::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
            self.0.verify_tls12_signature(message, cert, dss)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
            self.0.verify_tls13_signature(message, cert, dss)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }

    /// Accepts any certificate (`prefer`/`require` without `ca`, libpq's meaning): the
    /// connection is encrypted, the server not authenticated. The handshake's signatures are
    /// still checked against the certificate the server sent.
    #[derive(Debug)]
    struct Unverified(Arc<CryptoProvider>);

    impl ServerCertVerifier for Unverified {
        fn verify_server_cert(
            &self,
            _end_entity: &CertificateDer<'_>,
            _intermediates: &[CertificateDer<'_>],
            _server_name: &ServerName<'_>,
            _ocsp: &[u8],
            _now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, TlsError> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
            verify_tls12_signature(
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
        ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
            verify_tls13_signature(
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

    /// The roots to check a chain against: `ca`, else the platform's.
    fn roots(tls: &SqlTls) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        match &tls.ca {
            Some(ca) => {
                for c in CertificateDer::pem_slice_iter(&ca.pem) {
                    let c = c.map_err(|e| Error::config(ca.option, format!("bad PEM: {e}")))?;
                    roots.add(c).map_err(|e| {
                        Error::config(ca.option, format!("bad CA certificate: {e}"))
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(Error::config(
                        "ca",
                        "the platform has no CA certificates: give `ca` (or `sslmode=require`)",
                    ));
                }
            }
        }
        Ok(roots)
    }

    /// The rustls client configuration for `tls` (whose mode is not `disable`).
    pub(crate) fn client_config(tls: &SqlTls) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = if tls.mode.verifies(tls.ca.is_some()) {
            let webpki = WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(tls)?),
                provider.clone(),
            )
            .build()
            .map_err(|e| Error::config("ca", format!("no usable CA certificate: {e}")))?;
            if tls.mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        } else {
            Arc::new(Unverified(provider.clone()))
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::config("sslmode", format!("TLS set-up failed: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &tls.client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(&cert.pem)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::config(cert.option, format!("bad PEM: {e}")))?;
                let k = PrivateKeyDer::from_pem_slice(&key.pem)
                    .map_err(|e| Error::config(key.option, format!("bad PEM: {e}")))?;
                builder.with_client_auth_cert(chain, k).map_err(|e| {
                    Error::config(
                        cert.option,
                        format!("the client certificate was refused: {e}"),
                    )
                })?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

/// PostgreSQL over rustls: the `postgres` crate's connector traits on `tokio-rustls`.
#[cfg(all(feature = "tls", feature = "postgres"))]
pub(crate) mod pg {
    use ::postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
    use rustls::pki_types::{InvalidDnsNameError, ServerName};
    use rustls::ClientConfig;
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    /// Makes one TLS connector per host the `postgres` crate connects to.
    #[derive(Clone)]
    pub(crate) struct MakeRustls(pub(crate) Arc<ClientConfig>);

    impl<S> MakeTlsConnect<S> for MakeRustls
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type TlsConnect = RustlsConnect;
        type Error = InvalidDnsNameError;

        fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, Self::Error> {
            // An IP address is checked against the certificate's IP addresses, a name
            // against its DNS names.
            let name = ServerName::try_from(domain)?.to_owned();
            Ok(RustlsConnect {
                config: self.0.clone(),
                name,
            })
        }
    }

    /// The TLS handshake with one host.
    pub(crate) struct RustlsConnect {
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    }

    impl<S> TlsConnect<S> for RustlsConnect
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        type Stream = RustlsStream<S>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

        fn connect(self, stream: S) -> Self::Future {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            Box::pin(async move {
                connector
                    .connect(self.name, stream)
                    .await
                    .map(|s| RustlsStream(Box::new(s)))
            })
        }
    }

    /// A TLS stream to the server.
    pub(crate) struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut *self.get_mut().0).poll_read(cx, buf)
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut *self.get_mut().0).poll_write(cx, buf)
        }
        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut *self.get_mut().0).poll_flush(cx)
        }
        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut *self.get_mut().0).poll_shutdown(cx)
        }
        fn poll_write_vectored(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[io::IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut *self.get_mut().0).poll_write_vectored(cx, bufs)
        }
        fn is_write_vectored(&self) -> bool {
            self.0.is_write_vectored()
        }
    }

    impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
        /// `tls-server-end-point` (RFC 5929) of the server's certificate, so SCRAM runs as
        /// SCRAM-SHA-256-PLUS where the server offers it: the password exchange is then bound
        /// to this TLS session. None for a certificate whose signature names no usable hash
        /// (e.g. Ed25519, RSA-PSS): plain SCRAM-SHA-256 then.
        fn channel_binding(&self) -> ChannelBinding {
            let (_, conn) = self.0.get_ref();
            conn.peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| end_point(c.as_ref()))
                .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
        }
    }

    /// `tls-server-end-point` of a DER certificate: its hash with the hash of its signature
    /// algorithm (MD5 and SHA-1 count as SHA-256).
    pub(super) fn end_point(cert: &[u8]) -> Option<Vec<u8>> {
        let alg = signature_hash(cert)?;
        Some(ring::digest::digest(alg, cert).as_ref().to_vec())
    }

    /// One DER TLV: tag, contents, the bytes after it; `None` on anything malformed.
    fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = b.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n]
                .iter()
                .fold(0usize, |acc, &x| (acc << 8) | usize::from(x));
            (len, &rest[n..])
        };
        if rest.len() < len {
            return None;
        }
        Some((tag, &rest[..len], &rest[len..]))
    }

    /// The digest for the certificate's `signatureAlgorithm` (RFC 5929 section 4.1).
    fn signature_hash(cert: &[u8]) -> Option<&'static ring::digest::Algorithm> {
        const SEQUENCE: u8 = 0x30;
        const OID: u8 = 0x06;
        let (SEQUENCE, body, _) = tlv(cert)? else {
            return None;
        };
        let (SEQUENCE, _tbs, rest) = tlv(body)? else {
            return None;
        };
        let (SEQUENCE, alg, _) = tlv(rest)? else {
            return None;
        };
        let (OID, oid, _) = tlv(alg)? else {
            return None;
        };
        const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
        const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
        const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
        use ring::digest::{SHA256, SHA384, SHA512};
        match oid {
            o if o == ECDSA_SHA1 => Some(&SHA256),
            [p @ .., last] if p == RSA => match last {
                // md5, sha1, sha256 WithRSAEncryption
                0x04 | 0x05 | 0x0b => Some(&SHA256),
                0x0c => Some(&SHA384),
                0x0d => Some(&SHA512),
                _ => None,
            },
            [p @ .., last] if p == ECDSA => match last {
                0x02 => Some(&SHA256),
                0x03 => Some(&SHA384),
                0x04 => Some(&SHA512),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(url: &str) -> Result<SqlTls> {
        SqlTls::from_url(&BackendUrl::parse(url).unwrap())
    }

    fn setting(r: Result<SqlTls>) -> String {
        match r {
            Err(Error::InvalidConfig { setting, .. }) => setting,
            other => panic!("{other:?}"),
        }
    }

    #[cfg(all(feature = "tls", feature = "postgres"))]
    #[test]
    fn channel_binding_hash_follows_the_signature_algorithm() {
        // Certificate ::= SEQUENCE { tbs SEQUENCE, signatureAlgorithm SEQUENCE { OID }, … }
        let cert = |oid: &[u8]| {
            let mut alg = vec![0x06, oid.len() as u8];
            alg.extend_from_slice(oid);
            let mut body = vec![0x30, 0x00, 0x30, alg.len() as u8];
            body.extend(alg);
            let mut c = vec![0x30, body.len() as u8];
            c.extend(body);
            c
        };
        let rsa = |last: u8| cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, last]);
        let ecdsa = |last: u8| cert(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, last]);
        let len = |c: Vec<u8>| pg::end_point(&c).map(|h| h.len());
        assert_eq!(len(rsa(0x0b)), Some(32));
        assert_eq!(len(rsa(0x05)), Some(32));
        assert_eq!(len(rsa(0x0c)), Some(48));
        assert_eq!(len(rsa(0x0d)), Some(64));
        assert_eq!(len(ecdsa(0x02)), Some(32));
        assert_eq!(len(ecdsa(0x03)), Some(48));
        // RSA-PSS (hash in the parameters) and Ed25519: no binding.
        assert_eq!(len(rsa(0x0a)), None);
        assert_eq!(len(cert(&[0x2b, 0x65, 0x70])), None);
        // Malformed input: no binding, no panic.
        for bad in [
            &[][..],
            &[0x30],
            &[0x30, 0x85, 1, 2, 3, 4, 5],
            &[0x30, 0x05, 0x30],
        ] {
            assert_eq!(pg::end_point(bad), None);
        }
    }

    #[test]
    fn modes_and_defaults() {
        assert_eq!(tls("postgres://u@h/db").unwrap().mode, SslMode::Disable);
        assert_eq!(
            tls("postgres://u@h/db?sslmode=disable").unwrap().mode,
            SslMode::Disable
        );
        assert_eq!(setting(tls("postgres://u@h/db?sslmode=allow")), "sslmode");
        assert_eq!(
            setting(tls("postgres://u@h/db?sslmode=VERIFY-FULL")),
            "sslmode"
        );
        if cfg!(feature = "tls") {
            for (m, mode) in [
                ("prefer", SslMode::Prefer),
                ("require", SslMode::Require),
                ("verify-ca", SslMode::VerifyCa),
                ("verify-full", SslMode::VerifyFull),
            ] {
                assert_eq!(
                    tls(&format!("mysql://u@h/db?sslmode={m}")).unwrap().mode,
                    mode
                );
            }
        } else {
            assert_eq!(setting(tls("postgres://u@h/db?sslmode=require")), "sslmode");
        }
    }

    #[test]
    fn files_are_checked_and_named() {
        assert_eq!(
            setting(tls("postgres://u@h/db?sslmode=disable&ca=/nonexistent.pem")),
            "ca"
        );
        assert_eq!(
            setting(tls("postgres://u@h/db?sslmode=disable&sslkey=/k.pem")),
            "sslkey"
        );
        if !cfg!(feature = "tls") {
            return;
        }
        assert_eq!(setting(tls("postgres://u@h/db?ca=/nonexistent.pem")), "ca");
        assert_eq!(
            setting(tls("postgres://u@h/db?sslrootcert=/nonexistent.pem")),
            "sslrootcert"
        );
        assert_eq!(
            setting(tls("postgres://u@h/db?ca=a&sslrootcert=b")),
            "sslrootcert"
        );
        let dir = std::env::temp_dir().join(format!("simba-sqltls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let j = junk.display();
        assert_eq!(setting(tls(&format!("postgres://u@h/db?ca={j}"))), "ca");
        assert_eq!(
            setting(tls(&format!("postgres://u@h/db?sslcert={j}&sslkey={j}"))),
            "sslcert"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
