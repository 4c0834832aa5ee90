//! TLS to ZooKeeper's secure client port (feature `tls`): the PEM files of the `ca`, `cert`
//! and `key` options, the `zookeeper-client` TLS options built from them, and a diagnosing
//! handshake of our own.
//!
//! `zookeeper-client` retries a failed TLS handshake as a lost connection until its deadline,
//! without saying why; so the backend first shakes hands itself (rustls with the `ring`
//! provider, the same roots, client certificate and host-name check) when it is built and
//! whenever a connect fails, and reports rustls's reason (unknown CA, expired certificate,
//! wrong host name, a client certificate the server refused) as [`Error::Tls`].

use crate::error::{Error, Result, TlsFailure};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{ErrorKind, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// The operation named by handshake failures.
pub(super) const CONNECTING: &str = "connecting to ZooKeeper over TLS";

/// The most a diagnosing handshake waits for one server (connect and handshake).
const PER_SERVER: Duration = Duration::from_secs(2);

/// The checked TLS material of a backend.
pub(super) struct ZkTls {
    /// For `zookeeper-client`.
    pub(super) options: zk::TlsOptions,
    /// The same trust and identity for our diagnosing handshakes.
    config: Arc<rustls::ClientConfig>,
    /// `(host, port)` of every server, as `zookeeper-client` reads the connect string.
    endpoints: Vec<(String, u16)>,
}

/// Reads the PEM file of `option` (`ca`, `cert` or `key`) and checks that it holds at least
/// one certificate (`ca`, `cert`) or a private key (`key`).
fn read_pem(option: &str, path: &str) -> Result<String> {
    let bytes = crate::backends::pem::read(option, std::path::Path::new(path), option == "key")?;
    String::from_utf8(bytes)
        .map_err(|_| Error::config(option, format!("{path:?} is not UTF-8 text")))
}

/// Standard base64 with padding (PEM bodies).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The platform's root certificates as PEM (`zookeeper-client` takes its CA as PEM text).
fn platform_roots() -> Result<String> {
    let found = rustls_native_certs::load_native_certs();
    let mut pem = String::new();
    for cert in &found.certs {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in base64(cert.as_ref()).as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    if found.certs.is_empty() {
        return Err(Error::config(
            "ca",
            "no CA file given and no root certificates found on this platform",
        ));
    }
    Ok(pem)
}

/// The endpoints of a connect string (`host:port,…`, `[v6]:port`, `tcp+tls://` prefixes) as
/// `zookeeper-client` reads them; refuses what it would not send over TLS (`tcp://`) and host
/// names rustls cannot check.
fn endpoints(connect: &str) -> Result<Vec<(String, u16)>> {
    endpoints_of(connect, true)
}

/// [`endpoints`]; without `tls`, also those of `tcp://` entries.
fn endpoints_of(connect: &str, tls: bool) -> Result<Vec<(String, u16)>> {
    let bad = |why: String| Error::config("connect", why);
    let mut out = Vec::new();
    // No trimming: `zookeeper-client` takes the host as written, and panics on a host name
    // rustls refuses, so every host is checked exactly as the client will see it.
    for entry in connect.split(',') {
        let entry = match entry.strip_prefix("tcp://") {
            Some(rest) if !tls => rest,
            _ => entry,
        };
        if entry.starts_with("tcp://") {
            return Err(bad(format!(
                "{entry:?}: `tcp://` is plaintext; TLS connects to every server over TLS"
            )));
        }
        let entry = entry.strip_prefix("tcp+tls://").unwrap_or(entry);
        let hostport = entry.split('/').next().unwrap_or(entry);
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            match rest.split_once(']') {
                Some((h, "")) => (h, ""),
                Some((h, p)) if p.starts_with(':') => (h, &p[1..]),
                _ => return Err(bad(format!("{hostport:?} is not a host[:port]"))),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, p),
                None => (hostport, ""),
            }
        };
        let port = if port.is_empty() {
            2181
        } else {
            match port.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(bad(format!("{hostport:?} has a bad port"))),
            }
        };
        if ServerName::try_from(host).is_err() {
            return Err(bad(format!(
                "{host:?} is not a host name or IP address a certificate can name"
            )));
        }
        out.push((host.to_owned(), port));
    }
    Ok(out)
}

