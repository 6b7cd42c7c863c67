//! Where sessions are kept: the store a configuration names (`jsonl`, `jsonl:DIR`,
//! `sqlite:PATH`, `postgres://...`), and the commands that move sessions in and out of it:
//! `import`, `export`, `sessions`.
//!
//! A PostgreSQL URL's password is a secret like an API key: every text this module shows of a
//! store URL goes through `store_value::redacted`, and the stores scrub their own errors.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use panto_compact::{Head, Record, Store, StoreError};
use panto_session::{JsonlStore, SessionOptions};
use panto_store_postgres::PostgresStore;
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use crate::bad_input;
use crate::config::Config;
use crate::screen::say;
use crate::store_value::{Choice, parse};

/// The store the commands read and write sessions in, chosen by the configuration.
pub(crate) type AnyStore = Arc<dyn Store>;

/// Store errors that are the user's to fix (a missing, malformed or refused session) exit with
/// 2; a conflict or a store that failed is a failure (1).
pub(crate) fn store_error(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Conflict { .. } | StoreError::Unavailable { .. } => anyhow!(e),
        other => bad_input(other),
    }
}

/// The name of the session a command was given (for the JSONL store, the path).
pub(crate) fn session_name(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// How many records `export` reads at a time.
const PAGE: usize = 1000;

/// Opens the store of `config`.
///
/// # Errors
/// Bad input (exit 2) for a value that names no store or a database that refuses the request
/// as malformed; a failure (exit 1) for one that cannot be reached.
pub(crate) async fn open(config: &Config) -> Result<AnyStore> {
    let lock_timeout = Duration::from_secs(config.lock_timeout_secs.value);
    let choice = parse(&config.store.value)
        .map_err(|e| bad_input(format!("{e} (store from {})", config.store.source)))?;
    Ok(match choice {
        Choice::Jsonl(root) => Arc::new(JsonlStore::new(
            root,
            SessionOptions::default().lock_timeout(lock_timeout),
        )),
        Choice::Sqlite(path) => {
            let options = SqliteOptions::default().with_busy_timeout(lock_timeout);
            Arc::new(
                SqliteStore::open_with(path, options)
                    .await
                    .map_err(store_error)?,
            )
        }
        Choice::Postgres(url) => Arc::new(PostgresStore::connect(&url).await.map_err(store_error)?),
    })
}

// ---------------------------------------------------------------------------------------------
// import

/// `panto import FILE SESSION`: every entry of FILE (a Contract 1 file, read with the JSONL
/// store's line rules) into a new session, each line's text exactly, in one append. A
/// malformed line is bad input naming the file, line and field, and nothing is imported.
pub(crate) async fn import(config: &Config, file: &Path, session: &Path) -> Result<()> {
    let records = read_file(config, file).await?;
    if records.is_empty() {
        return Err(bad_input(format!(
            "{}: no entries to import",
            file.display()
        )));
    }
    let store = open(config).await?;
    let name = session_name(session);
    let head = store.head(&name).await.map_err(store_error)?;
    if head != Head::EMPTY {
        return Err(bad_input(format!(
            "{name}: the session already has entries in {}; import writes only a new session (choose another name, or `panto export` it first)",
            store.location()
        )));
    }
    match store.append_records(&name, Head::EMPTY, &records).await {
        Ok(_) => {}
        Err(e @ StoreError::Conflict { .. }) => {
            return Err(anyhow!(e).context(format!(
                "{name}: another writer started the session while it was being imported; nothing was imported"
            )));
        }
        Err(e) => return Err(store_error(e)),
    }
    say(&format!(
        "panto: imported {} entries from {} into {name} ({})",
        records.len(),
        file.display(),
        store.location()
    ));
    Ok(())
}

/// Every entry of a Contract 1 file, each its line's exact text (blank lines, a torn last line
/// and the remains of an interrupted write are not entries and are left out).
async fn read_file(config: &Config, file: &Path) -> Result<Vec<Record>> {
    let lock_timeout = Duration::from_secs(config.lock_timeout_secs.value);
    let files = JsonlStore::new("", SessionOptions::default().lock_timeout(lock_timeout));
    let name = session_name(file);
    let mut records = Vec::new();
    let mut from = Head::EMPTY;
    loop {
        let page = files.read(&name, from, PAGE).await.map_err(|e| match e {
            StoreError::Unavailable { .. } => anyhow!(e),
            other => bad_input(format!("{other}; nothing was imported")),
        })?;
        if page.records.is_empty() {
            return Ok(records);
        }
        from = page.next;
        records.extend(page.records);
    }
}

// ---------------------------------------------------------------------------------------------
// export

/// `panto export SESSION`: every entry of the session as Contract 1 lines on stdout, each
/// exactly as stored, read page by page (constant memory whatever the history).
pub(crate) async fn export(config: &Config, session: &Path) -> Result<()> {
    let store = open(config).await?;
    let name = session_name(session);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut from = Head::EMPTY;
    loop {
        let page = store.read(&name, from, PAGE).await.map_err(store_error)?;
        if page.records.is_empty() {
            break;
        }
        for r in &page.records {
            out.write_all(r.text.as_bytes())?;
            out.write_all(b"\n")?;
        }
        from = page.next;
    }
    out.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// sessions

/// `panto sessions [--schema]`: the sessions of the store, one per line; with `--schema`, the
/// SQL of the store's schema, connecting to nothing.
pub(crate) async fn sessions(config: &Config, schema: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if schema {
        let choice = parse(&config.store.value).map_err(bad_input)?;
        let sql = match choice {
            Choice::Jsonl(_) => {
                return Err(bad_input(
                    "the JSONL store has no schema: each session is a file (choose a database with --store sqlite:PATH or --store postgres://...)",
                ));
            }
            Choice::Sqlite(_) => {
                let mut sql = String::from("BEGIN;\n");
                for (version, migration) in panto_store_sqlite::MIGRATIONS {
                    sql.push_str(migration);
                    sql.push_str(&format!("PRAGMA user_version = {version};\n"));
                }
                sql.push_str("COMMIT;\n");
                sql
            }
            Choice::Postgres(_) => panto_store_postgres::schema_sql(),
        };
        out.write_all(sql.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    drop(out);
    let store = open(config).await?;
    let names = store.list().await.map_err(store_error)?;
    // On a terminal each name fits its width (cut with `…`); a pipe gets them whole.
    let width = crate::ui::stdout_is_terminal().then(crate::screen::columns);
    let mut out = std::io::stdout().lock();
    for name in names {
        let name = crate::ui::for_stdout(&name);
        match width {
            Some(w) => writeln!(out, "{}", crate::fit::fit(&name, w))?,
            None => writeln!(out, "{name}")?,
        }
    }
    out.flush()?;
    Ok(())
}
