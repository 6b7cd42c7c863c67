//! The append lock: an exclusive advisory lock on a sidecar `<session file>.lock`, into which
//! the holder writes its process id while it holds the lock.
//!
//! Why a sidecar and not the session file itself: on Windows `File::lock` is a mandatory
//! byte-range lock that would make readers fail while a writer appends; readers never lock. The
//! lock is the standard library's `File::try_lock` (flock on Unix, `LockFileEx` on Windows), so
//! the operating system releases it when the holder dies: a pid left in a lock file that nobody
//! holds means nothing and is overwritten by the next holder.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{LockHolder, Result, SessionError};

/// The lock file of a session file: its path with `.lock` appended.
pub(crate) fn lock_path(session: &Path) -> PathBuf {
    let mut name = session.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// A held lock; dropping it clears the recorded pid and releases the lock.
#[derive(Debug)]
pub(crate) struct Lock {
    file: File,
}

impl Lock {
    /// Takes the lock of `session`, waiting up to `timeout`.
    ///
    /// # Errors
    /// [`SessionError::Symlink`] when the lock path is a symbolic link (dangling or not),
    /// [`SessionError::NotALock`] when it is something panto must not write into, both before
    /// anything is written; [`SessionError::LockTimeout`] and [`SessionError::Io`].
    pub(crate) fn acquire(session: &Path, timeout: Duration) -> Result<Lock> {
        let path = lock_path(session);
        let file = open_lock_file(&path)?;
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) => {
                    let waited = started.elapsed();
                    if waited >= timeout {
                        return Err(SessionError::LockTimeout {
                            path: session.to_path_buf(),
                            holder: LockHolder::new(read_pid(&file), path),
                            waited: timeout,
                        });
                    }
                    #[expect(
                        clippy::disallowed_methods,
                        reason = "panto-session is synchronous (no runtime): waiting for the lock blocks its caller, for at most the lock timeout"
                    )]
                    thread::sleep(pause.min(timeout - waited));
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(SessionError::io(&path, "lock", e));
                }
            }
        }
        let lock = Lock { file };
        lock.record_pid()
            .map_err(|e| SessionError::io(&path, "write the lock file", e))?;
        Ok(lock)
    }

    fn record_pid(&self) -> io::Result<()> {
        let mut f = &self.file;
        f.set_len(0)?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Best effort: a stale pid is harmless (see the module docs) and unlocking cannot
        // usefully fail; closing the file releases the lock in any case.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The pid recorded in a lock file, if it can be read.
fn read_pid(file: &File) -> Option<u32> {
    let mut text = String::new();
    let mut f = file;
    f.seek(SeekFrom::Start(0)).ok()?;
    f.take(MAX_LOCK_LEN).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The most bytes a lock file holds: a process id and a newline, with room to spare.
const MAX_LOCK_LEN: u64 = 32;

/// Opens the lock file, creating it (mode 0600) when it is missing, without following a
/// symbolic link and without truncating anything; then checks that it is a lock file: a
/// regular file with no other hard link, holding at most a process id. Only such a file is
/// ever emptied (when the pid is recorded and cleared), so no other file can lose a byte.
fn open_lock_file(path: &Path) -> Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    careful(&mut options, true);
    let file = options.open(path).map_err(|e| match e.kind() {
        io::ErrorKind::IsADirectory => SessionError::NotALock {
            path: path.to_path_buf(),
            reason: "it is a directory",
        },
        _ => careful_open_error(path, e, "open the lock file"),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| SessionError::io(path, "read the metadata of", e))?;
    let refuse = |reason| {
        Err(SessionError::NotALock {
            path: path.to_path_buf(),
            reason,
        })
    };
    if meta.is_dir() {
        return refuse("it is a directory");
    }
    if !meta.is_file() {
        return refuse("it is not a regular file");
    }
    #[cfg(unix)]
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return refuse("it has other hard links, so emptying it would empty another file");
    }
    if meta.len() > MAX_LOCK_LEN {
        return refuse("it holds more than a process id");
    }
    Ok(file)
}

/// Makes `options` open a path without following a symbolic link at its last component and
/// without blocking on a FIFO; files it creates get mode 0600 (`create`), which the umask can
/// only make stricter. Elsewhere than on Unix the options are left as they are.
pub(crate) fn careful(options: &mut fs::OpenOptions, create: bool) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        if create {
            options.mode(0o600);
        }
    }
    #[cfg(not(unix))]
    let _ = (options, create);
}

/// The error of a [`careful`] open: [`SessionError::Symlink`] for a link,
/// [`SessionError::NotFound`], [`SessionError::IsDirectory`], or the system's error.
pub(crate) fn careful_open_error(path: &Path, e: io::Error, action: &'static str) -> SessionError {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ELOOP) {
        return SessionError::Symlink {
            path: path.to_path_buf(),
        };
    }
    match e.kind() {
        io::ErrorKind::NotFound => SessionError::NotFound {
            path: path.to_path_buf(),
        },
        io::ErrorKind::IsADirectory => SessionError::IsDirectory {
            path: path.to_path_buf(),
        },
        _ => SessionError::io(path, action, e),
    }
}
