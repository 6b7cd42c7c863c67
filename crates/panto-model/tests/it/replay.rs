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

/// A session of `messages` compacted at each of `cuts` (message positions, at turn starts) in
/// turn, each compaction keeping nothing: the entries, and the position of each compaction.
fn chained(messages: &[Message], cuts: &[usize]) -> (Vec<Entry>, Vec<usize>) {
    let mut entries = Vec::new();
    let mut at = Vec::new();
    let mut next = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let cut = cut.max(next);
        entries.extend(messages[next..cut].iter().cloned().map(Entry::Message));
        // A compaction that keeps nothing: active as soon as it is read.
        entries.extend(compaction_append(&messages[..cut], cut, &format!("c{i}")));
        next = cut;
        at.push(entries.len() - 1);
    }
    entries.extend(messages[next..].iter().cloned().map(Entry::Message));
    (entries, at)
}

/// The entries without the compaction at `at` and its copies.
fn without(entries: &[Entry], at: usize) -> Vec<Entry> {
    let Entry::Compaction(c) = &entries[at] else {
        unreachable!("a compaction")
    };
    let id = c.id.clone().unwrap();
    entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            *i != at && !matches!(e, Entry::Message(m) if m.kept_by() == Some(id.as_str()))
        })
        .map(|(_, e)| e.clone())
        .collect()
}

proptest! {
    /// An undo of the active compaction replays as if that compaction and its copies were not
    /// there, and a second undo (of the compaction then active) one step further back: undo
    /// entries change nothing else, wherever they stand.
    #[test]
    fn an_undo_replays_as_if_its_compaction_were_not_there(
        s in session(6),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..4),
        keep in any::<prop::sample::Index>(),
        more in 0usize..3,
    ) {
        let ts = turns(&s.messages);
        let mut cuts: Vec<usize> = picks.iter().map(|p| ts[p.index(ts.len())].start).collect();
        cuts.sort_unstable();
        // Each compaction keeps the turns after a point of its own, as copies.
        let (mut entries, at) = chained(&s.messages, &cuts);
        let last = *at.last().unwrap();
        let Entry::Compaction(c) = entries[last].clone() else { unreachable!() };
        let kept_from = ts[keep.index(ts.len())].start.min(cuts[cuts.len() - 1]);
        let copies = compaction_append(&s.messages[..cuts[cuts.len() - 1]], kept_from, c.id.as_deref().unwrap());
        entries.splice(last..=last, copies);
        let plain = entries.clone();
        // Messages appended after the undo stay.
        let undo = |id: &str| Entry::Undo(panto_model::UndoEntry::new(id).with_id(format!("u-{id}")));
        let mut undone = plain.clone();
        undone.push(undo(c.id.as_deref().unwrap()));
        for n in 0..more {
            undone.push(Entry::Message(Message::user_text(format!("after {n}"))));
        }
        let mut expected = without(&plain, last);
        for n in 0..more {
            expected.push(Entry::Message(Message::user_text(format!("after {n}"))));
        }
        prop_assert_eq!(replay(undone.clone()), replay(expected.clone()));
        // Twice: the compaction active now is the one before (if any).
        if at.len() > 1 {
            let before = at[at.len() - 2];
            let Entry::Compaction(b) = &plain[before] else { unreachable!() };
            undone.push(undo(b.id.as_deref().unwrap()));
            let twice = without(&without(&plain, last), before);
            let mut twice = twice;
            for n in 0..more {
                twice.push(Entry::Message(Message::user_text(format!("after {n}"))));
            }
            prop_assert_eq!(replay(undone), replay(twice));
        }
    }
}

#[test]
fn an_undo_line_reads_and_writes_back_exactly() {
    let line = r#"{"type":"undo","id":"u3","undoes":"c2","x-by":{"who": 1}}"#;
    let entries = read_entries(line.as_bytes()).unwrap();
    assert!(matches!(&entries[0], Entry::Undo(u) if u.undoes == "c2"));
    assert_eq!(entries[0].id(), Some("u3"));
    assert_eq!(encode_line(&entries[0]).trim_end(), line);
    let missing = read_entries(br#"{"type":"undo","id":"u3"}"#).unwrap_err();
    assert!(missing.to_string().contains("undoes"), "{missing}");
}

/// The shrunk case of panto-session's `appending_through_the_store_gives_the_same_context_as_replay`:
/// an undo written before the compaction it names voids nothing (an undo is of what was there
/// when it was written), so replaying forwards agrees with a load that reads backwards from the
/// end and never sees it.
#[test]
fn an_undo_before_the_compaction_it_names_voids_nothing() {
    let messages = vec![
        Message::user_text("first"),
        Message::user_text("second"),
        Message::user_text("third"),
    ];
    let compacted = compaction_append(&messages, 2, "c9");
    let mut entries = vec![Entry::Undo(panto_model::UndoEntry::new("c9"))];
    entries.extend(compacted.iter().cloned());
    assert_eq!(replay(entries), replay(compacted.clone()));
    // After it, the same undo does void it.
    let mut after = compacted.clone();
    after.push(Entry::Undo(panto_model::UndoEntry::new("c9")));
    assert_ne!(replay(after), replay(compacted));
}
