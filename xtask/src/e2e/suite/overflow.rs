//! The overflow scenarios: a conversation sent until the real server rejects a request for its
//! size, once and twice the window, and the checks of the compaction that recovered it.

use std::fs;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::{
    Compaction, Evidence, Expect, FOLD_TIMEOUT, FOLD_WINDOWS, Figures, KEY, MAX_NOTES, MODEL,
    OVERFLOW_LOG, Panto, Protocol, RECORD_ONLY_MODEL, Run, Setup, WRITTEN, checks, note,
};

/// Sends until the real server rejects a request for its size; checks the one compaction, the
/// retry, the replay, the usage and the server's side of it.
pub(in crate::e2e) fn overflow(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let panto = setup.panto(p, "overflow", false)?;
    let s = "overflow.jsonl";
    for message in [
        "Hello! My name is Ada and I am testing you today.",
        "Which name did I give you?",
    ] {
        let run = panto.run(&["send", s, message])?.expect(0)?;
        ensure!(!run.stdout.trim().is_empty(), "the reply printed nothing");
    }

    let evidence = Evidence::mark(&setup.main);
    let mut overflowed_at = None;
    for i in 1..=MAX_NOTES {
        let run = panto
            .run(&["send", s, &note(i, setup.overflow_sentences)])?
            .expect(0)?;
        ensure!(
            !run.stdout.trim().is_empty(),
            "the reply to note {i} printed nothing"
        );
        if checks::compactions(&panto.session(s)?).is_empty() {
            ensure!(
                !run.stderr.contains("compact"),
                "note {i}: panto talks of compaction but wrote none: {}",
                run.stderr
            );
            continue;
        }
        overflowed_at = Some((i, run));
        break;
    }
    let (i, run) = overflowed_at.with_context(|| {
        format!("the server never rejected a request for its size in {MAX_NOTES} long notes")
    })?;
    ensure!(
        i >= 2,
        "the first long note overflowed: the notes are too long for the test"
    );
    let (figures, note) = recovered(setup, &panto, s, &evidence, &run, i, 1..i)?;
    Ok(Compaction {
        kind: "overflow",
        figures,
        note: format!("long note {i}: {note}"),
    })
}

