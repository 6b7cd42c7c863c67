//! Each bad input, with its exact message, and the file left untouched.

use std::fs;
use std::time::Duration;

use panto_model::{Entry, Message};
use panto_session::{Session, SessionError, SessionOptions};

use crate::{opts, session_with, temp_session, user};

/// A valid message line, numbered so lines can be told apart.
fn line(i: usize) -> String {
    format!(
        "{{\"type\":\"message\",\"id\":\"m{i}\",\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"turn {i}\"}}]}}\n"
    )
}

/// Loads with both readers and checks they fail with `want`, leaving the file as it was.
fn check_both(s: &Session, want: &str) {
    let before = fs::read(s.path()).unwrap();
    let err = s.load_context().unwrap_err();
    assert_eq!(err.to_string(), want);
    let err = s.history().unwrap().find_map(Result::err).unwrap();
    assert_eq!(err.to_string(), want);
    assert_eq!(fs::read(s.path()).unwrap(), before);
}

#[test]
fn a_missing_file_is_not_found_and_open_does_not_create_it() {
    let (_dir, path) = temp_session();
    let err = Session::open(&path, opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: session file not found", path.display())
    );
    assert!(!path.exists());
}

#[test]
fn a_directory_is_not_a_session() {
    let (dir, _) = temp_session();
    let err = Session::open(dir.path(), opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: is a directory, not a session file",
            dir.path().display()
        )
    );
}

#[cfg(unix)]
#[test]
fn a_device_is_not_a_session() {
    let err = Session::open("/dev/null", opts()).unwrap_err();
    assert_eq!(err.to_string(), "/dev/null: not a regular file");
}

#[test]
fn create_never_truncates_an_existing_file() {
    let (_dir, path) = temp_session();
    fs::write(&path, line(1)).unwrap();
    let err = Session::create(&path, opts()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: session file already exists", path.display())
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), line(1));
}

#[test]
fn an_empty_file_opens_reads_as_a_clear_error_and_starts_with_its_first_append() {
    let (_dir, path) = temp_session();
    let s = session_with(&path, b"");
    let want = format!(
        "{}: line 1: the session file is empty: no entries",
        path.display()
    );
    let err = s.load_context().unwrap_err();
    assert!(matches!(err, SessionError::Empty { .. }), "{err:?}");
    assert_eq!(err.to_string(), want);
    assert_eq!(s.history().unwrap_err().to_string(), want);
    assert_eq!(
        s.lock().unwrap().load_context().unwrap_err().to_string(),
        want
    );
    assert_eq!(fs::read(&path).unwrap(), b"");
    // The first append starts the session.
    s.append(&[Entry::Message(Message::user_text("hi"))])
        .unwrap();
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.messages.len(), 1);
    assert!(loaded.warnings.is_empty());
    // `create` makes exactly that file.
    let (_dir2, path2) = temp_session();
    let created = Session::create(&path2, opts()).unwrap();
    assert!(matches!(
        created.load_context(),
        Err(SessionError::Empty { .. })
    ));
}

#[test]
fn a_malformed_line_in_the_middle_names_file_line_column_and_field() {
    let (_dir, path) = temp_session();
    let mut text = String::new();
    for i in 1..12 {
        text.push_str(&line(i));
    }
    text.push_str(
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},{\"type\":\"tool_result\",\"content\":\"ok\"}]}\n",
    );
    text.push_str(&line(13));
    // A small read step, so the bad line is found far from where reading started.
    fs::write(&path, &text).unwrap();
    let s = Session::open(&path, opts().read_chunk(7)).unwrap();
    check_both(
        &s,
        &format!(
            "{}: line 12, column 107: content[1].tool_use_id: missing field",
            path.display()
        ),
    );
}

#[test]
fn a_line_that_is_not_utf8_is_named() {
    let (_dir, path) = temp_session();
    let mut bytes = line(1).into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"message\",\"ro\xffle\":\"user\"}\n");
    bytes.extend_from_slice(line(3).as_bytes());
    let s = session_with(&path, &bytes);
    check_both(
        &s,
        &format!("{}: line 2, column 22: not valid UTF-8", path.display()),
    );
}

