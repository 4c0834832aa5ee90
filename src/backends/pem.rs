//! The PEM files named by the TLS options (`ca`, `cert`, `key` and their SQL aliases), read
//! and checked the same way on every backend before any I/O.

use crate::backends::options;
use crate::error::{Error, Result};
use std::path::Path;

/// The file `path` named by `option`: read, and checked to hold well-formed PEM
/// certificates, or a private key when `key`; [`Error::InvalidConfig`] naming `option`
/// otherwise.
pub(crate) fn read(option: &str, path: &Path, key: bool) -> Result<Vec<u8>> {
    let quoted = options::quote(&path.to_string_lossy());
    let bytes = std::fs::read(path)
        .map_err(|e| Error::config(option, format!("cannot read {quoted}: {e}")))?;
    if holds(key, &bytes) {
        return Ok(bytes);
    }
    let what = if key { "private key" } else { "certificate" };
    Err(Error::config(
        option,
        format!("{quoted} holds no PEM {what}"),
    ))
}

/// Whether `bytes` hold a PEM private key (`key`) or PEM certificates, all well-formed.
#[cfg(feature = "tls")]
fn holds(key: bool, bytes: &[u8]) -> bool {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    if key {
        PrivateKeyDer::from_pem_slice(bytes).is_ok()
    } else {
        let mut certs = CertificateDer::pem_slice_iter(bytes);
        matches!(certs.next(), Some(Ok(_))) && certs.all(|c| c.is_ok())
    }
}

/// Without rustls: the PEM labels only (TLS is refused before the files are used anyway).
#[cfg(not(feature = "tls"))]
fn holds(key: bool, bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    if key {
        text.contains("PRIVATE KEY-----")
    } else {
        text.contains("-----BEGIN CERTIFICATE-----")
    }
}
