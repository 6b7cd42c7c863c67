//! Several processes on one database: concurrent conditional appends, and `kill -9` in the
//! middle of an append. The children are this test binary run again with `child` as the only
//! test and its task in `PANTO_SQLITE_CHILD`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use panto_model::{Entry, Message};
use panto_store::{Head, SessionLog, Store, StoreError, conformance};
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use crate::block_on;

const TASK: &str = "PANTO_SQLITE_CHILD";
const COPIES: usize = 300;

/// The child's side: `crash PATH` appends crash units forever; `write PATH W N` appends N
/// entries as writer W, each conditional on the head it last saw, reloading after a conflict;
/// `read PATH` loads session `s` as a command that only reads and prints how many messages.
#[test]
fn child() {
    let Ok(task) = std::env::var(TASK) else {
        return;
    };
    let args: Vec<&str> = task.split(' ').collect();
    let mut options = SqliteOptions::default().with_fsync(false);
    if args[0] == "read" {
        // What a command that only reads does; says what it read on stdout.
        options = options.with_create(false);
        let store = block_on(SqliteStore::open_with(args[1], options)).unwrap();
        let loaded = block_on(store.load("s")).unwrap();
        println!("read {} messages", loaded.context.messages.len());
        return;
    }
    let store = block_on(SqliteStore::open_with(args[1], options)).unwrap();
    match args[0] {
        "crash" => {
            let mut head = Head::EMPTY;
            for n in 0.. {
                head =
                    block_on(store.append("s", head, &conformance::crash_unit(n, COPIES))).unwrap();
            }
        }
        "write" => {
            let (writer, count): (usize, usize) =
                (args[2].parse().unwrap(), args[3].parse().unwrap());
            let (mut log, _) = block_on(SessionLog::open(store, "s")).unwrap();
            let mut i = 0;
            while i < count {
                let entry = Entry::Message(Message::user_text(format!("w{writer} #{i}")));
                match block_on(log.append(&[entry])) {
                    Ok(()) => i += 1,
                    Err(StoreError::Conflict { .. }) => {
                        block_on(log.reload()).unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        other => panic!("unknown task {other}"),
    }
}

pub(crate) fn child_command(task: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["processes::child", "--exact", "--nocapture"])
        .env(TASK, task);
    cmd
}

fn spawn(task: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "processes::child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(TASK, task)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn four_processes_appending_conditionally_keep_every_entry_once_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sqlite3");
    let (writers, count) = (4, 60);
    let children: Vec<Child> = (0..writers)
        .map(|w| spawn(&format!("write {} {w} {count}", path.display())))
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let store = block_on(SqliteStore::open(&path)).unwrap();
    let loaded = block_on(store.load("s")).unwrap();
    assert_eq!(loaded.head, Head::new((writers * count) as u64));
    for w in 0..writers {
        let mine: Vec<String> = loaded
            .context
            .messages
            .iter()
            .map(Message::text)
            .filter(|t| t.starts_with(&format!("w{w} ")))
            .collect();
        let expected: Vec<String> = (0..count).map(|i| format!("w{w} #{i}")).collect();
        assert_eq!(mine, expected, "writer {w}: every entry once, in order");
    }
}

#[cfg(unix)]
#[test]
fn kill_9_in_the_middle_of_an_append_leaves_whole_units_only() {
    let dir = tempfile::tempdir().unwrap();
    for (round, delay) in [5u64, 40, 90, 160, 250].into_iter().enumerate() {
        let path = dir.path().join(format!("k{round}.sqlite3"));
        let mut child = spawn(&format!("crash {}", path.display()));
        let started = Instant::now();
        // Kill it after its first appends, at a moment that varies from round to round.
        while !path.exists() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100 + delay));
        let killed = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        child.wait().unwrap();
        let store = block_on(SqliteStore::open(&path)).unwrap();
        let whole = block_on(conformance::after_a_kill(&store, "s", COPIES, false));
        // The store goes on from there.
        let head = block_on(store.head("s")).unwrap();
        let next = conformance::crash_unit(whole, COPIES);
        block_on(store.append("s", head, &next)).unwrap();
        assert_eq!(
            block_on(conformance::after_a_kill(&store, "s", COPIES, false)),
            whole + 1
        );
    }
}
