//! The connections: a deadpool pool of tokio-postgres clients made with TLS as the URL says,
//! each operation a transaction that carries the store's settings, and [`Attempts`], which runs
//! an operation again on a new connection after a lost one.
//!
//! Nothing here keeps state on a connection between transactions: no `SET`, no named prepared
//! statement (every statement is sent unnamed with its parameter types, `query_typed`), no
//! session advisory lock. Each transaction starts with `BEGIN` and `set_config(..., true)` of
//! the timeouts and the URL's `options`, pipelined with its first statement. So the store works
//! unchanged behind PgBouncer in transaction mode.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, RecyclingMethod, Runtime};
use panto_store::StoreError;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

use crate::error::{Limit, PostgresError};
use crate::options::PostgresOptions;
use crate::tls::{Connector, connector};
use crate::url::StoreUrl;

/// A statement's parameters with their types (statements are sent unnamed: `query_typed`).
pub(crate) type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// What a transaction is for: its statement timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The store's statement timeout.
    Normal,
    /// An import's `COPY`, which runs as long as the history takes: no statement timeout (each
    /// batch the client sends has its own deadline).
    Import,
}

/// The pool of a store and what every transaction starts with.
pub(crate) struct Pool {
    pool: deadpool_postgres::Pool,
    pub(crate) url: Arc<StoreUrl>,
    pub(crate) options: PostgresOptions,
    tls: Connector,
    /// `SELECT set_config($1, $2, true), ...`.
    prelude: String,
    /// The names and values `prelude` sets, for a normal transaction and for an import.
    normal: Vec<String>,
    import: Vec<String>,
}

/// Milliseconds, as the server reads a timeout setting (`0`: none).
fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}

/// Makes connections for the pool: TLS as the URL says, the connection's task spawned on the
/// current runtime (and aborted when the client is dropped). It logs nothing, so no text of a
/// connection's failure reaches a log unscrubbed.
struct Connect {
    tls: Connector,
}

impl deadpool_postgres::Connect for Connect {
    fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> std::pin::Pin<
        Box<
            dyn Future<
                    Output = Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>,
                > + Send
                + '_,
        >,
    > {
        let (tls, config) = (self.tls.clone(), config.clone());
        Box::pin(async move {
            let (client, connection) = config.connect(tls).await?;
            let task = tokio::spawn(async move {
                // It ends when the client is dropped or the connection is lost; the client's
                // next call then reports the loss.
                let _ = connection.await;
            });
            Ok((client, task))
        })
    }
}

