//! The scenario of issue 26 against the real model: a conversation twice the window, sent once,
//! at a 4,096-token and at a 2,048-token window, on servers that sample as Ollama does, with
//! panto's default compaction output limit (what a user has, not the suite's short one). The
//! model is asked for every step of the fold with the short built-in prompt, within the request
//! bound, and the retry is answered.
//!
//! Issue 26 asks that every such compaction be the model's summary. SmolLM2-135M does not
//! always end its answers: greedy decoding repeats a phrase until the output limit on every
//! transcript of a few thousand tokens, and with Ollama's sampling about half its answers run
//! past 256 tokens (docs/compaction.md, "Under pressure against a real model"). panto rightly
//! refuses such a summary; a step whose answers all fail goes on from panto's record of its
//! turns, and the compaction is the model's summary with those steps named
//! (`recorded_steps`). panto's record of the whole is written only when no step's summary
//! passed at all: the scenario accepts it only then (the model asked for every step, and its
//! answer refused by panto's checks), and says so in its note; a record for any other cause
//! (no model asked, no room, a fold that overflowed, a provider error) fails it.

use std::fs;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use serde_json::json;

use super::{
    CONFIG_TOML, Compaction, Evidence, FOLD_TIMEOUT, FOLD_WINDOWS, MODEL, OVERFLOW_LOG, Protocol,
    RECORD_ONLY_MODEL, Setup, Target, WRITTEN, checks, note,
};
use crate::e2e::checks::Expect;

/// Which sampling server a scenario under pressure talks to (an index of `Setup::pressure`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::e2e) enum Window {
    /// 4,096 tokens, llama.cpp's default context.
    Large = 0,
    /// 2,048 tokens, Ollama's default context.
    Small = 1,
}

/// A single-model server and what the scenarios size by its window.
#[derive(Clone, Debug)]
pub(in crate::e2e) struct Windowed {
    /// The server.
    pub target: Target,
    /// Its context size, in tokens.
    pub n_ctx: u64,
    /// How many sentences make a long note of about a third of its window.
    pub note_sentences: usize,
}

