//! The rendering: what the next model reads of the record, chosen within a character budget,
//! most telling first ([`Ledger::render_within`]), with a note of what it left out and where
//! the record is; or all of it ([`Ledger::render`]).

use std::fmt::Write as _;

use super::record::{CATEGORIES, Kind, PRIORITY, positions, strings};
use super::{
    ANSWER_CHARS, ITEM_CHARS, LEDGER_CAP_BYTES, LEDGER_HEADING, Ledger, LedgerCounts, LedgerError,
    REQUEST_CHARS, clip, code_span, one_line,
};

/// The kinds a rendering takes first, within [`FIRST_SHARE_PERCENT`] of its budget.
const FIRST: [Kind; 4] = [
    Kind::Unresolved,
    Kind::Requests,
    Kind::Modified,
    Kind::Todos,
];

/// The share of a rendering's budget kept for [`FIRST`] before the others get any.
const FIRST_SHARE_PERCENT: usize = 70;

impl Kind {
    /// Whether the rendering may take this kind while unresolved errors are still left out.
    pub(super) fn waits_for_unresolved(self) -> bool {
        matches!(
            self,
            Kind::Answers | Kind::Resolved | Kind::Commands | Kind::Read
        )
    }
}

impl Ledger {
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
    /// compaction entry keeps them whole (it names no command: a library agent's model has
    /// none to run), and how many the record itself no longer holds.
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
    pub(super) fn lines(&self, budget: Option<usize>) -> Vec<Vec<(usize, String)>> {
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
    pub(super) fn write(&self, lines: &[Vec<(usize, String)>], taken: &[usize]) -> String {
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
                "\n(Left out here: {}; the compaction entry keeps them whole.)",
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
pub(super) const INTRO: &str =
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
pub(super) fn choose(lines: &[Vec<(usize, String)>], budget: usize) -> Vec<usize> {
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

/// An error's line: the tool, its target, the message, how often and whether it was resolved.
fn error_line(e: &LedgerError) -> String {
    let mut line = format!(
        "{} on {}: {}",
        code_span(&e.tool),
        code_span(&e.target),
        e.message
    );
    if e.target.is_empty() {
        line = format!("{}: {}", code_span(&e.tool), e.message);
    }
    if e.count > 1 {
        let _ = write!(line, " (×{})", e.count);
    }
    match &e.resolved {
        Some(how) => {
            let _ = write!(line, " (resolved: later {how} succeeded)");
        }
        None => line.push_str(" (not resolved in the summarized turns)"),
    }
    line
}
