//! `PostgresStore`: the connection, the migrations, and the `Store` operations as prepared
//! statements.

use std::fmt;
use std::sync::Arc;

use panto_model::Entry;
use panto_store::{
    Head, Loaded, Page, Record, Store, StoreError, async_trait, replay_tail, takes_effect,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};

use crate::error::PostgresError;
use crate::schema::{BOOKKEEPING, MIGRATIONS};
use crate::url::StoreUrl;

/// An arbitrary constant: the advisory lock that serializes migrations across hosts.
const MIGRATION_LOCK: i64 = 0x7061_6e74_6f5f_6d31;

/// The statements, prepared once per connection.
struct Statements {
    /// `(session)` → `(seq, body)` from the latest compaction (or the first entry) on.
    tail: Statement,
    /// `(session, before)` → the latest compaction before `before`.
    compaction_before: Statement,
    /// `(session, from, to)` → `(seq, body)` for `from <= seq < to`.
    range: Statement,
    /// `(session)` → the head.
    head: Statement,
    /// `(session)` → a row when the session exists.
    exists: Statement,
    /// `(session)` → creates the session when missing.
    create: Statement,
    /// `(session, at, kinds, bodies)` → inserts the rows after `at` while the head is `at`.
    append: Statement,
    /// `(session, after, limit)` → `(seq, body)`.
    page: Statement,
    /// `()` → the names.
    list: Statement,
}

/// Sessions in a PostgreSQL database, shared by any number of processes on any number of
/// hosts. Cheap to clone (clones share one pipelined connection, which serves concurrent tasks
/// without waiting for each other's round trips).
///
/// A [`Head`] is the number of entries of the session. Session names are any non-empty text.
/// A lost connection makes every later operation fail with [`StoreError::Unavailable`];
/// connect again for a new store.
#[derive(Clone)]
pub struct PostgresStore {
    client: Arc<Client>,
    statements: Arc<Statements>,
    url: Arc<StoreUrl>,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.url.redacted())
            .finish_non_exhaustive()
    }
}

/// The store's error for a failed database operation, scrubbed of the password.
fn database(url: &StoreUrl, what: &str, e: &tokio_postgres::Error) -> PostgresError {
    // The client's `Display` of a server error is only `db error`: the server's message, and
    // its detail when there is one (which key, which value), say what happened.
    let mut message = e.to_string();
    if let Some(db) = e.as_db_error() {
        message = db.message().to_owned();
        if let Some(detail) = db.detail() {
            message = format!("{message} ({detail})");
        }
    } else if let Some(cause) = std::error::Error::source(e) {
        message = format!("{message}: {cause}");
    }
    PostgresError::Database {
        location: url.redacted().to_owned(),
        what: what.to_owned(),
        message: url.scrub(&message),
        code: e.code().map(|c| c.code().to_owned()),
    }
}

