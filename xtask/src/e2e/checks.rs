//! The assertions of the end-to-end suite, as pure functions over the session file and the
//! `--json` documents, so that unit tests can show each one rejects what it should.

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// The entries of a session file, one JSON object per line.
///
/// # Errors
/// A line that is not JSON (named by its number).
pub(super) fn entries(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).with_context(|| format!("line {} is not JSON", i + 1))
        })
        .collect()
}

/// The indexes of the compaction entries.
pub(super) fn compactions(entries: &[Value]) -> Vec<usize> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "compaction")
        .map(|(i, _)| i)
        .collect()
}

/// The one compaction entry of the session, and its index.
///
/// # Errors
/// When there is none or more than one.
pub(super) fn single_compaction(entries: &[Value]) -> Result<(usize, &Value)> {
    match compactions(entries).as_slice() {
        [i] => Ok((*i, &entries[*i])),
        other => bail!(
            "expected exactly one compaction entry, found {}",
            other.len()
        ),
    }
}

/// What a compaction entry must say.
#[derive(Debug)]
pub(super) struct Expect<'a> {
    /// `overflow` or `manual`.
    pub trigger: &'a str,
    /// The provider that must have written the summary.
    pub provider: &'a str,
    /// The model that must have written the summary.
    pub model: &'a str,
    /// Whether the compaction model failed and the active model wrote the summary.
    pub fallback: bool,
    /// The `/compact` instructions the entry must record.
    pub instructions: Option<&'a str>,
}

/// Figures read off a compaction entry.
#[derive(Clone, Debug)]
pub(super) struct Figures {
    /// `tokens_before`.
    pub before: u64,
    /// `tokens_after`.
    pub after: u64,
    /// `keep_tokens`, the budget the plan used.
    pub keep: u64,
    /// `kept_turns` and `summarized_turns`.
    pub turns: (u64, u64),
    /// The summary's length in characters.
    pub summary_chars: usize,
}

fn num(entry: &Value, field: &str) -> Result<u64> {
    entry[field]
        .as_u64()
        .with_context(|| format!("the compaction entry has no number `{field}`: {entry}"))
}

