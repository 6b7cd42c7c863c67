//! `StoreUrl`: a database URL whose password is a secret, like an API key.

use std::fmt;

use tokio_postgres::config::Host;

/// The replacement of a password in every text panto shows.
const REDACTED: &str = "<redacted>";

/// A `postgres://` (or `postgresql://`) URL and the connection settings it holds. The password
/// (in the URL, or from `PGPASSWORD` when the URL has none) is used only to connect: `Debug`
/// shows the URL without it, [`StoreUrl::redacted`] is what messages name, and
/// [`StoreUrl::scrub`] removes it from any text (every error of this crate passes through it).
#[derive(Clone)]
pub struct StoreUrl {
    config: tokio_postgres::Config,
    /// The secrets to remove from messages: the password as given and as it decodes.
    secrets: Vec<String>,
    redacted: String,
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StoreUrl").field(&self.redacted).finish()
    }
}

/// The password part of a URL as written (between `user:` and `@`), if any, found without
/// parsing, so that a URL the parser refuses is still scrubbed.
fn raw_password(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let userinfo = &authority[..authority.rfind('@')?];
    let password = &userinfo[userinfo.find(':')? + 1..];
    (!password.is_empty()).then_some(password)
}

/// Decodes `%XX` escapes (what the URL parser does to a password).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Replaces every secret in `text`.
fn scrub_with(secrets: &[String], text: &str) -> String {
    let mut out = text.to_owned();
    for s in secrets {
        if !s.is_empty() && out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    out
}

impl StoreUrl {
    /// Parses a `postgres://user[:password]@host[:port]/database[?options]` URL (tokio-postgres
    /// reads it; `options=-csearch_path%3Dname` puts panto's tables in schema `name`). Without
    /// a password in the URL, `PGPASSWORD` is used when set.
    ///
    /// # Errors
    /// The parser's message, scrubbed of the password, when the URL is not one.
    pub fn parse(url: &str) -> Result<StoreUrl, String> {
        let mut secrets: Vec<String> = Vec::new();
        if let Some(raw) = raw_password(url) {
            secrets.push(raw.to_owned());
            secrets.push(percent_decode(raw));
        }
        // Longest first, so that a password containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| {
                format!(
                    "{}: not a PostgreSQL URL: {}",
                    redact_raw(url, &secrets),
                    scrub_with(&secrets, &e.to_string())
                )
            })?;
        if let Some(password) = config.get_password() {
            secrets.push(String::from_utf8_lossy(password).into_owned());
        } else if let Ok(password) = std::env::var("PGPASSWORD")
            && !password.is_empty()
        {
            config.password(password.as_bytes());
            secrets.push(password);
        }
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let redacted = describe(&config);
        Ok(StoreUrl {
            config,
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

    /// The connection settings (the password among them).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }
}

/// `url` with the password it holds (`user:PASSWORD@`) replaced by `<redacted>`, without
/// parsing it: what to show of a store URL that may not even be one (`panto config`, an error
/// about a store that cannot be opened).
pub fn redact(url: &str) -> String {
    redact_raw(url, &[])
}

/// A URL that did not parse, with its password part replaced.
fn redact_raw(url: &str, secrets: &[String]) -> String {
    match raw_password(url) {
        Some(raw) => url.replacen(&format!(":{raw}@"), &format!(":{REDACTED}@"), 1),
        None => scrub_with(secrets, url),
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
