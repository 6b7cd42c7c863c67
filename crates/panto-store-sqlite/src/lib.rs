//! The SQLite session store of panto: every session of an agent in one embedded database file,
//! behind [`panto_store::Store`].
//!
//! - [`SqliteStore`]: [`SqliteStore::open`] a database file (created, and its schema migrated,
//!   when needed), then use it as any store: load a session's effective context, append
//!   conditionally on the head a writer last saw, page through the history, list sessions.
//! - [`SqliteOptions`]: the busy timeout (how long an append waits for another process's write
//!   transaction) and whether each commit is flushed to disk.
//! - [`MIGRATIONS`]: the schema, as SQL that panto runs at open (or that a person can read and
//!   run first).
//!
//! The design choice to know: a session's entries are rows `(session, seq, kind, text)` keyed by
//! `(session, seq)`, each holding its entry's exact Contract 1 text. A [`panto_store::Head`] is
//! the number of entries. An append is one `BEGIN IMMEDIATE` transaction that checks the head
//! and inserts the next rows, so it is all or nothing and a stale writer gets
//! [`panto_store::StoreError::Conflict`]; no lock is held between calls. A partial index on the
//! compactions lets a load start at the latest one that takes effect, so loading costs the
//! entries after it, not the history.
//!
//! SQLite is compiled into the crate (rusqlite's `bundled` feature): nothing to install. The
//! database work runs on tokio's blocking pool inside a multi-thread tokio runtime, inline
//! otherwise.
//!
//! ```
//! use panto_model::{Entry, Message};
//! use panto_store::{Head, Store};
//! use panto_store_sqlite::SqliteStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # runtime.block_on(async {
//! let dir = tempfile::tempdir()?;
//! let store = SqliteStore::open(dir.path().join("agent.sqlite3")).await?;
//! let head = store
//!     .append("chat", Head::EMPTY, &[Entry::Message(Message::user_text("hello"))])
//!     .await?;
//! let loaded = store.load("chat").await?;
//! assert_eq!(loaded.head, head);
//! assert_eq!(loaded.context.messages[0].text(), "hello");
//! # Ok(())
//! # })
//! # }
//! ```

mod error;
pub mod ids;
mod import;
mod open;
pub mod recall;
mod session;
mod store;

pub use error::SqliteError;
pub use open::{MIGRATIONS, SqliteOptions};
pub use store::SqliteStore;

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
