//! `PostgresStore`: the pool, the migrations at connect, and the `Store` operations, each a
//! run of [`Attempts`] (a lost connection is tried again on a new one).

use std::fmt;
use std::sync::Arc;

use panto_model::Entry;
use panto_store::recall::no_such_id;
use panto_store::{
    Fetched, Head, Loaded, PAGE_BYTES, Page, RecallQuery, Recalled, Record, RecordSource, Store,
    StoreError, async_trait, fetch_by_scan, recall_by_scan, replay_tail, takes_effect,
};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::attempt::{Attempts, Fail};
use crate::error::PostgresError;
use crate::options::PostgresOptions;
use crate::pool::Pool;
use crate::session::{head, refused, to_i64, to_u64};
use crate::sql;
use crate::url::StoreUrl;

/// Runs `$body` (a future using `$conn: &Client`) as the tries of one operation: on a new
/// connection after a lost one, until it succeeds or fails for good.
macro_rules! tries {
    ($store:expr, $session:expr, $what:expr, $writes:expr, |$conn:ident, $attempts:ident| $body:expr) => {{
        let mut $attempts = Attempts::new(&$store.pool, $session, $what, $writes);
        loop {
            let conn = $attempts.connection().await?;
            let $conn: &Client = &conn;
            let outcome = $attempts.within($body).await;
            match outcome {
                Ok(value) => break Ok::<_, StoreError>(value),
                Err(fail) => $attempts.failed(conn, fail).await?,
            }
        }
    }};
}

