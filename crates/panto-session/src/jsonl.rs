//! `JsonlStore`: the JSONL session files as a [`panto_store::Store`], a session being a file
//! under a root folder.

use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use panto_store::recall::{context_fingerprints, no_such_id};
use panto_store::{
    Fetched, Head, Loaded, PAGE_BYTES, Page, RecallQuery, Recalled, Record, RecordSource, Store,
    StoreError, async_trait, fetch_by_scan, recall_by_scan,
};

use crate::blocking::{blocking, to_store_error};
use crate::error::SessionError;
use crate::history::History;
use crate::options::SessionOptions;
use crate::recall::Sidecars;
use crate::store::Session;

/// The JSONL store: each session is a file, named by its path under `root` (an absolute name
/// is used as it is). Everything [`Session`] holds holds here: whole-line appends under the
/// file's lock, the tail check of [`Session::append_at`] as the append's condition, loading
/// backwards to the latest compaction that takes effect, foreign lines byte for byte.
///
/// A [`Head`] is the file's length in bytes. The file work runs on tokio's blocking pool when
/// the caller is inside a tokio runtime (so a slow disk never stalls its other tasks), and
/// inline otherwise.
#[derive(Clone, Debug)]
pub struct JsonlStore {
    root: PathBuf,
    options: SessionOptions,
    /// The recall sidecars' connections, kept open (shared by the store's clones).
    sidecars: Arc<Sidecars>,
}

impl JsonlStore {
    /// A store of the session files under `root` (an empty path: relative to the working
    /// directory, as the command line names files), opened with `options`.
    pub fn new(root: impl Into<PathBuf>, options: SessionOptions) -> JsonlStore {
        JsonlStore {
            root: root.into(),
            options,
            sidecars: Arc::default(),
        }
    }

    /// The file of session `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Drops the recall index of session `name` (its sidecar, `NAME.recall.sqlite3`) and builds
    /// it again; returns how many items it holds.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the sidecar cannot be written;
    /// [`StoreError::Invalid`] for a name outside the store's folder.
    pub async fn rebuild_recall_index(&self, name: &str) -> Result<u32, StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        let sidecars = Arc::clone(&self.sidecars);
        blocking(move || crate::recall::rebuild(&sidecars, &session, &name)).await
    }

    /// The size in bytes of the recall index of session `name` (its sidecar file); 0 when
    /// there is none.
    pub fn recall_index_bytes(&self, name: &str) -> u64 {
        self.session(name).map_or(0, |s| crate::recall::size(&s))
    }

    /// The session file of `name` (which need not exist yet). Under a folder (`jsonl:DIR`), a
    /// name must stay in it: no `..`, no absolute path.
    fn session(&self, name: &str) -> Result<Session, StoreError> {
        if !self.root.as_os_str().is_empty() {
            let inside = !name.is_empty()
                && Path::new(name)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_)));
            if !inside {
                return Err(StoreError::invalid(
                    name,
                    format!(
                        "{}: session {name:?} is not a file name in the folder (no `..`, no absolute path)",
                        self.location()
                    ),
                ));
            }
        }
        Ok(Session::unchecked(self.path(name), self.options.clone()))
    }
}

fn load(session: &Session, name: &str) -> Result<Loaded, StoreError> {
    let error = |e| to_store_error(name, e);
    match session.load_context() {
        Ok(mut loaded) => {
            if !loaded.warnings.is_empty() {
                session.resolve_lines(&mut loaded.warnings).map_err(error)?;
            }
            Ok(loaded)
        }
        // A file with nothing in it yet (or only blank lines): the empty conversation.
        Err(SessionError::Empty { .. }) => {
            let mut loaded = Loaded::new(
                Default::default(),
                Head::new(session.end().map_err(error)?),
                Vec::new(),
            );
            loaded.empty = true;
            Ok(loaded)
        }
        Err(e) => Err(error(e)),
    }
}

fn head(session: &Session, name: &str) -> Result<Head, StoreError> {
    match session.end() {
        Ok(end) => Ok(Head::new(end)),
        Err(SessionError::NotFound { .. }) => Ok(Head::EMPTY),
        Err(e) => Err(to_store_error(name, e)),
    }
}

