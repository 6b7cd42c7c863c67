//! Under pressure nothing is forgotten: conversations with planted facts, overflowing a
//! provider that enforces a small window (2k to 64k tokens), compacted once and five times in a
//! chain. Every planted fact stays in the effective context or in the ledger stored on the
//! compaction entry; every compaction request allows the output floor; a model is asked and its
//! summary written (never panto's own record when a model answered); no request body is sent
//! twice, and the requests stay within the bound.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use panto_compact::{
    CompactError, CompactionEvent, Compactor, CompactorConfig, Driver, MIN_OUTPUT_TOKENS,
    MemoryLog, MemoryStore, ModelRef, RECORD_ONLY_MODEL, Reply,
};
use panto_model::{ContentBlock, Entry, Message, Role, SequentialIds};
use panto_provider::{EventSink, Provider, ProviderError, Request, TokenNumbers, async_trait};
use proptest::prelude::*;
use serde_json::json;

use crate::{block_on, estimate_request};

/// The agent's system prompt in these tests; a request with another one is a compaction.
const AGENT: &str = "You are the agent.";

/// What one request looked like to the provider.
#[derive(Clone, Debug)]
struct Seen {
    compaction: bool,
    counted: u64,
    fits: bool,
    max_output: u32,
    body: String,
}

/// A provider with a window of `window` of its own tokens (panto's estimate times `factor`),
/// which rejects a request whose input and output reserve exceed it, stating the numbers or
/// not, as real servers do. A compaction request is answered with a short summary naming the
/// first request word of its transcript (a model that keeps almost nothing: the ledger must).
struct Enforcer {
    window: u64,
    factor: f64,
    numbers: bool,
    seen: Mutex<Vec<Seen>>,
}

impl Enforcer {
    fn new(window: u64, factor: f64, numbers: bool) -> Arc<Enforcer> {
        Arc::new(Enforcer {
            window,
            factor,
            numbers,
            seen: Mutex::new(Vec::new()),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait]
impl Provider for Enforcer {
    fn name(&self) -> &str {
        "enforcer"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let estimate = estimate_request(&request.system, &request.messages);
        let counted = (estimate as f64 * self.factor).ceil() as u64;
        let compaction = request.system != AGENT;
        let fits = counted <= self.window;
        let body = serde_json::to_string(&request.messages).unwrap();
        self.seen.lock().unwrap().push(Seen {
            compaction,
            counted,
            fits,
            max_output: request.max_output_tokens,
            body: body.clone(),
        });
        if !fits {
            return Err(ProviderError::ContextOverflow {
                message: "the request exceeds the available context size".into(),
                numbers: TokenNumbers::new(
                    self.numbers.then_some(counted),
                    self.numbers.then_some(self.window),
                ),
            });
        }
        if !compaction {
            return Ok(Message::assistant_text("Done."));
        }
        // The first request word of the transcript (not of the previous summary it carries).
        let transcript = body.rsplit("<transcript>").next().unwrap_or(&body);
        let first = transcript
            .split_whitespace()
            .find(|w| w.starts_with("req-"))
            .unwrap_or("the previous part")
            .trim_matches(|c: char| !c.is_alphanumeric() && c != '-');
        // Named by its first request and its size, so that no two chunks get the same answer.
        Ok(Message::assistant_text(format!(
            "The user and the assistant worked through the requests from {first} on ({} characters of material); the ledger below lists them.",
            transcript.len()
        )))
    }
}

/// The facts planted in turn `k` of a conversation (`r` makes them unique): the request word,
/// the file edited, the failing command and its error.
fn facts(k: usize, r: u32) -> [String; 4] {
    [
        format!("req-{k}-{r}"),
        format!("src/file_{k}_{r}.rs"),
        format!("make check-{k}-{r}"),
        format!("E{k}x{r} failed"),
    ]
}

/// One planted turn: a request, an edit of a file, a failing command, an answer; `filler`
/// words in the answers and the tool output make it heavy.
fn planted(k: usize, r: u32, filler: usize) -> Vec<Message> {
    let [word, file, command, error] = facts(k, r);
    let pad = vec!["context"; filler].join(" ");
    let edit = format!("e{k}");
    let run = format!("b{k}");
    vec![
        // The user's words are short, as requests are; the weight is in the answers and the
        // tool output (the record keeps requests whole up to its byte cap).
        Message::user_text(format!("Please handle {word} in the parser.")),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text(format!("Editing it. {pad}")),
                ContentBlock::tool_use(
                    &edit,
                    "edit",
                    json!({"path": file, "old": "a", "new": "b"}),
                ),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(&edit, "applied", false)],
        ),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                &run,
                "bash",
                json!({"command": command}),
            )],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                &run,
                format!("{error}\n{pad}"),
                true,
            )],
        ),
        Message::assistant_text(format!("The check fails; moving on. {pad}")),
    ]
}

