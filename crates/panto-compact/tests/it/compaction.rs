//! One compaction with scripted providers: success, model fallback, failures, nothing to
//! compact, empty summaries, extra instructions, and what is written.

use panto_compact::KnownWindows;
use std::sync::{Arc, Mutex};

use panto_compact::testing::{overflow, reply, server_error};
use panto_compact::{
    ADDITIONAL_INSTRUCTIONS_HEADING, AttemptFailure, BUILTIN_PROMPT, BUILTIN_SHORT_PROMPT,
    BUILTIN_TINY_PROMPT, CompactError, CompactOutcome, CompactRun, Compacted, CompactionEvent,
    CompactionPrompt, Compactor, DEFAULT_MAX_OUTPUT_TOKENS, MAX_LONGER, MIN_OUTPUT_TOKENS,
    MemoryLog, ModelRef, RECORD_ONLY_MODEL, SHORT_PROMPT_BELOW, Stated, Window, WindowSource,
};
use panto_model::{Entry, KEPT_BY, Trigger, replay};
use panto_provider::{ProviderError, TokenNumbers};
use panto_transcript::strip_ledger;
use serde_json::json;

use crate::*;

/// Twelve messages in nine turns; with [`Hundred`] sizes and a 300-token budget the last two
/// turns (messages 9..12) are kept and the first seven summarized.
fn setup() -> (Vec<Message>, MemoryLog) {
    let messages = rounds(0, 3);
    let log = log_of(&messages);
    (messages, log)
}

fn compacted(outcome: CompactOutcome) -> Compacted {
    match outcome {
        CompactOutcome::Compacted(c) => *c,
        CompactOutcome::NothingToCompact(n) => panic!("expected a compaction, got: {n}"),
    }
}

fn events(c: Compactor) -> (Compactor, Arc<Mutex<Vec<CompactionEvent>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    (
        c.on_event(move |e| sink.lock().unwrap().push(e.clone())),
        seen,
    )
}

#[tokio::test]
async fn success_appends_the_entry_then_the_kept_copies_in_one_call() {
    let (messages, mut log) = setup();
    let (provider, active) = model("main", "big");
    provider.push_text("  S1: the user reads files 0 to 2.\n");
    let ctx = log.replay();
    let (c, seen) = events(compactor(active, 300));
    let mut c = c;
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );

    // One append: the compaction entry, then one copy per kept message.
    assert_eq!(log.appends(), 1);
    assert_eq!(log.entries().len(), 12 + 1 + 3);
    assert_eq!(&log.entries()[12..], out.entries.as_slice());
    let Entry::Compaction(entry) = &out.entries[0] else {
        panic!("the append must open with the compaction entry")
    };
    assert_eq!(entry.id.as_deref(), Some("c1"));
    assert_eq!(
        strip_ledger(&entry.summary),
        "S1: the user reads files 0 to 2."
    );
    assert_eq!(entry.trigger, Some(Trigger::Manual));
    assert_eq!(entry.model.as_deref(), Some("big"));
    assert_eq!(entry.instructions, None);
    assert_eq!(entry.kept_messages, Some(3));
    assert!(entry.tokens_before.unwrap() > entry.tokens_after.unwrap());
    assert_eq!(entry.extra["fallback"], json!(false));
    assert_eq!(entry.extra["provider"], json!("main"));
    assert_eq!(entry.extra["keep_tokens"], json!(300));
    assert_eq!(entry.extra["kept_turns"], json!(2));
    assert_eq!(entry.extra["summarized_turns"], json!(7));
    assert_eq!(entry.extra["summarized_messages"], json!(9));
    for (k, e) in out.entries[1..].iter().enumerate() {
        let Entry::Message(m) = e else {
            panic!("copies are messages")
        };
        assert_eq!(m.kept_by(), Some("c1"));
        assert_eq!(m.id.as_deref(), Some(format!("m{}", k + 2).as_str()));
        assert_eq!(strip(m), strip(&messages[9 + k]));
    }

    // The new context is the summary block and the kept turns, and it is what the log replays.
    assert_eq!(log.replay(), out.context);
    assert_eq!(out.context.messages.len(), 4);
    assert_eq!(
        out.context.messages[0]
            .compaction_summary()
            .map(strip_ledger),
        Some("S1: the user reads files 0 to 2.")
    );
    let report = &out.report;
    assert_eq!(
        (report.plan.kept_turns, report.plan.summarized_turns),
        (2, 7)
    );
    assert_eq!(report.plan.prefix(), 0..9);
    assert!(!report.fallback && !report.truncated);

    // The request: COMPACTION.md, one user message with the transcript of the prefix, no tools.
    let requests = provider.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.model, "big");
    assert_eq!(r.system, BUILTIN_PROMPT);
    assert!(r.tools.is_empty());
    assert_eq!(r.max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS);
    assert_eq!(r.messages.len(), 1);
    let prompt = r.messages[0].text();
    for marker in ["r0-0", "r0-3", "r1-2", "r2-0"] {
        assert!(prompt.contains(marker), "{marker} must be summarized");
    }
    for marker in ["r2-1", "r2-2", "r2-3"] {
        assert!(!prompt.contains(marker), "{marker} is kept, not summarized");
    }
    assert!(!prompt.contains("<previous-summary>"));

    let seen = lifecycle(&seen.lock().unwrap());
    assert!(matches!(&seen[0], CompactionEvent::Started { model, .. } if model == "big"));
    assert!(
        matches!(&seen[1], CompactionEvent::Finished(r) if r.tokens_after == report.tokens_after)
    );
    assert_eq!(seen.len(), 2);
    // One request: the prefix fits it.
    assert_eq!((report.steps.len(), report.requests), (1, 1));
}