/// Overflow recovery on a conversation at least [`FOLD_WINDOWS`] windows long (written to the
/// session directly, as an imported session would be): the built-in prompt, a prefix that no
/// one request can hold, so the compaction folds it through several requests.
pub(in crate::e2e) fn overflow_twice(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let mut panto = setup.panto(p, "overflow-twice", false)?;
    panto.timeout = FOLD_TIMEOUT;
    let s = "twice.jsonl";
    // Notes of a third of the window each, with short answers: enough for FOLD_WINDOWS windows.
    let notes = usize::try_from(3 * FOLD_WINDOWS + 1)?;
    let mut lines = String::new();
    for i in 1..=notes {
        let user = serde_json::json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": note(i, setup.note_sentences)}]});
        let answer = serde_json::json!({"type": "message", "id": format!("{WRITTEN}{i}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("Noted: note {i}.")}]});
        lines.push_str(&format!("{user}\n{answer}\n"));
    }
    fs::write(panto.dir.join(s), lines)?;
    let evidence = Evidence::mark(&setup.main);
    let run = panto
        .run(&["send", s, "Please remember note 99. Which note came first?"])?
        .expect(0)?;
    let (figures, note) = recovered(setup, &panto, s, &evidence, &run, 99, 1..notes + 1)?;
    // The fold was planned in several requests (`panto: compacting in N steps`).
    let planned = run
        .stderr
        .split("compacting in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(1);
    ensure!(
        planned >= 2,
        "a conversation of {FOLD_WINDOWS} windows was compacted without folding: {}",
        run.stderr
    );
    Ok(Compaction {
        kind: "overflow x2",
        figures,
        note: format!("{notes} notes written, one send: {note}"),
    })
}

/// Checks an overflow recovery that `run` (the `send` of note `i`) went through: one
/// compaction by the real model with the built-in prompt, every request of its fold within the
/// window, every note of `old` summarized or kept, the retry's reply, a replay that fits, and
/// one more turn. Returns the entry's figures and a note of the fold's requests and sizes.
fn recovered(
    setup: &Setup,
    panto: &Panto<'_>,
    s: &str,
    evidence: &Evidence,
    run: &Run,
    i: usize,
    old: std::ops::Range<usize>,
) -> Result<(Figures, String)> {
    ensure!(
        run.stderr.contains(
            "panto: the request was too large for the model: compacting, then retrying once"
        ),
        "note {i}: the compaction was not reported as an overflow: {}",
        run.stderr
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    // SmolLM2-135M often copies the last note instead of summarizing; panto rejects such a
    // summary (docs/compaction.md, "2d") and, with no model left, writes its own record so the
    // conversation goes on. Either outcome must hold every other check.
    let degraded = entry["degraded"] == true;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "overflow",
            provider: if degraded { "panto" } else { p_flag(panto) },
            model: if degraded { RECORD_ONLY_MODEL } else { MODEL },
            fallback: false,
            instructions: None,
        },
    )?;
    if degraded {
        let why = entry["degraded_error"].as_str().unwrap_or_default();
        ensure!(
            why.contains(MODEL),
            "a record-only compaction must say why the model's summary was refused: {entry}"
        );
    }
    ensure!(
        figures.after < figures.before,
        "the compaction did not shrink the context: {} -> {}",
        figures.before,
        figures.after
    );
    ensure!(
        figures.keep <= setup.n_ctx / 4 && figures.keep >= setup.n_ctx / 8,
        "the keep budget was {}, expected about the server's window / 4 = {} (the default \
         budget is capped by the limit the overflow reported)",
        figures.keep,
        setup.n_ctx / 4
    );
    let next = checks::kept_copies(&entries, at)?;
    let in_flight = &entries[next - 1];
    ensure!(
        checks::text(in_flight).starts_with(&format!("Please remember note {i}.")),
        "the last kept copy is not the prompt that overflowed: {in_flight}"
    );
    ensure!(
        entries.len() == next + 1 && entries[next]["role"] == "assistant",
        "expected exactly the retry's reply after the kept copies, found {} entries",
        entries.len() - next
    );

    // The server's side: the conversation's rejection, the fold's requests with the built-in
    // prompt (a few rejected at most), every old note in some transcript or kept.
    let requests = entry["requests"].as_u64().unwrap_or(0);
    let steps = entry["fold_steps"].as_u64().unwrap_or(1);
    let log = evidence.new_log(&setup.main);
    let rejections = log.matches(OVERFLOW_LOG).count() as u64;
    if degraded {
        // The fold stopped at the refused summary; the record counts no model request.
        ensure!(
            (1..=4).contains(&rejections),
            "the server rejected {rejections} requests for their size"
        );
    } else {
        ensure!(
            requests >= steps && requests <= steps + 3,
            "the fold sent {requests} requests for {steps} steps"
        );
        ensure!(
            rejections == 1 + (requests - steps),
            "the server rejected {rejections} requests for their size, expected the \
             conversation's and the fold's {} rejected ones",
            requests - steps
        );
    }
    let reported = log
        .lines()
        .find(|l| l.contains(OVERFLOW_LOG))
        .and_then(|l| l.split("request (").nth(1))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("?")
        .to_owned();
    let compaction_prompts: Vec<String> = evidence
        .new_prompts(&setup.main)
        .into_iter()
        .filter(|t| t.contains(&setup.builtin_prompt_line) && t.contains("<transcript>"))
        .collect();
    ensure!(
        compaction_prompts.len() as u64 >= if degraded { 1 } else { steps },
        "the server rendered {} compaction prompts for {steps} steps",
        compaction_prompts.len()
    );
    // Every old note is in some compaction request or kept.
    let kept: String = entries[at + 1..next].iter().map(checks::text).collect();
    let summary = entry["summary"].as_str().unwrap_or_default();
    // A record written after the model's summary was refused covers what its ledger budget
    // holds (a sixteenth of this small window), so the notes are checked only when a model
    // summarized them all.
    if !degraded {
        for n in old {
            let marker = format!("Please remember note {n}.");
            ensure!(
                compaction_prompts.iter().any(|t| t.contains(&marker)) || kept.contains(&marker),
                "note {n} is in no compaction request and not kept"
            );
        }
    } else {
        ensure!(
            summary.contains("No model could write this summary"),
            "a record-only compaction must say so in its summary: {summary}"
        );
    }
    let sizes: Vec<String> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("panto: step "))
        .filter_map(|l| l.split("about ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();

    // Replay, then one more turn on the compacted session.
    let doc = panto.run(&["context", s, "--json"])?.expect(0)?.json()?;
    checks::replay(&doc, &entries, at)?;
    let estimated = doc["estimated_tokens"].as_u64().unwrap_or(u64::MAX);
    ensure!(
        estimated < setup.n_ctx,
        "the compacted context is still estimated at {estimated} tokens, over the window"
    );
    panto
        .run(&["send", s, "Thank you. Which note did I send last?"])?
        .expect(0)?;
    let entries = panto.session(s)?;
    checks::single_compaction(&entries)?;
    // The usage of the replies the server wrote (a written session's answers carry none).
    let served: Vec<Value> = entries
        .iter()
        .filter(|e| {
            e["role"] != "assistant" || !e["id"].as_str().is_some_and(|id| id.starts_with(WRITTEN))
        })
        .cloned()
        .collect();
    checks::usage_recorded(&served)?;
    for r in checks::replies(&served) {
        // A reply without usage came from a stream that never named its model (see
        // `usage_recorded`); panto then records the model it asked for.
        let expected = if r.get("usage").is_some() {
            setup.server_model.as_str()
        } else {
            panto.model.as_str()
        };
        ensure!(
            r["model"] == expected,
            "a reply names model {}, expected {expected}",
            r["model"],
        );
    }
    ensure!(
        !panto.session_text(s).contains(KEY),
        "the key reached the session file"
    );
    let outcome = if degraded {
        format!(
            "the model's summary was refused, panto's own record written ({} compaction \
             prompts rendered)",
            compaction_prompts.len()
        )
    } else {
        format!(
            "{requests} compaction requests ({steps} steps, {} rejected)",
            requests - steps
        )
    };
    Ok((
        figures,
        format!(
            "server: request of {reported} tokens > {} ctx; {outcome}{}",
            setup.n_ctx,
            if sizes.is_empty() {
                String::new()
            } else {
                format!(", step inputs about {} tokens", sizes.join(" / "))
            }
        ),
    ))
}

fn p_flag(panto: &Panto<'_>) -> &'static str {
    panto.protocol.flag()
}
