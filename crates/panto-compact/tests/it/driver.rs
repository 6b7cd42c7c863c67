//! Overflow recovery through the conversation driver: compact once, retry once, and every way
//! that can end.

use panto_compact::testing::{overflow, reply, server_error};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use panto_compact::store::{Page, Record};
use panto_compact::{
    CompactError, CompactOutcome, CompactionEvent, Driver, Head, Loaded, MemoryLog, MemoryStore,
    ReasoningEffort, RequestOptions, SessionLog, Store, StoreError, async_trait,
};
use panto_model::{Entry, Message, Trigger, Usage};
use panto_provider::{PromptCache, ProviderError, StreamEvent, TokenNumbers};
use panto_transcript::strip_ledger;

use crate::*;

const SYSTEM: &str = "You are a careful coding agent.";

/// A store that accepts `allowed` appends, then refuses every other one.
struct RefuseAfter {
    store: MemoryStore,
    allowed: AtomicUsize,
}

#[async_trait]
impl Store for RefuseAfter {
    fn location(&self) -> String {
        self.store.location()
    }
    async fn load(&self, session: &str) -> Result<Loaded, StoreError> {
        self.store.load(session).await
    }
    async fn head(&self, session: &str) -> Result<Head, StoreError> {
        self.store.head(session).await
    }
    async fn append_records(
        &self,
        session: &str,
        at: Head,
        records: &[Record],
    ) -> Result<Head, StoreError> {
        let left = self.allowed.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::unavailable(session, "the disk is full"));
        }
        self.allowed.store(left - 1, Ordering::SeqCst);
        self.store.append_records(session, at, records).await
    }
    async fn read(&self, session: &str, from: Head, max: usize) -> Result<Page, StoreError> {
        self.store.read(session, from, max).await
    }
    async fn list(&self) -> Result<Vec<String>, StoreError> {
        self.store.list().await
    }
}

fn driver(messages: &[Message], active: ModelRef, keep: u64) -> Driver<MemoryStore> {
    let log = log_of(messages);
    let ctx = log.replay();
    // The scripted overflows report small windows, which the built-in prompt alone exceeds.
    Driver::new(
        compactor(active, keep).with_prompt(short_prompt()),
        log,
        ctx,
    )
    .with_system(SYSTEM)
}

fn entry_messages(log: &MemoryLog) -> Vec<Message> {
    log.entries()
        .iter()
        .filter_map(|e| match e {
            Entry::Message(m) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_reply_is_appended_after_the_prompt_and_streamed() {
    let (p, active) = model("main", "big");
    p.push_text("hello back");
    let mut d = driver(&rounds(0, 1), active, 300);
    let mut streamed = String::new();
    let mut sink = |e: StreamEvent<'_>| {
        if let StreamEvent::Text(t) = e {
            streamed.push_str(t);
        }
    };
    let r = d.send(vec![user("hello")], &mut sink).await.unwrap();
    assert_eq!(streamed, "hello back");
    assert_eq!(r.message.text(), "hello back");
    assert!(r.compaction.is_none());
    assert!(r.message.id.is_some());
    let req = &p.requests()[0];
    assert_eq!(req.system, SYSTEM);
    assert_eq!(req.messages.last().unwrap().text(), "hello");
    let logged = entry_messages(d.log());
    assert_eq!(logged.len(), 6);
    assert_eq!(logged[4].text(), "hello");
    assert_eq!(logged[5], r.message);
    assert_eq!(d.log().replay().messages, d.context().messages);
}

#[tokio::test]
async fn request_options_reach_the_conversation_requests_and_the_retry_but_not_the_compaction() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push_text("the answer");
    let options = RequestOptions::default()
        .with_temperature(0.2)
        .with_reasoning_effort(ReasoningEffort::Low);
    let mut d = driver(&rounds(0, 3), active, 20_000).with_request_options(options.clone());
    d.send(vec![user("r9-0 new question")], &mut |_| {})
        .await
        .unwrap();
    let requests = p.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].options, options);
    // The summary is asked for with the provider's defaults, and writes nothing to the cache
    // (its prompt is read once).
    assert_eq!(
        requests[1].options,
        RequestOptions::default().with_cache(PromptCache::off())
    );
    // The retry's context leads with the compaction, marked stable for the cache.
    let stable = options
        .clone()
        .with_cache(PromptCache::new().with_stable_messages(1));
    assert_eq!(requests[2].options, stable);
}

