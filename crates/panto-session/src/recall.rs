//! The JSONL store's recall index: a sidecar file beside the session (`NAME.recall.sqlite3`)
//! holding the tables of `panto_store_sqlite::recall`, the session's name in them empty.
//!
//! Why a sidecar in SQLite: the session stays one plain text file any program can read and
//! append to; the index is derived data beside it, built when missing, caught up from where it
//! stopped (its state keeps the file length it covers and a hash of the bytes before it, so a
//! file replaced or cut under it is seen and the index rebuilt), and written in transactions,
//! so a crash in the middle of an update leaves the index as it was. Without it (or when it
//! cannot be opened or does not read back) recall reads the whole file, slower and the same.
//! After an append through this store the index is brought up to date at once when it covered
//! the file up to the append; appends of another program are caught up at the next recall.
//!
//! The store keeps its sidecars' connections open between calls ([`Sidecars`]): opening one
//! runs its schema and, at the close of the last connection, SQLite checkpoints the
//! write-ahead log into the file, which made each append cost tens of milliseconds.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use panto_model::Entry;
use panto_store::recall::{IndexState, Lookup, Update};
use panto_store::{Head, RecallQuery, Recalled, Record, StoreError};
use panto_store_sqlite::recall::{self as index, Failed, Found};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::history::History;
use crate::store::Session;

/// The session name in the sidecar's tables (one session per sidecar).
pub(crate) const KEY: &str = "";

/// Entries indexed per transaction when the sidecar is built or caught up.
const CHUNK: usize = 20_000;

/// Bytes before the covered end whose hash tells the file is the one indexed.
const TAIL: u64 = 256;

/// The sidecar's own table: the hash of the file's bytes before the end it covers.
const FILE_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS panto_recall_file (
    id INTEGER NOT NULL PRIMARY KEY,
    head INTEGER NOT NULL,
    tail INTEGER NOT NULL
);";

/// The sidecar of a session file.
pub(crate) fn sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".recall.sqlite3");
    PathBuf::from(name)
}

/// A failure of the sidecar: recall then reads the file instead.
#[derive(Debug)]
pub(crate) struct Unusable;

impl From<rusqlite::Error> for Unusable {
    fn from(_: rusqlite::Error) -> Unusable {
        Unusable
    }
}

impl From<std::io::Error> for Unusable {
    fn from(_: std::io::Error) -> Unusable {
        Unusable
    }
}

/// The sidecar's format (its `PRAGMA user_version`): a sidecar of another one is emptied at
/// open and built again, never read. 1: the terms' bounds apart from their postings; 2: the
/// ids (`panto_store_sqlite::ids`), which a fetch by id reads.
pub(crate) const FORMAT: u32 = 2;

fn open(path: &Path) -> Result<Connection, Unusable> {
    let mut conn = Connection::open(sidecar(path))?;
    conn.busy_timeout(Duration::from_secs(10))?;
    let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(index::SCHEMA)?;
    conn.execute_batch(index::BOUNDS)?;
    conn.execute_batch(panto_store_sqlite::ids::IDS)?;
    conn.execute_batch(FILE_SCHEMA)?;
    let format: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if format != FORMAT {
        let tx = conn.transaction()?;
        tx.execute_batch(index::EMPTY)?;
        tx.execute_batch(panto_store_sqlite::ids::EMPTY_IDS)?;
        tx.execute_batch("DELETE FROM panto_recall_file")?;
        tx.pragma_update(None, "user_version", FORMAT)?;
        tx.commit()?;
    }
    Ok(conn)
}

/// Sidecars kept open at most; past it, the kept ones are closed.
const KEPT: usize = 16;

/// Which file a path names now: device and inode (a sidecar deleted or replaced under a kept
/// connection is another file); `None` when it does not exist or the platform cannot tell, and
/// then nothing is kept.
fn identity(path: &Path) -> Option<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// A file's device and inode.
type FileId = (u64, u64);

/// The open connections to a store's sidecars, by sidecar path, each with the file it opened.
/// A call takes the session's connection out (opening one when none is kept or the file on
/// disk is another one) and gives it back when it succeeded, so two threads never share one.
#[derive(Default)]
pub(crate) struct Sidecars(Mutex<HashMap<PathBuf, (FileId, Connection)>>);

