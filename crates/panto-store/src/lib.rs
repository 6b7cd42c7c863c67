//! The storage boundary of panto: the async [`Store`] trait that the `Driver`, the `Compactor`
//! and every `panto` command use, and what goes with it.
//!
//! - [`Store`]: load a session's effective context ([`Loaded`], with its [`Head`]), append
//!   records as one unit *conditionally* on the head the writer last saw, read the history in
//!   pages ([`Page`]) for export, list sessions, import a whole history as one unit from a
//!   [`RecordSource`] (a batch at a time), and [`recall`] what compactions took out of the
//!   effective context (ranked [`Hit`]s) or [`Store::fetch`] an item by id. [`StoreError`] has
//!   four kinds a caller acts on:
//!   a conflict (another writer appended; load again), not found, invalid, unavailable.
//! - [`Record`]: an entry as a store keeps it, its exact Contract 1 text and its
//!   [`RecordKind`].
//! - [`SessionLog`]: one session of a store as one writer last saw it, whose appends are
//!   conditional on that view, and which tells other writers' appends from a session that
//!   vanished or was replaced ([`SessionChange`]). The `Driver` and the `Compactor` write
//!   through it.
//! - [`copy_session`]: a session's whole history into a new session of the same or another
//!   store, each record exactly, as one unit.
//! - [`MemoryStore`] (and [`MemoryLog`], one session of it): sessions in memory.
//! - [`takes_effect`] and [`replay_tail`]: what a database store needs to load in O(tail).
//! - With the `conformance` feature, `conformance` is the suite every store must pass (the
//!   JSONL, SQLite and PostgreSQL stores run it).
//!
//! The design choice to know: everything replay depends on (entry ids, `kept_by` copies,
//! `copies_marked`) is produced by the writer (the compactor), never added by a store; a store
//! keeps records byte for byte, appends one call's records as one unit, and decides conflicts
//! itself (a file's length, a unique sequence number), never with a lock held while a model
//! answers. So a new store cannot lose a guarantee by forgetting a step.
//!
//! No IO and no async runtime here: the trait is written with `async_trait` (its futures are
//! `Send`), and the stores bring their own IO.
//!
//! ```
//! use panto_model::{Entry, Message};
//! use panto_store::{Head, MemoryStore, SessionLog, Store, StoreError};
//!
//! # fn main() -> Result<(), StoreError> {
//! # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # runtime.block_on(async {
//! let store = MemoryStore::new();
//! // Two writers read the same (new) session.
//! let (mut mine, _) = SessionLog::open(store.clone(), "chat").await?;
//! let (mut theirs, _) = SessionLog::open(store.clone(), "chat").await?;
//! mine.append(&[Entry::Message(Message::user_text("hello"))]).await?;
//! // The other writer's view is stale: its append writes nothing.
//! let late = theirs.append(&[Entry::Message(Message::user_text("hi"))]).await;
//! assert!(matches!(late, Err(StoreError::Conflict { .. })));
//! // It reads the session again and goes on.
//! let loaded = theirs.reload().await?;
//! assert_eq!(loaded.context.messages.len(), 1);
//! theirs.append(&[Entry::Message(Message::user_text("hi"))]).await?;
//! assert_eq!(store.load("chat").await?.head, Head::new(2));
//! # Ok(())
//! # })
//! # }
//! ```

mod copy;
mod error;
mod head;
mod log;
mod memory;
pub mod recall;
mod record;
mod source;
mod store;
mod tail;
mod warning;

#[cfg(feature = "conformance")]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;

pub use async_trait::async_trait;
pub use copy::copy_session;
pub use error::{BoxError, StoreError};
pub use head::Head;
pub use log::{SessionChange, SessionLog};
pub use memory::{MEMORY_SESSION, MemoryLog, MemoryStore};
pub use recall::{Fetched, Hit, RecallQuery, Recalled, passage};
pub use record::{Record, RecordKind};
pub use source::{RecordSource, Records};
pub use store::{Loaded, PAGE_BYTES, Page, Store, fetch_by_scan, index_from, recall_by_scan};
pub use tail::{replay_tail, takes_effect};
pub use warning::{Place, Warning, WarningKind};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