#[tokio::test]
async fn compaction_model_failure_falls_back_once_to_the_active_provider() {
    let (_, mut log) = setup();
    let (cheap, cheap_ref) = model("cheap-provider", "cheap");
    let (main, main_ref) = model("main-provider", "big");
    cheap.push(Err(server_error()));
    main.push_text("S1");
    let (c, seen) = events(compactor(main_ref, 300).with_compaction_model(Some(cheap_ref)));
    let mut c = c;
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );

    assert_eq!((cheap.calls(), main.calls()), (1, 1));
    assert_eq!(cheap.requests()[0].messages, main.requests()[0].messages);
    assert_eq!(cheap.requests()[0].system, main.requests()[0].system);
    assert_eq!(main.requests()[0].model, "big");
    assert!(out.report.fallback);
    assert_eq!(out.report.model, "big");
    assert_eq!(out.report.provider, "main-provider");
    assert_eq!(
        out.report.fallback_cause,
        Some(AttemptFailure::Provider(server_error()))
    );
    let Entry::Compaction(entry) = &out.entries[0] else {
        panic!()
    };
    assert_eq!(entry.model.as_deref(), Some("big"));
    assert_eq!(entry.extra["fallback"], json!(true));
    assert_eq!(
        entry.extra["fallback_error"],
        json!("server error (HTTP 500): internal error")
    );
    let seen = lifecycle(&seen.lock().unwrap());
    assert_eq!(seen.len(), 3);
    assert!(matches!(&seen[0], CompactionEvent::Started { model, .. } if model == "cheap"));
    assert!(
        matches!(&seen[1], CompactionEvent::FallingBack { failed_model, model, .. }
        if failed_model == "cheap" && model == "big")
    );
    assert!(matches!(&seen[2], CompactionEvent::Finished(r) if r.fallback));
}

#[tokio::test]
async fn compaction_model_on_the_same_provider_falls_back_by_name() {
    let (_, mut log) = setup();
    let (provider, big) = model("one", "big");
    let small = ModelRef::new(provider.clone(), "small");
    provider.push(Err(overflow(Some(40_000), Some(32_000))));
    provider.push_text("S1");
    let mut c = compactor(big, 300).with_compaction_model(Some(small));
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    let models: Vec<String> = provider.requests().into_iter().map(|r| r.model).collect();
    assert_eq!(models, ["small", "big"]);
    assert_eq!(out.report.model, "big");
}

#[tokio::test]
async fn both_models_failing_carries_both_causes_and_writes_nothing() {
    let (_, mut log) = setup();
    let (cheap, cheap_ref) = model("cheap-provider", "cheap");
    let (main, main_ref) = model("main-provider", "big");
    cheap.push(Err(overflow(Some(140_000), Some(128_000))));
    main.push(Err(ProviderError::Timeout {
        message: "no answer in 600s".into(),
    }));
    let (c, seen) = events(compactor(main_ref, 300).with_compaction_model(Some(cheap_ref)));
    let mut c = c;
    let before = log.entries();
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    let CompactError::BothModelsFailed {
        compaction_model,
        first,
        active_model,
        second,
    } = &err
    else {
        panic!("expected BothModelsFailed, got {err:?}")
    };
    assert_eq!(
        (compaction_model.as_str(), active_model.as_str()),
        ("cheap", "big")
    );
    assert_eq!(
        **first,
        AttemptFailure::Provider(overflow(Some(140_000), Some(128_000)))
    );
    assert!(matches!(
        **second,
        AttemptFailure::Provider(ProviderError::Timeout { .. })
    ));
    assert_eq!(
        err.to_string(),
        "compaction failed with the compaction model cheap (context overflow: prompt is too long \
         (140000 tokens, limit 128000)) and with the active model big (timed out: no answer in 600s)"
    );
    assert_eq!(log.entries(), before.as_slice());
    assert_eq!(log.appends(), 0);
    assert_eq!((cheap.calls(), main.calls()), (1, 1));
    let seen = seen.lock().unwrap();
    assert!(matches!(
        seen.last(),
        Some(CompactionEvent::Failed { fallback: true, .. })
    ));
}

#[tokio::test]
async fn active_model_failure_without_compaction_model_is_not_retried() {
    let (_, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push(Err(server_error()));
    main.push_text("never asked");
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        &err,
        CompactError::Compaction { model, cause: AttemptFailure::Provider(ProviderError::Server { .. }) }
            if model == "big"
    ));
    assert_eq!(main.calls(), 1);
    assert_eq!(log.appends(), 0);
}

#[tokio::test]
async fn an_empty_summary_is_a_failed_compaction() {
    let (_, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push(Ok(reply(" \n\t ")));
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        &err,
        CompactError::Compaction {
            cause: AttemptFailure::EmptySummary,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "compaction with big failed: the model returned an empty summary"
    );
    assert_eq!(log.appends(), 0);
}

#[tokio::test]
async fn an_empty_summary_from_the_compaction_model_triggers_the_fallback() {
    let (_, mut log) = setup();
    let (cheap, cheap_ref) = model("cheap-provider", "cheap");
    let (main, main_ref) = model("main-provider", "big");
    cheap.push(Ok(reply("")));
    main.push_text("S1 from the active model");
    let mut c = compactor(main_ref, 300).with_compaction_model(Some(cheap_ref));
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        strip_ledger(&out.report.summary),
        "S1 from the active model"
    );
    assert_eq!(
        out.report.fallback_cause,
        Some(AttemptFailure::EmptySummary)
    );
    assert_eq!((cheap.calls(), main.calls()), (1, 1));
}

