//! Several writers on one session: what a conflict says was stored, and the documented
//! recovery (`Conflict`), which never stores a prompt twice, whichever append lost: the
//! prompt's, the compaction's ahead of the request, the overflow compaction's, or the reply's.

use std::sync::Arc;
use std::sync::Mutex;

use panto_compact::{
    CompactError, Compactor, CompactorConfig, Conflict, Driver, MemoryStore, ModelRef, Provider,
    ProviderError, REBASED_FIELD, Request, SessionLog, Store, Window, WindowSource, async_trait,
};
use panto_model::{Entry, Message, Role, SequentialIds};
use panto_provider::{EventSink, TokenNumbers};

use crate::{estimate_request, short_prompt};

const AGENT: &str = "You are the agent.";

/// What the other writer appends while the model answers one request.
#[derive(Clone, Debug)]
enum Meanwhile {
    /// Nothing.
    Nothing,
    /// A prompt of its own.
    Prompt(&'static str),
    /// A prompt and the reply to it (which answers every prompt before it too).
    Exchange(&'static str),
    /// A long prompt: its words, said this many times.
    Long(&'static str, usize),
}

/// A model over a shared session: while it answers request `i`, the other writer does
/// `plan[i]`. A request that states a limit above `window` tokens of text overflows.
struct Shared {
    store: MemoryStore,
    plan: Vec<Meanwhile>,
    /// Requests larger than this many bytes of messages overflow.
    overflow_bytes: usize,
    /// A window of this many tokens (panto's estimate) that counts the reply's output budget
    /// against it and says so in vLLM's words when a request does not fit, when `Some`.
    counting: Option<u64>,
    requests: Mutex<Vec<Request>>,
}

impl Shared {
    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl Provider for Shared {
    fn name(&self) -> &str {
        "shared"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let n = {
            let mut seen = self.requests.lock().unwrap();
            seen.push(request.clone());
            seen.len() - 1
        };
        let theirs = match self.plan.get(n).cloned().unwrap_or(Meanwhile::Nothing) {
            Meanwhile::Nothing => Vec::new(),
            Meanwhile::Prompt(p) => vec![Message::user_text(p)],
            Meanwhile::Long(words, n) => vec![Message::user_text(words.repeat(n))],
            Meanwhile::Exchange(p) => vec![
                Message::user_text(p),
                Message::assistant_text(format!("their answer to {p}")),
            ],
        };
        if !theirs.is_empty() {
            let head = self.store.head("s").await.unwrap();
            let mut other = SessionLog::new(self.store.clone(), "s", head);
            let entries: Vec<Entry> = theirs.into_iter().map(Entry::Message).collect();
            other.append(&entries).await.unwrap();
        }
        if request.system != AGENT {
            return Ok(Message::assistant_text("what was said before"));
        }
        if let Some(window) = self.counting {
            let input = estimate_request(&request.system, &request.messages);
            let output = u64::from(request.max_output_tokens);
            if input + output > window {
                return Err(ProviderError::ContextOverflow {
                    message: format!(
                        "This model's maximum context length is {window} tokens. However, you requested {} tokens ({input} in the messages, {output} in the completion).",
                        input + output
                    ),
                    numbers: TokenNumbers::new(Some(input), Some(window)).with_output(Some(output)),
                });
            }
        }
        let bytes: usize = request.messages.iter().map(|m| m.text().len()).sum();
        if bytes > self.overflow_bytes {
            return Err(ProviderError::ContextOverflow {
                message: "prompt is too long".into(),
                numbers: TokenNumbers::default(),
            });
        }
        Ok(Message::assistant_text("my answer"))
    }
}

/// A session of `n` long exchanges, and a driver over it with a model that follows `plan`.
async fn setup(
    n: usize,
    plan: Vec<Meanwhile>,
    overflow_bytes: usize,
) -> (Arc<Shared>, Driver<MemoryStore>) {
    let store = MemoryStore::new();
    let mut entries = Vec::new();
    for i in 0..n {
        let words = format!("exchange {i}: ") + &"the parser keeps its state. ".repeat(40);
        entries.push(Entry::Message(Message::user_text(words.clone())));
        entries.push(Entry::Message(Message::assistant_text(words)));
    }
    let (mut log, _) = SessionLog::open(store.clone(), "s").await.unwrap();
    log.append(&entries).await.unwrap();
    let shared = Arc::new(Shared {
        store: store.clone(),
        plan,
        overflow_bytes,
        counting: None,
        requests: Mutex::new(Vec::new()),
    });
    let compactor = Compactor::new(ModelRef::new(shared.clone(), "m"))
        .with_prompt(short_prompt())
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(CompactorConfig::new().with_keep_tokens(200));
    let (driver, _) = Driver::open(compactor, store, "s").await.unwrap();
    (shared, driver.with_system(AGENT))
}

/// The documented recovery (`Conflict`'s docs): until the turn is answered, send `new`
/// again only when it was not stored. Returns the conflicts met.
async fn send_until_answered(driver: &mut Driver<MemoryStore>, prompt: &str) -> Vec<Conflict> {
    let mut new = vec![Message::user_text(prompt)];
    let mut met = Vec::new();
    for _ in 0..5 {
        match driver.send(new.clone(), &mut |_| {}).await {
            Ok(_) => return met,
            Err(e) => {
                let conflict = e
                    .conflict()
                    .unwrap_or_else(|| panic!("not a conflict: {e}"));
                met.push(conflict);
                if conflict.prompt_stored() {
                    new.clear();
                }
            }
        }
        driver.reload().await.unwrap();
        if new.is_empty() && !driver.awaits_reply() {
            return met;
        }
    }
    panic!("not answered after five sends: {met:?}");
}

/// How often `text` is stored as a user message (a compaction's kept copies are copies, not
/// prompts).
async fn stored(store: &MemoryStore, text: &str) -> usize {
    store
        .entries("s")
        .iter()
        .filter(|e| {
            matches!(e, Entry::Message(m) if m.role == Role::User
            && m.text() == text
            && m.kept_by().is_none())
        })
        .count()
}

#[tokio::test]
async fn a_prompt_refused_is_not_stored_and_is_sent_again() {
    let (shared, mut driver) = setup(1, vec![], usize::MAX).await;
    let head = shared.store.head("s").await.unwrap();
    SessionLog::new(shared.store.clone(), "s", head)
        .append(&[Entry::Message(Message::user_text("theirs"))])
        .await
        .unwrap();
    let err = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::NotStored(_)), "{err:?}");
    assert_eq!(err.conflict(), Some(Conflict::NotStored));
    assert!(!Conflict::NotStored.prompt_stored());
    assert!(err.to_string().contains("not written"), "{err}");
    assert_eq!(stored(&shared.store, "mine").await, 0);
    driver.reload().await.unwrap();
    assert_eq!(send_until_answered(&mut driver, "mine").await, []);
    assert_eq!(stored(&shared.store, "mine").await, 1);
}

/// A driver over a session above its threshold, compacting ahead; the model follows `plan`.
async fn compacting_ahead(plan: Vec<Meanwhile>) -> (Arc<Shared>, Driver<MemoryStore>) {
    let (shared, driver) = setup(4, plan, usize::MAX).await;
    let driver = driver
        .with_auto_compact(Some(0.5))
        .with_window(Window::new(4_000, WindowSource::Reported));
    (shared, driver)
}

#[tokio::test]
async fn a_compaction_ahead_overtaken_by_a_prompt_is_written_after_it() {
    // The first request is the compaction ahead: the other writer's prompt lands meanwhile.
    let (shared, mut driver) = compacting_ahead(vec![Meanwhile::Prompt("theirs")]).await;
    let reply = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await
        .unwrap();
    let ahead = reply.compacted_ahead.expect("compacted ahead");
    assert_eq!(ahead.rebased, 1, "their prompt joined the kept turns");
    let entries = shared.store.entries("s");
    let Some(Entry::Compaction(entry)) = entries.iter().find(|e| matches!(e, Entry::Compaction(_)))
    else {
        panic!("no compaction written")
    };
    assert_eq!(entry.extra[REBASED_FIELD], 1);
    let requests = shared.requests();
    assert_eq!(requests.iter().filter(|r| r.system != AGENT).count(), 1);
    // The request after it answers both prompts, each once, after the summary.
    let texts: Vec<String> = requests[1].messages.iter().map(Message::text).collect();
    let summary = requests[1].messages[0]
        .compaction_summary()
        .unwrap_or_default();
    assert!(summary.starts_with("what was said before"), "{summary}");
    assert!(
        texts.ends_with(&["mine".to_owned(), "theirs".to_owned()]),
        "{texts:?}"
    );
    assert_eq!(stored(&shared.store, "mine").await, 1);
    assert_eq!(stored(&shared.store, "theirs").await, 1);
    // The session replays to what the driver holds.
    assert_eq!(
        shared.store.load("s").await.unwrap().context.messages,
        driver.context().messages
    );
}

#[tokio::test]
async fn a_compaction_ahead_overtaken_by_a_reply_is_lost_and_the_prompt_kept_once() {
    let (shared, mut driver) = compacting_ahead(vec![Meanwhile::Exchange("theirs")]).await;
    let err = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::Store(_)), "{err:?}");
    assert_eq!(err.conflict(), Some(Conflict::CompactionLost));
    assert!(err.conflict().unwrap().prompt_stored());
    driver.reload().await.unwrap();
    assert!(!driver.awaits_reply(), "their reply answered mine too");
    assert_eq!(stored(&shared.store, "mine").await, 1);
    assert_eq!(compactions(&shared.store).len(), 0);
}

