//! Crash simulation: a file cut at every byte of its last append (a compaction with its kept
//! turns) loads to the old or the new context, and appending after the cut still gives a
//! correct one; also when the file started without a final newline (its last line is then part
//! of the old context, and the append first ends it).

use std::fs;

use panto_model::arbitrary::session;
use panto_model::{Entry, Message, replay, turns};
use panto_session::Session;
use proptest::prelude::*;

use crate::{compaction_group, essence, opts, temp_session, user};

fn messages_of(entries: &[Entry]) -> Vec<Message> {
    replay(entries.to_vec()).messages
}

/// Appends `s` (after an earlier compaction when `earlier`, without the file's final newline
/// when `unterminated`), then a compaction keeping one to three whole turns, and checks every
/// cut of that append.
fn check_every_cut(
    s: &panto_model::arbitrary::Session,
    pick: prop::sample::Index,
    earlier: bool,
    unterminated: bool,
) -> Result<(), TestCaseError> {
    let (dir, path) = temp_session();
    let store = Session::create(&path, opts()).unwrap();
    let mut history: Vec<Entry> = Vec::new();
    if earlier {
        // An earlier compaction, so that the old context has one too.
        history.extend(compaction_group(
            Some("c0"),
            "older",
            &[Message::user_text("x")],
            Some(1),
        ));
    }
    history.extend(s.messages.iter().cloned().map(Entry::Message));
    store.append(&history).unwrap();
    if unterminated {
        // As another program may leave it: the last line without its newline.
        let mut bytes = fs::read(&path).unwrap();
        prop_assert_eq!(bytes.pop(), Some(b'\n'));
        fs::write(&path, &bytes).unwrap();
    }
    let history: Vec<Entry> = store.history().unwrap().map(|r| r.unwrap().1).collect();
    prop_assert_eq!(
        history.len(),
        s.messages.len() + if earlier { 2 } else { 0 }
    );
    let old_bytes = fs::read(&path).unwrap();

    let ts = turns(&s.messages);
    // Keep one to three whole turns: enough for a compaction with several copies, and a
    // bounded number of cuts.
    let first = ts.len().saturating_sub(3);
    let keep_from = ts[first + pick.index(ts.len() - first)].start;
    let group = compaction_group(
        Some("c1"),
        "newest",
        &s.messages[keep_from..],
        Some((s.messages.len() - keep_from) as u64),
    );
    store.append(&group).unwrap();
    let new_bytes = fs::read(&path).unwrap();
    prop_assert!(new_bytes.starts_with(&old_bytes));
    let all: Vec<Entry> = store.history().unwrap().map(|r| r.unwrap().1).collect();
    let old = replay(history.clone());
    let new = replay(all.clone());
    prop_assert_eq!(
        essence(&store.load_context().unwrap().context),
        essence(&new)
    );

    let extra = user("after the crash");
    let old_then = messages_of(&[history, vec![extra.clone()]].concat());
    let new_then = messages_of(&[all, vec![extra.clone()]].concat());
    for cut in old_bytes.len()..=new_bytes.len() {
        // A new file each time: rewriting one file from zero length makes some file
        // systems flush it on close, which would make this test slow.
        let cut_path = dir.path().join(format!("cut-{cut}.jsonl"));
        fs::write(&cut_path, &new_bytes[..cut]).unwrap();
        let cut_session = Session::open(&cut_path, opts()).unwrap();
        let got = cut_session.load_context().unwrap().context;
        prop_assert!(
            essence(&got) == essence(&old) || essence(&got) == essence(&new),
            "cut at {} of {}..{}",
            cut,
            old_bytes.len(),
            new_bytes.len()
        );
        // The next append starts on a fresh line and the result is still old or new,
        // followed by the appended message; earlier bytes are untouched.
        cut_session.append(std::slice::from_ref(&extra)).unwrap();
        let after = fs::read(&cut_path).unwrap();
        prop_assert!(after.starts_with(&new_bytes[..cut]));
        let loaded = cut_session.load_context().unwrap();
        let mut got = loaded.context.messages.clone();
        if let Some(last) = got.last_mut() {
            last.id = None;
        }
        prop_assert!(
            got == old_then || got == new_then,
            "append after cut at {}",
            cut
        );
        // The forward reader agrees with the backwards one on the repaired file.
        let forward: Vec<Entry> = cut_session
            .history()
            .unwrap()
            .map(|r| r.unwrap().1)
            .collect();
        prop_assert_eq!(essence(&replay(forward)), essence(&loaded.context));
        fs::remove_file(&cut_path).unwrap();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]

    #[test]
    fn a_cut_at_any_byte_of_a_compaction_append_loads_old_or_new(
        s in session(3),
        pick in any::<prop::sample::Index>(),
        earlier in any::<bool>(),
    ) {
        // Both ways the file may end before the append: with and without a final newline.
        check_every_cut(&s, pick, earlier, false)?;
        check_every_cut(&s, pick, earlier, true)?;
    }
}
