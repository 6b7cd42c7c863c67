//! Native compaction as a strategy: the provider summarizes the summarized turns itself
//! (Anthropic's on-demand compaction, `OpenAI`'s `/responses/compact`), and the result is a
//! panto compaction entry like any other, carrying the provider's payload.
//!
//! The plan, the kept copies, the ledger, chains, `/compact` instructions and overflow recovery
//! are those of panto's own summaries: only who writes the summary differs. The entry's
//! `summary` is the provider's readable summary (Anthropic's block `content`) or, for an opaque
//! payload (`OpenAI`'s item), a note saying so; the ledger follows either, as on every entry.
//! Its `native` field holds the payload exactly as received (`panto_model::NATIVE`), which
//! replay puts on the compaction block so that the adapter of the same protocol sends it back
//! byte for byte, where any other protocol reads the summary. Its `usage` field records what
//! the provider's compaction cost.
//!
//! Anthropic keeps the thinking of the kept turns valid when the kept turns directly follow the
//! summarized messages unchanged, the first kept message has the other role than the last
//! summarized one, and the system prompt and tools are unchanged ("Compaction and preserved
//! thinking", <https://platform.claude.com/docs/en/build-with-claude/compaction-thinking-blocks>).
//! So the compaction request is the conversation's own request up to the cut (the compaction
//! message that leads the context included, rendered by the same adapter, with the
//! conversation's system prompt, tools and options, [`Conversation`]); the cut moves by a
//! turn when the roles on both sides of it are the same; and the copies whose thinking was
//! still valid are marked `thinking_kept` with the new compaction's id.

use panto_model::{
    CompactionBlock, ContentBlock, EffectiveContext, Entry, KEPT_BY, Message, NATIVE,
    NATIVE_ANTHROPIC, RawJson, Role, THINKING_KEPT, replay, turns,
};
use panto_provider::{CacheMode, NativeCompaction, ProviderError, Request, StreamEvent};
use panto_size::{Heuristic, estimate};
use panto_transcript::Ledger;
use serde_json::Value;

use tracing::{Instrument, info_span};

use super::run::Run;
use super::state::Folded;
use super::{Prepared, kept_tokens, summary};
use crate::config::{CompactionStrategy, Conversation};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::ledger::{ledger_budget, previous_ledger, rendered_len, with_ledger};
use crate::plan::Plan;
use crate::prompt::ADDITIONAL_INSTRUCTIONS_HEADING;
use crate::report::Compacted;

/// The compaction of `prepared` by the provider's native compaction, with the active model;
/// panto's summary when it fails in any way (said, `NativeFailed`).
///
/// # Errors
/// The summary's, when native compaction failed and so did panto's summary.
pub(super) async fn produce(
    run: &mut Run<'_>,
    mut prepared: Prepared,
) -> Result<Compacted, CompactError> {
    let native = ask(run, &prepared).instrument(info_span!("native")).await;
    match native {
        Ok(native) => {
            prepared.plan = native.plan.clone();
            prepared.kept_tokens = kept_tokens(run.context, &prepared.plan);
            let folded = Folded {
                summary: with_ledger(&native.summary, &native.ledger, native.ledger_budget),
                ledger: native.ledger.clone(),
                used: Some(run.compactor.active.clone()),
                requests: 1,
                ..Folded::default()
            };
            let compacted = run.build(prepared, folded);
            Ok(finish(compacted, &native, run.context))
        }
        Err(cause) => {
            tracing::warn!(%cause, "native compaction failed, writing panto's summary");
            run.emit(CompactionEvent::NativeFailed {
                cause: cause.to_string(),
            });
            summary::produce(run, prepared).await
        }
    }
}

/// What a native compaction returned, ready to be written.
struct Native {
    /// The plan it compacted (the prepared one, its cut moved for the roles when needed).
    plan: Plan,
    /// The entry's summary before its ledger.
    summary: String,
    /// The ledger of what it replaces, merged with the previous one.
    ledger: Ledger,
    /// The budget, in characters, of the ledger's rendering after the summary.
    ledger_budget: usize,
    /// The provider's answer.
    compaction: NativeCompaction,
    /// Whether the kept turns' thinking stays valid (Anthropic, asked with the conversation's
    /// own system prompt and tools).
    thinking_kept: bool,
}