#[tokio::test]
async fn a_non_overflow_error_passes_through_without_compaction_and_keeps_the_prompt() {
    let (p, active) = model("main", "big");
    p.push(Err(server_error()));
    p.push_text("must not be asked");
    let mut d = driver(&rounds(0, 3), active, 300);
    let err = d
        .send(vec![user("new question")], &mut |_| {})
        .await
        .unwrap_err();
    let CompactError::Provider(e) = err else {
        panic!("expected the provider error untouched")
    };
    assert_eq!(e, server_error());
    assert_eq!(p.calls(), 1);
    // The prompt was appended before the request, so the failure did not lose it.
    let entries = d.log().entries();
    assert_eq!(entries.len(), 13);
    assert!(matches!(entries.last(), Some(Entry::Message(m)) if m.text() == "new question"));
    assert!(!entries.iter().any(|e| matches!(e, Entry::Compaction(_))));
}

#[tokio::test]
async fn an_overflow_compacts_once_and_retries_the_same_request_once() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push_text("the answer");
    let history = rounds(0, 3);
    let mut d = driver(&history, active, 20_000);
    let r = d
        .send(vec![user("r9-0 new question")], &mut |_| {})
        .await
        .unwrap();

    let requests = p.requests();
    assert_eq!(requests.len(), 3);
    // First the conversation, then the compaction request, then the retry.
    assert_eq!(requests[0].system, SYSTEM);
    assert_eq!(requests[0].messages.len(), 13);
    assert_eq!(requests[1].system, short_prompt().text());
    assert_eq!(requests[2].system, SYSTEM);
    assert_eq!(requests[2].model, requests[0].model);
    let retried = &requests[2].messages;
    assert_eq!(
        retried[0].compaction_summary().map(strip_ledger),
        Some("S1")
    );
    // Limit 1600 caps the budget at 400 tokens: the in-flight prompt and the two turns before.
    assert_eq!(retried.len(), 1 + 4);
    assert_eq!(strip(retried.last().unwrap()).text(), "r9-0 new question");
    let report = r.compaction.expect("the reply reports the compaction");
    assert_eq!(report.trigger, Trigger::Overflow);
    assert_eq!(report.plan.budget, 400);
    assert_eq!(r.message.text(), "the answer");

    // The log: history, prompt, compaction with its copies, reply; three appends.
    assert_eq!(d.log().appends(), 3);
    let entries = d.log().entries();
    assert!(matches!(&entries[12], Entry::Message(m) if m.text() == "r9-0 new question"));
    assert!(matches!(&entries[13], Entry::Compaction(c) if c.kept_messages == Some(4)));
    assert!(matches!(entries.last(), Some(Entry::Message(m)) if m.text() == "the answer"));
    assert_eq!(d.log().replay().messages, d.context().messages);
    assert_eq!(d.context().messages.len(), 6);
}

#[tokio::test]
async fn an_overflow_when_everything_fits_the_budget_keeps_only_the_in_flight_turn() {
    let (p, active) = model("main", "big");
    // The window is stated and large: every turn fits the budget it gives.
    p.push(Err(overflow(None, Some(10_000))));
    p.push_text("S1");
    p.push_text("ok");
    let mut d = driver(&rounds(0, 2), active, 20_000);
    let r = d.send(vec![user("again")], &mut |_| {}).await.unwrap();
    let report = r.compaction.unwrap();
    assert_eq!(report.plan.kept_turns, 1);
    assert_eq!(report.plan.budget, 0);
    assert_eq!(p.requests()[2].messages.len(), 2);
}