fn refused(url: &StoreUrl, message: String) -> PostgresError {
    PostgresError::Refused {
        location: url.redacted().to_owned(),
        message,
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL; see [`StoreUrl::parse`]),
    /// applies the schema's missing [`MIGRATIONS`], and prepares the statements. The
    /// connection's task is spawned on the current tokio runtime.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a URL that is not one or a schema newer than this version
    /// knows; [`StoreError::Unavailable`] when the server cannot be reached, refuses the login,
    /// or the migration fails. No message holds the password.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let url = StoreUrl::parse(url).map_err(|message| {
            StoreError::invalid(
                "",
                PostgresError::Refused {
                    location: "postgres".to_owned(),
                    message,
                },
            )
        })?;
        PostgresStore::connect_url(url).await
    }

    /// [`PostgresStore::connect`] with a parsed URL.
    ///
    /// # Errors
    /// As [`PostgresStore::connect`].
    pub async fn connect_url(url: StoreUrl) -> Result<PostgresStore, StoreError> {
        let fail = |what: &str, e: tokio_postgres::Error| {
            StoreError::unavailable("", database(&url, what, &e))
        };
        let (mut client, connection) = url
            .config()
            .connect(NoTls)
            .await
            .map_err(|e| fail("cannot connect", e))?;
        tokio::spawn(async move {
            // It ends when the client is dropped or the connection is lost; the client's next
            // call then reports the loss.
            let _ = connection.await;
        });
        // The planner cannot know that a load reads only the tail: on a long session it expects
        // a third of the table, and above `jit_above_cost` compiles the query at every load
        // (3.4 ms of a 3.7 ms load of a 1,000,000-entry session, with JIT on). The store's
        // statements are small index scans, which JIT never speeds up.
        client
            .batch_execute("SET jit = off")
            .await
            .map_err(|e| fail("cannot turn JIT off", e))?;
        migrate(&mut client, &url).await?;
        let statements = prepare(&client)
            .await
            .map_err(|e| fail("cannot prepare the statements", e))?;
        Ok(PostgresStore {
            client: Arc::new(client),
            statements: Arc::new(statements),
            url: Arc::new(url),
        })
    }

    /// The database's URL without the password.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    fn unavailable(&self, session: &str, what: &str, e: &tokio_postgres::Error) -> StoreError {
        StoreError::unavailable(session, database(&self.url, what, e))
    }

    fn check_name(&self, session: &str) -> Result<(), StoreError> {
        if session.is_empty() {
            return Err(StoreError::invalid(
                session,
                refused(&self.url, "a session name cannot be empty".to_owned()),
            ));
        }
        Ok(())
    }

    fn not_found(&self, session: &str) -> StoreError {
        StoreError::not_found(
            session,
            refused(&self.url, format!("no session named {session}")),
        )
    }

    fn malformed(&self, session: &str, message: String) -> StoreError {
        StoreError::invalid(
            session,
            PostgresError::Malformed {
                location: self.url.redacted().to_owned(),
                session: session.to_owned(),
                message,
            },
        )
    }

    async fn rows(
        &self,
        session: &str,
        statement: &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let rows = self
            .client
            .query(statement, params)
            .await
            .map_err(|e| self.unavailable(session, "cannot read the session", &e))?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, tokio_postgres::Error>>()
            .map_err(|e| self.unavailable(session, "cannot read the session", &e))
    }

    fn decode(&self, session: &str, rows: Vec<(i64, Vec<u8>)>) -> Result<Vec<Entry>, StoreError> {
        rows.into_iter()
            .map(|(seq, body)| {
                let line = usize::try_from(seq).unwrap_or(usize::MAX);
                panto_model::decode_line(&body, line)
                    .map_err(|e| self.malformed(session, e.to_string()))
            })
            .collect()
    }

    async fn exists(&self, session: &str) -> Result<bool, StoreError> {
        let row = self
            .client
            .query_opt(&self.statements.exists, &[&session])
            .await
            .map_err(|e| self.unavailable(session, "cannot look the session up", &e))?;
        Ok(row.is_some())
    }

    async fn current_head(&self, session: &str) -> Result<Head, StoreError> {
        let row = self
            .client
            .query_one(&self.statements.head, &[&session])
            .await
            .map_err(|e| self.unavailable(session, "cannot read the head", &e))?;
        let seq: i64 = row
            .try_get(0)
            .map_err(|e| self.unavailable(session, "cannot read the head", &e))?;
        Ok(Head::new(u64::try_from(seq).unwrap_or(0)))
    }
}

async fn migrate(client: &mut Client, url: &StoreUrl) -> Result<(), StoreError> {
    let fail =
        |what: &str, e: tokio_postgres::Error| StoreError::unavailable("", database(url, what, &e));
    let latest = MIGRATIONS.last().map_or(0, |m| m.0);
    // Nothing to do, and nothing to lock, when every migration is there (the usual case, and
    // the only one for a role that may not create tables).
    let version = applied(client)
        .await
        .map_err(|e| fail("cannot read the schema version", e))?;
    if version > latest {
        return Err(StoreError::invalid(
            "",
            refused(
                url,
                format!(
                    "the database has schema version {version}, newer than this panto knows ({latest}); use a newer panto"
                ),
            ),
        ));
    }
    if version == latest {
        return Ok(());
    }
    // A session-level lock taken before the transaction begins, so that the transaction's
    // first look at the catalog sees what a host that held the lock before committed.
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| fail("cannot lock the migration", e))?;
    let result = migrate_locked(client, url).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| fail("cannot unlock the migration", e));
    result.and(unlocked.map(drop))
}

