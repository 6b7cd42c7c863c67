//! The scenarios that compact on request: a manual compaction with instructions and the
//! built-in prompt, and a fallback from a compaction model the router does not have.

use anyhow::{Result, ensure};

use super::{
    Compaction, Evidence, Expect, INSTRUCTIONS, INSTRUCTIONS_HEADING, MISSING_MODEL, MODEL,
    Protocol, ROUTED_MODEL, Setup, checks, shorten,
};

/// A manual compaction with instructions and the built-in prompt.
pub(in crate::e2e) fn manual(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let panto = setup.panto(p, "manual", false)?;
    let s = "manual.jsonl";
    for message in [
        "My favourite colour is teal.",
        "My cat is called Miso.",
        "What is my cat called?",
    ] {
        panto.run(&["send", s, message])?.expect(0)?;
    }
    let evidence = Evidence::mark(&setup.main);
    let run = panto
        .run(&[
            "compact",
            s,
            "--instructions",
            INSTRUCTIONS,
            "--keep-tokens",
            "40",
            // A summary of three short messages is no smaller than they are; what is checked
            // here is who writes it and with which prompt, so it is written all the same.
            "--force",
            "--json",
        ])?
        .expect(0)?;
    let doc = run.json()?;
    ensure!(
        doc["summary"]
            .as_str()
            .is_some_and(|s| !s.trim().is_empty())
            && doc["model"] == MODEL,
        "unexpected `compact --json` document: {doc}"
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "manual",
            provider: p.flag(),
            model: MODEL,
            fallback: false,
            instructions: Some(INSTRUCTIONS),
        },
    )?;
    ensure!(
        doc["summary"] == entry["summary"] && doc["tokens_before"] == entry["tokens_before"],
        "`compact --json` and the entry disagree: {doc} vs {entry}"
    );
    let next = checks::kept_copies(&entries, at)?;
    ensure!(next == entries.len(), "entries follow the kept copies");
    let prompts = evidence.new_prompts(&setup.main);
    ensure!(
        prompts.len() == 1,
        "the server rendered {} prompts for one compaction",
        prompts.len()
    );
    ensure!(
        prompts[0].contains(&setup.builtin_prompt_line)
            && prompts[0].contains(INSTRUCTIONS_HEADING)
            && prompts[0].contains(INSTRUCTIONS),
        "the compaction prompt lacks the built-in prompt or the instructions:\n{}",
        prompts[0]
    );
    let replayed = panto.run(&["context", s, "--json"])?.expect(0)?.json()?;
    checks::replay(&replayed, &entries, at)?;
    Ok(Compaction {
        kind: "manual",
        figures,
        note: "built-in COMPACTION.md + --instructions".to_owned(),
    })
}

/// A compaction model the router does not have: the active model writes the summary.
///
/// `SmolLM2` sometimes answers this request with one phrase repeated, which panto refuses
/// (docs/compaction.md, "2d"): then both models failed, the command exits 1 naming both causes,
/// and nothing is written. That outcome still shows the fallback, and is accepted as such.
pub(in crate::e2e) fn fallback(setup: &Setup, p: Protocol) -> Result<Option<Compaction>> {
    let panto = setup.panto(p, "fallback", true)?;
    let s = "fallback.jsonl";
    for message in ["My dog is called Rex.", "What is my dog called?"] {
        panto.run(&["send", s, message])?.expect(0)?;
    }
    let before = panto.session_text(s);
    let run = panto.run(&[
        "compact",
        s,
        "--compaction-model",
        MISSING_MODEL,
        "--keep-tokens",
        "20",
        // As in `manual`: the fallback is checked, not whether two messages shrink.
        "--force",
        "--json",
    ])?;
    if run.code == Some(1) {
        ensure!(
            run.stderr
                .contains(&format!("retrying once with {ROUTED_MODEL}"))
                && run.stderr.contains(MISSING_MODEL)
                && run.stderr.contains("not found")
                && run.stderr.contains("summary"),
            "the compaction failed without a fallback whose summary was refused: {}",
            run.stderr
        );
        ensure!(
            panto.session_text(s) == before,
            "a failed compaction changed the session"
        );
        return Ok(None);
    }
    let run = run.expect(0)?;
    let doc = run.json()?;
    ensure!(
        doc["fallback"] == true && doc["model"] == ROUTED_MODEL,
        "expected a fallback to {ROUTED_MODEL}: {doc}"
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "manual",
            provider: p.flag(),
            model: ROUTED_MODEL,
            fallback: true,
            instructions: None,
        },
    )?;
    let why = entry["fallback_error"].as_str().unwrap_or_default();
    ensure!(
        why.contains(MISSING_MODEL) && why.contains("not found"),
        "the fallback error does not carry the server's answer: {why}"
    );
    checks::kept_copies(&entries, at)?;
    for r in checks::replies(&entries) {
        ensure!(
            r["model"] == ROUTED_MODEL,
            "the router reports the routed name, not {}",
            r["model"]
        );
    }
    Ok(Some(Compaction {
        kind: "fallback",
        figures,
        note: format!("{MISSING_MODEL} -> {ROUTED_MODEL}: {}", shorten(why)),
    }))
}
