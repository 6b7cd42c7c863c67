//! Imports: [`JsonlSource`], the entries of a Contract 1 file read forward in batches (an
//! import's `RecordSource`), and the JSONL store's `import`, which writes a new session file
//! whole or not at all.
//!
//! The store's import writes every line to a private file beside the session
//! (`.NAME.panto-import-PID-N`), flushes it, and then, holding the session's append lock,
//! renames it into place when the session is still missing or empty. So a failed import leaves
//! nothing (its file is removed), no reader ever sees half an import, and another writer's
//! first append is a conflict (it waits for the lock, then finds the session longer than it
//! thought). A process killed mid-import leaves its private file, which nothing reads.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use panto_model::BOM;
use panto_store::{Head, Record, RecordKind, RecordSource, StoreError, Warning, async_trait};

use crate::blocking::{blocking, to_store_error};
use crate::error::SessionError;
use crate::history::History;
use crate::lines::TORN_WRITE;
use crate::lock::careful;
use crate::options::SessionOptions;
use crate::store::{Session, open_read, sync_parent};

/// How much text a batch of [`JsonlSource`] gathers (it holds one entry more when a single
/// entry is larger).
pub const BATCH_BYTES: usize = 4 * 1024 * 1024;

/// The entries of a Contract 1 file, in batches of about [`BATCH_BYTES`] of text, each record
/// its line's exact text: the source of `panto import`. It reads with the session readers'
/// line rules: blank lines, a torn last line and the remains of an interrupted write are not
/// entries ([`JsonlSource::warnings`] says what was skipped, with the line), a byte-order mark
/// before the first line is skipped (and reported), line endings become `\n`. A line that is
/// not an entry fails the source with [`StoreError::Invalid`] naming the file, line, column and
/// field.
#[derive(Debug)]
pub struct JsonlSource {
    reader: Option<Reader>,
    warnings: Vec<Warning>,
}

/// The reading side of a [`JsonlSource`], moved to a blocking thread for each batch.
#[derive(Debug)]
struct Reader {
    name: String,
    path: PathBuf,
    history: History,
    first: bool,
}

impl JsonlSource {
    /// A source reading the file at `path` (named by its path in errors).
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is no such file, [`StoreError::Invalid`] for a
    /// folder or something else that is not a file, [`StoreError::Unavailable`] when it cannot
    /// be opened.
    pub fn open(path: impl Into<PathBuf>) -> Result<JsonlSource, StoreError> {
        let path = path.into();
        let name = path.to_string_lossy().into_owned();
        let file = open_read(&path).map_err(|e| to_store_error(&name, e))?;
        Ok(JsonlSource {
            reader: Some(Reader {
                history: History::new(path.clone(), file),
                name,
                path,
                first: true,
            }),
            warnings: Vec::new(),
        })
    }

    /// What the reader skipped so far (all of it once the source is exhausted), in file order.
    pub fn warnings(&self) -> &[Warning] {
        match &self.reader {
            Some(reader) => reader.history.warnings(),
            None => &self.warnings,
        }
    }
}

impl Reader {
    /// The next batch.
    fn batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while bytes < BATCH_BYTES {
            let (line, raw) = match self.history.next_raw() {
                Ok(Some((line, raw, _))) => (line, raw),
                Ok(None) | Err(SessionError::Empty { .. }) => break,
                Err(e) => return Err(to_store_error(&self.name, e)),
            };
            let raw = match raw.strip_prefix(BOM) {
                Some(rest) if self.first => rest,
                _ => raw,
            };
            self.first = false;
            let text = std::str::from_utf8(raw).map_err(|e| {
                StoreError::invalid(
                    &self.name,
                    format!("{}: line {line}: not UTF-8: {e}", self.path.display()),
                )
            })?;
            let record = Record::parse(text, line).map_err(|source| {
                to_store_error(
                    &self.name,
                    SessionError::Malformed {
                        path: self.path.clone(),
                        source,
                    },
                )
            })?;
            bytes += record.text.len();
            batch.push(record);
        }
        Ok((!batch.is_empty()).then_some(batch))
    }
}

#[async_trait]
impl RecordSource for JsonlSource {
    async fn next_batch(&mut self) -> Result<Option<Vec<Record>>, StoreError> {
        let Some(mut reader) = self.reader.take() else {
            return Ok(None);
        };
        let (reader, result) = blocking(move || {
            let result = reader.batch();
            (reader, result)
        })
        .await;
        match result {
            Ok(Some(batch)) => {
                self.reader = Some(reader);
                Ok(Some(batch))
            }
            // At the end (or after an error) the reader is done: its warnings are all there.
            other => {
                self.warnings = reader.history.warnings().to_vec();
                other
            }
        }
    }
}

