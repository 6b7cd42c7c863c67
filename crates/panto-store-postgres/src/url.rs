//! `StoreUrl`: a database URL and what it says about the connection (TLS, timeouts, settings),
//! whose password is a secret like an API key.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode as ClientSslMode};

use crate::redact::{raw_secrets, redact, scrub_with, tidy};

/// How the connection uses TLS: the `sslmode` of a URL (or `PGSSLMODE`), as libpq reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, plain otherwise; the certificate is not checked. libpq's
    /// `allow` (plain first) is read as this too.
    Prefer,
    /// TLS or no connection; the certificate is checked against a CA only when one is given
    /// (`sslrootcert`, or `~/.postgresql/root.crt`), as libpq does.
    Require,
    /// TLS, with the server's certificate signed by a trusted CA (any host name).
    VerifyCa,
    /// TLS, with the server's certificate signed by a trusted CA and naming the host.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The mode's name, as a URL spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS settings of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert`: a PEM file of CA certificates, or `system` for the platform's roots.
    pub root_cert: Option<String>,
    /// `sslcert` and `sslkey`: the client certificate (PEM) and its key.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// A `postgres://` (or `postgresql://`) URL and the connection settings it holds. The password
/// (in the URL, or from `PGPASSWORD` when the URL has none) is used only to connect: `Debug`
/// shows the URL without it, [`StoreUrl::redacted`] is what messages name, and
/// [`StoreUrl::scrub`] removes it from any text (every error of this crate passes through it).
///
/// Besides what tokio-postgres reads, the URL may say `sslmode=disable|allow|prefer|require|
/// verify-ca|verify-full`, `sslrootcert=PATH|system`, `sslcert=PATH`, `sslkey=PATH`, and
/// `options=-c NAME=VALUE ...`; `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY` and
/// `PGCONNECT_TIMEOUT` apply when the URL does not say. The `options` settings are applied
/// in every transaction (`set_config(..., true)`), never sent at login, so that they hold
/// behind PgBouncer in transaction mode.
#[derive(Clone)]
pub struct StoreUrl {
    config: tokio_postgres::Config,
    tls: TlsSettings,
    settings: Vec<(String, String)>,
    /// The secrets to remove from messages: the password as given and as it decodes.
    secrets: Vec<String>,
    redacted: String,
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted).finish()
    }
}

/// The query keys read here rather than by tokio-postgres.
const OURS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey", "options"];

/// A URL split into the part tokio-postgres reads and the values of [`OURS`].
struct Split {
    rest: String,
    ours: Vec<(String, String)>,
}

/// Takes the keys of [`OURS`] out of the query of `url`.
fn split(url: &str) -> Split {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let Some(q) = url[scheme_end..].find('?').map(|i| i + scheme_end) else {
        return Split {
            rest: url.to_owned(),
            ours: Vec::new(),
        };
    };
    let mut kept = Vec::new();
    let mut ours = Vec::new();
    for pair in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((key, value)) if OURS.contains(&key) => {
                ours.push((key.to_owned(), crate::redact::percent_decode(value)));
            }
            _ => kept.push(pair),
        }
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Split { rest, ours }
}

/// The settings of a libpq `options` value: `-c NAME=VALUE` and `--NAME=VALUE`, separated by
/// spaces, a backslash escaping the next character.
fn parse_options(value: &str) -> Result<Vec<(String, String)>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let setting = if w == "-c" {
            words.next().unwrap_or_default()
        } else if let Some(s) = w.strip_prefix("-c").or_else(|| w.strip_prefix("--")) {
            s.to_owned()
        } else {
            return Err(format!(
                "options: `{w}` is not a setting; write -c NAME=VALUE"
            ));
        };
        let Some((name, value)) = setting.split_once('=') else {
            return Err(format!(
                "options: `{setting}` is not a setting; write -c NAME=VALUE"
            ));
        };
        settings.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(settings)
}

