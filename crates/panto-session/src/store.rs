//! `Session`: opening and creating session files, locked appends, and the two reads.

use std::fs::{self, File};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use panto_model::{Entry, IdKind, KEPT_BY, encode_line};
use serde_json::Value;

use crate::error::{Result, SessionError};
use crate::history::History;
use crate::lines::{BackLines, Line, TORN_WRITE, classify, looks_torn, torn_write_record};
use crate::load::{LoadStats, load, malformed, readable_len};
use crate::lock::{Lock, careful, careful_open_error};
use crate::options::SessionOptions;
use panto_store::Loaded;
use panto_store::{Place, Warning};

/// An append-only JSONL session file.
///
/// A `Session` is a path plus options; it holds no open file or lock between calls, so any
/// number of `Session` values, threads and processes may use one file. Appends are serialised by
/// the lock; reads take no lock and see the file as it was when they started.
#[derive(Clone, Debug)]
pub struct Session {
    path: PathBuf,
    options: SessionOptions,
}

impl Session {
    /// Opens an existing session file. An empty file opens (it is what [`Session::create`]
    /// makes, and appending to it starts the session), but reading it reports
    /// [`SessionError::Empty`].
    ///
    /// # Errors
    /// [`SessionError::NotFound`] when the file does not exist (creating a session is the
    /// explicit [`Session::create`]), [`SessionError::IsDirectory`] or
    /// [`SessionError::NotAFile`] when the path is not a regular file, [`SessionError::Io`] when
    /// it cannot be opened for reading.
    pub fn open(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        let path = path.as_ref().to_path_buf();
        open_read(&path)?;
        Ok(Session { path, options })
    }

