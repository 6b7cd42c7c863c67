//! Property tests, one per correctness rule of the seed, over generated conversations
//! (`panto_model::arbitrary::session`), budgets and scripted provider answers.

use panto_compact::KnownWindows;
use std::collections::HashSet;
use std::sync::Arc;

use panto_compact::testing::{ScriptedProvider, overflow, reply, server_error};
use panto_compact::{
    CompactError, CompactOutcome, CompactRun, Compacted, Compactor, CompactorConfig, Driver,
    MAX_SHRINKS, MIN_OUTPUT_TOKENS, MIN_SMALL_OUTPUT_TOKENS, MemoryLog, ModelRef,
};
use panto_model::arbitrary::session;
use panto_model::{
    CompactionEntry, ContentBlock, EffectiveContext, Entry, Message, Problem, SequentialIds,
    allowed_cuts, replay, turns, validate,
};
use panto_provider::{ProviderError, Request};
use panto_size::{Heuristic, Sizer};
use panto_transcript::strip_ledger;
use proptest::prelude::*;

use crate::{block_on, estimate_request, strip};

const PREVIOUS: &str = "PREVIOUS#0";

prop_compose! {
    /// Entries of a session: a generated conversation, sometimes cut inside a tool loop (the
    /// overflow-in-a-tool-loop case), sometimes after an earlier compaction.
    fn entries()(s in session(6), cut in any::<prop::sample::Index>(), cut_it in any::<bool>(),
                 prior in any::<bool>()) -> Vec<Entry> {
        let mut messages = s.messages;
        if cut_it {
            let keep = 1 + cut.index(messages.len());
            messages.truncate(keep);
        }
        let mut out = Vec::new();
        if prior {
            let mut c = CompactionEntry::new(PREVIOUS);
            c.id = Some("c0".into());
            out.push(Entry::Compaction(c));
        }
        out.extend(messages.into_iter().map(Entry::Message));
        out
    }
}

fn compactor(active: ModelRef, keep: u64) -> Compactor {
    Compactor::new(active)
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(CompactorConfig::new().with_keep_tokens(keep))
}

/// Checks that every compaction request (any request whose system prompt is not the agent's)
/// allows at least the output floor.
fn floor_respected(requests: &[Request]) -> Result<(), TestCaseError> {
    floor_respected_after(requests, |_| false)
}

/// As [`floor_respected`], where `refused(i)` says that the provider refused the `i`-th request
/// as too large: once it refused a compaction request under 1,700 of panto's tokens (input and
/// output) with no limit the fold believes (the scripted overflow states 4,000, which such a
/// request contradicts), the window is bounded below that and the floor is the tiny form's
/// (`MIN_SMALL_OUTPUT_TOKENS` at least, docs/compaction.md "Which windows are tiny").
fn floor_respected_after(
    requests: &[Request],
    refused: impl Fn(usize) -> bool,
) -> Result<(), TestCaseError> {
    let mut bounded = false;
    for (i, r) in requests.iter().enumerate() {
        if r.system == "agent" {
            continue;
        }
        let floor = if bounded {
            MIN_SMALL_OUTPUT_TOKENS as u32
        } else {
            MIN_OUTPUT_TOKENS
        };
        prop_assert!(
            r.max_output_tokens >= floor,
            "a compaction request allows {} tokens",
            r.max_output_tokens
        );
        let total = estimate_request(&r.system, &r.messages) + u64::from(r.max_output_tokens);
        bounded |= refused(i) && total < 1_700;
    }
    Ok(())
}

/// A manual compaction run as the seed's rules are stated: exactly the keep budget `keep`
/// (not capped at half of the conversation) and written even when it saves nothing, so that
/// every generated conversation, however small, is compacted by the plan alone.
fn exact(keep: u64) -> CompactRun {
    CompactRun::manual(None)
        .with_keep_tokens(keep)
        .with_force(true)
}