#[tokio::test]
async fn the_documented_recovery_stores_the_prompt_once_when_the_compaction_ahead_loses() {
    // A reply, then a prompt of the other writer's, each while a compaction of ours is written.
    let plan = vec![Meanwhile::Exchange("theirs"), Meanwhile::Prompt("again")];
    let (shared, mut driver) = compacting_ahead(plan).await;
    let met = send_until_answered(&mut driver, "mine").await;
    // Their reply answered mine: nothing more is asked.
    assert_eq!(met, [Conflict::CompactionLost]);
    assert_eq!(stored(&shared.store, "mine").await, 1);
    assert_eq!(shared.requests().len(), 1);
}

#[tokio::test]
async fn a_lost_reply_keeps_the_prompt_once_and_is_asked_again_while_unanswered() {
    let (shared, mut driver) = setup(1, vec![Meanwhile::Prompt("theirs")], usize::MAX).await;
    let err = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.conflict(), Some(Conflict::ReplyLost));
    assert!(Conflict::ReplyLost.prompt_stored());
    driver.reload().await.unwrap();
    assert!(driver.awaits_reply(), "their prompt ends the session");
    driver.send(vec![], &mut |_| {}).await.unwrap();
    assert_eq!(stored(&shared.store, "mine").await, 1);
    assert!(!driver.awaits_reply());
}

