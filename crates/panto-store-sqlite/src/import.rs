//! An import as one `BEGIN IMMEDIATE` transaction on a blocking thread, fed the source's
//! batches through a channel of one batch, so the import holds one batch whatever the size of
//! the history. The source failing, or the transaction, rolls all of it back (the session's
//! row included).
//!
//! The transaction runs on a connection opened for the import, not on the store's: the source
//! may be a session of the same store (a copy within it), whose pages are read on the store's
//! reader connection while the transaction is open. With one connection for both, the import
//! would hold it waiting for the next batch while the read of that batch waited for it.

use panto_store::{Head, Record, RecordSource, StoreError};
use rusqlite::{Connection, TransactionBehavior, params};
use tokio::sync::mpsc;

use crate::error::unavailable;
use crate::open::Connect;
use crate::session::{head_of, to_i64};

/// What the async side tells the transaction.
enum Step {
    /// More rows.
    Rows(Vec<Record>),
    /// The source is done: commit.
    Commit,
}

/// [`panto_store::Store::import`] on a connection that `connect` opens for it.
pub(crate) async fn import(
    connect: &Connect,
    location: &str,
    session: &str,
    source: &mut dyn RecordSource,
) -> Result<Head, StoreError> {
    let (tx, rx) = mpsc::channel::<Step>(1);
    let (connect, location, name) = (connect.clone(), location.to_owned(), session.to_owned());
    let writer = tokio::task::spawn_blocking(move || {
        let mut conn = connect.open(&location)?;
        write(&mut conn, &location, &name, rx)
    });
    let mut failed = None;
    loop {
        let step = match source.next_batch().await {
            Ok(Some(batch)) => Step::Rows(batch),
            Ok(None) => Step::Commit,
            Err(e) => {
                // Dropping the channel without `Commit` rolls the transaction back.
                failed = Some(e);
                break;
            }
        };
        let commit = matches!(step, Step::Commit);
        // The writer stopped (its error comes below) or took the last step.
        if tx.send(step).await.is_err() || commit {
            break;
        }
    }
    drop(tx);
    let written = match writer.await {
        Ok(result) => result,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    match failed {
        Some(e) => Err(e),
        None => written,
    }
}

/// The transaction: the head checked, then the rows as they come, then the commit.
fn write(
    conn: &mut Connection,
    location: &str,
    session: &str,
    mut rx: mpsc::Receiver<Step>,
) -> Result<Head, StoreError> {
    let fail = |what: &str| unavailable(session, location, what);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("cannot start the import"))?;
    let found = head_of(&tx, session, location)?;
    if found != Head::EMPTY {
        return Err(StoreError::conflict(location, session, Head::EMPTY, found));
    }
    tx.prepare_cached("INSERT OR IGNORE INTO panto_sessions (name) VALUES (?1)")
        .and_then(|mut s| s.execute(params![session]))
        .map_err(fail("cannot import"))?;
    let mut count = 0u64;
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO panto_entries (session, seq, kind, text) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(fail("cannot import"))?;
        loop {
            match rx.blocking_recv() {
                Some(Step::Rows(batch)) => {
                    for r in &batch {
                        count += 1;
                        insert
                            .execute(params![session, to_i64(count), r.kind.code(), r.text])
                            .map_err(fail("cannot import"))?;
                    }
                }
                Some(Step::Commit) => break,
                // The source failed: the transaction rolls back as it is dropped.
                None => return Ok(Head::EMPTY),
            }
        }
    }
    if count == 0 {
        // Nothing to import: no session either (the transaction rolls back as it is dropped).
        return Ok(Head::EMPTY);
    }
    tx.commit().map_err(fail("cannot commit the import"))?;
    Ok(Head::new(count))
}