/// Asks the active model's provider to compact the summarized turns of `prepared`.
///
/// # Errors
/// The provider's error ([`ProviderError::Unsupported`] for a provider without native
/// compaction), or [`ProviderError::Unsupported`] when no cut has turns of both roles around
/// it.
async fn ask(run: &Run<'_>, prepared: &Prepared) -> Result<Native, ProviderError> {
    let (context, options) = (run.context, run.options);
    let plan =
        cut_between_roles(context, &prepared.plan).ok_or_else(|| ProviderError::Unsupported {
            message: "no cut between turns of different roles".into(),
        })?;
    let active = run.compactor.active();
    let conversation = options.conversation.as_ref();
    let shape = conversation
        .cloned()
        .unwrap_or_else(|| Conversation::new(""));
    // The conversation's own prefix, read from the cache its turns wrote; nothing after it is
    // worth writing, since no later request extends this one.
    let mut request_options = shape.options.clone();
    if request_options.cache.is_on() {
        request_options.cache.mode = CacheMode::ReadOnly;
    }
    let request = Request::new(
        active.model.clone(),
        shape.system.clone(),
        context.messages[..plan.keep_from].to_vec(),
        shape.max_output_tokens,
    )
    .with_tools(shape.tools.clone())
    .with_options(request_options);
    let instructions = options
        .instructions()
        .map(|text| format!("{ADDITIONAL_INSTRUCTIONS_HEADING}\n\n{text}"));
    let mut ignore = |_: StreamEvent<'_>| {};
    let compaction = active
        .provider
        .compact_natively(&request, instructions.as_deref(), &mut ignore)
        .await?;
    let prefix = &context.messages[plan.prefix()];
    let before = previous_ledger(context);
    let budget = ledger_budget(
        run.compactor.config().max_output_tokens,
        rendered_len(context),
        prepared.transcript_len(),
        prepared.limit,
    );
    let ledger = Ledger::merge(&before, &Ledger::from_messages(prefix));
    let summary = match &compaction.summary {
        Some(text) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => format!(
            "This conversation was compacted by {}'s native compaction, whose summary only that \
             provider can read; panto's record of the summarized turns follows.",
            active.provider.name()
        ),
    };
    // A compaction that does not bring the context within the limit is a failure like any
    // other (`OpenAI`'s window keeps every user message, which may be most of it).
    if let Some(limit) = prepared.limit {
        let head = with_ledger(&summary, &ledger, budget);
        let kept = &context.messages[plan.kept()];
        let estimate = size_after(&shape.system, head, &compaction, kept);
        if estimate >= limit {
            return Err(ProviderError::Unsupported {
                message: format!(
                    "the native compaction leaves about {estimate} tokens, not below the limit of {limit}"
                ),
            });
        }
    }
    let thinking_kept = compaction.protocol == NATIVE_ANTHROPIC && conversation.is_some();
    Ok(Native {
        plan,
        summary,
        ledger,
        ledger_budget: budget,
        compaction,
        thinking_kept,
    })
}

/// panto's estimate of the context after a native `compaction` with the conversation's
/// `system` prompt: the compaction block (`summary`, carrying the payload) and the `kept`
/// turns, marked as their copies will be, so that their usage (measured before the
/// compaction) anchors nothing.
fn size_after(
    system: &str,
    summary: String,
    compaction: &NativeCompaction,
    kept: &[Message],
) -> u64 {
    let mut head = CompactionBlock::new(summary);
    head.extra
        .insert_raw(NATIVE.to_owned(), payload_of(compaction));
    let mut after = vec![Message::new(
        Role::User,
        vec![ContentBlock::Compaction(head)],
    )];
    after.extend(kept.iter().map(|m| {
        let mut copy = m.clone();
        copy.extra.insert(KEPT_BY.to_owned(), Value::from("native"));
        copy
    }));
    estimate(system, "", &after).total()
}

/// The compaction `compacted` (built from a [`Native`]) with the native payload and its usage
/// on the entry, and the kept copies whose thinking stays valid marked so.
fn finish(mut compacted: Compacted, native: &Native, context: &EffectiveContext) -> Compacted {
    let id = compacted.report.id.clone();
    let usage = native
        .compaction
        .usage
        .as_ref()
        .and_then(|u| serde_json::to_value(u).ok());
    // The copies that were fresh (not stale copies of an earlier compaction, not before a
    // provider's refusal) keep valid thinking under this compaction.
    let kept = &context.messages[native.plan.kept()];
    let reset = context
        .messages
        .iter()
        .rposition(Message::thinking_reset)
        .unwrap_or(0);
    let mut copy = 0;
    for entry in &mut compacted.entries {
        match entry {
            Entry::Compaction(c) => {
                c.extra.insert_raw(NATIVE.to_owned(), payload(native));
                c.extra.insert(
                    "strategy".into(),
                    Value::from(CompactionStrategy::Native.as_str()),
                );
                if let Some(usage) = &usage {
                    c.extra.insert("usage".into(), usage.clone());
                }
            }
            Entry::Message(m) if m.extra.get(KEPT_BY).and_then(Value::as_str) == Some(&id) => {
                let original = &kept[copy];
                let index = native.plan.keep_from + copy;
                copy += 1;
                let fresh =
                    index >= reset && (original.kept_by().is_none() || original.thinking_kept());
                if native.thinking_kept && fresh && original.role == Role::Assistant {
                    m.extra
                        .insert(THINKING_KEPT.to_owned(), Value::from(id.as_str()));
                } else {
                    m.extra.remove(THINKING_KEPT);
                }
            }
            _ => {}
        }
    }
    compacted.context = replay(compacted.entries.iter().cloned());
    compacted.report.native = Some(native.compaction.protocol.clone());
    compacted.report.strategy = CompactionStrategy::Native;
    compacted.report.usage.clone_from(&native.compaction.usage);
    compacted
}

