//! `PostgresOptions`: the pool's size and the store's timeouts.

use std::time::Duration;

/// How a [`crate::PostgresStore`] uses its server. A zero duration turns that limit off.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// How many connections the pool keeps at most, shared by every operation of the store and
    /// its clones. Default 4.
    pub pool_size: usize,
    /// How long making a connection may take, TLS and login included. The URL's
    /// `connect_timeout` (or `PGCONNECT_TIMEOUT`) wins over it. Default 10 s.
    pub connect_timeout: Duration,
    /// How long one statement may run (the server's `statement_timeout`, set in each
    /// transaction; the client gives up a second later when the server does not answer at
    /// all). Default 30 s.
    pub statement_timeout: Duration,
    /// How long an operation may wait for a connection of the pool when every one is in use
    /// (by other operations of the store, or by an import that holds one for its whole
    /// transaction, as a copy within the store does while its source reads). Default 30 s.
    pub pool_wait: Duration,
    /// How long a statement may wait for a lock (the server's `lock_timeout`, set in each
    /// transaction): a table another program locked. Default 10 s.
    pub lock_timeout: Duration,
    /// How long an operation that lost its connection (a restart, a failover, a killed
    /// backend) keeps trying on a new one, with backoff, before it fails. Default 30 s.
    pub reconnect: Duration,
    /// Whether connecting creates panto's tables (and applies missing migrations). Off, a
    /// database without them is left as it is and the store holds no session: for commands
    /// that only read. Default on.
    pub create_tables: bool,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            pool_size: 4,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
            pool_wait: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(10),
            reconnect: Duration::from_secs(30),
            create_tables: true,
        }
    }
}

impl PostgresOptions {
    /// Sets the pool's size (at least 1).
    pub fn with_pool_size(mut self, size: usize) -> PostgresOptions {
        self.pool_size = size.max(1);
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> PostgresOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the statement timeout.
    pub fn with_statement_timeout(mut self, timeout: Duration) -> PostgresOptions {
        self.statement_timeout = timeout;
        self
    }

    /// Sets how long an operation waits for a free connection of the pool.
    pub fn with_pool_wait(mut self, wait: Duration) -> PostgresOptions {
        self.pool_wait = wait;
        self
    }

    /// Sets the lock timeout.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> PostgresOptions {
        self.lock_timeout = timeout;
        self
    }

    /// Sets whether connecting creates panto's tables.
    pub fn with_create_tables(mut self, create: bool) -> PostgresOptions {
        self.create_tables = create;
        self
    }

    /// Sets how long an operation keeps reconnecting.
    pub fn with_reconnect(mut self, budget: Duration) -> PostgresOptions {
        self.reconnect = budget;
        self
    }
}
