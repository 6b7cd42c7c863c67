//! Appends that expect a tail (`append_at`): they write only when the file still ends where
//! the writer last saw it, and otherwise report a conflict and leave every byte as it was.

use std::fs;

use panto_session::{Session, SessionError};
use proptest::prelude::*;

use crate::{forward, opts, session_with, temp_session, user};

#[test]
fn an_append_at_the_end_it_saw_succeeds_and_says_where_the_file_ends() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let first = s.append_at(0, &[user("one")]).unwrap();
    assert_eq!(first.ids, ["m1"]);
    assert_eq!(first.end, fs::metadata(&path).unwrap().len());
    let second = s.append_at(first.end, &[user("two")]).unwrap();
    assert_eq!(second.end, fs::metadata(&path).unwrap().len());
    assert_eq!(s.end().unwrap(), second.end);
    assert_eq!(forward(&s).messages.len(), 2);
}

#[test]
fn a_stale_end_is_a_conflict_and_writes_nothing() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let mine = s.append(&[user("mine")]).unwrap();
    assert_eq!(mine, ["m1"]);
    let seen = s.end().unwrap();
    // Another writer appends after this one looked.
    let other = Session::open(&path, opts()).unwrap();
    other.append(&[user("theirs")]).unwrap();
    let before = fs::read(&path).unwrap();
    let error = s.append_at(seen, &[user("late reply")]).unwrap_err();
    assert!(
        matches!(error, SessionError::Conflict { expected, found, .. }
            if expected == seen && found == before.len() as u64),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with(&format!("{}: the session changed", path.display())),
        "{text}"
    );
    assert!(
        text.ends_with("another writer appended to it; nothing was written"),
        "{text}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    // Even appending nothing checks the tail.
    assert!(matches!(
        s.append_at(seen, &[]),
        Err(SessionError::Conflict { .. })
    ));
}

#[test]
fn the_length_a_load_saw_is_the_end_to_append_at_after_a_torn_tail() {
    let (_dir, path) = temp_session();
    let s = session_with(
        &path,
        b"{\"type\":\"message\",\"role\":\"user\",\"content\":[]}\n{\"type\":\"mess",
    );
    let loaded = s.load_context().unwrap();
    let appended = s
        .append_at(loaded.head.get(), &[user("after the torn line")])
        .unwrap();
    assert_eq!(appended.end, fs::metadata(&path).unwrap().len());
    let after = s.load_context().unwrap();
    assert_eq!(after.context.messages.len(), 2);
    assert_eq!(after.head.get(), appended.end);
}

proptest! {
    /// Writers take turns in any order, each appending at the end it last saw (from its own
    /// last append, or a fresh look). An append succeeds exactly when nobody appended since
    /// that writer looked, and the file is always the successful appends in order.
    #[test]
    fn only_writers_that_saw_the_current_end_append(
        steps in proptest::collection::vec((0usize..3, any::<bool>()), 1..24),
    ) {
        let (_dir, path) = temp_session();
        let s = Session::create(&path, opts()).unwrap();
        let mut seen = [0u64; 3];
        let mut written: Vec<String> = Vec::new();
        for (n, (writer, look_first)) in steps.into_iter().enumerate() {
            if look_first {
                seen[writer] = s.end().unwrap();
            }
            let current = fs::metadata(&path).unwrap().len();
            let before = fs::read(&path).unwrap();
            let text = format!("writer {writer} step {n}");
            match s.append_at(seen[writer], &[user(&text)]) {
                Ok(appended) => {
                    prop_assert_eq!(seen[writer], current);
                    seen[writer] = appended.end;
                    written.push(text);
                }
                Err(SessionError::Conflict { expected, found, .. }) => {
                    prop_assert_ne!(expected, current);
                    prop_assert_eq!(found, current);
                    prop_assert_eq!(fs::read(&path).unwrap(), before);
                }
                Err(other) => prop_assert!(false, "{}", other),
            }
        }
        let texts: Vec<String> = forward(&s).messages.iter().map(panto_model::Message::text).collect();
        prop_assert_eq!(texts, written);
    }
}
