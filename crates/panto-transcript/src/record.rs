//! The ledger as two things: the record stored on a compaction entry (every item, bounded only
//! by [`LEDGER_CAP_BYTES`] of JSON, [`Ledger::cap`]) and the text the next model reads (chosen
//! from the record within a character budget, most telling first, [`Ledger::render_within`]).
//!
//! A rendering that leaves items out says how many, by category, and where they are: whole in
//! the record on the compaction entry. The record itself drops items only past its byte cap,
//! oldest first and least telling first, and counts them ([`Ledger::dropped`]).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::ledger::{
    ANSWER_CHARS, ITEM_CHARS, LEDGER_HEADING, Ledger, LedgerError, REQUEST_CHARS, clip, code_span,
    error_line, one_line, unique,
};

/// The most bytes of JSON a stored ledger takes: 256 KiB.
///
/// Generous on purpose: at 40 to 200 bytes an item it holds thousands of requests, files,
/// commands and errors, more than a long agent session of a thousand turns produces. It is
/// bounded at all because every chained compaction writes the whole record again on its entry
/// and every load of the session reads the latest one: 256 KiB is about a millisecond to parse,
/// and it is less than the conversation a compaction on a 128k-token window summarizes, so the
/// records never dominate the session file.
pub const LEDGER_CAP_BYTES: usize = 256 * 1024;

/// The most characters one request or one answer keeps in the record (a page of text; a longer
/// paste is cut, its start kept).
const RECORD_TEXT_CHARS: usize = 8_000;
/// The most characters any other item keeps in the record: a path, a command, a todo, an
/// error's message or target.
const RECORD_ITEM_CHARS: usize = 2_000;
/// Bytes kept free below the cap for the counts that dropping items adds to the JSON.
const COUNTS_SLACK: usize = 512;

/// How many items of each category; used for what the record dropped past its cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LedgerCounts {
    /// The user's requests.
    #[serde(skip_serializing_if = "is_zero")]
    pub requests: u64,
    /// Files modified.
    #[serde(skip_serializing_if = "is_zero")]
    pub modified: u64,
    /// Files read.
    #[serde(skip_serializing_if = "is_zero")]
    pub read: u64,
    /// Errors, resolved or not.
    #[serde(skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Commands.
    #[serde(skip_serializing_if = "is_zero")]
    pub commands: u64,
    /// Open todos.
    #[serde(skip_serializing_if = "is_zero")]
    pub todos: u64,
    /// The user's answers to questions.
    #[serde(skip_serializing_if = "is_zero")]
    pub answers: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LedgerCounts {
    /// The sum over every category.
    pub fn total(&self) -> u64 {
        CATEGORIES
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(self.get(*c)))
    }

    /// Whether every count is zero.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// The counts of `self` and `other` added, category by category.
    pub fn plus(&self, other: &LedgerCounts) -> LedgerCounts {
        let mut sum = *self;
        for c in CATEGORIES {
            *sum.get_mut(c) = self.get(c).saturating_add(other.get(c));
        }
        sum
    }

    fn get(&self, category: Category) -> u64 {
        match category {
            Category::Requests => self.requests,
            Category::Modified => self.modified,
            Category::Read => self.read,
            Category::Errors => self.errors,
            Category::Commands => self.commands,
            Category::Todos => self.todos,
            Category::Answers => self.answers,
        }
    }

    fn get_mut(&mut self, category: Category) -> &mut u64 {
        match category {
            Category::Requests => &mut self.requests,
            Category::Modified => &mut self.modified,
            Category::Read => &mut self.read,
            Category::Errors => &mut self.errors,
            Category::Commands => &mut self.commands,
            Category::Todos => &mut self.todos,
            Category::Answers => &mut self.answers,
        }
    }
}

/// A category of the record, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Requests,
    Modified,
    Read,
    Errors,
    Commands,
    Todos,
    Answers,
}

const CATEGORIES: [Category; 7] = [
    Category::Requests,
    Category::Modified,
    Category::Errors,
    Category::Todos,
    Category::Answers,
    Category::Commands,
    Category::Read,
];

impl Category {
    /// The category's name in a note, singular and plural.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Category::Requests => ("request", "requests"),
            Category::Modified => ("file modified", "files modified"),
            Category::Read => ("file read", "files read"),
            Category::Errors => ("error", "errors"),
            Category::Commands => ("command", "commands"),
            Category::Todos => ("open todo", "open todos"),
            Category::Answers => ("answer", "answers"),
        }
    }
}

