//! The `Store` trait: load, conditional append, paged history and listing, async; with the
//! values it returns.

use std::sync::Arc;

use async_trait::async_trait;
use panto_model::{EffectiveContext, Entry};

use crate::error::StoreError;
use crate::head::Head;
use crate::recall::{Fetched, RecallQuery, Recalled};
use crate::warning::Warning;

mod scan;

use crate::record::Record;
use crate::source::RecordSource;
pub use scan::{fetch_by_scan, index_from, recall_by_scan};

/// A session's effective context as a store loaded it, with where the session ended.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Loaded {
    /// The effective context: `panto_model::replay` of every entry of the session.
    pub context: EffectiveContext,
    /// Where the session ended when it was read: the condition of the next append.
    pub head: Head,
    /// What the read noticed and skipped or repaired (a torn last line, an unknown entry type,
    /// an interrupted compaction), each naming where; its `Display` is a sentence.
    pub warnings: Vec<Warning>,
    /// Whether the session exists but holds no entry at all (a file just created, say): an
    /// agent starts a conversation in it, a command that only reads it may refuse it.
    pub empty: bool,
}

impl Loaded {
    /// A loaded session: its context, head and warnings.
    pub fn new(context: EffectiveContext, head: Head, warnings: Vec<Warning>) -> Loaded {
        Loaded {
            context,
            head,
            warnings,
            empty: false,
        }
    }
}

/// A page of a session's history: records in order, and where the next page starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// The records, oldest first. Empty when the history has no more.
    pub records: Vec<Record>,
    /// The position after the last record: the `from` of the next [`Store::read`].
    pub next: Head,
}

impl Page {
    /// A page of `records` ending before `next`.
    pub fn new(records: Vec<Record>, next: Head) -> Page {
        Page { records, next }
    }
}

/// How much record text a page of [`Store::read`] gathers before it stops: records are added
/// while the page holds less, so a page holds at most this plus one record.
pub const PAGE_BYTES: usize = 4 * 1024 * 1024;

/// Where a conversation's entries are kept: a JSONL file per session, an SQLite file, a
/// PostgreSQL database. The `Driver`, the `Compactor` and every `panto` command use a store
/// only through this trait.
///
/// What a store must keep, for replay to be right (see `docs/session.md`, "What a store
/// keeps"):
/// - every record's text, byte for byte, in the order appended; it never changes or removes
///   one, and [`Store::read`] gives them back unchanged;
/// - the records of one [`Store::append_records`] call as one unit: after a crash, either all
///   of them or a prefix of them (replay ignores a compaction whose marked copies are not all
///   there, so a prefix is safe) — a transactional store keeps all or none;
/// - the condition: an append at a head that is not the session's current one writes nothing
///   and returns [`StoreError::Conflict`]. Conflicts are decided by the store (a file's length,
///   a unique sequence number), never by a lock held while a model answers.
///
/// [`Store::load`] equals `panto_model::replay` of every record; a store makes it cost the
/// entries after the latest compaction that takes effect, not the whole history
/// ([`crate::takes_effect`] and [`crate::replay_tail`] help).
///
/// Session names are the store's: a path for the JSONL store, any text for a database.
#[async_trait]
pub trait Store: Send + Sync {
    /// Where the store is, for messages: a path, or a database URL without its password.
    fn location(&self) -> String;

    /// Loads the effective context of `session` and where the session ends. A session that
    /// exists but holds no entry loads as the empty context.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is no such session, [`StoreError::Invalid`] for an
    /// entry that cannot be read (naming it), [`StoreError::Unavailable`] otherwise.
    async fn load(&self, session: &str) -> Result<Loaded, StoreError>;

    /// Where `session` ends now ([`Head::EMPTY`] for one that does not exist): a cheap way to
    /// learn whether another writer appended.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], or [`StoreError::Invalid`] for a session name the store
    /// refuses.
    async fn head(&self, session: &str) -> Result<Head, StoreError>;

    /// Appends `records`, in order, as one unit, only if `session` still ends at `at`; returns
    /// where it ends after them. Appending at [`Head::EMPTY`] to a session that does not exist
    /// creates it. Appending no records writes nothing.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] when the session ends elsewhere (nothing is written),
    /// [`StoreError::Invalid`] for records the store cannot take, [`StoreError::Unavailable`]
    /// otherwise (nothing of the unit takes effect).
    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError>;

    /// Reads up to `max` records of `session`'s history from position `from` ([`Head::EMPTY`]
    /// for the first), oldest first, for export and checks. A page stops early once it holds
    /// [`PAGE_BYTES`] of text (so it passes that by one record at most), which bounds what an
    /// export holds; it is empty only at the end of the history.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::Invalid`] for a stored line that is not an
    /// entry (naming it), [`StoreError::Unavailable`].
    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError>;

