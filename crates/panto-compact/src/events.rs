//! Progress events of a compaction, for people building a UI or logs on the crate.

use panto_model::Trigger;
use panto_size::Truncation;

use crate::attempt::AttemptFailure;
use crate::plan::Plan;
use crate::report::CompactionReport;
use crate::window::Window;

/// What a [`crate::Compactor`] reports while it works, through the callback given to
/// [`crate::Compactor::on_event`].
///
/// A compaction that has something to do reports `Started`, then `Folding` (how many requests
/// it plans), then for each request `Step` (after `Elided` when the request's transcript had
/// to be elided), at most one `FallingBack` in the whole compaction, a `Shrinking` whenever a
/// request was rejected as too large and the rest is re-planned, and a `Replanned` for any
/// other change of plan; then exactly one of `Finished` or `Failed`. The step count changes
/// only with a `Shrinking` or a `Replanned`, which give the new count. One with nothing to
/// compact reports nothing. During overflow recovery the [`Driver`](crate::Driver) adds
/// `Retrying` after `Finished`, just before it sends the request again; before a request it
/// reports `CompactingAhead` (then the compaction's events, or `AheadSkipped`) or, once,
/// `WindowUnknown` when proactive compaction is on; after an answer the provider truncated
/// silently, `SilentTruncation` (then the overflow compaction's events).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CompactionEvent {
    /// The plan is made and the first model is about to be asked.
    Started {
        /// What started the compaction.
        trigger: Trigger,
        /// The model asked first (`compaction_model` when configured, else the active one).
        model: String,
        /// The retention plan: turns and tokens summarized and kept.
        plan: Plan,
        /// Estimated tokens of the context before compaction.
        tokens_before: u64,
    },
    /// A tiered run cleared the older turns, and the clearing is not enough: it summarizes the
    /// cleared conversation too (`Started` follows, unless the summary has nothing to do; a
    /// summary that is not written is said by [`CompactionEvent::ClearedAlone`]).
    ClearingNotEnough {
        /// Estimated tokens of the conversation before the clearing.
        tokens_before: u64,
        /// After it.
        tokens_after: u64,
        /// Blocks it cleared.
        cleared: usize,
        /// Why it is not enough: it frees too little, or leaves the next request above its
        /// target.
        reason: String,
    },
    /// A tiered run that said [`CompactionEvent::ClearingNotEnough`] writes the clearing alone
    /// after all: the summary of the cleared conversation would not be smaller than it, or
    /// every turn the clearing left fits the keep budget. `Finished` (a clearing's) follows.
    ClearedAlone {
        /// Why the summary was not written.
        reason: String,
    },
    /// The fold is planned: how many requests the summarized prefix takes.
    Folding {
        /// Requests planned (1 when the prefix fits one request).
        steps: usize,
        /// The limit each request must fit, in panto's estimated tokens, when known.
        limit: Option<u64>,
        /// Estimated tokens of the whole prefix's transcript.
        transcript_tokens: u64,
    },
    /// One request of the fold is about to be sent.
    Step {
        /// This step, counting from 1.
        step: usize,
        /// The steps now planned.
        steps: usize,
        /// Turns of the prefix it summarizes.
        turns: usize,
        /// panto's estimate of its input.
        input_tokens: u64,
        /// Its output limit.
        max_output_tokens: u32,
    },
    /// The step's transcript elides item bodies too large for any request.
    Elided {
        /// The step, counting from 1.
        step: usize,
        /// Item bodies elided.
        items: usize,
        /// Bytes left out of the transcript (the session keeps them).
        bytes: u64,
    },
    /// A request was rejected as too large; the turns not yet summarized are re-planned for a
    /// smaller limit.
    Shrinking {
        /// The step that was rejected.
        step: usize,
        /// The new limit, in panto's estimated tokens.
        limit: u64,
        /// The steps now planned in all.
        steps: usize,
        /// The provider's answer.
        cause: String,
    },
    /// The plan changed for another reason than a rejection, said once with the new count:
    /// the turns not yet summarized fit fewer requests than planned (the summaries so far came
    /// out shorter than the room kept for them), or more turns are summarized, or the summary is
    /// condensed, because the window proved smaller than the kept turns and the summary need.
    Replanned {
        /// The steps now planned in all.
        steps: usize,
        /// Why, in a few words.
        cause: String,
    },
    /// No model's summary of one step's turns passed panto's checks (it stopped at the output
    /// limit, repeated a phrase, echoed the prompt, ...) after every model and retry the step
    /// allows: panto's own record of those turns goes on after the summary so far, and the
    /// model is asked for the rest of the fold. Said for a step that other steps follow, or
    /// that a model's summary came before in the fold (the model's account of the turns before
    /// it is kept); a fold no model's summary passed at all fails
    /// ([`CompactError`](crate::CompactError)).
    StepRecorded {
        /// The step, counting from 1.
        step: usize,
        /// The steps planned in all.
        steps: usize,
        /// Why the model's summary failed.
        cause: String,
    },
    /// The provider's native compaction failed (or the provider has none); panto's own
    /// summary is written instead ([`CompactionStrategy::Native`](crate::CompactionStrategy::Native)).
    NativeFailed {
        /// Why it failed.
        cause: String,
    },
    /// The compaction model failed; the active model is asked instead, and the compaction
    /// model is not asked again in this compaction.
    FallingBack {
        /// The compaction model that failed.
        failed_model: String,
        /// Why it failed.
        cause: AttemptFailure,
        /// The active model, asked now.
        model: String,
    },
    /// The summary is written (or, for a dry run, ready).
    Finished(Box<CompactionReport>),
    /// After an overflow compaction, the [`Driver`](crate::Driver) sends the request that
    /// overflowed once more, now that it is smaller (reported by the driver, after
    /// `Finished`; not by a compaction run alone).
    Retrying {
        /// panto's estimate of the request now (system prompt, tools and messages).
        estimated_tokens: u64,
        /// panto's estimate of the request that overflowed.
        overflowed_tokens: u64,
    },
    /// Proactive compaction ([`Driver::with_auto_compact`](crate::Driver::with_auto_compact)):
    /// the next request is estimated above the configured share of the model's window, so the
    /// driver compacts before sending it (reported by the driver, before `Started`).
    CompactingAhead {
        /// panto's estimate of the next request (system prompt, tools and messages).
        estimated_tokens: u64,
        /// The configured share of the window, in tokens, which the estimate exceeds.
        threshold_tokens: u64,
        /// The window, with its source.
        window: Window,
    },
    /// A proactive compaction wrote nothing (nothing to compact, a result no smaller than
    /// what it would replace, or a failure).
    AheadSkipped {
        /// Why, in a sentence.
        reason: String,
        /// Whether the request is sent anyway (it fits the window), or not.
        sending: bool,
    },
    /// Proactive compaction is on, but no window is known for the model (none configured,
    /// learned or discovered), so the driver compacts only after an overflow. Said once per
    /// driver.
    WindowUnknown,
    /// The provider answered, but counted far fewer input tokens than the request holds: it
    /// cut the request to fit its window and said nothing (Ollama past `num_ctx`). The answer
    /// is discarded, and the driver compacts and sends the request again, as after an
    /// overflow.
    SilentTruncation {
        /// The provider's count, and the least the request could honestly count.
        truncation: Truncation,
        /// panto's estimate of the request.
        estimated_tokens: u64,
    },
    /// The compaction failed; nothing was written.
    Failed {
        /// What started the compaction.
        trigger: Trigger,
        /// Whether the fallback to the active model ran (and failed too).
        fallback: bool,
        /// The retention plan that was being carried out.
        plan: Plan,
        /// Estimated tokens of the context, unchanged.
        tokens_before: u64,
        /// What went wrong, as the returned error displays it.
        error: String,
    },
}
