//! A crash at any byte of a compaction append leaves a session that replays to exactly the old
//! or exactly the new context.

use panto_compact::KnownWindows;
use panto_compact::{CompactOutcome, CompactRun, MemoryLog};
use panto_model::arbitrary::session;
use panto_model::{Entry, Message, encode_line, encode_lines, read_entries_lossy, replay};
use proptest::prelude::*;

use crate::*;

/// The bytes of a log before a compaction, the bytes the compaction appended, and the context
/// messages before and after.
struct Append {
    old_bytes: Vec<u8>,
    appended: Vec<u8>,
    old: Vec<Message>,
    new: Vec<Message>,
}

/// A manual run with exactly the budget `keep`, written even when it saves nothing: the cuts
/// are what this file tests, whatever the compaction saves.
fn exact(keep: u64) -> CompactRun {
    CompactRun::manual(None)
        .with_keep_tokens(keep)
        .with_force(true)
}

/// Compacts `history` with the real compactor; `None` when there was nothing to compact.
fn append_of(history: &[Message], keep: u64) -> Option<Append> {
    let (provider, active) = model("main", "big");
    provider.push_text("the summary\nwith two lines and a \"quote\"");
    let mut c = compactor(active, keep);
    let mut log = log_of(history);
    let old_bytes = log.to_jsonl().into_bytes();
    let old = log.replay().messages;
    let ctx = log.replay();
    let out = block_on(c.compact(&ctx, &mut log, exact(keep), &mut KnownWindows::new())).unwrap();
    let CompactOutcome::Compacted(out) = out else {
        return None;
    };
    let appended: Vec<u8> = out
        .entries
        .iter()
        .flat_map(|e| encode_line(e).into_bytes())
        .collect();
    assert_eq!(
        log.to_jsonl().into_bytes(),
        [old_bytes.clone(), appended.clone()].concat()
    );
    Some(Append {
        old_bytes,
        appended,
        old,
        new: out.context.messages,
    })
}

/// Replays `old_bytes` followed by the first `cut` bytes of `appended`, dropping a torn last
/// line as the session store does, and checks the result is the old or the new context.
pub(crate) fn check_every_cut(old_bytes: &[u8], appended: &[u8], old: &[Message], new: &[Message]) {
    let mut by_complete = std::collections::HashMap::new();
    for cut in 0..=appended.len() {
        let complete = appended[..cut]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let got = by_complete.entry(complete).or_insert_with(|| {
            let mut file = old_bytes.to_vec();
            file.extend_from_slice(&appended[..complete]);
            let (entries, errors) = read_entries_lossy(&file);
            assert!(errors.is_empty(), "only whole lines are read: {errors:?}");
            replay(entries).messages
        });
        assert!(
            got.as_slice() == old || got.as_slice() == new,
            "cut at byte {cut} of {} replays to neither context",
            appended.len()
        );
    }
    // And the whole append gives the new context.
    let mut file = old_bytes.to_vec();
    file.extend_from_slice(appended);
    assert_eq!(replay(read_entries_lossy(&file).0).messages, new);
}

#[test]
fn a_compaction_cut_at_any_byte_replays_to_old_or_new() {
    let a = append_of(&rounds(0, 3), 300).unwrap();
    assert_ne!(a.old, a.new);
    check_every_cut(&a.old_bytes, &a.appended, &a.old, &a.new);
}

#[test]
fn a_second_compaction_cut_at_any_byte_replays_to_the_first_or_the_second() {
    let (provider, active) = model("main", "big");
    provider.push_text("first summary");
    provider.push_text("second summary");
    let mut c = compactor(active, 300);
    let mut log = log_of(&rounds(0, 3));
    let ctx = log.replay();
    block_on(c.compact(&ctx, &mut log, exact(300), &mut KnownWindows::new())).unwrap();
    let more: Vec<Entry> = rounds(3, 5).into_iter().map(Entry::Message).collect();
    let mut log = MemoryLog::with_entries([log.entries(), more].concat());
    let old_bytes = log.to_jsonl().into_bytes();
    let ctx = log.replay();
    let old = ctx.messages.clone();
    let CompactOutcome::Compacted(out) =
        block_on(c.compact(&ctx, &mut log, exact(300), &mut KnownWindows::new())).unwrap()
    else {
        panic!("expected a compaction")
    };
    let appended = encode_lines(&out.entries).into_bytes();
    check_every_cut(&old_bytes, &appended, &old, &out.context.messages);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_compaction_cut_at_any_byte_replays_to_old_or_new(s in session(4), keep in 0u64..1_000) {
        if let Some(a) = append_of(&s.messages, keep) {
            check_every_cut(&a.old_bytes, &a.appended, &a.old, &a.new);
        }
    }
}
