//! Fetch by id with the index of ids (migration 6): only the entries around the id are read,
//! and an index emptied of its ids, dropped, or of the schema before them answers as the scan.

use panto_store::{Head, Store, conformance};
use panto_store_postgres::{PostgresStore, testing};

use super::on_fresh_schema;

/// An entry far from the id that does not decode fails the scan, not the indexed fetch: it
/// reads the entries around the id only, and answers what the scan answered before.
#[test]
fn a_fetch_reads_only_the_entries_around_the_id() {
    on_fresh_schema(
        "a_fetch_reads_only_the_entries_around_the_id",
        async |url| {
            let store = PostgresStore::connect(&url).await.unwrap();
            let entries = conformance::recall::tool_rounds(100);
            store.append("s", Head::EMPTY, &entries).await.unwrap();
            let expected = conformance::recall::late_fetches(&store, "s", true)
                .await
                .unwrap();
            assert_eq!(expected[0].items[0].tool.as_deref(), Some("bash"));
            // The first fetch builds the index (a first append at head 0 leaves it to the next
            // recall or fetch).
            let indexed = conformance::recall::late_fetches(&store, "s", false)
                .await
                .unwrap();
            assert_eq!(indexed, expected);
            let client = testing::client(&url).await;
            client
                .batch_execute("UPDATE panto_entries SET body = '\\x7b'::bytea WHERE seq = 1")
                .await
                .unwrap();
            assert!(
                conformance::recall::late_fetches(&store, "s", true)
                    .await
                    .is_err()
            );
            let fetched = conformance::recall::late_fetches(&store, "s", false)
                .await
                .unwrap();
            assert_eq!(fetched, expected);
        },
    );
}

/// An index without its ids answers by scan; one dropped whole is built again by the fetch;
/// a database of migration 5 has its index dropped by migration 6 and built again.
#[test]
fn a_dropped_or_stale_index_of_ids_answers_as_the_scan() {
    on_fresh_schema(
        "a_dropped_or_stale_index_of_ids_answers_as_the_scan",
        async |url| {
            let store = PostgresStore::connect(&url).await.unwrap();
            let entries = conformance::recall::tool_rounds(30);
            store.append("s", Head::EMPTY, &entries).await.unwrap();
            conformance::recall::same_fetch_as_scan(&store, "s").await;
            let client = testing::client(&url).await;
            let count = async |table: &str| -> i64 {
                client
                    .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                    .await
                    .unwrap()
                    .get(0)
            };
            let ids = count("panto_recall_ids").await;
            assert!(ids > 0);
            client
                .batch_execute("DELETE FROM panto_recall_ids")
                .await
                .unwrap();
            conformance::recall::same_fetch_as_scan(&store, "s").await;
            client
                .batch_execute(
                    "TRUNCATE panto_recall_state, panto_recall_postings, panto_recall_docs,
                 panto_recall_calls, panto_recall_compactions, panto_recall_bounds",
                )
                .await
                .unwrap();
            conformance::recall::same_fetch_as_scan(&store, "s").await;
            assert_eq!(
                count("panto_recall_ids").await,
                ids,
                "the fetch built it again"
            );
            drop(store);
            client
                .batch_execute(
                    "DROP TABLE panto_recall_ids;
                 DROP INDEX panto_recall_docs_position;
                 DELETE FROM panto_schema_migrations WHERE version = 6;",
                )
                .await
                .unwrap();
            let store = PostgresStore::connect(&url).await.unwrap();
            assert_eq!(
                count("panto_recall_state").await,
                0,
                "migration 6 dropped the index"
            );
            conformance::recall::same_fetch_as_scan(&store, "s").await;
            assert_eq!(count("panto_recall_ids").await, ids);
        },
    );
}
