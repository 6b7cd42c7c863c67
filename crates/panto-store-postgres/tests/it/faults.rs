//! An append whose connection is lost is applied once or not at all: a proxy between the store
//! and the server cuts the connection either before the append reaches the server (it did not
//! take effect: the next try writes it) or after the server committed it, before the client
//! heard (it took effect: the next try finds its rows and writes nothing). Also: a killed
//! backend and a held lock, on the library's own.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use panto_model::{Entry, Message};
use panto_store::{Head, Store, StoreError};
use panto_store_postgres::{Limit, PostgresError, PostgresOptions, PostgresStore, testing};

use crate::runtime;

/// What the proxy does to the next append.
const PASS: u8 = 0;
/// Drops the append's bytes (and the connection) before the server sees them.
const CUT_BEFORE: u8 = 1;
/// Forwards the append, then drops the server's answer (and the connection) once it says
/// `COMMIT`: the append took effect and the client never heard.
const CUT_AFTER: u8 = 2;

/// A TCP proxy on loopback to `server` (`host:port`), doing to the next append what `mode`
/// says (and then passing everything again). Returns its address.
fn proxy(server: String, mode: Arc<AtomicU8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let upstream = TcpStream::connect(&server).unwrap();
            let armed = Arc::new(AtomicU8::new(0));
            pump(
                client.try_clone().unwrap(),
                upstream.try_clone().unwrap(),
                mode.clone(),
                armed.clone(),
                true,
            );
            pump(upstream, client, mode.clone(), armed, false);
        }
    });
    addr
}

/// Copies `from` to `to`; on the client's side (`up`) it watches for the append, on the
/// server's for the answer that commits it.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    mode: Arc<AtomicU8>,
    armed: Arc<AtomicU8>,
    up: bool,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            let append = chunk.windows(25).any(|w| w == b"INSERT INTO panto_entries");
            let cut = if up && append {
                match mode.load(Ordering::SeqCst) {
                    CUT_BEFORE => {
                        mode.store(PASS, Ordering::SeqCst);
                        true
                    }
                    CUT_AFTER => {
                        armed.store(1, Ordering::SeqCst);
                        false
                    }
                    _ => false,
                }
            } else if !up
                && armed.load(Ordering::SeqCst) == 1
                && chunk.windows(7).any(|w| w == b"COMMIT\0")
            {
                mode.store(PASS, Ordering::SeqCst);
                armed.store(0, Ordering::SeqCst);
                true
            } else {
                false
            };
            if cut || to.write_all(chunk).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}

/// The messages of session `s` whose text is `text`.
async fn copies(store: &PostgresStore, text: &str) -> usize {
    let loaded = store.load("s").await.unwrap();
    loaded
        .context
        .messages
        .iter()
        .filter(|m| m.text() == text)
        .count()
}

#[test]
fn an_append_whose_connection_is_lost_is_applied_once_or_not_at_all() {
    let Some(url) = testing::server("an_append_whose_connection_is_lost_is_applied_once") else {
        return;
    };
    let rt = runtime();
    let fresh = rt.block_on(testing::fresh_url(&url));
    // The server's host and port, from the URL (`postgres://user@host:port/db?...`).
    let after_at = &fresh[fresh.find('@').unwrap() + 1..];
    let server = after_at[..after_at.find('/').unwrap()].to_owned();
    let mode = Arc::new(AtomicU8::new(PASS));
    let through = fresh.replacen(&server, &proxy(server.clone(), mode.clone()), 1);
    rt.block_on(async {
        let store = PostgresStore::connect(&through).await.unwrap();
        let mut head = store
            .append(
                "s",
                Head::EMPTY,
                &[Entry::Message(Message::user_text("start"))],
            )
            .await
            .unwrap();
        for (round, cut) in [CUT_BEFORE, CUT_AFTER, CUT_BEFORE, CUT_AFTER]
            .into_iter()
            .enumerate()
        {
            let text = format!("round {round}");
            mode.store(cut, Ordering::SeqCst);
            head = store
                .append("s", head, &[Entry::Message(Message::user_text(&text))])
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(
                mode.load(Ordering::SeqCst),
                PASS,
                "round {round}: the proxy cut"
            );
            assert_eq!(head, Head::new(round as u64 + 2));
            assert_eq!(copies(&store, &text).await, 1, "round {round}: once");
        }
    });
}

#[test]
fn a_killed_backend_is_replaced_and_a_held_lock_ends_at_the_lock_timeout() {
    let Some(url) = testing::server("a_killed_backend_is_replaced") else {
        return;
    };
    runtime().block_on(async {
        let fresh = testing::fresh_url(&format!("{url}&application_name=replaced")).await;
        let options = PostgresOptions::default().with_lock_timeout(Duration::from_secs(1));
        let store = PostgresStore::connect_with(&fresh, options).await.unwrap();
        let head = store
            .append(
                "s",
                Head::EMPTY,
                &[Entry::Message(Message::user_text("one"))],
            )
            .await
            .unwrap();
        let admin = testing::client(&fresh).await;
        let killed: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name = 'replaced' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(killed >= 1);
        let head = store
            .append("s", head, &[Entry::Message(Message::user_text("two"))])
            .await
            .unwrap();
        assert_eq!(head, Head::new(2));
        admin
            .batch_execute("BEGIN; LOCK TABLE panto_entries IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let error = store
            .append("s", head, &[Entry::Message(Message::user_text("three"))])
            .await
            .unwrap_err();
        let StoreError::Unavailable { source, .. } = &error else {
            panic!("{error:?}");
        };
        let limit = source
            .downcast_ref::<PostgresError>()
            .and_then(PostgresError::limit);
        assert_eq!(limit, Some(Limit::Lock(Duration::from_secs(1))), "{error}");
        admin.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(store.load("s").await.unwrap().head, Head::new(2));
    });
}
