//! The fold: the pure plan's invariants over arbitrary prefixes and windows, and overflow
//! recovery against a model of a provider with a fixed window, which must succeed whenever the
//! in-flight turn and a summary fit and never send a request it knows cannot.

use std::sync::{Arc, Mutex};

use panto_compact::{
    CompactError, Compactor, CompactorConfig, Driver, FoldBudget, FoldError, MAX_SHRINKS,
    MIN_OUTPUT_TOKENS, MIN_ROOM, MIN_SMALL_OUTPUT_TOKENS, MemoryLog, MemoryStore, ModelRef, Reply,
    TINY_PROMPT_BELOW, fold, output_floor,
};
use panto_model::{ContentBlock, Entry, Message, Role, SequentialIds};
use panto_provider::{EventSink, Provider, ProviderError, Request, TokenNumbers, async_trait};
use panto_size::Heuristic;
use proptest::prelude::*;

use crate::{block_on, estimate_request, short_prompt};

/// Checks every invariant of a fold plan against its budget.
fn check_plan(turns: &[u64], budget: &FoldBudget) -> Result<(), TestCaseError> {
    // The floor of the budget's limit: MIN_OUTPUT_TOKENS, a tenth of a limit under 2,000.
    let floor = output_floor(budget.limit);
    let plan = match fold(turns, budget) {
        Ok(plan) => plan,
        Err(FoldError::NoRoom { .. }) => {
            // Only when a request cannot hold the least transcript beside its fixed part, the
            // summary it carries and the output floor: the first with the previous summary, or
            // a later one with the running summary's reserve (one and a half floors).
            let limit = budget.limit.unwrap();
            let summary = budget.previous.max(floor + floor / 2);
            prop_assert!(
                limit < budget.fixed + summary + floor + MIN_ROOM,
                "{budget:?}"
            );
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("{e:?}"))),
    };
    // Consecutive, non-empty, covering every turn once, in order.
    let mut next = 0;
    for c in &plan.chunks {
        prop_assert_eq!(c.turns.start, next);
        prop_assert!(c.turns.end > c.turns.start);
        prop_assert_eq!(c.tokens, turns[c.turns.clone()].iter().sum::<u64>());
        next = c.turns.end;
    }
    prop_assert_eq!(next, turns.len());
    prop_assert!(plan.requests() <= plan.bound());
    // No request allows less than the floor, whatever the window and the configuration.
    prop_assert!(plan.output >= floor, "{plan:?}");
    match budget.limit {
        None => prop_assert!(plan.requests() <= 1),
        Some(limit) => {
            for (k, c) in plan.chunks.iter().enumerate() {
                let previous = if k == 0 {
                    budget.previous
                } else {
                    plan.reserve
                };
                // Each request fits: input (with the chunk elided to its capacity when it is
                // too large) and output together.
                let carried = c.tokens.min(c.capacity);
                prop_assert!(budget.fixed + previous + carried + plan.output <= limit);
                if c.needs_elision() {
                    prop_assert_eq!(c.turns.len(), 1);
                }
            }
            // The summary the next request carries is at most the output before it.
            prop_assert!(plan.reserve >= plan.output || plan.requests() <= 1);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn the_fold_covers_the_prefix_in_fitting_chunks_of_whole_turns(
        turns in prop::collection::vec(prop_oneof![0u64..50, 50u64..2_000, 2_000u64..200_000], 0..60),
        limit in prop::option::of(prop_oneof![0u64..2_000, 2_000u64..32_000, 32_000u64..300_000]),
        fixed in 0u64..4_000,
        previous in prop_oneof![Just(0u64), 1u64..6_000],
        max_output in 1u64..16_000,
    ) {
        check_plan(&turns, &FoldBudget::new(limit, fixed, previous, max_output))?;
    }
}

/// The shrunk failure of the property above once the floor under 2,000 tokens became a tenth
/// of the limit (proptest-regressions/fold.txt): a limit of 180 tokens, nothing fixed, no
/// summary carried, an output limit of 1 and no turns. The plan's floor is the limit's,
/// `output_floor(180)` = 64 (a tenth is 18), where the property still asked 256.
#[test]
fn a_fold_within_180_tokens_allows_the_small_floor_of_64() {
    let budget = FoldBudget::new(Some(180), 0, 0, 1);
    check_plan(&[], &budget).unwrap();
    let plan = fold(&[], &budget).unwrap();
    assert_eq!(plan.output, MIN_SMALL_OUTPUT_TOKENS);
    assert!(plan.chunks.is_empty());
    // The compactor raises a budget's floor to 256 where the window is stated at 2,000 tokens
    // or more: the chunks shrink instead, or no request fits.
    let raised = budget.with_min_output(u64::from(MIN_OUTPUT_TOKENS));
    assert!(matches!(
        fold(&[100], &raised),
        Err(FoldError::NoRoom { floor: 256, .. })
    ));
}

#[test]
fn a_prefix_that_fits_is_one_request_with_the_full_output() {
    let plan = fold(
        &[100, 200, 300],
        &FoldBudget::new(Some(20_000), 1_500, 0, 8_192),
    )
    .unwrap();
    assert_eq!(plan.requests(), 1);
    assert_eq!(plan.chunks[0].turns, 0..3);
}

#[test]
fn a_prefix_twice_the_window_takes_several_requests_within_the_bound() {
    // A 4,096-token window, the built-in prompt's size, and 8,000 tokens of turns.
    let turns = vec![400; 20];
    let plan = fold(&turns, &FoldBudget::new(Some(4_096), 1_800, 0, 8_192)).unwrap();
    assert!(plan.requests() >= 4, "{plan:?}");
    assert!(plan.requests() <= plan.bound());
    check_plan(&turns, &FoldBudget::new(Some(4_096), 1_800, 0, 8_192)).unwrap();
}

#[test]
fn a_turn_larger_than_any_request_is_alone_and_elided() {
    let plan = fold(
        &[100, 50_000, 100],
        &FoldBudget::new(Some(8_000), 1_000, 0, 2_000),
    )
    .unwrap();
    let big = plan.chunks.iter().find(|c| c.turns == (1..2)).unwrap();
    assert!(big.needs_elision());
    assert!(
        !plan
            .chunks
            .iter()
            .any(|c| c.turns != (1..2) && c.needs_elision())
    );
}

/// A model of a provider whose window is `window` tokens of its own count, which is panto's
/// heuristic estimate times `factor` (real tokenizers count differently). It rejects any
/// request whose input exceeds the window, stating the numbers or not, and answers a compaction
/// request with a summary of `summary_words` words and the size of its prompt. It records every request as (compaction,
/// counted input, fitted, output allowed).
struct Window {
    window: u64,
    factor: f64,
    numbers: bool,
    summary_words: usize,
    seen: Mutex<Vec<Seen>>,
}

/// A request as [`Window`] records it: (compaction, counted input, fitted, output allowed).
type Seen = (bool, u64, bool, u32);

impl Window {
    fn count(&self, request: &Request) -> u64 {
        let estimate = estimate_request(&request.system, &request.messages);
        (estimate as f64 * self.factor).ceil() as u64
    }
}

#[async_trait]
impl Provider for Window {
    fn name(&self) -> &str {
        "window"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let counted = self.count(request);
        let compaction = request.system != "agent";
        let fits = counted <= self.window;
        self.seen
            .lock()
            .unwrap()
            .push((compaction, counted, fits, request.max_output_tokens));
        if !fits {
            return Err(ProviderError::ContextOverflow {
                message: "prompt is too long".into(),
                numbers: TokenNumbers::new(
                    self.numbers.then_some(counted),
                    self.numbers.then_some(self.window),
                ),
            });
        }
        let text = if compaction {
            // Named by the size of what it summarizes, so that no two chunks get the same
            // answer (a copy of the previous summary is a failed attempt).
            let size = request.messages[0].text().len();
            format!("{size} {}", vec!["summary"; self.summary_words].join(" "))
        } else {
            "the reply".to_owned()
        };
        Ok(Message::assistant_text(text))
    }
}

prop_compose! {
    /// A conversation of user prompts and assistant answers of random lengths, one of which may
    /// carry a huge tool result.
    fn conversation()(
        lengths in prop::collection::vec(1usize..400, 4..40),
        huge in prop::option::of((0usize..40, 2_000usize..20_000)),
    ) -> Vec<Message> {
        let mut messages = Vec::new();
        for (i, words) in lengths.iter().enumerate() {
            let text = format!("m{i} {}", vec!["word"; *words].join(" "));
            match huge {
                Some((at, size)) if at == i && i % 2 == 1 => {
                    let id = format!("t{i}");
                    messages.push(Message::new(Role::Assistant, vec![
                        ContentBlock::text(text),
                        ContentBlock::tool_use(&id, "read", serde_json::json!({"path": "log"})),
                    ]));
                    messages.push(Message::new(Role::User, vec![
                        ContentBlock::tool_result(&id, vec!["line"; size].join("\n"), false),
                    ]));
                    messages.push(Message::assistant_text("read it"));
                }
                _ => messages.push(Message::new(
                    if i % 2 == 0 { Role::User } else { Role::Assistant },
                    vec![ContentBlock::text(text)],
                )),
            }
        }
        if messages.last().is_some_and(|m| m.role == Role::User) {
            messages.push(Message::assistant_text("ok"));
        }
        messages
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// Recovery succeeds whenever the in-flight turn and a summary fit the window, and a retry
    /// is only sent when it is estimated smaller than what overflowed and within the known
    /// limit.
    #[test]
    fn recovery_succeeds_whenever_the_in_flight_turn_and_a_summary_fit(
        history in conversation(),
        prompt_words in 1usize..3_000,
        window_share in 0.2f64..1.0,
        factor in 0.6f64..1.1,
        numbers in any::<bool>(),
        keep in prop_oneof![Just(0u64), Just(2_000u64), Just(5_000u64), Just(20_000u64)],
        summary_words in 5usize..60,
    ) {
        let prompt = Message::user_text(format!("new {}", vec!["ask"; prompt_words].join(" ")));
        let window = window_for(&history, &prompt, factor * window_share);
        let model = Arc::new(Window {
            window,
            factor,
            numbers,
            summary_words,
            seen: Mutex::new(Vec::new()),
        });
        let (driver, result) = recover(history, &prompt, model.clone(), keep);
        let seen = model.seen.lock().unwrap().clone();

        // What a retry needs: the agent prompt, the in-flight turn and a summary, counted as
        // the provider counts. With room to spare for estimates, recovery must succeed.
        let in_flight = estimate_request("agent", std::slice::from_ref(&prompt));
        let summary = Heuristic.text(&vec!["summary"; summary_words].join(" ")) + 60;
        let needed = ((in_flight + summary) as f64 * factor) as u64;
        let overflowed = seen.first().is_some_and(|s| !s.2);
        if overflowed && 2 * needed <= window && window >= 600 {
            prop_assert!(result.is_ok(), "window {window}, needed {needed}: {result:?}\n{seen:?}");
        }
        // Every compaction request allows at least the output floor.
        for s in seen.iter().filter(|s| s.0) {
            // MIN_OUTPUT_TOKENS, unless the window is tiny: stated (`numbers`) under
            // TINY_PROMPT_BELOW, where the floor is a tenth of the limit the fold plans in, at
            // least MIN_SMALL_OUTPUT_TOKENS; or bounded by a refused compaction request under
            // 1,700 of panto's tokens, which a window of `window / factor` of them or more never
            // refuses. However low the fold guesses a window that states no limit, a guess
            // alone never makes it tiny.
            let bounded = (window as f64 / factor) < 1_700.0;
            let tiny = (numbers && window < TINY_PROMPT_BELOW) || bounded;
            let floor = if tiny { MIN_SMALL_OUTPUT_TOKENS as u32 } else { MIN_OUTPUT_TOKENS };
            prop_assert!(s.3 >= floor, "{seen:?}");
        }
        // At most one retry of the conversation, and a bounded number of rejected requests.
        let conversation: Vec<_> = seen.iter().filter(|s| !s.0).collect();
        prop_assert!(conversation.len() <= 2);
        if let Err(e) = refusals_fall_back(&seen) {
            prop_assert!(false, "{e}");
        }
        // A retry is never sent when panto knew it could not help.
        if let Err(CompactError::OverflowNoProgress { estimated_tokens, overflowed_tokens, limit, .. }) = &result {
            prop_assert!(*estimated_tokens >= *overflowed_tokens || limit.is_some_and(|l| estimated_tokens > &l));
            prop_assert_eq!(conversation.len(), 1);
        }
        if conversation.len() == 2 {
            prop_assert!(conversation[1].1 < conversation[0].1, "{seen:?}");
        }
        // Whatever happened, the prompt is in the log.
        prop_assert!(driver.log().entries().iter().any(|e| matches!(e, Entry::Message(m) if m.text() == prompt.text())));
    }
}

/// The window, in the provider's tokens, that is `share` of the estimate of `history` and
/// `prompt`.
fn window_for(history: &[Message], prompt: &Message, share: f64) -> u64 {
    let mut all = history.to_vec();
    all.push(prompt.clone());
    (estimate_request("agent", &all) as f64 * share) as u64
}

/// Sends `prompt` after `history` to `model` through a driver keeping `keep` tokens.
fn recover(
    history: Vec<Message>,
    prompt: &Message,
    model: Arc<Window>,
    keep: u64,
) -> (Driver<MemoryStore>, Result<Reply, CompactError>) {
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let ctx = log.replay();
    let compactor = Compactor::new(ModelRef::new(model, "m"))
        .with_ids(Arc::new(SequentialIds::new()))
        .with_prompt(short_prompt())
        .with_config(CompactorConfig::new().with_keep_tokens(keep));
    let mut driver = Driver::new(compactor, log, ctx).with_system("agent");
    let result = block_on(driver.send(vec![prompt.clone()], &mut |_| {}));
    (driver, result)
}

/// The shrunk failures of the property above (saved in proptest-regressions/fold.txt): the
/// provider states no limit, and the window is a fifth of the request that overflowed. The keep
/// budget was a quarter of that request, more than the whole window; now it is a tenth.
#[test]
fn an_overflow_without_numbers_into_a_window_a_fifth_of_the_request_recovers() {
    let history: Vec<Message> = (0..30)
        .map(|i| {
            let text = format!("m{i} {}", vec!["word"; 150].join(" "));
            if i % 2 == 0 {
                Message::user_text(text)
            } else {
                Message::assistant_text(text)
            }
        })
        .collect();
    let prompt = Message::user_text("new ask");
    let window = window_for(&history, &prompt, 0.6 * 0.2);
    let model = Arc::new(Window {
        window,
        factor: 0.6,
        numbers: false,
        summary_words: 5,
        seen: Mutex::new(Vec::new()),
    });
    let (driver, result) = recover(history, &prompt, model.clone(), 20_000);
    let seen = model.seen.lock().unwrap().clone();
    assert!(result.is_ok(), "window {window}: {result:?}\n{seen:?}");
    assert_eq!(
        driver.context().messages.last().unwrap().text(),
        "the reply"
    );
}

/// The shrunk failure of the property above saved last (proptest-regressions/fold.txt): a model
/// whose every summary repeats one phrase, behind a window that states no limit. panto's own
/// record is written, and it was sized for no window at all; now it fits what the failed
/// fold learned (the model took its request, so the window holds at least that much).
#[test]
fn panto_s_record_after_failed_summaries_fits_what_the_fold_learned_of_an_unstated_window() {
    let history: Vec<Message> = (0..30)
        .map(|i| {
            let text = format!("m{i} {}", vec!["word"; 150].join(" "));
            if i % 2 == 0 {
                Message::user_text(text)
            } else {
                Message::assistant_text(text)
            }
        })
        .collect();
    let prompt = Message::user_text("new ask");
    let window = window_for(&history, &prompt, 0.2);
    let model = Arc::new(Window {
        window,
        factor: 1.0,
        numbers: false,
        summary_words: 60,
        seen: Mutex::new(Vec::new()),
    });
    let (driver, result) = recover(history, &prompt, model.clone(), 20_000);
    let seen = model.seen.lock().unwrap().clone();
    let reply = result.unwrap_or_else(|e| panic!("window {window}: {e}\n{seen:?}"));
    let report = reply.compaction.unwrap();
    assert_eq!(report.model, panto_compact::RECORD_ONLY_MODEL);
    assert_eq!(
        driver.context().messages.last().unwrap().text(),
        "the reply"
    );
}

/// A case of the property above: a conversation of messages of `words` words each (user first,
/// then an "ok" when it ends with the user's), a prompt of `prompt` words, a window of `share`
/// of the request counted by a provider whose count is panto's estimate times `factor` and that
/// states no limit, summaries of `summary_words` words and nothing kept. Gives the send's
/// result and what the provider saw.
fn unstated_case(
    words: &[usize],
    prompt: usize,
    share: f64,
    factor: f64,
    summary_words: usize,
) -> (Result<Reply, CompactError>, Vec<Seen>) {
    let mut history: Vec<Message> = words
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let text = format!("m{i} {}", vec!["word"; n].join(" "));
            if i % 2 == 0 {
                Message::user_text(text)
            } else {
                Message::assistant_text(text)
            }
        })
        .collect();
    if words.len() % 2 == 1 {
        history.push(Message::assistant_text("ok"));
    }
    let prompt = Message::user_text(format!("new {}", vec!["ask"; prompt].join(" ")));
    let window = window_for(&history, &prompt, factor * share);
    let model = Arc::new(Window {
        window,
        factor,
        numbers: false,
        summary_words,
        seen: Mutex::new(Vec::new()),
    });
    let (_, result) = recover(history, &prompt, model.clone(), 0);
    let seen = model.seen.lock().unwrap().clone();
    (result, seen)
}