/// What an overflow's compaction cost is counted when it is written, whatever the retry does:
/// before, `Driver::spent` counted it only with the retry's reply, so a retry that overflowed
/// again (or a compaction once more that replaced it) left it out.
#[tokio::test]
async fn an_overflow_compaction_counts_in_what_was_spent_when_the_retry_overflows_too() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push(Ok(reply("S1").with_usage(Usage::new(900, 40))));
    p.push(Err(overflow(Some(1_650), Some(1_600))));
    let mut d = driver(&rounds(0, 3), active, 20_000);
    let err = d
        .send(vec![user("huge prompt")], &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(err, CompactError::OverflowAfterCompaction { .. }),
        "{err:?}"
    );
    let spent = d.spent();
    assert_eq!(spent.compactions.replies, 1);
    assert_eq!(spent.compactions.input_tokens, 900);
    assert_eq!(spent.replies.replies, 0);
}

/// A send of "huge prompt" whose request overflows (a limit of 1,600 stated), whose compaction
/// answers "S1", and whose retry ends with `retry` (then `then`, never asked), with a reply
/// budget of `max_output_tokens`: the driver, the provider and the error.
async fn retry_ending_with(
    retry: ProviderError,
    then: Option<&str>,
    max_output_tokens: u32,
) -> (Driver<MemoryStore>, Arc<ScriptedProvider>, CompactError) {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push(Err(retry));
    if let Some(text) = then {
        p.push_text(text);
    }
    let mut d = driver(&rounds(0, 3), active, 20_000).with_max_output_tokens(max_output_tokens);
    let err = d
        .send(vec![user("huge prompt")], &mut |_| {})
        .await
        .unwrap_err();
    (d, p, err)
}

#[tokio::test]
async fn a_retry_that_overflows_again_is_surfaced_with_the_remaining_size() {
    let (d, p, err) = retry_ending_with(
        overflow(Some(1_650), Some(1_600)),
        Some("never asked: no second compaction"),
        4_096,
    )
    .await;
    let CompactError::OverflowAfterCompaction {
        estimated_tokens,
        error,
        ..
    } = &err
    else {
        panic!("expected OverflowAfterCompaction, got {err:?}")
    };
    assert_eq!(
        *estimated_tokens,
        estimate_request(SYSTEM, &d.context().messages)
    );
    assert_eq!(
        error.token_numbers(),
        Some(TokenNumbers::new(Some(1_650), Some(1_600)))
    );
    assert!(err.input_alone_overflows() && !err.reply_room_overflows());
    assert_eq!(
        err.to_string(),
        format!(
            "the request still overflows after compaction: about {estimated_tokens} tokens remain \
             (the provider stated 1650 tokens, limit 1600); the newest turn may be too large on its own"
        )
    );
    assert_eq!(p.calls(), 3);
    assert_eq!(p.remaining(), 1);
    // The compaction stays written, the prompt too, and no reply was appended.
    let entries = d.log().entries();
    assert_eq!(
        entries
            .iter()
            .filter(|e| matches!(e, Entry::Compaction(_)))
            .count(),
        1
    );
    assert!(matches!(entries.last(), Some(Entry::Message(m)) if m.text() == "huge prompt"));
}

/// A retry whose input fits the limit the provider states but whose output room does not (a
/// reply budget half a small window): the message says so, not that the newest turn is too
/// large.
#[tokio::test]
async fn a_retry_whose_reply_room_overflows_says_it_is_the_reply_room() {
    let retry = ProviderError::ContextOverflow {
        message: "This model's maximum context length is 1600 tokens".to_owned(),
        numbers: TokenNumbers::new(Some(1_450), Some(1_600)).with_output(Some(800)),
    };
    let (_, p, err) = retry_ending_with(retry, None, 800).await;
    assert!(err.reply_room_overflows() && !err.input_alone_overflows());
    let CompactError::OverflowAfterCompaction {
        estimated_tokens, ..
    } = &err
    else {
        panic!("expected OverflowAfterCompaction, got {err:?}")
    };
    assert_eq!(
        err.to_string(),
        format!(
            "the request still overflows after compaction: about {estimated_tokens} tokens remain \
             (the provider stated 1450 tokens and 800 of output, limit 1600); the input fits, \
             the room asked for the reply does not"
        )
    );
    assert_eq!(p.calls(), 3);
}

