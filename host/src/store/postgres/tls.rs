//! TLS to PostgreSQL: libpq's `sslmode` and `sslrootcert`, read from the connection URL,
//! with rustls.
//!
//! | `sslmode` | TLS | certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it, else plain | not checked |
//! | `require` | required | not checked (as libpq: encryption, no protection against an impostor); with a CA given, its chain is checked (libpq's `verify-ca`) |
//! | `verify-ca` | required | chain checked against the CA |
//! | `verify-full` | required | chain and host name checked |
//!
//! The CA comes from `sslrootcert=<file>` in the URL or `[store] ca_file` (PEM; one or the
//! other), else the system's trusted roots (`rustls-native-certs`, as the providers' HTTPS
//! client uses; `sslrootcert=system` says so explicitly). A CA given without an `sslmode`
//! means `verify-full`. tokio-postgres knows neither `verify-*` nor `sslrootcert`, so
//! [`split_url`] takes both out of the URL before it is parsed, and the store sets the
//! client's mode itself.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`, less `allow` (plain first, TLS if refused: never what a shared store
/// wants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer (TLS when the server \
                            offers it) or disable"
                        .into(),
                )
            }
            other => {
                return Err(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether TLS is off, optional or required. Checking the
    /// certificate is the connector's part.
    fn client_mode(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// Where the trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// A PEM file, and the setting that named it (`sslrootcert` or `store.ca_file`).
    File {
        path: PathBuf,
        named_by: &'static str,
    },
    /// The system's trusted roots.
    System,
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Roots::File { path, named_by } => {
                write!(f, "the CA certificates of {named_by} {}", path.display())
            }
            Roots::System => f.write_str("the system's trusted root certificates"),
        }
    }
}

/// The TLS settings of one store: the mode, and the CA when certificates are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    mode: SslMode,
    /// `Some` exactly when the certificate's chain is checked.
    roots: Option<Roots>,
    /// Whether the host name is checked too (`verify-full`).
    check_name: bool,
}

impl TlsSettings {
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// Sets the client's TLS mode in `config`.
    pub fn apply(&self, config: &mut tokio_postgres::Config) {
        config.ssl_mode(self.mode.client_mode());
    }

    /// The rustls connector, `None` for `disable`. Reads the CA file or the system's roots
    /// now, so a missing or empty one is an error when the store opens, naming the setting
    /// and the file.
    pub fn connector(&self) -> Result<Option<MakeRustlsConnect>, String> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match &self.roots {
            None => Arc::new(NoCertificateCheck(Arc::clone(&provider))),
            Some(roots) => {
                let store = Arc::new(load_roots(roots)?);
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(store, Arc::clone(&provider))
                        .build()
                        .map_err(|e| format!("{roots}: {e}"))?;
                Arc::new(Explained {
                    inner: webpki,
                    roots: roots.clone(),
                    mode: self.mode,
                    check_name: self.check_name,
                })
            }
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(MakeRustlsConnect::new(config)))
    }
}

/// Takes libpq's TLS options out of `url` (either form: `postgres://…?sslmode=…` or
/// `host=… sslmode=…`): the URL left for tokio-postgres, and the settings. `ca_file` is
/// `[store] ca_file`. Errors name the option at fault; none echoes the URL.
pub fn split_url(url: &str, ca_file: Option<&Path>) -> Result<(String, TlsSettings), String> {
    let (rest, mode, rootcert) = take_tls_options(url);
    let roots = match (rootcert.as_deref(), ca_file) {
        (Some(_), Some(_)) => {
            return Err("store.ca_file: the URL sets sslrootcert too; keep one of the two".into())
        }
        (Some("system"), None) => Some(Roots::System),
        (Some(""), None) => return Err("sslrootcert: empty".into()),
        (Some(path), None) => Some(Roots::File {
            path: PathBuf::from(path),
            named_by: "sslrootcert",
        }),
        (None, Some(path)) => Some(Roots::File {
            path: path.to_path_buf(),
            named_by: "store.ca_file",
        }),
        (None, None) => None,
    };
    let mode = match mode.as_deref() {
        Some(value) => SslMode::parse(value)?,
        // A CA given means it is meant to be checked.
        None if roots.is_some() => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    let roots = match (mode, roots) {
        (SslMode::Disable | SslMode::Prefer, Some(roots)) => {
            let named_by = match roots {
                Roots::File { named_by, .. } => named_by,
                Roots::System => "sslrootcert=system",
            };
            return Err(format!(
                "{named_by} is set but sslmode={} never checks the server's certificate: use \
                 sslmode=verify-full (or leave sslmode out, which means it with a CA)",
                mode.as_str()
            ));
        }
        (SslMode::Require | SslMode::VerifyCa, Some(Roots::System)) => {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full, not {}: any certificate a public \
                 CA signed would do otherwise (as libpq)",
                mode.as_str()
            ))
        }
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => Some(Roots::System),
        (_, roots) => roots,
    };
    let check_name = mode == SslMode::VerifyFull;
    Ok((
        rest,
        TlsSettings {
            mode,
            roots,
            check_name,
        },
    ))
}