/// The shrunk failure of the property above saved last (proptest-regressions/fold.txt, CI of
/// stop 53): a window that states no limit and counts the input only, about 0.65 of panto's
/// estimate. After its shrinks the fold's last try (1,316 of panto's tokens with the floor of
/// 256) was refused under 1,700, which makes the floor a tenth of the limit; the fall back kept
/// the old floor in its limit, so the tiny floor left an input above the largest taken (1,238
/// for 1,209), refused as a fourth, which ended the fold (`FoldOverflow`). A server that counts
/// the output too takes that input, so it is still tried, but its refusal now falls back once
/// more, to no more input than was taken, and the fold ends with the model's summary.
#[test]
fn a_fall_back_that_makes_the_floor_tiny_carries_no_more_than_was_taken() {
    let words = [74, 73, 282, 292, 75, 28, 73, 241, 232, 17, 386, 21, 326];
    let (factor, share) = (0.645_924_904_737_555_5, 0.272_630_280_480_467_6);
    let (result, seen) = unstated_case(&words, 1_146, share, factor, 39);
    assert_falls_back_for_good(&result, &seen);
    // Four refusals, the last step the model's summary (the retry itself does not fit: the
    // prompt alone is most of the window).
    let refused = seen.iter().filter(|s| s.0 && !s.2).count();
    assert_eq!(refused, MAX_SHRINKS + 2, "{seen:?}");
    assert!(seen.iter().rev().find(|s| s.0).unwrap().2, "{seen:?}");
}

