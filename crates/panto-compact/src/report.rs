//! What a compaction run did: its report, the fold's steps and elisions, and the outcome.

use std::ops::Range;

use panto_model::{EffectiveContext, Entry, Trigger, Usage};

use crate::attempt::AttemptFailure;
use crate::config::CompactionStrategy;
use crate::plan::{NothingToCompact, Plan};

/// One request of a fold, as it was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldStep {
    /// The turns summarized, as indices into the prefix's turns: every turn the request held
    /// any of (a turn the fold cut between requests is in the ranges of both).
    pub turns: Range<usize>,
    /// The messages of those turns, as a range of the context's messages.
    pub messages: Range<usize>,
    /// The model that answered.
    pub model: String,
    /// Whether `compaction_model` failed and the active model answered.
    pub fallback: bool,
    /// panto's estimate of the request's input (system prompt and user prompt).
    pub input_tokens: u64,
    /// The output limit the request was sent with.
    pub max_output_tokens: u32,
    /// panto's estimate of the summary it returned.
    pub summary_tokens: u64,
    /// Item bodies elided in this request's transcript.
    pub elided: usize,
    /// Requests of this step the provider rejected as too large before this one fitted.
    pub rejected: usize,
    /// Why no model's summary of this step counts, when none did: panto's record of its turns
    /// went on as the summary so far instead ([`CompactionEvent::StepRecorded`](crate::CompactionEvent::StepRecorded)), and
    /// [`FoldStep::model`] is [`RECORD_ONLY_MODEL`](crate::RECORD_ONLY_MODEL).
    pub recorded: Option<String>,
}

/// An item body left out of a compaction request's transcript because it could not fit any
/// request. The session keeps it whole.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElidedItem {
    /// The index of the message in the context.
    pub message: usize,
    /// Its id, when it has one.
    pub message_id: Option<String>,
    /// The index of the content block in the message.
    pub block: usize,
    /// The body's size in bytes.
    pub bytes: usize,
    /// The bytes kept in the transcript (head and tail).
    pub kept: usize,
}

/// A block a clearing replaced by a placeholder (a tool result, an image) or removed (the
/// thinking of a finished tool loop). The session keeps the original, which `panto show` and
/// the recall tool fetch by [`ClearedItem::id`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClearedItem {
    /// Its item id (`panto_model::Item`): the call id for a tool result, `MESSAGE#BLOCK` for
    /// another block; empty when its message has no id.
    pub id: String,
    /// The id of the message it was in, when it has one.
    pub message: Option<String>,
    /// The index of its block in that message.
    pub block: usize,
    /// What it was: `tool_result`, `image` or `thinking`.
    pub kind: &'static str,
    /// Its size in bytes (of text, or of an image's data).
    pub bytes: usize,
}

impl ClearedItem {
    /// Block `block` of the message `message` (by id, when it has one), of kind `kind` and
    /// `bytes` bytes, named `MESSAGE#BLOCK`.
    pub fn new(
        message: Option<&str>,
        block: usize,
        kind: &'static str,
        bytes: usize,
    ) -> ClearedItem {
        ClearedItem {
            id: message.map_or(String::new(), |m| format!("{m}#{block}")),
            message: message.map(str::to_owned),
            block,
            kind,
            bytes,
        }
    }

    /// The item with id `id` (a tool result's call id).
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> ClearedItem {
        self.id = id.into();
        self
    }
}

