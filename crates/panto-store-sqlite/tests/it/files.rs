//! The database file: created private with its `-wal` and `-shm` files, never created (nor
//! given panto's tables) by a store that only reads, and read on a full disk.

use std::path::Path;

use panto_model::{Entry, Message};
use panto_store::{Head, Store, StoreError};
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use crate::block_on;

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[cfg(unix)]
#[test]
fn the_database_and_its_companions_are_created_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sqlite3");
    let store = SqliteStore::open_blocking(&path, SqliteOptions::default()).unwrap();
    block_on(store.append(
        "s",
        Head::EMPTY,
        &[Entry::Message(Message::user_text("private"))],
    ))
    .unwrap();
    // While the store is open, the WAL and its index exist beside the database.
    for file in ["agent.sqlite3", "agent.sqlite3-wal", "agent.sqlite3-shm"] {
        assert_eq!(mode(&dir.path().join(file)), 0o600, "{file}");
    }
    // A database that exists keeps its mode: panto never changes it.
    drop(store);
    let shared = dir.path().join("shared.sqlite3");
    std::fs::write(&shared, b"").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
    SqliteStore::open_blocking(&shared, SqliteOptions::default()).unwrap();
    assert_eq!(mode(&shared), 0o640);
}

#[test]
fn a_store_that_only_reads_creates_no_database_and_no_tables() {
    let dir = tempfile::tempdir().unwrap();
    let reading = SqliteOptions::default().with_create(false);
    let missing = dir.path().join("typo.sqlite3");
    let error = SqliteStore::open_blocking(&missing, reading.clone()).unwrap_err();
    assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    assert!(error.to_string().contains("no database there"), "{error}");
    assert!(!missing.exists(), "nothing was created");
    // Another program's database: read as holding no session, left without panto's tables.
    let other = dir.path().join("other.sqlite3");
    rusqlite_table(&other);
    let store = SqliteStore::open_blocking(&other, reading).unwrap();
    assert!(block_on(store.list()).unwrap().is_empty());
    assert!(matches!(
        block_on(store.load("s")),
        Err(StoreError::NotFound { .. })
    ));
    assert!(block_on(store.append("s", Head::EMPTY, &[])).is_err());
    drop(store);
    let tables = table_names(&other);
    assert_eq!(tables, vec!["theirs".to_owned()]);
}

/// A database of another program's, with one table.
fn rusqlite_table(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE theirs (x INTEGER)")
        .unwrap();
}

fn table_names(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A full disk, as a process sees it: no file may grow (`ulimit -f 0`, its signal ignored).
#[cfg(unix)]
#[test]
fn a_reader_on_a_full_disk_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sqlite3");
    let store = SqliteStore::open_blocking(&path, SqliteOptions::default()).unwrap();
    let two = [
        Entry::Message(Message::user_text("one")),
        Entry::Message(Message::assistant_text("two")),
    ];
    block_on(store.append("s", Head::EMPTY, &two)).unwrap();
    // The last connection closed: SQLite removed the WAL and its index, which a reader
    // must make again, and cannot on a full disk.
    drop(store);
    let cmd = crate::processes::child_command(&format!("read {}", path.display()));
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(ToOwned::to_owned).collect();
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
        .collect();
    let mut limited = std::process::Command::new("sh");
    limited
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\"")
        .arg(program)
        .args(args);
    for (k, v) in envs {
        if let Some(v) = v {
            limited.env(k, v);
        }
    }
    let out = limited.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("read 2 messages"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
