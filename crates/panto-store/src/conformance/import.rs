//! The checks of [`Store::import`] and of pages that bound an export's memory: an import is one
//! unit (all of it, or nothing and no session), streams in batches, refuses a session with
//! entries, and a page of [`Store::read`] stops after [`PAGE_BYTES`] of text.

use async_trait::async_trait;

use super::{CONTRACT_FILE, export, records_of, user};
use crate::error::StoreError;
use crate::head::Head;
use crate::record::Record;
use crate::source::{RecordSource, Records};
use crate::store::{PAGE_BYTES, Store};

/// A source that gives `good` records in batches of two, then fails as a malformed line of a
/// file would.
struct FailsAfter {
    good: Records,
}

#[async_trait]
impl RecordSource for FailsAfter {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        match self.good.next_batch().await? {
            Some(batch) => Ok(Some(batch)),
            None => Err(StoreError::invalid(
                "import.jsonl",
                "import.jsonl: line 9, column 1: expected value",
            )),
        }
    }
}

pub(super) async fn import_is_one_unit_in_batches<S: Store>(store: &S) {
    let records = records_of(CONTRACT_FILE);
    let mut source = Records::new(records.clone(), 2);
    let head = store.import("s.jsonl", &mut source).await.expect("import");
    assert_eq!(store.head("s.jsonl").await.expect("head"), head);
    assert_eq!(
        export(store, "s.jsonl", 3).await,
        CONTRACT_FILE,
        "the export of an import is the original file byte for byte"
    );
    assert_eq!(
        store.list().await.expect("list"),
        vec!["s.jsonl".to_owned()]
    );
}

pub(super) async fn a_failed_import_leaves_nothing<S: Store>(store: &S) {
    let mut source = FailsAfter {
        good: Records::new(records_of(CONTRACT_FILE), 2),
    };
    let error = store
        .import("s.jsonl", &mut source)
        .await
        .expect_err("the source fails");
    assert!(
        matches!(error, StoreError::Invalid { .. }),
        "the source's error comes back: {error:?}"
    );
    assert!(
        store.list().await.expect("list").is_empty(),
        "a failed import creates no session"
    );
    assert_eq!(store.head("s.jsonl").await.expect("head"), Head::EMPTY);
    assert!(matches!(
        store.load("s.jsonl").await,
        Err(StoreError::NotFound { .. })
    ));
    // The name is free for the next import.
    let mut again = Records::new(records_of(CONTRACT_FILE), 100);
    store.import("s.jsonl", &mut again).await.expect("import");
    assert_eq!(export(store, "s.jsonl", 100).await, CONTRACT_FILE);
}

pub(super) async fn import_refuses_a_session_with_entries<S: Store>(store: &S) {
    let head = store
        .append("s.jsonl", Head::EMPTY, &[user("mine", "m1")])
        .await
        .expect("append");
    let mut source = Records::new(records_of(CONTRACT_FILE), 2);
    let error = store
        .import("s.jsonl", &mut source)
        .await
        .expect_err("the session has entries");
    assert!(error.is_conflict(), "{error:?}");
    assert_eq!(store.head("s.jsonl").await.expect("head"), head);
    // A session that exists but holds nothing takes an import.
    store.prepare_append("b.jsonl").await.expect("prepare");
    let mut source = Records::new(records_of(CONTRACT_FILE), 2);
    store.import("b.jsonl", &mut source).await.expect("import");
    assert_eq!(export(store, "b.jsonl", 7).await, CONTRACT_FILE);
}

pub(super) async fn pages_stop_after_page_bytes<S: Store>(store: &S) {
    // Three entries of three fifths of a page each: a page takes two of them at most.
    let big = PAGE_BYTES * 3 / 5;
    let entries: Vec<_> = (0..3)
        .map(|i| user(&"x".repeat(big), &format!("big{i}")))
        .collect();
    store
        .append("s.jsonl", Head::EMPTY, &entries)
        .await
        .expect("append");
    let page = store
        .read("s.jsonl", Head::EMPTY, 1000)
        .await
        .expect("read");
    let bytes: usize = page.records.iter().map(|r| r.text.len()).sum();
    assert_eq!(page.records.len(), 2, "{bytes} bytes in a page");
    let rest = store.read("s.jsonl", page.next, 1000).await.expect("read");
    assert_eq!(rest.records.len(), 1);
    let end = store.read("s.jsonl", rest.next, 1000).await.expect("read");
    assert!(end.records.is_empty());
}
