//! `SessionError`: every way a session operation can fail, each message naming the file.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use panto_model::DecodeError;

/// Why a session operation failed. Every message starts with the path of the file concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The session file does not exist (creating one is the explicit [`crate::Session::create`]).
    #[error("{}: session file not found", path.display())]
    NotFound {
        /// The path that was asked for.
        path: PathBuf,
    },
    /// [`crate::Session::create`] was asked to create a file that is already there.
    #[error("{}: session file already exists", path.display())]
    AlreadyExists {
        /// The existing file.
        path: PathBuf,
    },
    /// The file holds no entry: no bytes, or whitespace only (after a byte-order mark at most):
    /// no session has been written to it yet. [`crate::Session::create`]
    /// makes such a file, and an agent starting a conversation in a file it just created may
    /// take this error as the empty context (`panto send` and `panto chat` do); everything
    /// that reads a session reports it.
    #[error("{}: line 1: the session file is empty: no entries", path.display())]
    Empty {
        /// The session file.
        path: PathBuf,
    },
    /// The path names a directory.
    #[error("{}: is a directory, not a session file", path.display())]
    IsDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// The path names something that is neither a regular file nor a directory (a device, a
    /// socket, a pipe).
    #[error("{}: not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// The session file or its lock file is a symbolic link. panto never follows a link when
    /// it writes, so a link planted at either path cannot make it write, create or truncate a
    /// file elsewhere.
    #[error("{}: is a symbolic link; panto does not follow links to files it writes", path.display())]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// The lock file (`<session file>.lock`) is not one panto can use: not a regular file, a
    /// file with other hard links, or one holding more than a process id. It is left as it is.
    #[error("{}: not a lock file panto can use: {reason}", path.display())]
    NotALock {
        /// The lock file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A line of the file is not a valid entry. The file is left untouched.
    ///
    /// The message reads `<path>: line 12, column 5: content[1].tool_use_id: missing field`;
    /// the line number is the true 1-based line of the file, also when it was found while
    /// reading backwards.
    #[error("{}: {source}", path.display())]
    Malformed {
        /// The session file.
        path: PathBuf,
        /// The line, column, field and problem.
        source: DecodeError,
    },
    /// Another process held the append lock for longer than the lock timeout.
    #[error("{}: {holder}; gave up after {waited:?}", path.display())]
    LockTimeout {
        /// The session file.
        path: PathBuf,
        /// Who holds the lock, as far as the lock file tells.
        holder: LockHolder,
        /// How long this process waited.
        waited: Duration,
    },
    /// An append that expected the file to end where its caller last saw it end found it
    /// changed: another writer appended in between. Nothing was written.
    #[error(
        "{}: the session changed while this writer was not holding the lock (it was {expected} bytes long, now {found}): another writer appended to it; nothing was written",
        path.display()
    )]
    Conflict {
        /// The session file.
        path: PathBuf,
        /// Where the caller expected the file to end.
        expected: u64,
        /// Where it ends.
        found: u64,
    },
    /// An entry given to append cannot be written.
    #[error("{}: cannot append entry {index}: {reason}", path.display())]
    Rejected {
        /// The session file.
        path: PathBuf,
        /// Position of the entry in the slice given to append.
        index: usize,
        /// Why.
        reason: String,
    },
    /// An operating-system error while doing `action` on `path`.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The file concerned (the session file or its lock file).
        path: PathBuf,
        /// What was being done, like `read` or `append to`.
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
}

impl SessionError {
    pub(crate) fn io(path: impl Into<PathBuf>, action: &'static str, source: io::Error) -> Self {
        SessionError::Io {
            path: path.into(),
            action,
            source,
        }
    }
}

/// The holder of a session's append lock, as recorded in its lock file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The process id the holder wrote into the lock file, when it could be read.
    pub pid: Option<u32>,
    /// The lock file (`<session file>.lock`).
    pub lock_path: PathBuf,
}

impl LockHolder {
    /// The holder recorded in `lock_path`, with the process id when it could be read.
    pub fn new(pid: Option<u32>, lock_path: impl Into<PathBuf>) -> LockHolder {
        LockHolder {
            pid,
            lock_path: lock_path.into(),
        }
    }
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pid {
            Some(pid) => write!(
                f,
                "locked by process {pid} (pid recorded in {})",
                self.lock_path.display()
            ),
            None => write!(
                f,
                "locked by another process (no pid recorded in {})",
                self.lock_path.display()
            ),
        }
    }
}

/// Result with a [`SessionError`].
pub type Result<T, E = SessionError> = std::result::Result<T, E>;
