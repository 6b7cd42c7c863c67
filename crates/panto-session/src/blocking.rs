//! Running file work off the async runtime, and the store's kind of a session error: what
//! both the JSONL store and its import need.

use std::io::ErrorKind;

use panto_store::{Head, StoreError};

use crate::error::SessionError;

/// Runs `work` on tokio's blocking pool when inside a tokio runtime that has one, inline
/// otherwise.
///
/// panto-store-sqlite has the same function: the stores do not depend on each other, and
/// panto-store, which both depend on, links no runtime.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            match tokio::task::spawn_blocking(work).await {
                Ok(value) => value,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        _ => work(),
    }
}

/// Whether an I/O failure is one the user fixes (a path, a permission), not one to try again.
pub(crate) fn user_fixes(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::NotFound
            | ErrorKind::PermissionDenied
            | ErrorKind::ReadOnlyFilesystem
            | ErrorKind::NotADirectory
            | ErrorKind::IsADirectory
    )
}

/// The store's kind of a [`SessionError`]: a conflict, a missing file, something the user must
/// fix, or a failure to try again.
pub(crate) fn to_store_error(name: &str, e: SessionError) -> StoreError {
    match e {
        SessionError::NotFound { .. } => StoreError::not_found(name, e),
        SessionError::Conflict {
            expected, found, ..
        } => StoreError::Conflict {
            session: name.to_owned(),
            expected: Head::new(expected),
            found: Head::new(found),
            source: Box::new(e),
        },
        // A folder that is not there, a file the user may not write: the user's to fix.
        SessionError::Io { ref source, .. } if user_fixes(source.kind()) => {
            StoreError::invalid(name, e)
        }
        SessionError::LockTimeout { .. } | SessionError::Io { .. } => {
            StoreError::unavailable(name, e)
        }
        other => StoreError::invalid(name, other),
    }
}