/// The text in which a fact counts as kept: the effective context's messages and the ledger
/// stored on its compaction entry.
fn kept_text(driver: &Driver<MemoryStore>) -> String {
    let context = driver.context();
    let mut text = serde_json::to_string(&context.messages).unwrap();
    if let Some(ledger) = context
        .compaction
        .as_ref()
        .and_then(|c| c.extra.get(panto_compact::LEDGER_FIELD))
    {
        text.push_str(&ledger.to_string());
    }
    text
}

/// The events of every compaction, in order.
type Events = Arc<Mutex<Vec<CompactionEvent>>>;

fn driver_over(
    history: Vec<Message>,
    model: Arc<Enforcer>,
    events: &Events,
) -> Driver<MemoryStore> {
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let context = log.replay();
    let sink = events.clone();
    let compactor = Compactor::new(ModelRef::new(model, "m"))
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(CompactorConfig::new())
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    Driver::new(compactor, log, context)
        .with_system(AGENT)
        .with_max_output_tokens(256)
}

/// What went wrong with one send, as a list of broken promises (empty when all held).
fn check_send(result: &Result<Reply, CompactError>, seen: &[Seen], numbers: bool) -> Vec<String> {
    let mut broken = Vec::new();
    let compactions: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    for s in &compactions {
        if s.max_output < MIN_OUTPUT_TOKENS {
            broken.push(format!(
                "a request of {} tokens allowed {} output tokens",
                s.counted, s.max_output
            ));
        }
    }
    let mut bodies = HashSet::new();
    for s in seen {
        if !bodies.insert((s.compaction, s.body.clone(), s.max_output)) && !s.fits {
            broken.push("a rejected request was sent again".to_owned());
        }
    }
    let mut rejected_bodies = HashSet::new();
    for s in seen.iter().filter(|s| !s.fits && s.compaction) {
        if !rejected_bodies.insert(s.body.clone()) {
            broken.push("an input already rejected was sent again".to_owned());
        }
    }
    let rejected = compactions.iter().filter(|s| !s.fits).count();
    if numbers && rejected > 0 {
        broken.push(format!(
            "{rejected} compaction requests rejected although the limit was stated"
        ));
    }
    if !numbers && rejected > 3 {
        broken.push(format!("{rejected} compaction requests rejected"));
    }
    match result {
        Ok(reply) => {
            if let Some(c) = &reply.compaction
                && c.model == RECORD_ONLY_MODEL
                && compactions.iter().any(|s| s.fits)
            {
                broken.push(format!(
                    "panto's own record although a model answered: {:?}",
                    c.degraded
                ));
            }
        }
        Err(e) => broken.push(format!(
            "the send failed: {e}; requests (compaction, counted, fits, output): {:?}",
            seen.iter()
                .map(|s| (s.compaction, s.counted, s.fits, s.max_output))
                .collect::<Vec<_>>()
        )),
    }
    broken
}

