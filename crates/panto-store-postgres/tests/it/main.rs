//! The PostgreSQL store against a real server (`PANTO_TEST_POSTGRES`; skipped with a line
//! without one, a failure in CI): the conformance suite, its property test, conflicts decided
//! by the unique key under concurrent writers, exact bytes, migrations, secrets, several
//! processes and `kill -9` in the middle of an append.

// Tests fail loudly and pace their child processes: unwrapping and sleeping on a test thread
// are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: fails loudly, paces its child processes"
)]

mod catch_up;
mod faults;
mod fetch;
mod processes;
mod schema;
mod tls;

use panto_model::{Entry, Message};
use panto_store::{Head, Store, StoreError, conformance};
use panto_store_postgres::{PostgresStore, testing};
use proptest::prelude::*;

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `body` with the URL of a fresh schema on the test server, or returns after the line
/// `testing::server` prints when there is no server.
pub(crate) fn on_fresh_schema(test: &str, body: impl AsyncFnOnce(String)) {
    let Some(url) = testing::server(test) else {
        return;
    };
    runtime().block_on(async { body(testing::fresh_url(&url).await).await });
}

/// The conformance suite on fresh schemas of the server at `url`.
fn conformance_on(url: &str) {
    runtime().block_on(async {
        let mut stores = Vec::new();
        for _ in conformance::checks::<PostgresStore>() {
            stores.push(testing::fresh(url).await.unwrap());
        }
        conformance::run_all(|| stores.pop().unwrap()).await;
    });
}

#[test]
fn the_postgres_store_passes_the_conformance_suite() {
    let Some(url) = testing::server("the_postgres_store_passes_the_conformance_suite") else {
        return;
    };
    conformance_on(&url);
}

#[test]
fn the_conformance_suite_passes_over_tls() {
    let Some(url) = testing::variable(testing::TLS_ENV, "the_conformance_suite_passes_over_tls")
    else {
        return;
    };
    assert!(url.contains("sslmode=verify-full"), "{url}");
    conformance_on(&url);
}

#[test]
fn the_conformance_suite_passes_through_pgbouncer_in_transaction_mode() {
    let Some(url) = testing::variable(
        testing::BOUNCER_ENV,
        "the_conformance_suite_passes_through_pgbouncer_in_transaction_mode",
    ) else {
        return;
    };
    conformance_on(&url);
}

#[test]
fn any_appends_and_compactions_load_as_their_replay() {
    let Some(url) = testing::server("any_appends_and_compactions_load_as_their_replay") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(testing::fresh(&url)).unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    proptest!(ProptestConfig::with_cases(32), |(units in conformance::units())| {
        let n = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        rt.block_on(conformance::same_context(&store, &format!("s{n}"), &units));
    });
}