impl ZkTls {
    /// Reads and checks the files; `connect` is the backend's connect string.
    pub(super) fn new(
        connect: &str,
        ca: Option<&str>,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> Result<Self> {
        let endpoints = endpoints(connect)?;
        let ca_pem = match ca {
            Some(path) => read_pem("ca", path)?,
            None => platform_roots()?,
        };
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((read_pem("cert", c)?, read_pem("key", k)?)),
            (None, None) => None,
            (Some(_), None) => return Err(Error::config("key", "`cert` needs `key`")),
            (None, Some(_)) => return Err(Error::config("cert", "`key` needs `cert`")),
        };
        let mut options = zk::TlsOptions::new()
            .with_pem_ca(&ca_pem)
            .map_err(|e| Error::config("ca", format!("unusable CA certificates: {e}")))?;
        if let Some((c, k)) = &identity {
            options = options
                .with_pem_identity(c, k)
                .map_err(|e| Error::config("key", format!("unusable client certificate: {e}")))?;
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
            // Like `zookeeper-client`: certificates rustls cannot use as roots are skipped.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            return Err(Error::config("ca", "no usable CA certificate"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| super::failure::error("configuring TLS", e))?
            .with_root_certificates(roots);
        let config = match &identity {
            None => builder.with_no_client_auth(),
            Some((c, k)) => {
                let chain: Vec<_> = CertificateDer::pem_slice_iter(c.as_bytes())
                    .flatten()
                    .collect();
                let key = PrivateKeyDer::from_pem_slice(k.as_bytes())
                    .map_err(|e| Error::config("key", format!("unusable private key: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::config("key", format!("does not fit `cert`: {e}")))?
            }
        };
        install_ring();
        Ok(ZkTls {
            options,
            config: Arc::new(config),
            endpoints,
        })
    }

    /// Shakes hands with every server until one succeeds, within `limit` in all and
    /// [`PER_SERVER`] for each (a server slower than that is not diagnosed). Returns the
    /// failure when no server completed a handshake and at least one refused it (servers that
    /// cannot be reached do not count: the client's own connect then reports them). With
    /// `linger`, waits that long after a handshake for an alert (a server that refuses the
    /// client's certificate says so only after the handshake, in TLS 1.3).
    pub(super) fn diagnose(&self, limit: Duration, linger: Option<Duration>) -> Option<Error> {
        let deadline = crate::backends::options::deadline(limit);
        let mut failure = None;
        for (host, port) in &self.endpoints {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.handshake(host, *port, left.min(PER_SERVER), linger) {
                Ok(true) => return None,
                Ok(false) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        failure
    }

    /// `Ok(true)`: the handshake completed (and no alert followed within `linger`);
    /// `Ok(false)`: the server could not be reached; `Err`: TLS failed.
    fn handshake(
        &self,
        host: &str,
        port: u16,
        limit: Duration,
        linger: Option<Duration>,
    ) -> Result<bool> {
        let Some(addr) = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
        else {
            return Ok(false);
        };
        let Ok(mut sock) = TcpStream::connect_timeout(&addr, limit) else {
            return Ok(false);
        };
        let failed = |e: std::io::Error| {
            super::failure::error(
                CONNECTING,
                HandshakeFailed {
                    endpoint: format!("{host}:{port}"),
                    source: e,
                },
            )
        };
        let timeouts = sock
            .set_read_timeout(Some(limit))
            .and_then(|()| sock.set_write_timeout(Some(limit)));
        let (Ok(()), Ok(name)) = (timeouts, ServerName::try_from(host.to_owned())) else {
            return Ok(false);
        };
        let Ok(mut conn) = rustls::ClientConnection::new(self.config.clone(), name) else {
            return Ok(false);
        };
        while conn.is_handshaking() {
            match conn.complete_io(&mut sock) {
                Ok(_) => {}
                Err(e) if is_tls(&e) => return Err(failed(e)),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Err(Error::Tls {
                        operation: CONNECTING,
                        failure: TlsFailure::NotOffered,
                        source: Box::new(HandshakeFailed {
                            endpoint: format!("{host}:{port}"),
                            source: std::io::Error::new(
                                ErrorKind::UnexpectedEof,
                                "the server closed the connection during the handshake \
                                 (not a TLS port?)",
                            ),
                        }),
                    })
                }
                Err(_) => return Ok(false),
            }
        }
        if let Some(linger) = linger {
            let _ = sock.set_read_timeout(Some(linger.min(limit)));
            let mut tls = rustls::Stream::new(&mut conn, &mut sock);
            let mut buf = [0u8; 64];
            if let Err(e) = tls.read(&mut buf) {
                if is_tls(&e) {
                    return Err(failed(e));
                }
            }
        }
        Ok(true)
    }
}

/// After a plaintext connect failed: the failure to report when a server of `connect` answers
/// a TLS handshake (a secure client port), `None` otherwise. Its certificate is not trusted
/// (no roots): the handshake only shows that the server speaks TLS.
pub(super) fn plaintext_to_tls_port(connect: &str, limit: Duration) -> Option<Error> {
    let endpoints = endpoints_of(connect, false).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let config = Arc::new(config);
    let deadline = crate::backends::options::deadline(limit);
    for (host, port) in &endpoints {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if speaks_tls(&config, host, *port, left) {
            return Some(super::failure::error(
                "connecting to ZooKeeper",
                format!(
                    "{host}:{port} answers a TLS handshake: a secure client port needs a \
                     zookeeper+tls:// URL (or `tls(true)`)"
                ),
            ));
        }
    }
    None
}

/// Whether the server at `host:port` answers a TLS handshake with a certificate or an alert.
fn speaks_tls(config: &Arc<rustls::ClientConfig>, host: &str, port: u16, limit: Duration) -> bool {
    let Some(addr) = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    else {
        return false;
    };
    let Ok(mut sock) = TcpStream::connect_timeout(&addr, limit) else {
        return false;
    };
    let timeouts = sock
        .set_read_timeout(Some(limit))
        .and_then(|()| sock.set_write_timeout(Some(limit)));
    let name = ServerName::try_from(host.to_owned())
        .unwrap_or_else(|_| ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into()));
    let Ok(mut conn) = rustls::ClientConnection::new(config.clone(), name) else {
        return false;
    };
    if timeouts.is_err() {
        return false;
    }
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
            return matches!(
                inner,
                Some(rustls::Error::InvalidCertificate(_) | rustls::Error::AlertReceived(_))
            );
        }
    }
    true
}

/// Whether an I/O error carries a rustls error (a TLS failure, not a network one).
fn is_tls(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

/// Makes rustls's `ring` provider the process default unless one is installed already:
/// `zookeeper-client` builds its configuration with the default provider, and with its TLS
/// feature rustls has two providers built in, so none is chosen by itself.
fn install_ring() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is then installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A TLS handshake with one server failed; the source is rustls's reason.
#[derive(Debug)]
struct HandshakeFailed {
    endpoint: String,
    source: std::io::Error,
}

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS handshake with {} failed", self.endpoint)
    }
}

impl std::error::Error for HandshakeFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
    }

    #[test]
    fn endpoints_are_read_as_the_client_reads_them() {
        assert_eq!(
            endpoints("a:2281,tcp+tls://127.0.0.1:2282,[::1]:2283,b").unwrap(),
            [
                ("a".to_owned(), 2281),
                ("127.0.0.1".to_owned(), 2282),
                ("::1".to_owned(), 2283),
                ("b".to_owned(), 2181)
            ]
        );
        for bad in [
            "tcp://a:2281",
            "a:x",
            "a:0",
            "[::1",
            "bad host:1",
            "a_b c:1",
            " a:1",
            "a:1, b:1",
        ] {
            assert!(
                matches!(endpoints(bad), Err(Error::InvalidConfig { ref setting, .. }) if setting == "connect"),
                "{bad}"
            );
        }
    }
}
