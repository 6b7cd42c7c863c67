//! The schema: its migrations, and the SQL a person can run instead of panto.

/// The table that records which migrations a database has: created by panto before the first
/// migration (and by [`schema_sql`] for a person).
pub(crate) const BOOKKEEPING: &str = "CREATE TABLE panto_schema_migrations (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
";

/// The schema, one migration per version, oldest first: `(version, SQL)`.
/// [`crate::PostgresStore::connect`] applies those `panto_schema_migrations` lacks, each in one
/// transaction under an advisory lock (so hosts starting together migrate once).
///
/// `panto_entries` holds one row per entry: the session's name, its position (`seq`, 1 for the
/// first entry, no gaps), its kind (0 message, 1 compaction, 2 other) and its exact Contract 1
/// bytes (`bytea`: no encoding conversion, byte for byte). The primary key `(session, seq)` is
/// the order of a session and what decides a conflict: two writers cannot both insert the row
/// after the same head. The partial index on compactions is where a load starts.
pub const MIGRATIONS: &[(u32, &str)] = &[(
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
)];

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