    /// The names of the sessions in the store, sorted.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    async fn list(&self) -> Result<Vec<String>, StoreError>;

    /// Appends `entries` encoded as panto writes them ([`Record::encode`]); see
    /// [`Store::append_records`].
    ///
    /// # Errors
    /// As [`Store::append_records`].
    async fn append(&self, session: &str, at: Head, entries: &[Entry]) -> Result<Head, StoreError> {
        let records: Vec<Record> = entries.iter().map(Record::encode).collect();
        self.append_records(session, at, &records).await
    }

    /// Writes every record of `source`, in order, as the whole history of `session`, which must
    /// not exist or hold no entry; returns where it ends. **One unit**: after any failure (a
    /// record the source cannot read, another writer that started the session meanwhile, a
    /// store that fails) nothing of it is in the store and no session was created. The records
    /// stream: a store holds a batch of the source at a time, not the history.
    ///
    /// The default reads every batch, then appends them all at [`Head::EMPTY`] in one
    /// [`Store::append_records`]: one unit on a store whose appends are, but the whole history
    /// in memory. The stores of panto override it (a transaction, or a file renamed into
    /// place).
    ///
    /// # Errors
    /// The source's error, unchanged (nothing is written); [`StoreError::Conflict`] when the
    /// session has entries; otherwise as [`Store::append_records`].
    async fn import(
        &self,
        session: &str,
        source: &mut dyn RecordSource,
    ) -> Result<Head, StoreError> {
        let mut records = Vec::new();
        while let Some(batch) = source.next_batch().await? {
            records.extend(batch);
        }
        self.append_records(session, Head::EMPTY, &records).await
    }

    /// Gets ready for appends to `session` and checks, before a model is asked, that they could
    /// be written at all: the JSONL store creates a missing file (so its folder and name are
    /// checked now, and another program sees the session) and tries its lock once (it refuses a
    /// lock path that is a link). It never writes an entry. The default does nothing.
    ///
    /// # Errors
    /// What an append would fail with for a reason other than a conflict.
    async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
        let _ = session;
        Ok(())
    }

    /// Searches `session`'s history for `query`: the items (blocks of messages, compactions'
    /// summaries and ledgers) that are not in the effective context verbatim (unless the query
    /// asks for them), items holding the query's exact strings first, then by BM25
    /// (`crate::recall`). The default reads the whole history through [`Store::read`] and
    /// indexes it in memory; a store that keeps an index answers the same hits sooner.
    ///
    /// # Errors
    /// As [`Store::load`] and [`Store::read`].
    async fn recall(&self, session: &str, query: &RecallQuery) -> Result<Recalled, StoreError> {
        recall_by_scan(self, session, query).await
    }

    /// The item (or the items of the entry) `id` names in `session`'s history, with the items
    /// of `context` entries before and after it (entries that yield items: an undo is not
    /// counted). The default reads the whole history ([`fetch_by_scan`]); a store that keeps an
    /// index of ids (`crate::recall::fetch`) reads the entries around the id only, and answers
    /// the same.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when nothing has that id; as [`Store::read`].
    async fn fetch(&self, session: &str, id: &str, context: usize) -> Result<Fetched, StoreError> {
        fetch_by_scan(self, session, id, context).await
    }
}

macro_rules! forward {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: Store + ?Sized> Store for $ty {
            fn location(&self) -> String {
                (**self).location()
            }
            async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
                (**self).load(session).await
            }
            async fn head(&self, session: &str) -> Result<Head, StoreError> {
                (**self).head(session).await
            }
            async fn append_records(
                &self,
                session: &str,
                at: Head,
                records: &[Record],
            ) -> Result<Head, StoreError> {
                (**self).append_records(session, at, records).await
            }
            async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
                (**self).read(session, from, max).await
            }
            async fn list(&self) -> Result<Vec<String>, StoreError> {
                (**self).list().await
            }
            async fn import(
                &self,
                session: &str,
                source: &mut dyn RecordSource,
            ) -> Result<Head, StoreError> {
                (**self).import(session, source).await
            }
            async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
                (**self).prepare_append(session).await
            }
            async fn recall(
                &self,
                session: &str,
                query: &RecallQuery,
            ) -> Result<Recalled, StoreError> {
                (**self).recall(session, query).await
            }
            async fn fetch(
                &self,
                session: &str,
                id: &str,
                context: usize,
            ) -> Result<Fetched, StoreError> {
                (**self).fetch(session, id, context).await
            }
        }
    )*};
}

forward!(&S, Arc<S>, Box<S>);
