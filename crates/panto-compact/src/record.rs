//! The record-only summary: what panto writes itself when no model could summarize during
//! overflow recovery, so the conversation goes on.

use panto_model::Message;
use panto_size::Heuristic;
use panto_transcript::cut::{Budget, Cut, head};
use panto_transcript::{Ledger, TranscriptItem, clip, one_line, transcript_items};

use crate::error::CompactError;

/// The model name a record-only compaction reports ([`CompactRun::record_on_failure`](crate::CompactRun::record_on_failure)).
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
    // A section is written only with something in it: no room for a quote, no heading.
    if let Some(text) = last_words(items)
        && quote_chars > 0
    {
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

/// The assistant's last words in `items`: its last text that is not blank, trimmed.
fn last_words(items: &[TranscriptItem]) -> Option<&str> {
    items.iter().rev().find_map(|i| match i {
        TranscriptItem::Text {
            role: panto_model::Role::Assistant,
            text,
        } if !text.trim().is_empty() => Some(text.trim()),
        _ => None,
    })
}

/// The summary so far after a fold step whose turns no model could summarize: the summary the
/// step carried, then panto's record of the step's turns under a heading that names the step
/// and why the model's summary failed: the user's requests and answers, the files modified, the
/// errors and the assistant's last words, each on a line of its own cut to an equal share of about
/// `chars` characters (40 at least). The next request carries it as `<previous-summary>`.
pub(crate) fn step_record_text(
    previous: Option<&str>,
    messages: &[Message],
    step: usize,
    cause: &str,
    chars: usize,
) -> String {
    let ledger = Ledger::from_messages(messages);
    let errors: Vec<String> = ledger
        .errors
        .iter()
        .map(|e| format!("{} {}: {}", e.tool, e.target, e.message))
        .collect();
    let last: Vec<String> = last_words(&transcript_items(messages))
        .map(str::to_owned)
        .into_iter()
        .collect();
    let sections: [(&str, &[String]); 5] = [
        ("The user's requests", &ledger.requests),
        ("The user's answers to questions", &ledger.answers),
        ("Files modified", &ledger.modified),
        ("Errors", &errors),
        ("The assistant's last words", &last),
    ];
    let items: usize = sections.iter().map(|(_, list)| list.len()).sum();
    let share = (chars / items.max(1)).max(40);
    let mut out = String::new();
    if let Some(p) = previous.map(str::trim).filter(|p| !p.is_empty()) {
        out.push_str(p);
        out.push_str("\n\n");
    }
    out.push_str(&format!(
        "## Turns recorded by panto, not summarized (step {step}: {cause})\n"
    ));
    // The lines stop at about `chars` characters: the ledger on the entry keeps the rest.
    let end = out.len() + chars;
    let mut left = 0;
    for (title, list) in sections {
        if list.is_empty() {
            continue;
        }
        let mut lines = format!("{title}:\n");
        let mut taken = 0;
        for item in list {
            let line = format!("- {}\n", clip(&one_line(item), share));
            if out.len() + lines.len() + line.len() > end {
                left += 1;
            } else {
                lines.push_str(&line);
                taken += 1;
            }
        }
        if taken > 0 {
            out.push_str(&lines);
        }
    }
    if left > 0 {
        out.push_str(&format!(
            "({left} more items left out here; the ledger keeps them whole.)\n"
        ));
    }
    out
}

/// The models' summary `summary` where panto's record of turns no model summarized follows it
/// within `room` tokens (a step no summary passed, or a fold that could not finish): the
/// model's work goes first, within three quarters of the room ([`head_within`]), and the
/// record takes what it leaves. (At half the room, a fold's record after four refusals had 52
/// tokens and cut a model's one-line summary of 27 away whole.)
pub(crate) fn models_first(summary: &str, room: u64) -> String {
    head_within(summary, room - room / 4)
}

/// The whole lines from the start of `text` within `max_tokens` (estimated), with a note when
/// the rest is cut. A cut never leaves a heading without its section: headings (and blank
/// lines) at the end of what is kept go with the rest.
pub(crate) fn head_within(text: &str, max_tokens: u64) -> String {
    if Heuristic.text(text) <= max_tokens {
        return text.to_owned();
    }
    let note = "(The summary so far goes on; the ledger keeps its record.)\n";
    let room = Budget::tokens(max_tokens.saturating_sub(Heuristic.text(note)));
    let mut out = head(text, room, Cut::Line).to_owned();
    while let Some(last) = out.trim_end_matches('\n').rsplit('\n').next()
        && !out.is_empty()
        && (last.starts_with('#') || last.trim().is_empty())
    {
        let keep = out.trim_end_matches('\n').len() - last.len();
        out.truncate(keep);
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(note);
    out
}

#[cfg(test)]
mod tests {
    use panto_model::Message;
    use panto_size::Heuristic;

    use super::{head_within, step_record_text};

    #[test]
    fn a_step_record_names_the_step_and_keeps_within_its_characters() {
        let messages: Vec<Message> = (0..12)
            .flat_map(|i| {
                [
                    Message::user_text(format!("request {i}: {}", "word ".repeat(80))),
                    Message::assistant_text(format!("answer {i}")),
                ]
            })
            .collect();
        let whole = step_record_text(Some("## Goal\n- earlier"), &messages, 3, "cut", 100_000);
        assert!(whole.starts_with(
            "## Goal\n- earlier\n\n## Turns recorded by panto, not summarized (step 3: cut)\n"
        ));
        for i in 0..12 {
            assert!(whole.contains(&format!("- request {i}: word")), "{whole}");
        }
        assert!(whole.contains("The assistant's last words:\n- answer 11\n"));
        assert!(!whole.contains("left out here"));

        let short = step_record_text(None, &messages, 3, "cut", 600);
        let heading = "## Turns recorded by panto, not summarized (step 3: cut)\n".len();
        assert!(short.len() <= heading + 600 + 80, "{}", short.len());
        assert!(short.contains("more items left out here; the ledger keeps them whole."));
    }

    /// Issue 40: panto's own summary never has an empty section, however little room a huge
    /// newest turn leaves.
    #[test]
    fn a_cut_summary_and_a_record_without_room_have_no_empty_section() {
        let text =
            "## Goal\nRename it.\n\n## Where the work left off\n> a long quote of the last words\n";
        for max in 0..40 {
            let cut = head_within(text, max);
            let lines: Vec<&str> = cut.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                if l.starts_with('#') {
                    let next = lines.get(i + 1).copied().unwrap_or("");
                    assert!(
                        !next.is_empty() && !next.starts_with('#') && !next.starts_with("(The"),
                        "an empty section at {max} tokens:\n{cut}"
                    );
                }
            }
        }
        let items = panto_transcript::transcript_items(&[Message::assistant_text("last words")]);
        let failure = crate::CompactError::Provider(panto_provider::ProviderError::Timeout {
            message: "slow".into(),
        });
        for chars in 0..12 {
            let record = super::record_only_text(&failure, None, &items, chars);
            assert!(
                !record.trim_end().ends_with("quoted)"),
                "an empty section at {chars} characters:\n{record}"
            );
        }
    }

    #[test]
    fn the_summary_so_far_is_cut_at_whole_lines_with_a_note() {
        let text: String = (0..50)
            .map(|i| format!("- line {i} of the summary\n"))
            .collect();
        assert_eq!(head_within(&text, 10_000), text);
        let cut = head_within(&text, 60);
        assert!(Heuristic.text(&cut) <= 60, "{}", Heuristic.text(&cut));
        assert!(text.starts_with(cut.lines().next().unwrap()));
        assert!(
            cut.lines()
                .all(|l| l.starts_with("- line ") || l.starts_with("(The summary so far goes on"))
        );
        assert!(cut.ends_with("(The summary so far goes on; the ledger keeps its record.)\n"));
    }
}
