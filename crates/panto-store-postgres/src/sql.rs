//! The statements of the store, each sent unnamed with its parameter types (no prepared
//! statement outlives its transaction, as PgBouncer in transaction mode needs). A session is
//! found by name through the unique index on `md5(name)`.

/// `($1 name)` → `(id, latest compaction or NULL, head)` of the session; no row when it does
/// not exist.
pub(crate) const SESSION: &str = "SELECT s.id,
       (SELECT max(e.seq) FROM panto_entries e WHERE e.session = s.id AND e.kind = 1),
       coalesce((SELECT max(e.seq) FROM panto_entries e WHERE e.session = s.id), 0)
FROM panto_sessions s WHERE md5(s.name) = md5($1::text) AND s.name = $1::text";

/// `($1 id, $2 from, $3 to)` → `(seq, body)` for `from <= seq <= to`.
pub(crate) const RANGE: &str = "SELECT seq, body FROM panto_entries
WHERE session = $1::bigint AND seq >= $2::bigint AND seq <= $3::bigint ORDER BY seq";

/// `($1 id, $2 before)` → the latest compaction before `before`, or NULL.
pub(crate) const COMPACTION_BEFORE: &str = "SELECT max(seq) FROM panto_entries
WHERE session = $1::bigint AND kind = 1 AND seq < $2::bigint";

/// `($1 name)` → the head (0 for a session that does not exist).
pub(crate) const HEAD: &str = "SELECT coalesce(max(e.seq), 0) FROM panto_entries e
WHERE e.session = (SELECT s.id FROM panto_sessions s
                   WHERE md5(s.name) = md5($1::text) AND s.name = $1::text)";

/// `($1 name)` → creates the session when it does not exist.
pub(crate) const CREATE: &str =
    "INSERT INTO panto_sessions (name) VALUES ($1::text) ON CONFLICT DO NOTHING";

/// `($1 name, $2 at, $3 kinds, $4 bodies)` → how many rows went in: the rows after `at`, only
/// while the session ends at `at`, in one statement (so one unit: every row or none). At head
/// 0 it creates the session in the same statement, so an append that inserts nothing leaves no
/// session behind. Two writers at the same head both reach row `at + 1`, and the primary key
/// lets only the first in.
pub(crate) const APPEND: &str = "WITH new AS (
    INSERT INTO panto_sessions (name) SELECT $1::text WHERE $2::bigint = 0
    ON CONFLICT DO NOTHING RETURNING id
), s AS (
    SELECT id FROM new
    UNION ALL
    SELECT id FROM panto_sessions WHERE md5(name) = md5($1::text) AND name = $1::text
    LIMIT 1
), ins AS (
    INSERT INTO panto_entries (session, seq, kind, body)
    SELECT s.id, $2::bigint + t.ord, t.kind, t.body
    FROM s, unnest($3::smallint[], $4::bytea[]) WITH ORDINALITY AS t (kind, body, ord)
    WHERE (SELECT coalesce(max(e.seq), 0) FROM panto_entries e WHERE e.session = s.id)
        = $2::bigint
    RETURNING 1
)
SELECT count(*) FROM ins";

/// `($1 name, $2 after, $3 to)` → `(seq, body)` for `after < seq <= to`: what an append whose
/// connection was lost may have written.
pub(crate) const WRITTEN: &str = "SELECT e.seq, e.body FROM panto_entries e
WHERE e.session = (SELECT s.id FROM panto_sessions s
                   WHERE md5(s.name) = md5($1::text) AND s.name = $1::text)
  AND e.seq > $2::bigint AND e.seq <= $3::bigint ORDER BY e.seq";

/// `($1 name, $2 after, $3 limit, $4 bytes)` → `(seq, body)`: a page of the history, stopped
/// once it holds `bytes` of text (rows are taken while the page holds less).
pub(crate) const PAGE: &str = "SELECT seq, body FROM (
    SELECT e.seq, e.body, sum(length(e.body)) OVER (ORDER BY e.seq) - length(e.body) AS before
    FROM panto_entries e
    WHERE e.session = (SELECT s.id FROM panto_sessions s
                       WHERE md5(s.name) = md5($1::text) AND s.name = $1::text)
      AND e.seq > $2::bigint
    ORDER BY e.seq LIMIT $3::bigint
) p WHERE p.before < $4::bigint ORDER BY p.seq";

/// `($1 name)` → a row when the session exists.
pub(crate) const EXISTS: &str =
    "SELECT 1 FROM panto_sessions WHERE md5(name) = md5($1::text) AND name = $1::text";

/// `()` → the names, in byte order.
pub(crate) const LIST: &str = r#"SELECT name FROM panto_sessions ORDER BY name COLLATE "C""#;

/// An import's rows, streamed.
pub(crate) const COPY: &str =
    "COPY panto_entries (session, seq, kind, body) FROM STDIN (FORMAT binary)";

/// `($1 name)` → the session's id and head, in an import's transaction after `CREATE`.
pub(crate) const IMPORT_TARGET: &str = "SELECT s.id,
       coalesce((SELECT max(e.seq) FROM panto_entries e WHERE e.session = s.id), 0)
FROM panto_sessions s WHERE md5(s.name) = md5($1::text) AND s.name = $1::text";