/// What a rendering chooses from, most telling first: the errors split by whether a later call
/// resolved them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Unresolved,
    Requests,
    Modified,
    Todos,
    Answers,
    Resolved,
    Commands,
    Read,
}

/// The kinds in the order a rendering takes them.
const PRIORITY: [Kind; 8] = [
    Kind::Unresolved,
    Kind::Requests,
    Kind::Modified,
    Kind::Todos,
    Kind::Answers,
    Kind::Resolved,
    Kind::Commands,
    Kind::Read,
];

/// The kinds a rendering takes first, within [`FIRST_SHARE_PERCENT`] of its budget.
const FIRST: [Kind; 4] = [
    Kind::Unresolved,
    Kind::Requests,
    Kind::Modified,
    Kind::Todos,
];

/// The share of a rendering's budget kept for [`FIRST`] before the others get any.
const FIRST_SHARE_PERCENT: usize = 70;

/// The kinds the record drops first past its cap, a tier at a time (within a tier, from the
/// kind that takes the most bytes), the oldest item of a kind first: the reverse of
/// [`PRIORITY`].
const DROP_TIERS: [&[Kind]; 7] = [
    &[Kind::Read, Kind::Commands],
    &[Kind::Resolved],
    &[Kind::Answers],
    &[Kind::Todos],
    &[Kind::Modified],
    &[Kind::Requests],
    &[Kind::Unresolved],
];

impl Kind {
    fn index(self) -> usize {
        PRIORITY.iter().position(|k| *k == self).unwrap_or(0)
    }

    fn category(self) -> Category {
        match self {
            Kind::Unresolved | Kind::Resolved => Category::Errors,
            Kind::Requests => Category::Requests,
            Kind::Modified => Category::Modified,
            Kind::Todos => Category::Todos,
            Kind::Answers => Category::Answers,
            Kind::Commands => Category::Commands,
            Kind::Read => Category::Read,
        }
    }

    /// Whether the rendering may take this kind while unresolved errors are still left out.
    fn waits_for_unresolved(self) -> bool {
        matches!(
            self,
            Kind::Answers | Kind::Resolved | Kind::Commands | Kind::Read
        )
    }
}

/// The positions of a kind's items in their list, most recent first.
fn positions(ledger: &Ledger, kind: Kind) -> Vec<usize> {
    let all = |n: usize| (0..n).collect();
    match kind {
        Kind::Unresolved | Kind::Resolved => ledger
            .errors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.resolved.is_none() == (kind == Kind::Unresolved))
            .map(|(i, _)| i)
            .collect(),
        Kind::Requests => all(ledger.requests.len()),
        Kind::Modified => all(ledger.modified.len()),
        Kind::Todos => all(ledger.todos.len()),
        Kind::Answers => all(ledger.answers.len()),
        Kind::Commands => all(ledger.commands.len()),
        Kind::Read => all(ledger.read.len()),
    }
}

/// The string list of a kind that is not an error.
fn strings(ledger: &Ledger, kind: Kind) -> &[String] {
    match kind {
        Kind::Requests => &ledger.requests,
        Kind::Modified => &ledger.modified,
        Kind::Todos => &ledger.todos,
        Kind::Answers => &ledger.answers,
        Kind::Commands => &ledger.commands,
        Kind::Read => &ledger.read,
        Kind::Unresolved | Kind::Resolved => &[],
    }
}

/// The bytes one item adds to the record's JSON (its value and a comma).
fn json_len<T: Serialize>(item: &T) -> usize {
    serde_json::to_vec(item).map_or(0, |v| v.len()) + 1
}

impl Ledger {
    /// Keeps the record within `max_bytes` of JSON ([`Ledger::to_json`]): each item is first
    /// cut to the record's per-item length (8,000 characters for a request or an answer, 2,000
    /// for anything else), then, while the JSON is larger than `max_bytes`, the oldest items
    /// are dropped, least telling kinds first (files read and commands, then resolved errors,
    /// answers, todos, files modified, requests, and unresolved errors last), and counted in
    /// [`Ledger::dropped`] and [`Ledger::left_out`]. A record within the cap keeps every item.
    ///
    /// [`Ledger::merge`] applies it with [`LEDGER_CAP_BYTES`].
    pub fn cap(&mut self, max_bytes: usize) {
        self.clip_to_record();
        let mut target = max_bytes.saturating_sub(COUNTS_SLACK);
        loop {
            let size = serde_json::to_vec(self).map_or(0, |v| v.len());
            if size <= max_bytes || self.items() == 0 {
                return;
            }
            self.drop_oldest(size.saturating_sub(target));
            // Dropping is counted in the JSON too; should the slack not have covered it, the
            // next round aims lower.
            target = target.saturating_sub(COUNTS_SLACK);
        }
    }

