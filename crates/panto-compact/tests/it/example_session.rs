//! A compaction of the repository's example session that was already compacted twice: the
//! latest summary is the only one passed on, the copies kept by the last compaction are
//! summarized, and the new append is crash-safe.

use panto_compact::KnownWindows;
use panto_compact::{CompactOutcome, CompactRun, MemoryLog};
use panto_model::{Entry, encode_lines, read_entries, read_entries_lossy, replay};

use crate::*;

const SESSION: &[u8] = include_bytes!("../../../../examples/sessions/compacted-twice.jsonl");

#[tokio::test]
async fn compacting_a_twice_compacted_session() {
    let entries = read_entries(SESSION).unwrap();
    let summaries: Vec<String> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Compaction(c) => Some(c.summary.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(summaries.len(), 2);
    let mut log = MemoryLog::with_entries(entries.clone());
    let before = log.replay();
    assert_eq!(before.summary(), Some(summaries[1].as_str()));

    let (provider, active) = model("main", "big");
    provider.push_text("## Goal\nMigrate `orders` from chrono to jiff. (third summary)");
    let mut c = compactor(active, 300);
    let out = match c
        .compact(
            &before,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap()
    {
        CompactOutcome::Compacted(out) => out,
        CompactOutcome::NothingToCompact(n) => panic!("{n}"),
    };

    let prompt = provider.requests()[0].messages[0].text();
    assert!(
        prompt.contains(&summaries[1]),
        "the latest summary is passed on"
    );
    assert!(!prompt.contains(&summaries[0]), "an older summary is not");
    assert_eq!(prompt.matches("<previous-summary>").count(), 1);
    // The copies the second compaction kept (the test run) are now summarized.
    assert!(out.report.plan.prefix().contains(&1));
    assert!(!summaries[1].contains("month_start_of_leap_february"));
    assert!(prompt.contains("month_start_of_leap_february"));

    // Old bytes plus the new append, cut at any line, replay to the old or the new context.
    let old_bytes = SESSION.to_vec();
    let appended = encode_lines(&out.entries).into_bytes();
    let new = out.context.messages.clone();
    for cut in 0..=out.entries.len() {
        let end = appended
            .split_inclusive(|&b| b == b'\n')
            .take(cut)
            .map(<[u8]>::len)
            .sum::<usize>();
        let file = [old_bytes.as_slice(), &appended[..end]].concat();
        let (got, errors) = read_entries_lossy(&file);
        assert!(errors.is_empty());
        let got = replay(got).messages;
        assert!(
            got == before.messages || got == new,
            "cut after {cut} lines"
        );
    }
    assert_eq!(log.replay().messages, new);
}