    /// Creates a new, empty session file (and flushes its directory entry to disk when fsync
    /// is on). On Unix the file gets mode 0600 (the umask can only make it stricter): a
    /// conversation is nobody else's to read.
    ///
    /// # Errors
    /// [`SessionError::AlreadyExists`] when something is already at `path` (an existing session
    /// is never truncated), [`SessionError::Io`] when the file cannot be created.
    pub fn create(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        let path = path.as_ref().to_path_buf();
        // `create_new` never follows a link; the mode keeps the new file private to its owner.
        let mut open = fs::OpenOptions::new();
        open.write(true).create_new(true);
        careful(&mut open, true);
        let file = open.open(&path).map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => SessionError::AlreadyExists { path: path.clone() },
            _ => SessionError::io(&path, "create", e),
        })?;
        if options.fsync_enabled() {
            file.sync_all()
                .map_err(|e| SessionError::io(&path, "flush", e))?;
            sync_parent(&path)?;
        }
        Ok(Session { path, options })
    }

    /// A session at `path` that may not exist yet (the store's first append creates it).
    pub(crate) fn unchecked(path: PathBuf, options: SessionOptions) -> Session {
        Session { path, options }
    }

    /// The file, opened for reading after checking what it is.
    pub(crate) fn open_for_reading(&self) -> Result<File> {
        open_read(&self.path)
    }

    /// How many lines start before byte `offset` (a line start): the number of newlines before
    /// it, for naming a line found by a read that started there.
    pub(crate) fn lines_before(&self, offset: u64) -> Result<usize> {
        let file = open_read(&self.path)?;
        let mut reader = io::BufReader::with_capacity(1 << 20, &file).take(offset);
        let mut buf = vec![0u8; 1 << 20];
        let mut newlines = 0usize;
        loop {
            let n = reader
                .read(&mut buf)
                .map_err(|e| SessionError::io(&self.path, "read", e))?;
            if n == 0 {
                return Ok(newlines);
            }
            newlines += memchr::memchr_iter(b'\n', &buf[..n]).count();
        }
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options this session was opened with.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// A fresh id from the session's id source, for callers that must know an entry's id
    /// before appending it (a compaction whose kept copies point at it with `kept_by`).
    pub fn new_id(&self, entry: &Entry) -> String {
        self.options.id_source().next_id(IdKind::of(entry))
    }

    /// Appends entries as whole lines in one write, under the append lock, flushed to disk
    /// before returning (when fsync is on). Returns the id of every entry, in order: its own,
    /// or the one it was given.
    ///
    /// Entries without an `id` get one from the id source. A compaction appended without an
    /// id that announces `kept_messages: n` has the `kept_by` field of the next `n` messages of
    /// the same call that carry `kept_by` pointed at its new id, so its copies still belong to
    /// it. If the file ends with a torn line, the write starts with a newline (and a
    /// `torn_write` record acknowledging the torn bytes when they do not form an entry); the
    /// torn bytes stay in the file. Appending no entries writes nothing.
    ///
    /// # Errors
    /// [`SessionError::LockTimeout`] when another process holds the lock longer than the
    /// timeout, [`SessionError::Rejected`] for an entry of the store's reserved `torn_write`
    /// type, [`SessionError::NotFound`] and [`SessionError::Io`] from the file system. After a
    /// failed write the file may end with a torn line, which the next append handles.
    pub fn append(&self, entries: &[Entry]) -> Result<Vec<String>> {
        self.lock()?.append(entries)
    }

    /// Appends like [`Session::append`], but only if the file still ends at byte `end`: the
    /// length the caller last saw ([`crate::LoadStats::file_len`] of its load, or
    /// [`Appended::end`] of its last append). The lock is held only for the check and the
    /// write, so a caller may load, ask a model for minutes and then append, and still never
    /// interleave its entries with another writer's.
    ///
    /// # Errors
    /// [`SessionError::Conflict`] when the file has another length (nothing is written), and
    /// every error of [`Session::append`].
    pub fn append_at(&self, end: u64, entries: &[Entry]) -> Result<Appended> {
        self.lock()?.append_at(end, entries)
    }

    /// The length of the file in bytes now: where the next append would start.
    ///
    /// # Errors
    /// [`SessionError::NotFound`], [`SessionError::IsDirectory`], [`SessionError::NotAFile`] and
    /// [`SessionError::Io`] from the file system.
    pub fn end(&self) -> Result<u64> {
        check_file(&self.path)?;
        fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|e| SessionError::io(&self.path, "read the metadata of", e))
    }

    /// Takes the append lock and keeps it until the returned [`Writer`] is dropped, so that a
    /// caller can load, decide and append with no other process appending in between (a
    /// compaction must, or a message appended meanwhile would be left out of its context).
    /// Other appenders wait up to their lock timeout meanwhile.
    ///
    /// The session file and its lock file are opened without following symbolic links and
    /// without truncation (see `docs/session.md`).
    ///
    /// # Errors
    /// As [`Session::append`], before anything is written; also [`SessionError::Symlink`] when
    /// the session file or its lock file is a symbolic link, and [`SessionError::NotALock`]
    /// when the lock path holds something that is not a panto lock file. Neither is touched.
    pub fn lock(&self) -> Result<Writer<'_>> {
        let lock = Lock::acquire(&self.path, self.options.lock_timeout_value())?;
        let file = open_append(&self.path)?;
        Ok(Writer {
            session: self,
            file,
            _lock: lock,
        })
    }

    /// Loads the effective context, reading backwards from the end of the file to the latest
    /// compaction that takes effect, so that its cost follows the length of what came after
    /// that compaction, not of the whole history.
    ///
    /// The result equals `panto_model::replay` over every entry of the file (messages,
    /// compaction, kept count). Only the part of the file that is read is checked: a malformed
    /// line before the active compaction is not seen (read [`Session::history`] to check a
    /// whole file). A torn last line is reported and never parsed.
    ///
    /// # Errors
    /// [`SessionError::Malformed`] for a bad line in the part read, naming its true line number;
    /// [`SessionError::Empty`] for a file without a single byte; [`SessionError::NotFound`],
    /// [`SessionError::IsDirectory`], [`SessionError::NotAFile`] and [`SessionError::Io`] from
    /// the file system.
    pub fn load_context(&self) -> Result<Loaded> {
        self.load_context_with_stats().map(|(loaded, _)| loaded)
    }

    /// [`Session::load_context`], and how much of the file it read ([`LoadStats`]: the measure
    /// that backwards loading keeps small).
    ///
    /// # Errors
    /// As [`Session::load_context`].
    pub fn load_context_with_stats(&self) -> Result<(Loaded, LoadStats)> {
        let file = open_read(&self.path)?;
        load(&self.path, &file, self.options.read_chunk_value())
    }

    /// Streams every entry of the file, from the first, with its 1-based line number, in
    /// constant memory. The iterator yields an error (and then ends) at the first bad line.
    ///
    /// # Errors
    /// When the file cannot be opened or is empty; see [`Session::load_context`].
    pub fn history(&self) -> Result<History> {
        let file = open_read(&self.path)?;
        readable_len(&self.path, &file)?;
        Ok(History::new(self.path.clone(), file))
    }

    /// Fills in the line number of warnings that lack one (see [`Warning::line`]), with one
    /// forward pass over the file up to the last such warning: it costs a read of that prefix.
    ///
    /// # Errors
    /// When the file cannot be read.
    pub fn resolve_lines(&self, warnings: &mut [Warning]) -> Result<()> {
        let mut todo: Vec<(u64, &mut Option<usize>)> = warnings
            .iter_mut()
            .filter_map(|w| match &mut w.place {
                Place::Line { offset, line } if line.is_none() => Some((*offset, line)),
                _ => None,
            })
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        todo.sort_by_key(|(offset, _)| *offset);
        let file = open_read(&self.path)?;
        let mut reader = io::BufReader::with_capacity(1 << 20, &file);
        let mut buf = vec![0u8; 1 << 20];
        let (mut pos, mut newlines) = (0u64, 0u64);
        for (offset, line) in todo {
            while pos < offset {
                let want = ((offset - pos) as usize).min(buf.len());
                let n = reader
                    .read(&mut buf[..want])
                    .map_err(|e| SessionError::io(&self.path, "read", e))?;
                if n == 0 {
                    break;
                }
                newlines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
                pos += n as u64;
            }
            *line = Some(newlines as usize + 1);
        }
        Ok(())
    }
}