/// The entry's `native` field: `{"protocol": ..., "model": ..., "payload": [...]}`, the items
/// exactly as the provider returned them.
fn payload(native: &Native) -> RawJson {
    payload_of(&native.compaction)
}

fn payload_of(compaction: &NativeCompaction) -> RawJson {
    let items: Vec<&str> = compaction.items.iter().map(RawJson::json).collect();
    let mut text = format!(
        "{{\"protocol\":{}",
        Value::String(compaction.protocol.clone())
    );
    if let Some(model) = &compaction.model {
        text.push_str(&format!(",\"model\":{}", Value::String(model.clone())));
    }
    text.push_str(&format!(",\"payload\":[{}]}}", items.join(",")));
    // Every item is one JSON value already (the adapter checked it), so this cannot fail; the
    // fallback keeps the protocol and drops nothing silently into an invalid line.
    RawJson::from_text(text).unwrap_or_else(|_| RawJson::from(Value::Null))
}

/// The plan with its cut where the last summarized message and the first kept one have
/// different roles: the prepared cut when it already is, else the nearest turn boundary after
/// it (summarizing more, the in-flight turn always kept), else before it. `None` when no turn
/// boundary qualifies.
fn cut_between_roles(context: &EffectiveContext, plan: &Plan) -> Option<Plan> {
    let messages = &context.messages;
    let fits = |k: usize| k > plan.head && k < plan.end && messages[k - 1].role != messages[k].role;
    if fits(plan.keep_from) {
        return Some(plan.clone());
    }
    let starts: Vec<usize> = turns(&messages[plan.head..])
        .iter()
        .map(|t| t.start + plan.head)
        .collect();
    let last = *starts.last()?;
    let cut = starts
        .iter()
        .copied()
        .filter(|&b| b > plan.keep_from && b <= last)
        .find(|&b| fits(b))
        .or_else(|| {
            starts
                .iter()
                .rev()
                .copied()
                .filter(|&b| b < plan.keep_from)
                .find(|&b| fits(b))
        })?;
    let tokens = |range: std::ops::Range<usize>| -> u64 {
        messages[range].iter().map(|m| Heuristic.message(m)).sum()
    };
    let summarized = starts.iter().filter(|&&b| b < cut).count();
    Some(
        Plan::new(plan.head, cut, plan.end)
            .with_turns(summarized, starts.len() - summarized)
            .with_tokens(tokens(plan.head..cut), tokens(cut..plan.end), plan.budget),
    )
}

#[cfg(test)]
mod tests {
    //! The cut between roles, and which kept copies keep valid thinking.

    use std::sync::Arc;

    use panto_model::{
        CompactionEntry, ContentBlock, EffectiveContext, Entry, KEPT_BY, Message, NATIVE, RawJson,
        Role, THINKING_KEPT, THINKING_RESET, ThinkingBlock, replay,
    };
    use panto_provider::{
        EventSink, NativeCompaction, Provider, ProviderError, Request, async_trait,
    };
    use serde_json::{Value, json};

    use super::cut_between_roles;
    use crate::{
        CompactOutcome, CompactRun, CompactionStrategy, Compactor, CompactorConfig, Conversation,
        KnownWindows, ModelRef,
    };

    fn context(roles: &str) -> EffectiveContext {
        let messages = roles
            .chars()
            .map(|r| match r {
                'u' => Message::user_text("words"),
                _ => Message::assistant_text("answer"),
            })
            .collect();
        EffectiveContext::new(messages)
    }

    #[test]
    fn a_cut_between_different_roles_stays() {
        let ctx = context("uaua");
        let plan = crate::plan::Plan::new(0, 2, 4);
        assert_eq!(cut_between_roles(&ctx, &plan).unwrap().keep_from, 2);
    }

