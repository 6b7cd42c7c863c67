//! Small windows (issue 39, point 3): an overflow into a window of 1,000 to 8,000 tokens, with
//! the limit stated in the rejection, unstated (the llama.cpp, Ollama and LM Studio wordings),
//! stated too high (a limit the rejection itself contradicts) or too low, and a server that
//! counts the input only or the input and the output together, over a conversation of talk or
//! of large tool results. Every case ends with the retry answered or a typed error, within the
//! overflow's request bound, and no summary a model gave is thrown away: the entry written
//! carries the last summary the models gave, and counts every request.

use std::sync::{Arc, Mutex};

use panto_compact::testing::{sized_conversation, transcript_tokens};
use panto_compact::{
    BUILTIN_TINY_PROMPT, CompactError, CompactionEvent, Compactor, Driver, MIN_OUTPUT_TOKENS,
    MemoryLog, MemoryStore, ModelRef, RECORD_ONLY_MODEL, Reply, TINY_PROMPT_BELOW, output_floor,
};
use panto_model::{Entry, Message, SequentialIds};
use panto_provider::{EventSink, Provider, ProviderError, Request, TokenNumbers, async_trait};
use proptest::prelude::*;
use serde_json::json;

use crate::{block_on, estimate_request};

/// The agent's system prompt; a request with another one is a compaction.
pub(crate) const AGENT: &str = "agent";

/// What a server's rejection says of its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stating {
    /// The limit and the count, true.
    Stated,
    /// Nothing: "the request exceeds the available context size".
    Unstated,
    /// A limit a half above the true one (the rejection contradicts itself).
    TooHigh,
    /// A limit a quarter below the true one.
    TooLow,
}

/// One request, as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// Whether the request's system prompt is the tiny built-in form.
    pub(crate) tiny: bool,
    pub(crate) compaction: bool,
    pub(crate) input: u64,
    pub(crate) output: u32,
    pub(crate) fits: bool,
    /// The transcript it carried (panto's estimate of the text between the tags), for a
    /// compaction request.
    pub(crate) transcript: u64,
    /// The summary it answered with, for a compaction request that fitted.
    pub(crate) answer: Option<String>,
}

/// A server with a window of `window` tokens of panto's estimate, which rejects a request
/// whose input (and output reserve, when `counts_output`) exceeds it, in the wording of `stating`; it answers a
/// compaction request with a short summary numbered by the server, and
/// stops answering compaction requests (it rejects them as too large) after `answers` of them.
pub(crate) struct Server {
    window: u64,
    stating: Stating,
    counts_output: bool,
    answers: usize,
    /// The driver's reply budget as a share of the window (`window / share`); `None`: an
    /// eighth for a server that counts the output, the default (8,192) for one that does not.
    pub(crate) reply_share: Option<u64>,
    seen: Mutex<Vec<Seen>>,
}

