//! Compacting before it hurts: proactive compaction against a provider that enforces its window,
//! silent truncation noticed against one that cuts an over-long prompt and answers anyway (as
//! Ollama does past `num_ctx`), and the window a driver learns, is given and says it lacks.

use std::sync::{Arc, Mutex};

use panto_compact::{
    CompactError, CompactOutcome, CompactRun, CompactionEvent, Compactor, CompactorConfig, Driver,
    KnownWindows, MemoryLog, MemoryStore, ModelRef, Window, WindowSource,
};
use panto_model::{Entry, Message, SequentialIds, Trigger, Usage};
use panto_provider::{EventSink, Provider, ProviderError, Request, TokenNumbers, async_trait};
use panto_size::{Heuristic, Sizer};

/// The agent's system prompt; a request with another one is a compaction request.
const AGENT: &str = "You are the agent.";

/// What the server does with a request larger than its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Over {
    /// Refuses it with an overflow error that states the numbers.
    Reject,
    /// Refuses it with an overflow error that states none (llama.cpp, LM Studio).
    RejectQuietly,
    /// Cuts its front and answers, counting half the window (Ollama past `num_ctx`).
    Truncate,
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    compaction: bool,
    /// Its size in the server's tokens.
    size: u64,
    /// What the server reported it counted (half the window for a request it cut).
    counted: u64,
}

/// A server with a window of `window` of its own tokens: a tenth more than panto's heuristic
/// counts. Every answer reports the input it counted.
struct Server {
    window: u64,
    over: Over,
    seen: Mutex<Vec<Seen>>,
}

