//! The checks a model's summary must pass before it counts: not empty, not one phrase
//! repeated, not an echo of the prompt or of the last message, not a copy of the previous
//! summary that leaves the new turns out, not longer than what it replaces. A summary that
//! fails is a failed attempt, so the model fallback applies.

use std::collections::HashSet;

use crate::attempt::AttemptFailure;

/// Below this many characters a summary is never "longer than what it replaces": a short
/// handoff of a very short prefix is fine.
const LONGER_SLACK_CHARS: usize = 1_000;

/// The fewest characters of a line that count as substantial (shorter ones are headings,
/// labels and fragments that any two summaries share).
const SUBSTANTIAL_CHARS: usize = 20;

/// An answer repeats the previous summary when at least this share (percent) of its
/// substantial lines' characters are lines of it.
const REPEATED_PERCENT: usize = 80;

/// ... and covers the new turns too little when what it adds is under this share (percent) of
/// their transcript's characters ...
const NEW_PERCENT: usize = 1;

/// ... and under this many characters: an account this long is a real one whatever the chunk's
/// size (a model summarizing a chunk of megabytes cannot write 1% of it in its output).
const NEW_CHARS_ENOUGH: usize = 1_000;

/// Below this many characters of new transcript an answer is never a copy-through: carrying
/// the previous summary forward unchanged loses little of so short a chunk, and the ledger
/// records its facts.
const COPY_MIN_TRANSCRIPT_CHARS: usize = 1_000;

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

impl Replaced<'_> {
    /// The characters of the transcript alone.
    fn transcript_chars(&self) -> usize {
        self.chars.saturating_sub(self.previous.len())
    }
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
    if let Some(failure) = repeats_previous(summary, replaced) {
        return Err(failure);
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

/// The failure of an answer that carries the previous summary through without covering the new
/// turns: the previous summary has a substantial line, the new transcript is at least
/// [`COPY_MIN_TRANSCRIPT_CHARS`], at least [`REPEATED_PERCENT`] of the characters of the
/// answer's substantial lines (of [`SUBSTANTIAL_CHARS`] or more, markers and whitespace aside)
/// are lines found in the previous summary, and the characters of its lines not found there
/// (headings aside) are under [`NEW_PERCENT`] of the new transcript's characters and under
/// [`NEW_CHARS_ENOUGH`].
///
/// A summary that carries the previous one forward and adds a real account of the new turns
/// passes: 1% of what it replaces is a line or two for a short chunk and a paragraph for a long
/// one, and 1,000 characters are enough for any chunk.
fn repeats_previous(summary: &str, replaced: &Replaced<'_>) -> Option<AttemptFailure> {
    let transcript = replaced.transcript_chars();
    if transcript < COPY_MIN_TRANSCRIPT_CHARS {
        return None;
    }
    let previous = normal(replaced.previous);
    if !replaced
        .previous
        .lines()
        .any(|l| marked_line(l).chars().count() >= SUBSTANTIAL_CHARS)
    {
        return None;
    }
    let (mut substantial, mut repeated, mut new) = (0usize, 0usize, 0usize);
    for raw in summary.lines() {
        let line = marked_line(raw);
        if line.is_empty() {
            continue;
        }
        let found = previous.contains(line.as_str());
        if line.chars().count() >= SUBSTANTIAL_CHARS {
            substantial += line.len();
            if found {
                repeated += line.len();
            }
        }
        if !found && !raw.trim_start().starts_with('#') {
            new += line.len();
        }
    }
    let mostly_repeated = substantial > 0 && repeated * 100 >= substantial * REPEATED_PERCENT;
    let barely_new = new * 100 < transcript * NEW_PERCENT && new < NEW_CHARS_ENOUGH;
    (mostly_repeated && barely_new).then(|| AttemptFailure::RepeatedPreviousSummary {
        repeated_percent: u32::try_from(repeated * 100 / substantial).unwrap_or(100),
        new_chars: new,
        transcript_chars: transcript,
    })
}

/// A line without its list or heading markers, its whitespace collapsed.
fn marked_line(line: &str) -> String {
    normal(line.trim_start_matches(['-', '*', '#', ' ', '\t']))
}

/// `text` with every run of whitespace one space.
fn normal(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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