/// A private file beside `path` for an import to write, created now (0600, never through a
/// link), and its path.
fn private_file(path: &Path) -> Result<(PathBuf, File), SessionError> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "session".into(), |n| n.to_string_lossy().into_owned());
    let temp = path.with_file_name(format!(
        ".{name}.panto-import-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut open = fs::OpenOptions::new();
    open.write(true).create_new(true);
    careful(&mut open, true);
    let file = open
        .open(&temp)
        .map_err(|e| SessionError::io(&temp, "create", e))?;
    Ok((temp, file))
}

/// A record the file cannot take as a line: one holding a line break, or of the type the
/// store keeps for itself.
fn check(path: &Path, index: usize, record: &Record) -> Result<(), SessionError> {
    let reason = if memchr::memchr2(b'\n', b'\r', record.text.as_bytes()).is_some() {
        Some("a line break inside an entry's line".to_owned())
    } else if record.kind == RecordKind::Other
        && record
            .decode(index + 1)
            .is_ok_and(|e| e.type_name() == TORN_WRITE)
    {
        Some(format!("the type `{TORN_WRITE}` is reserved for the store"))
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SessionError::Rejected {
            path: path.to_path_buf(),
            index,
            reason,
        }),
        None => Ok(()),
    }
}

/// The JSONL store's [`panto_store::Store::import`] of `source` into the session file at
/// `path`.
pub(crate) async fn import(
    path: PathBuf,
    name: &str,
    options: SessionOptions,
    source: &mut dyn RecordSource,
) -> Result<Head, StoreError> {
    let error = |e| to_store_error(name, e);
    let session = Session::unchecked(path.clone(), options.clone());
    let found = match session.end() {
        Ok(end) => end,
        Err(SessionError::NotFound { .. }) => 0,
        Err(e) => return Err(error(e)),
    };
    if found != 0 {
        return Err(error(SessionError::Conflict {
            path,
            expected: 0,
            found,
        }));
    }
    let (temp, file) = {
        let path = path.clone();
        blocking(move || private_file(&path)).await.map_err(error)?
    };
    let written = write_all(&temp, file, &path, source).await;
    let result = match written {
        Ok(0) => Ok(Head::EMPTY),
        Ok(len) => {
            let (temp, session) = (temp.clone(), session);
            blocking(move || publish(&session, &temp, len))
                .await
                .map_err(error)
        }
        Err(e) => Err(e),
    };
    if !matches!(result, Ok(head) if head != Head::EMPTY) {
        // Nothing of a failed (or empty) import stays.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Writes every record of `source` to the private file, and flushes it; returns its length.
async fn write_all(
    temp: &Path,
    file: File,
    path: &Path,
    source: &mut dyn RecordSource,
) -> Result<u64, StoreError> {
    let name = path.to_string_lossy().into_owned();
    let mut out = Some(BufWriter::with_capacity(256 * 1024, file));
    let mut len = 0u64;
    let mut index = 0;
    while let Some(batch) = source.next_batch().await? {
        let mut writer = out
            .take()
            .ok_or_else(|| StoreError::unavailable(&name, "the import's file was lost"))?;
        let (temp, path) = (temp.to_path_buf(), path.to_path_buf());
        let (writer, result) = blocking(move || {
            let mut written = 0u64;
            let mut result = Ok(());
            for (i, record) in batch.iter().enumerate() {
                if let Err(e) = check(&path, index + i, record) {
                    result = Err(e);
                    break;
                }
                let line = writer
                    .write_all(record.text.as_bytes())
                    .and_then(|()| writer.write_all(b"\n"));
                if let Err(e) = line {
                    result = Err(SessionError::io(&temp, "write", e));
                    break;
                }
                written += record.text.len() as u64 + 1;
            }
            (writer, result.map(|()| (written, batch.len())))
        })
        .await;
        let (written, count) = result.map_err(|e| to_store_error(&name, e))?;
        len += written;
        index += count;
        out = Some(writer);
    }
    let Some(writer) = out else {
        return Ok(len);
    };
    let temp = temp.to_path_buf();
    blocking(move || {
        let file = writer
            .into_inner()
            .map_err(|e| SessionError::io(&temp, "write", e.into_error()))?;
        file.sync_all()
            .map_err(|e| SessionError::io(&temp, "flush", e))
    })
    .await
    .map_err(|e| to_store_error(&name, e))?;
    Ok(len)
}

/// Renames the private file into place under the session's append lock, when the session is
/// still missing or empty.
fn publish(session: &Session, temp: &Path, len: u64) -> Result<Head, SessionError> {
    let path = session.path();
    if let Err(SessionError::NotFound { .. }) = session.end() {
        // The lock opens the session file: an empty one stands for the import meanwhile.
        match Session::create(path, session.options().clone()) {
            Ok(_) | Err(SessionError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let writer = session.lock()?;
    let found = writer.end()?;
    if found != 0 {
        return Err(SessionError::Conflict {
            path: path.to_path_buf(),
            expected: 0,
            found,
        });
    }
    fs::rename(temp, path).map_err(|e| SessionError::io(path, "rename the import into", e))?;
    if session.options().fsync_enabled() {
        sync_parent(path)?;
    }
    drop(writer);
    Ok(Head::new(len))
}
