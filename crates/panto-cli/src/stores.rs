//! Where sessions are kept: the store a configuration names (one of `store_value::KINDS`),
//! and the commands that move sessions in and out of it:
//! `import`, `export`, `sessions`.
//!
//! A PostgreSQL URL's password is a secret like an API key: every text this module shows of a
//! store URL goes through `store_value::redacted`, and the stores scrub their own errors.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, anyhow};
use panto_compact::store::RecordSource;
use panto_compact::{Head, Record, Store, StoreError};
use panto_session::{JsonlSource, JsonlStore, SessionOptions};
use panto_store_postgres::{Limit, PostgresError, PostgresOptions, PostgresStore};
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use crate::bad_input;
use crate::config::Config;
use crate::screen::say;
use crate::store_value::{self, Choice, parse};

/// The store the commands read and write sessions in, chosen by the configuration.
pub(crate) type AnyStore = Arc<dyn Store>;

/// Store errors that are the user's to fix (a missing, malformed or refused session) exit with
/// 2; a conflict or a store that failed is a failure (1), with a hint naming the setting when
/// a limit ran out.
pub(crate) fn store_error(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::Conflict { .. } => anyhow!(e),
        StoreError::Unavailable { .. } => match store_hint(&e) {
            Some(hint) => anyhow!("{e}\nhint: {hint}"),
            None => anyhow!(e),
        },
        other => bad_input(other),
    }
}

/// What to do when a store's limit ran out, anywhere in `e`'s chain: which setting to raise.
pub(crate) fn store_hint(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(limit) = c
            .downcast_ref::<PostgresError>()
            .and_then(PostgresError::limit)
        {
            return Some(match limit {
                Limit::Connect { from_url: true, .. } => "the store URL's `connect_timeout` bounds connecting: check that the server is up and reachable, or raise it".to_owned(),
                Limit::Connect { .. } => "`store_connect_timeout_secs` bounds connecting (TLS and login included): check that the server is up and reachable, or raise it in config.toml".to_owned(),
                Limit::Statement(_) => "`store_statement_timeout_secs` bounds each statement and each wait for the server's answer: check that the server is not stuck, or raise it in config.toml".to_owned(),
                Limit::PoolWait { .. } => "every connection of the store's pool stayed in use: raise `store_pool_size` in config.toml, or run fewer operations on one store at once".to_owned(),
                Limit::Lock(_) => "`lock_timeout_secs` bounds the wait for a lock another session holds on panto's tables: find what holds it (pg_locks), or raise it in config.toml".to_owned(),
                _ => "`store_reconnect_secs` bounds how long panto tries to reach the database again after losing it: check the server, or raise it in config.toml".to_owned(),
            });
        }
        cause = c.source();
    }
    None
}

/// The name of the session a command was given (for the JSONL store, the path).
pub(crate) fn session_name(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// How many records `export` reads at a time (a page also stops after
/// `panto_store::PAGE_BYTES` of text).
const PAGE: usize = 1000;

/// What a command does with the store: a command that writes may create it (an SQLite file,
/// PostgreSQL's tables); one that only reads creates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Write,
    Read,
}

/// Opens the store of `config` for a command that writes.
///
/// # Errors
/// As [`open_for`].
pub(crate) async fn open(config: &Config) -> Result<AnyStore> {
    open_for(config, Access::Write).await
}

/// Opens the store of `config` for a command that only reads: a missing SQLite file is bad
/// input, and no table is created.
///
/// # Errors
/// As [`open_for`].
pub(crate) async fn open_reading(config: &Config) -> Result<AnyStore> {
    open_for(config, Access::Read).await
}

/// The PostgreSQL store's settings from the configuration.
fn postgres_options(config: &Config, access: Access) -> PostgresOptions {
    let secs = Duration::from_secs;
    PostgresOptions::default()
        .with_pool_size(config.store_pool_size.value)
        .with_connect_timeout(secs(config.store_connect_timeout_secs.value))
        .with_statement_timeout(secs(config.store_statement_timeout_secs.value))
        .with_lock_timeout(secs(config.lock_timeout_secs.value))
        .with_reconnect(secs(config.store_reconnect_secs.value))
        .with_create_tables(access == Access::Write)
}

