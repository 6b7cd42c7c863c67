//! The check that a [`SessionLog`] tells another writer's appends from a session replaced by a
//! longer one: what a chat needs so as never to go on from another conversation.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use super::user;
use crate::error::StoreError;
use crate::head::Head;
use crate::log::{SessionChange, SessionLog};
use crate::record::Record;
use crate::store::{Loaded, Page, Store};

/// The session panto's log follows, and the longer conversation put in its place.
const OURS: &str = "s.jsonl";
const OTHER: &str = "b.jsonl";

/// The store under test, in which session [`OURS`] is, once [`Swapped::swap`] was called, the
/// store's [`OTHER`]: another conversation put in its place, as a file copied over another or a
/// database session deleted and written again would be (the trait has no delete).
struct Swapped<'a, S> {
    store: &'a S,
    swapped: AtomicBool,
}

impl<S> Swapped<'_, S> {
    fn swap(&self) {
        self.swapped.store(true, Ordering::SeqCst);
    }

    fn name<'n>(&self, session: &'n str) -> &'n str {
        if session == OURS && self.swapped.load(Ordering::SeqCst) {
            OTHER
        } else {
            session
        }
    }
}

#[async_trait]
impl<S: Store> Store for Swapped<'_, S> {
    fn location(&self) -> String {
        self.store.location()
    }
    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        self.store.load(self.name(session)).await
    }
    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.store.head(self.name(session)).await
    }
    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        self.store
            .append_records(self.name(session), at, records)
            .await
    }
    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        self.store.read(self.name(session), from, max).await
    }
    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.store.list().await
    }
}

async fn change<S: Store>(log: &SessionLog<S>) -> SessionChange {
    log.change().await.expect("change")
}

/// A log that appended, and one that only loaded, each see another writer's append as an
/// append, and a longer conversation put in the session's place as a replacement, whether
/// the mark is the log's own record or the session's first; a log over the new session as it
/// is now sees it unchanged.
pub(super) async fn a_replaced_session_is_not_taken_for_appends<S: Store>(store: &S) {
    let other: Vec<_> = (1..=6)
        .map(|i| user(&format!("another conversation, turn {i}"), &format!("o{i}")))
        .collect();
    store
        .append(OTHER, Head::EMPTY, &other)
        .await
        .expect("append the other conversation");
    let swapped = Swapped {
        store,
        swapped: AtomicBool::new(false),
    };
    let (mut mine, _) = SessionLog::open(&swapped, OURS).await.expect("open");
    assert_eq!(
        change(&mine).await,
        SessionChange::Unchanged,
        "a new session"
    );
    mine.append(&[user("mine", "m1")]).await.expect("append");
    assert_eq!(change(&mine).await, SessionChange::Unchanged);
    let (mut theirs, _) = SessionLog::open(store, OURS).await.expect("open");
    theirs
        .append(&[user("theirs", "t1")])
        .await
        .expect("another writer appends");
    assert_eq!(
        change(&mine).await,
        SessionChange::Appended(theirs.head()),
        "another writer's append"
    );
    mine.reload().await.expect("reload");
    assert_eq!(
        change(&mine).await,
        SessionChange::Unchanged,
        "after a reload"
    );
    // Marked by its own record, past the session's start.
    mine.append(&[user("mine again", "m2")])
        .await
        .expect("append");
    // Marked by the session's first record.
    let (reader, _) = SessionLog::open(&swapped, OURS).await.expect("open");
    let ours = store.head(OURS).await.expect("head");
    let replacement = store.head(OTHER).await.expect("head");
    assert!(replacement > ours, "the other conversation is the longer");
    swapped.swap();
    assert_eq!(
        change(&mine).await,
        SessionChange::Replaced,
        "after an append"
    );
    assert_eq!(
        change(&reader).await,
        SessionChange::Replaced,
        "after a load"
    );
    mine.reload().await.expect("reload");
    assert_eq!(
        change(&mine).await,
        SessionChange::Unchanged,
        "the new session as it is now"
    );
}
