//! One try of an append: the conditional `INSERT`, and, when an earlier try lost its
//! connection, the check of what it wrote first, so that an append is applied once or not at
//! all.

use panto_store::{Head, Record};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::attempt::Fail;
use crate::pool::Pool;
use crate::session::{conflict, head, to_i64};
use crate::sql;

/// What an earlier try of an append left.
enum Written {
    /// Its rows are there: it took effect.
    Ours(Head),
    /// The session still ends where the append starts: it did not.
    Nothing,
    /// Another writer's rows are there.
    Theirs(Head),
}

/// One try of [`panto_store::Store::append_records`]; `unknown` when an earlier try may have
/// written.
pub(crate) async fn append(
    pool: &Pool,
    c: &Client,
    session: &str,
    at: Head,
    records: &[Record],
    unknown: bool,
) -> Result<Head, Fail> {
    let end = Head::new(at.get() + records.len() as u64);
    if unknown {
        match written(pool, c, session, at, records).await? {
            Written::Ours(head) => return Ok(head),
            Written::Theirs(found) => return Err(conflict(pool, session, at, found)),
            Written::Nothing => {}
        }
    }
    if records.is_empty() {
        let found = head(pool, c, session).await?;
        if found != at {
            return Err(conflict(pool, session, at, found));
        }
        return Ok(found);
    }
    let kinds: Vec<i16> = records.iter().map(|r| r.kind.code()).collect();
    let bodies: Vec<&[u8]> = records.iter().map(|r| r.text.as_bytes()).collect();
    let start = to_i64(at.get());
    let inserted = pool
        .query(
            c,
            sql::APPEND,
            &[
                (&session, Type::TEXT),
                (&start, Type::INT8),
                (&kinds, Type::INT2_ARRAY),
                (&bodies, Type::BYTEA_ARRAY),
            ],
        )
        .await;
    match inserted {
        Ok(rows) => {
            let n: i64 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
            if n == to_i64(records.len() as u64) {
                return Ok(end);
            }
        }
        // Another writer's row took a position first: the database decided.
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
        Err(e) => return Err(e.into()),
    }
    // Nothing went in: the head was not `at`. After a lost try, the rows in the way may be
    // that try's own, committed late.
    if unknown && let Written::Ours(head) = written(pool, c, session, at, records).await? {
        return Ok(head);
    }
    let found = head(pool, c, session).await?;
    Err(conflict(pool, session, at, found))
}

/// What is after `at` now: these records (an earlier try took effect), nothing, or
/// another writer's.
async fn written(
    pool: &Pool,
    c: &Client,
    session: &str,
    at: Head,
    records: &[Record],
) -> Result<Written, Fail> {
    let after = to_i64(at.get());
    let to = to_i64(at.get() + records.len() as u64);
    let params = [
        (&session as _, Type::TEXT),
        (&after as _, Type::INT8),
        (&to as _, Type::INT8),
    ];
    let (rows, head) = tokio::join!(pool.query(c, sql::WRITTEN, &params), head(pool, c, session));
    let (rows, head) = (rows?, head?);
    let ours = rows.len() == records.len()
        && !records.is_empty()
        && rows.iter().zip(records).all(|(row, record)| {
            row.try_get::<_, &[u8]>(1)
                .is_ok_and(|body| body == record.text.as_bytes())
        });
    Ok(if ours {
        Written::Ours(Head::new(at.get() + records.len() as u64))
    } else if head == at {
        Written::Nothing
    } else {
        Written::Theirs(head)
    })
}