/// `url` without `sslmode` and `sslrootcert`, valid or not (for naming the database).
pub fn without_tls_options(url: &str) -> String {
    take_tls_options(url).0
}

/// `url` without `sslmode` and `sslrootcert`, and their values (the last of each, as libpq).
/// A string neither form parses is returned whole, for tokio-postgres to refuse.
type Split = (String, Option<String>, Option<String>);

fn take_tls_options(url: &str) -> Split {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let params = if is_url {
        url_params(url)
    } else {
        key_value_params(url)
    };
    let Some(params) = params else {
        return (url.to_owned(), None, None);
    };
    let (mut mode, mut rootcert) = (None, None);
    let mut cut: Vec<Range<usize>> = Vec::new();
    for param in params {
        match param.key.as_str() {
            "sslmode" => mode = Some(param.value),
            "sslrootcert" => rootcert = Some(param.value),
            _ => continue,
        }
        cut.push(param.span);
    }
    let mut rest = String::with_capacity(url.len());
    let mut at = 0;
    for span in &cut {
        rest.push_str(&url[at..span.start]);
        at = span.end;
    }
    rest.push_str(&url[at..]);
    if is_url {
        // Separators left over by the cuts: `?&a=1`, `a=1&&b=2`, a trailing `?` or `&`.
        if let Some((base, query)) = rest.split_once('?') {
            let query: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
            rest = if query.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", query.join("&"))
            };
        }
    }
    (rest, mode, rootcert)
}

/// One `key=value` of a connection string, decoded, and where it is in the string.
struct Param {
    key: String,
    value: String,
    span: Range<usize>,
}

/// The query parameters of a `postgres://` URL, percent-decoded.
fn url_params(url: &str) -> Option<Vec<Param>> {
    let Some(start) = url.find('?') else {
        return Some(Vec::new());
    };
    let mut params = Vec::new();
    let mut at = start + 1;
    for part in url[start + 1..].split('&') {
        let span = at..at + part.len();
        at = span.end + 1;
        if part.is_empty() {
            continue;
        }
        let (key, value) = part.split_once('=')?;
        params.push(Param {
            key: percent_decode(key)?,
            value: percent_decode(value)?,
            span,
        });
    }
    Some(params)
}

/// `text` percent-decoded as tokio-postgres decodes the rest of the URL (with the same crate:
/// a `%` not followed by two hex digits stays as it is); `None` when the bytes are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

/// The `key = value` pairs of a libpq key-value connection string (values bare or in single
/// quotes, `\` escaping the next character), each span running to the end of its value.
fn key_value_params(text: &str) -> Option<Vec<Param>> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |i: usize| chars.get(i).map_or(text.len(), |(at, _)| *at);
    let mut params = Vec::new();
    let mut i = 0;
    loop {
        while chars.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        if i >= chars.len() {
            return Some(params);
        }
        let start = end_of(i);
        let mut key = String::new();
        while let Some(&(_, c)) = chars.get(i) {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            i += 1;
        }
        while chars.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        if key.is_empty() || chars.get(i).map(|(_, c)| *c) != Some('=') {
            return None;
        }
        i += 1;
        while chars.get(i).is_some_and(|(_, c)| c.is_whitespace()) {
            i += 1;
        }
        let mut value = String::new();
        if chars.get(i).map(|(_, c)| *c) == Some('\'') {
            i += 1;
            loop {
                match chars.get(i).map(|(_, c)| *c) {
                    None => return None,
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        value.push(chars.get(i + 1)?.1);
                        i += 2;
                    }
                    Some(c) => {
                        value.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            while let Some(&(_, c)) = chars.get(i) {
                if c.is_whitespace() {
                    break;
                }
                if c == '\\' {
                    value.push(chars.get(i + 1)?.1);
                    i += 2;
                } else {
                    value.push(c);
                    i += 1;
                }
            }
        }
        params.push(Param {
            key,
            value,
            span: start..end_of(i),
        });
    }
}

/// The trusted certificates `roots` names.
fn load_roots(roots: &Roots) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File { path, named_by } => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("{named_by} {}: {}", path.display(), pem_error(&e)))?;
            if certs.is_empty() {
                return Err(format!(
                    "{named_by} {}: no certificate in it (PEM, \"-----BEGIN CERTIFICATE-----\")",
                    path.display()
                ));
            }
            for (i, cert) in certs.into_iter().enumerate() {
                store.add(cert).map_err(|e| {
                    format!(
                        "{named_by} {}: certificate {} is not a usable CA certificate: {e}",
                        path.display(),
                        i + 1
                    )
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err(format!(
                    "no trusted root certificates found on this system to check the server's \
                     certificate ({}); set sslrootcert in the URL or store.ca_file to the \
                     server's CA",
                    if errors.is_empty() {
                        "none installed".to_owned()
                    } else {
                        errors.join("; ")
                    }
                ));
            }
        }
    }
    Ok(store)
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not PEM certificates: {other:?}"),
    }
}

