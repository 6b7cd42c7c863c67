//! Files planted at the session or lock path: symbolic links (to a file, dangling), hard
//! links, FIFOs and foreign files are refused with an error naming them, and whatever they
//! point at keeps every byte; new session and lock files are private (mode 0600).
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use panto_session::{Session, SessionError};

use crate::{opts, temp_session, user};

const SECRET: &str = "aws_secret_access_key = do-not-lose-me\n";

fn lock_of(session: &Path) -> String {
    format!("{}.lock", session.display())
}

/// A session with one entry, and a precious file beside it.
fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let (dir, path) = temp_session();
    Session::create(&path, opts())
        .unwrap()
        .append(&[user("hi")])
        .unwrap();
    fs::remove_file(lock_of(&path)).unwrap();
    let precious = dir.path().join("credentials");
    fs::write(&precious, SECRET).unwrap();
    (dir, path, precious)
}

/// The error of an append to the session at `path`.
fn refused(path: &Path) -> SessionError {
    Session::open(path, opts())
        .unwrap()
        .append(&[user("x")])
        .unwrap_err()
}

#[test]
fn a_lock_that_is_a_symlink_is_refused_and_its_target_keeps_its_bytes() {
    let (_dir, path, precious) = setup();
    symlink(&precious, lock_of(&path)).unwrap();
    let s = Session::open(&path, opts()).unwrap();
    for err in [s.append(&[user("x")]).unwrap_err(), s.lock().unwrap_err()] {
        assert!(matches!(err, SessionError::Symlink { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: is a symbolic link; panto does not follow links to files it writes",
                lock_of(&path)
            )
        );
    }
    assert_eq!(fs::read_to_string(&precious).unwrap(), SECRET);
    assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 1);
}

#[test]
fn a_dangling_lock_symlink_creates_nothing() {
    let (dir, path, _) = setup();
    let target = dir.path().join("elsewhere/created-by-panto");
    fs::create_dir_all(target.parent().unwrap()).unwrap();
    symlink(&target, lock_of(&path)).unwrap();
    let err = refused(&path);
    assert!(matches!(err, SessionError::Symlink { .. }), "{err:?}");
    assert!(
        !target.exists(),
        "panto created the target of a dangling link"
    );
}

#[test]
fn a_lock_with_another_hard_link_or_foreign_content_is_refused_untouched() {
    let (_dir, path, precious) = setup();
    fs::hard_link(&precious, lock_of(&path)).unwrap();
    let err = refused(&path);
    assert_eq!(
        err.to_string(),
        format!(
            "{}: not a lock file panto can use: it has other hard links, so emptying it would empty another file",
            lock_of(&path)
        )
    );
    assert_eq!(fs::read_to_string(&precious).unwrap(), SECRET);

    fs::remove_file(lock_of(&path)).unwrap();
    fs::write(lock_of(&path), SECRET.repeat(3)).unwrap();
    let err = refused(&path);
    assert!(
        err.to_string().ends_with("it holds more than a process id"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(lock_of(&path)).unwrap(),
        SECRET.repeat(3)
    );

    fs::remove_file(lock_of(&path)).unwrap();
    fs::create_dir(lock_of(&path)).unwrap();
    let err = refused(&path);
    assert!(err.to_string().ends_with("it is a directory"), "{err}");
}

#[test]
fn a_lock_that_is_a_fifo_is_refused_without_blocking() {
    let (_dir, path, _) = setup();
    let lock = lock_of(&path);
    let status = std::process::Command::new("mkfifo")
        .arg(&lock)
        .status()
        .unwrap();
    assert!(status.success());
    let err = refused(&path);
    assert!(
        err.to_string().ends_with("it is not a regular file"),
        "{err}"
    );
}

#[test]
fn a_session_file_that_is_a_symlink_is_not_appended_through() {
    let (dir, path, precious) = setup();
    let link = dir.path().join("linked.jsonl");
    symlink(&precious, &link).unwrap();
    // Reading through a link the user made is fine; appending through one is not.
    let s = Session::open(&link, opts()).unwrap();
    let err = s.append(&[user("x")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: is a symbolic link; panto does not follow links to files it writes",
            link.display()
        )
    );
    assert_eq!(fs::read_to_string(&precious).unwrap(), SECRET);
    let _ = path;
}

#[test]
fn new_session_and_lock_files_are_private() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    s.append(&[user("hi")]).unwrap();
    for file in [path.display().to_string(), lock_of(&path)] {
        let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file}: {mode:o}");
    }
}

#[test]
fn an_empty_lock_file_left_by_an_earlier_run_is_reused() {
    let (_dir, path, _) = setup();
    fs::write(lock_of(&path), "").unwrap();
    Session::open(&path, opts())
        .unwrap()
        .append(&[user("again")])
        .unwrap();
    fs::write(lock_of(&path), "12345\n").unwrap();
    Session::open(&path, opts())
        .unwrap()
        .append(&[user("and again")])
        .unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap().lines().count(), 3);
}
