//! `Attempts`: one store operation's tries. A try that lost its connection is tried again on a
//! new one after a pause that doubles (100 ms to 2 s, with jitter), until the reconnect time is
//! spent; every other failure ends the operation at once. A try has a deadline (the statement
//! timeout and a second), past which its connection is abandoned and its statement cancelled.
//!
//! An operation that writes learns from [`Attempts::unknown`] whether an earlier try may have
//! taken effect before its connection was lost: it must then check the session before writing
//! again (an append is applied once or not at all).

use std::time::{Duration, Instant};

use deadpool_postgres::{Object, PoolError, TimeoutType};
use panto_store::StoreError;

use crate::error::{Limit, PostgresError};
use crate::pool::{Pool, connect_limit, lost, message};

/// Why a try failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The client's error: a lost connection is tried again, anything else ends the operation.
    Pg(tokio_postgres::Error),
    /// The operation's own answer (a conflict, a session that does not exist): returned as it
    /// is.
    Store(StoreError),
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        Fail::Pg(e)
    }
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Fail {
        Fail::Store(e)
    }
}

/// The first pause after a lost connection, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The tries of one operation on one session.
pub(crate) struct Attempts<'p> {
    pool: &'p Pool,
    session: &'p str,
    what: &'p str,
    started: Instant,
    pause: Duration,
    unknown: bool,
    /// Whether the operation writes (its message says when its outcome is unknown).
    writes: bool,
    /// The last lost connection's words.
    last: String,
}

impl<'p> Attempts<'p> {
    /// The tries of `what` (`cannot append`, ...) on `session`.
    pub(crate) fn new(
        pool: &'p Pool,
        session: &'p str,
        what: &'p str,
        writes: bool,
    ) -> Attempts<'p> {
        Attempts {
            pool,
            session,
            what,
            started: Instant::now(),
            pause: FIRST_PAUSE,
            unknown: false,
            writes,
            last: String::new(),
        }
    }

    /// Whether an earlier try lost its connection after it may have written.
    pub(crate) fn unknown(&self) -> bool {
        self.unknown
    }

    /// A connection for the next try, after the pauses that a lost server calls for.
    ///
    /// # Errors
    /// When no connection can be made: at once for a refused login, bad TLS or the connect
    /// timeout; after the reconnect time for a server that is down or restarting.
    pub(crate) async fn connection(&mut self) -> Result<Object, StoreError> {
        loop {
            match self.pool.get().await {
                Ok(conn) => return Ok(conn),
                Err(PoolError::Backend(e)) if lost(&e) => {
                    self.last = self.pool.url.scrub(&message(&e));
                    self.pause_or_give_up().await?;
                }
                Err(e) => return Err(connect_error(self.pool, self.session, e)),
            }
        }
    }

    /// Runs one try, `work` on a connection, within the try's deadline (the statement timeout
    /// and a second; none when the statement timeout is off).
    pub(crate) async fn within<T>(
        &self,
        work: impl Future<Output = Result<T, Fail>>,
    ) -> Result<T, Option<Fail>> {
        let limit = self.pool.options.statement_timeout;
        if limit.is_zero() {
            return work.await.map_err(Some);
        }
        match tokio::time::timeout(limit + Duration::from_secs(1), work).await {
            Ok(result) => result.map_err(Some),
            Err(_) => Err(None),
        }
    }

    /// What follows a failed try on `conn`: `Ok` to try again (the connection was lost; the
    /// pause is over), or the error that ends the operation. `None` is a try past its deadline.
    ///
    /// # Errors
    /// The operation's error.
    pub(crate) async fn failed(
        &mut self,
        conn: Object,
        fail: Option<Fail>,
    ) -> Result<(), StoreError> {
        match fail {
            None => {
                self.pool.abandon(conn);
                Err(self.timeout(
                    self.what,
                    Limit::Statement(self.pool.options.statement_timeout),
                ))
            }
            Some(Fail::Store(e)) => {
                if self.pool_lost(&conn) {
                    self.pool.discard(conn);
                }
                Err(e)
            }
            Some(Fail::Pg(e)) if lost(&e) => {
                self.pool.discard(conn);
                self.unknown |= self.writes;
                self.last = self.pool.url.scrub(&message(&e));
                self.pause_or_give_up().await
            }
            Some(Fail::Pg(e)) => {
                if self.pool_lost(&conn) {
                    self.pool.discard(conn);
                }
                Err(self.pool.error(self.session, self.what, &e))
            }
        }
    }

    fn pool_lost(&self, conn: &Object) -> bool {
        conn.is_closed()
    }

    /// Waits before the next try, or gives up when the reconnect time would be spent.
    async fn pause_or_give_up(&mut self) -> Result<(), StoreError> {
        let budget = self.pool.options.reconnect;
        // Jitter, so that hosts that lost the server together do not come back together.
        let pause = self.pause.mul_f64(0.75 + fastrand::f64() / 2.0);
        if self.started.elapsed() + pause > budget {
            return Err(self.timeout(self.what, Limit::Reconnect(budget)));
        }
        tokio::time::sleep(pause).await;
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        Ok(())
    }

    fn timeout(&self, what: &str, limit: Limit) -> StoreError {
        let mut detail = String::new();
        if !self.last.is_empty() {
            detail = format!("; the last error: {}", self.last);
        }
        if self.unknown {
            detail.push_str(
                "; the connection was lost while the write was under way, and whether it took effect could not be checked (the session's end tells)",
            );
        }
        StoreError::unavailable(
            self.session,
            PostgresError::Timeout {
                location: self.pool.location().to_owned(),
                what: what.to_owned(),
                limit,
                detail,
            },
        )
    }
}

/// The error of a connection that could not be made, for a reason a new try would not change
/// (a refused login, TLS, the connect timeout) or the first connection of a store; `session`
/// is the one the operation was for (empty for the store's own).
pub(crate) fn connect_error(pool: &Pool, session: &str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pool.error(session, "cannot connect", &e),
        PoolError::Timeout(TimeoutType::Create) => {
            let (limit, from_url) =
                connect_limit(&pool.url, &pool.options).unwrap_or((Duration::ZERO, false));
            StoreError::unavailable(
                session,
                PostgresError::Timeout {
                    location: pool.location().to_owned(),
                    what: "cannot connect".to_owned(),
                    limit: Limit::Connect { limit, from_url },
                    detail: String::new(),
                },
            )
        }
        PoolError::Timeout(TimeoutType::Wait) => StoreError::unavailable(
            session,
            PostgresError::Timeout {
                location: pool.location().to_owned(),
                what: "no free connection".to_owned(),
                limit: Limit::PoolWait {
                    limit: pool.options.pool_wait,
                    size: pool.size(),
                },
                detail: String::new(),
            },
        ),
        e => StoreError::unavailable(
            session,
            PostgresError::Database {
                location: pool.location().to_owned(),
                what: "cannot connect".to_owned(),
                message: pool.url.scrub(&e.to_string()),
                code: None,
            },
        ),
    }
}