    /// Cuts every item to the record's per-item length, keeping the lists free of duplicates.
    fn clip_to_record(&mut self) {
        let long = |list: &mut Vec<String>, max: usize| {
            if list.iter().any(|x| x.len() > max) {
                let clipped: Vec<String> = list.iter().map(|x| clip(x, max)).collect();
                *list = unique(clipped.iter());
            }
        };
        long(&mut self.requests, RECORD_TEXT_CHARS);
        long(&mut self.answers, RECORD_TEXT_CHARS);
        long(&mut self.modified, RECORD_ITEM_CHARS);
        long(&mut self.read, RECORD_ITEM_CHARS);
        long(&mut self.commands, RECORD_ITEM_CHARS);
        for todo in &mut self.todos {
            if todo.len() > RECORD_ITEM_CHARS {
                *todo = clip(todo, RECORD_ITEM_CHARS);
            }
        }
        for e in &mut self.errors {
            for text in [&mut e.message, &mut e.target] {
                if text.len() > RECORD_ITEM_CHARS {
                    *text = clip(text, RECORD_ITEM_CHARS);
                }
            }
        }
    }

    /// Drops the oldest items, by [`DROP_TIERS`], until about `bytes` of JSON are gone.
    fn drop_oldest(&mut self, mut bytes: usize) {
        let positions: Vec<Vec<usize>> = PRIORITY.iter().map(|k| positions(self, *k)).collect();
        let sizes: Vec<Vec<usize>> = PRIORITY
            .iter()
            .zip(&positions)
            .map(|(kind, at)| match kind {
                Kind::Unresolved | Kind::Resolved => {
                    at.iter().map(|&i| json_len(&self.errors[i])).collect()
                }
                _ => {
                    let list = strings(self, *kind);
                    at.iter().map(|&i| json_len(&list[i])).collect()
                }
            })
            .collect();
        let mut keep: Vec<usize> = positions.iter().map(Vec::len).collect();
        let mut kept: Vec<usize> = sizes.iter().map(|s| s.iter().sum()).collect();
        for tier in DROP_TIERS {
            while bytes > 0 {
                let Some(k) = tier
                    .iter()
                    .map(|k| k.index())
                    .filter(|&k| keep[k] > 0)
                    .max_by_key(|&k| kept[k])
                else {
                    break;
                };
                keep[k] -= 1;
                let size = sizes[k][keep[k]];
                kept[k] -= size;
                bytes = bytes.saturating_sub(size);
            }
        }
        let mut dropped = 0u64;
        for (k, kind) in PRIORITY.iter().enumerate() {
            let gone = (positions[k].len() - keep[k]) as u64;
            *self.dropped.get_mut(kind.category()) += gone;
            dropped += gone;
        }
        self.left_out = self.left_out.saturating_add(dropped);
        let kept_of = |kind: Kind| keep[kind.index()];
        let mut keep_error = vec![false; self.errors.len()];
        for kind in [Kind::Unresolved, Kind::Resolved] {
            for &i in positions[kind.index()].iter().take(kept_of(kind)) {
                keep_error[i] = true;
            }
        }
        let mut kept_errors = keep_error.into_iter();
        self.errors.retain(|_| kept_errors.next().unwrap_or(false));
        self.requests.truncate(kept_of(Kind::Requests));
        self.modified.truncate(kept_of(Kind::Modified));
        self.todos.truncate(kept_of(Kind::Todos));
        self.answers.truncate(kept_of(Kind::Answers));
        self.commands.truncate(kept_of(Kind::Commands));
        self.read.truncate(kept_of(Kind::Read));
    }