/// A retry refused without numbers (llama.cpp's, Ollama's wording): the message cannot tell the
/// newest turn from the reply's room, and names both, with the reply budget asked for.
#[tokio::test]
async fn a_retry_refused_without_numbers_names_the_turn_and_the_reply_budget() {
    let (_, _, err) = retry_ending_with(overflow(None, None), None, 700).await;
    let CompactError::OverflowAfterCompaction {
        estimated_tokens,
        reply_tokens,
        ..
    } = &err
    else {
        panic!("expected OverflowAfterCompaction, got {err:?}")
    };
    assert_eq!(*reply_tokens, 700);
    assert!(!err.reply_room_overflows() && !err.input_alone_overflows());
    assert_eq!(
        err.to_string(),
        format!(
            "the request still overflows after compaction: about {estimated_tokens} tokens remain; \
             the newest turn may be too large on its own, or the 700 tokens asked for the reply \
             too many beside it"
        )
    );
}

#[tokio::test]
async fn a_non_overflow_error_on_the_retry_passes_through() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push(Err(server_error()));
    let mut d = driver(&rounds(0, 3), active, 20_000);
    let err = d.send(vec![user("q")], &mut |_| {}).await.unwrap_err();
    assert!(matches!(err, CompactError::Provider(e) if e == server_error()));
    assert_eq!(p.calls(), 3);
}

#[tokio::test]
async fn when_no_model_can_summarize_recovery_writes_panto_s_own_record_and_retries() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(Some(500), Some(100_000))));
    p.push(Err(server_error()));
    p.push_text("the reply");
    let mut d = driver(&rounds(0, 3), active, 20_000);
    let reply = d.send(vec![user("q")], &mut |_| {}).await.unwrap();
    assert_eq!(reply.message.text(), "the reply");
    let report = reply.compaction.expect("the record-only compaction");
    assert_eq!(report.model, panto_compact::RECORD_ONLY_MODEL);
    assert!(
        report
            .degraded
            .as_deref()
            .unwrap()
            .contains("internal error")
    );
    // The record: marked as such, with the user's requests of the summarized turns.
    assert!(
        report
            .summary
            .starts_with("No model could write this summary")
    );
    assert!(
        report.summary.contains("1. r0-0 please look at file 0"),
        "{}",
        report.summary
    );
    let entries = d.log().entries();
    let Some(Entry::Compaction(entry)) = entries
        .iter()
        .rev()
        .find(|e| matches!(e, Entry::Compaction(_)))
    else {
        panic!("a compaction entry was written")
    };
    assert_eq!(entry.extra["degraded"], true);
    assert!(entry.extra["ledger"]["requests"].is_array());
    // The retry went out with the record as the compaction block.
    let retried = &p.requests()[2].messages;
    assert!(
        retried[0]
            .compaction_summary()
            .unwrap()
            .contains("## Ledger")
    );
}

#[tokio::test]
async fn a_failed_compaction_during_recovery_carries_the_overflow_and_the_failure() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(2_000))));
    p.push(Err(server_error()));
    p.push_text("never asked");
    // The model fails and so does the append of panto's own record: nothing can be written.
    let (compactor, log, ctx) = driver(&rounds(0, 3), active, 20_000).into_parts();
    let log = SessionLog::new(
        RefuseAfter {
            store: log.store().clone(),
            allowed: AtomicUsize::new(1),
        },
        log.session(),
        log.head(),
    );
    let mut d = Driver::new(compactor, log, ctx).with_system(SYSTEM);
    let err = d.send(vec![user("q")], &mut |_| {}).await.unwrap_err();
    let CompactError::OverflowCompactionFailed {
        overflow: o,
        compaction,
    } = &err
    else {
        panic!("expected OverflowCompactionFailed, got {err:?}")
    };
    assert_eq!(*o, overflow(None, Some(2_000)));
    assert!(matches!(**compaction, CompactError::Compaction { .. }));
    assert_eq!(
        err.to_string(),
        "the request overflowed the context window (context overflow: prompt is too long (limit \
         2000)) and compaction failed: compaction with big failed: server error \
         (HTTP 500): internal error"
    );
    assert_eq!(p.calls(), 2);
    let entries = d.log().store().store.entries(d.log().session());
    assert_eq!(entries.len(), 13);
    assert!(!entries.iter().any(|e| matches!(e, Entry::Compaction(_))));
}