/// Whether the step counts shown are honest: every `Step` says the count of the plan last
/// announced (`Folding`, then each `Shrinking` or `Replanned`), and the steps count up by
/// one (a step rejected for its size is tried again under the same number).
fn steps_honest(events: &[CompactionEvent]) -> Result<(), String> {
    let mut planned = None;
    let mut last = 0;
    let mut retry = false;
    for e in events {
        match e {
            CompactionEvent::Folding { steps, .. } => {
                planned = Some(*steps);
                last = 0;
            }
            CompactionEvent::Shrinking { steps, .. } => {
                planned = Some(*steps);
                retry = true;
            }
            CompactionEvent::Replanned { steps, .. } => planned = Some(*steps),
            CompactionEvent::Step { step, steps, .. } => {
                let counted = *step == last + 1 || (retry && *step == last);
                if Some(*steps) != planned || !counted || step > steps {
                    return Err(format!(
                        "step {step}/{steps} after a plan of {planned:?} steps: {events:?}"
                    ));
                }
                last = *step;
                retry = false;
            }
            _ => {}
        }
    }
    Ok(())
}

/// The bound on the requests of one overflow: the conversation over half the window, plus the
/// two conversation requests, plus three rejected ones when the limit is unknown.
fn bound(conversation: u64, window: u64, numbers: bool) -> usize {
    let half = (window / 2).max(1);
    2 + conversation.div_ceil(half) as usize + if numbers { 0 } else { 3 }
}

