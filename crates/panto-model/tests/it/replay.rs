//! Replay of [history, compaction, kept turns] equals [compaction block, kept turns], and a
//! compaction append cut at any byte replays to exactly the old or the new context.

use panto_model::arbitrary::session;
use panto_model::{
    COPIES_MARKED, CompactionEntry, Entry, KEPT_BY, Message, encode_line, encode_lines,
    read_entries, replay, turns,
};
use proptest::prelude::*;
use serde_json::json;

/// Splits a session at a turn boundary and builds the compaction append for the suffix.
fn compaction_append(messages: &[Message], keep_from: usize, id: &str) -> Vec<Entry> {
    let kept = &messages[keep_from..];
    let mut c = CompactionEntry::new(format!("summary of {keep_from} messages"));
    c.id = Some(id.into());
    c.kept_messages = Some(kept.len() as u64);
    // What the store sets on a compaction appended with its marked copies.
    c.extra.insert(COPIES_MARKED.into(), json!(true));
    let mut out = vec![Entry::Compaction(c)];
    for m in kept {
        let mut copy = m.clone();
        copy.extra.insert(KEPT_BY.into(), json!(id));
        out.push(Entry::Message(copy));
    }
    out
}

fn strip_marker(mut m: Message) -> Message {
    m.extra.remove(KEPT_BY);
    m
}

proptest! {
    #[test]
    fn replay_after_compaction_is_block_then_kept_turns(s in session(5), pick in any::<prop::sample::Index>()) {
        let ts = turns(&s.messages);
        let keep_from = ts[pick.index(ts.len())].start;
        let mut entries: Vec<Entry> = s.messages.iter().cloned().map(Entry::Message).collect();
        let append = compaction_append(&s.messages, keep_from, "c9");
        entries.extend(append.clone());
        let full = replay(entries);
        let direct = replay(append);
        prop_assert_eq!(&full.messages, &direct.messages);
        let summary = format!("summary of {keep_from} messages");
        prop_assert_eq!(full.messages[0].compaction_summary(), Some(summary.as_str()));
        let kept: Vec<Message> = full.messages[1..].iter().cloned().map(strip_marker).collect();
        prop_assert_eq!(kept, s.messages[keep_from..].to_vec());
        prop_assert_eq!(full.kept, s.messages.len() - keep_from);
    }

    #[test]
    fn a_cut_append_replays_to_old_or_new(s in session(3), pick in any::<prop::sample::Index>()) {
        let ts = turns(&s.messages);
        let keep_from = ts[pick.index(ts.len())].start;
        let history: Vec<Entry> = s.messages.iter().cloned().map(Entry::Message).collect();
        let old_bytes = encode_lines(&history).into_bytes();
        let append = compaction_append(&s.messages, keep_from, "c1");
        let new_bytes: Vec<u8> = append.iter().flat_map(|e| encode_line(e).into_bytes()).collect();
        let old = replay(history.clone()).messages;
        let mut all = history;
        all.extend(append);
        let new = replay(all).messages;
        // Replay depends only on which appended lines are complete, so replay once per count.
        let mut by_lines: std::collections::HashMap<usize, bool> = std::collections::HashMap::new();
        for cut in 0..=new_bytes.len() {
            // A reader drops a torn last line (no newline yet); see panto-session.
            let complete = new_bytes[..cut].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let ok = *by_lines.entry(complete).or_insert_with(|| {
                let mut file = old_bytes.clone();
                file.extend_from_slice(&new_bytes[..complete]);
                let got = replay(read_entries(&file).unwrap()).messages;
                got == old || got == new
            });
            prop_assert!(ok, "cut at {} of {}", cut, new_bytes.len());
        }
        let mut file = old_bytes;
        file.extend_from_slice(&new_bytes);
        prop_assert_eq!(replay(read_entries(&file).unwrap()).messages, new);
    }
}