    /// The ledger as Markdown, opened by [`LEDGER_HEADING`], for the next model to read: the
    /// items chosen to fit `budget` characters (counted as UTF-8 bytes, never fewer than the
    /// characters), the most telling first. The heading, the line under it and the closing
    /// note on what was left out come on top of the budget.
    ///
    /// Each item is first shortened to its own length (600 characters for a request, the most
    /// recent one up to half the budget; 200 for a path, command, error or todo; 400 for an
    /// answer). Then items are taken most recent first, one of each kind in turn: unresolved
    /// errors, requests, files modified and open todos within 70% of the budget; then, within
    /// the whole budget, those and the answers, resolved errors, commands and files read. No
    /// answer, resolved error, command or file read is shown while an unresolved error is left
    /// out. The note says how many items of each category were left out of the text, that the
    /// compaction entry keeps them whole and that `panto ledger SESSION` prints them, and how
    /// many the record itself no longer holds.
    pub fn render_within(&self, budget: usize) -> String {
        let lines = self.lines(Some(budget));
        let taken = choose(&lines, budget);
        self.write(&lines, &taken)
    }

    /// The whole ledger as Markdown, opened by [`LEDGER_HEADING`]: every item of the record as
    /// it is stored, requests oldest first (numbered), every other list most recent first.
    /// Empty categories are left out.
    pub fn render(&self) -> String {
        let lines = self.lines(None);
        let taken: Vec<usize> = lines.iter().map(Vec::len).collect();
        self.write(&lines, &taken)
    }

    /// The text of every item, by kind in [`PRIORITY`] order, most recent first: shortened to
    /// the per-item lengths when there is a `budget`.
    fn lines(&self, budget: Option<usize>) -> Vec<Vec<(usize, String)>> {
        let short = |text: &str, max: usize| match budget {
            Some(_) => clip(text, max),
            None => text.to_owned(),
        };
        PRIORITY
            .iter()
            .map(|kind| {
                let at = positions(self, *kind);
                at.into_iter()
                    .enumerate()
                    .map(|(rank, i)| {
                        let line = match kind {
                            Kind::Unresolved | Kind::Resolved => {
                                let e = &self.errors[i];
                                let shortened = LedgerError {
                                    message: short(&e.message, ITEM_CHARS),
                                    target: short(&e.target, ITEM_CHARS),
                                    ..e.clone()
                                };
                                error_line(&shortened)
                            }
                            Kind::Requests => {
                                let max = match budget {
                                    Some(b) if rank == 0 => (b / 2).max(REQUEST_CHARS),
                                    _ => REQUEST_CHARS,
                                };
                                one_line(&short(&self.requests[i], max))
                            }
                            Kind::Modified | Kind::Commands | Kind::Read => {
                                code_span(&short(&strings(self, *kind)[i], ITEM_CHARS))
                            }
                            Kind::Todos => one_line(&short(&self.todos[i], ITEM_CHARS)),
                            Kind::Answers => one_line(&short(&self.answers[i], ANSWER_CHARS)),
                        };
                        (i, line)
                    })
                    .collect()
            })
            .collect()
    }

    /// Writes the heading, the `taken` first items of each kind's `lines` under their section
    /// titles, and the note on what was left out.
    fn write(&self, lines: &[Vec<(usize, String)>], taken: &[usize]) -> String {
        let mut out = String::new();
        out.push_str(LEDGER_HEADING);
        out.push('\n');
        out.push_str(INTRO);
        let shown = |kind: Kind| &lines[kind.index()][..taken[kind.index()]];
        let requests = shown(Kind::Requests);
        if !requests.is_empty() {
            out.push_str(&title(Section::Requests));
            for (n, (_, line)) in requests.iter().rev().enumerate() {
                let _ = writeln!(out, "{}. {line}", n + 1);
            }
        }
        let bullets = |out: &mut String, section: Section, items: &[(usize, String)]| {
            if !items.is_empty() {
                out.push_str(&title(section));
                for (_, line) in items {
                    let _ = writeln!(out, "- {line}");
                }
            }
        };
        bullets(&mut out, Section::Modified, shown(Kind::Modified));
        // Errors in one list, most recent first, whether resolved or not.
        let mut errors: Vec<&(usize, String)> = shown(Kind::Unresolved)
            .iter()
            .chain(shown(Kind::Resolved))
            .collect();
        errors.sort_by_key(|(i, _)| *i);
        let errors: Vec<(usize, String)> = errors.into_iter().cloned().collect();
        bullets(&mut out, Section::Errors, &errors);
        bullets(&mut out, Section::Todos, shown(Kind::Todos));
        bullets(&mut out, Section::Answers, shown(Kind::Answers));
        bullets(&mut out, Section::Commands, shown(Kind::Commands));
        bullets(&mut out, Section::Read, shown(Kind::Read));
        let mut left_here = LedgerCounts::default();
        for (k, kind) in PRIORITY.iter().enumerate() {
            *left_here.get_mut(kind.category()) += (lines[k].len() - taken[k]) as u64;
        }
        out.push_str(&self.note(&left_here));
        out
    }