impl Server {
    fn new(window: u64, over: Over) -> Arc<Server> {
        Arc::new(Server {
            window,
            over,
            seen: Mutex::new(Vec::new()),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
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
        let heuristic = Heuristic.text(&request.system)
            + Heuristic
                .message_sizes(&request.messages)
                .iter()
                .sum::<u64>();
        let size = heuristic + heuristic / 10;
        let mut counted = size;
        let compaction = request.system != AGENT;
        let mut text = if compaction {
            summary(request)
        } else {
            "Noted.".to_owned()
        };
        if size > self.window {
            match self.over {
                Over::Reject => {
                    self.seen.lock().unwrap().push(Seen {
                        compaction,
                        size,
                        counted,
                    });
                    return Err(ProviderError::ContextOverflow {
                        message: format!(
                            "This model's maximum context length is {} tokens. However, your messages resulted in {counted} tokens.",
                            self.window
                        ),
                        numbers: TokenNumbers::new(Some(counted), Some(self.window)),
                    });
                }
                Over::RejectQuietly => {
                    self.seen.lock().unwrap().push(Seen {
                        compaction,
                        size,
                        counted,
                    });
                    return Err(ProviderError::ContextOverflow {
                        message: "the request exceeds the available context size".into(),
                        numbers: TokenNumbers::default(),
                    });
                }
                Over::Truncate => {
                    counted = self.window / 2;
                    text = "Answered from the end of a cut prompt.".to_owned();
                }
            }
        }
        self.seen.lock().unwrap().push(Seen {
            compaction,
            size,
            counted,
        });
        Ok(Message::assistant_text(text)
            .with_model("local")
            .with_usage(Usage::new(counted, 12)))
    }
}

/// A compaction model's summary: which notes the transcript covers (so that no two summaries
/// of different material are the same).
fn summary(request: &Request) -> String {
    let text = serde_json::to_string(&request.messages).unwrap();
    let transcript = text.rsplit("<transcript>").next().unwrap_or(&text);
    let notes: Vec<&str> = transcript
        .split("Note ")
        .skip(1)
        .filter_map(|rest| rest.split('.').next())
        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        .collect();
    format!(
        "The user sent notes {} about the parser reading the grammar and keeping every token; the assistant noted each.",
        notes.join(", ")
    )
}

type Events = Arc<Mutex<Vec<CompactionEvent>>>;

fn driver(server: Arc<Server>, window: Option<u64>, events: &Events) -> Driver<MemoryStore> {
    let sink = events.clone();
    let compactor = Compactor::new(ModelRef::new(server, "local"))
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(CompactorConfig::new().with_keep_tokens(2_000))
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let mut windows = KnownWindows::new();
    if let Some(window) = window {
        windows.learn(Window::new(window, WindowSource::Configured));
    }
    Driver::new(compactor, MemoryLog::memory(), Default::default())
        .with_windows(windows)
        .with_system(AGENT)
        .with_max_output_tokens(512)
}

/// A note of about 500 of the server's tokens.
fn note(i: usize) -> Message {
    Message::user_text(format!(
        "Note {i}. {}",
        "The parser reads the grammar and keeps every token. ".repeat(30)
    ))
}

fn compactions(driver: &Driver<MemoryStore>) -> Vec<Trigger> {
    driver
        .log()
        .entries()
        .iter()
        .filter_map(|e| match e {
            Entry::Compaction(c) => c.trigger.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_conversation_grown_past_the_window_is_compacted_ahead_and_never_overflows() {
    for share in [0.8, 0.6, 0.95] {
        let server = Server::new(8_000, Over::Reject);
        let events = Events::default();
        let mut d = driver(server.clone(), Some(8_000), &events).with_auto_compact(Some(share));
        let mut ahead = 0;
        for i in 0..60 {
            let reply = d
                .send(vec![note(i)], &mut |_| {})
                .await
                .unwrap_or_else(|e| panic!("share {share}, send {i}: {e}"));
            assert!(reply.compaction.is_none(), "share {share}, send {i}");
            ahead += usize::from(reply.compacted_ahead.is_some());
        }
        let seen = server.seen();
        // No request the server took was larger than its window: nothing overflowed.
        let largest = seen.iter().map(|s| s.size).max().unwrap();
        assert!(largest <= 8_000, "share {share}: {largest}");
        let triggers = compactions(&d);
        assert!(triggers.len() >= 3, "share {share}: {triggers:?}");
        assert_eq!(triggers.len(), ahead, "share {share}");
        assert!(
            triggers.iter().all(|t| *t == Trigger::Auto),
            "share {share}: {triggers:?}"
        );
        // Each compaction was announced with the share it crossed, then carried out.
        let events = events.lock().unwrap().clone();
        let announced: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                CompactionEvent::CompactingAhead {
                    estimated_tokens,
                    threshold_tokens,
                    window,
                } => Some((*estimated_tokens, *threshold_tokens, *window)),
                _ => None,
            })
            .collect();
        assert_eq!(announced.len(), ahead, "share {share}");
        for (estimated, threshold, window) in announced {
            assert_eq!(window, Window::new(8_000, WindowSource::Configured));
            assert_eq!(threshold, (8_000.0 * share) as u64);
            assert!(estimated > threshold);
        }
        assert!(events.iter().any(|e| matches!(
            e,
            CompactionEvent::Started {
                trigger: Trigger::Auto,
                ..
            }
        )));
        // The conversation requests after each compaction are under the threshold again.
        assert!(
            d.next_request().input.total() <= (8_000.0 * share) as u64 + 600,
            "share {share}"
        );
    }
}

#[tokio::test]
async fn a_server_that_truncates_silently_is_noticed_compacted_for_and_asked_again() {
    let server = Server::new(8_000, Over::Truncate);
    let events = Events::default();
    // No window known: nothing warns before the server cuts.
    let mut d = driver(server.clone(), None, &events);
    let mut crossed = None;
    for i in 0..40 {
        let reply = d.send(vec![note(i)], &mut |_| {}).await.unwrap();
        if let Some(t) = reply.truncation {
            assert_eq!(t.counted, 4_000);
            assert!(t.previous > t.counted, "{t:?}");
            let report = reply.compaction.expect("compacted");
            assert_eq!(report.trigger, Trigger::Overflow);
            assert_eq!(reply.message.text(), "Noted.");
            crossed = Some(i);
            break;
        }
        assert!(reply.compaction.is_none());
    }
    let i = crossed.expect("the server cut a request");
    assert!(i > 5, "crossed too early: {i}");
    let seen = server.seen();
    let conversation: Vec<&Seen> = seen.iter().filter(|s| !s.compaction).collect();
    // The request that crossed the window was cut; the retry fitted.
    let cut = conversation[conversation.len() - 2];
    let retry = conversation[conversation.len() - 1];
    assert_eq!(cut.counted, 4_000);
    assert!(cut.size > 8_000, "{cut:?}");
    assert!(retry.size <= 8_000, "{retry:?}");
    // The answer from the cut prompt was discarded, not written.
    let written = serde_json::to_string(&d.log().entries()).unwrap();
    assert!(!written.contains("cut prompt"));
    assert_eq!(compactions(&d), [Trigger::Overflow]);
    let events = events.lock().unwrap().clone();
    let said = events
        .iter()
        .position(|e| matches!(e, CompactionEvent::SilentTruncation { .. }))
        .expect("said");
    let started = events
        .iter()
        .position(|e| matches!(e, CompactionEvent::Started { .. }))
        .expect("compacted");
    assert!(said < started);
    // The window is now bounded by the request that did not fit, for the next ones.
    let learned = d.learned_window().expect("learned");
    assert_eq!(learned.source, WindowSource::Bound);
    assert!(learned.tokens < 9_000, "{learned:?}");
    // The next sends go on without another truncation.
    let reply = d.send(vec![note(99)], &mut |_| {}).await.unwrap();
    assert!(reply.truncation.is_none());
}

#[tokio::test]
async fn without_a_window_proactive_compaction_says_so_once_and_stays_reactive() {
    let server = Server::new(8_000, Over::Reject);
    let events = Events::default();
    let mut d = driver(server.clone(), None, &events).with_auto_compact(Some(0.8));
    for i in 0..20 {
        d.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let events = events.lock().unwrap().clone();
    let unknown = events
        .iter()
        .filter(|e| matches!(e, CompactionEvent::WindowUnknown))
        .count();
    assert_eq!(unknown, 1);
    // Reactive: the first compaction came after an overflow, and taught the window.
    assert_eq!(compactions(&d).first(), Some(&Trigger::Overflow));
    assert_eq!(
        d.learned_window(),
        Some(Window::new(8_000, WindowSource::Reported))
    );
    assert_eq!(d.window(), d.learned_window());
    // From then on it compacts ahead.
    let before = compactions(&d).len();
    for i in 20..40 {
        d.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let after = compactions(&d);
    assert!(after.len() > before);
    assert!(
        after[before..].iter().all(|t| *t == Trigger::Auto),
        "{after:?}"
    );
}

#[tokio::test]
async fn a_window_learned_once_is_given_to_the_next_conversation() {
    let server = Server::new(8_000, Over::Reject);
    let events = Events::default();
    let mut first = driver(server.clone(), None, &events);
    for i in 0..20 {
        first.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let learned = first.learned_window().expect("an overflow taught it");
    let overflows = server.seen().len();

    // A new conversation with the same model, given what the first one learned.
    let mut second = driver(server.clone(), None, &events)
        .with_window(learned)
        .with_auto_compact(Some(0.8));
    assert_eq!(second.window(), Some(learned));
    for i in 0..20 {
        second.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let later = &server.seen()[overflows..];
    assert!(later.iter().all(|s| s.size <= 8_000));
    assert!(compactions(&second).iter().all(|t| *t == Trigger::Auto));
}

#[tokio::test]
async fn a_request_larger_than_the_window_on_its_own_is_not_sent() {
    let server = Server::new(8_000, Over::Reject);
    let events = Events::default();
    let mut d = driver(server.clone(), Some(8_000), &events).with_auto_compact(Some(0.8));
    d.send(vec![note(0)], &mut |_| {}).await.unwrap();
    let huge = Message::user_text("The parser keeps every token. ".repeat(2_000));
    let err = d.send(vec![huge], &mut |_| {}).await.unwrap_err();
    let CompactError::ExceedsWindow {
        estimated_tokens,
        window,
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert!(*estimated_tokens > 8_000);
    assert_eq!(window.tokens, 8_000);
    assert!(err.to_string().contains("so it was not sent"), "{err}");
    // Nothing but the first exchange and the compaction ahead reached the server.
    assert_eq!(
        server.seen().iter().filter(|s| !s.compaction).count(),
        1,
        "{:?}",
        server.seen()
    );
}

#[tokio::test]
async fn a_compaction_ahead_that_would_not_shrink_is_not_written_and_the_user_is_told() {
    // Short exchanges whose summary and ledger cannot be smaller than them, and a share so
    // low that every request crosses it: each compaction ahead is refused, said, and the
    // request (which fits the window) is sent.
    let server = Server::new(4_000, Over::Reject);
    let events = Events::default();
    let mut d = driver(server.clone(), Some(4_000), &events).with_auto_compact(Some(0.01));
    for prompt in ["Hi.", "Yo.", "And?"] {
        let reply = d
            .send(vec![Message::user_text(prompt)], &mut |_| {})
            .await
            .unwrap();
        assert!(reply.compacted_ahead.is_none());
    }
    assert!(compactions(&d).is_empty());
    let events = events.lock().unwrap().clone();
    let skipped: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            CompactionEvent::AheadSkipped { reason, sending } => Some((reason.clone(), *sending)),
            _ => None,
        })
        .collect();
    assert_eq!(skipped.len(), 2, "{events:#?}");
    for (reason, sending) in skipped {
        assert!(sending);
        assert!(
            reason.starts_with("the compaction would not make the conversation smaller"),
            "{reason}"
        );
    }
    assert_eq!(server.seen().iter().filter(|s| !s.compaction).count(), 3);
}

#[tokio::test]
async fn an_agent_compacts_with_its_own_trigger_or_ahead_through_compact_with() {
    let server = Server::new(100_000, Over::Reject);
    let events = Events::default();
    let mut d = driver(server, None, &events);
    for i in 0..8 {
        d.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let own = CompactRun::manual(None).with_trigger(Trigger::Other("nightly".into()));
    let outcome = d.compact_with(own).await.unwrap();
    assert!(matches!(outcome, CompactOutcome::Compacted(_)));
    for i in 8..16 {
        d.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    // The agent's own threshold check: the next request and the window, from the driver.
    let next = d.next_request();
    assert_eq!(next.window, None);
    assert_eq!(next.reply_tokens, 512);
    assert_eq!(next.total(), next.input.total() + 512);
    // The window the agent works with, given to the driver, bounds its compaction.
    d.learn_window(Window::new(
        next.input.total() * 2,
        WindowSource::Configured,
    ));
    let outcome = d.compact_with(CompactRun::auto()).await.unwrap();
    assert!(matches!(outcome, CompactOutcome::Compacted(_)));
    assert_eq!(
        compactions(&d),
        [Trigger::Other("nightly".into()), Trigger::Auto]
    );
    // The entry keeps the agent's word.
    let written = serde_json::to_string(&d.log().entries()).unwrap();
    assert!(written.contains(r#""trigger":"nightly""#), "{written}");
}

#[test]
fn the_smallest_known_window_counts_and_bounds_only_tighten() {
    let mut known = KnownWindows::new()
        .with(Window::new(131_072, WindowSource::Discovered))
        .with(Window::new(32_000, WindowSource::Configured));
    assert_eq!(
        known.window(),
        Some(Window::new(32_000, WindowSource::Configured))
    );
    assert_eq!(known.learned(), None);
    known.learn(Window::new(30_000, WindowSource::Bound));
    known.learn(Window::new(40_000, WindowSource::Bound));
    assert_eq!(
        known.window(),
        Some(Window::new(30_000, WindowSource::Bound))
    );
    known.learn(Window::new(8_192, WindowSource::Reported));
    assert_eq!(
        known.learned(),
        Some(Window::new(8_192, WindowSource::Reported))
    );
    // A later statement replaces an earlier one of its source; 0 says nothing.
    known.learn(Window::new(16_384, WindowSource::Reported));
    known.learn(Window::new(0, WindowSource::Configured));
    assert_eq!(
        known.window(),
        Some(Window::new(16_384, WindowSource::Reported))
    );
    for source in [
        WindowSource::Reported,
        WindowSource::Configured,
        WindowSource::Discovered,
        WindowSource::Bound,
    ] {
        assert_eq!(WindowSource::parse(source.as_str()), Some(source));
    }
}

#[tokio::test]
async fn a_window_learned_or_given_bounds_a_manual_compaction() {
    let server = Server::new(100_000, Over::Reject);
    let events = Events::default();
    let mut d = driver(server, None, &events);
    for i in 0..10 {
        d.send(vec![note(i)], &mut |_| {}).await.unwrap();
    }
    let mut given = d.with_window(Window::new(4_000, WindowSource::Discovered));
    let CompactOutcome::Compacted(c) = given.compact(None).await.unwrap() else {
        panic!("nothing compacted");
    };
    // The keep budget is capped at a quarter of the window, as for a stated limit.
    assert!(c.report.plan.budget <= 1_000, "{:?}", c.report.plan);
    assert!(given.next_request().input.total() <= 4_000);
}

#[tokio::test]
async fn a_known_window_above_the_request_that_overflowed_does_not_bound_its_compaction() {
    // The server said the model's longest context (LM Studio's `max_context_length` of a model
    // not loaded), but serves 8,000 tokens and states no numbers when it refuses.
    let server = Server::new(8_000, Over::RejectQuietly);
    let events = Events::default();
    let mut d =
        driver(server, None, &events).with_window(Window::new(131_072, WindowSource::Discovered));
    let mut compacted = false;
    for i in 0..30 {
        let reply = d.send(vec![note(i)], &mut |_| {}).await.unwrap();
        if reply.compaction.is_some() {
            compacted = true;
            break;
        }
    }
    assert!(compacted);
    let events = events.lock().unwrap().clone();
    let limit = events
        .iter()
        .find_map(|e| match e {
            CompactionEvent::Folding { limit, .. } => Some(*limit),
            _ => None,
        })
        .expect("folded");
    // The request that overflowed bounds the compaction, not the window said before.
    assert!(limit.is_some_and(|l| l < 9_000), "{limit:?}");
    // And the bound is what the driver knows now.
    assert_eq!(d.window().map(|w| w.source), Some(WindowSource::Bound));
}

/// Issue 37, point 6: the model's call just returned a result far larger than the window (the
/// turn in flight, which every strategy keeps verbatim), and the request that sends it back
/// overflows. The tiered strategy cuts the result to its head within an eighth of the window,
/// with a note naming its id and size, and the send is answered: the overflow and the retry,
/// no compaction request. The original stays in the session, and the copy keeps its call's id
/// and place (the pairing holds).
#[tokio::test]
async fn a_huge_result_in_the_turn_in_flight_is_cut_and_the_send_is_answered() {
    use panto_compact::CompactionStrategy;
    use panto_model::{ContentBlock, Role, validate};

    let server = Server::new(4_096, Over::Reject);
    let compactor = Compactor::new(ModelRef::new(server.clone(), "local"))
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(
            CompactorConfig::new()
                .with_keep_tokens(2_000)
                .with_compaction_strategy(CompactionStrategy::Tiered),
        );
    let mut d = Driver::new(compactor, MemoryLog::memory(), Default::default())
        .with_system(AGENT)
        .with_max_output_tokens(512);
    let call = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text("Building it."),
            ContentBlock::tool_use(
                "call_build",
                "bash",
                serde_json::json!({"command": "cargo build 2>&1"}),
            ),
        ],
    );
    d.append(vec![Message::user_text("Build the workspace."), call])
        .await
        .unwrap();
    let mut log = String::new();
    let mut n = 0;
    while log.len() < 2_000_000 {
        n += 1;
        log.push_str(&format!(
            "[{n:07}] Compiling crate-{} v0.{}.{} (/src/crates/crate-{}/src/lib.rs:{})\n",
            n % 997,
            n % 13,
            n % 7,
            n % 997,
            n % 400
        ));
    }
    let bytes = log.len();
    let result = Message::new(
        Role::User,
        vec![ContentBlock::tool_result("call_build", log, false)],
    );
    let reply = d.send(vec![result], &mut |_| {}).await.unwrap();
    let report = reply.compaction.expect("the overflow compacted");
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|s| !s.compaction), "{seen:?}");
    assert_eq!(report.cleared.len(), 1, "{:?}", report.cleared);
    assert_eq!(report.cleared[0].id, "call_build");
    assert_eq!(report.cleared[0].bytes, bytes);
    // The copy: the head of the result and the note, under the same call id, after its call.
    let context = d.context();
    assert!(validate(&context.messages).is_empty());
    let cut = context
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|b| match b {
            ContentBlock::ToolResult(r) if r.tool_use_id == "call_build" => Some(r),
            _ => None,
        })
        .expect("the result");
    let text = cut.content.text();
    assert!(
        text.starts_with("[0000001] Compiling crate-1"),
        "{}",
        &text[..80]
    );
    assert!(text.len() < 4_096 * 4 / 8 + 400, "{}", text.len());
    let note = text.lines().last().unwrap();
    assert!(note.starts_with(panto_model::CUT_PREFIX), "{note}");
    assert!(
        note.contains(&format!("{bytes} bytes")) && note.contains("id call_build"),
        "{note}"
    );
    assert!(cut.extra.contains_key(panto_model::CUT));
    // The original is in the session whole.
    let whole = d.log().entries().iter().any(|e| match e {
        Entry::Message(m) => m.content.iter().any(|b| match b {
            ContentBlock::ToolResult(r) => r.content.text().len() == bytes,
            _ => false,
        }),
        _ => false,
    });
    assert!(whole);
}
