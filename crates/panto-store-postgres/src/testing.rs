//! How the PostgreSQL tests (of this crate, of panto-cli, and the example) find their server:
//! `PANTO_TEST_POSTGRES`, a URL of a throwaway database (`.ci/postgres` starts one). Without
//! it a developer's run skips them with a line saying so, and a CI run (`CI` set) fails.

#![allow(
    clippy::print_stderr,
    reason = "test support: a skipped test says so on stderr"
)]

use std::sync::atomic::{AtomicUsize, Ordering};

use panto_store::StoreError;

use crate::store::PostgresStore;

/// The variable that holds the test server's URL.
pub const ENV: &str = "PANTO_TEST_POSTGRES";

/// Whether this run is CI's: `CI` is set to anything but `false` or `0` (`.ci/run` runs with
/// `CI=true`, as most CI systems do).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The test server's URL; `None`, after a line on stderr naming `test`, when there is none on a
/// developer's machine.
///
/// # Panics
/// In CI without a server: the PostgreSQL tests must run there.
pub fn server(test: &str) -> Option<String> {
    match std::env::var(ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if in_ci() => panic!(
            "{ENV} is not set in CI: the PostgreSQL tests need a server (.ci/run starts one with .ci/postgres)"
        ),
        _ => {
            eprintln!(
                "skipped {test}: no PostgreSQL server ({ENV} is not set; `.ci/postgres run cargo test` starts one)"
            );
            None
        }
    }
}

/// `url` with panto's tables in a new, empty schema of their own (created now), so tests never
/// see each other's sessions.
///
/// # Panics
/// When the schema cannot be created (test support).
pub async fn fresh_url(url: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let schema = format!(
        "panto_test_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    let task = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create a schema");
    drop(client);
    let _ = task.await;
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// A store in a new, empty schema of the test server at `url`.
///
/// # Errors
/// As [`PostgresStore::connect`].
pub async fn fresh(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::connect(&fresh_url(url).await).await
}