    /// The closing note: what this text leaves out and where it is, and what the record itself
    /// no longer holds. Empty when nothing is missing.
    fn note(&self, left_here: &LedgerCounts) -> String {
        let mut out = String::new();
        if !left_here.is_empty() {
            let _ = writeln!(
                out,
                "\n(Left out here: {}; the compaction entry keeps them whole, `panto ledger SESSION` prints them.)",
                counted(left_here)
            );
        }
        let older = self.left_out.saturating_sub(self.dropped.total());
        if !self.dropped.is_empty() || older > 0 {
            let mut parts = Vec::new();
            if !self.dropped.is_empty() {
                parts.push(format!(
                    "{}, the oldest, dropped to keep the record under {} KiB",
                    counted(&self.dropped),
                    LEDGER_CAP_BYTES / 1024
                ));
            }
            if older > 0 {
                parts.push(format!(
                    "{older} older {} an earlier version of panto did not keep",
                    if older == 1 { "item" } else { "items" }
                ));
            }
            let _ = writeln!(out, "\n(Not in the record either: {}.)", parts.join("; "));
        }
        out
    }
}

/// The line under the heading.
const INTRO: &str =
    "Quoted from the summarized turns: it holds what the summary above may have missed.\n";

/// `3 requests, 1 command and 12 files read`.
fn counted(counts: &LedgerCounts) -> String {
    let parts: Vec<String> = CATEGORIES
        .iter()
        .filter(|c| counts.get(**c) > 0)
        .map(|c| {
            let n = counts.get(*c);
            let (one, many) = c.names();
            format!("{n} {}", if n == 1 { one } else { many })
        })
        .collect();
    match parts.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// A titled section of the rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Requests,
    Modified,
    Errors,
    Todos,
    Answers,
    Commands,
    Read,
}

impl Kind {
    fn section(self) -> Section {
        match self {
            Kind::Unresolved | Kind::Resolved => Section::Errors,
            Kind::Requests => Section::Requests,
            Kind::Modified => Section::Modified,
            Kind::Todos => Section::Todos,
            Kind::Answers => Section::Answers,
            Kind::Commands => Section::Commands,
            Kind::Read => Section::Read,
        }
    }
}

/// A section's title line, with the blank line before it.
fn title(section: Section) -> String {
    let name = match section {
        Section::Requests => "The user's requests, oldest first",
        Section::Modified => "Files modified, most recent first",
        Section::Errors => "Errors, most recent first",
        Section::Todos => "Open todos",
        Section::Answers => "The user's answers to questions",
        Section::Commands => "Commands run, most recent first",
        Section::Read => "Files read, most recent first",
    };
    format!("\n{name}:\n")
}