/// The webpki verifier, with its refusals explained (which check, against which CA), and
/// the host name left unchecked for `verify-ca` and `require`.
#[derive(Debug)]
struct Explained {
    inner: Arc<WebPkiServerVerifier>,
    roots: Roots,
    mode: SslMode,
    check_name: bool,
}

/// A certificate refusal in words, carried inside rustls' error.
#[derive(Debug)]
struct Refusal(String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl ServerCertVerifier for Explained {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let error = match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => return Ok(verified),
            Err(rustls::Error::InvalidCertificate(e)) => e,
            Err(other) => return Err(other),
        };
        let mode = self.mode.as_str();
        let roots = &self.roots;
        // webpki checks the chain first: a name error means the chain was good.
        let text = match error {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
                if !self.check_name =>
            {
                return Ok(ServerCertVerified::assertion())
            }
            CertificateError::NotValidForNameContext { presented, .. } => format!(
                "the server's certificate is not valid for the host name {:?} the URL names \
                 (it is for {}; sslmode=verify-full checks the name: connect by one of those)",
                server_name.to_str(),
                presented
                    .iter()
                    .map(|name| plain_name(name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            CertificateError::NotValidForName => format!(
                "the server's certificate is not valid for the host name {:?} the URL names \
                 (sslmode=verify-full checks the name)",
                server_name.to_str()
            ),
            CertificateError::UnknownIssuer => format!(
                "the server's certificate is not signed by a trusted CA: it was checked \
                 against {roots} (sslmode={mode}){}",
                if *roots == Roots::System {
                    "; for a private CA set sslrootcert in the URL or store.ca_file"
                } else {
                    ""
                }
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({error}; sslmode={mode})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate is not valid yet ({error}; sslmode={mode})")
            }
            other => format!(
                "the server's certificate was refused: {other} (checked against {roots}, \
                 sslmode={mode})"
            ),
        };
        // `Error::Other` displays its cause as written (an `InvalidCertificate` would show
        // it in Debug form, escaped).
        Err(rustls::Error::Other(OtherError(Arc::new(Refusal(text)))))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A name webpki presents (`DnsName("db.internal")`, `IpAddress(10.0.0.5)`) as written in a
/// URL.
fn plain_name(name: &str) -> &str {
    for prefix in ["DnsName(\"", "IpAddress("] {
        if let Some(inner) = name.strip_prefix(prefix) {
            return inner.trim_end_matches(')').trim_end_matches('"');
        }
    }
    name
}

/// `prefer` and `require` without a CA: any certificate is accepted (libpq's behaviour:
/// encryption against eavesdroppers, no protection against an impostor). The handshake's
/// signatures are still checked, so the server holds the key of the certificate it sent.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, TlsSettings) {
        split_url(url, None).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn tls_options_leave_the_url_and_the_rest_of_it_stays() {
        let (rest, tls) = split("postgres://u:p@db:5432/x?sslmode=verify-full&application_name=a");
        assert_eq!(rest, "postgres://u:p@db:5432/x?application_name=a");
        assert_eq!(tls.mode(), SslMode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::System));
        assert!(tls.check_name);

        let (rest, tls) = split(
            "postgresql://db/x?connect_timeout=3&sslrootcert=%2Fetc%2Fca.pem&sslmode=verify-ca",
        );
        assert_eq!(rest, "postgresql://db/x?connect_timeout=3");
        assert_eq!(tls.mode(), SslMode::VerifyCa);
        assert_eq!(
            tls.roots,
            Some(Roots::File {
                path: "/etc/ca.pem".into(),
                named_by: "sslrootcert"
            })
        );
        assert!(!tls.check_name);

        let (rest, tls) = split("postgres://db/x?sslmode=disable");
        assert_eq!(rest, "postgres://db/x");
        assert_eq!(tls.mode(), SslMode::Disable);

        let (rest, tls) = split("postgres://db/x");
        assert_eq!(rest, "postgres://db/x");
        assert_eq!(tls.mode(), SslMode::Prefer, "libpq's default");
        assert_eq!(tls.roots, None);

        let (rest, tls) =
            split("host=db user=u password='a b\\'c' sslmode = require sslrootcert='/my ca.pem'");
        assert_eq!(rest, "host=db user=u password='a b\\'c'  ");
        assert_eq!(tls.mode(), SslMode::Require);
        assert_eq!(
            tls.roots,
            Some(Roots::File {
                path: "/my ca.pem".into(),
                named_by: "sslrootcert"
            }),
            "require with a CA checks its chain, as libpq"
        );
        assert!(!tls.check_name);
    }

    #[test]
    fn a_ca_means_verify_full_unless_said_otherwise() {
        let (_, tls) = split_url("postgres://db/x", Some(Path::new("/ca.pem"))).unwrap();
        assert_eq!(tls.mode(), SslMode::VerifyFull);
        assert_eq!(
            tls.roots,
            Some(Roots::File {
                path: "/ca.pem".into(),
                named_by: "store.ca_file"
            })
        );
        let (_, tls) = split("postgres://db/x?sslrootcert=system");
        assert_eq!(tls.mode(), SslMode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::System));
    }

    #[test]
    fn contradictions_are_errors_naming_the_option() {
        let cases = [
            (
                "postgres://db/x?sslmode=verify-all",
                None,
                "sslmode=\"verify-all\"",
            ),
            ("postgres://db/x?sslmode=allow", None, "sslmode=allow"),
            (
                "postgres://db/x?sslmode=prefer&sslrootcert=/ca.pem",
                None,
                "sslrootcert is set but sslmode=prefer",
            ),
            (
                "postgres://db/x?sslmode=disable",
                Some("/ca.pem"),
                "store.ca_file is set but sslmode=disable",
            ),
            (
                "postgres://db/x?sslrootcert=/a.pem",
                Some("/b.pem"),
                "store.ca_file: the URL sets sslrootcert too",
            ),
            (
                "postgres://db/x?sslmode=require&sslrootcert=system",
                None,
                "sslrootcert=system needs sslmode=verify-full",
            ),
        ];
        for (url, ca, expected) in cases {
            let err = split_url(url, ca.map(Path::new)).unwrap_err();
            assert!(err.contains(expected), "{url}: {err}");
        }
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("tamp-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.pem");
        let (_, tls) = split_url("postgres://db/x", Some(&missing)).unwrap();
        let err = tls.connector().err().expect("a missing CA file is refused");
        assert!(
            err.starts_with(&format!("store.ca_file {}: ", missing.display())),
            "{err}"
        );
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let url = format!("postgres://db/x?sslrootcert={}", empty.display());
        let (_, tls) = split(&url);
        let err = tls.connector().err().expect("an empty CA file is refused");
        assert!(
            err.contains("sslrootcert") && err.contains("no certificate in it"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn presented_names_read_as_written_in_a_url() {
        assert_eq!(plain_name("DnsName(\"db.internal\")"), "db.internal");
        assert_eq!(plain_name("IpAddress(10.0.0.5)"), "10.0.0.5");
        assert_eq!(plain_name("IpAddress(::1)"), "::1");
        assert_eq!(plain_name("something else"), "something else");
    }

    #[test]
    fn values_are_percent_decoded_as_the_client_decodes_them() {
        let (_, tls) = split("postgres://db/x?sslrootcert=%2Fca%20dir%2F100%zz.pem");
        assert_eq!(
            tls.roots,
            Some(Roots::File {
                path: "/ca dir/100%zz.pem".into(),
                named_by: "sslrootcert"
            })
        );
        // Not UTF-8: the string is left for the client to refuse.
        let (rest, tls) = split("postgres://db/x?sslrootcert=%FF");
        assert_eq!(rest, "postgres://db/x?sslrootcert=%FF");
        assert_eq!(tls.roots, None);
    }

    #[test]
    fn an_unparseable_string_is_left_for_the_client_to_refuse() {
        let (rest, tls) = split("host='unterminated sslmode=require");
        assert_eq!(rest, "host='unterminated sslmode=require");
        assert_eq!(tls.mode(), SslMode::Prefer);
    }
}
