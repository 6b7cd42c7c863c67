//! `SessionLog`: one session of a store as one writer last saw it; its appends are conditional
//! on that view, so a writer never interleaves its entries with another's.

use panto_model::Entry;

use crate::error::StoreError;
use crate::head::Head;
use crate::record::Record;
use crate::store::{Loaded, Page, Store};

/// How many records [`SessionLog::appended_since`] reads at a time.
const PAGE: usize = 256;

/// One session of a [`Store`], as this writer last saw it: the store, the session's name and
/// the [`Head`] of the writer's last load or append.
///
/// Every append is conditional on that head ([`Store::append_records`]): when another writer
/// appended in between, the append writes nothing and fails with [`StoreError::Conflict`],
/// and [`SessionLog::conflicted`] says so; [`SessionLog::reload`] reads the session again and
/// moves the head to its end. No lock is held between calls, so a model may take minutes to
/// answer without holding up other writers.
///
/// The `Driver` and the `Compactor` write through it; it is all they know of storage.
#[derive(Clone, Debug)]
pub struct SessionLog<S> {
    store: S,
    session: String,
    head: Head,
    conflicted: bool,
}

impl<S: Store> SessionLog<S> {
    /// The log of `session` in `store`, which this writer last saw end at `head`.
    pub fn new(store: S, session: impl Into<String>, head: Head) -> SessionLog<S> {
        SessionLog {
            store,
            session: session.into(),
            head,
            conflicted: false,
        }
    }

    /// Loads `session` from `store`: the log, at the session's end, and what was loaded. A
    /// session that does not exist yet loads as the empty context at [`Head::EMPTY`] (the
    /// first append creates it).
    ///
    /// # Errors
    /// As [`Store::load`], but for [`StoreError::NotFound`].
    pub async fn open(
        store: S,
        session: impl Into<String>,
    ) -> Result<(SessionLog<S>, Loaded), StoreError> {
        let session = session.into();
        let loaded = match store.load(&session).await {
            Err(StoreError::NotFound { .. }) => Loaded::default(),
            other => other?,
        };
        Ok((SessionLog::new(store, session, loaded.head), loaded))
    }

    /// Appends `entries` as one unit where this writer last saw the session end, and moves the
    /// head past them.
    ///
    /// # Errors
    /// As [`Store::append_records`]; on [`StoreError::Conflict`] nothing was written and
    /// [`SessionLog::conflicted`] is set until the next successful append or reload.
    pub async fn append(&mut self, entries: &[Entry]) -> Result<(), StoreError> {
        let records: Vec<Record> = entries.iter().map(Record::encode).collect();
        self.append_records(&records).await
    }

    /// Appends records (exact lines, as an import keeps them) like [`SessionLog::append`].
    ///
    /// # Errors
    /// As [`SessionLog::append`].
    pub async fn append_records(&mut self, records: &[Record]) -> Result<(), StoreError> {
        let result = self
            .store
            .append_records(&self.session, self.head, records)
            .await;
        self.conflicted = matches!(result, Err(StoreError::Conflict { .. }));
        self.head = result?;
        Ok(())
    }

    /// Reads the session again and moves the head to its end.
    ///
    /// # Errors
    /// As [`SessionLog::open`].
    pub async fn reload(&mut self) -> Result<Loaded, StoreError> {
        let loaded = match self.store.load(&self.session).await {
            Err(StoreError::NotFound { .. }) => Loaded::default(),
            other => other?,
        };
        self.head = loaded.head;
        self.conflicted = false;
        Ok(loaded)
    }

    /// The records other writers appended since this log last saw the session, oldest first,
    /// with where the session ends after them ([`Page::next`]). The head does not move: a
    /// writer that takes those records into account appends after them with
    /// [`SessionLog::append_after`]; one that does not [`SessionLog::reload`]s.
    ///
    /// # Errors
    /// As [`Store::read`].
    pub async fn appended_since(&self) -> Result<Page, StoreError> {
        let mut records = Vec::new();
        let mut from = self.head;
        loop {
            let page = match self.store.read(&self.session, from, PAGE).await {
                // A session no one has created yet holds nothing.
                Err(StoreError::NotFound { .. }) if from == Head::EMPTY => Page::default(),
                other => other?,
            };
            if page.records.is_empty() {
                return Ok(Page::new(records, from));
            }
            from = page.next;
            records.extend(page.records);
        }
    }

    /// Appends `entries` as one unit where the session ended after what other writers
    /// appended (`head`, the [`Page::next`] of [`SessionLog::appended_since`]), for a writer
    /// that has taken their records into account (a compaction that keeps them as copies).
    /// The append is conditional on `head` as [`SessionLog::append`] is on the log's own; the
    /// head moves only when it succeeds.
    ///
    /// # Errors
    /// As [`SessionLog::append`].
    pub async fn append_after(&mut self, head: Head, entries: &[Entry]) -> Result<(), StoreError> {
        let records: Vec<Record> = entries.iter().map(Record::encode).collect();
        let result = self
            .store
            .append_records(&self.session, head, &records)
            .await;
        self.conflicted = matches!(result, Err(StoreError::Conflict { .. }));
        self.head = result?;
        Ok(())
    }

    /// Whether another writer appended since this log last saw the session.
    ///
    /// # Errors
    /// As [`Store::head`].
    pub async fn changed(&self) -> Result<bool, StoreError> {
        Ok(self.store.head(&self.session).await? != self.head)
    }

    /// Where this writer last saw the session end.
    pub fn head(&self) -> Head {
        self.head
    }

    /// Whether the last append failed because another writer had appended.
    pub fn conflicted(&self) -> bool {
        self.conflicted
    }

    /// The session's name in its store.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }
}