/// How many of each kind's `lines` (in [`PRIORITY`] order) fit `budget` bytes of sections,
/// taken as [`Ledger::render_within`] says.
fn choose(lines: &[Vec<(usize, String)>], budget: usize) -> Vec<usize> {
    // A numbered request line costs its number, which is at most the count's width.
    let number = lines[Kind::Requests.index()].len().to_string().len() + 2;
    let cost = |kind: Kind, line: &str| {
        let prefix = if kind == Kind::Requests { number } else { 2 };
        prefix + line.len() + 1
    };
    let mut taken = vec![0usize; PRIORITY.len()];
    let mut titled: Vec<Section> = Vec::new();
    let mut used = 0usize;
    let first = budget * FIRST_SHARE_PERCENT / 100;
    for (limit, kinds) in [(first, &FIRST[..]), (budget, &PRIORITY[..])] {
        // By kind: whether it takes no more items in this pass.
        let mut blocked = [true; PRIORITY.len()];
        for kind in kinds {
            blocked[kind.index()] = false;
        }
        while blocked.iter().any(|b| !b) {
            for kind in kinds {
                let k = kind.index();
                if blocked[k] {
                    continue;
                }
                let Some((_, line)) = lines[k].get(taken[k]) else {
                    blocked[k] = true;
                    continue;
                };
                let u = Kind::Unresolved.index();
                if kind.waits_for_unresolved() && taken[u] < lines[u].len() {
                    // Its turn comes once every unresolved error is taken; if they can no
                    // longer be, it never does.
                    if blocked[u] {
                        blocked[k] = true;
                    }
                    continue;
                }
                let section = kind.section();
                let heading = if titled.contains(&section) {
                    0
                } else {
                    title(section).len()
                };
                let n = cost(*kind, line) + heading;
                if used + n <= limit {
                    used += n;
                    taken[k] += 1;
                    if heading > 0 {
                        titled.push(section);
                    }
                } else {
                    blocked[k] = true;
                }
            }
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    //! The record after merges holds every item under the cap; a rendering keeps within its
    //! budget and never leaves out an unresolved error while it shows a less telling item.

    use panto_model::{ContentBlock, Message, Role};
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// One thing that happens in a conversation.
    #[derive(Clone, Debug)]
    enum Event {
        Request(String),
        Edit(String),
        Read(String),
        Run {
            command: String,
            error: Option<String>,
        },
        Todos(Vec<String>),
        Answer(String),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            "[a-z]{1,6}( [a-z]{1,8}){0,12}".prop_map(|s| Event::Request(format!("ask {s}"))),
            "src/[a-z]{1,6}\\.rs".prop_map(Event::Edit),
            "(src|docs)/[a-z]{1,6}\\.(rs|md)".prop_map(Event::Read),
            (
                "(cargo|make|npm) [a-z]{1,6}",
                prop::option::of("error: [a-z]{1,10}( [a-z]{1,8}){0,6}")
            )
                .prop_map(|(command, error)| Event::Run { command, error }),
            prop::collection::vec("[a-z]{1,10}", 0..4).prop_map(Event::Todos),
            "[a-z]{1,10}( [a-z]{1,6}){0,4}".prop_map(Event::Answer),
        ]
    }

    /// The messages of `events`, with call ids that start with `part`.
    fn messages(part: usize, events: &[Event]) -> Vec<Message> {
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let id = format!("p{part}c{i}");
            let (name, input, result, failed) = match e {
                Event::Request(text) => {
                    out.push(Message::user_text(text.clone()));
                    continue;
                }
                Event::Edit(path) => ("edit", json!({"path": path}), "ok".to_owned(), false),
                Event::Read(path) => ("read", json!({"path": path}), "text".to_owned(), false),
                Event::Run { command, error } => (
                    "bash",
                    json!({"command": command}),
                    error.clone().unwrap_or_else(|| "ok".to_owned()),
                    error.is_some(),
                ),
                Event::Todos(list) => (
                    "TodoWrite",
                    json!({"todos": list.iter().map(|t| json!({"content": t, "status": "pending"})).collect::<Vec<_>>()}),
                    "ok".to_owned(),
                    false,
                ),
                Event::Answer(text) => ("ask_user", json!({"question": "?"}), text.clone(), false),
            };
            out.push(Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(&id, name, input)],
            ));
            out.push(Message::new(
                Role::User,
                vec![ContentBlock::tool_result(&id, result, failed)],
            ));
        }
        out
    }

    /// The text of a rendering between its opening lines and its closing note.
    fn body(text: &str) -> &str {
        let text = text
            .strip_prefix(LEDGER_HEADING)
            .and_then(|t| t.strip_prefix('\n'))
            .and_then(|t| t.strip_prefix(INTRO))
            .unwrap_or_else(|| panic!("no heading: {text}"));
        let end = ["\n(Left out here", "\n(Not in the record"]
            .iter()
            .filter_map(|n| text.find(n))
            .min()
            .unwrap_or(text.len());
        &text[..end]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// After any sequence of merges (each stored and read back as a chained compaction
        /// does) the record holds every item of every part, and every rendering of it keeps
        /// within its budget and shows no less telling item while an unresolved error is left
        /// out.
        #[test]
        fn the_record_keeps_every_item_and_a_rendering_keeps_its_budget(
            parts in prop::collection::vec(prop::collection::vec(event(), 0..24), 1..6),
            budgets in prop::collection::vec(0usize..6_000, 1..4),
        ) {
            let mut record = Ledger::default();
            let mut derived = Vec::new();
            for (k, events) in parts.iter().enumerate() {
                let part = Ledger::from_messages(&messages(k, events));
                let stored = Ledger::from_json(&record.to_json()).unwrap();
                record = Ledger::merge(&stored, &part);
                derived.push(part);
            }
            prop_assert!(serde_json::to_vec(&record).unwrap().len() <= LEDGER_CAP_BYTES);
            prop_assert_eq!(record.left_out, 0);
            for part in &derived {
                for r in &part.requests {
                    prop_assert!(record.requests.contains(r), "request {} lost", r);
                }
                for f in &part.modified {
                    prop_assert!(record.modified.contains(f), "file {} lost", f);
                }
                for f in &part.read {
                    prop_assert!(record.read.contains(f) || record.modified.contains(f));
                }
                for c in &part.commands {
                    prop_assert!(record.commands.contains(c), "command {} lost", c);
                }
                for a in &part.answers {
                    prop_assert!(record.answers.contains(a));
                }
                for e in &part.errors {
                    prop_assert!(record.errors.iter().any(|x| x.tool == e.tool
                        && x.target == e.target && x.message == e.message));
                }
            }
            for budget in budgets {
                let text = record.render_within(budget);
                prop_assert!(body(&text).len() <= budget, "{} > {budget}:\n{text}", body(&text).len());
                let lines = record.lines(Some(budget));
                let taken = choose(&lines, budget);
                prop_assert_eq!(&text, &record.write(&lines, &taken));
                let u = Kind::Unresolved.index();
                if PRIORITY.iter().any(|k| k.waits_for_unresolved() && taken[k.index()] > 0) {
                    prop_assert_eq!(taken[u], lines[u].len(), "{}", text);
                }
                // Every unresolved error shown is shown whole, as the text says.
                let unresolved_shown = text.matches("(not resolved in the summarized turns)").count();
                prop_assert_eq!(unresolved_shown, taken[u]);
                let shown: usize = taken.iter().sum();
                if shown < record.items() {
                    prop_assert!(text.contains("`panto ledger SESSION`"), "{}", text);
                }
            }
            // The whole rendering holds every item.
            let all = record.render();
            for f in record.modified.iter().chain(&record.commands).chain(&record.read) {
                prop_assert!(all.contains(f.as_str()));
            }
            prop_assert!(!all.contains("Left out here"));
        }
    }

    /// A ledger with `n` items of every kind, numbered, most recent first.
    fn numbered(n: usize) -> Ledger {
        let list = |what: &str| (0..n).rev().map(|i| format!("{what} {i}")).collect();
        let mut l = Ledger::default();
        l.requests = list("request");
        l.modified = list("src/modified");
        l.read = list("src/read");
        l.commands = list("command");
        l.todos = list("todo");
        l.answers = list("answer");
        l.errors = (0..n)
            .rev()
            .map(|i| LedgerError {
                tool: "bash".into(),
                target: format!("make {i}"),
                message: format!("error: failure {i}"),
                count: 1,
                resolved: (i % 2 == 0).then(|| "`make`".to_owned()),
            })
            .collect();
        l
    }

    #[test]
    fn a_record_past_its_cap_drops_the_oldest_of_the_least_telling_kinds_and_counts_them() {
        let mut l = numbered(400);
        let before = serde_json::to_vec(&l).unwrap().len();
        let cap = before * 3 / 4;
        l.cap(cap);
        let after = serde_json::to_vec(&l).unwrap().len();
        assert!(after <= cap, "{after} > {cap}");
        // Files read and commands go first (all of them here), then resolved errors, the
        // oldest first; requests and unresolved errors stay whole.
        assert!(l.read.is_empty() && l.commands.is_empty());
        assert_eq!((l.dropped.read, l.dropped.commands), (400, 400));
        assert_eq!(l.requests.len(), 400);
        let unresolved = l.errors.iter().filter(|e| e.resolved.is_none()).count();
        assert_eq!(unresolved, 200);
        let resolved: Vec<&LedgerError> =
            l.errors.iter().filter(|e| e.resolved.is_some()).collect();
        assert!(resolved.len() < 200);
        assert_eq!(resolved[0].target, "make 398");
        assert_eq!(l.dropped.errors, 200 - resolved.len() as u64);
        assert_eq!(l.left_out, l.dropped.total());
        // Read back as stored, the counts survive.
        let stored = Ledger::from_json(&l.to_json()).unwrap();
        assert_eq!(stored, l);
        let text = stored.render_within(100_000);
        assert!(
            text.contains("(Not in the record either: "),
            "{}",
            &text[text.len() - 300..]
        );
        assert!(text.contains("the oldest, dropped to keep the record under 256 KiB"));
    }

    #[test]
    fn a_tiny_cap_drops_everything_and_unresolved_errors_last() {
        let mut l = numbered(50);
        let two_errors = serde_json::to_vec(&l.errors[..2]).unwrap().len();
        let empty = serde_json::to_vec(&Ledger::default()).unwrap().len();
        l.cap(empty + 600 + two_errors);
        assert!(l.requests.is_empty() && l.commands.is_empty() && l.todos.is_empty());
        assert!(l.errors.iter().all(|e| e.resolved.is_none()));
        assert!(!l.errors.is_empty());
        l.cap(0);
        assert_eq!(l.items(), 0);
        assert_eq!(l.left_out, 350);
    }

    #[test]
    fn long_items_are_cut_to_the_record_s_lengths() {
        let mut l = Ledger::default();
        l.requests = vec!["r".repeat(20_000), "short".into()];
        l.commands = vec!["c".repeat(5_000)];
        l.cap(LEDGER_CAP_BYTES);
        assert_eq!(l.requests[0].chars().count(), RECORD_TEXT_CHARS);
        assert!(l.requests[0].ends_with('…'));
        assert_eq!(l.requests[1], "short");
        assert_eq!(l.commands[0].chars().count(), RECORD_ITEM_CHARS);
        assert_eq!(l.left_out, 0);
    }

    #[test]
    fn a_rendering_takes_the_most_telling_first_and_says_what_it_left_out() {
        let l = numbered(100);
        let text = l.render_within(2_000);
        assert!(body(&text).len() <= 2_000);
        // Unresolved errors, requests and files modified come first, most recent first.
        assert!(text.contains("make 99"), "{text}");
        assert!(text.contains(". request 99\n"), "{text}");
        assert!(text.contains("`src/modified 99`"), "{text}");
        assert!(!text.contains("`src/read 0`"));
        let note = &text[text.find("\n(Left out here").unwrap()..];
        assert!(note.contains("requests"), "{note}");
        assert!(note.contains("commands"), "{note}");
        assert!(
            note.contains(
                "; the compaction entry keeps them whole, `panto ledger SESSION` prints them.)"
            ),
            "{note}"
        );
        // Numbers add up: what is shown and what is counted as left out is the record.
        let shown_requests = text.lines().filter(|l| l.contains(". request ")).count();
        assert!(
            note.contains(&format!("{} requests", 100 - shown_requests)),
            "{note}"
        );
        // With room for everything, nothing is left out and nothing is said about it.
        let all = l.render_within(1_000_000);
        assert!(!all.contains("Left out here"));
        assert_eq!(all.lines().count(), l.render().lines().count());
    }

    #[test]
    fn the_counts_read_old_records_and_write_only_what_is_not_zero() {
        // A record an older panto wrote: `left_out` is an integer and there is no `dropped`.
        let old = json!({"requests": ["fix it"], "modified": ["a.rs"], "read": [], "errors": [],
                         "commands": ["make"], "todos": [], "answers": [], "left_out": 12});
        let l = Ledger::from_json(&old).unwrap();
        assert_eq!(l.left_out, 12);
        assert!(l.dropped.is_empty());
        assert_eq!(l.requests, ["fix it"]);
        let text = l.render_within(10_000);
        assert!(
            text.contains("(Not in the record either: 12 older items an earlier version of panto did not keep.)"),
            "{text}"
        );
        // Written back, it keeps its number, and an older reader (which knows `left_out` as an
        // integer) still finds one.
        let again = l.to_json();
        assert_eq!(again["left_out"], 12);
        assert!(again.get("dropped").is_none());
        // Counts given by category raise a smaller total.
        let new = json!({"left_out": 1, "dropped": {"commands": 3, "read": 2}});
        let l = Ledger::from_json(&new).unwrap();
        assert_eq!((l.left_out, l.dropped.commands, l.dropped.read), (5, 3, 2));
        assert_eq!(l.to_json()["dropped"], json!({"commands": 3, "read": 2}));
        // Merging adds the counts.
        let merged = Ledger::merge(&l, &l);
        assert_eq!((merged.left_out, merged.dropped.commands), (10, 6));
    }
}
