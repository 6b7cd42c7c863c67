//! `SqliteStore`: the schema, its migrations, and the `Store` operations as SQL.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use panto_model::{DecodeError, Entry};
use panto_store::{
    Head, Loaded, PAGE_BYTES, Page, Record, Store, StoreError, async_trait, replay_tail,
    takes_effect,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::error::SqliteError;

/// The schema, one migration per version, oldest first: `(version, SQL)`. [`SqliteStore::open`]
/// runs those the file lacks (its `PRAGMA user_version` says which it has) in one write
/// transaction each; a person can read or run them first (`panto sessions --schema`).
///
/// `panto_entries` holds one row per entry: the session's name, its position (`seq`, 1 for the
/// first entry, no gaps), its kind (0 message, 1 compaction, 2 other) and its exact Contract 1
/// text. The primary key `(session, seq)` is the order of a session and the guard against two
/// rows at one position; the partial index on compactions is where a load starts.
pub const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    "-- 1: sessions and their entries, with an index on the compactions
CREATE TABLE panto_sessions (
    name TEXT NOT NULL PRIMARY KEY,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE panto_entries (
    session TEXT NOT NULL REFERENCES panto_sessions (name),
    seq INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE INDEX panto_entries_compactions ON panto_entries (session, seq) WHERE kind = 1;
",
)];

/// How a [`SqliteStore`] uses its file.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long an append waits for another connection's write transaction before it fails
    /// ([`StoreError::Unavailable`]). Default 10 s, as the JSONL store's lock timeout.
    pub busy_timeout: Duration,
    /// Whether each commit is flushed to disk before an append returns (`synchronous = FULL`;
    /// off: `NORMAL`, which in WAL mode may lose the last appends on a power loss, never on a
    /// crash of the process). Default on.
    pub fsync: bool,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            fsync: true,
        }
    }
}

impl SqliteOptions {
    /// Sets the busy timeout.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.busy_timeout = timeout;
        self
    }

    /// Sets whether commits are flushed to disk.
    pub fn with_fsync(mut self, fsync: bool) -> SqliteOptions {
        self.fsync = fsync;
        self
    }
}

/// Sessions in one SQLite database file. Cheap to clone (the clones share one connection);
/// any number of processes may open the same file (WAL mode: readers never wait for a writer,
/// writers take turns for the microseconds of an append).
///
/// A [`Head`] is the number of entries of the session. Session names are any non-empty text.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    location: Arc<str>,
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
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
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

    /// Opens (creating it when missing) the database at `path`: WAL mode, the busy timeout and
    /// flushing of `options`, and the schema's missing [`MIGRATIONS`] applied.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or migrated;
    /// [`StoreError::Invalid`] when it holds a schema newer than this version knows.
    pub async fn open_with(
        path: impl Into<PathBuf>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.into();
        let location: Arc<str> = format!("sqlite:{}", path.display()).into();
        let loc = location.clone();
        let conn = blocking(move || open(&path, &options, &loc)).await?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            location,
        })
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
        let conn = open(&path, &options, &location)?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            location,
        })
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

fn sqlite(location: &str, what: &str) -> impl FnOnce(rusqlite::Error) -> SqliteError + use<> {
    let (location, what) = (location.to_owned(), what.to_owned());
    move |source| SqliteError::Sqlite {
        location,
        what,
        source,
    }
}

fn unavailable(
    session: &str,
    location: &str,
    what: &str,
) -> impl FnOnce(rusqlite::Error) -> StoreError + use<> {
    let session = session.to_owned();
    let wrap = sqlite(location, what);
    move |e| StoreError::unavailable(session, wrap(e))
}

