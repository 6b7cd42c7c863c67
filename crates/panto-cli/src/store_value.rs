//! A store value, as `store = "..."`, `--store` and `PANTO_STORE` give it: which store it names
//! (`parse`) and how it may be shown (`redacted`: a PostgreSQL URL's password is a secret like
//! an API key). Both the configuration, which shows the value, and `stores`, which opens it,
//! read it here.
//!
//! [`KINDS`] is the one list of store kinds: each with the forms a person writes, what it is,
//! and how a value is recognized. `parse`, `--store`'s help, every error that lists the forms
//! and the lists in README.md and docs/session.md (checked by a test) are made from it. Adding
//! a store: docs/architecture.md, "Adding a store".

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

/// A kind of store, as a store value names it.
pub(crate) struct StoreKind {
    /// The forms a person writes, each as help texts and errors show it (`sqlite:PATH`).
    pub(crate) forms: &'static [&'static str],
    /// What it is, in a few words, for a help text.
    pub(crate) help: &'static str,
    /// Whether it is a database with a schema (`panto sessions --schema`).
    pub(crate) database: bool,
    /// The store `value` names when it is of this kind (`None` when it is not); an error when
    /// it is, but incomplete.
    read: fn(&str) -> Option<Result<Choice, String>>,
}

/// Every kind of store, in the order panto lists them.
pub(crate) const KINDS: &[StoreKind] = &[
    StoreKind {
        forms: &["jsonl", "jsonl:DIR"],
        help: "JSONL files: SESSION is a path, or a file name in DIR",
        database: false,
        read: read_jsonl,
    },
    StoreKind {
        forms: &["sqlite:PATH"],
        help: "every session in one SQLite file",
        database: true,
        read: read_sqlite,
    },
    StoreKind {
        forms: &["postgres://USER@HOST/DB"],
        help: "a PostgreSQL database, its password best in PGPASSWORD",
        database: true,
        read: read_postgres,
    },
];

fn read_jsonl(value: &str) -> Option<Result<Choice, String>> {
    if value == "jsonl" {
        return Some(Ok(Choice::Jsonl(PathBuf::new())));
    }
    let dir = value.strip_prefix("jsonl:")?;
    Some(Ok(Choice::Jsonl(PathBuf::from(dir))))
}

fn read_sqlite(value: &str) -> Option<Result<Choice, String>> {
    let path = value.strip_prefix("sqlite:")?;
    // `sqlite://PATH` too, as SQLAlchemy and sqlx spell it.
    let path = path.strip_prefix("//").unwrap_or(path);
    Some(if path.is_empty() {
        Err("sqlite: needs a file: sqlite:PATH".to_owned())
    } else {
        Ok(Choice::Sqlite(PathBuf::from(path)))
    })
}

fn read_postgres(value: &str) -> Option<Result<Choice, String>> {
    (value.starts_with("postgres://") || value.starts_with("postgresql://"))
        .then(|| Ok(Choice::Postgres(value.to_owned())))
}

/// Every form of the kinds `keep` keeps, with `last` before the last one (`", "` or
/// `" or "`): `jsonl, jsonl:DIR, sqlite:PATH or postgres://USER@HOST/DB`.
pub(crate) fn forms(keep: impl Fn(&StoreKind) -> bool, last: &str) -> String {
    let forms: Vec<&str> = KINDS
        .iter()
        .filter(|k| keep(k))
        .flat_map(|k| k.forms.iter().copied())
        .collect();
    crate::lists::listed(&forms, last)
}

/// `--store`'s help: each kind's forms with what it is.
pub(crate) fn help() -> String {
    let each: Vec<String> = KINDS
        .iter()
        .map(|k| format!("{} ({})", k.forms.join(", "), k.help))
        .collect();
    format!(
        "Where sessions are kept: {}. SESSION then names a session there (default: {DEFAULT})",
        each.join("; ")
    )
}

/// Reads a store value.
///
/// # Errors
/// A value that names no store (the message shows it without its password).
pub(crate) fn parse(value: &str) -> Result<Choice, String> {
    let value = value.trim();
    KINDS
        .iter()
        .find_map(|kind| (kind.read)(value))
        .unwrap_or_else(|| {
            Err(format!(
                "unknown store `{}`: use {}",
                redacted(value),
                forms(|_| true, " or ")
            ))
        })
}

/// A store value as it may be shown: a URL's password replaced by `<redacted>`.
pub(crate) fn redacted(value: &str) -> String {
    panto_store_postgres::redact(value)
}
