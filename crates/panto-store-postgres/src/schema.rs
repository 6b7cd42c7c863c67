//! The schema: its migrations, and the SQL a person can run instead of panto.

/// The table that records which migrations a database has: created by panto before the first
/// migration (and by [`schema_sql`] for a person).
pub(crate) const BOOKKEEPING: &str = "CREATE TABLE panto_schema_migrations (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
";

/// The schema, one migration per version, oldest first: `(version, SQL)`.
/// [`crate::PostgresStore::connect`] applies those `panto_schema_migrations` lacks, in one
/// transaction under a transaction-level advisory lock (so hosts starting together migrate
/// once, and nothing outlives the transaction, as PgBouncer in transaction mode needs).
///
/// Since migration 2, `panto_sessions` gives each session a number (`id`) and keeps its name
/// (any text: a unique index on `md5(name)` keeps names unique, so they are not bounded by the
/// index's row size, about 2.7 KB); `panto_entries` holds one row per entry: the session's
/// number, its position (`seq`, 1 for the first entry, no gaps), its kind (0 message,
/// 1 compaction, 2 other) and its exact Contract 1 bytes (`bytea`: no encoding conversion,
/// byte for byte). The primary key `(session, seq)` is the order of a session and what decides
/// a conflict: two writers cannot both insert the row after the same head. The partial index on
/// compactions is where a load starts.
pub const MIGRATIONS: &[(u32, &str)] = &[
    (
        1,
        "-- 1: sessions and their entries, with an index on the compactions
CREATE TABLE panto_sessions (
    name text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE panto_entries (
    session text NOT NULL REFERENCES panto_sessions (name),
    seq bigint NOT NULL CHECK (seq > 0),
    kind smallint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE INDEX panto_entries_compactions ON panto_entries (session, seq) WHERE kind = 1;
",
    ),
    (
        2,
        "-- 2: each session a number, which its entries name; names of any length
ALTER TABLE panto_entries DROP CONSTRAINT panto_entries_session_fkey;
ALTER TABLE panto_sessions DROP CONSTRAINT panto_sessions_pkey;
ALTER TABLE panto_sessions ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
CREATE UNIQUE INDEX panto_sessions_name ON panto_sessions (md5(name));
ALTER TABLE panto_entries ADD COLUMN session_id bigint;
UPDATE panto_entries e SET session_id = s.id FROM panto_sessions s WHERE s.name = e.session;
DROP INDEX panto_entries_compactions;
ALTER TABLE panto_entries DROP CONSTRAINT panto_entries_pkey;
ALTER TABLE panto_entries DROP COLUMN session;
ALTER TABLE panto_entries RENAME COLUMN session_id TO session;
ALTER TABLE panto_entries ALTER COLUMN session SET NOT NULL;
ALTER TABLE panto_entries ADD PRIMARY KEY (session, seq);
ALTER TABLE panto_entries ADD FOREIGN KEY (session) REFERENCES panto_sessions (id);
CREATE INDEX panto_entries_compactions ON panto_entries (session, seq) WHERE kind = 1;
",
    ),
    (3, crate::recall::SCHEMA),
    (4, crate::recall::INLINE),
    (5, crate::recall::BOUNDS),
    (6, crate::recall::IDS),
];

/// The whole schema as one SQL script a person can run (in a transaction) instead of letting
/// panto migrate: the bookkeeping table, every migration, and the rows that record them.
pub fn schema_sql() -> String {
    let mut out = String::from("BEGIN;\n");
    out.push_str(BOOKKEEPING);
    for (version, sql) in MIGRATIONS {
        out.push_str(sql);
        out.push_str(&format!(
            "INSERT INTO panto_schema_migrations (version) VALUES ({version});\n"
        ));
    }
    out.push_str("COMMIT;\n");
    out
}
