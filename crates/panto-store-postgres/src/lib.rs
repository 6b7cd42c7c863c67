//! The PostgreSQL session store of panto: sessions shared by agents on many hosts, behind
//! [`panto_store::Store`].
//!
//! - [`PostgresStore`]: [`PostgresStore::connect`] to a database URL (the schema's missing
//!   [`MIGRATIONS`] are applied first), then use it as any store: load a session's effective
//!   context, append conditionally on the head a writer last saw, page through the history,
//!   list sessions, import a whole history in one transaction.
//! - [`PostgresOptions`]: the pool's size, the connect, statement and lock timeouts, how long
//!   an operation keeps reconnecting, whether connecting may create the tables.
//! - [`StoreUrl`]: a `postgres://` URL with libpq's TLS settings ([`SslMode`], `sslrootcert`,
//!   `sslcert`, `sslkey`) and `options`, whose password never shows: not in `Debug`, not in
//!   [`StoreUrl::redacted`], not in any error (each message is scrubbed of it); [`redact`]
//!   shows a URL that may not even parse.
//! - [`PostgresError`] (with [`Limit`], the timeout that ran out) and [`MIGRATIONS`] and
//!   [`schema_sql`]: the schema as SQL that panto runs, or that a person reads and runs first
//!   (`panto sessions --schema`).
//!
//! The design choice to know: **conflicts are decided by the database**. Each entry is a row
//! keyed by `(session, seq)` holding its exact Contract 1 bytes; a [`panto_store::Head`] is the
//! number of entries. An append is one `INSERT ... SELECT` of the rows `head + 1 ..` that takes
//! effect only while the session still ends at the writer's head; two writers at the same head
//! both try to insert row `head + 1`, and the unique key lets exactly one of them in (the other
//! gets [`panto_store::StoreError::Conflict`], nothing written). No lock is held between calls,
//! so a model may answer for minutes while other hosts go on. A partial index on compactions
//! makes a load start at the latest one, so it costs the tail, not the history.
//!
//! The connections: tokio-postgres clients in a deadpool-postgres pool, TLS through rustls
//! (ring). Each operation is a transaction that starts with its settings (`set_config(...,
//! true)`: the statement and lock timeouts, the URL's `options`) pipelined with its statement,
//! which is sent unnamed with its parameter types: nothing outlives a transaction, so PgBouncer
//! in transaction mode changes nothing. An operation whose connection is lost runs again on a
//! new one, with backoff, within [`PostgresOptions::reconnect`]; an append whose try may have
//! taken effect checks the session first. A store needs a tokio runtime, which must outlive it.

mod append;
mod attempt;
mod error;
mod import;
mod migrate;
mod options;
mod pool;
mod redact;
mod schema;
mod session;
mod sql;
mod store;
mod tls;
mod url;

#[cfg(feature = "test-support")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-support")))]
pub mod testing;

pub use error::{Limit, PostgresError};
pub use options::PostgresOptions;
pub use redact::redact;
pub use schema::{MIGRATIONS, schema_sql};
pub use store::PostgresStore;
pub use tokio_postgres;
pub use url::{SslMode, StoreUrl};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
