//! Writers catching the recall index up at once: each reads the session's end under the
//! session's advisory lock, so one that read it earlier never takes the index another writer
//! brought further for one to build again.

use std::time::Duration;

use panto_store::{Head, RecallQuery, Store, conformance};
use panto_store_postgres::{PostgresStore, testing};
use tokio_postgres::Client;

use super::on_fresh_schema;

/// How many connections of `app` wait for an advisory lock.
async fn waiting(client: &Client, app: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
            &[&app],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `n` connections of `app` wait for an advisory lock.
async fn until_waiting(client: &Client, app: &str, n: i64) {
    for _ in 0..1_000 {
        if waiting(client, app).await == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} connections never waited for the index's lock");
}

/// The entries the index of session `s` covers.
async fn indexed(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT r.entries FROM panto_recall_state r JOIN panto_sessions s ON s.id = r.session
             WHERE s.name = 's'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// An append's catch-up that waits for the lock while another append and a recall follow it:
/// the lock goes to the append's catch-up (to entry 3), then the recall's (to entry 4). The
/// append's catch-up then finds the index at 4; with the end it read before the lock (3), it
/// took that index for one past the session, built it again from the start up to 3, and left
/// it behind the session. Two writers doing that at once took turns at the lock for ever (one
/// run in about ninety of `two_writers_with_auto_compaction_fetch_as_the_scan_on_postgres`,
/// and a CI run that timed out).
#[test]
fn a_catch_up_that_read_the_end_before_the_lock_keeps_the_index_another_brought_further() {
    on_fresh_schema(
        "a_catch_up_that_read_the_end_before_the_lock_keeps_the_index_another_brought_further",
        async |url| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let app = format!("panto_catch_up_{}_{nanos}", std::process::id());
            let url = format!("{url}&application_name={app}");
            let store = PostgresStore::connect(&url).await.unwrap();
            let entries = conformance::recall::tool_rounds(2);
            assert!(entries.len() >= 4, "{} entries", entries.len());
            store.append("s", Head::EMPTY, &entries[..2]).await.unwrap();
            let query = RecallQuery::new("tests");
            store.recall("s", &query).await.unwrap();
            let client = testing::client(&url).await;
            assert_eq!(indexed(&client).await, 2);
            // Another connection holds the session's lock, as a catch-up under way does.
            let holder = testing::client(&url).await;
            holder
                .batch_execute(
                    "BEGIN; SELECT pg_advisory_xact_lock(7061, hashtext(id::text))
                     FROM panto_sessions WHERE name = 's'",
                )
                .await
                .unwrap();
            let first = {
                let (store, entries) = (store.clone(), entries.clone());
                tokio::spawn(async move { store.append("s", Head::new(2), &entries[2..3]).await })
            };
            until_waiting(&client, &app, 1).await;
            // Appended while the index is behind: this append leaves it to the next recall.
            store
                .append("s", Head::new(3), &entries[3..4])
                .await
                .unwrap();
            let recall = {
                let (store, query) = (store.clone(), query.clone());
                tokio::spawn(async move { store.recall("s", &query).await })
            };
            until_waiting(&client, &app, 2).await;
            holder.batch_execute("COMMIT").await.unwrap();
            first.await.unwrap().unwrap();
            recall.await.unwrap().unwrap();
            assert_eq!(
                indexed(&client).await,
                4,
                "the index covers the whole session"
            );
            conformance::recall::same_as_scan(&store, "s").await;
        },
    );
}