/// A shrunk failure of the property above (proptest-regressions/fold.txt, found by running it
/// again and again after stop 53): no model's summary passes (each repeats one phrase), so
/// panto's record of each step is the summary carried, and it grows by a line a step, past the
/// reserve the plan kept for it (an output and a quarter, 80 tokens; 139 by step 5). The next
/// chunk planned with that reserve no longer fitted beside it: refused at step 5 (the fold's
/// third) and again at step 6, a fourth. Now a step whose next chunk would not fit beside the
/// summary carried plans the rest again.
#[test]
fn a_summary_carried_past_the_plan_s_reserve_plans_the_rest_again() {
    let words = [65, 81, 54, 25, 166, 270, 281];
    let (result, seen) = unstated_case(&words, 288, 0.209_433_805_157_096_11, 0.6, 39);
    assert_falls_back_for_good(&result, &seen);
}

/// A shrunk failure of the property above (proptest-regressions/fold.txt, CI of stop 56's
/// mend): the same window as the case above, 0.6 of panto's estimate, counting the input only.
/// The third refusal (689 with the floor of 256) was under 1,700, so the fall back carried
/// more input than was taken (582) beside the tiny floor (114). Its first chunk was smaller
/// (578, taken); the second carried 583 and was refused, the one more refusal that fall back
/// allows. The check allowed it only for the request right after the third refusal; it now
/// allows it for the fourth refusal, wherever it comes, and the fold still ends with the
/// model's summary and the retry answered.
#[test]
fn a_wide_fall_back_refused_after_a_smaller_chunk_was_taken_is_the_one_refusal_more() {
    let words = [140, 279, 302, 128, 15, 373, 315, 268, 2, 57, 102, 317, 199];
    let (result, seen) = unstated_case(&words, 567, 0.224_423_009_520_297_62, 0.6, 19);
    assert_falls_back_for_good(&result, &seen);
    let (compactions, refused) = compactions_refused(&seen);
    assert_eq!(refused.len(), MAX_SHRINKS + 2, "{seen:?}");
    // A request was taken between the third refusal and the fourth.
    let (third, fourth) = (refused[MAX_SHRINKS], refused[MAX_SHRINKS + 1]);
    assert!(fourth > third + 1 && compactions[third + 1].2, "{seen:?}");
    assert!(result.is_ok(), "{result:?}\n{seen:?}");
}

