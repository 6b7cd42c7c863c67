//! The recall index's migrations: its tables (3), its postings inline (4), its bounds apart
//! from its postings (5).

/// Migration 3: the recall index's tables (derived from the entries; each may be emptied, and
/// the next recall builds the session's index again).
pub(crate) const SCHEMA: &str = "-- 3: the recall index (derived data: see docs/recall.md)
CREATE TABLE panto_recall_state (
    session bigint PRIMARY KEY REFERENCES panto_sessions (id),
    entries bigint NOT NULL,
    docs bigint NOT NULL,
    total_len bigint NOT NULL
);
CREATE TABLE panto_recall_postings (
    session bigint NOT NULL,
    term uuid NOT NULL,
    part integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (session, term, part)
);
CREATE TABLE panto_recall_docs (
    session bigint NOT NULL,
    doc integer NOT NULL,
    position bigint NOT NULL,
    block integer NOT NULL,
    fingerprint bigint NOT NULL,
    PRIMARY KEY (session, doc)
);
CREATE TABLE panto_recall_calls (
    session bigint NOT NULL,
    call text NOT NULL,
    position bigint NOT NULL,
    block integer NOT NULL,
    tool text NOT NULL,
    PRIMARY KEY (session, call, position, block)
);
CREATE TABLE panto_recall_compactions (
    session bigint NOT NULL,
    position bigint NOT NULL,
    name text NOT NULL,
    PRIMARY KEY (session, position)
);
";

/// Migration 4: the postings rows kept in the table's own pages, uncompressed, up to a page.
/// A range's block is about 3 kB for a common term, past the 2 kB from which PostgreSQL by
/// default compresses a value, if it compresses, and otherwise moves it out to the TOAST
/// table: a recall of three common words then fetched some 3,600 values through the TOAST
/// table's index (with `psql` on 3 × 1,220 rows of 3 kB: 18 to 36 ms of the server's, inline
/// 3 to 14 ms). Rows written before it stay as they
/// were (right, only slower) until rewritten: an append rewrites its range's, a rebuild all.
pub(crate) const INLINE: &str = "-- 4: the recall postings inline (see recall.rs)
ALTER TABLE panto_recall_postings SET (toast_tuple_target = 8160);
ALTER TABLE panto_recall_postings ALTER COLUMN data SET STORAGE MAIN;
";

/// Migration 5: each term's bounds by range apart from its postings (how many items of the
/// range hold it, the front of its postings: `panto_store::recall::join_bounds`), so that a
/// recall reads its terms' bounds in one round trip, then the postings of the ranges it
/// scores only, a batch of ranges per round trip. Every index written before it is dropped
/// (it has no bounds); the next recall of a session builds it again.
pub(crate) const BOUNDS: &str =
    "-- 5: the recall index's bounds apart from its postings (see recall/schema.rs)
CREATE TABLE panto_recall_bounds (
    session bigint NOT NULL,
    term uuid NOT NULL,
    part integer NOT NULL,
    count integer NOT NULL,
    front bytea NOT NULL,
    PRIMARY KEY (session, term, part)
);
TRUNCATE panto_recall_state, panto_recall_postings, panto_recall_docs, panto_recall_calls,
    panto_recall_compactions;
";