/// A conversation of `turns` planted turns, each a `share`-th of the window (its filler words
/// scale with the window), a window drawn from `windows`, the provider's count `factor` times
/// panto's, the limit stated or not, and a seed `r` that makes the facts unique.
fn planted_sessions(
    turns: std::ops::Range<usize>,
    share: std::ops::Range<u64>,
    windows: impl Strategy<Value = u64>,
) -> impl Strategy<Value = (usize, usize, u64, f64, bool, u32)> {
    (
        turns,
        share,
        windows,
        0.8f64..1.2,
        any::<bool>(),
        0u32..1_000_000,
    )
        .prop_map(|(turns, share, window, factor, numbers, r)| {
            // A planted turn is six messages; a filler word is about 1.3 tokens.
            let filler = (window / share / 6 * 10 / 13).max(5) as usize;
            (turns, filler, window, factor, numbers, r)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// One overflow, then four more after the conversation grew again: five chained
    /// compactions. After each, every fact planted so far is kept. Turns a twelfth to a
    /// fortieth of the window, so that every window from 2k to 64k sees a few dozen planted
    /// turns per overflow, as an agent's session does.
    #[test]
    fn planted_facts_survive_one_and_five_chained_overflow_compactions(
        (turns, filler, window, factor, numbers, r) in planted_sessions(
            6..24,
            12..40,
            prop_oneof![2_048u64..4_096, 4_096u64..16_384, 16_384u64..65_536],
        ),
    ) {
        five_rounds(turns, filler, window, factor, numbers, r)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The property above with heavy turns, a third to an eighth of the window each, which
    /// whole turns pack into the fold's requests only loosely (two of a third never share
    /// one): the fold cuts them for its requests, so the requests stay within the bound, and
    /// every fact is kept.
    #[test]
    fn planted_facts_in_heavy_turns_survive_within_the_request_bound(
        (turns, filler, window, factor, numbers, r) in planted_sessions(
            6..16,
            3..8,
            prop_oneof![2_048u64..4_096, 4_096u64..16_384],
        ),
    ) {
        five_rounds(turns, filler, window, factor, numbers, r)?;
    }
}

/// The body of the property above: five sends, each overflowing, and what must hold after
/// each.
fn five_rounds(
    turns: usize,
    filler: usize,
    window: u64,
    factor: f64,
    numbers: bool,
    r: u32,
) -> Result<(), TestCaseError> {
    let model = Enforcer::new(window, factor, numbers);
    let mut history = Vec::new();
    for k in 0..turns {
        history.extend(planted(k, r, filler));
    }
    // The conversation is at least twice the window, so the first send overflows.
    while (estimate_request(AGENT, &history) as f64 * factor) < 2.0 * window as f64 {
        let k = history.len() / 6;
        history.extend(planted(k, r, filler));
    }
    let mut planted_turns = history.len() / 6;
    let events: Events = Arc::default();
    let mut driver = driver_over(history, model.clone(), &events);
    for round in 0..5 {
        let before = model.seen().len();
        events.lock().unwrap().clear();
        let size = (estimate_request(AGENT, &driver.context().messages) as f64 * factor) as u64;
        let result = block_on(driver.send(
            vec![Message::user_text(format!("go on {round}"))],
            &mut |_| {},
        ));
        let seen = model.seen()[before..].to_vec();
        let broken = check_send(&result, &seen, numbers);
        if !broken.is_empty() && std::env::var("DBG").is_ok() {
            for e in events.lock().unwrap().iter() {
                eprintln!("EV {e:?}");
            }
            for s in &seen {
                eprintln!(
                    "SEEN {} {} {} {}",
                    s.compaction, s.counted, s.fits, s.max_output
                );
            }
        }
        prop_assert!(
            broken.is_empty(),
            "round {round}, window {window}: {broken:?}"
        );
        let honest = steps_honest(&events.lock().unwrap());
        prop_assert!(honest.is_ok(), "round {round}: {honest:?}");
        let sent = seen.len();
        prop_assert!(
            sent <= bound(size, window, numbers),
            "round {round}: {sent} requests for {size} tokens in {window}: {:?}",
            seen.iter()
                .map(|s| (s.compaction, s.counted, s.fits, s.max_output))
                .collect::<Vec<_>>()
        );
        let kept = kept_text(&driver);
        let lost: Vec<String> = (0..planted_turns)
            .flat_map(|k| facts(k, r))
            .filter(|f| !kept.contains(f.as_str()))
            .collect();
        prop_assert!(
            lost.is_empty(),
            "round {round}, window {window}: lost {} facts: {:?}",
            lost.len(),
            &lost[..lost.len().min(8)]
        );
        // The conversation grows past the window again.
        let mut grow = Vec::new();
        loop {
            let mut all = driver.context().messages.clone();
            all.extend(grow.iter().cloned());
            if estimate_request(AGENT, &all) as f64 * factor > 1.5 * window as f64 {
                break;
            }
            grow.extend(planted(planted_turns, r, filler));
            planted_turns += 1;
        }
        block_on(driver.append(grow)).unwrap();
    }
    Ok(())
}

/// The shrunk failures of the property above (proptest-regressions/pressure.txt): windows of
/// about 2k whose provider states no limit, three to four times smaller than the
/// conversation. Guessing down by halving the transcript and never trying higher again left
/// later requests at half the window, over the bound on requests.
#[test]
fn a_small_window_that_states_no_limit_is_found_within_the_request_bound() {
    for (turns, filler, window, factor, r) in [
        (21, 28, 2_664, 0.8, 100_000),
        (18, 17, 2_252, 0.990_147_032_686_928_8, 0),
        (20, 24, 2_304, 1.185_079_664_459_776_7, 10_000),
        (19, 21, 2_048, 1.113_491_448_033_749_9, 0),
    ] {
        five_rounds(turns, filler, window, factor, false, r).unwrap();
    }
}

/// A context that starts from a compaction whose summary alone is larger than what a request
/// at `window` can carry beside a chunk, with `turns` planted turns after it.
fn after_a_long_summary(window: u64, turns: usize) -> (Vec<Entry>, String) {
    let mut summary = String::from("## Goal\nKeep the parser fast.\n\n## Decisions\n");
    let mut k = 0;
    while panto_size::Heuristic.text(&summary) < window * 3 / 4 {
        summary.push_str(&format!(
            "- decision {k}: the lexer keeps token kind {k} because the grammar needs it there.\n"
        ));
        k += 1;
    }
    let ledger = json!({"requests": ["Please keep the-old-request-word in mind."], "modified": ["src/old_file.rs"]});
    let mut c = panto_model::CompactionEntry::new(summary.clone()).with_id("c0");
    c.extra.insert("ledger".into(), ledger);
    let mut entries = vec![Entry::Compaction(c)];
    for k in 0..turns {
        entries.extend(planted(k, 7, 20).into_iter().map(Entry::Message));
    }
    (entries, summary)
}

#[test]
fn a_previous_summary_too_large_to_carry_is_summarized_first_and_a_model_writes_the_summary() {
    let window = 2_048;
    let (entries, _) = after_a_long_summary(window, 12);
    let model = Enforcer::new(window, 1.0, true);
    let log = MemoryLog::with_entries(entries);
    let context = log.replay();
    let events: Events = Arc::default();
    let sink = events.clone();
    let compactor = Compactor::new(ModelRef::new(model.clone(), "m"))
        .with_ids(Arc::new(SequentialIds::new()))
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let mut driver = Driver::new(compactor, log, context)
        .with_system(AGENT)
        .with_max_output_tokens(256);
    let reply = block_on(driver.send(vec![Message::user_text("go on")], &mut |_| {}));
    let reply = reply.unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}\n{}",
            events.lock().unwrap(),
            driver.context().summary().unwrap_or("")
        )
    });
    let report = reply.compaction.expect("the send compacted");
    assert_eq!(
        report.model, "m",
        "a model wrote the summary: {:?}",
        report.degraded
    );
    let seen = model.seen();
    // The first compaction requests carry the old summary as material, in pieces; none was
    // rejected, and every one allowed the floor.
    let compactions: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    assert!(
        compactions[0]
            .body
            .contains("[Summary of earlier conversation]:")
    );
    assert!(compactions.len() >= 2, "{}", compactions.len());
    assert!(
        compactions
            .iter()
            .all(|s| s.fits && s.max_output >= MIN_OUTPUT_TOKENS)
    );
    // The old entry's record is merged into the new one, never re-derived from its prose.
    let kept = kept_text(&driver);
    for fact in [
        "the-old-request-word",
        "src/old_file.rs",
        "req-0-7",
        "src/file_11_7.rs",
    ] {
        assert!(kept.contains(fact), "{fact}");
    }
    let honest = steps_honest(&events.lock().unwrap());
    assert!(honest.is_ok(), "{honest:?}");
}