#[tokio::test]
async fn a_prompt_another_writer_answered_is_not_asked_again() {
    let (shared, mut driver) = setup(1, vec![Meanwhile::Exchange("theirs")], usize::MAX).await;
    let met = send_until_answered(&mut driver, "mine").await;
    assert_eq!(met, [Conflict::ReplyLost]);
    assert_eq!(shared.requests().len(), 1, "their answer covered mine");
    assert_eq!(stored(&shared.store, "mine").await, 1);
}

/// A send whose first request overflows, while the overflow's compaction is written the other
/// writer does `meanwhile`.
async fn overflowing(
    meanwhile: Meanwhile,
) -> (
    Arc<Shared>,
    Driver<MemoryStore>,
    Result<panto_compact::Reply, CompactError>,
) {
    let (shared, mut driver) = setup(6, vec![Meanwhile::Nothing, meanwhile], 4_000).await;
    let sent = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await;
    (shared, driver, sent)
}

#[tokio::test]
async fn an_overflow_compaction_overtaken_by_a_reply_is_lost_and_the_prompt_kept_once() {
    let (shared, mut driver, sent) = overflowing(Meanwhile::Exchange("theirs")).await;
    let err = sent.unwrap_err();
    assert!(
        matches!(err, CompactError::OverflowCompactionFailed { .. }),
        "{err:?}"
    );
    assert_eq!(err.conflict(), Some(Conflict::CompactionLost));
    driver.reload().await.unwrap();
    assert!(!driver.awaits_reply());
    assert_eq!(stored(&shared.store, "mine").await, 1);
}

#[tokio::test]
async fn an_overflow_compaction_overtaken_by_a_prompt_is_written_after_it_and_retried() {
    let (shared, _, sent) = overflowing(Meanwhile::Prompt("theirs")).await;
    let reply = sent.unwrap();
    assert_eq!(reply.compaction.expect("compacted").rebased, 1);
    assert_eq!(stored(&shared.store, "mine").await, 1);
    let retry = shared.requests().last().unwrap().messages.clone();
    let texts: Vec<String> = retry.iter().map(Message::text).collect();
    assert!(
        texts.ends_with(&["mine".to_owned(), "theirs".to_owned()]),
        "{texts:?}"
    );
}

