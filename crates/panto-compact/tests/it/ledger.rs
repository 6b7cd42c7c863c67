//! The ledger across chained compactions: facts planted in a conversation survive five chained
//! compactions by a model that remembers nothing, because the ledger carries them.

use panto_compact::KnownWindows;
use std::sync::Arc;

use panto_compact::testing::ScriptedProvider;
use panto_compact::{
    CompactOutcome, CompactRun, Compactor, CompactorConfig, LEDGER_FIELD, MemoryLog, ModelRef,
};
use panto_model::{ContentBlock, Entry, Message, Role, SequentialIds};
use panto_transcript::Ledger;
use proptest::prelude::*;
use serde_json::json;

use crate::block_on;

/// What a forgetful model answers to compaction request `k`: a valid, short summary that keeps
/// none of the facts (a new one each time: handing back the previous one is a failed attempt).
fn forgetful(k: usize) -> String {
    format!("Part {k} of the session went on; the details are not recalled here.")
}

/// One planted fact of each kind, numbered `k`, as the messages that state it: a request, an
/// edit of a file, a failing command and its error.
fn planted(k: usize) -> Vec<Message> {
    let edit = format!("e{k}");
    let run = format!("b{k}");
    vec![
        Message::user_text(format!(
            "Planted request {k}: rename the option to `opt_{k}`"
        )),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::tool_use(
                    &edit,
                    "edit",
                    json!({"path": format!("src/planted_{k}.rs")}),
                ),
                ContentBlock::tool_use(
                    &run,
                    "bash",
                    json!({"command": format!("plant-check-{k} --all")}),
                ),
            ],
        ),
        Message::new(
            Role::User,
            vec![
                ContentBlock::tool_result(&edit, "ok", false),
                ContentBlock::tool_result(&run, format!("error: planted failure {k}"), true),
            ],
        ),
        Message::assistant_text(format!("Noted fact {k}.")),
    ]
}

/// Filler turns: the user says "continue", the assistant answers with `words` words.
fn filler(turns: usize, words: usize) -> Vec<Message> {
    (0..turns)
        .flat_map(|i| {
            [
                Message::user_text("continue"),
                Message::assistant_text(format!("step {i} {}", vec!["filler"; words].join(" "))),
            ]
        })
        .collect()
}