#[test]
fn a_compaction_model_that_fails_is_asked_once_in_a_fold_of_many_requests() {
    use panto_compact::testing::ScriptedProvider;
    let window = 4_096;
    let model = Enforcer::new(window, 1.0, true);
    let cheap = Arc::new(ScriptedProvider::new("cheap"));
    cheap.push(Err(ProviderError::ModelNotFound {
        message: "no such model: tiny".into(),
    }));
    let mut history = Vec::new();
    for k in 0..40 {
        history.extend(planted(k, 3, 40));
    }
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let context = log.replay();
    let compactor = Compactor::new(ModelRef::new(model.clone(), "m"))
        .with_compaction_model(Some(ModelRef::new(cheap.clone(), "tiny")))
        .with_ids(Arc::new(SequentialIds::new()));
    let mut driver = Driver::new(compactor, log, context)
        .with_system(AGENT)
        .with_max_output_tokens(256);
    let reply = block_on(driver.send(vec![Message::user_text("go on")], &mut |_| {})).unwrap();
    let report = reply.compaction.expect("the send compacted");
    assert!(
        report.steps.len() >= 3,
        "a fold of several requests: {}",
        report.steps.len()
    );
    assert_eq!(
        cheap.requests().len(),
        1,
        "the failed model is not asked again"
    );
    assert!(report.fallback);
    assert!(report.steps.iter().all(|s| s.model == "m"));
}

/// A note of about `tokens` of panto's estimated tokens, on one line, as a user pastes one:
/// numbered facts with unique words `n<k>f<j>`.
fn note(k: usize, tokens: u64) -> String {
    let mut text = format!("Please remember note {k}.");
    let mut j = 0;
    while estimate_request("", &[Message::user_text(text.as_str())]) < tokens {
        text.push_str(&format!(
            " Fact n{k}f{j}: the grey owl lives in Lima and likes figs."
        ));
        j += 1;
    }
    text
}