/// What a finished compaction did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompactionReport {
    /// The id of the compaction entry.
    pub id: String,
    /// The new summary.
    pub summary: String,
    /// What started it.
    pub trigger: Trigger,
    /// The model that wrote the summary.
    pub model: String,
    /// The name of its provider.
    pub provider: String,
    /// Whether `compaction_model` failed and the active model wrote the summary.
    pub fallback: bool,
    /// Why `compaction_model` failed, when the fallback ran.
    pub fallback_cause: Option<AttemptFailure>,
    /// The extra instructions of the run.
    pub instructions: Option<String>,
    /// Always `false`: a summary that stopped at the output limit is a failed attempt
    /// ([`AttemptFailure::TruncatedSummary`]), never written. Kept so that readers of the report
    /// (and of `panto compact --json`, which carries it) keep finding the field.
    pub truncated: bool,
    /// Estimated tokens of the conversation before: the sum of the sizes of the context's
    /// messages, without the agent's system prompt, which is what is summarized. With the
    /// default sizer it is the ruler's `panto_size::estimate(..).conversation()`, the number
    /// `panto context` gives the conversation.
    pub tokens_before: u64,
    /// Estimated tokens of the conversation after (summary plus kept turns), measured as
    /// `tokens_before` is.
    pub tokens_after: u64,
    /// The retention plan: turns and messages summarized and kept.
    pub plan: Plan,
    /// The fold's requests, oldest turns first (one for a prefix that fits one request).
    pub steps: Vec<FoldStep>,
    /// Every request sent, the rejected and failed ones included.
    pub requests: usize,
    /// Item bodies elided in the transcripts (never in the session).
    pub elided: Vec<ElidedItem>,
    /// Set when no model could write the summary during overflow recovery, so the summary is
    /// panto's own record ([`RECORD_ONLY_MODEL`](crate::RECORD_ONLY_MODEL)): why the models failed.
    pub degraded: Option<String>,
    /// Every attempt at a summary that failed, in order, as `model: cause` (a provider error
    /// or a summary the checks refused); with [`CompactionReport::degraded`], what the models
    /// were asked and why none of them wrote the summary.
    pub failed_attempts: Vec<String>,
    /// The protocol of the native compaction that wrote the summary
    /// ([`CompactionStrategy::Native`](crate::CompactionStrategy::Native)), when one did.
    pub native: Option<String>,
    /// What the compaction's requests cost, as the providers reported it: the fold's answers
    /// summed, or the native compaction's (also on the entry, as `usage`).
    pub usage: Option<Usage>,
    /// How the entry was written: panto's summary, the provider's native compaction, or a
    /// clearing ([`CompactionStrategy::Clear`]; a tiered run writes one of the last two).
    pub strategy: CompactionStrategy,
    /// What was cleared, by a clearing or by the clearing a tiered run made before it
    /// summarized.
    pub cleared: Vec<ClearedItem>,
    /// The messages another writer appended to the session while the summary was written
    /// (prompts or tool results, which leave the conversation awaiting a reply): the
    /// compaction went after them, with copies of them after the kept turns (the entry's
    /// `rebased`). 0 when no one did.
    pub rebased: usize,
}

impl CompactionReport {
    /// The report of compaction `id` whose `summary` `model` on `provider` wrote in one
    /// request, following `plan`: no fallback, no instructions, not truncated, nothing
    /// elided, sizes 0 until set. A [`Compactor`](crate::Compactor) fills in every field; this is for code that
    /// shows reports (a UI's tests, say).
    pub fn new(
        id: impl Into<String>,
        summary: impl Into<String>,
        trigger: Trigger,
        model: impl Into<String>,
        provider: impl Into<String>,
        plan: Plan,
    ) -> CompactionReport {
        CompactionReport {
            id: id.into(),
            summary: summary.into(),
            trigger,
            model: model.into(),
            provider: provider.into(),
            fallback: false,
            fallback_cause: None,
            instructions: None,
            truncated: false,
            tokens_before: 0,
            tokens_after: 0,
            plan,
            steps: Vec::new(),
            requests: 1,
            elided: Vec::new(),
            degraded: None,
            failed_attempts: Vec::new(),
            native: None,
            usage: None,
            strategy: CompactionStrategy::Summary,
            cleared: Vec::new(),
            rebased: 0,
        }
    }

    /// The report with the estimated size of the conversation before and after.
    #[must_use]
    pub fn with_tokens(mut self, before: u64, after: u64) -> CompactionReport {
        self.tokens_before = before;
        self.tokens_after = after;
        self
    }
}

/// A compaction's result: what to append, and the context it produces.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Compacted {
    /// The append: the compaction entry, then a copy of every kept message marked `kept_by`.
    pub entries: Vec<Entry>,
    /// The effective context after the append (the replay of `entries`).
    pub context: EffectiveContext,
    /// What was done.
    pub report: CompactionReport,
}

impl Compacted {
    /// The append `entries`, the `context` their replay gives, and the `report` of the run.
    pub fn new(
        entries: Vec<Entry>,
        context: EffectiveContext,
        report: CompactionReport,
    ) -> Compacted {
        Compacted {
            entries,
            context,
            report,
        }
    }
}

/// The outcome of a compaction run that did not fail.
#[derive(Clone, Debug, PartialEq)]
pub enum CompactOutcome {
    /// A summary was made (and, for [`Compactor::compact`](crate::Compactor::compact), written).
    Compacted(Box<Compacted>),
    /// Every turn is kept verbatim; nothing was asked or written.
    NothingToCompact(NothingToCompact),
}