prop_compose! {
    /// Five rounds, each with one planted fact (numbered by round) between filler turns of
    /// random counts and lengths, ending with filler so that the fact is summarized.
    fn rounds()(plan in prop::collection::vec((0usize..4, 1usize..4, 1usize..80), 5..=5)) -> Vec<Vec<Message>> {
        plan.into_iter()
            .enumerate()
            .map(|(k, (before, after, words))| {
                let mut round = filler(before, words);
                round.extend(planted(k));
                round.extend(filler(after, words));
                round
            })
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Planted requests, modified files, errors and commands survive five chained compactions
    /// through the ledger alone, in the text the next model reads and on the entry.
    #[test]
    fn planted_facts_survive_five_chained_compactions(rounds in rounds()) {
        let provider = Arc::new(ScriptedProvider::new("main"));
        let mut compactor = Compactor::new(ModelRef::new(provider.clone(), "forgetful"))
            .with_ids(Arc::new(SequentialIds::new()))
            .with_config(CompactorConfig::new().with_keep_tokens(0));
        let mut log = MemoryLog::memory();
        let mut planted_so_far = 0;
        for (k, round) in rounds.iter().enumerate() {
            let entries: Vec<Entry> = round.iter().cloned().map(Entry::Message).collect();
            block_on(log.append(&entries)).unwrap();
            planted_so_far += round.iter().filter(|m| m.text().starts_with("Planted request")).count();
            provider.push_text(forgetful(k));
            let ctx = log.replay();
            // Forced: a round can be smaller than the ledger that carries every earlier one,
            // and what survives is what this test checks.
            let run = CompactRun::manual(None).with_keep_tokens(0).with_force(true);
            let out = block_on(compactor.compact(&ctx, &mut log, run, &mut KnownWindows::new())).unwrap();
            prop_assert!(matches!(out, CompactOutcome::Compacted(_)));
        }
        let ctx = log.replay();
        let summary = ctx.summary().unwrap();
        let stored = ctx.compaction.as_ref().unwrap().extra.get(LEDGER_FIELD).and_then(Ledger::from_json).unwrap();
        for k in 0..planted_so_far {
            let request = format!("Planted request {k}: rename the option to `opt_{k}`");
            let file = format!("src/planted_{k}.rs");
            let command = format!("plant-check-{k} --all");
            let error = format!("error: planted failure {k}");
            for fact in [&request, &file, &command, &error] {
                prop_assert!(summary.contains(fact.as_str()), "{fact} lost:\n{summary}");
            }
            prop_assert!(stored.requests.contains(&request));
            prop_assert!(stored.modified.contains(&file));
            prop_assert!(stored.commands.contains(&command), "{:?}", stored);
            prop_assert!(stored.errors.iter().any(|e| e.message == error && e.resolved.is_none()));
        }
    }
}

/// Issue 39, point 7: a summary written for a library's agent names the recall tool when the
/// agent offers it, and otherwise no way to the rest at all: never a command of the `panto`
/// binary (`panto ledger SESSION`), which a library agent's model cannot run. The rendering
/// here leaves items out, so its closing note is there to check.
#[test]
fn a_librarys_summary_names_the_recall_tool_or_nothing_never_a_command() {
    for offered in [false, true] {
        let provider = Arc::new(ScriptedProvider::new("main"));
        for k in 0..64 {
            provider.push_text(forgetful(k));
        }
        let mut compactor = Compactor::new(ModelRef::new(provider.clone(), "forgetful"))
            .with_ids(Arc::new(SequentialIds::new()))
            .with_config(CompactorConfig::new().with_recall_tool(offered));
        let mut log = MemoryLog::memory();
        let mut messages = Vec::new();
        for k in 0..40 {
            messages.extend(planted(k));
            messages.extend(filler(1, 30));
        }
        let entries: Vec<Entry> = messages.into_iter().map(Entry::Message).collect();
        block_on(log.append(&entries)).unwrap();
        let ctx = log.replay();
        let run = CompactRun::overflow(Some(4_096)).with_reserved_tokens(2_800, 0);
        let out =
            block_on(compactor.compact(&ctx, &mut log, run, &mut KnownWindows::new())).unwrap();
        let CompactOutcome::Compacted(out) = out else {
            panic!("nothing to compact")
        };
        let summary = &out.report.summary;
        assert!(summary.contains("(Left out here:"), "{summary}");
        for line in summary.lines() {
            let lower = line.to_lowercase();
            assert!(
                !lower.contains("panto ledger")
                    && !lower.contains("`panto ")
                    && !lower.contains("panto show")
                    && !lower.contains("panto recall"),
                "a command in: {line}"
            );
        }
        // The note that names the tool (`recall_note`), only when the tool is offered.
        assert_eq!(
            summary.contains(&panto_compact::recall_note()),
            offered,
            "{summary}"
        );
        assert!(
            panto_compact::recall_note().contains(&format!("`{}`", panto_compact::RECALL_TOOL))
        );
    }
}

/// Under pressure, the record stays whole: chained overflow compactions at a 4,096-token window
/// render only a short ledger after each summary (what the next request leaves), but
/// the record stored on the entry keeps every planted fact, and the rendering says so.
#[test]
fn a_small_window_budgets_the_rendering_and_never_the_stored_record() {
    let provider = Arc::new(ScriptedProvider::new("main"));
    for k in 0..64 {
        provider.push_text(forgetful(k));
    }
    let mut compactor = Compactor::new(ModelRef::new(provider.clone(), "forgetful"))
        .with_ids(Arc::new(SequentialIds::new()));
    let mut log = MemoryLog::memory();
    let mut planted_so_far = 0;
    for chain in 0..3 {
        let mut messages = Vec::new();
        for k in planted_so_far..planted_so_far + 20 {
            messages.extend(planted(k));
            messages.extend(filler(1, 30));
        }
        planted_so_far += 20;
        let entries: Vec<Entry> = messages.into_iter().map(Entry::Message).collect();
        block_on(log.append(&entries)).unwrap();
        let ctx = log.replay();
        // An agent whose system prompt, tools and reply take most of a 4,096-token window.
        let run = CompactRun::overflow(Some(4_096)).with_reserved_tokens(2_800, 0);
        let out =
            block_on(compactor.compact(&ctx, &mut log, run, &mut KnownWindows::new())).unwrap();
        let CompactOutcome::Compacted(out) = out else {
            panic!("chain {chain}: nothing to compact")
        };
        assert_eq!(out.report.degraded, None, "chain {chain}");
        // The rendering fits what the agent's next request leaves, and says what it left out
        // and where it is.
        assert!(
            out.report.tokens_after + 2_800 <= 4_096,
            "chain {chain}: {}",
            out.report.tokens_after
        );
        let summary = &out.report.summary;
        let rendered = &summary[summary.find("## Ledger").unwrap()..];
        assert!(
            rendered.contains("the compaction entry keeps them whole.)"),
            "{rendered}"
        );
    }
    let ctx = log.replay();
    let stored = ctx
        .compaction
        .as_ref()
        .unwrap()
        .extra
        .get(LEDGER_FIELD)
        .and_then(Ledger::from_json)
        .unwrap();
    // The last kept turns are not summarized yet; every fact before them is in the record.
    let kept: String = ctx.messages[1..].iter().map(Message::text).collect();
    let mut recorded = 0;
    for k in 0..planted_so_far {
        let request = format!("Planted request {k}: rename the option to `opt_{k}`");
        if kept.contains(&request) {
            continue;
        }
        recorded += 1;
        assert!(stored.requests.contains(&request), "request {k} lost");
        assert!(stored.modified.contains(&format!("src/planted_{k}.rs")));
        assert!(stored.commands.contains(&format!("plant-check-{k} --all")));
        let error = format!("error: planted failure {k}");
        assert!(stored.errors.iter().any(|e| e.message == error));
    }
    assert!(recorded >= 50, "only {recorded} facts were summarized");
    assert_eq!(stored.left_out, 0);
}
