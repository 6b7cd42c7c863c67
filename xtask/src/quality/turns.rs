//! The shared sessions as `quality --pressure` feeds them to panto: a session's lines grouped
//! in turns, each with the message it holds, and whole turns split into parts of about equal
//! size (the chain of compactions).

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use panto_model::{Entry, Message, read_entries};
use serde_json::Value;

/// A session's lines in turns, each line with the message it holds.
pub(super) type Turns = Vec<Vec<(String, Option<Original>)>>;

/// One original message: its `content` as in the file, and as panto reads it.
pub(super) struct Original {
    pub(super) content: Value,
    pub(super) message: Message,
}

/// The session's lines grouped in turns (a turn starts at a user message with text), each
/// line with the message it holds (none for an entry that is not a message).
pub(super) fn turns_of(path: &Path) -> Result<Turns> {
    let text =
        fs::read_to_string(path).with_context(|| format!("could not read {}", path.display()))?;
    let mut turns: Turns = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("{}: a line is not JSON", path.display()))?;
        let entry = read_entries(line.as_bytes())
            .with_context(|| format!("{}", path.display()))?
            .into_iter()
            .next();
        let original = match entry {
            Some(Entry::Message(message)) => Some(Original {
                content: value["content"].clone(),
                message,
            }),
            _ => None,
        };
        let starts_turn = value["role"] == "user"
            && value["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "text"));
        match turns.last_mut() {
            Some(turn) if !starts_turn => turn.push((line.to_owned(), original)),
            _ => turns.push(vec![(line.to_owned(), original)]),
        }
    }
    Ok(turns)
}

/// Splits `turns` into at most `parts` runs of whole turns of about equal size.
pub(super) fn parts<T>(turns: Vec<Vec<(String, T)>>, parts: usize) -> Vec<Vec<(String, T)>> {
    let total: usize = turns.iter().flatten().map(|(l, _)| l.len()).sum();
    let mut out: Vec<Vec<(String, T)>> = vec![Vec::new()];
    let mut done = 0;
    let mut part = 1;
    for turn in turns {
        done += turn.iter().map(|(l, _)| l.len()).sum::<usize>();
        if let Some(p) = out.last_mut() {
            p.extend(turn);
        }
        if done * parts >= total * part && part < parts {
            out.push(Vec::new());
            part += 1;
        }
    }
    out.retain(|p| !p.is_empty());
    out
}