fn append(session: &Session, name: &str, at: Head, lines: &[String]) -> Result<Head, StoreError> {
    let error = |e| to_store_error(name, e);
    if lines.is_empty() {
        // Nothing is written, but the condition still holds or fails.
        let found = head(session, name)?;
        if found != at {
            return Err(to_store_error(
                name,
                SessionError::Conflict {
                    path: session.path().to_path_buf(),
                    expected: at.get(),
                    found: found.get(),
                },
            ));
        }
        return Ok(found);
    }
    if at == Head::EMPTY {
        // The first append creates the file; another writer creating it at the same moment is
        // fine (then the tail check below decides who was first).
        match Session::create(session.path(), session.options().clone()) {
            Ok(_) | Err(SessionError::AlreadyExists { .. }) => {}
            Err(e) => return Err(error(e)),
        }
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let end = session
        .lock()
        .and_then(|mut writer| writer.append_lines_at(at.get(), &lines))
        .map_err(error)?;
    Ok(Head::new(end))
}

fn read(session: &Session, name: &str, from: Head, max: usize) -> Result<Page, StoreError> {
    let error = |e| to_store_error(name, e);
    let file = session.open_for_reading().map_err(error)?;
    let path = session.path().to_path_buf();
    let mut history = History::starting_at(path.clone(), file, from.get())
        .map_err(|e| error(SessionError::io(&path, "read", e)))?;
    let mut records = Vec::new();
    let mut next = from;
    let mut bytes = 0;
    while records.len() < max && bytes < PAGE_BYTES {
        match history.next_raw() {
            Ok(Some((line, raw, after))) => {
                let text = std::str::from_utf8(raw).map_err(|e| {
                    StoreError::invalid(name, format!("{}: not UTF-8: {e}", path.display()))
                })?;
                let record = Record::parse(text, line).map_err(|source| {
                    error(SessionError::Malformed {
                        path: path.clone(),
                        source,
                    })
                })?;
                bytes += record.text.len();
                records.push(record);
                next = Head::new(after);
            }
            Ok(None) | Err(SessionError::Empty { .. }) => break,
            Err(SessionError::Malformed { path, mut source }) => {
                // The reader counts lines from `from`: add the lines before it.
                source.line += session.lines_before(from.get()).map_err(error)?;
                return Err(error(SessionError::Malformed { path, source }));
            }
            Err(e) => return Err(error(e)),
        }
    }
    Ok(Page::new(records, next))
}

fn list(root: &Path) -> Result<Vec<String>, StoreError> {
    let dir = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(StoreError::unavailable(
                "",
                SessionError::io(dir, "list the sessions in", e),
            ));
        }
    };
    let mut names = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && path.extension().is_some_and(|e| e == "jsonl") {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

#[async_trait]
impl Store for JsonlStore {
    fn location(&self) -> String {
        if self.root.as_os_str().is_empty() {
            "jsonl".to_owned()
        } else {
            format!("jsonl:{}", self.root.display())
        }
    }

    async fn load(&self, name: &str) -> Result<Loaded, StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        blocking(move || load(&session, &name)).await
    }

    async fn head(&self, name: &str) -> Result<Head, StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        blocking(move || head(&session, &name)).await
    }

    async fn append_records(
        &self,
        name: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        let records = records.to_vec();
        let sidecars = Arc::clone(&self.sidecars);
        blocking(move || {
            let lines: Vec<String> = records.iter().map(|r| r.text.clone()).collect();
            let end = append(&session, &name, at, &lines)?;
            crate::recall::on_append(&sidecars, &session, at, end, &records);
            Ok(end)
        })
        .await
    }

    /// Answers from the session's sidecar index (`crate::recall`), built or caught up first;
    /// by reading the file when the sidecar cannot be used.
    async fn recall(&self, name: &str, query: &RecallQuery) -> Result<Recalled, StoreError> {
        let (session, owned, q) = (self.session(name)?, name.to_owned(), query.clone());
        let sidecars = Arc::clone(&self.sidecars);
        let found = blocking(move || {
            let loaded = load(&session, &owned)?;
            let exclude = context_fingerprints(&loaded.context);
            Ok::<_, StoreError>(crate::recall::recall(&sidecars, &session, &q, &exclude))
        })
        .await?;
        match found {
            Some(found) => Ok(found),
            None => recall_by_scan(self, name, query).await,
        }
    }

    /// Answers from the session's sidecar (`crate::fetch`), reading the lines around the id
    /// only; by reading the file when the sidecar cannot be used or cannot tell.
    async fn fetch(&self, name: &str, id: &str, context: usize) -> Result<Fetched, StoreError> {
        let (session, wanted) = (self.session(name)?, id.to_owned());
        let sidecars = Arc::clone(&self.sidecars);
        let found = blocking(move || {
            Ok::<_, StoreError>(crate::fetch::fetch(&sidecars, &session, &wanted, context))
        })
        .await?;
        match found {
            Some(crate::fetch::Answer::Found(found)) => Ok(found),
            Some(crate::fetch::Answer::None) => Err(no_such_id(&self.location(), name, id)),
            None => fetch_by_scan(self, name, id, context).await,
        }
    }

    async fn read(&self, name: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        blocking(move || read(&session, &name, from, max)).await
    }

    async fn list(&self) -> Result<Vec<String>, StoreError> {
        let root = self.root.clone();
        blocking(move || list(&root)).await
    }

    /// Writes the whole file beside the session and renames it into place (see
    /// [`crate::JsonlSource`]'s module): all of it or nothing.
    async fn import(&self, name: &str, source: &mut dyn RecordSource) -> Result<Head, StoreError> {
        let session = self.session(name)?;
        crate::import::import(
            session.path().to_path_buf(),
            name,
            self.options.clone(),
            source,
        )
        .await
    }

    /// Creates the file when it does not exist (another writer creating it at the same moment
    /// is fine), then takes its append lock once and lets it go, so that a lock path panto must
    /// refuse (a link, not a regular file) is reported before a model is asked, not after its
    /// answer.
    async fn prepare_append(&self, name: &str) -> Result<(), StoreError> {
        let (session, name) = (self.session(name)?, name.to_owned());
        blocking(move || {
            if let Err(SessionError::NotFound { .. }) = session.end() {
                match Session::create(session.path(), session.options().clone()) {
                    Ok(_) | Err(SessionError::AlreadyExists { .. }) => {}
                    Err(e) => return Err(to_store_error(&name, e)),
                }
            }
            session
                .lock()
                .map(drop)
                .map_err(|e| to_store_error(&name, e))
        })
        .await
    }
}
