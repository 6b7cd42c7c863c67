//! Several processes on one PostgreSQL session: conditional appends from four processes, and
//! `kill -9` in the middle of an append. The children are this test binary run again with
//! `child` as the only test and its task in `PANTO_PG_CHILD`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use panto_model::{Entry, Message};
use panto_store::{Head, SessionLog, Store, StoreError, conformance};
use panto_store_postgres::{PostgresStore, testing};

use crate::runtime;

const TASK: &str = "PANTO_PG_CHILD";
const COPIES: usize = 300;

/// The child's side: `crash URL` appends crash units forever; `write URL W N` appends N
/// entries as writer W, each conditional on the head it last saw, reloading after a conflict.
#[test]
fn child() {
    let Ok(task) = std::env::var(TASK) else {
        return;
    };
    let args: Vec<&str> = task.split(' ').collect();
    runtime().block_on(async {
        let store = PostgresStore::connect(args[1]).await.unwrap();
        match args[0] {
            "crash" => {
                let mut head = store.head("s").await.unwrap();
                let mut n = usize::try_from(head.get()).unwrap() / (COPIES + 1);
                loop {
                    let unit = conformance::crash_unit(n, COPIES);
                    head = store.append("s", head, &unit).await.unwrap();
                    n += 1;
                }
            }
            "write" => {
                let (w, count): (usize, usize) =
                    (args[2].parse().unwrap(), args[3].parse().unwrap());
                let (mut log, _) = SessionLog::open(store, "s").await.unwrap();
                let mut i = 0;
                while i < count {
                    let entry = Entry::Message(Message::user_text(format!("w{w} #{i}")));
                    match log.append(&[entry]).await {
                        Ok(()) => i += 1,
                        Err(StoreError::Conflict { .. }) => {
                            log.reload().await.unwrap();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            other => panic!("unknown task {other}"),
        }
    });
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
    let Some(url) = testing::server("four_processes_appending_conditionally") else {
        return;
    };
    let rt = runtime();
    let url = rt.block_on(testing::fresh_url(&url));
    let (writers, count) = (4, 40);
    let children: Vec<Child> = (0..writers)
        .map(|w| spawn(&format!("write {url} {w} {count}")))
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    rt.block_on(async {
        let store = PostgresStore::connect(&url).await.unwrap();
        let loaded = store.load("s").await.unwrap();
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
    });
}

#[cfg(unix)]
#[test]
fn kill_9_in_the_middle_of_an_append_leaves_whole_units_only() {
    let Some(url) = testing::server("kill_9_in_the_middle_of_an_append") else {
        return;
    };
    let rt = runtime();
    let url = rt.block_on(testing::fresh_url(&url));
    let store = rt.block_on(PostgresStore::connect(&url)).unwrap();
    for delay in [150u64, 220, 300, 410, 530] {
        let mut child = spawn(&format!("crash {url}"));
        std::thread::sleep(Duration::from_millis(delay));
        let killed = Command::new("kill")
            .args(["-9", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        child.wait().unwrap();
        rt.block_on(settled(&store, "s"));
        rt.block_on(conformance::after_a_kill(&store, "s", COPIES, false));
    }
    let whole = rt.block_on(conformance::after_a_kill(&store, "s", COPIES, false));
    assert!(whole > 0, "no append finished before the kills");
}

/// Waits until `session`'s head stays put: a client killed after it sent its COMMIT leaves the
/// server to carry that commit out (PostgreSQL finishes what it received), a moment after the
/// client is gone, so a check that read the history before it would see one unit fewer than
/// the load after it.
async fn settled(store: &PostgresStore, session: &str) {
    let mut last = store.head(session).await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = store.head(session).await.unwrap();
        if now == last {
            return;
        }
        last = now;
    }
}