/// One manual compaction of `entries` with the default sizer; `None` when nothing to compact.
fn run(
    entries: &[Entry],
    keep: u64,
) -> (EffectiveContext, MemoryLog, Option<Compacted>, Vec<Request>) {
    let provider = Arc::new(ScriptedProvider::new("main"));
    provider.push_text("SUMMARY#1");
    let mut c = compactor(ModelRef::new(provider.clone(), "big"), keep);
    let mut log = MemoryLog::with_entries(entries.to_vec());
    let old = log.replay();
    let out = block_on(c.compact(&old, &mut log, exact(keep), &mut KnownWindows::new())).unwrap();
    let out = match out {
        CompactOutcome::Compacted(c) => Some(*c),
        CompactOutcome::NothingToCompact(_) => None,
    };
    (old, log, out, provider.requests())
}

/// Tool-protocol problems (orphans and unanswered calls) by kind and id.
fn dangling(messages: &[Message]) -> HashSet<(bool, String)> {
    validate(messages)
        .into_iter()
        .filter_map(|p| match p {
            Problem::OrphanResult { tool_use_id, .. } => Some((true, tool_use_id)),
            Problem::UnansweredCall { tool_use_id, .. } => Some((false, tool_use_id)),
            _ => None,
        })
        .collect()
}

