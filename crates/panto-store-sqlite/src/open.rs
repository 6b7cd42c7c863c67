//! Opening the database file: created private (0600, as the JSONL files; SQLite gives its
//! `-wal` and `-shm` files the database's mode), never created by a store that only reads,
//! WAL mode, and the schema's missing migrations.

use std::path::Path;
use std::time::{Duration, Instant};

use panto_store::StoreError;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::error::{SqliteError, unavailable};

/// The schema, one migration per version, oldest first: `(version, SQL)`.
/// [`crate::SqliteStore::open`] runs those the file lacks (its `PRAGMA user_version` says which
/// it has) in one write transaction each; a person can read or run them first
/// (`panto sessions --schema`).
///
/// `panto_entries` holds one row per entry: the session's name, its position (`seq`, 1 for the
/// first entry, no gaps), its kind (0 message, 1 compaction, 2 other) and its exact Contract 1
/// text. The primary key `(session, seq)` is the order of a session and the guard against two
/// rows at one position; the partial index on compactions is where a load starts.
pub const MIGRATIONS: &[(u32, &str)] = &[
    (
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
    ),
    (2, crate::recall::SCHEMA),
    (3, crate::recall::WITH_BOUNDS),
    (4, crate::ids::WITH_IDS),
];

/// How a [`crate::SqliteStore`] uses its file.
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
    /// Whether opening creates the database file (and panto's tables) when it is missing.
    /// Off, a missing file is [`StoreError::NotFound`], and a database without panto's tables
    /// is left as it is and holds no session: for commands that only read. Default on.
    pub create: bool,
}

impl Default for SqliteOptions {
    fn default() -> SqliteOptions {
        SqliteOptions {
            busy_timeout: Duration::from_secs(10),
            fsync: true,
            create: true,
        }
    }
}

impl SqliteOptions {
    /// Sets the busy timeout.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.busy_timeout = timeout;
        self
    }

    /// Sets whether opening creates the database when it is missing.
    pub fn with_create(mut self, create: bool) -> SqliteOptions {
        self.create = create;
        self
    }

    /// Sets whether commits are flushed to disk.
    pub fn with_fsync(mut self, fsync: bool) -> SqliteOptions {
        self.fsync = fsync;
        self
    }
}

/// What opening found: the connection, and whether the database has panto's tables.
pub(crate) struct Opened {
    pub conn: Connection,
    pub tables: bool,
}

/// Creates the database file, empty, mode 0600, without following a link, unless something is
/// there already. SQLite takes an empty file for a new database, and creates its `-wal` and
/// `-shm` files with the database's mode.
fn create_private(path: &Path, location: &str) -> Result<(), StoreError> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    // `create_new` (O_EXCL) never follows a link.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => {
            let error = SqliteError::Refused {
                location: location.to_owned(),
                message: format!("cannot create the database: {e}"),
            };
            // A folder that is not there, or one the user may not write in: theirs to fix.
            Err(match e.kind() {
                std::io::ErrorKind::NotFound
                | std::io::ErrorKind::PermissionDenied
                | std::io::ErrorKind::ReadOnlyFilesystem
                | std::io::ErrorKind::NotADirectory => StoreError::invalid("", error),
                _ => StoreError::unavailable("", error),
            })
        }
    }
}

pub(crate) fn open(
    path: &Path,
    options: &SqliteOptions,
    location: &str,
) -> Result<Opened, StoreError> {
    let fail = |what: &str| unavailable("", location, what);
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if options.create {
        create_private(path, location)?;
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    } else if !path.exists() {
        return Err(StoreError::not_found(
            "",
            SqliteError::Refused {
                location: location.to_owned(),
                message: "no database there (a command that only reads creates none: check the path, or write to it first)".to_owned(),
            },
        ));
    }
    let conn =
        Connection::open_with_flags(path, flags).map_err(fail("cannot open the database"))?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(fail("cannot set the busy timeout"))?;
    let have: u32 = match conn.query_row("PRAGMA user_version", [], |r| r.get(0)) {
        Ok(have) => have,
        Err(e) if !options.create && io_failure(&e) && wal_is_empty(path) => {
            // A full disk: SQLite cannot make the WAL's index for a reader. With nothing in
            // the WAL, the database file holds every commit, and nobody can commit another
            // without room for the WAL: it is read as it stands.
            drop(conn);
            return open_as_it_stands(path, location);
        }
        Err(e) => return Err(fail("cannot read the schema version")(e)),
    };
    if have == 0 && !options.create {
        // Not a database of panto's (or an empty one): a reader leaves it as it is.
        return Ok(Opened {
            conn,
            tables: false,
        });
    }
    wal(&conn, options.busy_timeout, location)?;
    let sync = if options.fsync { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(fail("cannot set synchronous"))?;
    Ok(Opened {
        conn: migrate(conn, location)?,
        tables: true,
    })
}

/// Whether SQLite failed for want of room or at the file system (a full disk, a size limit).
fn io_failure(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::SystemIoFailure | rusqlite::ErrorCode::DiskFull)
    )
}

/// Whether the database's WAL is missing or empty: every commit is in the database file.
fn wal_is_empty(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(Path::new(&wal)).map_or(true, |m| m.len() == 0)
}

/// The database opened read-only as it stands (`immutable`: no lock, no WAL index), for a
/// reader on a full disk.
fn open_as_it_stands(path: &Path, location: &str) -> Result<Opened, StoreError> {
    let fail = |what: &str| unavailable("", location, what);
    let mut uri = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn =
        Connection::open_with_flags(&uri, flags).map_err(fail("cannot open the database"))?;
    let have: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(fail("cannot read the schema version"))?;
    Ok(Opened {
        conn,
        tables: have > 0,
    })
}

/// Turns WAL mode on. Switching a new database to WAL needs it to itself for a moment, and
/// SQLite answers "database is locked" at once, without its busy handler, when another
/// process opens it at the same time: tried again until the busy timeout.
fn wal(conn: &Connection, busy: Duration, location: &str) -> Result<(), StoreError> {
    let started = Instant::now();
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Ok(mode) => break mode,
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && started.elapsed() < busy =>
            {
                #[expect(
                    clippy::disallowed_methods,
                    reason = "opening runs on a blocking thread: a short pause before asking again"
                )]
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(unavailable("", location, "cannot turn on WAL mode")(e)),
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::unavailable(
            "",
            SqliteError::Refused {
                location: location.to_owned(),
                message: format!("the database stays in journal mode {mode}, not WAL"),
            },
        ));
    }
    Ok(())
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
