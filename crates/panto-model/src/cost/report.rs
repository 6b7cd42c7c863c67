//! What a whole session cost, turn by turn ([`CostReport`]): every reply and every compaction of
//! its history weighed by [`usage_cost`], in rows that add up to the totals.

use crate::entry::Entry;
use crate::message::{ContentBlock, Message, Role, Usage};

use super::{Cost, Prices, usage_cost};

/// What a row of a [`CostReport`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CostRowKind {
    /// A user turn: the replies to one prompt, tool loop included.
    Turn,
    /// A compaction's own requests (its summary).
    Compaction,
}

/// One row of a [`CostReport`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CostRow {
    /// A turn or a compaction.
    pub kind: CostRowKind,
    /// The user turn, from 1 (a compaction's is the turn it came after; replies before any
    /// prompt are turn 0).
    pub turn: usize,
    /// The id of the turn's prompt, or of the compaction entry.
    pub id: Option<String>,
    /// The model of the turn's last reply, or the one that wrote the summary.
    pub model: Option<String>,
    /// What it cost.
    pub cost: Cost,
    /// For a compaction: the cache writes of the first reply after it (what the compaction made
    /// the next request write again), once one came.
    pub written_after: Option<u64>,
}

/// What a session cost: a row per user turn and per compaction, in session order, and the
/// totals, which are the rows' sum in every field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CostReport {
    /// The rows.
    pub rows: Vec<CostRow>,
    /// Their sum.
    pub totals: Cost,
}

impl CostReport {
    /// The report of `entries` (a session's history, in order), as [`CostCounter`] counts it.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = &'a Entry>,
        fallback_model: Option<&str>,
        prices: &Prices,
    ) -> CostReport {
        let mut counter = CostCounter::new(fallback_model, prices.clone());
        for entry in entries {
            counter.push(entry);
        }
        counter.finish()
    }
}

/// Builds a [`CostReport`] one entry at a time, so that a history is read page by page: each
/// assistant reply's usage weighed for its model (`fallback_model` for a reply that names none)
/// with the prices; kept copies of a compaction are not counted again (their originals were); a
/// compaction counts its entry's `usage`; a user message with a prompt starts a turn.
#[derive(Debug)]
pub struct CostCounter {
    report: CostReport,
    fallback_model: Option<String>,
    prices: Prices,
    turn: usize,
    /// The row of the current turn.
    open: Option<usize>,
    /// The compaction rows waiting for the first reply after them.
    waiting: Vec<usize>,
}

impl CostCounter {
    /// A counter with nothing counted.
    pub fn new(fallback_model: Option<&str>, prices: Prices) -> CostCounter {
        CostCounter {
            report: CostReport::default(),
            fallback_model: fallback_model.map(str::to_owned),
            prices,
            turn: 0,
            open: None,
            waiting: Vec::new(),
        }
    }

    /// Counts the next entry of the history.
    pub fn push(&mut self, entry: &Entry) {
        match entry {
            Entry::Message(m) if m.kept_by().is_some() => {}
            Entry::Message(m) if m.role == Role::User && is_prompt(m) => {
                self.turn += 1;
                self.open = Some(self.row(CostRowKind::Turn, m.id.as_deref(), None));
            }
            Entry::Message(m) if m.role == Role::Assistant => {
                let Some(usage) = &m.usage else { return };
                let model = m.model.as_deref().or(self.fallback_model.as_deref());
                let cost = usage_cost(usage, model, &self.prices);
                let model = model.map(str::to_owned);
                for row in self.waiting.drain(..) {
                    self.report.rows[row].written_after = Some(cost.cache_write_tokens);
                }
                let row = match self.open {
                    Some(row) => row,
                    None => self.row(CostRowKind::Turn, None, None),
                };
                self.open = Some(row);
                self.report.rows[row].cost += cost;
                self.report.rows[row].model = model;
            }
            Entry::Compaction(c) => {
                let usage = c
                    .extra
                    .get("usage")
                    .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok());
                let model = c.model.as_deref().or(self.fallback_model.as_deref());
                let cost =
                    usage.map_or_else(Cost::default, |u| usage_cost(&u, model, &self.prices));
                let model = model.map(str::to_owned);
                let row = self.row(CostRowKind::Compaction, c.id.as_deref(), model);
                self.report.rows[row].cost = cost;
                // Replies after a compaction belong to the turn it interrupted.
                self.waiting.push(row);
            }
            _ => {}
        }
    }

    /// The report, its totals the sum of its rows.
    pub fn finish(mut self) -> CostReport {
        self.report.totals = self.report.rows.iter().map(|r| r.cost).sum();
        self.report
    }

    /// A new row of `kind` in the current turn; its index.
    fn row(&mut self, kind: CostRowKind, id: Option<&str>, model: Option<String>) -> usize {
        self.report.rows.push(CostRow {
            kind,
            turn: self.turn,
            id: id.map(str::to_owned),
            model,
            cost: Cost::default(),
            written_after: None,
        });
        self.report.rows.len() - 1
    }
}

/// Whether a user message is a prompt (some of its content is not a tool result).
fn is_prompt(message: &Message) -> bool {
    message
        .content
        .iter()
        .any(|b| !matches!(b, ContentBlock::ToolResult(_)))
}
