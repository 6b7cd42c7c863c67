//! The PostgreSQL session store of panto: sessions shared by agents on many hosts, behind
//! [`panto_store::Store`].
//!
//! - [`PostgresStore`]: [`PostgresStore::connect`] to a database URL (the schema's missing
//!   [`MIGRATIONS`] are applied first), then use it as any store: load a session's effective
//!   context, append conditionally on the head a writer last saw, page through the history,
//!   list sessions.
//! - [`StoreUrl`]: a `postgres://` URL whose password never shows: not in `Debug`, not in
//!   [`StoreUrl::redacted`], not in any error (each message is scrubbed of it).
//! - [`MIGRATIONS`] and [`schema_sql`]: the schema as SQL that panto runs, or that a person
//!   reads and runs first (`panto sessions --schema`).
//!
//! The design choice to know: **conflicts are decided by the database**. Each entry is a row
//! keyed by `(session, seq)` holding its exact Contract 1 bytes; a [`panto_store::Head`] is the
//! number of entries. An append is one `INSERT ... SELECT` of the rows `head + 1 ..` that takes
//! effect only while the session still ends at the writer's head; two writers at the same head
//! both try to insert row `head + 1`, and the unique key lets exactly one of them in (the other
//! gets [`panto_store::StoreError::Conflict`], nothing written). No lock is held between calls,
//! so a model may answer for minutes while other hosts go on. A partial index on compactions
//! makes a load one query for the entries from the latest compaction on, so it costs the tail,
//! not the history.
//!
//! The client is `tokio-postgres` (async, pipelined: one connection serves concurrent tasks),
//! without TLS for now: use a connection on loopback, a Unix socket, or a tunnel.
//! [`PostgresStore::connect`] spawns the connection's task on the current tokio runtime, which
//! must outlive the store.

mod error;
mod schema;
mod store;
mod url;

#[cfg(feature = "test-support")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod testing;

pub use error::PostgresError;
pub use schema::{MIGRATIONS, schema_sql};
pub use store::PostgresStore;
pub use tokio_postgres;
pub use url::{StoreUrl, redact};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