#[tokio::test]
async fn an_overflow_with_nothing_to_compact_is_surfaced() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, None)));
    let mut d = driver(&[], active, 20_000);
    let err = d
        .send(vec![user("a prompt far too long")], &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::OverflowNothingToCompact { .. }));
    assert_eq!(
        err.to_string(),
        "the request overflowed the context window (context overflow: prompt is too long) and \
         nothing to compact: the conversation is a single turn, which is always kept verbatim"
    );
    assert_eq!(p.calls(), 1);
    assert_eq!(d.log().entries().len(), 1);
}

#[tokio::test]
async fn a_tool_result_turn_in_flight_is_kept_with_its_call() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(2_000))));
    p.push_text("S1");
    p.push(Ok(reply("file read")));
    let mut history = rounds(0, 3);
    history.push(user("r5-0 read the config"));
    history.push(call("r5-1 reading config", "cfg"));
    let mut d = driver(&history, active, 200);
    d.send(vec![result("cfg", "r5-2 key = value")], &mut |_| {})
        .await
        .unwrap();
    let retried = &p.requests()[2].messages;
    // Budget 200: exactly the in-flight [call, result] turn fits.
    let kept: Vec<String> = retried[1..].iter().map(Message::text).collect();
    assert_eq!(kept, ["r5-1 reading config", ""]);
    assert_eq!(retried[2].tool_result_ids().collect::<Vec<_>>(), ["cfg"]);
    assert!(p.requests()[1].messages[0].text().contains("r5-0"));
}

#[tokio::test]
async fn manual_compaction_through_the_driver_updates_its_context() {
    let (p, active) = model("main", "big");
    p.push_text("S1");
    p.push_text("next answer");
    let mut d = driver(&rounds(0, 3), active, 300);
    let out = d.compact(Some("keep file names".into())).await.unwrap();
    assert!(matches!(out, CompactOutcome::Compacted(_)));
    assert_eq!(d.context().messages.len(), 4);
    assert_eq!(d.log().replay().messages, d.context().messages);
    d.send(vec![user("and now?")], &mut |_| {}).await.unwrap();
    assert_eq!(
        p.requests()[1].messages[0]
            .compaction_summary()
            .map(strip_ledger),
        Some("S1")
    );
    assert_eq!(d.log().replay().messages, d.context().messages);
}

#[tokio::test]
async fn a_prompt_appended_by_a_stale_driver_is_a_conflict_and_nothing_is_sent() {
    let (p, active) = model("main", "big");
    p.push_text("never asked");
    let mut d = driver(&rounds(0, 1), active, 300);
    // Another writer (another process, another host) appends to the same session.
    let mut other = SessionLog::new(d.log().store().clone(), d.log().session(), d.log().head());
    other
        .append(&[Entry::Message(user("theirs"))])
        .await
        .unwrap();
    let err = d.send(vec![user("mine")], &mut |_| {}).await.unwrap_err();
    let CompactError::NotStored(e) = &err else {
        panic!("expected a store conflict, got {err:?}")
    };
    assert!(e.is_conflict());
    assert_eq!(p.calls(), 0, "nothing was sent");
    assert!(d.log().conflicted());
    // The driver catches up and goes on from the session as it is now.
    d.reload().await.unwrap();
    assert_eq!(d.context().messages.last().unwrap().text(), "theirs");
    let reply = d.send(vec![user("mine")], &mut |_| {}).await.unwrap();
    assert_eq!(reply.message.text(), "never asked");
    let texts: Vec<String> = entry_messages(d.log()).iter().map(Message::text).collect();
    assert_eq!(texts[texts.len() - 3..], ["theirs", "mine", "never asked"]);
}

/// A model that, while it answers, lets another writer append to the session.
struct Racing {
    store: MemoryStore,
}

#[async_trait]
impl panto_compact::Provider for Racing {
    fn name(&self) -> &str {
        "racing"
    }

    async fn complete(
        &self,
        _request: &panto_compact::Request,
        _events: panto_compact::EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let head = self.store.head("s").await.unwrap();
        let mut other = SessionLog::new(self.store.clone(), "s", head);
        other
            .append(&[Entry::Message(user("theirs"))])
            .await
            .unwrap();
        Ok(Message::assistant_text("paid for"))
    }
}