/// The migrations, under the migration lock, in one transaction.
async fn migrate_locked(client: &mut Client, url: &StoreUrl) -> Result<(), StoreError> {
    let fail =
        |what: &str, e: tokio_postgres::Error| StoreError::unavailable("", database(url, what, &e));
    let tx = client
        .transaction()
        .await
        .map_err(|e| fail("cannot start the migration", e))?;
    // Another host may have migrated while this one waited for the lock.
    let exists: Option<String> = tx
        .query_one("SELECT to_regclass('panto_schema_migrations')::text", &[])
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| fail("cannot read the schema version", e))?;
    if exists.is_none() {
        tx.batch_execute(BOOKKEEPING)
            .await
            .map_err(|e| fail("cannot create panto_schema_migrations", e))?;
    }
    let have: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM panto_schema_migrations",
            &[],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| fail("cannot read the schema version", e))?;
    for &(version, sql) in MIGRATIONS {
        if i64::from(version) <= i64::from(have) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| fail(&format!("cannot apply migration {version}"), e))?;
        let version = i32::try_from(version).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO panto_schema_migrations (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(|e| fail("cannot record the migration", e))?;
    }
    tx.commit()
        .await
        .map_err(|e| fail("cannot commit the migration", e))
}

/// The latest migration the database has (0 for none).
async fn applied(client: &Client) -> Result<u32, tokio_postgres::Error> {
    let exists: Option<String> = client
        .query_one("SELECT to_regclass('panto_schema_migrations')::text", &[])
        .await?
        .try_get(0)?;
    if exists.is_none() {
        return Ok(0);
    }
    let version: i32 = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM panto_schema_migrations",
            &[],
        )
        .await?
        .try_get(0)?;
    Ok(u32::try_from(version).unwrap_or(0))
}

async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
    Ok(Statements {
        tail: client
            .prepare(
                "SELECT seq, body FROM panto_entries WHERE session = $1::text AND seq >= coalesce(
                    (SELECT max(seq) FROM panto_entries WHERE session = $1::text AND kind = 1), 1)
                 ORDER BY seq",
            )
            .await?,
        compaction_before: client
            .prepare(
                "SELECT max(seq) FROM panto_entries
                 WHERE session = $1::text AND kind = 1 AND seq < $2::bigint",
            )
            .await?,
        range: client
            .prepare(
                "SELECT seq, body FROM panto_entries
                 WHERE session = $1::text AND seq >= $2::bigint AND seq < $3::bigint ORDER BY seq",
            )
            .await?,
        head: client
            .prepare("SELECT coalesce(max(seq), 0) FROM panto_entries WHERE session = $1::text")
            .await?,
        exists: client
            .prepare("SELECT 1 FROM panto_sessions WHERE name = $1::text")
            .await?,
        create: client
            .prepare(
                "INSERT INTO panto_sessions (name) VALUES ($1::text) ON CONFLICT (name) DO NOTHING",
            )
            .await?,
        // One statement, so one unit: every row or none. The condition makes a stale writer
        // insert nothing; two writers at the same head both reach row `at + 1`, and the primary
        // key lets only the first in.
        append: client
            .prepare(
                "INSERT INTO panto_entries (session, seq, kind, body)
                 SELECT $1::text, $2::bigint + t.ord, t.kind, t.body
                 FROM unnest($3::smallint[], $4::bytea[]) WITH ORDINALITY AS t (kind, body, ord)
                 WHERE (SELECT coalesce(max(seq), 0) FROM panto_entries WHERE session = $1::text)
                     = $2::bigint",
            )
            .await?,
        page: client
            .prepare(
                "SELECT seq, body FROM panto_entries WHERE session = $1::text AND seq > $2::bigint
                 ORDER BY seq LIMIT $3::bigint",
            )
            .await?,
        list: client
            .prepare(r#"SELECT name FROM panto_sessions ORDER BY name COLLATE "C""#)
            .await?,
    })
}

