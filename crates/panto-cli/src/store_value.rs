//! A store value, as `store = "..."`, `--store` and `PANTO_STORE` give it: which store it names
//! (`parse`: `jsonl`, `jsonl:DIR`, `sqlite:PATH`, `postgres://...`) and how it may be shown
//! (`redacted`: a PostgreSQL URL's password is a secret like an API key). Both the
//! configuration, which shows the value, and `stores`, which opens it, read it here.

use std::path::PathBuf;

/// The store when none is configured: JSONL files, each SESSION a path.
pub(crate) const DEFAULT: &str = "jsonl";

/// A store a configuration names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// JSONL files: SESSION is a path (relative to the working directory), or a name under
    /// the folder.
    Jsonl(PathBuf),
    /// One SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (the URL as given, password included).
    Postgres(String),
}

/// Reads a store value.
///
/// # Errors
/// A value that names no store (the message shows it without its password).
pub(crate) fn parse(value: &str) -> Result<Choice, String> {
    let value = value.trim();
    if value == "jsonl" {
        return Ok(Choice::Jsonl(PathBuf::new()));
    }
    if let Some(dir) = value.strip_prefix("jsonl:") {
        return Ok(Choice::Jsonl(PathBuf::from(dir)));
    }
    if let Some(path) = value.strip_prefix("sqlite:") {
        // `sqlite://PATH` too, as SQLAlchemy and sqlx spell it.
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err("sqlite: needs a file: sqlite:PATH".to_owned());
        }
        return Ok(Choice::Sqlite(PathBuf::from(path)));
    }
    if value.starts_with("postgres://") || value.starts_with("postgresql://") {
        return Ok(Choice::Postgres(value.to_owned()));
    }
    Err(format!(
        "unknown store `{}`: use jsonl, jsonl:DIR, sqlite:PATH or postgres://USER@HOST/DATABASE",
        redacted(value)
    ))
}

/// A store value as it may be shown: a URL's password replaced by `<redacted>`.
pub(crate) fn redacted(value: &str) -> String {
    panto_store_postgres::redact(value)
}
