//! `SqliteStore`: the `Store` operations as SQL, each on the store's connection on a
//! blocking thread.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use panto_store::{
    Fetched, Head, Loaded, PAGE_BYTES, Page, RecallQuery, Recalled, Record, RecordSource, Store,
    StoreError, async_trait, fetch_by_scan, recall_by_scan, replay_tail, takes_effect,
};
use rusqlite::{Connection, TransactionBehavior, params};

use crate::error::{SqliteError, unavailable};
use crate::open::{Opened, SqliteOptions, open};
use crate::session::{
    check_name, decode, exists, head_of, malformed, not_found, position, to_i64, to_u64,
};

mod fetch;
mod recall;

/// Sessions in one SQLite database file. Cheap to clone (the clones share one connection);
/// any number of processes may open the same file (WAL mode: readers never wait for a writer,
/// writers take turns for the microseconds of an append).
///
/// A [`Head`] is the number of entries of the session. Session names are any non-empty text.
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) conn: Arc<Mutex<Connection>>,
    pub(crate) location: Arc<str>,
    /// Whether the database has panto's tables (a store opened without creating them, on a
    /// database without them, holds no session).
    tables: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// Runs `work` on tokio's blocking pool when inside a multi-thread tokio runtime, inline
/// otherwise (a current-thread runtime has no other task to stall).
///
/// panto-session (`jsonl.rs`) has the same function: the stores do not depend on each other,
/// and panto-store, which both depend on, links no runtime.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            match tokio::task::spawn_blocking(work).await {
                Ok(value) => value,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        _ => work(),
    }
}

impl SqliteStore {
    /// Opens (creating it when missing) the database at `path` with the default options.
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`].
    pub async fn open(path: impl Into<PathBuf>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database at `path`: created when missing (mode 0600, as its `-wal` and `-shm`
    /// files) unless [`SqliteOptions::create`] is off; WAL mode, the busy timeout and flushing
    /// of `options`, and the schema's missing [`crate::MIGRATIONS`] applied (not to a database
    /// without panto's tables when `create` is off: it is left as it is and holds no session).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] for a missing file when `create` is off;
    /// [`StoreError::Unavailable`] when the file cannot be opened or migrated;
    /// [`StoreError::Invalid`] when it holds a schema newer than this version knows.
    pub async fn open_with(
        path: impl Into<PathBuf>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.into();
        let location: Arc<str> = format!("sqlite:{}", path.display()).into();
        let loc = location.clone();
        let opened = blocking(move || open(&path, &options, &loc)).await?;
        Ok(SqliteStore::from_opened(opened, location))
    }

    /// [`SqliteStore::open_with`] for a caller outside an async runtime (a program's start, a
    /// test): the same work, on this thread.
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`].
    pub fn open_blocking(
        path: impl Into<PathBuf>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.into();
        let location: Arc<str> = format!("sqlite:{}", path.display()).into();
        let opened = open(&path, &options, &location)?;
        Ok(SqliteStore::from_opened(opened, location))
    }

    fn from_opened(opened: Opened, location: Arc<str>) -> SqliteStore {
        SqliteStore {
            conn: Arc::new(Mutex::new(opened.conn)),
            location,
            tables: opened.tables,
        }
    }

    /// The refusal of a write to a store that only reads a database without panto's tables.
    fn reading_only(&self, session: &str) -> StoreError {
        StoreError::invalid(
            session,
            SqliteError::Refused {
                location: self.location.to_string(),
                message: "the database has no tables of panto's, and this store only reads"
                    .to_owned(),
            },
        )
    }

    fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> impl Future<Output = Result<T, StoreError>> + Send + 'static {
        let conn = self.conn.clone();
        let location = self.location.clone();
        blocking(move || {
            // A panic in the middle of a transaction drops it, which rolls it back: the
            // connection is fine to use after a poisoned lock.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            work(&mut conn, &location)
        })
    }
}