/// What an append wrote: the id of every entry, and where the file ends after it (the `end`
/// to give the next [`Session::append_at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Appended {
    /// Every entry's id, in order: its own, or the one it was given.
    pub ids: Vec<String>,
    /// The length of the file after the append.
    pub end: u64,
}

/// The append lock of a session, held until dropped; see [`Session::lock`].
#[derive(Debug)]
pub struct Writer<'s> {
    session: &'s Session,
    file: File,
    _lock: Lock,
}

impl Writer<'_> {
    /// Appends under the held lock; see [`Session::append`].
    ///
    /// # Errors
    /// As [`Session::append`], except the lock timeout.
    pub fn append(&mut self, entries: &[Entry]) -> Result<Vec<String>> {
        let len = self.end()?;
        self.write(len, entries).map(|appended| appended.ids)
    }

    /// Appends under the held lock if the file still ends at byte `end`; see
    /// [`Session::append_at`].
    ///
    /// # Errors
    /// As [`Session::append_at`], except the lock timeout.
    pub fn append_at(&mut self, end: u64, entries: &[Entry]) -> Result<Appended> {
        let found = self.ends_at(end)?;
        self.write(found, entries)
    }

    /// Where the file ends, when that is still byte `end`.
    ///
    /// # Errors
    /// [`SessionError::Conflict`] when it ends elsewhere, or reading its length failed.
    fn ends_at(&mut self, end: u64) -> Result<u64> {
        let found = self.end()?;
        if found != end {
            return Err(SessionError::Conflict {
                path: self.session.path.clone(),
                expected: end,
                found,
            });
        }
        Ok(found)
    }

    /// The length of the file in bytes; nobody else can append while the lock is held.
    ///
    /// # Errors
    /// [`SessionError::Io`] when the file's metadata cannot be read.
    pub fn end(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| SessionError::io(&self.session.path, "read the metadata of", e))
    }

    /// Writes `entries` after the `len` bytes of the file.
    fn write(&mut self, len: u64, entries: &[Entry]) -> Result<Appended> {
        if let Some(index) = entries.iter().position(|e| e.type_name() == TORN_WRITE) {
            return Err(self.reserved(index));
        }
        let mut entries = entries.to_vec();
        let ids = assign_missing_ids(&mut entries, &self.session.options);
        let text: String = entries.iter().map(encode_line).collect();
        let end = self.write_text(len, text.as_bytes())?;
        Ok(Appended { ids, end })
    }

    /// Appends `lines` (each one entry's exact text, without its newline) under the held lock
    /// if the file still ends at byte `end`; returns where the file ends after them. The
    /// lines are written as they are: no id is given, nothing is re-encoded.
    ///
    /// # Errors
    /// As [`Writer::append_at`]; also [`SessionError::Rejected`] for a line that is not one
    /// entry or is of the store's reserved `torn_write` type.
    pub fn append_lines_at(&mut self, end: u64, lines: &[&str]) -> Result<u64> {
        let found = self.ends_at(end)?;
        let mut text = Vec::new();
        for (index, line) in lines.iter().enumerate() {
            if line.contains(['\n', '\r']) {
                return Err(SessionError::Rejected {
                    path: self.session.path.clone(),
                    index,
                    reason: "a line break inside an entry's line".to_owned(),
                });
            }
            match panto_model::decode_line(line.as_bytes(), index + 1) {
                Ok(entry) if entry.type_name() == TORN_WRITE => return Err(self.reserved(index)),
                Ok(_) => {}
                Err(e) => {
                    return Err(SessionError::Rejected {
                        path: self.session.path.clone(),
                        index,
                        reason: e.to_string(),
                    });
                }
            }
            text.extend_from_slice(line.as_bytes());
            text.push(b'\n');
        }
        self.write_text(found, &text)
    }

    fn reserved(&self, index: usize) -> SessionError {
        SessionError::Rejected {
            path: self.session.path.clone(),
            index,
            reason: format!("the type `{TORN_WRITE}` is reserved for the store"),
        }
    }

    /// Writes whole lines `text` after the `len` bytes of the file (after a newline, and a
    /// `torn_write` record for debris, when the file ends with a torn line); flushes when fsync
    /// is on. Returns where the file ends. Writing nothing writes nothing.
    fn write_text(&mut self, len: u64, text: &[u8]) -> Result<u64> {
        if text.is_empty() {
            return Ok(len);
        }
        let path = &self.session.path;
        let options = &self.session.options;
        let (newline, debris) = end_state(path, &self.file, len, options.read_chunk_value())?;
        let mut out = Vec::with_capacity(text.len() + 1);
        if newline {
            out.push(b'\n');
        }
        if let Some(from) = debris {
            let record_start = len + u64::from(newline);
            out.extend_from_slice(torn_write_record(from, record_start - 1 - from).as_bytes());
        }
        out.extend_from_slice(text);
        write_whole(&self.file, &out).map_err(|e| SessionError::io(path, "append to", e))?;
        if options.fsync_enabled() {
            self.file
                .sync_data()
                .map_err(|e| SessionError::io(path, "flush", e))?;
        }
        Ok(len + out.len() as u64)
    }

    /// Loads the effective context while holding the lock; see [`Session::load_context`].
    ///
    /// # Errors
    /// As [`Session::load_context`].
    pub fn load_context(&self) -> Result<Loaded> {
        let chunk = self.session.options.read_chunk_value();
        load(&self.session.path, &self.file, chunk).map(|(loaded, _)| loaded)
    }
}

