//! The rendering: what the next model reads of the record, chosen within a character budget
//! ([`Ledger::render_within`]): each kind of item within its fair share of the budget
//! (`share.rs`), the most telling of each first, then what is left by priority; with a note of
//! what it left out and where the record is. Or all of it ([`Ledger::render`]).

use std::fmt::Write as _;

use super::ids::{IdentifierKind, KINDS};
use super::record::{CATEGORIES, Kind, PRIORITY, WEIGHTS, fair_shares, positions, strings};
use super::{
    ANSWER_CHARS, ITEM_CHARS, LEDGER_CAP_BYTES, LEDGER_HEADING, Ledger, LedgerCounts, LedgerError,
    REQUEST_CHARS, clip, code_span, one_line,
};

impl Ledger {
    /// The ledger as Markdown, opened by [`LEDGER_HEADING`], for the next model to read: the
    /// items chosen to fit `budget` characters (counted as UTF-8 bytes, never fewer than the
    /// characters). The heading, the line under it and the closing note on what was left out
    /// come on top of the budget.
    ///
    /// Each item is first shortened to its own length (600 characters for a request, the most
    /// recent one up to the requests' share of the budget; 200 for a path, command, error,
    /// todo or identifier; 400 for an answer). Then each kind (unresolved errors, requests,
    /// files modified, open todos, answers, resolved errors, each kind of identifier, commands,
    /// files read) takes its items, most telling first (most recent; identifiers most
    /// referenced), within its fair share of the budget (`share.rs`: a kind that needs less
    /// than its share takes all it needs, the others divide the rest by weight), so that no
    /// kind is emptied by another; what is left goes one item of each kind in turn, in that
    /// order. The note says how many items of each category were left out of the text, that
    /// the compaction entry keeps them whole (it names no command: a library agent's model has
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

    /// The text of every item, by kind in [`PRIORITY`] order, most telling first: shortened to
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
                                    Some(b) if rank == 0 => latest_request_chars(b),
                                    _ => REQUEST_CHARS,
                                };
                                one_line(&short(&self.requests[i], max))
                            }
                            Kind::Modified | Kind::Commands | Kind::Read => {
                                code_span(&short(&strings(self, *kind)[i], ITEM_CHARS))
                            }
                            Kind::Todos => one_line(&short(&self.todos[i], ITEM_CHARS)),
                            Kind::Answers => one_line(&short(&self.answers[i], ANSWER_CHARS)),
                            Kind::Id(IdentifierKind::ErrorLine) => {
                                one_line(&short(&self.identifiers.error_lines[i].text, 120))
                            }
                            Kind::Id(k) => {
                                code_span(&short(&self.identifiers.get(*k)[i].text, ITEM_CHARS))
                            }
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
        let mut titled = false;
        for kind in KINDS.into_iter().filter(|&k| inline(k)) {
            let items = shown(Kind::Id(kind));
            if items.is_empty() {
                continue;
            }
            if !titled {
                out.push_str(&title(Section::Identifiers));
                titled = true;
            }
            out.push_str(&lead(kind));
            for (_, span) in items {
                out.push(' ');
                out.push_str(span);
            }
            out.push('\n');
        }
        bullets(
            &mut out,
            Section::ErrorLines,
            shown(Kind::Id(IdentifierKind::ErrorLine)),
        );
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
    Identifiers,
    ErrorLines,
    Commands,
    Read,
}

/// Whether identifiers of `kind` are written inline, one line each under
/// [`Section::Identifiers`]: all but error lines, which have a section of their own.
fn inline(kind: IdentifierKind) -> bool {
    kind != IdentifierKind::ErrorLine
}

/// The start of an inline kind's line: `- hex ids:`.
fn lead(kind: IdentifierKind) -> String {
    format!("- {}:", kind.names().1)
}

/// The most characters of the most recent request: the requests' sure share of the budget.
fn latest_request_chars(budget: usize) -> usize {
    (budget * WEIGHTS[Kind::Requests.index()] as usize / 100).max(REQUEST_CHARS)
}