/// Sessions in a PostgreSQL database, shared by any number of processes on any number of
/// hosts. Cheap to clone: clones share one pool of connections (its size from
/// [`PostgresOptions::pool_size`]).
///
/// A [`Head`] is the number of entries of the session. Session names are any non-empty text
/// without NUL. An operation whose connection is lost (a restart, a failover, a killed
/// backend) runs again on a new connection, with backoff, for up to
/// [`PostgresOptions::reconnect`]; an append checks first whether the lost try took effect, so
/// it is applied once or not at all.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) pool: Arc<Pool>,
    /// Whether the database has panto's tables (a store opened without creating them, on a
    /// database without them, holds no session).
    tables: bool,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.pool.location())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL; see [`StoreUrl`]) with the
    /// default [`PostgresOptions`]; see [`PostgresStore::connect_with`].
    ///
    /// # Errors
    /// As [`PostgresStore::connect_with`].
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url` with `options`: makes the pool, connects once (so a
    /// server that cannot be reached is reported now, not at the first operation), and
    /// applies the schema's missing [`crate::MIGRATIONS`] (unless
    /// [`PostgresOptions::create_tables`] is off and the database has no tables of panto's:
    /// then the store holds no session and creates nothing). Needs a tokio runtime, which
    /// must outlive the store.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a URL that is not one, TLS settings that cannot be used, or
    /// a schema newer than this version knows; [`StoreError::Unavailable`] when the server
    /// cannot be reached, refuses the login, or the migration fails. No message holds the
    /// password.
    pub async fn connect_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let url = StoreUrl::parse(url).map_err(|message| {
            let location = crate::redact(url);
            let message = message
                .strip_prefix(&format!("{location}: "))
                .map_or_else(|| message.clone(), str::to_owned);
            StoreError::invalid("", PostgresError::Refused { location, message })
        })?;
        PostgresStore::connect_url(url, options).await
    }

    /// [`PostgresStore::connect_with`] with a parsed URL.
    ///
    /// # Errors
    /// As [`PostgresStore::connect_with`].
    pub async fn connect_url(
        url: StoreUrl,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let create = options.create_tables;
        let pool = Arc::new(Pool::new(url, options)?);
        let conn = pool
            .get()
            .await
            .map_err(|e| crate::attempt::connect_error(&pool, "", e))?;
        let tables = if create {
            crate::migrate::migrate(&pool, &conn).await?;
            true
        } else {
            let version = crate::migrate::version(&pool, &conn)
                .await
                .map_err(|e| pool.error("", "cannot read the schema version", &e))?;
            if version > 0 {
                crate::migrate::migrate(&pool, &conn).await?;
            }
            version > 0
        };
        drop(conn);
        Ok(PostgresStore { pool, tables })
    }

    /// The database's URL without the password.
    pub fn url(&self) -> &StoreUrl {
        &self.pool.url
    }

    /// Drops the recall index of `session` and builds it again from its entries; returns how
    /// many items it holds (0 for a session that does not exist).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be reached or written.
    pub async fn rebuild_recall_index(&self, session: &str) -> Result<u32, StoreError> {
        tries!(
            self,
            session,
            "cannot build the recall index",
            true,
            |c, _a| crate::recall::clear(&self.pool, c, session)
        )?;
        self.catch_up_recall_index(session).await
    }

    /// Brings the recall index of `session` up to date, a chunk of entries per try (each within
    /// the statement timeout); how many items it holds.
    async fn catch_up_recall_index(&self, session: &str) -> Result<u32, StoreError> {
        loop {
            let done = tries!(
                self,
                session,
                "cannot build the recall index",
                true,
                |c, _a| crate::recall::step(&self.pool, c, session)
            )?;
            if let Some(items) = done {
                return Ok(items);
            }
        }
    }

    /// The bytes the recall index of `session` holds in its tables' rows (`pg_column_size` of
    /// each row, as stored, so after compression; pages and indexes aside).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database cannot be reached.
    pub async fn recall_index_bytes(&self, session: &str) -> Result<u64, StoreError> {
        tries!(
            self,
            session,
            "cannot read the recall index",
            false,
            |c, _a| crate::recall::size(&self.pool, c, session)
        )
    }

    fn check_name(&self, session: &str) -> Result<(), StoreError> {
        if session.is_empty() {
            return Err(StoreError::invalid(
                session,
                self.refused("a session name cannot be empty".to_owned()),
            ));
        }
        Ok(())
    }

    fn refused(&self, message: String) -> PostgresError {
        refused(&self.pool, message)
    }

    fn not_found(&self, session: &str) -> StoreError {
        StoreError::not_found(session, self.refused(format!("no session named {session}")))
    }

    fn malformed(&self, session: &str, message: String) -> StoreError {
        StoreError::invalid(
            session,
            PostgresError::Malformed {
                location: self.pool.location().to_owned(),
                session: session.to_owned(),
                message,
            },
        )
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

    /// `(seq, body)` rows of `sql`.
    async fn rows(
        &self,
        c: &Client,
        sql: &str,
        params: &crate::pool::Params<'_>,
    ) -> Result<Vec<(i64, Vec<u8>)>, Fail> {
        let rows = self.pool.query(c, sql, params).await?;
        Ok(rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, tokio_postgres::Error>>()?)
    }

    /// One try of [`Store::load`].
    async fn load_on(&self, c: &Client, session: &str) -> Result<Loaded, Fail> {
        let rows = self
            .pool
            .query(c, sql::SESSION, &[(&session, Type::TEXT)])
            .await?;
        let Some(row) = rows.first() else {
            return Err(self.not_found(session).into());
        };
        let (id, compaction, head): (i64, Option<i64>, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if head == 0 {
            let mut loaded = Loaded::new(Default::default(), Head::EMPTY, Vec::new());
            loaded.empty = true;
            return Ok(loaded);
        }
        // Rows at or below the head never change, so the queries need no shared snapshot:
        // each reads rows below the head the first one saw.
        let mut start = compaction.unwrap_or(1);
        let tail = self
            .rows(
                c,
                sql::RANGE,
                &[(&id, Type::INT8), (&start, Type::INT8), (&head, Type::INT8)],
            )
            .await?;
        let mut entries = self.decode(session, tail)?;
        // A compaction that does not take effect (its copies are not all there): step back to
        // the one before it, as a full replay would.
        while start > 1 && !takes_effect(&entries) {
            let before = self
                .pool
                .query(
                    c,
                    sql::COMPACTION_BEFORE,
                    &[(&id, Type::INT8), (&start, Type::INT8)],
                )
                .await?;
            let from: i64 = before
                .first()
                .map(|r| r.try_get::<_, Option<i64>>(0))
                .transpose()?
                .flatten()
                .unwrap_or(1);
            let to = start - 1;
            let more = self
                .rows(
                    c,
                    sql::RANGE,
                    &[(&id, Type::INT8), (&from, Type::INT8), (&to, Type::INT8)],
                )
                .await?;
            let mut earlier = self.decode(session, more)?;
            earlier.append(&mut entries);
            entries = earlier;
            start = from;
        }
        Ok(replay_tail(
            entries,
            Head::new(to_u64(head)),
            &format!("{}: session {session}", self.pool.location()),
            to_u64(start - 1),
        ))
    }

    /// One try of [`Store::read`]: whether the session exists and the page, in one round trip.
    async fn read_on(
        &self,
        c: &Client,
        session: &str,
        from: Head,
        max: usize,
    ) -> Result<Page, Fail> {
        let after = to_i64(from.get());
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let bytes = i64::try_from(PAGE_BYTES).unwrap_or(i64::MAX);
        let name = [(&session as _, Type::TEXT)];
        let page = [
            (&session as _, Type::TEXT),
            (&after as _, Type::INT8),
            (&limit as _, Type::INT8),
            (&bytes as _, Type::INT8),
        ];
        let (exists, rows) = tokio::join!(
            self.pool.query(c, sql::EXISTS, &name),
            self.rows(c, sql::PAGE, &page)
        );
        if exists?.is_empty() {
            return Err(self.not_found(session).into());
        }
        let rows = rows?;
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
}

#[async_trait]
impl Store for PostgresStore {
    fn location(&self) -> String {
        self.pool.location().to_owned()
    }

    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        self.check_name(session)?;
        if !self.tables {
            return Err(self.not_found(session));
        }
        tries!(self, session, "cannot read the session", false, |c, _a| {
            self.load_on(c, session)
        })
    }

    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.check_name(session)?;
        if !self.tables {
            return Ok(Head::EMPTY);
        }
        tries!(self, session, "cannot read the head", false, |c, _a| head(
            &self.pool, c, session
        ))
    }

    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        self.check_name(session)?;
        let end = tries!(self, session, "cannot append", true, |c, a| {
            crate::append::append(&self.pool, c, session, at, records, a.unknown())
        })?;
        // The recall index, when it covered the session up to the append (or the append
        // started it), takes the new entries now; a failure leaves them to the next recall.
        if let Ok(conn) = self.pool.get().await {
            let _ = crate::recall::after_append(&self.pool, &conn, session, at.get()).await;
        }
        Ok(end)
    }

    /// Answers from the session's recall index (`crate::recall`), caught up first; by scan
    /// when it does not read back.
    async fn recall(&self, session: &str, query: &RecallQuery) -> Result<Recalled, StoreError> {
        // Caught up first a chunk per try: the recall's own try then finds it current, or
        // indexes the few entries appended since, well within the statement timeout. The
        // effective context is loaded meanwhile, on a connection of its own; a store of one
        // connection does one after the other, so neither waits for the other's connection.
        let loaded = if self.pool.size() > 1 {
            let (loaded, caught) =
                tokio::join!(self.load(session), self.catch_up_recall_index(session));
            caught?;
            loaded?
        } else {
            self.catch_up_recall_index(session).await?;
            self.load(session).await?
        };
        let found = tries!(
            self,
            session,
            "cannot read the recall index",
            false,
            |c, _a| crate::recall::recall(&self.pool, c, session, &loaded, query)
        )?;
        match found {
            Some(found) => Ok(found),
            None => recall_by_scan(self, session, query).await,
        }
    }

    /// Answers from the session's recall index (`crate::recall`'s ids), caught up first,
    /// reading the entries around the id only; by scan when the index cannot tell.
    async fn fetch(&self, session: &str, id: &str, context: usize) -> Result<Fetched, StoreError> {
        self.check_name(session)?;
        if !self.tables {
            return fetch_by_scan(self, session, id, context).await;
        }
        self.catch_up_recall_index(session).await?;
        let found = tries!(
            self,
            session,
            "cannot read the recall index",
            false,
            |c, _a| crate::recall::fetch(&self.pool, c, session, id, context)
        )?;
        match found {
            Some(crate::recall::Answer::Found(found)) => Ok(found),
            Some(crate::recall::Answer::None) => Err(no_such_id(&self.location(), session, id)),
            None => fetch_by_scan(self, session, id, context).await,
        }
    }

    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        self.check_name(session)?;
        if !self.tables {
            return Err(self.not_found(session));
        }
        tries!(self, session, "cannot read the session", false, |c, _a| {
            self.read_on(c, session, from, max)
        })
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        if !self.tables {
            return Ok(Vec::new());
        }
        tries!(self, "", "cannot list the sessions", false, |c, _a| async {
            let rows = self.pool.query(c, sql::LIST, &[]).await?;
            Ok(rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<String>, _>>()?)
        })
    }

    async fn import(
        &self,
        session: &str,
        source: &mut dyn RecordSource,
    ) -> Result<Head, StoreError> {
        self.check_name(session)?;
        crate::import::import(&self.pool, session, source).await
    }

    /// Creates the session when it does not exist (so that other hosts list it), after
    /// checking its name and the connection; never writes an entry.
    async fn prepare_append(&self, session: &str) -> Result<(), StoreError> {
        self.check_name(session)?;
        tries!(
            self,
            session,
            "cannot register the session",
            false,
            |c, _a| async {
                self.pool
                    .query(c, sql::CREATE, &[(&session, Type::TEXT)])
                    .await?;
                Ok(())
            }
        )
    }
}