#[test]
fn writers_at_one_head_race_and_the_key_lets_exactly_one_in() {
    on_fresh_schema(
        "writers_at_one_head_race_and_the_key_lets_exactly_one_in",
        async |url| {
            // Eight connections, as eight hosts would have.
            let mut stores = Vec::new();
            for _ in 0..8 {
                stores.push(PostgresStore::connect(&url).await.unwrap());
            }
            let first = stores[0]
                .append(
                    "s",
                    Head::EMPTY,
                    &[Entry::Message(Message::user_text("start"))],
                )
                .await
                .unwrap();
            for round in 0..20u64 {
                let at = Head::new(first.get() + round);
                let tasks: Vec<_> = stores
                    .iter()
                    .cloned()
                    .enumerate()
                    .map(|(w, store)| {
                        tokio::spawn(async move {
                            let entries =
                                [Entry::Message(Message::user_text(format!("w{w} r{round}")))];
                            store.append("s", at, &entries).await
                        })
                    })
                    .collect();
                let mut won = 0;
                for t in tasks {
                    match t.await.unwrap() {
                        Ok(head) => {
                            won += 1;
                            assert_eq!(head, Head::new(at.get() + 1));
                        }
                        Err(StoreError::Conflict {
                            expected, found, ..
                        }) => {
                            assert_eq!(expected, at);
                            assert_eq!(found, Head::new(at.get() + 1));
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                assert_eq!(won, 1, "round {round}: exactly one writer wins");
            }
            let loaded = stores[0].load("s").await.unwrap();
            assert_eq!(loaded.head, Head::new(21));
        },
    );
}

#[test]
fn bodies_are_the_exact_bytes_and_the_schema_is_migrated_once() {
    on_fresh_schema(
        "bodies_are_the_exact_bytes_and_the_schema_is_migrated_once",
        async |url| {
            let store = PostgresStore::connect(&url).await.unwrap();
            // A second host starting later finds the schema there.
            let again = PostgresStore::connect(&url).await.unwrap();
            let records = conformance::records_of(conformance::CONTRACT_FILE);
            store
                .append_records("s", Head::EMPTY, &records)
                .await
                .unwrap();
            let client = testing::client(&url).await;
            let rows = client
            .query("SELECT body FROM panto_entries e JOIN panto_sessions s ON s.id = e.session WHERE s.name = 's' ORDER BY seq", &[])
            .await
            .unwrap();
            let bodies: Vec<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
            let lines: Vec<Vec<u8>> = conformance::CONTRACT_FILE
                .lines()
                .map(|l| l.as_bytes().to_vec())
                .collect();
            assert_eq!(bodies, lines);
            let versions: i64 = client
                .query_one("SELECT count(*) FROM panto_schema_migrations", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(versions, panto_store_postgres::MIGRATIONS.len() as i64);
            assert_eq!(
                conformance::export(&again, "s", 4).await,
                conformance::CONTRACT_FILE
            );
            // The load starts at the latest compaction through the partial index.
            let plan: Vec<String> = client
                .query(
                    "EXPLAIN SELECT max(seq) FROM panto_entries WHERE session = 1 AND kind = 1",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(
                plan.iter().any(|l| l.contains("panto_entries_compactions")),
                "{plan:#?}"
            );
            // A row changed by something else is named by its position.
            client
            .execute(
                "UPDATE panto_entries SET body = convert_to('{\"type\":\"message\",\"role\":\"robot\",\"content\":[]}', 'UTF8') WHERE seq = 10",
                &[],
            )
            .await
            .unwrap();
            let error = store.load("s").await.unwrap_err();
            assert!(matches!(error, StoreError::Invalid { .. }), "{error:?}");
            assert!(error.to_string().contains("session s: line 10"), "{error}");
        },
    );
}

#[test]
fn a_password_never_reaches_an_error_or_debug() {
    runtime().block_on(async {
        // Nothing listens on port 1: the connection is refused, and the message says where.
        let url = "postgres://agent:correct-horse-battery@127.0.0.1:1/panto";
        let error = PostgresStore::connect(url).await.unwrap_err();
        let text = format!("{error} {error:?}");
        assert!(!text.contains("correct-horse"), "{text}");
        assert!(
            text.contains("postgres://agent@127.0.0.1:1/panto: cannot connect"),
            "{text}"
        );
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    });
    let Some(url) = testing::server("a_password_never_reaches_an_error_or_debug") else {
        return;
    };
    runtime().block_on(async {
        let store = testing::fresh(&url).await.unwrap();
        let debug = format!("{store:?}");
        assert!(
            debug.starts_with("PostgresStore { location: \"postgres://"),
            "{debug}"
        );
        assert!(
            !store.location().contains("options"),
            "{}",
            store.location()
        );
    });
}

/// The recall index dropped and built again answers as the scan does, over as many items as
/// the one kept current by the appends, and its size counts its rows.
#[test]
fn the_recall_index_is_rebuilt_and_measured() {
    let Some(url) = testing::server("the_recall_index_is_rebuilt_and_measured") else {
        return;
    };
    runtime().block_on(async {
        let store = testing::fresh(&url).await.unwrap();
        let records = conformance::records_of(conformance::CONTRACT_FILE);
        store
            .append_records("s", Head::EMPTY, &records)
            .await
            .unwrap();
        conformance::recall::same_as_scan(&store, "s").await;
        let kept = store.recall_index_bytes("s").await.unwrap();
        assert!(kept > 0);
        let items = store.rebuild_recall_index("s").await.unwrap();
        assert!(items > 0);
        assert_eq!(store.recall_index_bytes("s").await.unwrap(), kept);
        conformance::recall::same_as_scan(&store, "s").await;
        assert_eq!(store.rebuild_recall_index("none").await.unwrap(), 0);
        assert_eq!(store.recall_index_bytes("none").await.unwrap(), 0);
    });
}
