//! The ledger on a compaction entry: where the previous record is stored, the budget of its
//! rendering, and the summary text with that rendering after it. The ledger itself is built,
//! merged and rendered by `panto_transcript::Ledger`; the record on the entry is whole (up to
//! `panto_transcript::LEDGER_CAP_BYTES`), only the rendering is budgeted.

use panto_model::EffectiveContext;
use panto_transcript::{Ledger, strip_ledger};

/// The smallest rendering budget, in characters, whatever the prefix's size.
pub const MIN_LEDGER_CHARS: usize = 2_000;

/// The budget, in characters, of the ledger's rendering after the summary
/// ([`Ledger::render_within`]): the previous rendering's size (`previous_chars`, so that a
/// chain never shrinks it) plus an eighth of what this compaction summarizes (`new_chars`: the
/// prefix's transcript), at least [`MIN_LEDGER_CHARS`], and at most half the summary's output
/// budget (`max_output_tokens` tokens at about four characters a token, halved). A `limit`
/// (in tokens) caps it at `limit / 16` characters as well; the compactor passes none, since it
/// bounds the rendering by the window in another way: it renders and sizes it until it fits
/// what the request after the compaction leaves beside the summary, the kept turns and the
/// agent's own parts (docs/compaction.md, "The ledger"), which at a small window may be more
/// or less than `limit / 16`. It bounds only what the next model reads: the record stored on
/// the entry keeps every item.
pub fn ledger_budget(
    max_output_tokens: u32,
    previous_chars: usize,
    new_chars: usize,
    limit: Option<u64>,
) -> usize {
    let most = (max_output_tokens as usize).saturating_mul(2);
    let window = limit.map_or(usize::MAX, |l| {
        usize::try_from(l / 16).unwrap_or(usize::MAX)
    });
    (previous_chars + new_chars / 8)
        .max(MIN_LEDGER_CHARS)
        .min(most.max(1))
        .min(window)
}

/// A summary with the ledger rendered after it: the model's text without any ledger it copied,
/// a blank line, then the ledger's rendering within `budget` characters
/// ([`Ledger::render_within`], which also says what it left out and where the whole record
/// is), when the ledger records anything.
pub fn with_ledger(summary: &str, ledger: &Ledger, budget: usize) -> String {
    let text = strip_ledger(summary).trim_end();
    if ledger.is_empty() {
        return text.to_owned();
    }
    format!("{text}\n\n{}", ledger.render_within(budget))
}

/// The note that ends every summary panto writes for an agent that offers its model the
/// recall tool ([`crate::RECALL_TOOL`]): the details the summary leaves out are kept, and the
/// tool finds them. It names no command: a library agent's model has none to run. (Without the
/// tool no note is added; the ledger's own note says the compaction entry keeps what its
/// rendering left out.)
pub fn recall_note() -> String {
    format!(
        "{NOTE_START} the `{}` tool searches them and fetches any item whole by its id.)",
        crate::RECALL_TOOL
    )
}

/// How [`recall_note`] starts.
const NOTE_START: &str = "(Earlier details this summary leaves out are not lost:";

/// `summary` ending with [`recall_note`] when the recall tool is offered, once (a note a
/// model copied from the previous summary is taken off first); `summary` as it is otherwise.
pub fn with_recall_note(summary: &str, tool_offered: bool) -> String {
    if !tool_offered {
        return summary.to_owned();
    }
    let mut text = summary.trim_end();
    if let Some(at) = text.rfind(NOTE_START)
        && text[at..].ends_with(')')
        && !text[at..].contains('\n')
    {
        text = text[..at].trim_end();
    }
    format!("{text}\n\n{}", recall_note())
}

/// The length of the ledger rendered into the active summary of `context`, 0 when it has none.
pub(crate) fn rendered_len(context: &EffectiveContext) -> usize {
    context
        .summary()
        .map_or(0, |s| s.len() - strip_ledger(s).len())
}

/// The ledger stored on the compaction entry of `context`, if any (an unreadable one counts as
/// none: the summary text still carries its rendering).
pub fn previous_ledger(context: &EffectiveContext) -> Ledger {
    let stored = context
        .compaction
        .as_ref()
        .and_then(|c| c.extra.get(LEDGER_FIELD));
    match stored.map(Ledger::from_json) {
        Some(Some(l)) => l,
        Some(None) => {
            tracing::warn!("the active compaction's ledger is unreadable; starting a new one");
            Ledger::default()
        }
        None => Ledger::default(),
    }
}

/// The field of the compaction entry that stores the ledger.
pub const LEDGER_FIELD: &str = "ledger";
