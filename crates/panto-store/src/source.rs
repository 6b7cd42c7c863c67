//! `RecordSource`: where an import's records come from, a batch at a time, so that a store
//! imports a history of any size holding one batch.

use std::collections::VecDeque;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::record::Record;

/// The records of a history to import ([`crate::Store::import`]), in order, a batch at a time.
/// A source bounds its batches (a file reader: a few MiB, or one entry when it is larger), so
/// an import holds one batch, whatever the size of the history.
#[async_trait]
pub trait RecordSource: Send {
    /// The next records, oldest first, or `None` after the last one. A batch is never empty.
    ///
    /// # Errors
    /// A record that cannot be read (for a file: [`StoreError::Invalid`] naming the file, line
    /// and field): the import stops and writes nothing.
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError>;
}

/// Records already in memory, given in batches of a fixed number of records: a source for
/// tests and for a program that holds its history anyway.
#[derive(Clone, Debug, Default)]
pub struct Records {
    batches: VecDeque<Vec<Record>>,
}

impl Records {
    /// `records` in batches of `batch` records (at least one).
    pub fn new(records: Vec<Record>, batch: usize) -> Records {
        let batch = batch.max(1);
        let mut batches = VecDeque::new();
        let mut rest = records.into_iter().peekable();
        while rest.peek().is_some() {
            batches.push_back(rest.by_ref().take(batch).collect());
        }
        Records { batches }
    }
}

#[async_trait]
impl RecordSource for Records {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        Ok(self.batches.pop_front())
    }
}