/// Prefixes every tool id, so a second generated conversation can follow the first.
fn rename_ids(messages: &mut [Message], prefix: &str) {
    for m in messages {
        for b in &mut m.content {
            match b {
                ContentBlock::ToolUse(u) => u.id = format!("{prefix}{}", u.id),
                ContentBlock::ToolResult(r) => r.tool_use_id = format!("{prefix}{}", r.tool_use_id),
                _ => {}
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Reply,
    Empty,
    Overflow,
    Other,
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        Just(Answer::Reply),
        Just(Answer::Empty),
        Just(Answer::Overflow),
        Just(Answer::Other),
    ]
}

fn scripted(a: Answer) -> Result<Message, ProviderError> {
    match a {
        Answer::Reply => Ok(reply("an answer")),
        Answer::Empty => Ok(reply("")),
        Answer::Overflow => Err(overflow(None, Some(4_000))),
        Answer::Other => Err(server_error()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Rule 1: never split a turn. The kept suffix starts at an allowed cut, holds whole
    /// turns, and always holds the in-flight turn.
    #[test]
    fn rule1_the_kept_suffix_starts_at_a_turn_boundary(entries in entries(), keep in 0u64..3_000) {
        let (old, _, out, requests) = run(&entries, keep);
        floor_respected(&requests)?;
        let Some(out) = out else { return Ok(()) };
        let plan = &out.report.plan;
        let conversation = &old.messages[plan.head..];
        prop_assert!(allowed_cuts(conversation)[plan.keep_from - plan.head]);
        let last = turns(conversation).last().cloned().unwrap();
        prop_assert!(plan.head + last.start >= plan.keep_from);
        prop_assert_eq!(plan.end, old.messages.len());
    }

    /// Rule 2: no dangling protocol fragments. Compaction adds no orphan result and no
    /// unanswered call that the input did not already have.
    #[test]
    fn rule2_no_new_dangling_tool_fragments(entries in entries(), keep in 0u64..3_000) {
        let (old, _, out, _) = run(&entries, keep);
        let Some(out) = out else { return Ok(()) };
        let before = dangling(&old.messages);
        let after = dangling(&out.context.messages);
        prop_assert!(after.is_subset(&before), "new problems: {:?}", after.difference(&before).collect::<Vec<_>>());
    }

    /// Rule 3: a compaction block resets the context on replay.
    #[test]
    fn rule3_the_compaction_block_resets_the_context(entries in entries(), keep in 0u64..3_000) {
        let (_, log, out, _) = run(&entries, keep);
        let Some(out) = out else { return Ok(()) };
        let full = log.replay();
        prop_assert_eq!(&full.messages, &replay(out.entries.clone()).messages);
        prop_assert_eq!(full.messages[0].compaction_summary().map(strip_ledger), Some("SUMMARY#1"));
        prop_assert_eq!(full.compaction.as_ref().and_then(|c| c.id.as_deref()), Some(out.report.id.as_str()));
        prop_assert_eq!(full.messages.len(), 1 + out.report.plan.kept().len());
        prop_assert_eq!(&full, &out.context);
    }

    /// Rule 4: the kept turns are replayed after the block, equal to the originals except for
    /// the `kept_by` marker and fresh ids.
    #[test]
    fn rule4_kept_turns_follow_the_block_unchanged(entries in entries(), keep in 0u64..3_000) {
        let (old, _, out, _) = run(&entries, keep);
        let Some(out) = out else { return Ok(()) };
        let kept: Vec<Message> = out.context.messages[1..].iter().map(strip).collect();
        let originals: Vec<Message> = old.messages[out.report.plan.kept()].iter().map(strip).collect();
        prop_assert_eq!(kept, originals);
        let old_ids: HashSet<&str> = entries.iter().filter_map(Entry::id).collect();
        let mut new_ids = HashSet::new();
        for m in &out.context.messages[1..] {
            prop_assert_eq!(m.kept_by(), Some(out.report.id.as_str()));
            let id = m.id.as_deref().unwrap();
            prop_assert!(!old_ids.contains(id) && new_ids.insert(id));
        }
    }

    /// Rule 5: repeated compactions pass only the latest active summary.
    #[test]
    fn rule5_only_the_latest_summary_is_passed(
        first in entries(),
        later in prop::collection::vec(session(3), 2),
        keep in 0u64..1_500,
    ) {
        let provider = Arc::new(ScriptedProvider::new("main"));
        let summaries = ["SUMMARY#1", "SUMMARY#2", "SUMMARY#3"];
        for s in summaries {
            provider.push_text(s);
        }
        let mut c = compactor(ModelRef::new(provider.clone(), "big"), keep);
        let mut log = MemoryLog::with_entries(first);
        for k in 0..3 {
            if k > 0 {
                let mut more = later[k - 1].messages.clone();
                rename_ids(&mut more, &format!("b{k}_"));
                block_on(log.append(&more.into_iter().map(Entry::Message).collect::<Vec<_>>())).unwrap();
            }
            let ctx = log.replay();
            let active = ctx.summary().map(|s| strip_ledger(s).to_owned());
            let calls = provider.calls();
            let out = block_on(c.compact(&ctx, &mut log, exact(keep), &mut KnownWindows::new())).unwrap();
            if matches!(out, CompactOutcome::NothingToCompact(_)) {
                prop_assert_eq!(provider.calls(), calls);
                continue;
            }
            let prompt = provider.requests()[calls].messages[0].text();
            let mut all = vec![PREVIOUS];
            all.extend(summaries);
            for s in all {
                let expect = usize::from(active.as_deref() == Some(s));
                prop_assert_eq!(prompt.matches(s).count(), expect, "{} in request {}", s, k);
            }
        }
    }

    /// Rule 6: after an overflow, exactly one compaction and one retry, whatever the provider
    /// answers.
    #[test]
    fn rule6_an_overflow_is_retried_exactly_once(
        entries in entries(),
        script in prop::collection::vec(answer(), 0..5),
        keep in 0u64..3_000,
    ) {
        let provider = Arc::new(ScriptedProvider::new("main"));
        for a in &script {
            provider.push(scripted(*a));
        }
        let log = MemoryLog::with_entries(entries);
        let ctx = log.replay();
        let mut sent = ctx.clone();
        sent.messages.push(Message::user_text("new prompt"));
        let mut d = Driver::new(compactor(ModelRef::new(provider.clone(), "big"), keep), log, ctx)
            .with_system("agent");
        let result = block_on(d.send(vec![Message::user_text("new prompt")], &mut |_| {}));
        let at = |i: usize| script.get(i).copied().unwrap_or(Answer::Other);
        floor_respected_after(&provider.requests(), |i| at(i) == Answer::Overflow)?;

        // What the script says should happen: one conversation request, and a second one
        // only after an overflow that a compaction fixed.
        let conversation_requests = provider.requests().iter().filter(|r| r.system == "agent").count();
        prop_assert!(conversation_requests <= 2);
        let compactions = d.log().entries().iter().filter(|e| matches!(e, Entry::Compaction(c) if c.id.as_deref() != Some("c0"))).count();
        prop_assert!(compactions <= 1);
        match &result {
            Ok(r) if r.compaction.is_some() => prop_assert_eq!(conversation_requests, 2),
            Ok(_) => {
                prop_assert!(matches!(at(0), Answer::Reply | Answer::Empty));
                prop_assert_eq!(conversation_requests, 1);
            }
            Err(CompactError::Provider(_)) => {}
            Err(CompactError::OverflowNothingToCompact { .. }) => prop_assert_eq!(conversation_requests, 1),
            Err(CompactError::OverflowCompactionFailed { .. }) => {
                prop_assert_eq!(compactions, 0);
                prop_assert_eq!(conversation_requests, 1);
            }
            Err(CompactError::OverflowNoProgress { .. }) => {
                prop_assert_eq!(compactions, 1);
                prop_assert_eq!(conversation_requests, 1);
            }
            Err(CompactError::OverflowAfterCompaction { .. }) => prop_assert_eq!(conversation_requests, 2),
            Err(e) => prop_assert!(false, "unexpected {:?}", e),
        }
        if matches!(at(0), Answer::Overflow) && compactions == 1 {
            let no_progress = matches!(result, Err(CompactError::OverflowNoProgress { .. }));
            prop_assert!(no_progress || conversation_requests == 2);
        }
        // The prompt is in the log whatever happened.
        prop_assert!(d.log().entries().iter().any(|e| matches!(e, Entry::Message(m) if m.text() == "new prompt")));
    }

    /// Rule 7: when `compaction_model` fails, the active model is asked instead, and the
    /// compaction model is not asked again in the same compaction; when both fail, nothing is
    /// written.
    #[test]
    fn rule7_a_failed_compaction_model_falls_back_exactly_once(
        entries in entries(),
        first in answer(),
        second in answer(),
        same_provider in any::<bool>(),
    ) {
        let cheap = Arc::new(ScriptedProvider::new("cheap"));
        let main = if same_provider { cheap.clone() } else { Arc::new(ScriptedProvider::new("main")) };
        cheap.push(scripted(first));
        main.push(scripted(second));
        let mut c = compactor(ModelRef::new(main.clone(), "big"), 0)
            .with_compaction_model(Some(ModelRef::new(cheap.clone(), "small")));
        let mut log = MemoryLog::with_entries(entries.clone());
        let ctx = log.replay();
        let result = block_on(c.compact(&ctx, &mut log, exact(0), &mut KnownWindows::new()));
        // A refusal under 1,700 tokens bounds the window (`floor_respected_after`): the
        // compaction model's request answers `first`, the active model's `second` (after it,
        // in one queue when the provider is the same).
        let overflow = |a: Answer| a == Answer::Overflow;
        floor_respected_after(&cheap.requests(), |i| {
            (i == 0 && overflow(first)) || (same_provider && i == 1 && overflow(second))
        })?;
        floor_respected_after(&main.requests(), |i| {
            if same_provider { i <= 1 && overflow([first, second][i]) } else { i == 0 && overflow(second) }
        })?;
        let models: Vec<String> = [cheap.requests(), if same_provider { vec![] } else { main.requests() }]
            .concat()
            .into_iter()
            .map(|r| r.model)
            .collect();
        let first_ok = matches!(first, Answer::Reply);
        let second_ok = matches!(second, Answer::Reply);
        // The compaction model is asked first, once: a model that failed is not asked again in
        // the same fold. The active model follows when it failed, again only after a rejection
        // for size (the fold shrinks).
        let smalls = models.iter().filter(|m| *m == "small").count();
        let bigs = models.len() - smalls;
        prop_assert!(smalls <= 1);
        prop_assert!(bigs <= 1 + MAX_SHRINKS);
        if first_ok {
            prop_assert_eq!(bigs, 0);
        }
        if bigs > 1 {
            prop_assert!(matches!(second, Answer::Overflow));
        }
        if same_provider && !models.is_empty() {
            // One queue: the order is the order of the requests.
            prop_assert_eq!(&models[0], "small");
            prop_assert!(models[1..].iter().all(|m| m == "big"));
        }
        match result {
            Ok(CompactOutcome::NothingToCompact(_)) => prop_assert!(models.is_empty()),
            Ok(CompactOutcome::Compacted(out)) => {
                prop_assert!(first_ok || second_ok);
                prop_assert_eq!(out.report.fallback, !first_ok);
                let expect: &[&str] = if first_ok { &["small"] } else { &["small", "big"] };
                prop_assert_eq!(models, expect);
                prop_assert_eq!(log.appends(), 1);
            }
            Err(CompactError::BothModelsFailed { .. } | CompactError::FoldOverflow { .. } | CompactError::NoRoom(_)) => {
                prop_assert!(!first_ok && !second_ok);
                prop_assert!(models.len() >= 2 && bigs >= 1);
                prop_assert_eq!(log.entries(), entries.as_slice());
            }
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }

    /// Rule 8: without usage data, the kept suffix fits the budget by the heuristic (unless it
    /// is only the in-flight turn), is the longest that does, and always holds the in-flight
    /// turn.
    #[test]
    fn rule8_without_usage_the_suffix_fits_the_budget(entries in entries(), keep in 0u64..3_000) {
        let entries: Vec<Entry> = entries
            .into_iter()
            .map(|e| match e {
                Entry::Message(mut m) => {
                    m.usage = None;
                    Entry::Message(m)
                }
                other => other,
            })
            .collect();
        let ctx = replay(entries);
        let c = compactor(ModelRef::new(Arc::new(ScriptedProvider::new("main")), "big"), keep);
        let sizes = Heuristic.message_sizes(&ctx.messages);
        let head = usize::from(ctx.compaction.is_some());
        let ts = turns(&ctx.messages[head..]);
        let (keep_from, kept_turns) = match c.prepare(&ctx, &exact(keep), &KnownWindows::new()) {
            Ok(p) => (p.plan.keep_from, p.plan.kept_turns),
            Err(n) => (head, n.turns),
        };
        let kept: u64 = sizes[keep_from..].iter().sum();
        prop_assert!(kept <= keep || kept_turns == 1, "kept {} > budget {}", kept, keep);
        if let Some(last) = ts.last() {
            prop_assert!(keep_from <= head + last.start, "the in-flight turn is kept");
            prop_assert!(kept_turns >= 1);
        }
        if keep_from > head {
            // The turn before the suffix did not fit.
            let previous = ts.iter().find(|t| head + t.end == keep_from).unwrap();
            let more: u64 = sizes[head + previous.start..head + previous.end].iter().sum();
            prop_assert!(kept + more > keep);
        }
    }
}

#[test]
fn rule8_missing_sizes_keep_only_the_in_flight_turn() {
    let messages = crate::rounds(0, 3);
    let ctx = replay(messages.into_iter().map(Entry::Message));
    let p = panto_compact::plan(&ctx, &[], 1_000_000);
    assert_eq!(p.kept_turns, 1);
    assert_eq!(p.kept(), 11..12);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Issue 30: a manual compaction without a budget of its own summarizes something whenever
    /// the conversation has two turns or more, whatever `keep_tokens` is; it keeps at most
    /// half of the conversation (unless that half is only the in-flight turn).
    #[test]
    fn a_manual_compaction_of_two_turns_or_more_summarizes_something(
        entries in entries(), keep in 0u64..1_000_000,
    ) {
        let ctx = replay(entries);
        let c = compactor(ModelRef::new(Arc::new(ScriptedProvider::new("main")), "big"), keep);
        let head = usize::from(ctx.compaction.is_some());
        let ts = turns(&ctx.messages[head..]);
        let sizes = panto_size::UsageSizer::default().message_sizes(&ctx.messages);
        let conversation: u64 = sizes[head..].iter().sum();
        match c.prepare(&ctx, &CompactRun::manual(None), &KnownWindows::new()) {
            Ok(p) => {
                prop_assert!(!p.plan.is_empty());
                prop_assert!(p.plan.kept_tokens <= conversation / 2 || p.plan.kept_turns == 1);
                prop_assert_eq!(p.plan.budget, keep.min(conversation / 2));
                prop_assert_eq!(p.tokens_before, sizes.iter().sum::<u64>());
            }
            Err(nothing) => prop_assert!(ts.len() <= 1, "{} turns, nothing summarized: {}", ts.len(), nothing),
        }
    }

    /// Issue 30: a compaction that is written without `force` makes the conversation smaller;
    /// one that would not is refused with nothing written, and `force` writes it.
    #[test]
    fn only_a_compaction_that_shrinks_is_written_unless_forced(
        entries in entries(), keep in 0u64..3_000, long in any::<bool>(),
    ) {
        // A long summary (distinct sentences, so that it passes the checks) rarely shrinks a
        // small generated conversation; a short one mostly does.
        let summary = if long {
            (0..30).map(|i| format!("Point {i} of what was said.")).collect::<Vec<_>>().join(" ")
        } else {
            "SUMMARY#1".to_owned()
        };
        for force in [false, true] {
            let provider = Arc::new(ScriptedProvider::new("main"));
            provider.push_text(summary.clone());
            let mut c = compactor(ModelRef::new(provider.clone(), "big"), keep);
            let mut log = MemoryLog::with_entries(entries.clone());
            let old = log.replay();
            let run = CompactRun::manual(None).with_keep_tokens(keep).with_force(force);
            match block_on(c.compact(&old, &mut log, run, &mut KnownWindows::new())) {
                Ok(CompactOutcome::Compacted(out)) => {
                    let r = &out.report;
                    prop_assert!(force || r.tokens_after < r.tokens_before, "{} -> {}", r.tokens_before, r.tokens_after);
                    prop_assert_eq!(log.appends(), 1);
                    prop_assert_eq!(r.tokens_after, panto_size::estimate("", "", &out.context.messages).conversation());
                    prop_assert_eq!(r.tokens_before, panto_size::estimate("", "", &old.messages).conversation());
                }
                Ok(CompactOutcome::NothingToCompact(_)) => prop_assert_eq!(log.appends(), 0),
                Err(CompactError::NotSmaller(n)) => {
                    prop_assert!(!force);
                    prop_assert!(n.tokens_after >= n.tokens_before);
                    prop_assert_eq!(log.entries(), entries.as_slice());
                }
                Err(e) => prop_assert!(false, "unexpected {:?}", e),
            }
        }
    }
}

/// The shrunk failure of `rule6_an_overflow_is_retried_exactly_once` (regression file): every
/// request refused with the scripted "limit 4,000", which a compaction request of less than
/// that contradicts. Once one under 1,700 of panto's tokens is refused so, the window is bounded
/// below it and the fold's next request takes the tiny output floor (under 256, at least 64);
/// the rule's check asked 256 of every compaction request whatever was refused.
#[test]
fn a_compaction_request_under_1700_refused_against_a_limit_it_contradicts_takes_the_tiny_floor() {
    let history = panto_compact::testing::sized_conversation("agent", 3_000, 2_000, false);
    let provider = Arc::new(ScriptedProvider::new("main"));
    for a in [Answer::Overflow, Answer::Overflow, Answer::Overflow] {
        provider.push(scripted(a));
    }
    for _ in 0..20 {
        provider.push(scripted(Answer::Reply));
    }
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let ctx = log.replay();
    let mut d = Driver::new(
        compactor(ModelRef::new(provider.clone(), "big"), 0),
        log,
        ctx,
    )
    .with_system("agent");
    let result = block_on(d.send(vec![Message::user_text("new prompt")], &mut |_| {}));
    let requests = provider.requests();
    let sizes: Vec<(u64, u32)> = requests
        .iter()
        .map(|r| {
            (
                estimate_request(&r.system, &r.messages),
                r.max_output_tokens,
            )
        })
        .collect();
    assert!(result.is_ok(), "{result:?} {sizes:?}");
    // The conversation, then two compaction requests refused: the first over 1,700, the second
    // under it; both at the floor of 256.
    let (second, output) = sizes[2];
    assert!(sizes[1].0 + u64::from(sizes[1].1) >= 1_700, "{sizes:?}");
    assert!(second + u64::from(output) < 1_700, "{sizes:?}");
    assert!(
        sizes[1].1 >= MIN_OUTPUT_TOKENS && output >= MIN_OUTPUT_TOKENS,
        "{sizes:?}"
    );
    let after = requests[3..].iter().filter(|r| r.system != "agent");
    let floors: Vec<u32> = after.map(|r| r.max_output_tokens).collect();
    assert!(!floors.is_empty(), "{sizes:?}");
    let least = MIN_SMALL_OUTPUT_TOKENS as u32;
    assert!(floors.iter().all(|&f| f >= least), "{sizes:?}");
    assert!(floors.iter().any(|&f| f < MIN_OUTPUT_TOKENS), "{sizes:?}");
    floor_respected_after(&requests, |i| i < 3).unwrap();
}