#[tokio::test]
async fn a_reply_that_cannot_be_appended_is_handed_back_and_can_be_appended_after_a_reload() {
    let store = MemoryStore::new();
    let active = ModelRef::new(
        Arc::new(Racing {
            store: store.clone(),
        }),
        "m",
    );
    let (log, loaded) = SessionLog::open(store.clone(), "s").await.unwrap();
    let mut d = Driver::new(compactor(active, 300), log, loaded.context);
    let err = d.send(vec![user("mine")], &mut |_| {}).await.unwrap_err();
    let CompactError::ReplyNotAppended { reply, error, .. } = err else {
        panic!("expected the reply handed back, got {err:?}")
    };
    assert!(error.is_conflict());
    assert_eq!(reply.text(), "paid for");
    // The caller decides: here it catches up and keeps the answer.
    d.reload().await.unwrap();
    d.append(vec![*reply]).await.unwrap();
    let texts: Vec<String> = store
        .entries("s")
        .iter()
        .filter_map(|e| match e {
            Entry::Message(m) => Some(m.text()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["mine", "theirs", "paid for"]);
}

#[tokio::test]
async fn the_driver_hands_out_the_whole_ledger_of_its_latest_compaction() {
    let (p, active) = model("main", "big");
    let mut d = driver(&rounds(0, 4), active, 300);
    assert!(d.ledger().is_empty(), "no compaction yet");
    p.push_text("the summary");
    d.compact(None).await.unwrap();
    let ledger = d.ledger();
    // The requests of the summarized rounds, as the entry stores them.
    assert!(
        ledger.requests.iter().any(|r| r.starts_with("r0-0")),
        "{ledger:?}"
    );
    let stored = d.context().compaction.as_ref().unwrap().extra["ledger"].clone();
    assert_eq!(ledger.to_json(), stored);
}

#[tokio::test]
async fn the_driver_announces_the_retry_after_the_overflow_compaction() {
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push_text("the answer");
    let log = log_of(&rounds(0, 3));
    let ctx = log.replay();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let compactor = compactor(active, 20_000)
        .with_prompt(short_prompt())
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let mut d = Driver::new(compactor, log, ctx).with_system(SYSTEM);
    let before = d.estimate().total();
    d.send(vec![user("r9-0 new question")], &mut |_| {})
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    let finished = seen
        .iter()
        .position(|e| matches!(e, CompactionEvent::Finished(_)))
        .expect("a compaction");
    let Some(CompactionEvent::Retrying {
        estimated_tokens,
        overflowed_tokens,
    }) = seen.get(finished + 1)
    else {
        panic!("no Retrying right after Finished: {seen:?}")
    };
    assert!(*overflowed_tokens > before && estimated_tokens < overflowed_tokens);
    assert_eq!(seen.len(), finished + 2);
}

#[tokio::test]
async fn an_overflow_compaction_that_saves_nothing_is_not_written_and_not_retried() {
    // Every message counts 100 tokens: with the budget at 0 the plan summarizes the one turn
    // before the prompt into one summary message, so the conversation cannot shrink.
    let (p, active) = model("main", "big");
    p.push(Err(overflow(None, Some(1_600))));
    p.push_text("S1");
    p.push_text("never asked");
    let mut d = driver(&[user("first question")], active, 0);
    let err = d
        .send(vec![user("second question")], &mut |_| {})
        .await
        .unwrap_err();
    let CompactError::OverflowCompactionFailed { compaction, .. } = &err else {
        panic!("expected OverflowCompactionFailed, got {err:?}")
    };
    assert!(
        matches!(compaction.as_ref(), CompactError::NotSmaller(_)),
        "{compaction:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("the request was too large for the model (context overflow")
            && text.contains("and compacting cannot make it smaller (the compaction would not make the conversation smaller")
            && text.ends_with("nothing was written, and the request was not sent again"),
        "{text}"
    );
    assert_eq!(p.calls(), 2);
    let entries = d.log().entries();
    assert!(!entries.iter().any(|e| matches!(e, Entry::Compaction(_))));
    assert!(matches!(entries.last(), Some(Entry::Message(m)) if m.text() == "second question"));
}
