//! `RecordSource`: where an import's records come from, a batch at a time, so that a store
//! imports a history of any size holding one batch; and `copy_session`, an import whose
//! source is another store's session.

use std::collections::VecDeque;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::head::Head;
use crate::record::Record;
use crate::store::Store;

/// The records of a history to import ([`crate::Store::import`]), in order, a batch at a time.
/// A source bounds its batches (a file reader: a few MiB, or one entry when it is larger), so
/// an import holds one batch, whatever the size of the history.
#[async_trait]
pub trait RecordSource: Send {
    /// The next records, oldest first, or `None` after the last one. A batch is never empty.
    ///
    /// # Errors
    /// A record that cannot be read (for a file: [`StoreError::Invalid`] naming the file, line
    /// and field): the import stops and writes nothing.
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError>;
}

/// Records already in memory, given in batches of a fixed number of records: a source for
/// tests and for a program that holds its history anyway.
#[derive(Clone, Debug, Default)]
pub struct Records {
    batches: VecDeque<Vec<Record>>,
}

impl Records {
    /// `records` in batches of `batch` records (at least one).
    pub fn new(records: Vec<Record>, batch: usize) -> Records {
        let batch = batch.max(1);
        let mut batches = VecDeque::new();
        let mut rest = records.into_iter().peekable();
        while rest.peek().is_some() {
            batches.push_back(rest.by_ref().take(batch).collect());
        }
        Records { batches }
    }
}

#[async_trait]
impl RecordSource for Records {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        Ok(self.batches.pop_front())
    }
}

/// The history of a session of a store as a [`RecordSource`]: its pages ([`Store::read`]) one
/// at a time, so a copy holds one page whatever the history's size.
struct StoreSource<'a, S: Store + ?Sized> {
    store: &'a S,
    session: &'a str,
    next: Head,
}

#[async_trait]
impl<S: Store + ?Sized> RecordSource for StoreSource<'_, S> {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        let page = self.store.read(self.session, self.next, usize::MAX).await?;
        if page.records.is_empty() {
            return Ok(None);
        }
        self.next = page.next;
        Ok(Some(page.records))
    }
}

/// Copies the whole history of `from_session` in `from` into `to_session`, a session of `to`
/// that must not exist yet: every record's text exactly, in order, read a page at a time and
/// written as one unit ([`Store::import`]), so the copy is all of it or nothing and no
/// session. The stores may be of different kinds (a JSONL file into PostgreSQL) or the same
/// store under another name. Returns where the copy ends, which equals the source's head
/// when no writer appended to the source meanwhile.
///
/// # Errors
/// [`StoreError::NotFound`] when the source session has no records; [`StoreError::Conflict`]
/// when `to_session` already has records (nothing is written); otherwise what reading the
/// source or importing into the target failed with (nothing is written).
pub async fn copy_session<A, B>(
    from: &A,
    from_session: &str,
    to: &B,
    to_session: &str,
) -> Result<Head, StoreError>
where
    A: Store + ?Sized,
    B: Store + ?Sized,
{
    let found = to.head(to_session).await?;
    if found != Head::EMPTY {
        return Err(StoreError::Conflict {
            session: to_session.to_owned(),
            expected: Head::EMPTY,
            found,
            source: format!(
                "{to_session}: the session already has {} entries in {}; a copy writes only a new session",
                found.get(),
                to.location()
            )
            .into(),
        });
    }
    if from.head(from_session).await? == Head::EMPTY {
        return Err(StoreError::NotFound {
            session: from_session.to_owned(),
            source: format!("{from_session}: no such session in {}", from.location()).into(),
        });
    }
    let mut source = StoreSource {
        store: from,
        session: from_session,
        next: Head::EMPTY,
    };
    let head = to.import(to_session, &mut source).await?;
    Ok(head)
}
