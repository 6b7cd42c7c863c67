//! Applying the schema's missing migrations when a store connects: in one transaction, under a
//! transaction-level advisory lock, so that hosts starting together migrate once and nothing
//! outlives the transaction (PgBouncer in transaction mode may give the next one another
//! server connection).

use panto_store::StoreError;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::error::PostgresError;
use crate::pool::{Phase, Pool};
use crate::schema::{BOOKKEEPING, MIGRATIONS};

/// An arbitrary constant: the advisory lock that serializes migrations across hosts.
const MIGRATION_LOCK: i64 = 0x7061_6e74_6f5f_6d31;

/// The latest migration recorded.
const VERSION: &str = "SELECT coalesce(max(version), 0) FROM panto_schema_migrations";

/// What the database holds of the schema, read without writing anything.
pub(crate) async fn version(pool: &Pool, c: &Client) -> Result<u32, tokio_postgres::Error> {
    // Whether the table exists is asked first: a statement naming a missing table fails.
    let rows = pool
        .query(
            c,
            "SELECT to_regclass('panto_schema_migrations') IS NOT NULL",
            &[],
        )
        .await?;
    let exists: bool = rows.first().map_or(Ok(false), |r| r.try_get(0))?;
    if !exists {
        return Ok(0);
    }
    let rows = pool.query(c, VERSION, &[]).await?;
    let v: i32 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
    Ok(u32::try_from(v).unwrap_or(0))
}

/// Applies what the database lacks; nothing to do, and nothing locked, when every migration is
/// there (the usual case, and the only one for a role that may not create tables).
///
/// A host that waited for the lock while another migrated may still see the catalog as it was
/// when its transaction began (the server refreshes its caches of the catalog when a transaction
/// begins or a table is locked, not when an advisory lock is granted): its migration then fails
/// on a table that exists, and it starts again in a new transaction, which sees the other's.
pub(crate) async fn migrate(pool: &Pool, c: &Client) -> Result<(), StoreError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match migrate_once(pool, c).await {
            Err(Retry::Again(_)) if tries < 10 => {}
            Err(Retry::Again(e) | Retry::Fail(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
}

/// A failed migration: one to try again in a new transaction (the catalog looked older than
/// it is), or the error.
enum Retry {
    Again(StoreError),
    Fail(StoreError),
}

async fn migrate_once(pool: &Pool, c: &Client) -> Result<(), Retry> {
    let fail = |what: &str, e: tokio_postgres::Error| pool.error("", what, &e);
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    let have = version(pool, c)
        .await
        .map_err(|e| Retry::Fail(fail("cannot read the schema version", e)))?;
    if have > latest {
        return Err(Retry::Fail(StoreError::invalid(
            "",
            PostgresError::Refused {
                location: pool.location().to_owned(),
                message: format!(
                    "the database has schema version {have}, newer than this panto knows ({latest}); use a newer panto"
                ),
            },
        )));
    }
    if have == latest {
        return Ok(());
    }
    match migrate_locked(pool, c).await {
        Ok(()) => Ok(()),
        Err((e, code)) => {
            let _ = c.batch_execute("ROLLBACK").await;
            // A table or row that exists although the catalog said it did not, or the other way.
            match code.as_deref() {
                Some("42P07" | "42710" | "23505" | "42P01") => Err(Retry::Again(e)),
                _ => Err(Retry::Fail(e)),
            }
        }
    }
}

/// The migrations, in one transaction that first takes the migration lock.
async fn migrate_locked(pool: &Pool, c: &Client) -> Result<(), (StoreError, Option<String>)> {
    let fail = |what: &str, e: tokio_postgres::Error| {
        let code = e.code().map(|c| c.code().to_owned());
        (pool.error("", what, &e), code)
    };
    let (begin, lock) = tokio::join!(
        pool.begin(c, Phase::Normal),
        c.query_typed(
            "SELECT pg_advisory_xact_lock($1::bigint)",
            &[(&MIGRATION_LOCK, Type::INT8)]
        )
    );
    begin.map_err(|e| fail("cannot start the migration", e))?;
    lock.map_err(|e| fail("cannot lock the migration", e))?;
    // Another host may have migrated while this one waited for the lock; each statement of a
    // READ COMMITTED transaction sees what committed before it began.
    let exists: bool = c
        .query_typed(
            "SELECT to_regclass('panto_schema_migrations') IS NOT NULL",
            &[],
        )
        .await
        .and_then(|rows| rows.first().map_or(Ok(false), |r| r.try_get(0)))
        .map_err(|e| fail("cannot read the schema version", e))?;
    if !exists {
        c.batch_execute(BOOKKEEPING)
            .await
            .map_err(|e| fail("cannot create panto_schema_migrations", e))?;
    }
    let have: i32 = c
        .query_typed(VERSION, &[])
        .await
        .and_then(|rows| rows.first().map_or(Ok(0), |r| r.try_get(0)))
        .map_err(|e| fail("cannot read the schema version", e))?;
    for &(version, sql) in MIGRATIONS {
        if i64::from(version) <= i64::from(have) {
            continue;
        }
        c.batch_execute(sql)
            .await
            .map_err(|e| fail(&format!("cannot apply migration {version}"), e))?;
        let version = i32::try_from(version).unwrap_or(i32::MAX);
        c.query_typed(
            "INSERT INTO panto_schema_migrations (version) VALUES ($1::int4)",
            &[(&version, Type::INT4)],
        )
        .await
        .map_err(|e| fail("cannot record the migration", e))?;
    }
    c.batch_execute("COMMIT")
        .await
        .map_err(|e| fail("cannot commit the migration", e))
}
