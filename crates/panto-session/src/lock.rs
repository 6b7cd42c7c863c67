//! The append lock: an exclusive advisory lock on a sidecar `<session file>.lock`, into which
//! the holder writes its process id while it holds the lock.
//!
//! Why a sidecar and not the session file itself: on Windows `File::lock` is a mandatory
//! byte-range lock that would make readers fail while a writer appends; readers never lock. The
//! lock is the standard library's `File::try_lock` (flock on Unix, LockFileEx on Windows), so
//! the operating system releases it when the holder dies: a pid left in a lock file that nobody
//! holds means nothing and is overwritten by the next holder.

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
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
    pub fn acquire(session: &Path, timeout: Duration) -> Result<Lock> {
        let path = lock_path(session);
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| SessionError::io(&path, "open the lock file", e))?;
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
                            holder: LockHolder {
                                pid: read_pid(&path),
                                lock_path: path,
                            },
                            waited: timeout,
                        });
                    }
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

    fn record_pid(&self) -> std::io::Result<()> {
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
fn read_pid(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}