fn rows(
    stmt: &mut rusqlite::CachedStatement<'_>,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<(i64, String)>> {
    stmt.query_map(args, |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

fn load(conn: &mut Connection, session: &str, location: &str) -> Result<Loaded, StoreError> {
    check_name(session, location)?;
    let fail = |what: &str| unavailable(session, location, what);
    // One read transaction: every query sees the same snapshot.
    let tx = conn.transaction().map_err(fail("cannot start a read"))?;
    // The entries from the latest compaction (by the partial index) to the end, or all.
    let tail = tx
        .prepare_cached(
            "SELECT seq, text FROM panto_entries WHERE session = ?1 AND seq >= COALESCE(
                (SELECT MAX(seq) FROM panto_entries WHERE session = ?1 AND kind = 1), 1)
             ORDER BY seq",
        )
        .and_then(|mut s| rows(&mut s, params![session]))
        .map_err(fail("cannot read the session"))?;
    let Some(&(last, _)) = tail.last() else {
        if exists(&tx, session, location)? {
            let mut loaded = Loaded::new(Default::default(), Head::EMPTY, Vec::new());
            loaded.empty = true;
            return Ok(loaded);
        }
        return Err(not_found(session, location));
    };
    let mut start = tail[0].0;
    let mut entries = decode(tail, session, location)?;
    // A compaction that does not take effect (its copies are not all there): step back to the
    // one before it, as a full replay would.
    while start > 1 && !takes_effect(&entries) {
        let before: Option<i64> = tx
            .prepare_cached(
                "SELECT MAX(seq) FROM panto_entries WHERE session = ?1 AND kind = 1 AND seq < ?2",
            )
            .and_then(|mut s| s.query_row(params![session, start], |r| r.get(0)))
            .map_err(fail("cannot read the session"))?;
        let from = before.unwrap_or(1);
        let more = tx
            .prepare_cached(
                "SELECT seq, text FROM panto_entries WHERE session = ?1 AND seq >= ?2 AND seq < ?3
                 ORDER BY seq",
            )
            .and_then(|mut s| rows(&mut s, params![session, from, start]))
            .map_err(fail("cannot read the session"))?;
        let mut earlier = decode(more, session, location)?;
        earlier.append(&mut entries);
        entries = earlier;
        start = from;
    }
    drop(tx);
    Ok(replay_tail(
        entries,
        Head::new(to_u64(last)),
        &format!("{location}: session {session}"),
        to_u64(start - 1),
    ))
}

fn append(
    conn: &mut Connection,
    session: &str,
    location: &str,
    at: Head,
    records: &[Record],
) -> Result<Head, StoreError> {
    check_name(session, location)?;
    let fail = |what: &str| unavailable(session, location, what);
    // BEGIN IMMEDIATE takes the write lock now (waiting up to the busy timeout), so the head
    // read next is still the head when the rows go in.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("cannot start the append"))?;
    let found = head_of(&tx, session, location)?;
    if found != at {
        return Err(StoreError::conflict(location, session, at, found));
    }
    if records.is_empty() {
        return Ok(found);
    }
    tx.prepare_cached("INSERT OR IGNORE INTO panto_sessions (name) VALUES (?1)")
        .and_then(|mut s| s.execute(params![session]))
        .map_err(fail("cannot append"))?;
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO panto_entries (session, seq, kind, text) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(fail("cannot append"))?;
        for (i, r) in records.iter().enumerate() {
            let seq = to_i64(at.get() + i as u64 + 1);
            insert
                .execute(params![session, seq, r.kind.code(), r.text])
                .map_err(|e| match e.sqlite_error_code() {
                    // Cannot happen under the write lock; if another writer's row is there
                    // anyway, it is the same conflict.
                    Some(rusqlite::ErrorCode::ConstraintViolation) => {
                        StoreError::conflict(location, session, at, Head::new(to_u64(seq)))
                    }
                    _ => fail("cannot append")(e),
                })?;
        }
    }
    recall::on_append(&tx, session, location, at, records)?;
    tx.commit().map_err(fail("cannot commit the append"))?;
    Ok(Head::new(at.get() + records.len() as u64))
}

fn read(
    conn: &mut Connection,
    session: &str,
    location: &str,
    from: Head,
    max: usize,
) -> Result<Page, StoreError> {
    check_name(session, location)?;
    let fail = |what: &str| unavailable(session, location, what);
    let tx = conn.transaction().map_err(fail("cannot start a read"))?;
    if !exists(&tx, session, location)? {
        return Err(not_found(session, location));
    }
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    // Rows are stepped through one at a time: the page stops once it holds PAGE_BYTES.
    let found = tx
        .prepare_cached(
            "SELECT seq, text FROM panto_entries WHERE session = ?1 AND seq > ?2
             ORDER BY seq LIMIT ?3",
        )
        .and_then(|mut s| {
            let mut out: Vec<(i64, String)> = Vec::new();
            let mut bytes = 0;
            let mut rows = s.query(params![session, to_i64(from.get()), limit])?;
            while bytes < PAGE_BYTES
                && let Some(row) = rows.next()?
            {
                let text: String = row.get(1)?;
                bytes += text.len();
                out.push((row.get(0)?, text));
            }
            Ok(out)
        })
        .map_err(fail("cannot read the session"))?;
    let next = found.last().map_or(from, |r| Head::new(to_u64(r.0)));
    // Each text is checked to be an entry, as the JSONL store checks each line it reads.
    let records = found
        .into_iter()
        .map(|(seq, text)| {
            Record::parse(text, position(seq))
                .map_err(|source| malformed(session, location, source))
        })
        .collect::<Result<Vec<Record>, StoreError>>()?;
    Ok(Page::new(records, next))
}