/// Where a URL's values come from when it does not say: the environment, as libpq reads it.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl StoreUrl {
    /// Parses a `postgres://user[:password]@host[:port]/database[?options]` URL (tokio-postgres
    /// reads it, but for the keys described on [`StoreUrl`]). Without a password in the URL,
    /// `PGPASSWORD` is used when set.
    ///
    /// # Errors
    /// What is wrong, naming the URL without its password (and without any piece of it: a
    /// URL that does not parse is shown with everything that could be a password replaced).
    pub fn parse(url: &str) -> Result<StoreUrl, String> {
        StoreUrl::parse_with(url, &process_env)
    }

    /// [`StoreUrl::parse`] with the environment read through `env`.
    pub(crate) fn parse_with(url: &str, env: Env<'_>) -> Result<StoreUrl, String> {
        let mut secrets = raw_secrets(url);
        tidy(&mut secrets);
        let shown = redact(url);
        let refuse = |why: String| format!("{shown}: {}", scrub_with(&secrets, &why));
        let Split { rest, ours } = split(url);
        let mut config: tokio_postgres::Config = rest.parse().map_err(|e: tokio_postgres::Error| {
            if secrets.is_empty() {
                refuse(format!("not a PostgreSQL URL: {e}"))
            } else {
                // A parser's message about a URL with a password may quote a piece of it.
                format!(
                    "{shown}: not a PostgreSQL URL (a password holding /, ?, @, # or % must be percent-encoded: %2F, %3F, %40, %23, %25)"
                )
            }
        })?;
        let misread = config.get_dbname().is_some_and(|d| d.contains('@'))
            || config
                .get_hosts()
                .iter()
                .any(|h| matches!(h, Host::Tcp(name) if name.contains('@')));
        if misread {
            return Err(format!(
                "{shown}: the URL holds an `@` after its host: a password holding /, ?, @ or # must be percent-encoded (%2F, %3F, %40, %23)"
            ));
        }
        let value = |key: &str| {
            ours.iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        let mode_text = value("sslmode").or_else(|| env("PGSSLMODE"));
        let mode = match mode_text.as_deref() {
            None => SslMode::Prefer,
            Some(m) => SslMode::parse(m).ok_or_else(|| {
                refuse(format!(
                    "sslmode={m} is not a TLS mode; use disable, allow, prefer, require, verify-ca or verify-full"
                ))
            })?,
        };
        config.ssl_mode(match mode {
            SslMode::Disable => ClientSslMode::Disable,
            SslMode::Prefer => ClientSslMode::Prefer,
            _ => ClientSslMode::Require,
        });
        let tls = TlsSettings {
            mode,
            root_cert: value("sslrootcert").or_else(|| env("PGSSLROOTCERT")),
            client_cert: value("sslcert")
                .or_else(|| env("PGSSLCERT"))
                .map(PathBuf::from),
            client_key: value("sslkey")
                .or_else(|| env("PGSSLKEY"))
                .map(PathBuf::from),
        };
        let settings = match value("options") {
            Some(options) => parse_options(&options).map_err(refuse)?,
            None => Vec::new(),
        };
        if config.get_connect_timeout().is_none()
            && let Some(secs) = env("PGCONNECT_TIMEOUT").and_then(|s| s.parse::<u64>().ok())
            && secs > 0
        {
            config.connect_timeout(Duration::from_secs(secs));
        }
        if let Some(password) = config.get_password() {
            secrets.push(String::from_utf8_lossy(password).into_owned());
        } else if let Some(password) = env("PGPASSWORD") {
            config.password(password.as_bytes());
            secrets.push(password);
        }
        tidy(&mut secrets);
        let redacted = describe(&config);
        Ok(StoreUrl {
            config,
            tls,
            settings,
            secrets,
            redacted,
        })
    }

    /// The URL without its password: `postgres://user@host:port/database`.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// `text` with the password removed wherever it appears (as given, and percent-decoded).
    pub fn scrub(&self, text: &str) -> String {
        scrub_with(&self.secrets, text)
    }

    /// How the connection uses TLS.
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode
    }

    /// The connect timeout the URL gives (`connect_timeout`, or `PGCONNECT_TIMEOUT`), if any.
    pub fn connect_timeout(&self) -> Option<Duration> {
        self.config.get_connect_timeout().copied()
    }

    /// The settings of the URL's `options`, applied in every transaction.
    pub fn settings(&self) -> &[(String, String)] {
        &self.settings
    }

    /// The connection settings (the password among them).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    pub(crate) fn tls(&self) -> &TlsSettings {
        &self.tls
    }
}

/// `postgres://user@host:port/database` from the settings: never the password, nor options
/// that could carry one.
fn describe(config: &tokio_postgres::Config) -> String {
    let user = config
        .get_user()
        .map(|u| format!("{u}@"))
        .unwrap_or_default();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(path) => path.display().to_string(),
            };
            match config.get_ports().get(i).or(config.get_ports().first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}{}/{db}", hosts.join(","))
}