/// Issue 39 point 3, several writers with a window that counts the output (the bug behind
/// `shared_turns_with_thinking_learn_a_window_that_counts_the_output_on_sqlite`, one run in
/// eight): the overflow compaction sizes its kept turns to leave the retry within the limit
/// with the whole reply beside it, and another writer's long prompt, appended while the
/// summary was written, joins the kept turns after the plan (`rebase.rs`). The retry would
/// then be over the limit once the reply's room is counted; the driver compacts once more from
/// the context as written, the first summary carried on, and the retry fits and is answered.
/// The window of the tests of a window that counts the output, and the reply budget.
const COUNTING_WINDOW: u64 = 1_500;
const COUNTING_REPLY: u32 = 500;

/// A session of 30 short exchanges, and a driver over it whose model's window of
/// [`COUNTING_WINDOW`] counts the output (never told: learned from its refusal), with a reply
/// budget of [`COUNTING_REPLY`] and a keep budget of a quarter of the window, while the other
/// writer follows `plan`; and the send of `mine`.
async fn counting_send(
    plan: Vec<Meanwhile>,
) -> (
    Arc<Shared>,
    MemoryStore,
    Driver<MemoryStore>,
    Result<panto_compact::Reply, CompactError>,
) {
    let store = MemoryStore::new();
    let mut entries = Vec::new();
    for i in 0..30 {
        let words = format!("exchange {i}: ") + &"the parser keeps its state. ".repeat(7);
        entries.push(Entry::Message(Message::user_text(words.clone())));
        entries.push(Entry::Message(Message::assistant_text(words)));
    }
    let (mut log, _) = SessionLog::open(store.clone(), "s").await.unwrap();
    log.append(&entries).await.unwrap();
    let shared = Arc::new(Shared {
        store: store.clone(),
        plan,
        overflow_bytes: usize::MAX,
        counting: Some(COUNTING_WINDOW),
        requests: Mutex::new(Vec::new()),
    });
    let compactor = Compactor::new(ModelRef::new(shared.clone(), "m"))
        .with_prompt(short_prompt())
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(CompactorConfig::new().with_keep_tokens(COUNTING_WINDOW / 4));
    let (driver, _) = Driver::open(compactor, store.clone(), "s").await.unwrap();
    let mut driver = driver
        .with_system(AGENT)
        .with_max_output_tokens(COUNTING_REPLY);
    let sent = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await;
    (shared, store, driver, sent)
}

/// The compaction entries of the session, oldest first.
fn compactions(store: &MemoryStore) -> Vec<Entry> {
    store
        .entries("s")
        .into_iter()
        .filter(|e| matches!(e, Entry::Compaction(_)))
        .collect()
}

/// Checks that the session holds two compactions: the first written after the other
/// writer's prompt (which joined its kept turns), the second from it.
fn compacted_once_more(store: &MemoryStore) {
    let written = compactions(store);
    assert_eq!(written.len(), 2, "{written:?}");
    let Entry::Compaction(first) = &written[0] else {
        unreachable!()
    };
    assert_eq!(
        first.extra[REBASED_FIELD], 1,
        "their prompt joined the kept turns"
    );
}

/// The texts of the agent's last request, the retry, having checked that it fits the window
/// of [`counting_send`] with the whole reply beside it.
fn retry_texts(shared: &Shared) -> Vec<String> {
    let requests = shared.requests();
    let retry = requests.last().unwrap();
    assert_eq!(retry.system, AGENT);
    let input = estimate_request(&retry.system, &retry.messages);
    assert!(
        input + u64::from(COUNTING_REPLY) <= COUNTING_WINDOW,
        "the retry is {input} tokens with {COUNTING_REPLY} for the reply"
    );
    retry.messages.iter().map(Message::text).collect()
}

#[tokio::test]
async fn an_overflow_compaction_overtaken_by_a_long_prompt_compacts_once_more_and_the_retry_fits() {
    // While the overflow's summary is written, the other writer asks a long question.
    let theirs = "why does the parser lose its state? ";
    let plan = vec![Meanwhile::Nothing, Meanwhile::Long(theirs, 55)];
    let (shared, store, driver, sent) = counting_send(plan).await;
    let reply = sent.unwrap_or_else(|e| panic!("the send failed: {e}"));
    assert_eq!(driver.windows().counts_output, Some(true));
    compacted_once_more(&store);
    // The requests: the overflow, the first compaction's fold, the second compaction's, the
    // retry. The second summary goes on from the first (the model's work is kept, not thrown
    // away), and summarizes my prompt, which the plan had kept and their prompt now follows.
    let requests = shared.requests();
    let summaries: Vec<&Request> = requests.iter().filter(|r| r.system != AGENT).collect();
    assert!(summaries.len() >= 2, "{} summary requests", summaries.len());
    let second: String = summaries
        .last()
        .unwrap()
        .messages
        .iter()
        .map(Message::text)
        .collect();
    assert!(
        second.contains("<previous-summary>\nwhat was said before"),
        "{second}"
    );
    assert!(second.contains("[User]: mine"), "{second}");
    // The retry fits the window with the whole reply beside it, and holds both prompts.
    let texts = retry_texts(&shared);
    assert!(texts.last().unwrap().starts_with(theirs), "{texts:?}");
    assert_eq!(reply.message.text(), "my answer");
    assert_eq!(stored(&store, "mine").await, 1);
}

