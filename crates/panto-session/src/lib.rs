//! The append-only JSONL session store of panto (Contract 1 of the product brief).
//!
//! - [`Session`] is a session file: [`Session::open`] an existing one (an empty file opens,
//!   and reading it is [`SessionError::Empty`]), [`Session::create`] a new one,
//!   [`Session::append`] entries as whole lines under an exclusive lock with fsync,
//!   [`Session::append_at`] them only if the file still ends where the caller last saw it
//!   (else [`SessionError::Conflict`]), [`Session::load_context`] the effective context, and
//!   [`Session::history`] to stream every entry with its line number.
//! - A load gives panto-store's [`Loaded`], the one every store returns: the effective context,
//!   the head (the file's length) and typed [`Warning`]s (torn last line, remains of an
//!   interrupted write, unknown entry types, incomplete compactions), each naming the file and
//!   the line; [`Session::load_context_with_stats`] adds [`LoadStats`].
//! - [`SessionOptions`] sets fsync, the lock timeout, the [`panto_model::IdSource`] that names
//!   entries appended without an id ([`panto_model::UniqueIds`] by default,
//!   [`panto_model::SequentialIds`] for tests) and the backwards read step. [`SessionError`]
//!   is every failure, each naming the file.
//!
//! The one design choice to know: loading reads the file **backwards**, in chunks, from the
//! end to the latest compaction that takes effect (its kept copies all follow it), and replays
//! from there with `panto_model::Replayer`. Its cost follows what came after that compaction,
//! not the length of the history, and its result equals a replay of the whole file. panto never
//! rewrites, truncates or deletes a byte already in the file: a torn last line stays, and the
//! next append starts on a fresh line after it (see `docs/session.md` for the exact rules).
//!
//! Sync `std` IO only: no async runtime, no network.
//!
//! ```
//! use panto_model::{Entry, Message};
//! use panto_session::{Session, SessionOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let session = Session::create(dir.path().join("chat.jsonl"), SessionOptions::default())?;
//! let ids = session.append(&[Entry::Message(Message::user_text("hello"))])?;
//! assert_eq!(ids.len(), 1);
//! let loaded = session.load_context()?;
//! assert_eq!(loaded.context.messages[0].text(), "hello");
//! assert!(loaded.warnings.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod blocking;
mod error;
mod fetch;
mod history;
mod import;
mod jsonl;
mod lines;
mod load;
mod lock;
mod options;
mod recall;
mod store;

pub use error::{LockHolder, Result, SessionError};
pub use history::History;
pub use import::{BATCH_BYTES, JsonlSource};
pub use jsonl::JsonlStore;
pub use load::LoadStats;
pub use options::SessionOptions;
pub use panto_store::{Loaded, Place, Warning, WarningKind};
pub use store::{Appended, Session, Writer};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
