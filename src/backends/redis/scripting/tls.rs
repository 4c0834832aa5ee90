//! TLS for `rediss://` (feature `tls`, rustls): the certificate material ([`RedisTls`]), the
//! driver's client built with it, and the diagnosis after a failed connect (a plaintext
//! `PING` telling a server that does not speak TLS from one that does not answer).

use super::ConnectOptions;
use crate::error::{Error, Result};
use std::time::Instant;

/// TLS material for `rediss://` URLs, in PEM (read from the URL's `ca`, `cert` and `key`
/// files). Empty, a `rediss://` URL trusts the platform's root certificates and sends no
/// client certificate. Its `Debug` never prints the contents.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// The CA certificates to trust instead of the platform's.
    pub ca: Option<Vec<u8>>,
    /// A client certificate (chain) and its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.client.is_none()
    }
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

/// Makes rustls's `ring` provider the process default unless one is installed already (the
/// redis crate builds its TLS configuration with the default provider).
#[cfg(feature = "tls")]
pub(super) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The redis crate's form of `tls`.
#[cfg(feature = "tls")]
pub(super) fn tls_certificates(tls: &RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: tls.ca.clone(),
    }
}

/// The certificates of `tls` were refused by the driver.
#[cfg(feature = "tls")]
pub(super) fn tls_refused(tls: &RedisTls, e: redis::RedisError) -> Error {
    let setting = if tls.client.is_some() { "cert" } else { "ca" };
    Error::config(setting, format!("the TLS certificates were refused: {e}"))
}

/// A client for `url` (`redis://` or `rediss://`) with the TLS material `tls`.
pub(super) fn open_client(url: &str, tls: &RedisTls) -> Result<redis::Client> {
    const OP: &str = "parsing the Redis URL";
    #[cfg(feature = "tls")]
    install_crypto_provider();
    if tls.is_empty() {
        return redis::Client::open(url).map_err(|e| super::super::failure::error(OP, e));
    }
    #[cfg(feature = "tls")]
    {
        redis::Client::build_with_tls(url, tls_certificates(tls)).map_err(|e| tls_refused(tls, e))
    }
    #[cfg(not(feature = "tls"))]
    Err(Error::config(
        "ca",
        "TLS certificates need the `tls` feature of simba-lease",
    ))
}

/// The settings of the diagnosis after a failed connect (the plaintext probe, the seeds one
/// by one): the connect timeout is what is left of it since `started`, but at least a quarter
/// of it, so a connect that failed takes at most 1¼ connect timeouts in all (a diagnosis with
/// the whole timeout again made an unanswering address take twice the timeout).
pub(super) fn diagnosis(opts: &ConnectOptions, started: Instant) -> ConnectOptions {
    let left = opts.connect_timeout.saturating_sub(started.elapsed());
    ConnectOptions {
        connect_timeout: left.max(opts.connect_timeout / 4),
        ..opts.clone()
    }
}

/// After a TLS connect failed: [`TlsFailure::NotOffered`](crate::TlsFailure) if the server
/// answers a plaintext `PING` (a plaintext server may wait for the end of a line the TLS
/// handshake never sends, so the handshake itself can only time out).
pub(super) fn plaintext_server(
    client: &redis::Client,
    opts: &ConnectOptions,
    operation: &'static str,
) -> Option<Error> {
    use std::io::{Read, Write};
    let redis::ConnectionAddr::TcpTls { host, port, .. } = client.get_connection_info().addr()
    else {
        return None;
    };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), *port))
        .ok()?
        .next()?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, opts.connect_timeout).ok()?;
    sock.set_read_timeout(Some(opts.connect_timeout)).ok()?;
    sock.set_write_timeout(Some(opts.connect_timeout)).ok()?;
    sock.write_all(b"PING\r\n").ok()?;
    let mut first = [0u8; 1];
    sock.read_exact(&mut first).ok()?;
    // A RESP reply: `+PONG`, or an error such as `-NOAUTH`.
    matches!(first[0], b'+' | b'-').then(|| Error::Tls {
        operation,
        failure: crate::TlsFailure::NotOffered,
        source: format!("{host}:{port} answers plaintext Redis, not TLS (use redis://)").into(),
    })
}