impl fmt::Debug for Sidecars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = self.0.lock().map_or(0, |m| m.len());
        f.debug_struct("Sidecars").field("kept", &kept).finish()
    }
}

impl Sidecars {
    /// Runs `work` on a connection to the sidecar of the session file `path`, kept after it
    /// when it succeeds.
    pub(crate) fn with<T>(
        &self,
        path: &Path,
        work: impl FnOnce(&mut Connection) -> Result<T, Unusable>,
    ) -> Result<T, Unusable> {
        let file = sidecar(path);
        let now = identity(&file);
        let kept = {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            map.remove(&file)
        };
        let mut conn = match kept {
            Some((id, conn)) if Some(id) == now => conn,
            _ => open(path)?,
        };
        let out = work(&mut conn)?;
        if let Some(id) = identity(&file) {
            let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if map.len() >= KEPT {
                map.clear();
            }
            map.insert(file, (id, conn));
        }
        Ok(out)
    }
}

/// FNV-1a of the (up to) [`TAIL`] bytes of `path` before `head`.
fn tail_hash(file: &mut File, head: u64) -> Result<i64, Unusable> {
    let start = head.saturating_sub(TAIL);
    file.seek(SeekFrom::Start(start))?;
    let mut buf = vec![0; usize::try_from(head - start).unwrap_or(0)];
    file.read_exact(&mut buf)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in buf {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Ok(h.cast_signed())
}

/// The state of the sidecar, if it covers a prefix of the file as it is now.
fn valid_state(
    conn: &Connection,
    file: &mut File,
    len: u64,
) -> Result<Option<IndexState>, Unusable> {
    let Some(state) = index::state(conn, KEY)? else {
        return Ok(None);
    };
    let stored: Option<(i64, i64)> = conn
        .query_row(
            "SELECT head, tail FROM panto_recall_file WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let Some((head, tail)) = stored else {
        return Ok(None);
    };
    let head = u64::try_from(head).unwrap_or(u64::MAX);
    if head != state.head.get() || head > len || tail_hash(file, head)? != tail {
        return Ok(None);
    }
    Ok(Some(state))
}

fn write(conn: &Connection, file: &mut File, update: &mut Update) -> Result<(), Unusable> {
    index::write(conn, KEY, update)?;
    let head = update.state.head.get();
    conn.execute(
        "INSERT OR REPLACE INTO panto_recall_file (id, head, tail) VALUES (1, ?1, ?2)",
        params![
            i64::try_from(head).unwrap_or(i64::MAX),
            tail_hash(file, head)?
        ],
    )?;
    Ok(())
}

/// Brings the sidecar up to the end of the file (building it when missing or not the file's),
/// a chunk of entries per transaction; returns its state.
pub(crate) fn catch_up(conn: &mut Connection, session: &Session) -> Result<IndexState, Unusable> {
    // Usually it is current: a read tells, without the write lock.
    {
        let mut file = session.open_for_reading().map_err(|_| Unusable)?;
        let len = file.metadata()?.len();
        let tx = conn.transaction()?;
        if let Some(s) = valid_state(&tx, &mut file, len)?
            && s.head.get() >= len
        {
            return Ok(s);
        }
    }
    loop {
        let mut file = session.open_for_reading().map_err(|_| Unusable)?;
        let len = file.metadata()?.len();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = valid_state(&tx, &mut file, len)?;
        let state = match found {
            Some(s) => s,
            None => {
                index::clear(&tx, KEY)?;
                IndexState::default()
            }
        };
        if found.is_some() && state.head.get() >= len {
            return Ok(state);
        }
        let path = session.path().to_path_buf();
        let mut history = History::starting_at(path, file, state.head.get())?;
        let mut update = Update::new(state);
        let mut at = state.head;
        let mut n = 0;
        while n < CHUNK {
            let Some((line, raw, after)) = history.next_raw().map_err(|_| Unusable)? else {
                break;
            };
            let entry = panto_model::decode_line(raw, line).map_err(|_| Unusable)?;
            update.push(&entry, at, Head::new(after));
            at = Head::new(after);
            n += 1;
        }
        // Blank lines after the last entry: the index covers them too.
        if n == 0 {
            update.state.head = Head::new(len);
        }
        let mut file = session.open_for_reading().map_err(|_| Unusable)?;
        write(&tx, &mut file, &mut update)?;
        tx.commit()?;
        if n == 0 {
            return Ok(update.state);
        }
    }
}

/// Indexes `records`, just appended from `at` to `end` by this store, when the sidecar exists
/// and covers the file up to `at`; otherwise leaves it to the next recall. Failures are
/// ignored: the index is derived, and the next recall catches up or rebuilds.
pub(crate) fn on_append(
    sidecars: &Sidecars,
    session: &Session,
    at: Head,
    end: Head,
    records: &[Record],
) {
    if !sidecar(session.path()).exists() {
        return;
    }
    let written: u64 = records.iter().map(|r| r.text.len() as u64 + 1).sum();
    if at.get() + written != end.get() {
        return;
    }
    let _ = sidecars.with(session.path(), |conn| {
        try_on_append(conn, session, at, records)
    });
}

fn try_on_append(
    conn: &mut Connection,
    session: &Session,
    at: Head,
    records: &[Record],
) -> Result<(), Unusable> {
    let mut file = session.open_for_reading().map_err(|_| Unusable)?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let Some(state) = valid_state(&tx, &mut file, at.get())? else {
        return Ok(());
    };
    if state.head != at {
        return Ok(());
    }
    let mut update = Update::new(state);
    let mut from = at.get();
    for (i, r) in records.iter().enumerate() {
        let entry: Entry = r.decode(i + 1).map_err(|_| Unusable)?;
        let next = from + r.text.len() as u64 + 1;
        update.push(&entry, Head::new(from), Head::new(next));
        from = next;
    }
    write(&tx, &mut file, &mut update)?;
    tx.commit()?;
    Ok(())
}

/// The entry whose line starts at `at`.
fn entry_at(session: &Session, at: Head) -> Result<Entry, Unusable> {
    let file = session.open_for_reading().map_err(|_| Unusable)?;
    let mut history = History::starting_at(session.path().to_path_buf(), file, at.get())?;
    let (line, raw, _) = history.next_raw().map_err(|_| Unusable)?.ok_or(Unusable)?;
    panto_model::decode_line(raw, line).map_err(|_| Unusable)
}

/// Recalls `query` with the sidecar, leaving out `exclude`; `None` when the sidecar cannot be
/// used (the caller reads the file).
pub(crate) fn recall(
    sidecars: &Sidecars,
    session: &Session,
    query: &RecallQuery,
    exclude: &HashSet<u64>,
) -> Option<Recalled> {
    sidecars
        .with(session.path(), |conn| {
            let state = catch_up(conn, session)?;
            let lookup = Lookup::new(query);
            let tx = conn.transaction()?;
            let found = index::recall(&tx, KEY, &lookup, state, exclude, |row| {
                entry_at(session, row.at)
            });
            match found {
                Ok(Found::Hits(hits)) => Ok(Recalled::new(hits, u64::from(state.docs))),
                Ok(Found::Corrupt) | Err(Failed::Sqlite(_) | Failed::Entry(Unusable)) => {
                    Err(Unusable)
                }
            }
        })
        .ok()
}

/// Drops the sidecar's index and builds it again; returns how many items it holds.
///
/// # Errors
/// [`StoreError::Unavailable`] when the sidecar cannot be written.
pub(crate) fn rebuild(
    sidecars: &Sidecars,
    session: &Session,
    name: &str,
) -> Result<u32, StoreError> {
    let fail = || {
        StoreError::unavailable(
            name,
            format!(
                "{}: cannot build the recall index",
                sidecar(session.path()).display()
            ),
        )
    };
    sidecars
        .with(session.path(), |conn| {
            index::clear(conn, KEY)?;
            catch_up(conn, session).map(|s| s.docs)
        })
        .map_err(|_| fail())
}

/// The sidecar's size in bytes (with its write-ahead log).
pub(crate) fn size(session: &Session) -> u64 {
    let base = sidecar(session.path());
    let mut total = 0;
    for suffix in ["", "-wal"] {
        let mut p = base.as_os_str().to_owned();
        p.push(suffix);
        total += std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len());
    }
    total
}