/// How the file ends: whether the next write must start with a newline (the file has a tail),
/// and where the debris to acknowledge with a `torn_write` record starts: a tail that is not an
/// entry, together with the cut-off lines just before it. A tail that is a whole entry (a last
/// line whose newline is missing, as JSON Lines allows) only gets its newline, which makes it a
/// line like any other.
///
/// # Errors
/// [`SessionError::Malformed`] for a file with CR-only line endings, which the `torn_write`
/// record would otherwise acknowledge as debris: appending to it is refused, as reading it is.
fn end_state(path: &Path, file: &File, len: u64, chunk: usize) -> Result<(bool, Option<u64>)> {
    let io = |e| SessionError::io(path, "read", e);
    let mut back = BackLines::new(file, len, chunk);
    let Some(tail) = back.prev().map_err(io)? else {
        return Ok((false, None));
    };
    let has_tail = tail.hi > tail.lo;
    let mut debris = None;
    if has_tail {
        match classify(&back.bytes()[tail.lo..tail.hi], tail.start) {
            Line::Bad {
                error,
                cr_only: true,
                ..
            } => return Err(malformed(path, file, tail.start, error)?),
            Line::Bad { .. } => debris = Some(tail.start),
            // A whole entry, a valid record or blanks: the newline makes it a line.
            _ => return Ok((true, None)),
        }
    }
    while let Some(seg) = back.prev().map_err(io)? {
        let bytes = &back.bytes()[seg.lo..seg.hi];
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if !looks_torn(bytes) {
            break;
        }
        debris = Some(seg.start);
    }
    Ok((has_tail, debris))
}

