//! An import as one transaction: the session's row, then every record streamed with `COPY ...
//! FROM STDIN (FORMAT binary)` a batch of the source at a time, then `COMMIT`. Any failure
//! before the commit rolls all of it back, the session's row included. The statement timeout
//! is off for the `COPY` (a history of gigabytes takes minutes); each row the client sends has
//! the statement timeout as its deadline instead, so a server that stops answering still ends
//! the import.

use std::time::Duration;

use panto_store::{Head, Record, RecordSource, StoreError};
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;

use crate::attempt::{Attempts, Fail};
use crate::error::{Limit, PostgresError};
use crate::pool::{Phase, Pool, lost};
use crate::session::{head, refused, to_i64};
use crate::sql;

/// Why an import's transaction stopped.
enum Stop {
    /// The source failed: its error, unchanged.
    Source(StoreError),
    /// The store's answer (another writer's entries are there).
    Store(StoreError),
    /// The client's error, and whether it came at the commit.
    Pg(tokio_postgres::Error, bool),
    /// The server did not take a row within the deadline.
    Deadline,
}

impl From<tokio_postgres::Error> for Stop {
    fn from(e: tokio_postgres::Error) -> Stop {
        Stop::Pg(e, false)
    }
}

/// What the import wrote: how many records, and the last one.
struct Done {
    count: u64,
    last: Option<Record>,
}

/// [`panto_store::Store::import`] on the store of `pool`.
pub(crate) async fn import(
    pool: &Pool,
    session: &str,
    source: &mut dyn RecordSource,
) -> Result<Head, StoreError> {
    let what = "cannot import";
    let conn = Attempts::new(pool, session, what, true)
        .connection()
        .await?;
    let mut done = Done {
        count: 0,
        last: None,
    };
    match run(pool, &conn, session, source, &mut done).await {
        Ok(()) => Ok(Head::new(done.count)),
        Err(Stop::Deadline) => {
            pool.abandon(conn);
            Err(StoreError::unavailable(
                session,
                PostgresError::Timeout {
                    location: pool.location().to_owned(),
                    what: what.to_owned(),
                    limit: Limit::Statement(pool.options.statement_timeout),
                    detail: "; nothing was imported".to_owned(),
                },
            ))
        }
        Err(Stop::Pg(e, at_commit)) if lost(&e) => {
            pool.discard(conn);
            if at_commit {
                // The commit may have gone through before the connection was lost.
                return after_lost_commit(pool, session, &done, &e).await;
            }
            Err(pool.error(session, what, &e))
        }
        Err(Stop::Source(e) | Stop::Store(e)) => {
            let _ = conn.batch_execute("ROLLBACK").await;
            Err(e)
        }
        Err(Stop::Pg(e, _)) => {
            let _ = conn.batch_execute("ROLLBACK").await;
            Err(pool.error(session, what, &e))
        }
    }
}

/// The transaction: the session's row (refused when it has entries), the rows, the commit.
async fn run(
    pool: &Pool,
    c: &Client,
    session: &str,
    source: &mut dyn RecordSource,
    done: &mut Done,
) -> Result<(), Stop> {
    let name = [(&session as _, Type::TEXT)];
    let (begin, create, target) = tokio::join!(
        pool.begin(c, Phase::Import),
        c.query_typed(sql::CREATE, &name),
        c.query_typed(sql::IMPORT_TARGET, &name)
    );
    begin?;
    create?;
    let target = target?;
    let Some(row) = target.first() else {
        return Err(Stop::Store(StoreError::invalid(
            session,
            refused(pool, format!("session {session} was not created")),
        )));
    };
    let (id, head): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
    if head != 0 {
        let found = Head::new(u64::try_from(head).unwrap_or(0));
        return Err(Stop::Store(StoreError::conflict(
            pool.location(),
            session,
            Head::EMPTY,
            found,
        )));
    }
    let deadline = pool.options.statement_timeout;
    let sink = c.copy_in(sql::COPY).await?;
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::INT8, Type::INT2, Type::BYTEA]);
    let mut writer = std::pin::pin!(writer);
    while let Some(batch) = source.next_batch().await.map_err(Stop::Source)? {
        for record in &batch {
            let seq = to_i64(done.count + 1);
            let kind = record.kind.code();
            let body = record.text.as_bytes();
            within(deadline, writer.as_mut().write(&[&id, &seq, &kind, &body])).await??;
            done.count += 1;
        }
        done.last = batch.into_iter().last();
    }
    within(deadline, writer.as_mut().finish()).await??;
    if done.count == 0 {
        // Nothing to import: no session either.
        let _ = c.batch_execute("ROLLBACK").await;
        return Ok(());
    }
    match within(deadline, c.batch_execute("COMMIT")).await? {
        Ok(()) => Ok(()),
        Err(e) => Err(Stop::Pg(e, true)),
    }
}

/// `work` within `limit` (none when it is zero).
async fn within<T>(limit: Duration, work: impl Future<Output = T>) -> Result<T, Stop> {
    if limit.is_zero() {
        return Ok(work.await);
    }
    tokio::time::timeout(limit + Duration::from_secs(1), work)
        .await
        .map_err(|_| Stop::Deadline)
}

/// The connection was lost while the commit was under way: the session tells whether it went
/// through (every record there, the last one this import's).
async fn after_lost_commit(
    pool: &Pool,
    session: &str,
    done: &Done,
    e: &tokio_postgres::Error,
) -> Result<Head, StoreError> {
    let what = "cannot import (nothing was imported)";
    let mut attempts = Attempts::new(pool, session, what, false);
    let last = done.last.as_ref().map(|r| r.text.as_bytes());
    let after = to_i64(done.count.saturating_sub(1));
    let end = to_i64(done.count);
    let took = loop {
        let conn = attempts.connection().await?;
        let c: &Client = &conn;
        let check = async {
            let found = head(pool, c, session).await?;
            let params = [
                (&session as _, Type::TEXT),
                (&after as _, Type::INT8),
                (&end as _, Type::INT8),
            ];
            let rows = pool.query(c, sql::WRITTEN, &params).await?;
            let body = rows.first().map(|r| r.try_get::<_, &[u8]>(1)).transpose()?;
            Ok::<_, Fail>(found.get() == done.count && body.is_some() && body == last)
        };
        match attempts.within(check).await {
            Ok(took) => break took,
            Err(fail) => attempts.failed(conn, fail).await?,
        }
    };
    if took && done.count > 0 {
        return Ok(Head::new(done.count));
    }
    Err(pool.error(session, what, e))
}