/// A conversation of [`FOLD_WINDOWS`] windows and more (notes of a third of the window, written
/// to the session as an imported one would be), then one `send` that overflows: the fold asks
/// the model with the short built-in prompt for every chunk, the summary is the model's, and the
/// retry is answered. The note gives the requests, the steps, who wrote the summary and the time
/// of the `send`.
pub(in crate::e2e) fn twice_the_window(
    setup: &Setup,
    p: Protocol,
    window: Window,
) -> Result<Compaction> {
    let w = &setup.pressure[window as usize];
    let mut panto = setup.panto(p, &format!("twice-window-{}", w.n_ctx), false)?;
    panto.origin.clone_from(&w.target.origin);
    // What a user under pressure has: panto's own compaction output limit, not the suite's
    // short one, so that a summary cut at the floor can be asked again with more (within the
    // bound) and the last step has the room the window leaves.
    let config = CONFIG_TOML
        .lines()
        .filter(|l| !l.starts_with("compaction_max_output_tokens"))
        .fold(String::new(), |all, l| all + l + "\n");
    fs::write(panto.dir.join(".panto/config.toml"), config)?;
    panto.timeout = FOLD_TIMEOUT;
    let s = "twice.jsonl";
    let notes = usize::try_from(3 * FOLD_WINDOWS + 1)?;
    let mut lines = String::new();
    for i in 1..=notes {
        let user = json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": note(i, w.note_sentences)}]});
        let answer = json!({"type": "message", "id": format!("{WRITTEN}{i}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("Noted: note {i}.")}]});
        lines.push_str(&format!("{user}\n{answer}\n"));
    }
    fs::write(panto.dir.join(s), lines)?;

    let evidence = Evidence::mark(&w.target);
    let started = Instant::now();
    let run = panto
        .run(&["send", s, "Please remember note 99. Which note came first?"])?
        .expect(0)?;
    let took = started.elapsed();
    ensure!(
        run.stderr.contains(
            "panto: the request was too large for the model: compacting, then retrying once"
        ),
        "the compaction was not reported as an overflow: {}",
        run.stderr
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    let record = entry["model"] == RECORD_ONLY_MODEL || entry["degraded"] == true;
    let cause = entry["degraded_error"].as_str().unwrap_or_default();
    if record {
        ensure!(
            model_answer_refused(cause),
            "panto wrote its own record at a {}-token window for a cause other than the model's \
             answer: {}",
            w.n_ctx,
            if cause.is_empty() {
                "none recorded"
            } else {
                cause
            }
        );
    }
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "overflow",
            provider: if record { "panto" } else { p.flag() },
            model: if record { RECORD_ONLY_MODEL } else { MODEL },
            fallback: false,
            instructions: None,
        },
    )?;
    let next = checks::kept_copies(&entries, at)?;
    ensure!(
        entries.len() == next + 1
            && entries[next]["role"] == "assistant"
            && !checks::text(&entries[next]).trim().is_empty(),
        "the retry was not answered: {} entries after the kept copies",
        entries.len() - next
    );

    // The server's side: the conversation's rejection, then the fold's requests, every one with
    // the short built-in prompt, and every note in some request's transcript or kept.
    let log = evidence.new_log(&w.target);
    let rejected = log.matches(OVERFLOW_LOG).count() as u64;
    let conversation: u64 = log
        .lines()
        .find(|l| l.contains(OVERFLOW_LOG))
        .and_then(|l| l.split("request (").nth(1))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .context("the server logged no rejected request with its size")?;
    let compaction_prompts: Vec<String> = evidence
        .new_prompts(&w.target)
        .into_iter()
        .filter(|t| t.contains("<transcript>"))
        .collect();
    let rendered = compaction_prompts.len() as u64;
    // The fold's requests: those the server answered (its prompts) and those it rejected. A
    // record counts none on its entry, so the server's side is the count there.
    let requests = rendered + (rejected - 1);
    // The steps of the last plan announced: "compacting in N steps", then each change of plan
    // ("..., N steps in all"), or one.
    let steps = announced_steps(&run.stderr);
    ensure!(
        rendered >= 1,
        "the model was not asked for a summary at a {}-token window",
        w.n_ctx
    );
    // panto's record of the whole only after the model was asked for every step (a step that
    // failed goes on from panto's record of its turns, and the model is asked for the rest).
    ensure!(
        !record || rendered >= steps,
        "panto wrote its own record after the model was asked for {rendered} of {steps} steps"
    );
    if !record {
        ensure!(
            entry["requests"].as_u64() == Some(requests),
            "the entry counts {} requests; the server received {rendered} compaction requests \
             and rejected {} of the fold's",
            entry["requests"],
            rejected - 1
        );
    }
    ensure!(
        compaction_prompts
            .iter()
            .all(|t| t.contains(&setup.short_prompt_line)),
        "a compaction request at a {}-token window did not use the short built-in prompt",
        w.n_ctx
    );
    // Issue 26, point 9: at most 2 + ceil(conversation / (window / 2)) requests in all, 3 more
    // when the limit is not stated (llama-server states it). Two of them are the conversation's
    // (the one rejected and the retry). panto plans in its own estimate, and takes the stated
    // window as it is when it estimated the overflowed request above the server's count (it
    // scales a limit down, never up: no compaction request may be rejected). So the bound panto
    // keeps is the conversation as panto estimates it (`tokens_before`), or the server's count
    // when that is larger (then panto scales the window down to the server's ruler), checked
    // here on the total; the note shows the total against the server's count too (SmolLM2's tokenizer
    // counts these notes about a tenth below panto's estimate). The fold's requests alone are
    // within the server's bound as well.
    let bound = 2 + conversation.div_ceil(w.n_ctx / 2);
    let estimated = entry["tokens_before"]
        .as_u64()
        .context("the compaction entry has no tokens_before")?;
    let panto_bound = 2 + estimated.max(conversation).div_ceil(w.n_ctx / 2);
    ensure!(
        requests <= bound && (record || requests >= steps),
        "the fold sent {requests} requests for {steps} steps (at most {bound} for a conversation \
         of {conversation} tokens)"
    );
    let total = requests + 2;
    ensure!(
        total <= panto_bound,
        "the overflow took {total} requests in all, over the bound of {panto_bound} for a \
         conversation panto estimated at {estimated} tokens"
    );
    let against_bound = if total <= bound {
        format!("{total} requests in all, bound {bound}")
    } else {
        format!(
            "{total} requests in all: bound {panto_bound} in panto's estimate of the conversation, \
             OVER the bound of {bound} in the server's count"
        )
    };
    // Every note was in some request's transcript or is kept (a record stops at the answer it
    // refused: the notes after it are in its ledger, which the pressure property test checks).
    if !record {
        let kept: String = entries[at + 1..next].iter().map(checks::text).collect();
        for n in 1..=notes {
            let marker = format!("Please remember note {n}.");
            ensure!(
                compaction_prompts.iter().any(|t| t.contains(&marker)) || kept.contains(&marker),
                "note {n} is in no compaction request and not kept"
            );
        }
    }
    ensure!(
        !panto.session_text(s).contains(super::KEY),
        "the key reached the session file"
    );
    let recorded = entry["recorded_steps"].as_array().map_or(0, Vec::len);
    let by = if record {
        format!("panto's record after {rendered} of {steps} steps ({cause})")
    } else if recorded > 0 {
        // Steps whose answers failed panto's checks went on from panto's record of their
        // turns; the stderr said so for each.
        ensure!(
            run.stderr
                .matches("no model's summary of these turns passed")
                .count()
                == recorded,
            "the entry names {recorded} recorded steps, stderr said otherwise: {}",
            run.stderr
        );
        format!("summary by {MODEL}, {recorded} of its steps recorded by panto")
    } else {
        format!("summary by {MODEL}")
    };
    Ok(Compaction {
        kind: if window == Window::Large {
            "overflow x2 @ 4096"
        } else {
            "overflow x2 @ 2048"
        },
        figures,
        note: format!(
            "{notes} notes ({conversation} tokens) > {} ctx: {requests} compaction requests \
             ({steps} steps planned, {} rejected; {against_bound}), {by}, retry answered; send \
             {:.0} s",
            w.n_ctx,
            rejected - 1,
            took.as_secs_f64()
        ),
    })
}

/// The step count of the last plan `stderr` announced: the first plan ("compacting in N
/// steps"), then every change of plan ("..., N steps in all"); one when none was announced.
pub(in crate::e2e) fn announced_steps(stderr: &str) -> u64 {
    let mut steps = 1;
    for line in stderr.lines() {
        let count = if let Some(rest) = line.split("compacting in ").nth(1) {
            rest.split(' ').next()
        } else if let Some(head) = line.strip_suffix(" in all") {
            head.rsplit(' ').nth(1)
        } else {
            None
        };
        if let Some(n) = count.and_then(|n| n.parse().ok()) {
            steps = n;
        }
    }
    steps
}

/// Whether a record's cause is the model's answer failing panto's checks (2d of
/// docs/compaction.md), as opposed to a provider error or panto not asking at all.
pub(in crate::e2e) fn model_answer_refused(cause: &str) -> bool {
    cause.contains(MODEL)
        && (cause.contains("the model's summary") || cause.contains("the model returned an empty"))
}
