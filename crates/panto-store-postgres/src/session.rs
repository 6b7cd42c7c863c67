//! What the store's operations share: positions as the database counts them, the head of a
//! session, and the store's answers (a conflict, a refusal) worded with the database.

use panto_store::{Head, StoreError};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::attempt::Fail;
use crate::error::PostgresError;
use crate::pool::Pool;
use crate::sql;

/// A row's `seq` as a position (a negative one, which the schema forbids, as 0).
pub(crate) fn to_u64(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

/// A position as a `seq`.
pub(crate) fn to_i64(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

/// Where `session` ends (0 for one that does not exist), in a transaction of its own.
pub(crate) async fn head(pool: &Pool, c: &Client, session: &str) -> Result<Head, Fail> {
    let rows = pool.query(c, sql::HEAD, &[(&session, Type::TEXT)]).await?;
    let seq: i64 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
    Ok(Head::new(to_u64(seq)))
}

/// The store refuses something, worded with the database.
pub(crate) fn refused(pool: &Pool, message: String) -> PostgresError {
    PostgresError::Refused {
        location: pool.location().to_owned(),
        message,
    }
}

/// Another writer's entries are where this one's would go.
pub(crate) fn conflict(pool: &Pool, session: &str, at: Head, found: Head) -> Fail {
    Fail::Store(StoreError::conflict(pool.location(), session, at, found))
}
