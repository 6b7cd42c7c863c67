//! How the PostgreSQL tests (of this crate, of panto-cli, and the example) find their servers:
//! `PANTO_TEST_POSTGRES`, a URL of a throwaway database, and its siblings for TLS, PgBouncer
//! and the fault server (`.ci/postgres` starts them all). Without them a developer's run skips
//! those tests with a line saying so, and a CI run (`CI` set) fails.

#![allow(
    clippy::print_stderr,
    reason = "test support: a skipped test says so on stderr"
)]

use std::sync::atomic::{AtomicUsize, Ordering};

use panto_store::StoreError;
use tokio_postgres::Client;

use crate::options::PostgresOptions;
use crate::store::PostgresStore;
use crate::url::StoreUrl;

/// The variable that holds the test server's URL (without TLS).
pub const ENV: &str = "PANTO_TEST_POSTGRES";
/// The same server with TLS, its certificate checked (`sslmode=verify-full`).
pub const TLS_ENV: &str = "PANTO_TEST_POSTGRES_TLS";
/// The folder of the throwaway `ca.crt`, and `client.crt`/`client.key` for role `panto_cert`.
pub const CERTS_ENV: &str = "PANTO_TEST_POSTGRES_CERTS";
/// The same server through PgBouncer in transaction mode.
pub const BOUNCER_ENV: &str = "PANTO_TEST_POSTGRES_BOUNCER";
/// A server of the fault tests' own, which they restart, stop and freeze.
pub const FAULTS_ENV: &str = "PANTO_TEST_POSTGRES_FAULTS";
/// The fault server's control: `CTL stop|start|restart|freeze|thaw`.
pub const FAULTS_CTL_ENV: &str = "PANTO_TEST_POSTGRES_FAULTS_CTL";

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
    variable(ENV, test)
}

/// The value of `var` (one of this module's variables); `None`, after a line on stderr naming
/// `test`, when it is not set on a developer's machine.
///
/// # Panics
/// In CI when it is not set: `.ci/postgres` sets every one of them.
pub fn variable(var: &str, test: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ if in_ci() => panic!(
            "{var} is not set in CI: the PostgreSQL tests need it (.ci/run starts the servers with .ci/postgres)"
        ),
        _ => {
            eprintln!(
                "skipped {test}: {var} is not set (`.ci/postgres run cargo test` starts the servers)"
            );
            None
        }
    }
}

/// A plain connection to `url` for a test's own SQL: TLS as the URL says, the URL's `options`
/// settings set for the whole connection (a test connects directly, not through PgBouncer).
///
/// # Panics
/// When it cannot connect (test support).
pub async fn client(url: &str) -> Client {
    let url = StoreUrl::parse(url).expect("a PostgreSQL URL");
    let tls = crate::tls::connector(url.tls()).expect("TLS settings");
    let (client, connection) = url.config().connect(tls).await.expect("connect");
    tokio::spawn(connection);
    for (name, value) in url.settings() {
        client
            .query("SELECT set_config($1, $2, false)", &[name, value])
            .await
            .expect("apply the URL's options");
    }
    client
}

/// `url` with panto's tables in a new, empty schema of their own (created now), so tests never
/// see each other's sessions. The schema is named in `options`, which the store applies in
/// each transaction (so it holds through PgBouncer too).
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
    let client = client(url).await;
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .expect("create a schema");
    drop(client);
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

/// [`fresh`] with `options`.
///
/// # Errors
/// As [`PostgresStore::connect_with`].
pub async fn fresh_with(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
    PostgresStore::connect_with(&fresh_url(url).await, options).await
}