impl Kind {
    fn section(self) -> Section {
        match self {
            Kind::Unresolved | Kind::Resolved => Section::Errors,
            Kind::Requests => Section::Requests,
            Kind::Modified => Section::Modified,
            Kind::Todos => Section::Todos,
            Kind::Answers => Section::Answers,
            Kind::Id(IdentifierKind::ErrorLine) => Section::ErrorLines,
            Kind::Id(_) => Section::Identifiers,
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
        Section::Identifiers => "Identifiers in the summarized turns, most referenced first",
        Section::ErrorLines => "Error lines printed, most referenced first",
        Section::Commands => "Commands run, most recent first",
        Section::Read => "Files read, most recent first",
    };
    format!("\n{name}:\n")
}

/// How many of each kind's `lines` (in [`PRIORITY`] order) fit `budget` bytes of sections,
/// taken as [`Ledger::render_within`] says: each kind within its fair share, then one item of
/// each kind in turn while any fits.
pub(super) fn choose(lines: &[Vec<(usize, String)>], budget: usize) -> Vec<usize> {
    let costs = Costs::new(lines);
    let needs: Vec<usize> = PRIORITY
        .iter()
        .map(|kind| {
            let k = kind.index();
            if lines[k].is_empty() {
                return 0;
            }
            let heads = title(kind.section()).len() + costs.lead(*kind);
            heads
                + lines[k]
                    .iter()
                    .map(|(_, l)| costs.item(*kind, l))
                    .sum::<usize>()
        })
        .collect();
    let shares = fair_shares(budget, &needs);
    let mut taking = Taking {
        taken: vec![0; PRIORITY.len()],
        spent: vec![0; PRIORITY.len()],
        titled: Vec::new(),
        used: 0,
    };
    for kind in PRIORITY {
        let k = kind.index();
        while let Some((_, line)) = lines[k].get(taking.taken[k]) {
            let n = taking.cost(&costs, kind, line);
            if taking.spent[k] + n > shares[k] || taking.used + n > budget {
                break;
            }
            taking.take(kind, n);
        }
    }
    // What is left: one item of each kind in turn, in priority order, while any fits.
    let mut blocked = [false; PRIORITY.len()];
    while blocked.iter().any(|b| !b) {
        for kind in PRIORITY {
            let k = kind.index();
            if blocked[k] {
                continue;
            }
            let Some((_, line)) = lines[k].get(taking.taken[k]) else {
                blocked[k] = true;
                continue;
            };
            let n = taking.cost(&costs, kind, line);
            if taking.used + n <= budget {
                taking.take(kind, n);
            } else {
                blocked[k] = true;
            }
        }
    }
    taking.taken
}

/// What each item of a rendering costs, in bytes of its section.
struct Costs {
    /// The width of a request's number and its `. `.
    number: usize,
}

impl Costs {
    fn new(lines: &[Vec<(usize, String)>]) -> Costs {
        Costs {
            number: lines[Kind::Requests.index()].len().to_string().len() + 2,
        }
    }

    /// An item's own bytes: its line with its bullet or number and newline, or for an
    /// identifier written inline, a space before it.
    fn item(&self, kind: Kind, line: &str) -> usize {
        match kind {
            Kind::Requests => self.number + line.len() + 1,
            Kind::Id(k) if inline(k) => 1 + line.len(),
            _ => 2 + line.len() + 1,
        }
    }

    /// What a kind's first item costs on top: an inline kind's lead and the line's end.
    fn lead(&self, kind: Kind) -> usize {
        match kind {
            Kind::Id(k) if inline(k) => lead(k).len() + 1,
            _ => 0,
        }
    }
}

/// The items taken so far.
struct Taking {
    taken: Vec<usize>,
    /// By kind: the bytes its items took.
    spent: Vec<usize>,
    /// The sections whose title is written.
    titled: Vec<Section>,
    used: usize,
}

impl Taking {
    /// What taking the next item of `kind`, `line`, costs: with its section's title and its
    /// kind's lead when they are not written yet.
    fn cost(&self, costs: &Costs, kind: Kind, line: &str) -> usize {
        let section = kind.section();
        let title_cost = if self.titled.contains(&section) {
            0
        } else {
            title(section).len()
        };
        let lead_cost = if self.taken[kind.index()] == 0 {
            costs.lead(kind)
        } else {
            0
        };
        title_cost + lead_cost + costs.item(kind, line)
    }

    fn take(&mut self, kind: Kind, cost: usize) {
        let k = kind.index();
        self.taken[k] += 1;
        self.spent[k] += cost;
        self.used += cost;
        let section = kind.section();
        if !self.titled.contains(&section) {
            self.titled.push(section);
        }
    }
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
