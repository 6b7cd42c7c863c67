//! `MemoryStore`: sessions in memory, for tests, examples and agents that persist elsewhere;
//! and `MemoryLog`, one session of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use panto_model::{EffectiveContext, Entry, replay};

use crate::error::StoreError;
use crate::head::Head;
use crate::log::SessionLog;
use crate::record::Record;
use crate::store::{Loaded, PAGE_BYTES, Page, Store};
use crate::tail::replay_tail;

/// Sessions in memory. A clone shares the sessions (so two logs over clones see each other's
/// appends and conflict like two processes on one file). A head is the number of records.
///
/// It counts successful appends and can be told to refuse them, to exercise failure paths.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    sessions: BTreeMap<String, Vec<Record>>,
    appends: usize,
    refuse: Option<String>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-appended unit: appends extend the
        // vector in one call.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every entry of `session`, in order (none for a session that does not exist).
    pub fn entries(&self, session: &str) -> Vec<Entry> {
        self.state()
            .sessions
            .get(session)
            .map(|records| {
                records
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| r.decode(i + 1).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The records of `session`, exactly as appended.
    pub fn records(&self, session: &str) -> Vec<Record> {
        self.state()
            .sessions
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    /// How many appends succeeded, over every session.
    pub fn appends(&self) -> usize {
        self.state().appends
    }

    /// Makes every following append fail with `reason` ([`StoreError::Unavailable`]), or
    /// succeed again with `None`.
    pub fn refuse_appends(&self, reason: Option<String>) {
        self.state().refuse = reason;
    }
}

fn location() -> String {
    "memory".to_owned()
}

#[async_trait]
impl Store for MemoryStore {
    fn location(&self) -> String {
        location()
    }

    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        let state = self.state();
        let records = state.sessions.get(session).ok_or_else(|| {
            StoreError::not_found(session, format!("memory: no session named {session}"))
        })?;
        let mut entries = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            entries.push(r.decode(i + 1).map_err(|e| {
                StoreError::invalid(session, format!("memory: session {session}: {e}"))
            })?);
        }
        let head = Head::new(records.len() as u64);
        Ok(replay_tail(
            entries,
            head,
            &format!("memory: session {session}"),
            0,
        ))
    }

    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        let len = self.state().sessions.get(session).map_or(0, Vec::len);
        Ok(Head::new(len as u64))
    }

    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        let mut state = self.state();
        if let Some(reason) = &state.refuse {
            return Err(StoreError::unavailable(session, reason.clone()));
        }
        let found = Head::new(state.sessions.get(session).map_or(0, Vec::len) as u64);
        if found != at {
            return Err(StoreError::conflict(&location(), session, at, found));
        }
        if records.is_empty() {
            return Ok(found);
        }
        let stored = state.sessions.entry(session.to_owned()).or_default();
        stored.extend_from_slice(records);
        let end = Head::new(stored.len() as u64);
        state.appends += 1;
        Ok(end)
    }

    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        let state = self.state();
        let records = state.sessions.get(session).ok_or_else(|| {
            StoreError::not_found(session, format!("memory: no session named {session}"))
        })?;
        let start = usize::try_from(from.get())
            .unwrap_or(usize::MAX)
            .min(records.len());
        let mut end = start;
        let mut bytes = 0;
        while end < records.len() && end - start < max && bytes < PAGE_BYTES {
            bytes += records[end].text.len();
            end += 1;
        }
        Ok(Page::new(
            records[start..end].to_vec(),
            Head::new(end as u64),
        ))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.state().sessions.keys().cloned().collect())
    }
}

/// One session of a [`MemoryStore`]: the in-memory log of tests and examples.
pub type MemoryLog = SessionLog<MemoryStore>;

/// The session name [`SessionLog::memory`] uses.
pub const MEMORY_SESSION: &str = "session";

impl SessionLog<MemoryStore> {
    /// An empty session in a new [`MemoryStore`].
    pub fn memory() -> MemoryLog {
        SessionLog::new(MemoryStore::new(), MEMORY_SESSION, Head::EMPTY)
    }

    /// A session in a new [`MemoryStore`] that already holds `entries` (the log's head at
    /// their end).
    pub fn with_entries(entries: Vec<Entry>) -> MemoryLog {
        let store = MemoryStore::new();
        let records: Vec<Record> = entries.iter().map(Record::encode).collect();
        let head = Head::new(records.len() as u64);
        if !records.is_empty() {
            store
                .state()
                .sessions
                .insert(MEMORY_SESSION.to_owned(), records);
        }
        SessionLog::new(store, MEMORY_SESSION, head)
    }

    /// Every entry of the session, in order.
    pub fn entries(&self) -> Vec<Entry> {
        self.store().entries(self.session())
    }

    /// How many appends succeeded.
    pub fn appends(&self) -> usize {
        self.store().appends()
    }

    /// The effective context of the session.
    pub fn replay(&self) -> EffectiveContext {
        replay(self.entries())
    }

    /// The session as JSONL text, as a session file would hold it.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for r in self.store().records(self.session()) {
            out.push_str(&r.text);
            out.push('\n');
        }
        out
    }

    /// Makes every following append fail with `reason`, or succeed again with `None`.
    pub fn refuse_appends(&self, reason: Option<String>) {
        self.store().refuse_appends(reason);
    }
}
