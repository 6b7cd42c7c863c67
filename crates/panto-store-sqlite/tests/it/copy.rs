//! A session copied into another session of its own store: many pages, so the import's channel
//! of one batch must wait for the copy's reads while the import's transaction is open, on both
//! tokio runtimes, with and without another writer appending to a third session meanwhile.

use std::sync::mpsc;
use std::time::Duration;

use panto_model::{Entry, Message};
use panto_store::{Head, PAGE_BYTES, Store, StoreError, copy_session};
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use super::fresh;

/// How long a copy of a few pages may take before the test calls it a hang (it takes well
/// under a second; a copy that waits on itself never ends).
const HANG: Duration = Duration::from_secs(60);

/// Entries of this many bytes of text each: `PAGE_BYTES / BIG` of them fill a page.
const BIG: usize = 256 * 1024;

/// `work` on its own thread with a runtime of `flavor`, its answer awaited for at most
/// [`HANG`]: a copy that waits on itself fails the test (the stuck thread is left behind)
/// instead of hanging it, on a current-thread runtime too, where the wait blocks the runtime's
/// one thread and no tokio timer could fire.
fn within<T: Send + 'static>(
    multi_thread: bool,
    work: impl FnOnce() -> std::pin::Pin<Box<dyn Future<Output = T> + Send>> + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = if multi_thread {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread().build()
        }
        .unwrap();
        let _ = tx.send(runtime.block_on(work()));
    });
    rx.recv_timeout(HANG).unwrap_or_else(|e| {
        panic!("the copy did not end within {HANG:?} ({e}): it waits on itself")
    })
}

/// Enough big entries for two pages and some: the copy reads three pages and an empty one, the
/// import's channel holds one, so the import waits for a read with its transaction open.
fn history() -> Vec<Entry> {
    let count = 2 * PAGE_BYTES / BIG + 3;
    (0..count)
        .map(|i| Entry::Message(Message::user_text(format!("{i:06} {}", "x".repeat(BIG)))))
        .collect()
}

/// Copies `s` (the big history) to `t` in the same store, with `third` appended to meanwhile
/// when `others` is on; checks the copy is the history exactly and every append that returned
/// a head is there, in order. Returns how many appends failed: each may only fail
/// `Unavailable`, the write lock held by the import past the busy timeout.
async fn copy_into_itself(store: SqliteStore, others: bool) -> usize {
    let entries = history();
    let head = store.append("s", Head::EMPTY, &entries).await.unwrap();
    let appender = others.then(|| {
        let store = store.clone();
        tokio::spawn(async move {
            let (mut at, mut stored, mut failed) = (Head::EMPTY, Vec::new(), 0);
            for i in 0..40 {
                let text = format!("third {i}");
                let entry = Entry::Message(Message::user_text(text.clone()));
                match store.append("third", at, &[entry]).await {
                    Ok(next) => (at, _) = (next, stored.push(text)),
                    Err(StoreError::Unavailable { .. }) => failed += 1,
                    Err(e) => panic!("append {i}: {e}"),
                }
                tokio::task::yield_now().await;
            }
            (stored, failed)
        })
    });
    let copied = copy_session(&store, "s", &store, "t").await.unwrap();
    assert_eq!(copied, head);
    let mut failed = 0;
    if let Some(appender) = appender {
        let stored;
        (stored, failed) = appender.await.unwrap();
        let third = store.load("third").await.unwrap();
        let texts: Vec<String> = third.context.messages.iter().map(Message::text).collect();
        assert_eq!(texts, stored);
        assert_eq!(stored.len() + failed, 40);
    }
    // Page by page, the copy holds the history's texts exactly.
    let (mut from, mut pages) = (Head::EMPTY, 0);
    loop {
        let (a, b) = (
            store.read("s", from, usize::MAX).await.unwrap(),
            store.read("t", from, usize::MAX).await.unwrap(),
        );
        assert_eq!(a.records, b.records);
        if a.records.is_empty() {
            break;
        }
        (from, pages) = (a.next, pages + 1);
    }
    assert_eq!((from, pages), (head, 3));
    assert_eq!(store.head("t").await.unwrap(), head);
    failed
}

#[test]
fn a_copy_of_many_pages_into_its_own_store_ends_on_either_runtime() {
    for multi_thread in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh(&dir, "c.sqlite3");
        within(multi_thread, move || {
            Box::pin(copy_into_itself(store, false))
        });
    }
}

/// On a multi-thread runtime an append waits for the copy on a blocking thread and then goes
/// in: all 40 are stored. On a current-thread runtime an append waits on the runtime's one
/// thread, which the import needs to be fed, so it fails `Unavailable` after its busy timeout
/// and the copy goes on: the copy ends whole, and what failed is not stored.
#[test]
fn a_copy_into_its_own_store_ends_while_another_session_is_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "m.sqlite3");
    let failed = within(true, move || Box::pin(copy_into_itself(store, true)));
    assert_eq!(failed, 0);
    let options = SqliteOptions::default()
        .with_fsync(false)
        .with_busy_timeout(Duration::from_millis(300));
    let store = SqliteStore::open_blocking(dir.path().join("c.sqlite3"), options).unwrap();
    within(false, move || Box::pin(copy_into_itself(store, true)));
}