/// The compaction once more after an overflow compaction was overtaken, overtaken itself (the
/// failure behind about one run in twenty of
/// `shared::shared_turns_with_thinking_learn_a_window_that_counts_the_output_on_sqlite`, three
/// writers at that window: the second compaction summarized a turn of 67 tokens and took in
/// another prompt of 67, and the retry stayed at 1,050 tokens for the 1,000 the reply leaves,
/// "too large for the context window"). The driver compacts once more again, up to
/// `MAX_REBASES` times, and each of those leaves room beside its kept turns for as much again
/// as the others' latest messages took: here the third compaction is overtaken too, by a
/// prompt as long as the one before, and the retry still fits with the whole reply beside it
/// (without that room, a fourth compaction; with one compaction once more, the send failed).
#[tokio::test]
async fn a_compaction_once_more_overtaken_too_compacts_again_and_the_retry_fits() {
    let first = "why does the parser lose its state? ";
    let (second, third) = ("and where is it kept? ", "and who reads it first? ");
    // The requests: the overflow, the first compaction's four, the second's, the third's.
    let mut plan = vec![Meanwhile::Nothing; 7];
    plan[1] = Meanwhile::Long(first, 55);
    plan[5] = Meanwhile::Long(second, 45);
    plan[6] = Meanwhile::Long(third, 45);
    let (shared, store, _, sent) = counting_send(plan).await;
    let reply = sent.unwrap_or_else(|e| panic!("the send failed: {e}"));
    assert_eq!(reply.message.text(), "my answer");
    let written = compactions(&store);
    assert_eq!(written.len(), 3, "{written:?}");
    let texts = retry_texts(&shared);
    assert!(texts.last().unwrap().starts_with(third), "{texts:?}");
    assert!(texts.iter().any(|t| t.starts_with(second)), "{texts:?}");
    assert_eq!(stored(&store, "mine").await, 1);
}

/// A compaction ahead overtaken by another writer's long prompt, which joins its kept turns
/// after the plan (`rebase.rs`) and leaves the request over the window: the driver compacts
/// once more from the context as written, as an overflow's recovery does, and sends the
/// request, which fits. Before, the send failed with `ExceedsWindow`, "the newest turn is too
/// large on its own" (found with three writers whose replies carry thinking, at a window
/// stated as 750 tokens, which took in another writer's reply of 447 tokens: 771 tokens).
#[tokio::test]
async fn a_compaction_ahead_overtaken_by_a_long_prompt_compacts_once_more_and_the_request_fits() {
    // The first request is the compaction ahead: the other writer asks a long question
    // meanwhile, about 2,800 tokens, which the window of 4,000 holds beside a summary but
    // not beside the turns the compaction kept.
    let theirs = "why does the parser lose its state? ";
    let (shared, mut driver) = compacting_ahead(vec![Meanwhile::Long(theirs, 300)]).await;
    let reply = driver
        .send(vec![Message::user_text("mine")], &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the send failed: {e}"));
    assert_eq!(reply.message.text(), "my answer");
    compacted_once_more(&shared.store);
    // The request sent fits the window, after the second summary, which goes on from the
    // first, and ends with their prompt.
    let requests = shared.requests();
    let sent = requests.last().unwrap();
    assert_eq!(sent.system, AGENT);
    let tokens = estimate_request(&sent.system, &sent.messages);
    assert!(tokens <= 4_000, "the request is {tokens} tokens");
    let summaries: Vec<&Request> = requests.iter().filter(|r| r.system != AGENT).collect();
    let second: String = summaries[1].messages.iter().map(Message::text).collect();
    assert!(
        second.contains("<previous-summary>\nwhat was said before"),
        "{second}"
    );
    let texts: Vec<String> = sent.messages.iter().map(Message::text).collect();
    assert!(texts.last().unwrap().starts_with(theirs), "{texts:?}");
    assert_eq!(stored(&shared.store, "mine").await, 1);
    assert_eq!(
        shared.store.load("s").await.unwrap().context.messages,
        driver.context().messages
    );
}