    #[test]
    fn a_cut_between_two_prompts_moves_to_summarize_one_more_turn() {
        // u a u | u a: the prompts on both sides of the cut would be merged by the API.
        let ctx = context("uauua");
        let plan = crate::plan::Plan::new(0, 3, 5);
        let moved = cut_between_roles(&ctx, &plan).unwrap();
        assert_eq!(
            moved.keep_from, 4,
            "after the second prompt, before its reply"
        );
        assert_eq!(moved.summarized_turns, 4);
        assert_eq!(moved.kept_turns, 1);
    }

    #[test]
    fn the_in_flight_turn_is_never_summarized_so_the_cut_moves_back() {
        // u a u u: the last prompt is the turn in flight.
        let ctx = context("uauu");
        let plan = crate::plan::Plan::new(0, 3, 4);
        assert_eq!(cut_between_roles(&ctx, &plan).unwrap().keep_from, 2);
        // Only prompts: no cut qualifies.
        let ctx = context("uuu");
        assert!(cut_between_roles(&ctx, &crate::plan::Plan::new(0, 2, 3)).is_none());
    }

    /// A provider whose native compaction returns one Anthropic block.
    struct Native;

    #[async_trait]
    impl Provider for Native {
        fn name(&self) -> &str {
            "native"
        }
        async fn complete(&self, _: &Request, _: EventSink<'_>) -> Result<Message, ProviderError> {
            Err(ProviderError::Unsupported {
                message: "no chat here".into(),
            })
        }
        async fn compact_natively(
            &self,
            _: &Request,
            _: Option<&str>,
            _: EventSink<'_>,
        ) -> Result<NativeCompaction, ProviderError> {
            let block =
                RawJson::from_text(r#"{"type":"compaction","content":"sum","signature":"s"}"#)
                    .unwrap();
            Ok(NativeCompaction::new("anthropic", vec![block]).with_summary("sum"))
        }
    }

    /// Sizes the first prompt (after the compaction message) far over any budget, the rest at
    /// one token, so the plan keeps everything after it.
    struct FirstPromptLarge;

    impl panto_size::Sizer for FirstPromptLarge {
        fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
            (0..messages.len())
                .map(|i| if i == 1 { 10_000 } else { 1 })
                .collect()
        }
    }

    fn thinking(text: &str) -> Message {
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking(ThinkingBlock::new(text, Some("sig".into()))),
                ContentBlock::text(text),
            ],
        )
    }

    #[test]
    fn only_copies_whose_thinking_was_valid_are_marked_thinking_kept() {
        // An earlier compaction c0 kept `old` (its thinking stale since), then new turns; the
        // new compaction keeps everything after the first prompt.
        let mut stale = thinking("old");
        stale.extra.insert(KEPT_BY.into(), json!("c0"));
        let mut reset = Message::user_text("after a refusal");
        reset.extra.insert(THINKING_RESET.into(), Value::Bool(true));
        let entries = vec![
            Entry::Compaction(
                CompactionEntry::new("before")
                    .with_id("c0")
                    .with_kept_messages(0),
            ),
            Entry::Message(Message::user_text("first")),
            Entry::Message(stale),
            Entry::Message(thinking("before the refusal")),
            Entry::Message(reset),
            Entry::Message(thinking("fresh")),
            Entry::Message(Message::user_text("last")),
        ];
        let context = replay(entries);
        let mut compactor = Compactor::new(ModelRef::new(Arc::new(Native), "m"))
            .with_config(
                CompactorConfig::new()
                    .with_keep_tokens(100)
                    .with_compaction_strategy(CompactionStrategy::Native),
            )
            .with_sizer(FirstPromptLarge);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let outcome = runtime
            .block_on(compactor.dry_run(
                &context,
                CompactRun::manual(None).with_conversation(Conversation::new("system")),
                &mut KnownWindows::new(),
            ))
            .unwrap();
        let CompactOutcome::Compacted(compacted) = outcome else {
            panic!("nothing compacted");
        };
        assert_eq!(
            compacted.report.plan.kept().start,
            2,
            "all but the first prompt kept"
        );
        let Entry::Compaction(entry) = &compacted.entries[0] else {
            panic!("no entry");
        };
        assert_eq!(
            entry.extra.get_raw(NATIVE).unwrap().json(),
            r#"{"protocol":"anthropic","payload":[{"type":"compaction","content":"sum","signature":"s"}]}"#
        );
        let marked: Vec<String> = compacted
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::Message(m) if m.extra.contains_key(THINKING_KEPT) => Some(m.text()),
                _ => None,
            })
            .collect();
        assert_eq!(
            marked,
            ["fresh"],
            "not the stale copy, not before the refusal"
        );
    }
}