impl Pool {
    /// A pool for `url` (no connection is made yet).
    pub(crate) fn new(url: StoreUrl, options: PostgresOptions) -> Result<Pool, StoreError> {
        let refused = |message: String| {
            StoreError::invalid(
                "",
                PostgresError::Refused {
                    location: url.redacted().to_owned(),
                    message: url.scrub(&message),
                },
            )
        };
        let tls = connector(url.tls()).map_err(refused)?;
        let manager = Manager::from_connect(
            url.config().clone(),
            Connect { tls: tls.clone() },
            ManagerConfig {
                // A lost connection is noticed by the operation that uses it, which runs again
                // on a new one: no test query before each use.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let connect = connect_limit(&url, &options);
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .create_timeout(connect.map(|(limit, _)| limit))
            .wait_timeout((!options.pool_wait.is_zero()).then_some(options.pool_wait))
            .build()
            .map_err(|e| refused(format!("cannot make the pool: {e}")))?;
        let mut normal = vec![
            "statement_timeout".to_owned(),
            millis(options.statement_timeout),
            "lock_timeout".to_owned(),
            millis(options.lock_timeout),
        ];
        for (name, value) in url.settings() {
            normal.push(name.clone());
            normal.push(value.clone());
        }
        let mut import = normal.clone();
        import[1] = "0".to_owned();
        let prelude = format!(
            "SELECT {}",
            (0..normal.len() / 2)
                .map(|i| format!(
                    "set_config(${}::text, ${}::text, true)",
                    2 * i + 1,
                    2 * i + 2
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(Pool {
            pool,
            url: Arc::new(url),
            options,
            tls,
            prelude,
            normal,
            import,
        })
    }

    /// The database, for messages.
    pub(crate) fn location(&self) -> &str {
        self.url.redacted()
    }

    /// `BEGIN` and the transaction's settings. Both are sent on the first poll, so that a
    /// statement polled after it (in the same `join!`) goes out in the same round trip.
    pub(crate) async fn begin(
        &self,
        c: &Client,
        phase: Phase,
    ) -> Result<(), tokio_postgres::Error> {
        let values = match phase {
            Phase::Normal => &self.normal,
            Phase::Import => &self.import,
        };
        let params: Vec<(&(dyn ToSql + Sync), Type)> = values
            .iter()
            .map(|v| (v as &(dyn ToSql + Sync), Type::TEXT))
            .collect();
        let (begin, settings) = tokio::join!(
            c.batch_execute("BEGIN"),
            c.query_typed(&self.prelude, &params)
        );
        begin?;
        settings.map(drop)
    }

    /// One statement in a transaction of its own, with the store's settings: one round trip.
    pub(crate) async fn query(
        &self,
        c: &Client,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let (begin, rows, commit) = tokio::join!(
            self.begin(c, Phase::Normal),
            c.query_typed(sql, params),
            c.batch_execute("COMMIT")
        );
        begin?;
        let rows = rows?;
        commit?;
        Ok(rows)
    }

    /// How many connections the pool may hold at once.
    pub(crate) fn size(&self) -> usize {
        self.options.pool_size.max(1)
    }

    /// A connection of the pool.
    pub(crate) async fn get(&self) -> Result<Object, deadpool_postgres::PoolError> {
        self.pool.get().await
    }

    /// Takes `conn` out of the pool for good and asks the server to cancel what it runs (a
    /// statement the client stopped waiting for), without waiting for the answer.
    pub(crate) fn abandon(&self, conn: Object) {
        let client = Object::take(conn);
        let token = client.cancel_token();
        let tls = self.tls.clone();
        let limit =
            connect_limit(&self.url, &self.options).map_or(Duration::from_secs(10), |l| l.0);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(limit, token.cancel_query(tls)).await;
        });
        drop(client);
    }

    /// Takes a connection that failed out of the pool (it is closed, or in a state nobody
    /// knows).
    pub(crate) fn discard(&self, conn: Object) {
        drop(Object::take(conn));
    }

    /// The store's error for a failed database operation, scrubbed of the password: a timeout
    /// the server reported is a [`PostgresError::Timeout`] naming the limit.
    pub(crate) fn error(&self, session: &str, what: &str, e: &tokio_postgres::Error) -> StoreError {
        let location = self.location().to_owned();
        if let Some(db) = e.as_db_error() {
            let limit = match (db.code().code(), db.message()) {
                ("57014", m) if m.contains("statement timeout") => {
                    Some(Limit::Statement(self.options.statement_timeout))
                }
                ("55P03", m) if m.contains("lock timeout") => {
                    Some(Limit::Lock(self.options.lock_timeout))
                }
                _ => None,
            };
            if let Some(limit) = limit {
                return StoreError::unavailable(
                    session,
                    PostgresError::Timeout {
                        location,
                        what: what.to_owned(),
                        limit,
                        detail: String::new(),
                    },
                );
            }
        }
        let error = PostgresError::Database {
            location,
            what: what.to_owned(),
            message: self.url.scrub(&message(e)),
            code: e.code().map(|c| c.code().to_owned()),
        };
        // A value the database refuses (a name holding NUL, say) is the user's to fix.
        match e.code().map(tokio_postgres::error::SqlState::code) {
            Some(code) if code.starts_with("22") => StoreError::invalid(session, error),
            _ => StoreError::unavailable(session, error),
        }
    }
}

/// The connect timeout: the URL's (`connect_timeout`), or the options', or none; and whether
/// the URL gave it.
pub(crate) fn connect_limit(url: &StoreUrl, options: &PostgresOptions) -> Option<(Duration, bool)> {
    match url.connect_timeout() {
        Some(limit) => Some((limit, true)),
        None if options.connect_timeout.is_zero() => None,
        None => Some((options.connect_timeout, false)),
    }
}

/// The words of a client error: the server's message and detail, or the client's with its
/// cause. (The client's `Display` of a server error is only `db error`.)
pub(crate) fn message(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_owned(),
        };
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// Whether `e` means the connection was lost (the server restarted, failed over, killed the
/// backend, or cannot take connections for a moment): the operation may run again on a new
/// connection.
pub(crate) fn lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        // Connection exceptions, and the server shutting down or starting up.
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{
                BrokenPipe, ConnectionAborted, ConnectionRefused, ConnectionReset, NotConnected,
                UnexpectedEof,
            };
            return matches!(
                io.kind(),
                BrokenPipe
                    | ConnectionAborted
                    | ConnectionRefused
                    | ConnectionReset
                    | NotConnected
                    | UnexpectedEof
            );
        }
        cause = c.source();
    }
    false
}