#[test]
fn a_binary_file_is_rejected_at_its_first_line() {
    let (_dir, path) = temp_session();
    let s = session_with(&path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n");
    check_both(
        &s,
        &format!("{}: line 1, column 1: not valid UTF-8", path.display()),
    );
}

#[test]
fn a_cut_off_line_in_the_middle_without_a_record_is_an_error() {
    let (_dir, path) = temp_session();
    let text = format!("{}{{\"type\":\"mess\n{}", line(1), line(3));
    let s = session_with(&path, text.as_bytes());
    check_both(
        &s,
        &format!(
            "{}: line 2, column 13: type: EOF while parsing a string",
            path.display()
        ),
    );
}

#[test]
fn a_complete_but_invalid_last_line_is_an_error_not_debris() {
    let (_dir, path) = temp_session();
    let text = format!("{}{{\"type\":\"message\",\"content\":[]}}\n", line(1));
    let s = session_with(&path, text.as_bytes());
    check_both(
        &s,
        &format!("{}: line 2, column 31: role: missing field", path.display()),
    );
}

#[test]
fn a_pretty_printed_json_file_is_rejected_at_line_one() {
    let (_dir, path) = temp_session();
    let s = session_with(&path, b"{\n  \"type\": \"message\"\n}\n");
    check_both(
        &s,
        &format!(
            "{}: line 1, column 1: EOF while parsing an object",
            path.display()
        ),
    );
}

#[test]
fn the_lock_timeout_names_the_holder() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let held = s.lock().unwrap();
    let lock_file = format!("{}.lock", path.display());
    assert_eq!(
        fs::read_to_string(&lock_file).unwrap(),
        format!("{}\n", std::process::id())
    );
    let impatient = Session::open(&path, opts().lock_timeout(Duration::from_millis(100))).unwrap();
    let err = impatient.append(&[user("blocked")]).unwrap_err();
    assert!(matches!(err, SessionError::LockTimeout { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: locked by process {} (pid recorded in {lock_file}); gave up after 100ms",
            path.display(),
            std::process::id()
        )
    );
    drop(held);
    // Released: the pid is cleared and the append goes through.
    assert_eq!(fs::read_to_string(&lock_file).unwrap(), "");
    impatient.append(&[user("now")]).unwrap();
    assert_eq!(
        impatient.load_context().unwrap().context.messages,
        [{
            let mut m = Message::user_text("now");
            m.id = Some("m1".into());
            m
        }]
    );
}

#[test]
fn a_lock_without_a_recorded_pid_says_so() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, SessionOptions::default().fsync(false)).unwrap();
    // Someone else's lock on the lock file, with nothing written in it.
    let lock_path = format!("{}.lock", path.display());
    let other = fs::File::create(&lock_path).unwrap();
    other.lock().unwrap();
    let err = Session::open(&path, opts().lock_timeout(Duration::from_millis(20)))
        .unwrap()
        .append(&[user("x")])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: locked by another process (no pid recorded in {lock_path}); gave up after 20ms",
            path.display()
        )
    );
    drop(s);
}

#[test]
fn a_malformed_line_hands_out_the_decode_error_as_its_cause() {
    let (_dir, path) = temp_session();
    let bad = r#"{"type":"message","role":"robot","content":[]}"#;
    let s = session_with(&path, format!("{}{bad}\n{}", line(1), line(3)).as_bytes());
    let err = s.load_context().unwrap_err();
    let cause = std::error::Error::source(&err).expect("a malformed line has a cause");
    let decode = cause
        .downcast_ref::<panto_model::DecodeError>()
        .expect("the cause is the decode error");
    assert_eq!(decode.line, 2);
    // The message names the file and then the cause, once.
    assert_eq!(err.to_string(), format!("{}: {decode}", path.display()));
}