fn to_u64(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

fn to_i64(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for PostgresStore {
    fn location(&self) -> String {
        self.url.redacted().to_owned()
    }

    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        self.check_name(session)?;
        let s = &self.statements;
        // Rows at or below the head are never changed, and every row below a visible one is
        // committed (an append sees the head it extends), so the queries below need no shared
        // snapshot: each reads rows below the first one's end.
        let tail = self.rows(session, &s.tail, &[&session]).await?;
        let Some(&(last, _)) = tail.last() else {
            if self.exists(session).await? {
                let mut loaded = Loaded::new(Default::default(), Head::EMPTY, Vec::new());
                loaded.empty = true;
                return Ok(loaded);
            }
            return Err(self.not_found(session));
        };
        let mut start = tail[0].0;
        let mut entries = self.decode(session, tail)?;
        // A compaction that does not take effect (its copies are not all there): step back to
        // the one before it, as a full replay would.
        while start > 1 && !takes_effect(&entries) {
            let before: Option<i64> = self
                .client
                .query_one(&s.compaction_before, &[&session, &start])
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| self.unavailable(session, "cannot read the session", &e))?;
            let from = before.unwrap_or(1);
            let more = self
                .rows(session, &s.range, &[&session, &from, &start])
                .await?;
            let mut earlier = self.decode(session, more)?;
            earlier.append(&mut entries);
            entries = earlier;
            start = from;
        }
        Ok(replay_tail(
            entries,
            Head::new(to_u64(last)),
            &format!("{}: session {session}", self.url.redacted()),
            to_u64(start - 1),
        ))
    }

    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.check_name(session)?;
        self.current_head(session).await
    }

    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        self.check_name(session)?;
        if records.is_empty() {
            let found = self.current_head(session).await?;
            if found != at {
                return Err(StoreError::conflict(&self.location(), session, at, found));
            }
            return Ok(found);
        }
        if at == Head::EMPTY {
            // The session's row first (an empty session, harmless if the append then fails).
            self.client
                .execute(&self.statements.create, &[&session])
                .await
                .map_err(|e| self.unavailable(session, "cannot create the session", &e))?;
        }
        let kinds: Vec<i16> = records.iter().map(|r| r.kind.code()).collect();
        let bodies: Vec<&[u8]> = records.iter().map(|r| r.text.as_bytes()).collect();
        let start = to_i64(at.get());
        let inserted = self
            .client
            .execute(
                &self.statements.append,
                &[&session, &start, &kinds, &bodies],
            )
            .await;
        match inserted {
            Ok(n) if n == records.len() as u64 => Ok(Head::new(at.get() + n)),
            // The head was not `at` (nothing inserted), or another writer's row took a
            // position first: the database decided.
            Ok(_) => {
                let found = self.current_head(session).await?;
                Err(StoreError::conflict(&self.location(), session, at, found))
            }
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                let found = self.current_head(session).await?;
                Err(StoreError::conflict(&self.location(), session, at, found))
            }
            Err(e) => Err(self.unavailable(session, "cannot append", &e)),
        }
    }

    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        self.check_name(session)?;
        let after = to_i64(from.get());
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let rows = self
            .rows(session, &self.statements.page, &[&session, &after, &limit])
            .await?;
        if rows.is_empty() && !self.exists(session).await? {
            return Err(self.not_found(session));
        }
        let next = rows.last().map_or(from, |r| Head::new(to_u64(r.0)));
        let records = rows
            .into_iter()
            .map(|(seq, body)| {
                let text = String::from_utf8(body).map_err(|e| {
                    self.malformed(session, format!("line {seq}: not valid UTF-8: {e}"))
                })?;
                Record::parse(text, usize::try_from(seq).unwrap_or(usize::MAX))
                    .map_err(|e| self.malformed(session, e.to_string()))
            })
            .collect::<Result<Vec<Record>, StoreError>>()?;
        Ok(Page::new(records, next))
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let rows = self
            .client
            .query(&self.statements.list, &[])
            .await
            .map_err(|e| self.unavailable("", "cannot list the sessions", &e))?;
        rows.iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(|e| self.unavailable("", "cannot list the sessions", &e))
    }

    /// Creates the session when it does not exist (so that other hosts list it), after
    /// checking its name and the connection; never writes an entry.
    async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
        self.check_name(session)?;
        self.client
            .execute(&self.statements.create, &[&session])
            .await
            .map_err(|e| self.unavailable(session, "cannot create the session", &e))?;
        Ok(())
    }
}
