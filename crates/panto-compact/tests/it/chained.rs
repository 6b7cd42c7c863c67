//! Three chained compactions: only the latest summary is passed on, and turns kept by one
//! compaction are summarized by the next, so no message of the conversation is ever lost.

use panto_compact::KnownWindows;
use panto_compact::{CompactOutcome, CompactRun};
use panto_model::{ContentBlock, Entry, Message};
use panto_transcript::strip_ledger;

use crate::*;

const SUMMARIES: [&str; 3] = ["SUMMARY-ONE", "SUMMARY-TWO", "SUMMARY-THREE"];

/// The words of a message: its text blocks and tool result contents.
fn words(m: &Message) -> String {
    let mut out = m.text();
    for b in &m.content {
        if let ContentBlock::ToolResult(r) = b {
            out.push_str(&r.content.text());
        }
    }
    out
}

/// The text between the first `<previous-summary>` and its closing tag.
fn previous_summary(prompt: &str) -> Option<&str> {
    let start = prompt.find("<previous-summary>")? + "<previous-summary>".len();
    let end = prompt[start..].find("</previous-summary>")? + start;
    Some(&prompt[start..end])
}

#[tokio::test]
async fn three_chained_compactions_pass_only_the_latest_summary_and_lose_nothing() {
    let (provider, active) = model("main", "big");
    for s in SUMMARIES {
        provider.push_text(s);
    }
    let mut c = compactor(active, 300);
    let mut log = log_of(&rounds(0, 3));
    let mut all: Vec<Message> = rounds(0, 3);
    let mut kept_markers: Vec<Vec<String>> = Vec::new();

    for (k, expected) in SUMMARIES.iter().enumerate() {
        if k > 0 {
            // The conversation goes on: two more rounds after each compaction.
            let more = rounds(3 + 2 * (k - 1), 5 + 2 * (k - 1));
            let entries: Vec<Entry> = more.iter().cloned().map(Entry::Message).collect();
            log.append(&entries).await.unwrap();
            all.extend(more);
        }
        let ctx = log.replay();
        let out = match c
            .compact(
                &ctx,
                &mut log,
                CompactRun::manual(None),
                &mut KnownWindows::new(),
            )
            .await
            .unwrap()
        {
            CompactOutcome::Compacted(out) => out,
            CompactOutcome::NothingToCompact(n) => panic!("compaction {k}: {n}"),
        };
        assert_eq!(strip_ledger(&out.report.summary), *expected);
        kept_markers.push(out.context.messages[1..].iter().map(words).collect());
    }

    let prompts: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.messages[0].text())
        .collect();
    assert_eq!(prompts.len(), 3);
    // Exactly one previous summary from the second compaction on, always the latest one.
    assert_eq!(prompts[0].matches("<previous-summary>").count(), 0);
    for k in 1..3 {
        assert_eq!(
            prompts[k].matches("<previous-summary>").count(),
            1,
            "request {k}"
        );
        let previous = previous_summary(&prompts[k]).unwrap();
        assert!(
            previous.contains(SUMMARIES[k - 1]),
            "request {k}: {previous}"
        );
        for older in &SUMMARIES[..k - 1] {
            assert!(
                !prompts[k].contains(older),
                "request {k} must not carry {older}"
            );
        }
    }

    // What one compaction kept, the next one summarized.
    for k in 0..2 {
        for marker in &kept_markers[k] {
            assert!(
                prompts[k + 1].contains(marker.as_str()),
                "kept by compaction {k}, must be in the transcript of compaction {}: {marker}",
                k + 1
            );
        }
    }

    // Every message is in the latest kept suffix or in the transcript of some compaction.
    let last = log.replay();
    let final_kept: Vec<Message> = last.messages[1..].iter().map(strip).collect();
    for m in &all {
        let text = words(m);
        let in_suffix = final_kept.contains(&strip(m));
        let summarized = prompts.iter().any(|p| p.contains(&text));
        assert!(in_suffix || summarized, "message lost: {m:?}");
    }
    assert_eq!(last.summary().map(strip_ledger), Some("SUMMARY-THREE"));
    // The ledger went with every summary and merged across the chain: the third one still
    // names the first request and the first file.
    let ledger = last.summary().unwrap();
    assert!(ledger.contains("1. r0-0 please look at file 0"), "{ledger}");
    assert!(ledger.contains("`src/tool0.rs`"), "{ledger}");
}