/// Gives ids to the entries without one; returns every entry's id.
fn assign_missing_ids(entries: &mut [Entry], options: &SessionOptions) -> Vec<String> {
    let mut ids = Vec::with_capacity(entries.len());
    for i in 0..entries.len() {
        let (head, rest) = entries.split_at_mut(i + 1);
        let entry = &mut head[i];
        if let Some(id) = entry.id() {
            ids.push(id.to_owned());
            continue;
        }
        let id = options.id_source().next_id(IdKind::of(entry));
        match entry {
            Entry::Message(m) => m.id = Some(id.as_str().into()),
            Entry::Compaction(c) => {
                c.id = Some(id.clone());
                point_copies(rest, c.kept_messages.unwrap_or(0), &id);
            }
            Entry::Undo(u) => u.id = Some(id.clone()),
            Entry::Unknown(u) => {
                u.fields.insert("id".to_owned(), Value::String(id.clone()));
            }
        }
        ids.push(id);
    }
    ids
}

/// Points the `kept_by` of the next `n` kept copies at `id`, the way replay pairs them.
fn point_copies(rest: &mut [Entry], mut n: u64, id: &str) {
    for e in rest {
        if n == 0 {
            return;
        }
        match e {
            Entry::Unknown(_) | Entry::Undo(_) => {}
            Entry::Message(m) if m.extra.contains_key(KEPT_BY) => {
                m.extra
                    .insert(KEPT_BY.to_owned(), Value::String(id.to_owned()));
                n -= 1;
            }
            _ => return,
        }
    }
}

/// Writes `bytes` with one `write` call when the system allows (it does for regular files),
/// finishing a short write with more calls; the lock keeps other appenders out meanwhile.
fn write_whole(file: &File, bytes: &[u8]) -> io::Result<()> {
    let mut f = file;
    let mut done = 0;
    while done < bytes.len() {
        match f.write(&bytes[done..]) {
            Ok(0) => return Err(io::Error::from(ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Checks that `path` is a regular file.
fn check_file(path: &Path) -> Result<()> {
    match fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Err(SessionError::NotFound {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(SessionError::io(path, "read the metadata of", e)),
        Ok(m) if m.is_dir() => Err(SessionError::IsDirectory {
            path: path.to_path_buf(),
        }),
        Ok(m) if !m.is_file() => Err(SessionError::NotAFile {
            path: path.to_path_buf(),
        }),
        Ok(_) => Ok(()),
    }
}

fn open_error(path: &Path, e: io::Error, action: &'static str) -> SessionError {
    match e.kind() {
        ErrorKind::NotFound => SessionError::NotFound {
            path: path.to_path_buf(),
        },
        _ => SessionError::io(path, action, e),
    }
}

/// Opens a session file for appending without following a symbolic link, then checks on the
/// open file that it is a regular file, so nothing can swap the file between check and use.
fn open_append(path: &Path) -> Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true).append(true);
    careful(&mut options, false);
    let file = options
        .open(path)
        .map_err(|e| careful_open_error(path, e, "open for appending"))?;
    let meta = file
        .metadata()
        .map_err(|e| SessionError::io(path, "read the metadata of", e))?;
    if meta.is_dir() {
        return Err(SessionError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_file() {
        return Err(SessionError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

/// Opens a session file for reading after checking what it is.
pub(crate) fn open_read(path: &Path) -> Result<File> {
    check_file(path)?;
    File::open(path).map_err(|e| open_error(path, e, "open"))
}

/// Flushes the directory entry of a new file (Unix; elsewhere directories cannot be opened).
pub(crate) fn sync_parent(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| SessionError::io(dir, "flush", e))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