/// Checks one compaction entry against `expect`.
///
/// # Errors
/// The first field that disagrees.
pub(super) fn compaction_entry(entry: &Value, expect: &Expect<'_>) -> Result<Figures> {
    let summary = entry["summary"].as_str().unwrap_or_default();
    ensure!(!summary.trim().is_empty(), "the summary is empty: {entry}");
    ensure!(
        entry["trigger"] == expect.trigger,
        "trigger is {}, expected {}",
        entry["trigger"],
        expect.trigger
    );
    ensure!(
        entry["provider"] == expect.provider,
        "the summary was written by provider {}, expected {} (not the offline summarizer)",
        entry["provider"],
        expect.provider
    );
    ensure!(
        entry["model"] == expect.model,
        "the summary was written by model {}, expected {}",
        entry["model"],
        expect.model
    );
    let fallback = entry["fallback"].as_bool().unwrap_or(false);
    ensure!(
        fallback == expect.fallback,
        "fallback is {fallback}, expected {}",
        expect.fallback
    );
    if expect.fallback {
        ensure!(
            entry["fallback_error"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "a fallback must say why the compaction model failed: {entry}"
        );
    }
    match expect.instructions {
        Some(text) => ensure!(
            entry["instructions"] == text,
            "instructions are {}, expected {text:?}",
            entry["instructions"]
        ),
        None => ensure!(
            entry.get("instructions").is_none_or(Value::is_null),
            "unexpected instructions {}",
            entry["instructions"]
        ),
    }
    let figures = Figures {
        before: num(entry, "tokens_before")?,
        after: num(entry, "tokens_after")?,
        keep: num(entry, "keep_tokens")?,
        turns: (num(entry, "kept_turns")?, num(entry, "summarized_turns")?),
        summary_chars: summary.chars().count(),
    };
    ensure!(
        figures.turns.1 > 0,
        "the compaction summarized no turn: {entry}"
    );
    Ok(figures)
}

/// Checks that the `kept_messages` copies follow the compaction entry at `at`, marked with its
/// id, and returns the index of the first entry after them.
///
/// # Errors
/// A missing or unmarked copy.
pub(super) fn kept_copies(entries: &[Value], at: usize) -> Result<usize> {
    let entry = &entries[at];
    let kept = usize::try_from(num(entry, "kept_messages")?)?;
    ensure!(
        kept > 0,
        "the compaction kept no message (the turn in flight is always kept)"
    );
    let id = &entry["id"];
    for k in 1..=kept {
        let copy = entries
            .get(at + k)
            .with_context(|| format!("copy {k} of {kept} is missing after the compaction entry"))?;
        ensure!(
            copy["kept_by"] == *id,
            "entry {} after the compaction is not a copy it kept: {copy}",
            at + k
        );
    }
    Ok(at + kept + 1)
}

/// The input side of a usage record: `input_tokens + cache_read + cache_creation`.
pub(super) fn input_total(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .iter()
    .filter_map(|f| usage[f].as_u64())
    .sum()
}

/// The replies the model wrote (assistant entries that are not kept copies).
pub(super) fn replies(entries: &[Value]) -> Vec<&Value> {
    entries
        .iter()
        .filter(|e| e["role"] == "assistant" && e.get("kept_by").is_none())
        .collect()
}

/// Checks that the replies carry the server's usage, and that the prompt cache showed up as
/// cache reads on some reply (every send after the first shares a prefix with the one before).
///
/// A reply may lack usage altogether: llama-server's `/v1/messages` stream skips the event that
/// carries the input count when the first token is an incomplete UTF-8 character, and panto then
/// records no usage rather than a request of zero input tokens. What must not happen is usage
/// with either side zero, or most replies without usage.
///
/// # Errors
/// A reply with half a usage, fewer than half the replies with usage, or no cache read anywhere.
pub(super) fn usage_recorded(entries: &[Value]) -> Result<()> {
    let replies = replies(entries);
    ensure!(!replies.is_empty(), "the session has no reply");
    let mut with_usage = 0;
    for r in &replies {
        let Some(usage) = r.get("usage") else {
            continue;
        };
        ensure!(
            input_total(usage) > 0 && usage["output_tokens"].as_u64().unwrap_or(0) > 0,
            "a reply has usage without both its input and output counts: {r}"
        );
        with_usage += 1;
    }
    ensure!(
        2 * with_usage >= replies.len(),
        "only {with_usage} of {} replies carry the server's usage",
        replies.len()
    );
    ensure!(
        replies
            .iter()
            .any(|r| r["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0) > 0),
        "no reply recorded a cache read although every send reused the previous prompt"
    );
    Ok(())
}

/// Checks the replay (`panto context --json`) after the compaction entry at `at`: the compaction
/// block with the entry's summary, the kept copies, then every entry after them.
///
/// # Errors
/// The first message out of place.
pub(super) fn replay(doc: &Value, entries: &[Value], at: usize) -> Result<()> {
    let entry = &entries[at];
    let messages = doc["messages"]
        .as_array()
        .with_context(|| format!("no messages in {doc}"))?;
    let head = messages.first().context("the replayed context is empty")?;
    ensure!(
        head["role"] == "user"
            && head["content"][0]["type"] == "compaction"
            && head["content"][0]["summary"] == entry["summary"],
        "the context does not open with the compaction block: {head}"
    );
    let after = &entries[at + 1..];
    ensure!(
        messages.len() == after.len() + 1,
        "the context has {} messages after the summary, the file {} after the compaction",
        messages.len() - 1,
        after.len()
    );
    for (m, e) in messages[1..].iter().zip(after) {
        ensure!(
            m["id"] == e["id"] && m["role"] == e["role"],
            "the context replays {} where the file has {}",
            m["id"],
            e["id"]
        );
    }
    ensure!(
        doc["compaction"]["id"] == entry["id"],
        "the context names compaction {}, expected {}",
        doc["compaction"]["id"],
        entry["id"]
    );
    Ok(())
}

/// The text of a message entry (its text blocks joined).
pub(super) fn text(message: &Value) -> String {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}