#[tokio::test]
async fn nothing_to_compact_is_a_normal_outcome_with_a_clear_message() {
    let cases: [(Vec<Message>, u64, &str); 3] = [
        (
            rounds(0, 3),
            20_000,
            "nothing to compact: all 9 turns (about 1200 tokens) fit the keep-verbatim budget of 20000 tokens",
        ),
        (
            vec![user("only a prompt")],
            0,
            "nothing to compact: the conversation is a single turn, which is always kept verbatim",
        ),
        (
            Vec::new(),
            0,
            "nothing to compact: the conversation is empty",
        ),
    ];
    for (messages, keep, expect) in cases {
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "big");
        let (c, seen) = events(compactor(main_ref, keep));
        let mut c = c;
        let ctx = log.replay();
        // A budget given for the run is honoured as it is; without one, a manual compaction
        // keeps at most half of the conversation (see the test after this one).
        let out = c
            .compact(
                &ctx,
                &mut log,
                CompactRun::manual(None).with_keep_tokens(keep),
                &mut KnownWindows::new(),
            )
            .await
            .unwrap();
        let CompactOutcome::NothingToCompact(n) = out else {
            panic!("expected nothing to compact")
        };
        assert_eq!(n.to_string(), expect);
        assert_eq!(main.calls(), 0);
        assert_eq!(log.appends(), 0);
        assert!(seen.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_manual_compaction_without_its_own_budget_keeps_at_most_half() {
    // Nine turns of about 1,200 tokens: the default budget of 20,000 would keep them all, so
    // a manual compaction keeps at most half of the conversation and summarizes the rest.
    let mut log = log_of(&rounds(0, 3));
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let mut c = compactor(main_ref, 20_000);
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    let plan = &out.report.plan;
    assert_eq!(plan.budget, 600);
    assert!(
        plan.kept_tokens <= 600 && plan.summarized_turns > 0,
        "{plan:?}"
    );
    assert!(out.report.tokens_after < out.report.tokens_before);
    assert_eq!(log.appends(), 1);
}

#[tokio::test]
async fn a_compaction_that_saves_nothing_is_not_written_unless_forced() {
    // One exchange, every message sized 100 tokens: the summary of the prompt replaces one
    // message with another, so the conversation would not shrink and nothing is written; the
    // same run with `force` writes it.
    let messages = vec![user("hi"), assistant("hello")];
    let summary = "The user greeted the assistant, which answered with a greeting; nothing else happened yet.";
    for force in [false, true] {
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "big");
        main.push_text(summary);
        let (c, seen) = events(compactor(main_ref, 20_000));
        let mut c = c;
        let ctx = log.replay();
        let result = c
            .compact(
                &ctx,
                &mut log,
                CompactRun::manual(None).with_force(force),
                &mut KnownWindows::new(),
            )
            .await;
        assert_eq!(main.calls(), 1);
        if force {
            let out = compacted(result.unwrap());
            assert!(out.report.tokens_after >= out.report.tokens_before);
            assert_eq!(log.appends(), 1);
        } else {
            let Err(CompactError::NotSmaller(n)) = result else {
                panic!("expected NotSmaller, got {result:?}")
            };
            assert!(n.tokens_after >= n.tokens_before);
            assert_eq!(log.appends(), 0);
            assert_eq!(
                CompactError::NotSmaller(n).to_string(),
                format!(
                    "the compaction would not make the conversation smaller: the summary and the kept messages are about {} tokens, the conversation about {}",
                    n.tokens_after, n.tokens_before
                )
            );
            let seen = seen.lock().unwrap();
            assert!(
                matches!(seen.last(), Some(CompactionEvent::Failed { error, .. }) if error.contains("would not make the conversation smaller")),
                "{seen:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_refused_append_is_an_error_and_leaves_the_log_unchanged() {
    let (_, mut log) = setup();
    log.refuse_appends(Some("disk full".into()));
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let (c, seen) = events(compactor(main_ref, 300));
    let mut c = c;
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::Store(_)));
    assert_eq!(err.to_string(), "could not write to the session: disk full");
    assert_eq!(log.entries().len(), 12);
    let seen = seen.lock().unwrap();
    assert!(
        matches!(seen.last(), Some(CompactionEvent::Failed { error, .. }) if error.contains("disk full"))
    );
}

#[tokio::test]
async fn extra_instructions_go_to_the_system_prompt_never_the_user_prompt() {
    let (_, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let instructions = "keep our full understanding of bugs #3 and #4";
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(Some(format!("  {instructions}\n"))),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    let r = &main.requests()[0];
    assert_eq!(
        r.system,
        format!(
            "{}\n\n{ADDITIONAL_INSTRUCTIONS_HEADING}\n\n{instructions}\n",
            BUILTIN_PROMPT.trim_end()
        )
    );
    let user_prompt = r.messages[0].text();
    assert!(!user_prompt.contains("bugs #3"));
    assert!(!user_prompt.contains(ADDITIONAL_INSTRUCTIONS_HEADING));
    assert_eq!(out.report.instructions.as_deref(), Some(instructions));
    let Entry::Compaction(entry) = &out.entries[0] else {
        panic!()
    };
    assert_eq!(entry.instructions.as_deref(), Some(instructions));
}

#[tokio::test]
async fn blank_instructions_leave_the_prompt_alone() {
    let (_, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(Some(" \n".into())),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    assert_eq!(main.requests()[0].system, BUILTIN_PROMPT);
    assert_eq!(out.report.instructions, None);
}

#[tokio::test]
async fn an_overflow_limit_caps_the_budget_at_a_quarter() {
    let (_, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let mut c = compactor(main_ref, 20_000).with_prompt(short_prompt());
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::overflow(Some(1_200)),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    assert_eq!(out.report.plan.budget, 300);
    assert_eq!(out.report.plan.kept(), 9..12);
    assert_eq!(out.report.trigger, Trigger::Overflow);
}

#[tokio::test]
async fn a_summary_cut_at_the_output_limit_is_a_failed_attempt() {
    let (messages, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    let mut cut = reply("## Goal\nFix the parser; the user also asked to");
    cut.stop_reason = Some("max_tokens".into());
    main.push(Ok(cut));
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    let CompactError::Compaction { cause, .. } = &err else {
        panic!("expected a failed compaction, got {err:?}")
    };
    assert_eq!(
        *cause,
        AttemptFailure::TruncatedSummary {
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS
        }
    );
    assert!(cause.is_rejected_summary());
    assert_eq!(
        err.to_string(),
        "compaction with big failed: the model's summary stopped at the output limit of 8192 \
         tokens, so it may be cut short"
    );
    // Nothing was written.
    assert_eq!(log.entries().len(), messages.len());
}

#[tokio::test]
async fn a_compaction_model_cut_at_the_output_limit_falls_back_to_the_active_model() {
    let (_, mut log) = setup();
    let (cheap, cheap_ref) = model("cheap", "small");
    let (main, main_ref) = model("main", "big");
    let mut cut = reply("S1 cut sh");
    cut.stop_reason = Some("max_tokens".into());
    cheap.push(Ok(cut));
    main.push_text("S1 whole");
    let mut c = compactor(main_ref, 300).with_compaction_model(Some(cheap_ref));
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    assert_eq!(strip_ledger(&out.report.summary), "S1 whole");
    assert!(out.report.fallback && !out.report.truncated);
    assert!(matches!(
        out.report.fallback_cause,
        Some(AttemptFailure::TruncatedSummary { .. })
    ));
    let Entry::Compaction(entry) = &out.entries[0] else {
        panic!()
    };
    assert!(entry.extra.get("truncated").is_none());
    assert!(
        entry.extra["fallback_error"]
            .as_str()
            .unwrap()
            .contains("stopped at the output limit")
    );
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_returns_the_append() {
    let (_, log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let out = compacted(
        c.dry_run(&ctx, CompactRun::manual(None), &mut KnownWindows::new())
            .await
            .unwrap(),
    );
    assert_eq!(log.appends(), 0);
    assert_eq!(out.entries.len(), 4);
    let mut all = log.entries();
    all.extend(out.entries.clone());
    assert_eq!(replay(all), out.context);
    assert!(
        out.context.messages[1..]
            .iter()
            .all(|m| m.extra.contains_key(KEPT_BY))
    );
}

/// Records the names of the spans created while it is the default subscriber.
#[derive(Default)]
struct SpanNames(Mutex<Vec<String>>);

impl tracing::Subscriber for SpanNames {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut names = self.0.lock().unwrap();
        names.push(span.metadata().name().to_owned());
        tracing::span::Id::from_u64(names.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn each_step_runs_in_its_own_tracing_span() {
    let names = Arc::new(SpanNames::default());
    let (main, main_ref) = model("main", "big");
    main.push_text("S1");
    main.push_text("S1");
    let mut c = compactor(main_ref, 300);
    tracing::subscriber::with_default(names.clone(), || {
        let mut run = || {
            let (_, mut log) = setup();
            let ctx = log.replay();
            block_on(c.compact(
                &ctx,
                &mut log,
                CompactRun::manual(None),
                &mut KnownWindows::new(),
            ))
            .unwrap();
        };
        // Tests on other threads may register the same callsites while no subscriber is
        // interested; once this thread has registered them all, rebuilding the interest cache
        // makes the second run see every span.
        run();
        tracing::callsite::rebuild_interest_cache();
        names.0.lock().unwrap().clear();
        run();
    });
    assert_eq!(
        *names.0.lock().unwrap(),
        ["compaction", "plan", "request", "write"]
    );
}

/// The events of a compaction's lifecycle (started, falling back, finished, failed), without
/// the fold's progress events.
fn lifecycle(events: &[CompactionEvent]) -> Vec<CompactionEvent> {
    events
        .iter()
        .filter(|e| {
            !matches!(
                e,
                CompactionEvent::Folding { .. }
                    | CompactionEvent::Step { .. }
                    | CompactionEvent::Elided { .. }
                    | CompactionEvent::Shrinking { .. }
            )
        })
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_degenerate_summary_from_the_compaction_model_triggers_the_fallback() {
    // The shapes issue 18 describes (written by hand): one phrase repeated to the output limit,
    // an echo of COMPACTION.md, a copy of the last message of the transcript.
    let echo: String = BUILTIN_PROMPT
        .lines()
        .take(30)
        .collect::<Vec<_>>()
        .join("\n");
    // The last message of the summarized prefix, which the third answer copies.
    let (_, log) = setup();
    let ctx = log.replay();
    let probe = compactor(model("p", "p").1, 300);
    let prefix = probe
        .prepare(&ctx, &CompactRun::manual(None), &KnownWindows::new())
        .unwrap()
        .plan
        .prefix();
    let last = ctx.messages[prefix.end - 1].text();
    assert!(last.len() >= 20, "{last}");
    for (answer, expected) in [
        (
            "The user is reading the files. ".repeat(100),
            "the model's summary repeats one phrase",
        ),
        (
            echo,
            "the model's summary is a copy of the compaction prompt",
        ),
        (
            last.clone(),
            "the model's summary is a copy of the last message of the transcript",
        ),
    ] {
        let (_, mut log) = setup();
        let (cheap, cheap_ref) = model("cheap-provider", "cheap");
        let (main, main_ref) = model("main-provider", "big");
        cheap.push_text(answer);
        main.push_text("S1 from the active model");
        let mut c = compactor(main_ref, 300)
            .with_prompt(CompactionPrompt::builtin())
            .with_compaction_model(Some(cheap_ref));
        let ctx = log.replay();
        let out = compacted(
            c.compact(
                &ctx,
                &mut log,
                CompactRun::manual(None),
                &mut KnownWindows::new(),
            )
            .await
            .unwrap(),
        );
        assert_eq!(
            strip_ledger(&out.report.summary),
            "S1 from the active model"
        );
        let cause = out
            .report
            .fallback_cause
            .expect("the fallback ran")
            .to_string();
        assert!(cause.starts_with(expected), "{cause}");
        assert_eq!((cheap.calls(), main.calls()), (1, 1));
    }
}

/// What [`FromSource`] was given: the items, the previous summary, the request's text and
/// the prompt's length.
type Seen = (
    Vec<panto_transcript::TranscriptItem>,
    Option<String>,
    String,
    usize,
);

/// A summarizer that reads a request's source: it records what it was given and answers from
/// the items (or fails, when `fails`), and its provider side fails (the compactor must not
/// call it).
#[derive(Default)]
struct FromSource {
    seen: Mutex<Vec<Seen>>,
    fails: bool,
}

#[panto_provider::async_trait]
impl panto_provider::Provider for FromSource {
    fn name(&self) -> &str {
        "source"
    }
    async fn complete(
        &self,
        _request: &panto_provider::Request,
        _events: panto_provider::EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        Err(server_error())
    }
}

impl panto_compact::SourceSummarizer for FromSource {
    fn summarize_source(
        &self,
        request: &panto_provider::Request,
        source: panto_compact::RequestSource<'_>,
    ) -> Result<Message, ProviderError> {
        let mut items = Vec::new();
        source.for_each_item(|item| items.push(item.to_item()));
        let summary = format!("S: {} items were summarized.", items.len());
        self.seen.lock().unwrap().push((
            items,
            source.previous_summary.map(str::to_owned),
            request.messages[0].text(),
            source.prompt_len,
        ));
        if self.fails {
            return Err(server_error());
        }
        Ok(reply(summary))
    }
}

#[tokio::test]
async fn a_source_summarizer_reads_the_items_the_request_was_rendered_from() {
    let (messages, log) = setup();
    let summarizer = Arc::new(FromSource::default());
    let active = ModelRef::with_source(summarizer.clone(), "local");
    let ctx = log.replay();
    let mut c = compactor(active, 300);
    let out = compacted(
        c.dry_run(&ctx, CompactRun::manual(None), &mut KnownWindows::new())
            .await
            .unwrap(),
    );
    let seen = summarizer.seen.lock().unwrap();
    let [(items, previous, text, prompt_len)] = seen.as_slice() else {
        panic!("expected one request, got {}", seen.len());
    };
    // The items of the summarized messages, whole; the same as the request's text reads back.
    // That text is not written for a summarizer that does not read it: only its length is.
    let plan = &out.report.plan;
    let summarized = &messages[plan.head..plan.keep_from];
    let prompt = panto_transcript::render_request(summarized, None);
    assert_eq!(items, &panto_transcript::transcript_items(summarized));
    assert_eq!(
        &panto_transcript::parse_request(&prompt).unwrap().items,
        items
    );
    assert_eq!(text, "");
    assert_eq!(*prompt_len, prompt.len());
    assert_eq!(previous, &None);
    let expect = format!("S: {} items were summarized.", items.len());
    assert!(out.report.summary.starts_with(&expect));
}

/// A compaction model that reads the source and fails: the active model, which reads the
/// text, is sent the request with its prompt written whole, the same text the source's
/// summarizer was told the length of.
#[tokio::test]
async fn a_model_that_reads_the_text_after_a_source_summarizer_gets_the_whole_prompt() {
    let (messages, log) = setup();
    let summarizer = Arc::new(FromSource {
        fails: true,
        ..FromSource::default()
    });
    let (main, main_ref) = model("main-provider", "big");
    main.push_text("S1 from the active model");
    let mut c = compactor(main_ref, 300)
        .with_compaction_model(Some(ModelRef::with_source(summarizer.clone(), "local")));
    let ctx = log.replay();
    let out = compacted(
        c.dry_run(&ctx, CompactRun::manual(None), &mut KnownWindows::new())
            .await
            .unwrap(),
    );
    assert_eq!(
        strip_ledger(&out.report.summary),
        "S1 from the active model"
    );
    let plan = &out.report.plan;
    let prompt = panto_transcript::render_request(&messages[plan.head..plan.keep_from], None);
    let seen = summarizer.seen.lock().unwrap();
    let [(_, _, text, prompt_len)] = seen.as_slice() else {
        panic!("expected one request, got {}", seen.len());
    };
    assert_eq!((text.as_str(), *prompt_len), ("", prompt.len()));
    let requests = main.requests();
    let [request] = requests.as_slice() else {
        panic!("expected one request, got {}", requests.len());
    };
    assert_eq!(request.messages.len(), 1);
    assert_eq!(request.messages[0].text(), prompt);
}

/// `rounds` rounds of a user request and an assistant answer, each about `chars` characters of
/// distinct words, every message numbered.
pub(crate) fn long_rounds(rounds: usize, chars: usize) -> Vec<Message> {
    let words = |i: usize, who: &str| -> String {
        let mut text = format!("{who} {i}:");
        let mut k = 0;
        while text.len() < chars {
            text.push_str(&format!(" w{i}x{k}"));
            k += 1;
        }
        text
    };
    (0..rounds)
        .flat_map(|i| [user(&words(i, "request")), assistant(&words(i, "answer"))])
        .collect()
}

/// A log whose active compaction has `summary`, followed by `messages`.
fn log_after(summary: &str, messages: &[Message]) -> MemoryLog {
    let mut entry = panto_model::CompactionEntry::new(summary);
    entry.id = Some("c0".into());
    let mut entries = vec![Entry::Compaction(entry)];
    entries.extend(log_of(messages).entries().iter().cloned());
    MemoryLog::with_entries(entries)
}

/// A previous summary as a model writes one.
const PREVIOUS_SUMMARY: &str = "## Goal\n- Port the settings loader from YAML to TOML without changing `config::Settings`.\n\n## Decisions\n- Keep serde defaults; reject unknown keys with a clear error.\n\n## Progress\n- `src/settings/load.rs` reads TOML; the YAML path is still behind a flag.";

#[tokio::test]
async fn a_model_that_hands_back_the_previous_summary_fails_and_the_active_model_writes_it() {
    let messages = long_rounds(6, 400);
    let mut log = log_after(PREVIOUS_SUMMARY, &messages);
    let (cheap, cheap_ref) = model("cheap", "small");
    let (main, main_ref) = model("main", "big");
    // The compaction model copies `<previous-summary>` through; the active model adds the news.
    cheap.push_text(PREVIOUS_SUMMARY);
    let written = format!(
        "{PREVIOUS_SUMMARY}\n- Requests 0 to 4 asked for the w-series words; each answer listed them, nothing failed."
    );
    main.push_text(written.clone());
    let mut c = compactor(main_ref, 300).with_compaction_model(Some(cheap_ref));
    let ctx = log.replay();
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    assert!(
        cheap.requests()[0].messages[0]
            .text()
            .contains("<previous-summary>")
    );
    assert!(matches!(
        out.report.fallback_cause,
        Some(AttemptFailure::RepeatedPreviousSummary {
            repeated_percent: 100,
            new_chars: 0,
            ..
        })
    ));
    assert_eq!(strip_ledger(&out.report.summary), written);

    // Without a compaction model, the copy is the failure and nothing is written.
    let mut log = log_after(PREVIOUS_SUMMARY, &messages);
    let (main, main_ref) = model("main", "big");
    main.push_text(PREVIOUS_SUMMARY);
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("the model's summary repeats the previous summary"),
        "{err}"
    );
    assert_eq!(log.entries().len(), 1 + messages.len());
}

#[tokio::test]
async fn a_compaction_at_a_2048_token_limit_asks_a_model_with_the_short_prompt() {
    // About 3,000 tokens of conversation, which overflowed a window of 2,048 that the provider
    // stated (Ollama's default context).
    let messages = long_rounds(10, 600);
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    for i in 0..12 {
        main.push_text(format!(
            "## Goal\n- Answer the numbered requests in order (step {i}).\n\n## Progress\n- The requests so far were answered with their word lists."
        ));
    }
    let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
    let ctx = log.replay();
    assert!(estimate_request("", &ctx.messages) > 2_048);
    let out = compacted(
        c.compact(
            &ctx,
            &mut log,
            CompactRun::overflow(Some(2_048)),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap(),
    );
    let requests = main.requests();
    assert!(!requests.is_empty(), "no model was asked");
    assert_eq!(out.report.model, "small-model");
    assert_eq!(out.report.degraded, None);
    assert_eq!(out.report.requests, requests.len());
    for r in &requests {
        assert_eq!(r.system, BUILTIN_SHORT_PROMPT);
        assert!(
            r.max_output_tokens >= MIN_OUTPUT_TOKENS,
            "{}",
            r.max_output_tokens
        );
        let input = estimate_request(&r.system, &r.messages);
        assert!(
            input + u64::from(r.max_output_tokens) <= 2_048,
            "{input} + {} tokens do not fit 2,048",
            r.max_output_tokens
        );
    }
    // Above the threshold, or with no limit known, the long prompt is used.
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "big-model");
    main.push_text("## Goal\n- Answer the numbered requests.");
    let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
    let ctx = log.replay();
    c.compact(
        &ctx,
        &mut log,
        CompactRun::overflow(Some(SHORT_PROMPT_BELOW)),
        &mut KnownWindows::new(),
    )
    .await
    .unwrap();
    assert_eq!(main.requests()[0].system, BUILTIN_PROMPT);
}

/// Issue 39 point 3: the tiny form (prompt and output floor) is for a window stated under
/// 2,000 tokens. A window of 2,048 stated by a provider that counted a refused request above
/// panto's estimate scales to a limit of 1,869 estimated tokens, and a window that states no
/// limit, bounded at 1,869, may be as large; both keep the short prompt and the floor of 256,
/// as before the tiny form. A window configured at 1,869 is tiny.
#[tokio::test]
async fn a_stated_2048_estimated_under_2000_keeps_the_short_prompt_and_the_floor_of_256() {
    let messages = long_rounds(10, 600);
    let stated = Stated::new(2_048).with_counts(Some(2_300), 2_100);
    assert_eq!(stated.in_estimate(), 1_869);
    let mut scaled = KnownWindows::new();
    scaled.learn_stated(stated);
    let bounded = KnownWindows::new().with(Window::new(1_869, WindowSource::Bound));
    let tiny = KnownWindows::new().with(Window::new(1_869, WindowSource::Configured));
    for (mut windows, system, floor) in [
        (scaled, BUILTIN_SHORT_PROMPT, MIN_OUTPUT_TOKENS),
        (bounded, BUILTIN_SHORT_PROMPT, MIN_OUTPUT_TOKENS),
        (tiny, BUILTIN_TINY_PROMPT, 186),
    ] {
        assert_eq!(windows.limit(), Some(1_869));
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "small-model");
        for i in 0..12 {
            main.push_text(format!(
                "## Goal\n- Answer the numbered requests in order (step {i})."
            ));
        }
        let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
        let ctx = log.replay();
        let run = CompactRun::manual(None);
        let out = c.compact(&ctx, &mut log, run, &mut windows).await.unwrap();
        assert_eq!(compacted(out).report.model, "small-model");
        let requests = main.requests();
        assert!(!requests.is_empty());
        for r in &requests {
            assert_eq!(r.system, system, "{windows:?}");
            assert!(r.max_output_tokens >= floor, "{windows:?}: {r:?}");
        }
        if system == BUILTIN_TINY_PROMPT {
            assert!(
                requests
                    .iter()
                    .any(|r| r.max_output_tokens < MIN_OUTPUT_TOKENS)
            );
        }
    }
}

/// A bound an earlier overflow taught under 1,700 tokens (a window that states no limit,
/// learned by refusals) is a refusal for every later compaction of the session: the tiny
/// prompt and the output floor of a tenth from the first request, as the fold itself takes
/// them after a refusal under 1,700. On `515112c` these compactions took the short prompt and
/// the floor of 256 (at a bound of about 790, no transcript fitted beside a carried summary).
#[tokio::test]
async fn a_bound_an_earlier_overflow_taught_under_1700_makes_later_compactions_tiny() {
    let messages = long_rounds(10, 600);
    for bound in [1_500u64, 1_100] {
        let mut windows = KnownWindows::new().with(Window::new(bound, WindowSource::Bound));
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "small-model");
        for i in 0..16 {
            main.push_text(format!(
                "## Goal\n- Answer the numbered requests in order (step {i})."
            ));
        }
        let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
        let ctx = log.replay();
        let out = c
            .compact(&ctx, &mut log, CompactRun::manual(None), &mut windows)
            .await
            .unwrap();
        assert_eq!(compacted(out).report.model, "small-model", "{bound}");
        let requests = main.requests();
        assert!(!requests.is_empty(), "{bound}");
        for r in &requests {
            assert_eq!(r.system, BUILTIN_TINY_PROMPT, "{bound}");
        }
        // The floor of a tenth (the last request may ask more output for the final summary).
        assert!(
            requests[..requests.len() - 1]
                .iter()
                .all(|r| r.max_output_tokens < MIN_OUTPUT_TOKENS),
            "{bound}: {:?}",
            requests
                .iter()
                .map(|r| r.max_output_tokens)
                .collect::<Vec<_>>()
        );
    }
}

/// A reply of `text` that stopped at the output limit.
/// An overflow compaction of `log` at a stated 2,048-token window (Ollama's default).
pub(crate) async fn at_2048(
    c: &mut Compactor,
    log: &mut MemoryLog,
) -> Result<CompactOutcome, CompactError> {
    let ctx = log.replay();
    c.compact(
        &ctx,
        log,
        CompactRun::overflow(Some(2_048)),
        &mut KnownWindows::new(),
    )
    .await
}

fn cut_reply(text: &str) -> Message {
    let mut cut = reply(text);
    cut.stop_reason = Some("max_tokens".into());
    cut
}

#[tokio::test]
async fn a_summary_cut_at_the_output_limit_of_a_small_window_is_asked_again_with_more_output() {
    // A small model on Ollama's default window rambles past 256 tokens on its first chunk: the
    // fold asks it again with 512 tokens of output, and the compaction is the model's.
    let messages = long_rounds(10, 600);
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    main.push(Ok(cut_reply(
        "## Goal\n- Answer the numbered requests, and the user also",
    )));
    for i in 0..12 {
        main.push_text(format!(
            "## Goal\n- Answer the numbered requests (step {i})."
        ));
    }
    let (c, seen) = events(Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new())));
    let mut c = c;
    let out = compacted(at_2048(&mut c, &mut log).await.unwrap());
    assert_eq!(out.report.model, "small-model");
    assert_eq!(out.report.degraded, None);
    let requests = main.requests();
    assert_eq!(out.report.requests, requests.len());
    let (first, second) = (&requests[0], &requests[1]);
    assert_eq!(first.max_output_tokens, MIN_OUTPUT_TOKENS);
    assert_eq!(second.max_output_tokens, 2 * MIN_OUTPUT_TOKENS);
    let size = |r: &panto_provider::Request| estimate_request(&r.system, &r.messages);
    // The chunk shrinks when it must to make the room (here the first chunk still fits beside
    // 512 tokens), never past what the window holds.
    assert!(size(second) <= size(first));
    for r in &requests {
        assert!(r.max_output_tokens >= 2 * MIN_OUTPUT_TOKENS || std::ptr::eq(r, first));
        assert!(size(r) + u64::from(r.max_output_tokens) <= 2_048);
    }
    // The change of plan is said once, with its cause.
    let said: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            CompactionEvent::Replanned { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .collect();
    assert!(
        said.iter().any(|c| c.contains("stopped at the output limit of 256 tokens: asking again with 512")),
        "{said:?}"
    );
}

#[tokio::test]
async fn a_model_that_always_runs_out_of_output_is_asked_three_times_per_step_at_most() {
    let messages = long_rounds(10, 600);
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    for _ in 0..60 {
        main.push(Ok(cut_reply("Fact 1, fact 2, fact 3, fact 4")));
    }
    let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
    let err = at_2048(&mut c, &mut log).await.unwrap_err();
    let CompactError::Compaction { cause, .. } = &err else {
        panic!("expected a failed compaction, got {err:?}")
    };
    assert!(
        matches!(cause, AttemptFailure::TruncatedSummary { .. }),
        "{cause:?}"
    );
    let outputs: Vec<u32> = main
        .requests()
        .iter()
        .map(|r| r.max_output_tokens)
        .collect();
    // 256, then twice as much while the window leaves room for it beside a chunk; each step
    // the model never finishes goes on from panto's record, and the last one fails the
    // compaction.
    assert!(outputs.len() >= 2, "{outputs:?}");
    assert_eq!(outputs[..2], [MIN_OUTPUT_TOKENS, 2 * MIN_OUTPUT_TOKENS]);
    let mut asked: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for r in main.requests() {
        *asked.entry(r.messages[0].text()).or_default() += 1;
    }
    assert!(
        asked.values().all(|&n| n <= 1 + MAX_LONGER),
        "a chunk was asked more than {} times",
        1 + MAX_LONGER
    );
    // Nothing was written.
    assert_eq!(log.entries().len(), messages.len());
}

/// Issue 26, point 9: an overflow's requests number at most `2 + ceil(conversation / (window /
/// 2))`, two of them the conversation's. A summary cut at its output limit is asked again only
/// while the compaction's requests stay within the rest: with no room left in the bound, the
/// cut answer is the step's failure; with room, it is asked again with twice the output.
#[tokio::test]
async fn a_summary_cut_at_the_output_limit_is_asked_again_only_within_the_request_bound() {
    let messages = long_rounds(10, 600);
    let good = |i: usize| format!("## Goal\n- Answer the numbered requests (step {i}).");
    // The overflow the provider reported: a window of 2,048 tokens, and the conversation
    // counted so that the bound leaves `spare` requests beside the fold's plan.
    let overflow_of = |conversation: u64| {
        let error = ProviderError::ContextOverflow {
            message: "prompt is too long".into(),
            numbers: TokenNumbers::new(Some(conversation), Some(2_048)),
        };
        CompactRun::after_overflow(&error, conversation)
    };
    // The fold's requests when every answer ends.
    let planned = {
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "small-model");
        for i in 0..40 {
            main.push_text(good(i));
        }
        let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
        let ctx = log.replay();
        c.compact(
            &ctx,
            &mut log,
            overflow_of(40 * 1_024),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap();
        main.calls()
    };
    assert!(planned >= 3, "{planned}");
    // Twice the output more than doubles the fold's requests at 2,048 tokens (each later
    // request keeps room for a summary twice as long): 20 spare requests leave the room.
    for spare in [0, 20] {
        let allowed = planned + spare;
        let mut log = log_of(&messages);
        let (main, main_ref) = model("main", "small-model");
        // The first step's summary runs out of its 256 tokens; every other one ends.
        main.push(Ok(cut_reply(
            "## Goal\n- Answer the numbered requests, and the",
        )));
        for i in 0..40 {
            main.push_text(good(i));
        }
        let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
        let ctx = log.replay();
        let out = c
            .compact(
                &ctx,
                &mut log,
                overflow_of(allowed as u64 * 1_024),
                &mut KnownWindows::new(),
            )
            .await;
        assert!(main.calls() <= allowed, "{} > {allowed}", main.calls());
        let out = compacted(out.unwrap());
        assert_eq!(out.report.model, "small-model");
        let requests = main.requests();
        if spare == 0 {
            // Asking again would take the fold past the bound: the cut answer is the step's
            // failure, and the fold goes on from panto's record of the step's turns.
            assert!(
                out.report.steps[0].recorded.is_some(),
                "{:?}",
                out.report.steps
            );
            assert_ne!(requests[1].messages, requests[0].messages);
        } else {
            assert!(out.report.steps.iter().all(|s| s.recorded.is_none()));
            let outputs: Vec<u32> = main
                .requests()
                .iter()
                .map(|r| r.max_output_tokens)
                .collect();
            assert_eq!(
                outputs[..2],
                [MIN_OUTPUT_TOKENS, 2 * MIN_OUTPUT_TOKENS],
                "{outputs:?}"
            );
        }
    }
}

/// Issue 39, point 8: a step that asked only the active model (the compaction model failed an
/// earlier step and is not asked again in the fold) is said to have failed with that model
/// alone; the warning named the compaction model, which that step never asked.
#[tokio::test]
async fn a_step_warning_names_only_the_models_that_step_asked() {
    let messages = long_rounds(10, 600);
    let repeated = "keep going ".repeat(60);
    let mut log = log_of(&messages);
    let (cheap, cheap_ref) = model("cheap", "cheap-model");
    let (main, main_ref) = model("main", "small-model");
    // Step 1: the compaction model's answer fails the checks; the active model's passes.
    cheap.push_text(repeated.clone());
    main.push_text("## Goal\n- Answer the numbered requests (step 1).".to_owned());
    // Step 2: the active model's answer fails too; the steps after it pass.
    main.push_text(repeated.clone());
    for i in 3..40 {
        main.push_text(format!(
            "## Goal\n- Answer the numbered requests (step {i})."
        ));
    }
    let (c, seen) = events(
        Compactor::new(main_ref)
            .with_compaction_model(Some(cheap_ref))
            .with_ids(Arc::new(SequentialIds::new())),
    );
    let mut c = c;
    let out = compacted(at_2048(&mut c, &mut log).await.unwrap());
    assert!(out.report.steps.len() >= 3, "{:?}", out.report.steps);
    assert_eq!(
        cheap.requests().len(),
        1,
        "the compaction model is asked once"
    );
    let recorded: Vec<(usize, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            CompactionEvent::StepRecorded { step, cause, .. } => Some((*step, cause.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let (step, cause) = &recorded[0];
    assert_eq!(*step, 2);
    assert!(cause.contains("small-model"), "{cause}");
    assert!(!cause.contains("cheap-model"), "{cause}");
}

/// Issue 26, point 5: a model is asked for every step, and panto's own record is written only
/// for what the models failed. A step whose answers all fail panto's checks (here one phrase
/// repeated) goes on from panto's record of its turns, said at once; the model summarizes the
/// rest, and the compaction is its summary, with the recorded step named on the entry. The
/// last step goes on so too, after the model's summary of the turns before it; a fold no
/// model's summary passed at all fails as before.
#[tokio::test]
async fn a_step_no_summary_of_passed_goes_on_from_pantos_record_of_its_turns() {
    let messages = long_rounds(10, 600);
    let repeated = "keep going ".repeat(60);
    let good = |i: usize| format!("## Goal\n- Answer the numbered requests (step {i}).");

    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    main.push_text(repeated.clone());
    for i in 0..40 {
        main.push_text(good(i));
    }
    let (c, seen) = events(Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new())));
    let mut c = c;
    let out = compacted(at_2048(&mut c, &mut log).await.unwrap());
    let report = &out.report;
    assert_eq!(report.model, "small-model");
    assert_eq!(report.degraded, None);
    assert!(report.steps.len() >= 3, "{:?}", report.steps);
    let first = &report.steps[0];
    assert_eq!(first.model, RECORD_ONLY_MODEL);
    let cause = first.recorded.as_deref().unwrap();
    assert!(cause.contains("repeats one phrase"), "{cause}");
    assert!(report.steps[1..].iter().all(|s| s.recorded.is_none()));
    assert!(
        report
            .failed_attempts
            .iter()
            .any(|a| a.contains("repeats one phrase")),
        "{:?}",
        report.failed_attempts
    );
    // The next request carries panto's record of the first step's turns, their requests
    // quoted, and never the refused answer.
    let requests = main.requests();
    let second = requests[1].messages[0].text();
    assert!(second.contains("## Turns recorded by panto"), "{second}");
    assert!(second.contains("request 0: w0x0"), "{second}");
    assert!(!second.contains("keep going keep going"));
    // Said once, as it happened.
    let recorded: Vec<(usize, String)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            CompactionEvent::StepRecorded { step, cause, .. } => Some((*step, cause.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].0, 1);
    // The entry names the step; its ledger holds every request.
    let Entry::Compaction(entry) = &out.entries[0] else {
        panic!("expected the compaction entry first")
    };
    assert_eq!(entry.extra["recorded_steps"], json!([1]));
    let ledger = entry.extra["ledger"]["requests"].to_string();
    for i in 0..9 {
        assert!(
            ledger.contains(&format!("request {i}: w{i}x0")),
            "request {i}"
        );
    }

    // The last step: the model's summary of the turns before it stays, and panto's record of
    // the last turns follows it.
    let steps = report.steps.len();
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    for i in 0..steps - 1 {
        main.push_text(good(i));
    }
    for _ in 0..4 {
        main.push_text(repeated.clone());
    }
    let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
    let out = compacted(at_2048(&mut c, &mut log).await.unwrap());
    assert_eq!(out.report.model, "small-model");
    let last = out.report.steps.last().unwrap();
    assert!(last.recorded.is_some(), "{:?}", out.report.steps);
    let summary = strip_ledger(&out.report.summary);
    let model_part = good(steps - 2);
    let at_model = summary
        .find(&model_part)
        .expect("the model's summary is kept");
    let at_record = summary
        .find("## Turns recorded by panto")
        .expect("panto's record of the last step follows");
    assert!(at_model < at_record, "{summary}");
    assert!(!summary.contains("keep going keep going"));

    // A fold no model's summary passed at all fails, and nothing is written.
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    for _ in 0..40 {
        main.push_text(repeated.clone());
    }
    let mut c = Compactor::new(main_ref).with_ids(Arc::new(SequentialIds::new()));
    let err = at_2048(&mut c, &mut log).await.unwrap_err();
    assert!(
        matches!(
            &err,
            CompactError::Compaction {
                cause: AttemptFailure::RepetitiveSummary { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(log.entries().len(), messages.len());
}

#[tokio::test]
async fn a_summary_cut_at_the_configured_output_limit_is_not_asked_again() {
    // The user's own output limit is not raised: the answer that reached it fails.
    let (messages, mut log) = setup();
    let (main, main_ref) = model("main", "big");
    main.push(Ok(cut_reply(
        "## Goal\nFix the parser; the user also asked to",
    )));
    main.push_text("never asked");
    let mut c = compactor(main_ref, 300);
    let ctx = log.replay();
    let err = c
        .compact(
            &ctx,
            &mut log,
            CompactRun::overflow(Some(20_000)),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::Compaction { .. }), "{err:?}");
    assert_eq!(main.calls(), 1);
    assert_eq!(log.entries().len(), messages.len());
}

#[tokio::test]
async fn a_prompt_the_user_layered_is_used_as_it_is_in_a_small_window() {
    let messages = long_rounds(10, 600);
    let mut log = log_of(&messages);
    let (main, main_ref) = model("main", "small-model");
    for i in 0..12 {
        main.push_text(format!(
            "## Goal\n- Answer the numbered requests, step {i}."
        ));
    }
    let mine =
        CompactionPrompt::from_text("My own compaction prompt: keep every request.").unwrap();
    assert!(mine.is_layered() && !CompactionPrompt::builtin().is_layered());
    let mut c = Compactor::new(main_ref)
        .with_ids(Arc::new(SequentialIds::new()))
        .with_prompt(mine);
    let ctx = log.replay();
    c.compact(
        &ctx,
        &mut log,
        CompactRun::overflow(Some(2_048)),
        &mut KnownWindows::new(),
    )
    .await
    .unwrap();
    assert!(
        main.requests()
            .iter()
            .all(|r| r.system == "My own compaction prompt: keep every request.")
    );
}