/// Opens the store of `config`.
///
/// # Errors
/// Bad input (exit 2) for a value that names no store, a file or database that is not there
/// for a command that only reads, or one the user must fix; a failure (exit 1) for one that
/// cannot be reached.
async fn open_for(config: &Config, access: Access) -> Result<AnyStore> {
    let lock_timeout = Duration::from_secs(config.lock_timeout_secs.value);
    let choice = parse(&config.store.value)
        .map_err(|e| bad_input(format!("{e} (store from {})", config.store.source)))?;
    Ok(match choice {
        Choice::Jsonl(root) => Arc::new(JsonlStore::new(
            root,
            SessionOptions::default().lock_timeout(lock_timeout),
        )),
        Choice::Sqlite(path) => {
            let options = SqliteOptions::default()
                .with_busy_timeout(lock_timeout)
                .with_create(access == Access::Write);
            Arc::new(
                SqliteStore::open_with(path, options)
                    .await
                    .map_err(store_error)?,
            )
        }
        Choice::Postgres(url) => Arc::new(
            PostgresStore::connect_with(&url, postgres_options(config, access))
                .await
                .map_err(store_error)?,
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// import

/// The source of an import, counting what it gave and remembering whether it failed.
struct Counted {
    source: JsonlSource,
    count: u64,
    failed: bool,
}

#[panto_compact::async_trait]
impl RecordSource for Counted {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        let batch = self.source.next_batch().await;
        match &batch {
            Ok(Some(records)) => self.count += records.len() as u64,
            Ok(None) => {}
            Err(_) => self.failed = true,
        }
        batch
    }
}

/// `panto import FILE SESSION`: every entry of FILE (a Contract 1 file, read with the JSONL
/// store's line rules, a byte-order mark skipped) into a new session, each line's text exactly,
/// streamed in one unit: all of it, or (a malformed line, another writer, a store that fails)
/// nothing and no session. What the reader skipped (a torn last line, debris) is said.
pub(crate) async fn import(config: &Config, file: &Path, session: &Path) -> Result<()> {
    let source = JsonlSource::open(file).map_err(|e| match e {
        StoreError::Unavailable { .. } => anyhow!(e),
        other => bad_input(format!("{other}; nothing was imported")),
    })?;
    let store = open(config).await?;
    let name = session_name(session);
    let head = store.head(&name).await.map_err(store_error)?;
    if head != Head::EMPTY {
        return Err(bad_input(format!(
            "{name}: the session already has entries in {}; import writes only a new session (choose another name, or `panto export` it first)",
            store.location()
        )));
    }
    let mut counted = Counted {
        source,
        count: 0,
        failed: false,
    };
    let result = store.import(&name, &mut counted).await;
    for warning in counted.source.warnings() {
        say(&format!("panto: warning: {warning}"));
    }
    match result {
        Ok(_) if counted.count == 0 => Err(bad_input(format!(
            "{}: no entries to import",
            file.display()
        ))),
        Ok(_) => {
            say(&format!(
                "panto: imported {} entries from {} into {name} ({})",
                counted.count,
                file.display(),
                store.location()
            ));
            Ok(())
        }
        Err(e) if counted.failed => Err(match e {
            StoreError::Unavailable { .. } => anyhow!("{e}; nothing was imported"),
            other => bad_input(format!("{other}; nothing was imported")),
        }),
        Err(e @ StoreError::Conflict { .. }) => Err(anyhow!(e).context(format!(
            "{name}: another writer started the session while it was being imported; nothing was imported"
        ))),
        Err(e) => Err(store_error(e).context(format!("{name}: nothing was imported"))),
    }
}

// ---------------------------------------------------------------------------------------------
// export

/// `panto export SESSION`: every entry of the session as Contract 1 lines on stdout, each
/// exactly as stored, read page by page (constant memory whatever the history).
pub(crate) async fn export(config: &Config, session: &Path) -> Result<()> {
    let store = open_reading(config).await?;
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
                return Err(bad_input(format!(
                    "the JSONL store has no schema: each session is a file (choose a database with --store {})",
                    store_value::forms(|k| k.database, " or ")
                )));
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
    let store = open_reading(config).await?;
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