/// The compaction requests of `seen`, and the places among them of those refused.
fn compactions_refused(seen: &[Seen]) -> (Vec<&Seen>, Vec<usize>) {
    let compactions: Vec<&Seen> = seen.iter().filter(|s| s.0).collect();
    let refused = (0..compactions.len())
        .filter(|&i| !compactions[i].2)
        .collect();
    (compactions, refused)
}

/// The fold's refusals (`seen`, as the provider model records them) are at most
/// [`MAX_SHRINKS`] and one more, or two more when the fall back after the third carried more
/// input than was taken beside a smaller floor (a refusal under 1,700 tokens made it a tenth of
/// the limit; a server that counts the output too takes that, one that counts the input only,
/// as this model, refuses it): the fourth refusal then carried more input than any request
/// taken before it, with a smaller output than the third. After the last refusal allowed the
/// fold goes on at what is known to fit (its inputs may count a few tokens above one taken:
/// panto's estimate of a request is not the model's).
fn refusals_fall_back(seen: &[Seen]) -> Result<(), String> {
    let (compactions, refused) = compactions_refused(seen);
    let taken_before = |at: usize| compactions[..at].iter().filter(|s| s.2).map(|s| s.1).max();
    let mut allowed = MAX_SHRINKS + 1;
    if let (Some(&third), Some(&fourth)) = (refused.get(MAX_SHRINKS), refused.get(MAX_SHRINKS + 1))
        && let Some(taken) = taken_before(fourth)
        && compactions[fourth].1 > taken
        && compactions[fourth].3 < compactions[third].3
    {
        allowed += 1;
    }
    if refused.len() > allowed {
        return Err(format!(
            "{} refusals, {allowed} allowed: {seen:?}",
            refused.len()
        ));
    }
    Ok(())
}

fn assert_falls_back_for_good(result: &Result<Reply, CompactError>, seen: &[Seen]) {
    if let Err(e) = refusals_fall_back(seen) {
        panic!("{e}\n{result:?}");
    }
}