fn open(path: &Path, options: &SqliteOptions, location: &str) -> Result<Connection, StoreError> {
    let fail = |what: &str| unavailable("", location, what);
    let conn = Connection::open(path).map_err(fail("cannot open the database"))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(fail("cannot set the busy timeout"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(fail("cannot turn on WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::unavailable(
            "",
            SqliteError::Refused {
                location: location.to_owned(),
                message: format!("the database stays in journal mode {mode}, not WAL"),
            },
        ));
    }
    let sync = if options.fsync { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(fail("cannot set synchronous"))?;
    migrate(conn, location)
}

fn migrate(mut conn: Connection, location: &str) -> Result<Connection, StoreError> {
    let fail = |what: &str| unavailable("", location, what);
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    for &(version, sql) in MIGRATIONS {
        let have: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(fail("cannot read the schema version"))?;
        if have > latest {
            return Err(StoreError::invalid(
                "",
                SqliteError::Refused {
                    location: location.to_owned(),
                    message: format!(
                        "the database has schema version {have}, newer than this panto knows ({latest}); use a newer panto"
                    ),
                },
            ));
        }
        if have >= version {
            continue;
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail("cannot start the migration"))?;
        // Another process may have migrated while this one waited for the write lock.
        let have: u32 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(fail("cannot read the schema version"))?;
        if have < version {
            tx.execute_batch(sql)
                .map_err(fail(&format!("cannot apply migration {version}")))?;
            tx.pragma_update(None, "user_version", version)
                .map_err(fail("cannot record the schema version"))?;
        }
        tx.commit()
            .map_err(fail(&format!("cannot commit migration {version}")))?;
    }
    Ok(conn)
}

fn check_name(session: &str, location: &str) -> Result<(), StoreError> {
    if session.is_empty() {
        return Err(StoreError::invalid(
            session,
            SqliteError::Refused {
                location: location.to_owned(),
                message: "a session name cannot be empty".to_owned(),
            },
        ));
    }
    Ok(())
}

fn to_u64(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

fn to_i64(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

/// The entries of rows `(seq, text)`, decoded, each named by its position.
fn decode(
    rows: Vec<(i64, String)>,
    session: &str,
    location: &str,
) -> Result<Vec<Entry>, StoreError> {
    rows.into_iter()
        .map(|(seq, text)| {
            panto_model::decode_line(text.as_bytes(), position(seq))
                .map_err(|source| malformed(session, location, source))
        })
        .collect()
}

/// A row's sequence number as the position a decoding error names.
fn position(seq: i64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

/// A row whose text is not an entry: the user's to fix.
fn malformed(session: &str, location: &str, source: DecodeError) -> StoreError {
    StoreError::invalid(
        session,
        SqliteError::Malformed {
            location: location.to_owned(),
            session: session.to_owned(),
            source,
        },
    )
}

fn head_of(conn: &Connection, session: &str, location: &str) -> Result<Head, StoreError> {
    let seq: Option<i64> = conn
        .prepare_cached("SELECT MAX(seq) FROM panto_entries WHERE session = ?1")
        .and_then(|mut s| s.query_row(params![session], |r| r.get(0)))
        .map_err(unavailable(session, location, "cannot read the head"))?;
    Ok(Head::new(seq.map_or(0, to_u64)))
}

fn exists(conn: &Connection, session: &str, location: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM panto_sessions WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row(params![session], |_| Ok(()))
                .optional()
                .map(|o| o.is_some())
        })
        .map_err(unavailable(session, location, "cannot look the session up"))
}

fn not_found(session: &str, location: &str) -> StoreError {
    StoreError::not_found(
        session,
        SqliteError::Refused {
            location: location.to_owned(),
            message: format!("no session named {session}"),
        },
    )
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
        .map_err(fail("cannot create the session"))?;
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
        let session = session.to_owned();
        self.with_conn(move |conn, location| load(conn, &session, location))
            .await
    }

    async fn head(&self, session: &str) -> Result<Head, StoreError> {
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
        let (session, records) = (session.to_owned(), records.to_vec());
        self.with_conn(move |conn, location| append(conn, &session, location, at, &records))
            .await
    }

    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        let session = session.to_owned();
        self.with_conn(move |conn, location| read(conn, &session, location, from, max))
            .await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.with_conn(list).await
    }

    /// Creates the session when it does not exist (so that another program lists it), after
    /// checking its name; never writes an entry.
    async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
        let session = session.to_owned();
        self.with_conn(move |conn, location| {
            check_name(&session, location)?;
            conn.prepare_cached("INSERT OR IGNORE INTO panto_sessions (name) VALUES (?1)")
                .and_then(|mut s| s.execute(params![session]))
                .map_err(unavailable(&session, location, "cannot create the session"))?;
            Ok(())
        })
        .await
    }
}
