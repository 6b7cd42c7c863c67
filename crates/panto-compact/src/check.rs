//! The checks a model's summary must pass before it counts: not empty, not one phrase
//! repeated, not an echo of the prompt or of the last message, not longer than what it
//! replaces. A summary that fails is a failed attempt, so the model fallback applies.

use std::collections::HashSet;

use crate::error::AttemptFailure;

/// Below this many characters a summary is never "longer than what it replaces": a short
/// handoff of a very short prefix is fine.
const LONGER_SLACK_CHARS: usize = 1_000;

/// What a summary replaces and what it must not copy.
pub(crate) struct Replaced<'a> {
    /// The system prompt of the request (COMPACTION.md and instructions).
    pub system: &'a str,
    /// The body of the transcript's last item.
    pub last_message: &'a str,
    /// The summary the request carried as `<previous-summary>`: lines carried over from it are
    /// kept material, never a copy of the last message.
    pub previous: &'a str,
    /// The characters the summary stands in for: the transcript and the previous summary.
    pub chars: usize,
}

/// Checks `summary` (trimmed) against what it replaces.
pub(crate) fn check_summary(summary: &str, replaced: &Replaced<'_>) -> Result<(), AttemptFailure> {
    if summary.is_empty() {
        return Err(AttemptFailure::EmptySummary);
    }
    if let Some(distinct) = repetitive(summary) {
        return Err(AttemptFailure::RepetitiveSummary {
            distinct_percent: distinct,
        });
    }
    if copied_from(summary, replaced.system, "") {
        return Err(AttemptFailure::EchoedPrompt);
    }
    if copied_from(summary, replaced.last_message, replaced.previous) {
        return Err(AttemptFailure::EchoedLastMessage);
    }
    let chars = summary.chars().count();
    if chars > replaced.chars && chars > LONGER_SLACK_CHARS {
        return Err(AttemptFailure::LongerThanReplaced {
            summary_chars: chars,
            replaced_chars: replaced.chars,
        });
    }
    Ok(())
}

/// The share of distinct word 4-grams, in percent, when it shows one phrase repeated: a text
/// of at least 40 words of which under a quarter of the 4-grams are distinct.
fn repetitive(text: &str) -> Option<u32> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() < 40 {
        return None;
    }
    let grams: Vec<&[&str]> = words.windows(4).collect();
    let distinct: HashSet<&[&str]> = grams.iter().copied().collect();
    let percent = (100 * distinct.len() / grams.len()) as u32;
    (percent < 25).then_some(percent)
}

/// Whether most of `summary` is copied from `source`: at least 80% of the characters of its
/// substantial lines (20 characters or more, which must make up most of it) appear in `source`
/// as they are.
fn copied_from(summary: &str, source: &str, carried: &str) -> bool {
    if source.trim().is_empty() {
        return false;
    }
    let normal = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let source = normal(source);
    let carried = normal(carried);
    let mut total = 0usize;
    let mut copied = 0usize;
    for line in summary.lines() {
        // A line marked as a quote is one: the prompt asks for a verbatim quote of where the
        // work left off, and the offline summarizer writes one, so quoting is not copying.
        if line.trim_start().starts_with('>') {
            continue;
        }
        let line = normal(line.trim_start_matches(['-', '*', '#', ' ']));
        if !carried.is_empty() && line.chars().count() >= 20 && carried.contains(line.as_str()) {
            continue;
        }
        if line.chars().count() < 20 {
            continue;
        }
        total += line.len();
        if source.contains(&line) {
            copied += line.len();
        }
    }
    let substantial = total * 2 >= normal(summary).len();
    substantial && total > 0 && copied * 5 >= total * 4
}
