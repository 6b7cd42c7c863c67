//! The record-only summary: what panto writes itself when no model could summarize during
//! overflow recovery, so the conversation goes on.

use panto_transcript::TranscriptItem;

use crate::error::CompactError;

/// The model name a record-only compaction reports ([`Compactor::compact_record_only`](crate::Compactor::compact_record_only)).
pub const RECORD_ONLY_MODEL: &str = "panto-record";

/// The most characters of the assistant's last words a record-only summary quotes.
pub(crate) const LAST_WORDS_CHARS: usize = 2_000;

/// The text of a record-only summary (before its ledger): a note that no model wrote it and
/// why, the previous summary, and the assistant's last words in the prefix, within about
/// `chars` characters: the last words take at most a third, the earlier summary what is left
/// (its start, cut at a line, with a note when it is cut).
pub(crate) fn record_only_text(
    failure: &CompactError,
    previous: Option<&str>,
    items: &[TranscriptItem],
    chars: usize,
) -> String {
    let mut out = format!(
        "No model could write this summary ({failure}); panto kept the conversation going with its own record of the summarized turns instead.\n"
    );
    let quote_chars = chars / 3;
    if let Some(p) = previous.filter(|p| !p.trim().is_empty()) {
        let room = chars.saturating_sub(out.len() + quote_chars);
        let p = p.trim();
        out.push_str("\n## Earlier summary\n");
        if p.len() <= room {
            out.push_str(p);
            out.push('\n');
        } else {
            // Whole lines from the start, as many as fit.
            let mut used = 0;
            for line in p.split_inclusive('\n') {
                if used + line.len() > room {
                    break;
                }
                out.push_str(line);
                used += line.len();
            }
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("(The earlier summary goes on; the window has no room for the rest. The ledger below keeps its record.)\n");
        }
    }
    let last = items.iter().rev().find_map(|i| match i {
        TranscriptItem::Text {
            role: panto_model::Role::Assistant,
            text,
        } if !text.trim().is_empty() => Some(text.trim()),
        _ => None,
    });
    if let Some(text) = last {
        let quoted: String = text
            .chars()
            .take(LAST_WORDS_CHARS.min(quote_chars))
            .collect();
        out.push_str("\n## Where the work left off (the assistant's last words, quoted)\n");
        for line in quoted.lines() {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