impl Server {
    pub(crate) fn new(window: u64, stating: Stating, counts_output: bool) -> Server {
        Server {
            window,
            stating,
            counts_output,
            answers: usize::MAX,
            reply_share: None,
            seen: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The rejection of a request of `input` tokens, `counted` in all (vLLM's wording: the
    /// count the classifier takes is the input's, and the output it states, the completion's,
    /// when the server counts it).
    fn rejection(&self, input: u64, counted: u64) -> ProviderError {
        let stated = match self.stating {
            Stating::Stated => Some(self.window),
            Stating::Unstated => None,
            Stating::TooHigh => Some(self.window + self.window / 2),
            Stating::TooLow => Some(self.window - self.window / 4),
        };
        match stated {
            Some(limit) => ProviderError::ContextOverflow {
                message: format!(
                    "This model's maximum context length is {limit} tokens. However, you requested {counted} tokens ({input} in the messages, {} in the completion).",
                    counted - input
                ),
                numbers: TokenNumbers::new(Some(input), Some(limit))
                    .with_output(self.counts_output.then_some(counted - input)),
            },
            None => ProviderError::ContextOverflow {
                message: "the request exceeds the available context size, try increasing it".into(),
                numbers: TokenNumbers::default(),
            },
        }
    }
}

#[async_trait]
impl Provider for Server {
    fn name(&self) -> &str {
        "server"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let input = estimate_request(&request.system, &request.messages);
        let counted = if self.counts_output {
            input + u64::from(request.max_output_tokens)
        } else {
            input
        };
        let compaction = request.system != AGENT;
        let mut seen = self.seen.lock().unwrap();
        let answered = seen.iter().filter(|s| s.answer.is_some()).count();
        let fits = counted <= self.window && !(compaction && answered >= self.answers);
        let answer = (compaction && fits).then(|| {
            let body = request.messages[0].text();
            format!(
                "Summary {} of {} characters: the user asked, the assistant read and answered.",
                answered + 1,
                body.len()
            )
        });
        let transcript = if compaction {
            transcript_tokens(&request.messages[0].text())
        } else {
            0
        };
        seen.push(Seen {
            tiny: request.system.starts_with(BUILTIN_TINY_PROMPT.trim_end()),
            compaction,
            transcript,
            input,
            output: request.max_output_tokens,
            fits,
            answer: answer.clone(),
        });
        drop(seen);
        if !fits {
            return Err(self.rejection(input, counted));
        }
        Ok(Message::assistant_text(
            answer.unwrap_or_else(|| "the reply".to_owned()),
        ))
    }
}

/// Sends a short prompt after `history` to `server` through a driver with the default
/// configuration (its keep budget far above these windows).
fn send(
    history: Vec<Message>,
    server: Arc<Server>,
) -> (
    Driver<MemoryStore>,
    Result<Reply, CompactError>,
    Vec<CompactionEvent>,
) {
    let (window, counts_output, share) = (server.window, server.counts_output, server.reply_share);
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let ctx = log.replay();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let compactor = Compactor::new(ModelRef::new(server, "m"))
        .with_ids(Arc::new(SequentialIds::new()))
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    // The reply budget is the case's share of the window; without one, a server that counts
    // the output against the window is configured with an eighth of it, and one that counts
    // the input only is sent the default.
    let mut driver = Driver::new(compactor, log, ctx).with_system(AGENT);
    if let Some(share) = share.or(counts_output.then_some(8)) {
        driver = driver.with_max_output_tokens(u32::try_from(window / share).unwrap());
    }
    let prompt = Message::user_text("now fix the last one");
    let result = block_on(driver.send(vec![prompt], &mut |_| {}));
    let events = events.lock().unwrap().clone();
    (driver, result, events)
}

/// The issue's bound on one overflow's requests (docs/compaction.md): `2 + ceil(conversation
/// / (window / 2))`, 3 more when the provider's statement of its limit is not its true window.
pub(crate) fn issue_bound(conversation: u64, window: u64, stating: Stating) -> usize {
    let unstated = if stating == Stating::Stated { 0 } else { 3 };
    2 + conversation.div_ceil(window / 2) as usize + unstated
}

/// The most the fold's fixed part may take of a request: the short prompt, the envelope, the
/// summary it carries and the output floor (700 to 775 tokens measured over the sweep's grid
/// before the tiny prompt and the smaller output floor under 2,000 tokens; less since).
const MOST_FIXED: u64 = 800;

/// The bound on one overflow's requests derived from what the fold learned (issue 39 point
/// 3): the overflow and the retry, `ceil(conversation / room)` steps, and 3 requests per
/// compaction request refused. `room` is the transcript one request carries at the limit the
/// fold learned, `L`, the largest compaction request known to fit (within the window it
/// believes: the stated one when too low): half of it, as the issue's bound, or what the
/// fold's fixed part `F` leaves of it when that is less. Under 2,000 tokens `F` (about 750
/// tokens) takes more than half the window, which is why the issue's bound (`window / 2` a
/// step) did not hold there. A refusal is a fact learned (a limit, or a bound below the refused
/// input) that costs the refused request, the one sent back at what is known to fit, and the
/// one that tries half way up again (docs/compaction.md): each carries less than a step.
pub(crate) fn derived_bound(server: &Server, seen: &[Seen]) -> (usize, u64, u64) {
    let window = server.window;
    let accepted: Vec<&Seen> = seen.iter().filter(|s| s.compaction && s.fits).collect();
    let refused = seen.iter().filter(|s| s.compaction && !s.fits).count();
    let believed = match server.stating {
        Stating::TooLow => window - window / 4,
        _ => window,
    };
    let learned = accepted
        .iter()
        .map(|s| s.input + u64::from(s.output))
        .max()
        .unwrap_or(window)
        .min(believed);
    let fixed = accepted
        .iter()
        .map(|s| s.input - s.transcript)
        .max()
        .unwrap_or(0)
        + floor_of(server, learned);
    let room = (learned / 2).min(learned.saturating_sub(fixed)).max(1);
    (
        2 + seen[0].input.div_ceil(room) as usize + 3 * refused,
        fixed,
        room,
    )
}

/// The output floor of the fold's requests within `limit`: a tenth of it (at least 64) where
/// the window is tiny, stated (truly or not) under 2,000 tokens; 256 elsewhere, a window that
/// states no limit included (panto never takes it for tiny, `TINY_PROMPT_BELOW`).
fn floor_of(server: &Server, limit: u64) -> u64 {
    let window = server.window;
    let stated = match server.stating {
        Stating::Stated => Some(window),
        Stating::Unstated => None,
        Stating::TooHigh => Some(window + window / 2),
        Stating::TooLow => Some(window - window / 4),
    };
    if stated.is_some_and(|w| w < TINY_PROMPT_BELOW) {
        output_floor(Some(limit))
    } else {
        u64::from(MIN_OUTPUT_TOKENS)
    }
}

/// The requests as the server saw them: `c` a compaction, `r` the agent's, `!` refused, with
/// the input and output budget.
pub(crate) fn describe(seen: &[Seen]) -> String {
    seen.iter()
        .map(|s| {
            format!(
                "{}{}:{}+{}",
                if s.compaction { "c" } else { "r" },
                if s.fits { "" } else { "!" },
                s.input,
                s.output
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The checks of one case: the outcome, the bound, and that the entry keeps the models' work.
fn check(
    server: &Server,
    driver: &Driver<MemoryStore>,
    result: &Result<Reply, CompactError>,
) -> Result<(), TestCaseError> {
    let seen = server.seen();
    let describe = || describe(&seen);
    // The retry answered, or a typed error of the overflow.
    match result {
        Ok(reply) => prop_assert_eq!(reply.message.text(), "the reply"),
        Err(
            CompactError::OverflowAfterCompaction { .. }
            | CompactError::OverflowNoProgress { .. }
            | CompactError::OverflowCompactionFailed { .. }
            | CompactError::OverflowNothingToCompact { .. },
        ) => {}
        Err(other) => prop_assert!(false, "not an overflow's error: {other}"),
    }
    // Within the bound derived from what the fold learned; within the issue's own bound for
    // every window (1,000 tokens up) whose model answers: under 2,000 tokens the tiny prompt
    // and an output floor of a tenth of the limit keep the fold's fixed part within half the
    // window. A provider that states no true limit refuses at most three compaction requests
    // (MAX_SHRINKS and one try above what a model took), unless its model stops answering
    // or, counting the input only, refuses the fall back beside a floor the third made
    // smaller, and has the issue's 3 more requests (the probe below runs 2,000 cases of a seed: 0 over
    // in nine seeds; 1 before a try under a tenth higher was taken when it saves a request).
    let conversation = seen[0].input;
    let (most, fixed, room) = derived_bound(server, &seen);
    prop_assert!(
        seen.len() <= most,
        "{} requests for a bound of {most} (conversation {conversation}, room {room}): {}\n{result:?}",
        seen.len(),
        describe()
    );
    prop_assert!(
        fixed <= MOST_FIXED,
        "the fold's fixed part {fixed}: {}",
        describe()
    );
    if server.answers == usize::MAX {
        let refused = seen.iter().filter(|s| s.compaction && !s.fits).count();
        prop_assert!(refused <= 3, "{refused} refused: {}", describe());
        let issue = issue_bound(conversation, server.window, server.stating);
        prop_assert!(
            seen.len() <= issue,
            "{} for {issue}: {}",
            seen.len(),
            describe()
        );
    }
    // The entry keeps the last summary a model gave, and counts every compaction request.
    let entry = driver.log().entries().iter().rev().find_map(|e| match e {
        Entry::Compaction(c) => Some(c.clone()),
        _ => None,
    });
    let asked = seen.iter().filter(|s| s.compaction).count();
    let last = seen.iter().rev().find_map(|s| s.answer.clone());
    if let Some(entry) = entry {
        prop_assert_eq!(
            entry.extra["requests"].as_u64(),
            Some(asked as u64),
            "{}",
            describe()
        );
        if let Some(last) = &last {
            prop_assert_ne!(entry.model.as_deref(), Some(RECORD_ONLY_MODEL));
            prop_assert!(
                entry.summary.contains(last.as_str()),
                "the summary lost the model's last answer {last:?}:\n{}\n{}",
                entry.summary,
                describe()
            );
        }
    }
    Ok(())
}

fn stating() -> impl Strategy<Value = Stating> {
    prop_oneof![
        Just(Stating::Stated),
        Just(Stating::Unstated),
        Just(Stating::TooHigh),
        Just(Stating::TooLow),
    ]
}

/// One case of the sweep: a session of `times` the window, the server answering at most
/// `answers` compaction requests, the reply budget `window / share` (when a share is given).
fn case(
    (window, stating, counts_output): (u64, Stating, bool),
    tools: bool,
    times: f64,
    answers: usize,
) -> Result<(usize, u64), TestCaseError> {
    case_with_reply(
        (window, stating, counts_output),
        tools,
        times,
        answers,
        None,
    )
}

/// Runs one case: a session of `times` the window (talk, or tool results), sent one prompt
/// through a server of the window, its statement and count, answering at most `answers`
/// compaction requests, with the reply budget a `share` of the window (when given).
fn run(
    (window, stating, counts_output): (u64, Stating, bool),
    (share, tools, times, answers): (Option<u64>, bool, f64, usize),
) -> (
    Arc<Server>,
    Driver<MemoryStore>,
    Result<Reply, CompactError>,
) {
    let history = sized_conversation(AGENT, (window as f64 * times) as u64, window, tools);
    let mut server = Server::new(window, stating, counts_output);
    server.answers = answers;
    server.reply_share = share;
    let server = Arc::new(server);
    let (driver, result, _) = send(history, server.clone());
    (server, driver, result)
}

/// [`case`], with the reply budget a `share` of the window.
fn case_with_reply(
    (window, stating, counts_output): (u64, Stating, bool),
    tools: bool,
    times: f64,
    answers: usize,
    share: Option<u64>,
) -> Result<(usize, u64), TestCaseError> {
    let (server, driver, result) = run(
        (window, stating, counts_output),
        (share, tools, times, answers),
    );
    check(&server, &driver, &result)?;
    let seen = server.seen();
    Ok((seen.len(), seen[0].input))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The sweep: every overflow into a small window ends answered or with a typed error,
    /// within the bound, the models' summaries kept: over the window, how its limit is stated,
    /// whether the server counts the output against it or the input only, the reply budget's
    /// share of the window (the default 8,192 tokens, or an eighth, a quarter or a half of
    /// it), talk or tool results, and a model that stops answering.
    #[test]
    fn every_small_window_overflow_ends_answered_or_with_a_clear_error_within_the_bound(
        window in 1_000u64..=8_000,
        stating in stating(),
        counts_output in any::<bool>(),
        share in prop_oneof![Just(None), Just(Some(8u64)), Just(Some(4)), Just(Some(2))],
        tools in any::<bool>(),
        times in 1.3f64..4.0,
        answers in prop_oneof![3 => Just(usize::MAX), 1 => 0usize..4],
    ) {
        case_with_reply((window, stating, counts_output), tools, times, answers, share)?;
    }
}

/// A shrunk failure of the sweep: no compaction request fitted a 1,000-token window (the
/// server counts the output too and states no limit), and panto's record said `requests: 0`
/// for the two the fold had sent.
#[test]
fn panto_s_record_counts_the_requests_of_the_fold_that_failed() {
    case((1_000, Stating::Unstated, true), false, 1.3, usize::MAX).unwrap();
}

/// A shrunk failure of the sweep's first bound, at 1,248 tokens. The fold's fixed part (its
/// prompt, the envelope, the summary carried and the output floor) took more than half the
/// window (the short prompt and a floor of 256), so each request carried less than `window /
/// 2` of transcript and the fold took 4 compaction requests where `ceil(1,870 / 624)` is 3: 6
/// requests for the issue's 5. Under 2,000 tokens the tiny prompt and an output floor of a
/// tenth of the limit leave the fixed part under half the window: 2 compaction requests, each
/// carrying more than `window / 2` of transcript (767 and 788 tokens where half the window is
/// 624), 4 requests in all, within the issue's 5.
#[test]
fn a_stated_window_under_2k_ends_answered_within_the_room_its_fixed_part_leaves() {
    let window = 1_248;
    let history = sized_conversation(AGENT, (window as f64 * 1.3) as u64, window, false);
    let server = Arc::new(Server::new(window, Stating::Stated, false));
    let (driver, result, _) = send(history, server.clone());
    check(&server, &driver, &result).unwrap();
    let seen = server.seen();
    let (derived, fixed, room) = derived_bound(&server, &seen);
    assert!(fixed <= window / 2, "fixed part {fixed}");
    assert!(room >= window / 2 - window / 20, "room {room}");
    assert_eq!(issue_bound(seen[0].input, window, Stating::Stated), 5);
    assert_eq!(seen.len(), 4, "{seen:?}");
    let steps = seen.iter().filter(|s| s.compaction);
    assert!(
        steps.clone().all(|s| s.fits && s.transcript > window / 2),
        "{seen:?}"
    );
    assert_eq!(steps.count(), 2);
    assert!(seen.len() <= derived, "{derived}");
    assert_eq!(result.unwrap().message.text(), "the reply");
}

/// A shrunk failure of the sweep: the model answered three steps, then a smaller request was
/// refused; the fold's guess fell to a quarter of it (151 tokens), and panto's record, sized
/// to that guess, cut the models' summary away. What a model took bounds the retry too.
#[test]
fn the_record_after_a_fold_keeps_the_summary_within_what_a_model_took() {
    case((1_292, Stating::Stated, false), false, 1.3, 3).unwrap();
}

/// A shrunk failure of the sweep: a stated limit half above the true window of 1,136 tokens,
/// which the fold's rejections contradict, dropped the fold to a quarter of its input for good
/// (11 requests where the bound, before half again, is 10; 29 for a bound of 12 in issue 39).
#[test]
fn a_stated_limit_the_rejection_contradicts_is_taken_as_no_limit() {
    let (requests, conversation) = case(
        (1_136, Stating::TooHigh, false),
        true,
        2.264_671_619_927,
        usize::MAX,
    )
    .unwrap();
    // Within the bound itself: 2 + ceil(2,687 / 568) + 3.
    assert_eq!(conversation, 2_687);
    assert!(requests <= 10, "{requests} requests");
}

/// A fold whose model answers two steps, then finds no room for a third (every later request
/// rejected): the entry written keeps the model's summary of those steps (the second carries
/// the first), panto's record only of the turns after them, names the model, and counts every
/// request the fold sent.
#[test]
fn a_fold_that_runs_out_of_room_keeps_the_summaries_the_model_gave() {
    let window = 3_000;
    let history = sized_conversation(AGENT, window * 4, window, false);
    let mut server = Server::new(window, Stating::Stated, false);
    server.answers = 2;
    let server = Arc::new(server);
    let (driver, result, events) = send(history, server.clone());
    let seen = server.seen();
    let reply = result.unwrap_or_else(|e| panic!("{e}"));
    let report = reply.compaction.expect("a compaction");
    let answers: Vec<String> = seen.iter().filter_map(|s| s.answer.clone()).collect();
    assert_eq!(answers.len(), 2);
    assert!(report.summary.contains(&answers[1]), "{}", report.summary);
    assert_ne!(report.model, RECORD_ONLY_MODEL);
    assert_eq!(report.degraded, None);
    let asked = seen.iter().filter(|s| s.compaction).count();
    assert!(asked > 2);
    assert_eq!(report.requests, asked);
    // Two steps the model summarized, then panto's record of the rest, said as a step.
    assert_eq!(report.steps.len(), 3, "{:?}", report.steps);
    assert!(report.steps[..2].iter().all(|s| s.recorded.is_none()));
    let recorded = &report.steps[2];
    assert_eq!(recorded.model, RECORD_ONLY_MODEL);
    assert!(recorded.messages.start >= report.steps[1].messages.start);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, CompactionEvent::StepRecorded { step: 3, .. }))
    );
    assert!(report.summary.contains("## Turns recorded by panto"));
    let entry = driver
        .log()
        .entries()
        .iter()
        .rev()
        .find_map(|e| match e {
            Entry::Compaction(c) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(entry.extra["requests"], asked as u64);
    assert_eq!(entry.extra["recorded_steps"], json!([3]));
    assert!(entry.extra.get("degraded").is_none());
}

/// No model answers (every compaction request refused) at a window that states no limit,
/// four times smaller than the conversation: the plan for the overflow kept 10 turns (1,542
/// tokens, within a keep budget sized from the conversation), the fold came down to a guess of
/// a few hundred tokens. panto's record keeps 2 turns (216 tokens), planned within that guess,
/// and the retry is answered.
#[test]
fn panto_s_record_keeps_fewer_turns_when_the_window_learned_is_smaller_than_the_keep_budget() {
    let window = 4_000;
    let history = sized_conversation(AGENT, window * 4, window, false);
    let mut server = Server::new(window, Stating::Unstated, false);
    server.answers = 0;
    let server = Arc::new(server);
    let (driver, result, events) = send(history, server.clone());
    let seen = server.seen();
    check(&server, &driver, &result).unwrap();
    let planned = events
        .iter()
        .find_map(|e| match e {
            CompactionEvent::Started { plan, .. } => Some(plan.clone()),
            _ => None,
        })
        .unwrap();
    let reply = result.unwrap_or_else(|e| panic!("{e}"));
    let report = reply.compaction.expect("panto's record");
    assert_eq!(report.model, RECORD_ONLY_MODEL);
    // The plan for the overflow kept the turns of a quarter of the conversation; the record
    // keeps fewer.
    assert!(planned.kept_tokens >= 1_000, "{planned:?}");
    assert!(
        report.plan.kept_tokens < planned.kept_tokens / 4,
        "{:?}",
        report.plan
    );
    let retry = seen.last().unwrap();
    assert!(!retry.compaction && retry.fits);
}

/// A server that counts the reply's output budget against its window (vLLM's wording), with a
/// reply budget of half the window, and an overflow whose counted input lies within the limit
/// it states: the window learns that the output counts, the compaction keeps the whole reply's
/// room, and the retry is answered. Before, every budget kept an eighth of the window for the
/// reply, and the retry (1,272 tokens of input and 1,250 of output at a window of 2,500)
/// overflowed; at 1,500 tokens it was 895 and 750.
#[test]
fn a_server_that_counts_the_reply_gets_a_retry_with_room_for_it() {
    for window in [1_500, 2_500] {
        let history = sized_conversation(AGENT, window * 6 / 10, window, false);
        let mut server = Server::new(window, Stating::Stated, true);
        server.reply_share = Some(2);
        let server = Arc::new(server);
        let (driver, result, _) = send(history, server.clone());
        let seen = server.seen();
        assert!(seen[0].input <= window && !seen[0].fits, "{:?}", seen[0]);
        check(&server, &driver, &result).unwrap();
        let reply = result.unwrap_or_else(|e| panic!("window {window}: {e}"));
        assert_eq!(reply.message.text(), "the reply");
        assert_eq!(driver.windows().counts_output, Some(true));
        let retry = seen.last().unwrap();
        assert!(retry.fits && retry.input + u64::from(retry.output) <= window);
    }
}

/// Issue 39's case as written: a server of 5,500 tokens that states no limit (llama.cpp's "the
/// request exceeds the available context size") and counts the input only. The compaction
/// requests it takes allow an output beyond their input, so "what is known to fit" counted
/// with that output is more than the server takes as input; the retry sized to it was 5,522
/// tokens > 5,500. Over talk and large tool results, conversations of 1.1 to 4 times the
/// window: every retry is answered, its input within the window, and the scenario's
/// condition (a compaction request taken whose input and output exceed the window) is met.
#[test]
fn the_retry_to_an_input_only_server_of_5_500_tokens_is_sized_by_its_input() {
    let window = 5_500;
    let mut beyond = 0;
    for tools in [false, true] {
        for times in [1.1, 1.3, 1.6, 2.0, 3.0, 4.0] {
            let history = sized_conversation(AGENT, (window as f64 * times) as u64, window, tools);
            let server = Arc::new(Server::new(window, Stating::Unstated, false));
            let (driver, result, _) = send(history, server.clone());
            check(&server, &driver, &result).unwrap();
            let seen = server.seen();
            let reply = result.unwrap_or_else(|e| panic!("tools {tools}, x{times}: {e}"));
            assert_eq!(reply.message.text(), "the reply");
            let retry = seen.last().unwrap();
            assert!(
                !retry.compaction && retry.fits && retry.input <= window,
                "{retry:?}"
            );
            beyond += seen
                .iter()
                .filter(|s| s.compaction && s.fits && s.input + u64::from(s.output) > window)
                .count();
        }
    }
    assert!(
        beyond > 0,
        "no compaction request taken beyond the window with its output"
    );
}

/// A shrunk failure of the sweep at 2,000 cases, after the output floor under 2,000 tokens
/// became a tenth of the limit: a window of 1,457 tokens that states no limit and counts the
/// output, tool results. The model answered four steps; the last request, tried higher, was
/// refused, and panto's record must still carry the model's fourth summary.
#[test]
fn an_unstated_small_window_keeps_the_model_s_last_summary_in_panto_s_record() {
    case(
        (1_457, Stating::Unstated, true),
        true,
        1.414_044_562_259_583_6,
        usize::MAX,
    )
    .unwrap();
}

/// What one case of a probe came to: the requests, the issue's bound (with its 3 requests for a
/// limit not stated true), whether the send failed
/// and whether the sweep's checks failed (with why).
struct Probed {
    requests: usize,
    issue: usize,
    failed: bool,
    answered: bool,
    broken: Option<String>,
    /// The requests as the server saw them (`describe`).
    sequence: String,
    /// The typed error the send ended with.
    error: Option<String>,
}

/// One case of a probe, as [`case_with_reply`] runs it, counted rather than asserted.
fn probe(
    (window, stating, counts_output): (u64, Stating, bool),
    reply: (Option<u64>, bool, f64, usize),
) -> Probed {
    let (server, driver, result) = run((window, stating, counts_output), reply);
    let seen = server.seen();
    Probed {
        requests: seen.len(),
        issue: issue_bound(seen[0].input, window, stating),
        failed: result.is_err(),
        answered: seen.iter().any(|s| s.answer.is_some()),
        broken: check(&server, &driver, &result)
            .err()
            .map(|e| e.to_string()),
        sequence: describe(&seen),
        error: result.err().map(|e| e.to_string()),
    }
}

/// The issue's bound over a grid of stated windows from 1,000 to 2,369 tokens (steps of 37),
/// both servers, the four reply budgets, talk and tools, 1.3, 2 and 3 times the window.
#[test]
#[ignore = "probe"]
fn probe_issue_bound_grid() {
    let (mut cases, mut over, mut failed, mut worst, mut unasked) = (0, 0, 0, 0f64, 0);
    for window in (1_000u64..=2_400).step_by(37) {
        for counts_output in [false, true] {
            for share in [None, Some(8u64), Some(4), Some(2)] {
                for tools in [false, true] {
                    for times in [1.3f64, 2.0, 3.0] {
                        let p = probe(
                            (window, Stating::Stated, counts_output),
                            (share, tools, times, usize::MAX),
                        );
                        cases += 1;
                        unasked += usize::from(!p.answered);
                        failed += usize::from(p.failed);
                        if p.requests > p.issue {
                            over += 1;
                            worst = worst.max(p.requests as f64 / p.issue as f64);
                            eprintln!(
                                "OVER w={window} co={counts_output} share={share:?} tools={tools} x{times}: {} > {}",
                                p.requests, p.issue
                            );
                        }
                    }
                }
            }
        }
    }
    eprintln!(
        "PROBE cases={cases} over={over} failed={failed} worst={worst:.2} no_model_answer={unasked}"
    );
}

/// The sweep's own cases, drawn by a fixed seed (`PROPTEST_CASES` of them, 2,000 unless set),
/// counted rather than asserted: how many stated windows whose model answers exceed the
/// issue's bound, how many of the other statements whose model answers do, how many cases
/// whose model stops answering do (the sweep holds those to the derived bound only: each
/// refusal is a fact learned), and how many cases of any kind fail the sweep's checks.
#[test]
#[ignore = "probe"]
fn probe_the_sweep_against_the_issue_bound() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2_000);
    // Another fixed seed with `PROBE_SEED` (a byte), for cases the default one does not draw.
    let rng = match std::env::var("PROBE_SEED")
        .ok()
        .and_then(|s| s.parse::<u8>().ok())
    {
        Some(seed) => TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]),
        None => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    };
    let mut runner = TestRunner::new_with_rng(Config::with_cases(cases), rng);
    let strategy = (
        (1_000u64..=8_000, stating(), any::<bool>()),
        (
            prop_oneof![Just(None), Just(Some(8u64)), Just(Some(4)), Just(Some(2))],
            any::<bool>(),
            1.3f64..4.0,
            prop_oneof![3 => Just(usize::MAX), 1 => 0usize..4],
        ),
    );
    let (mut stated, mut over, mut over_small, mut broken, mut worst) = (0, 0, 0, 0, 0f64);
    // Every other way of stating the limit whose model answers, against the issue's bound with
    // its 3 requests for a statement that is not the true window.
    let (mut other, mut other_over) = (0, 0);
    let (mut silent, mut silent_over) = (0, 0);
    // The cases that end with a typed error, of every kind, and those whose model answers.
    let (mut errors, mut errors_answering) = (0, 0);
    for _ in 0..cases {
        let (window, reply) = strategy.new_tree(&mut runner).unwrap().current();
        let p = probe(window, reply);
        errors += usize::from(p.failed);
        errors_answering += usize::from(p.failed && reply.3 == usize::MAX);
        if let Some(error) = &p.error {
            eprintln!("ERROR {window:?} {reply:?}: {error}");
        }
        if let Some(why) = &p.broken {
            broken += 1;
            eprintln!(
                "BROKEN {window:?} {reply:?}: {}",
                why.lines().next().unwrap_or("")
            );
        }
        if window.1 == Stating::Stated && reply.3 == usize::MAX {
            stated += 1;
            if p.requests > p.issue {
                over += 1;
                over_small += usize::from(window.0 < 2_000);
                worst = worst.max(p.requests as f64 / p.issue as f64);
                eprintln!("OVER {window:?} {reply:?}: {} > {}", p.requests, p.issue);
            }
        } else if reply.3 != usize::MAX {
            silent += 1;
            if p.requests > p.issue {
                silent_over += 1;
                eprintln!(
                    "OVER (model stops answering) {window:?} {reply:?}: {} > {}: {}",
                    p.requests, p.issue, p.sequence
                );
            }
        }
        if window.1 != Stating::Stated && reply.3 == usize::MAX {
            other += 1;
            if p.requests > p.issue {
                other_over += 1;
                eprintln!(
                    "OVER (not stated true) {window:?} {reply:?}: {} > {}: {}",
                    p.requests, p.issue, p.sequence
                );
            }
        }
    }
    eprintln!("NOT STATED TRUE answering={other} over={other_over}");
    eprintln!("SILENT cases={silent} over={silent_over}");
    eprintln!("ERRORS all={errors} answering={errors_answering}");
    eprintln!(
        "SWEEP cases={cases} stated_answering={stated} over={over} (under 2,000: {over_small}) worst={worst:.2} broken={broken}"
    );
}

/// Folds at unstated windows whose compaction requests are refused: once one under 2,000 of
/// panto's tokens is refused, the window is bounded below the tiny prompt's threshold and the
/// fold takes the tiny prompt; once one under 1,700 is, the tiny output floor too (a tenth of
/// the limit). Before either, the short prompt and the floor of 256, as for any window that
/// states no limit (a window of 2,048 of a provider that counts up to a fifth above panto's
/// estimate refuses nothing under about 1,707). Each ends answered within the issue's bound;
/// on main (`4de2259`) they took 16 requests for 13, 12 for 9 and 12 for 10.
#[test]
fn unstated_windows_bounded_under_2000_by_a_refusal_take_the_tiny_prompt_and_under_1700_the_tiny_floor()
 {
    let cases = [
        (1_474, Some(8), 3.106_842_004_032_620_3),
        (1_302, None, 1.434_647_715_948_631_5),
        (1_088, Some(4), 1.929_571_627_767_386_9),
    ];
    let (mut prompt_only, mut tiny_floors) = (0, 0);
    for (window, share, times) in cases {
        let (server, _driver, result) = run(
            (window, Stating::Unstated, true),
            (share, true, times, usize::MAX),
        );
        assert!(result.is_ok(), "{window}: {result:?}");
        let seen = server.seen();
        let describe = describe(&seen);
        let mut refused = u64::MAX;
        for s in seen.iter().filter(|s| s.compaction) {
            let output = u64::from(s.output);
            assert_eq!(s.tiny, refused < 2_000, "{window}: {describe}");
            if refused >= 1_700 {
                assert!(output >= 256, "{window}: {describe}");
            }
            prompt_only += usize::from(s.tiny && output >= 256);
            tiny_floors += usize::from(output < 256);
            if !s.fits {
                refused = refused.min(s.input + output);
            }
        }
        let issue = issue_bound(seen[0].input, window, Stating::Unstated);
        assert!(
            seen.len() <= issue,
            "{window}: {} for {issue}: {describe}",
            seen.len()
        );
    }
    assert!(prompt_only > 0 && tiny_floors > 0);
}

/// A fold whose limit a model that stops answering (refusing as too large, with a limit its
/// own numbers contradict) drove down until no request fits: panto's record after the model's
/// one summary had 52 tokens, and cutting the summary to half of them (26) dropped its one line
/// of 27 tokens whole. The models' summary goes first now, within three quarters of the room.
#[test]
fn a_record_with_little_room_keeps_the_model_s_summary_before_panto_s_record() {
    case_with_reply(
        (1_099, Stating::TooHigh, true),
        true,
        3.494_182_681_509_516_7,
        1,
        Some(8),
    )
    .unwrap();
}

/// Unstated windows of about 1,040 tokens whose server counts the output: the second refusal
/// is of the short form's least request (822 + 256 tokens), nothing taken yet. The shrink's
/// guess (a quarter of the input) fell below the least limit, so the fold climbed from its
/// least request (340 + 64) over four steps to about 710 + 80, and the inputs stayed under the
/// 822 refused although at the tiny floor such a server takes up to about 960: 11 requests
/// for the issue's bound of 10 and 12 for 11 at `f75d9f2` (the small-window probe's cases),
/// and 14 for 13 with the first change alone. Now the fold starts half way from the least
/// limit to the refused request, and tries up to the refused request less the floor.
#[test]
fn unstated_windows_counting_the_output_start_half_way_after_their_last_refusal() {
    let cases = [
        (1_044, Some(4), false, 2.043_232_302_968_983),
        (1_046, Some(2), false, 2.421_055_774_409_594_6),
        (1_032, Some(4), true, 3.543_602_491_084_058_7),
    ];
    for (window, share, tools, times) in cases {
        let (server, driver, result) = run(
            (window, Stating::Unstated, true),
            (share, tools, times, usize::MAX),
        );
        check(&server, &driver, &result).unwrap();
        let seen = server.seen();
        let describe = describe(&seen);
        let compactions: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
        let refused = compactions.iter().filter(|s| !s.fits).count();
        assert_eq!(refused, 2, "{window}: {describe}");
        // The first request after the second refusal: half way (in proportion) from the least
        // request of the tiny form (about 404 tokens) to the refused one (1,078).
        let first = compactions[2];
        let total = first.input + u64::from(first.output);
        assert!((600..1_000).contains(&total), "{window}: {describe}");
        let issue = issue_bound(seen[0].input, window, Stating::Unstated);
        assert!(
            seen.len() <= issue,
            "{window}: {} for {issue}: {describe}",
            seen.len()
        );
    }
}

/// A window of 2,020 tokens that states no limit and counts the output (the small-window
/// probe's seed 42): a try above the first request taken is refused by 10 tokens (1,774 +
/// 256), the fold climbs back to 1,381 + 256, and its next try (1,565 + 256) is 9.96% above
/// that limit, under the tenth a try asks. It saves a request over the steps left, even with
/// a tenth less room a request, so the fold takes it and stays within the issue's bound (13
/// requests for 12 on `515112c`, six steps at 1,381).
#[test]
fn a_try_under_a_tenth_higher_is_taken_when_it_saves_a_request() {
    answered(
        (2_020, Stating::Unstated, true),
        (None, true, 3.041492724092123),
    );
}

/// Runs a case whose model always answers, checks it (within the issue's bound, [`check`]),
/// and that the retry was answered. Gives the requests the server saw.
fn answered(
    (window, stating, counts_output): (u64, Stating, bool),
    (share, tools, times): (Option<u64>, bool, f64),
) -> Vec<Seen> {
    let (server, driver, result) = run(
        (window, stating, counts_output),
        (share, tools, times, usize::MAX),
    );
    check(&server, &driver, &result).unwrap();
    let seen = server.seen();
    assert!(result.is_ok(), "{}: {result:?}", describe(&seen));
    seen
}

/// A window of 600 tokens that states no limit and counts the output: the guess half way from
/// the least limit to the second refused request (546 + 72) is refused too, and the fold falls
/// back to the least limit (one more refusal, as after a failed try above a request taken)
/// instead of ending with `FoldOverflow`; the model answers there and the retry is answered.
#[test]
fn a_refused_guess_above_the_least_limit_falls_back_to_it() {
    let (server, driver, result) = run(
        (600, Stating::Unstated, true),
        (None, true, 3.0, usize::MAX),
    );
    check(&server, &driver, &result).unwrap();
    let seen = server.seen();
    let describe = describe(&seen);
    assert!(result.is_ok(), "{describe}: {result:?}");
    let compactions: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    let refused: Vec<&&Seen> = compactions.iter().filter(|s| !s.fits).collect();
    assert_eq!(refused.len(), 3, "{describe}");
    let after = compactions.iter().position(|s| s.fits).unwrap();
    assert_eq!(after, 3, "{describe}");
    let total = |s: &Seen| s.input + u64::from(s.output);
    assert!(total(compactions[after]) < total(refused[2]), "{describe}");
}

/// A window of 1,001 tokens that says it is half as large again (1,501) and counts the output
/// (the sweep's draw in stop 54, on `f19e866` too): the first compaction request (1,269 + 152)
/// is refused under the limit stated, which says nothing then. A quarter of its input fell
/// below the least limit (486), and the fold climbed from its least request over three steps
/// (216, 496, 740 of input), then a try was refused by 2 tokens: 13 requests for the issue's
/// bound of 12. A first refusal under 1,700 tokens bounds the window between the least limit
/// and the request refused, a ratio under four: the fold starts half way between them, as
/// after the second refusal (645 + 83 taken, 10 requests).
#[test]
fn a_first_refusal_under_1_700_starts_half_way_from_the_least_limit() {
    let seen = answered(
        (1_001, Stating::TooHigh, true),
        (None, true, 3.321_954_473_245_522),
    );
    let describe = describe(&seen);
    let compactions: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    assert!(!compactions[0].fits && compactions[1].fits, "{describe}");
    // Half way in proportion from the least limit (486) to the refused request (1,431 of
    // panto's tokens): about 833; the least request was 280.
    let first = compactions[1].input + u64::from(compactions[1].output);
    assert!(first > 600, "{describe}");
}

/// Windows of 1,187 and 1,130 tokens stated half as large again, whose server counts the
/// output, with a reply of a quarter of the window (the probe's seeds default and 1, once the
/// fold started half way): the fold's last limit was a try above its largest request taken
/// (1,004 + 114) that no request filled, and the request after the compaction was sized to it,
/// 972 + 296 tokens, refused. Where only refusals found the window, the request after is sized
/// to what a model took: its input and output, as this server counts the reply.
#[test]
fn the_request_after_a_fold_that_tried_higher_fits_what_a_model_took() {
    for (window, times) in [
        (1_187, 1.710_408_234_993_663_1),
        (1_130, 1.874_109_882_601_557_2),
    ] {
        let seen = answered((window, Stating::TooHigh, true), (Some(4), false, times));
        let describe = describe(&seen);
        let taken = seen
            .iter()
            .filter(|s| s.compaction && s.fits)
            .map(|s| s.input + u64::from(s.output))
            .max()
            .unwrap();
        let retry = seen.last().unwrap();
        assert!(
            retry.input + u64::from(retry.output) <= taken,
            "{window}: {describe}"
        );
    }
}

/// A window of 3,188 tokens stated half as large again, whose server counts the output and
/// whose model answers once, then refuses as too large (a shrunk failure of the sweep while the
/// room kept for the reply was changed): the fold learns a limit of about 842 tokens, below the
/// reply of 797. Sizing the request after the compaction to it with the whole reply kept left
/// panto's record no room, and the model's summary was dropped. The reply above half of what
/// was taken keeps an eighth of it, as before, and the record keeps the model's summary.
#[test]
fn a_reply_above_half_of_what_was_taken_keeps_the_model_s_summary() {
    case_with_reply((3_188, Stating::TooHigh, true), false, 1.3, 1, Some(4)).unwrap();
}

/// Issue 39 point 3 (the sweep probe's seeds 17, 23 and 25, two cases each over the issue's
/// bound by one request): after the fold's last shrink and a try taken, the parts left were
/// 972 tokens and a sliver of 37 beside requests that carry 1,003. By the room alone that is
/// one request, so the next try, which saves the second, was not taken: 10 requests for the
/// issue's 9 at 2,080 tokens stated nowhere, 12 for 11 at 2,074 stated a half too high. The
/// parts left packed whole now count too, and each ends within the issue's bound.
#[test]
fn a_try_is_taken_when_a_sliver_left_over_takes_a_request_the_room_does_not_show() {
    answered(
        (2_080, Stating::Unstated, true),
        (None, false, 1.9026305738018923),
    );
    answered(
        (2_074, Stating::TooHigh, true),
        (Some(4), true, 2.7666230741254902),
    );
}

/// A window of 1,982 tokens that states no limit and counts the output (the probe's seed 5):
/// after 1,649 + 256 was taken and 2,071 + 256 refused, the fold's last try (1,809 + 256) was
/// refused by 83 tokens and the rest took three steps at what was taken, 12 requests for the
/// issue's 11. Staying at the limit takes 11 for any window the refusals leave possible (up to
/// 2,336 tokens), and the try, refused by a window between 1,962 and 2,064, takes 12 for 11:
/// the fold stays (`FoldState::stays_within_bound`), and the case ends answered within the
/// issue's bound.
#[test]
fn a_try_is_not_taken_when_staying_keeps_the_bound_its_refusal_would_break() {
    let seen = answered(
        (1_982, Stating::Unstated, true),
        (Some(2), true, 2.892803130253591),
    );
    let refused = seen.iter().filter(|s| s.compaction && !s.fits).count();
    assert_eq!(refused, 2, "{}", describe(&seen));
}

/// The conflict of stop 61 (docs/compaction.md): a talk of 4,158 tokens into windows of 1,668
/// to 1,701 tokens that state no limit and count the output. The first compaction request is
/// refused, and the limit falls to the least a fold can work in (1,142); the parts left, cut
/// again for the smaller requests, led to a least 13 tokens higher (1,155), so the fold went
/// back to whole turns, which filled its first request to 746 + 256. From there the windows of
/// 1,668 to 1,701 and those of 2,080 to 2,106 needed opposite choices at a later try, and the
/// first group took 11 requests for the issue's 10 (the probe: 3 cases over 13 seeds, 1 more
/// on seed 6). With the limit raised to the least of the parts as cut, the first request
/// takes 822 + 256 and the fold 10 requests for 10; 0 cases over in 19 seeds.
#[test]
fn a_shrink_plans_the_parts_cut_again_at_their_least_limit_not_whole_turns() {
    for (window, share, times) in [(1_684u64, 4u64, 2.3), (1_701, 2, 2.32), (1_668, 8, 2.38)] {
        case_with_reply(
            (window, Stating::Unstated, true),
            false,
            times,
            usize::MAX,
            Some(share),
        )
        .unwrap();
    }
}
