//! `copy_session`: a session's whole history into a new session, of the same store or of
//! another, as one import whose source is the first session's pages.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::head::Head;
use crate::record::Record;
use crate::source::RecordSource;
use crate::store::Store;

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
