//! `SessionLog`: one session of a store as one writer last saw it; its appends are conditional
//! on that view, so a writer never interleaves its entries with another's, and it tells another
//! writer's appends from a session that was replaced.

use std::hash::{DefaultHasher, Hash, Hasher};

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
///
/// A head alone cannot tell another writer's appends from a session replaced by a longer one
/// (another conversation copied over the file, a database session deleted and written again),
/// so the log also keeps a *mark*: where one record it read or wrote starts and a hash of its
/// text (the first record of its last append, or the session's first record after a load).
/// [`SessionLog::change`] reads that one record again: O(1), whatever the history's length.
#[derive(Clone, Debug)]
pub struct SessionLog<S> {
    store: S,
    session: String,
    head: Head,
    conflicted: bool,
    mark: Option<Mark>,
}

/// A record this log read or wrote: the position it starts at (the `from` that
/// [`Store::read`] gives it back for) and a hash of its exact text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mark {
    at: Head,
    hash: u64,
}

impl Mark {
    fn new(at: Head, record: &Record) -> Mark {
        let mut hasher = DefaultHasher::new();
        record.text.hash(&mut hasher);
        Mark {
            at,
            hash: hasher.finish(),
        }
    }
}

/// What became of a session since a [`SessionLog`] last saw it ([`SessionLog::change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionChange {
    /// It ends where the log saw it end, with the log's record where it was.
    Unchanged,
    /// Other writers appended after what the log saw: it now ends at this head.
    Appended(Head),
    /// It is gone: no such session, or one that holds nothing any more.
    Gone,
    /// It holds another history than the one the log saw: shorter, or without the log's
    /// record where it was (another conversation put in its place).
    Replaced,
}

impl<S: Store> SessionLog<S> {
    /// The log of `session` in `store`, which this writer last saw end at `head`.
    pub fn new(store: S, session: impl Into<String>, head: Head) -> SessionLog<S> {
        SessionLog {
            store,
            session: session.into(),
            head,
            conflicted: false,
            mark: None,
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
        let mut log = SessionLog::new(store, session, loaded.head);
        log.mark_first().await?;
        Ok((log, loaded))
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
        let at = self.head;
        let result = self.store.append_records(&self.session, at, records).await;
        self.conflicted = matches!(result, Err(StoreError::Conflict { .. }));
        self.head = result?;
        if let Some(first) = records.first() {
            self.mark = Some(Mark::new(at, first));
        }
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
        self.mark_first().await?;
        Ok(loaded)
    }

    /// Marks the session's first record (when it has one): what the log read is that session.
    /// A history that cannot be read from its start (a line before the latest compaction that
    /// is not an entry, which a load does not reach) leaves no mark: the head alone is checked
    /// until the log's first append marks its own record.
    async fn mark_first(&mut self) -> Result<(), StoreError> {
        self.mark = None;
        if self.head == Head::EMPTY {
            return Ok(());
        }
        let page = match self.store.read(&self.session, Head::EMPTY, 1).await {
            Err(StoreError::NotFound { .. } | StoreError::Invalid { .. }) => return Ok(()),
            other => other?,
        };
        self.mark = page.records.first().map(|r| Mark::new(Head::EMPTY, r));
        Ok(())
    }

    /// What became of the session since this log last saw it: nothing, other writers'
    /// appends, or it is gone or replaced (see [`SessionChange`]). Costs the store's head and one
    /// record read at the log's mark, however long the history.
    ///
    /// A replacement that keeps the log's marked record where it was (a copy of this very
    /// session, continued elsewhere) reads as appends: what the log saw is still its start.
    ///
    /// # Errors
    /// As [`Store::head`] and [`Store::read`] (a session that is not found is
    /// [`SessionChange::Gone`], a record the store cannot read where the mark is
    /// [`SessionChange::Replaced`]).
    pub async fn change(&self) -> Result<SessionChange, StoreError> {
        let now = self.store.head(&self.session).await?;
        if now == Head::EMPTY && self.head != Head::EMPTY {
            return Ok(SessionChange::Gone);
        }
        if now < self.head {
            return Ok(SessionChange::Replaced);
        }
        if let Some(mark) = self.mark {
            let page = match self.store.read(&self.session, mark.at, 1).await {
                Err(StoreError::NotFound { .. }) => return Ok(SessionChange::Gone),
                // A position inside another file's line, say.
                Err(StoreError::Invalid { .. }) => return Ok(SessionChange::Replaced),
                other => other?,
            };
            let same = page.records.first().map(|r| Mark::new(mark.at, r)) == Some(mark);
            if !same {
                return Ok(SessionChange::Replaced);
            }
        }
        Ok(if now == self.head {
            SessionChange::Unchanged
        } else {
            SessionChange::Appended(now)
        })
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
        if let Some(first) = records.first() {
            self.mark = Some(Mark::new(head, first));
        }
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