/// Turns of a third of a small window each (a long note on one line and a short answer):
/// whole turns fill a fold request only by half (two never fit one), so the fold cuts them
/// between words and fills each request. With the limit stated or not, the overflow's
/// requests stay within `2 + ceil(conversation / (window / 2))` (+3 unstated), every word of
/// every note is in a compaction request, every request reads back as a transcript, and the
/// compaction is the model's. (Issue 26, point 9; the e2e's twice-the-window scenario at
/// 2,048 tokens took 9 requests for a bound of 7 with whole turns.)
#[test]
fn notes_a_third_of_a_small_window_fold_within_the_request_bound() {
    for (window, numbers) in [(2_048, true), (2_048, false), (3_000, true), (4_096, false)] {
        let model = Enforcer::new(window, 1.0, numbers);
        let mut history = Vec::new();
        let mut k = 0;
        while estimate_request(AGENT, &history) < 5 * window / 2 {
            history.push(Message::user_text(note(k, window / 3)));
            history.push(Message::assistant_text(format!("Noted {k}.")));
            k += 1;
        }
        let size = estimate_request(AGENT, &history);
        let events: Events = Arc::default();
        let mut driver = driver_over(history.clone(), model.clone(), &events);
        let result = block_on(driver.send(vec![Message::user_text("go on")], &mut |_| {}));
        let seen = model.seen();
        let broken = check_send(&result, &seen, numbers);
        assert!(broken.is_empty(), "window {window}: {broken:?}");
        assert!(
            seen.len() <= bound(size, window, numbers),
            "window {window}, limit stated {numbers}: {} requests for {size} tokens, bound {}",
            seen.len(),
            bound(size, window, numbers)
        );
        let report = result.unwrap().compaction.expect("the send compacted");
        assert_ne!(report.model, RECORD_ONLY_MODEL);
        // Every request reads back, and together they hold every word of every summarized
        // note.
        let mut words = String::new();
        for s in seen.iter().filter(|s| s.compaction) {
            let messages: Vec<Message> = serde_json::from_str(&s.body).unwrap();
            let prompt = messages[0].text();
            let parsed = panto_transcript::parse_request(&prompt);
            assert!(parsed.is_ok(), "{parsed:?}: {prompt}");
            words.push_str(&prompt);
        }
        let summarized = &history[report.plan.prefix()];
        for m in summarized {
            for w in m.text().split(' ').filter(|w| w.starts_with('n')) {
                assert!(words.contains(w), "window {window}: {w} was in no request");
            }
        }
    }
}
/// The shrunk failures of the heavy-turn property (proptest-regressions/pressure.txt), all
/// with a provider that states no limit:
/// - a window of 2,048 counted 18% above panto's estimate: whole turns of a fifth of the
///   window took 16 requests for a bound of 15;
/// - a window of 2,250 so: the limit guessed after two rejections left 64 tokens of room, a
///   whole turn did not fit even elided, and panto wrote its own record although the model
///   answered (now the turn is cut smaller, and one more try above what was taken is left);
/// - a window of 8,478 counted 20% below: tries higher were capped at half again the largest
///   input taken, which the limit's own reserve kept below the limit, so the fold never tried
///   higher and took 11 requests for a bound of 9;
/// - a window of 3,240 counted 16% above: after a rejection the limit fell to the least a fold
///   works in, a turn was cut smaller for it, and the leads of its parts left no room, so no
///   model was asked (now the turn is elided as before when its parts do not fit).
#[test]
fn heavy_turns_behind_a_window_that_states_no_limit_fold_within_the_bound() {
    for (turns, filler, window, factor, r) in [
        (10, 86, 2_048, 1.185_079_664_459_776_7, 0),
        (12, 96, 2_250, 1.185_079_664_459_776_7, 100),
        (6, 362, 8_478, 0.8, 0),
        (11, 138, 3_240, 1.163_230_597_208_323_7, 100_000),
    ] {
        five_rounds(turns, filler, window, factor, false, r).unwrap();
    }
}
