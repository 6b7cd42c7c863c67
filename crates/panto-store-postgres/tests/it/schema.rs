//! The schema: a database of migration 1 is migrated to the latest with its sessions whole, and
//! session names of any length work (a name was once part of a b-tree key, bounded to about
//! 2.7 KB).

use panto_model::{Entry, Message};
use panto_store::{Head, Store, conformance};
use panto_store_postgres::{MIGRATIONS, PostgresOptions, PostgresStore, testing};

use crate::{on_fresh_schema, runtime};

#[test]
fn a_database_of_migration_1_is_migrated_with_its_sessions() {
    on_fresh_schema(
        "a_database_of_migration_1_is_migrated_with_its_sessions",
        async |url| {
            let client = testing::client(&url).await;
            // The schema as panto 0.1 left it, with two sessions in it.
            client
            .batch_execute(
                "CREATE TABLE panto_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());",
            )
            .await
            .unwrap();
            client.batch_execute(MIGRATIONS[0].1).await.unwrap();
            client
                .batch_execute("INSERT INTO panto_schema_migrations (version) VALUES (1)")
                .await
                .unwrap();
            let records = conformance::records_of(conformance::CONTRACT_FILE);
            for name in ["first", "second"] {
                client
                    .execute("INSERT INTO panto_sessions (name) VALUES ($1)", &[&name])
                    .await
                    .unwrap();
                for (i, r) in records.iter().enumerate() {
                    let seq = i as i64 + 1;
                    client
                    .execute(
                        "INSERT INTO panto_entries (session, seq, kind, body) VALUES ($1, $2, $3, $4)",
                        &[&name, &seq, &r.kind.code(), &r.text.as_bytes()],
                    )
                    .await
                    .unwrap();
                }
            }
            let store = PostgresStore::connect(&url).await.unwrap();
            let version: i32 = client
                .query_one("SELECT max(version) FROM panto_schema_migrations", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(version as u32, MIGRATIONS.last().unwrap().0);
            assert_eq!(store.list().await.unwrap(), vec!["first", "second"]);
            for name in ["first", "second"] {
                assert_eq!(
                    conformance::export(&store, name, 3).await,
                    conformance::CONTRACT_FILE
                );
                let loaded = store.load(name).await.unwrap();
                assert_eq!(loaded.head, Head::new(records.len() as u64));
                assert_eq!(loaded.context.summary(), Some("another program's summary"));
            }
            let head = store
                .append(
                    "first",
                    Head::new(records.len() as u64),
                    &[Entry::Message(Message::user_text("after the migration"))],
                )
                .await
                .unwrap();
            assert_eq!(head, Head::new(records.len() as u64 + 1));
        },
    );
}

#[test]
fn session_names_of_any_length_work() {
    let Some(url) = testing::server("session_names_of_any_length_work") else {
        return;
    };
    runtime().block_on(async {
        let store = testing::fresh(&url).await.unwrap();
        // Far past the 2,704 bytes a b-tree row may hold, with characters of every width.
        let long: String = "é名🦀x/".repeat(10_000);
        let similar = format!("{long}!");
        for name in [&long, &similar] {
            let head = store
                .append(
                    name,
                    Head::EMPTY,
                    &[Entry::Message(Message::user_text(name.len().to_string()))],
                )
                .await
                .unwrap();
            assert_eq!(head, Head::new(1));
        }
        assert_eq!(store.list().await.unwrap().len(), 2);
        let loaded = store.load(&similar).await.unwrap();
        assert_eq!(loaded.context.messages[0].text(), similar.len().to_string());
        assert!(store.append(&long, Head::EMPTY, &[]).await.is_err());
    });
}

#[test]
fn a_store_that_may_not_create_tables_reads_an_empty_database_as_empty() {
    on_fresh_schema(
        "a_store_that_may_not_create_tables_reads_an_empty_database_as_empty",
        async |url| {
            let options = PostgresOptions::default().with_create_tables(false);
            let store = PostgresStore::connect_with(&url, options).await.unwrap();
            assert!(store.list().await.unwrap().is_empty());
            assert!(store.load("s").await.is_err());
            assert_eq!(store.head("s").await.unwrap(), Head::EMPTY);
            let client = testing::client(&url).await;
            let tables: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'panto%' AND schemaname = current_schema()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(tables, 0, "reading created no table");
        },
    );
}

/// The recall postings stay in the table's own pages, uncompressed (migration 4): a range of a
/// term every item holds is past the 2 kB from which PostgreSQL would otherwise compress the
/// value or move it to the TOAST table, which a recall of common words read thousands of times.
#[test]
fn recall_postings_are_stored_inline_and_uncompressed() {
    on_fresh_schema(
        "recall_postings_are_stored_inline_and_uncompressed",
        async |url| {
            let store = PostgresStore::connect(&url).await.unwrap();
            // 1,500 items holding `common`: its first range's postings are some 4 kB.
            let entries: Vec<Entry> = (0..1_500)
                .map(|i| Entry::Message(Message::user_text(format!("common words {i}"))))
                .collect();
            store.append("s", Head::EMPTY, &entries).await.unwrap();
            store
                .recall("s", &panto_store::RecallQuery::new("common"))
                .await
                .unwrap();
            let client = testing::client(&url).await;
            let row = client
                .query_one(
                    "SELECT length(data), pg_column_compression(data)
                 FROM panto_recall_postings WHERE term = md5('common')::uuid AND part = 0",
                    &[],
                )
                .await
                .unwrap();
            let (length, compression): (i32, Option<String>) = (row.get(0), row.get(1));
            assert!(
                length > 2_048,
                "{length} bytes: the test needs a row past 2 kB"
            );
            assert_eq!(compression, None);
            // Nothing moved out to the TOAST table (`pg_column_size` cannot tell: it gives an
            // external value's own size).
            let toast: i64 = client
                .query_one(
                    "SELECT pg_relation_size(reltoastrelid) FROM pg_class
                 WHERE oid = 'panto_recall_postings'::regclass",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(toast, 0, "the postings' TOAST table holds {toast} bytes");
        },
    );
}

/// A recall index of migration 4 (postings, no bounds) is dropped by migration 5 and built
/// again at the next recall, never read without its bounds.
#[test]
fn a_recall_index_before_the_bounds_is_built_again() {
    on_fresh_schema(
        "a_recall_index_before_the_bounds_is_built_again",
        async |url| {
            let store = PostgresStore::connect(&url).await.unwrap();
            let records = conformance::records_of(conformance::CONTRACT_FILE);
            store
                .append_records("s", Head::EMPTY, &records)
                .await
                .unwrap();
            let query = panto_store::RecallQuery::new("fn main");
            let before = store.recall("s", &query).await.unwrap();
            assert!(!before.hits.is_empty());
            drop(store);
            // What a panto of migration 4 left: the index without the bounds' table (nor the ids
            // of migration 6).
            let client = testing::client(&url).await;
            client
                .batch_execute(
                    "DROP TABLE panto_recall_bounds;
                 DROP TABLE panto_recall_ids;
                 DROP INDEX panto_recall_docs_position;
                 DELETE FROM panto_schema_migrations WHERE version >= 5;",
                )
                .await
                .unwrap();
            let store = PostgresStore::connect(&url).await.unwrap();
            let states: i64 = client
                .query_one("SELECT count(*) FROM panto_recall_state", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(states, 0, "migration 5 dropped the old index");
            assert_eq!(store.recall("s", &query).await.unwrap(), before);
            let bounds: i64 = client
                .query_one("SELECT count(*) FROM panto_recall_bounds", &[])
                .await
                .unwrap()
                .get(0);
            assert!(bounds > 0, "built again, with its bounds");
            conformance::recall::same_as_scan(&store, "s").await;
        },
    );
}

/// A new session's recall index is started by its first append and extended by the next (no
/// state row is needed for that), so the first recall finds it current and builds nothing;
/// it answers as the scan does.
#[test]
fn the_first_append_starts_the_recall_index() {
    on_fresh_schema("the_first_append_starts_the_recall_index", async |url| {
        let store = PostgresStore::connect(&url).await.unwrap();
        let client = testing::client(&url).await;
        let indexed = || async {
            let rows = client
                .query(
                    "SELECT r.entries FROM panto_recall_state r
                     JOIN panto_sessions s ON s.id = r.session WHERE s.name = 's'",
                    &[],
                )
                .await
                .unwrap();
            rows.first().map(|r| r.get::<_, i64>(0))
        };
        let records = conformance::records_of(conformance::CONTRACT_FILE);
        let (first, rest) = records.split_at(records.len() / 2);
        let head = store.append_records("s", Head::EMPTY, first).await.unwrap();
        assert!(head.get() > 0);
        assert_eq!(indexed().await, Some(i64::try_from(head.get()).unwrap()));
        let head = store.append_records("s", head, rest).await.unwrap();
        assert_eq!(indexed().await, Some(i64::try_from(head.get()).unwrap()));
        conformance::recall::same_as_scan(&store, "s").await;
    });
}

/// A store of one connection recalls and fetches: the effective context's load and the index's
/// catch-up check, which a recall runs together, wait for each other's connection.
#[test]
fn a_store_of_one_connection_recalls() {
    let Some(url) = testing::server("a_store_of_one_connection_recalls") else {
        return;
    };
    runtime().block_on(async {
        let store = testing::fresh_with(&url, PostgresOptions::default().with_pool_size(1))
            .await
            .unwrap();
        let records = conformance::records_of(conformance::CONTRACT_FILE);
        store
            .append_records("s", Head::EMPTY, &records)
            .await
            .unwrap();
        conformance::recall::same_as_scan(&store, "s").await;
    });
}

/// A copy within a store of one connection cannot read its source while its import holds that
/// connection: it ends with the pool wait's error, whole (no target session), never waits for
/// ever (it did before the pool had a wait limit). A pool of two copies within the store.
#[test]
fn a_copy_within_a_store_of_one_connection_ends_with_the_pool_wait() {
    let Some(url) =
        testing::server("a_copy_within_a_store_of_one_connection_ends_with_the_pool_wait")
    else {
        return;
    };
    runtime().block_on(async {
        let options = PostgresOptions::default()
            .with_pool_size(1)
            .with_pool_wait(std::time::Duration::from_secs(2));
        let store = testing::fresh_with(&url, options).await.unwrap();
        let records = conformance::records_of(conformance::CONTRACT_FILE);
        let head = store
            .append_records("s", Head::EMPTY, &records)
            .await
            .unwrap();
        let copy = panto_store::copy_session(&store, "s", &store, "t");
        let ended = tokio::time::timeout(std::time::Duration::from_secs(60), copy)
            .await
            .expect("the copy waited for ever");
        let e = ended.expect_err("one connection cannot both read and import");
        let text = format!(
            "{e}: {}",
            std::error::Error::source(&e)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        assert!(text.contains("pool wait (2 s)"), "{text}");
        // It names the session whose read waited (it named none before).
        assert!(
            matches!(&e, panto_store::StoreError::Unavailable { session, .. } if session == "s"),
            "{e:?}"
        );
        assert_eq!(store.head("t").await.unwrap(), Head::EMPTY);
        assert_eq!(store.head("s").await.unwrap(), head);

        let two = testing::fresh_with(&url, PostgresOptions::default().with_pool_size(2))
            .await
            .unwrap();
        two.append_records("s", Head::EMPTY, &records)
            .await
            .unwrap();
        let copied = panto_store::copy_session(&two, "s", &two, "t")
            .await
            .unwrap();
        assert_eq!(copied, head);
    });
}

/// A store of one connection builds a session's recall index a chunk of 20,000 entries per
/// try and loads its effective context one after the other, never side by side: neither waits
/// for the other's connection, so a pool wait shorter than either still recalls, as the scan
/// does (side by side, the second waited for the first and ended with the pool wait).
#[test]
fn a_store_of_one_connection_builds_a_large_index_without_waiting_for_itself() {
    on_fresh_schema(
        "a_store_of_one_connection_builds_a_large_index_without_waiting_for_itself",
        async |url| {
            let options = PostgresOptions::default()
                .with_pool_size(1)
                .with_pool_wait(std::time::Duration::from_millis(1));
            let store = PostgresStore::connect_with(&url, options).await.unwrap();
            let entries = conformance::recall::tool_rounds(7_000);
            assert!(entries.len() > 20_000, "{} entries", entries.len());
            store.append("s", Head::EMPTY, &entries).await.unwrap();
            // The index the first append started, emptied: the recall builds it whole.
            let client = testing::client(&url).await;
            for table in [
                "ids",
                "bounds",
                "state",
                "postings",
                "docs",
                "calls",
                "compactions",
            ] {
                client
                    .batch_execute(&format!("DELETE FROM panto_recall_{table}"))
                    .await
                    .unwrap();
            }
            let query = panto_store::RecallQuery::new("toolu_6990")
                .with_limit(5)
                .with_context(true);
            let recalled = store.recall("s", &query).await.unwrap();
            assert!(!recalled.hits.is_empty(), "{recalled:?}");
            let scan = panto_store::recall_by_scan(&store, "s", &query)
                .await
                .unwrap();
            assert_eq!(recalled, scan);
        },
    );
}