fn list(conn: &mut Connection, location: &str) -> Result<Vec<String>, StoreError> {
    conn.prepare_cached("SELECT name FROM panto_sessions ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(unavailable("", location, "cannot list the sessions"))
}

#[async_trait]
impl Store for SqliteStore {
    fn location(&self) -> String {
        self.location.to_string()
    }

    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        if !self.tables {
            check_name(session, &self.location)?;
            return Err(not_found(session, &self.location));
        }
        let session = session.to_owned();
        self.with_conn(move |conn, location| load(conn, &session, location))
            .await
    }

    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        if !self.tables {
            check_name(session, &self.location)?;
            return Ok(Head::EMPTY);
        }
        let session = session.to_owned();
        self.with_conn(move |conn, location| {
            check_name(&session, location)?;
            head_of(conn, &session, location)
        })
        .await
    }

    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        if !self.tables {
            return Err(self.reading_only(session));
        }
        let (session, records) = (session.to_owned(), records.to_vec());
        self.with_conn(move |conn, location| append(conn, &session, location, at, &records))
            .await
    }

    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        if !self.tables {
            check_name(session, &self.location)?;
            return Err(not_found(session, &self.location));
        }
        let session = session.to_owned();
        self.with_conn(move |conn, location| read(conn, &session, location, from, max))
            .await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        if !self.tables {
            return Ok(Vec::new());
        }
        self.with_conn(list).await
    }

    /// Answers from the session's index (`crate::recall`), caught up first when appends of an
    /// older panto left it behind; by scan when it does not read back.
    async fn recall(&self, session: &str, query: &RecallQuery) -> Result<Recalled, StoreError> {
        let (name, q) = (session.to_owned(), query.clone());
        let found = self
            .with_conn(move |conn, location| {
                check_name(&name, location)?;
                recall::recall(conn, &name, location, &q)
            })
            .await?;
        match found {
            Some(found) => Ok(found),
            None => recall_by_scan(self, session, query).await,
        }
    }

    /// Answers from the session's index of ids (`crate::ids`), reading the entries around the
    /// id only; by scan when the index cannot tell.
    async fn fetch(&self, session: &str, id: &str, context: usize) -> Result<Fetched, StoreError> {
        if !self.tables {
            return fetch_by_scan(self, session, id, context).await;
        }
        let (name, wanted) = (session.to_owned(), id.to_owned());
        let found = self
            .with_conn(move |conn, location| {
                check_name(&name, location)?;
                fetch::fetch(conn, &name, location, &wanted, context)
            })
            .await?;
        match found {
            Some(found) => Ok(found),
            None => fetch_by_scan(self, session, id, context).await,
        }
    }

    /// One `BEGIN IMMEDIATE` transaction for the whole history, fed a batch of the source at a
    /// time: all of it, or nothing and no session. It holds the database's write lock while it
    /// runs (other writers wait up to their busy timeout).
    async fn import(
        &self,
        session: &str,
        source: &mut dyn RecordSource,
    ) -> Result<Head, StoreError> {
        if !self.tables {
            return Err(self.reading_only(session));
        }
        check_name(session, &self.location)?;
        crate::import::import(&self.conn, &self.location, session, source).await
    }

    /// Creates the session when it does not exist (so that another program lists it), after
    /// checking its name; never writes an entry.
    async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
        if !self.tables {
            return Err(self.reading_only(session));
        }
        let session = session.to_owned();
        self.with_conn(move |conn, location| {
            check_name(&session, location)?;
            conn.prepare_cached("INSERT OR IGNORE INTO panto_sessions (name) VALUES (?1)")
                .and_then(|mut s| s.execute(params![session]))
                .map_err(unavailable(
                    &session,
                    location,
                    "cannot register the session",
                ))?;
            Ok(())
        })
        .await
    }
}
