//! The default recall and fetch of every store: read the whole history through
//! [`Store::read`], index it in memory, and answer. Slower than an index a store keeps, never
//! different.

use panto_model::{Entry, Items};

use super::Store;
use crate::error::StoreError;
use crate::head::Head;
use crate::recall::{
    Fetched, RecallIndex, RecallQuery, Recalled, context_fingerprints, fetch_in, no_such_id,
    recall_in,
};

/// Records read per page.
const PAGE: usize = 4_096;

/// Adds to `index` the entries of `session` after the ones it holds, read from `from` (where
/// they start in the store) to the end; returns where the history ends.
///
/// # Errors
/// As [`Store::read`].
pub async fn index_from<S: Store + ?Sized>(
    store: &S,
    session: &str,
    index: &mut RecallIndex,
    from: Head,
) -> Result<Head, StoreError> {
    let first = index.entries();
    each_entry(store, session, from, first, |_, entry| index.push(entry)).await
}

/// Reads `session`'s history from `from` to the end, giving each entry, decoded, to `each`
/// with its position (`first` for the first one read); returns where the history ends.
///
/// # Errors
/// As [`Store::read`]; [`StoreError::Invalid`] naming the line of an entry that does not
/// decode.
async fn each_entry<S: Store + ?Sized>(
    store: &S,
    session: &str,
    mut from: Head,
    first: u64,
    mut each: impl FnMut(u64, &Entry) + Send,
) -> Result<Head, StoreError> {
    let mut position = first;
    loop {
        let page = store.read(session, from, PAGE).await?;
        if page.records.is_empty() {
            return Ok(from);
        }
        for r in &page.records {
            let line = usize::try_from(position).unwrap_or(usize::MAX) + 1;
            let entry = r.decode(line).map_err(|e| {
                StoreError::invalid(
                    session,
                    format!("{}: session {session}: {e}", store.location()),
                )
            })?;
            each(position, &entry);
            position += 1;
        }
        from = page.next;
    }
}

/// [`Store::recall`] by reading the whole history: what a store without an index of its own
/// answers.
///
/// # Errors
/// As [`Store::read`] and [`Store::load`].
pub async fn recall_by_scan<S: Store + ?Sized>(
    store: &S,
    session: &str,
    query: &RecallQuery,
) -> Result<Recalled, StoreError> {
    let loaded = store.load(session).await?;
    let mut index = RecallIndex::new();
    index_from(store, session, &mut index, Head::EMPTY).await?;
    Ok(recall_in(
        &index,
        query,
        &context_fingerprints(&loaded.context),
    ))
}

/// [`Store::fetch`] by reading the whole history.
///
/// # Errors
/// [`StoreError::NotFound`] when no item or entry has the id; as [`Store::read`].
pub async fn fetch_by_scan<S: Store + ?Sized>(
    store: &S,
    session: &str,
    id: &str,
    context: usize,
) -> Result<Fetched, StoreError> {
    // Only the items are needed: walking the entries is enough, no terms are counted.
    let (mut walk, mut items) = (Items::new(), Vec::new());
    each_entry(store, session, Head::EMPTY, 0, |position, entry| {
        items.extend(walk.of(position, entry));
    })
    .await?;
    fetch_in(&items, id, context).ok_or_else(|| no_such_id(&store.location(), session, id))
}
