//! Small windows with thinking inside a tool loop (issue 39: each capability with the others
//! on): a conversation whose every call carries signed thinking overflows a window that states
//! no limit and counts the output, and the fold finds the window by refusals. Thinking is
//! rendered in the transcript, so the turns' parts and their leads differ from a conversation
//! without it; the overflow still ends answered within the issue's request bound.

use std::sync::Arc;

use panto_compact::testing::sized_conversation;
use panto_compact::{
    CompactError, Compactor, Driver, MemoryLog, MemoryStore, ModelRef, RECORD_ONLY_MODEL, Reply,
};
use panto_model::{ContentBlock, Entry, Message, Role, ThinkingBlock};

use crate::block_on;
use crate::smallwin::{AGENT, Server, Stating, derived_bound, describe, issue_bound};

/// `history` with signed thinking (`think N`, signature `sig-N`) first in every assistant
/// message that calls a tool.
pub(crate) fn with_thinking(mut history: Vec<Message>) -> Vec<Message> {
    for (i, m) in history.iter_mut().enumerate() {
        if m.role == Role::Assistant && calls(m) {
            let thinking = ThinkingBlock::new(format!("think {i}"), Some(format!("sig-{i}")));
            m.content.insert(0, ContentBlock::Thinking(thinking));
        }
    }
    history
}

fn calls(m: &Message) -> bool {
    m.content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse(_)))
}

/// Whether every assistant message of `messages` that calls a tool carries its thinking,
/// signed as [`with_thinking`] stored it.
pub(crate) fn every_call_keeps_its_thinking(messages: &[Message]) -> bool {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant && calls(m))
        .all(|m| {
            m.content.iter().any(|b| {
                matches!(b, ContentBlock::Thinking(t)
                    if t.signature.as_deref().is_some_and(|s| s.starts_with("sig-")))
            })
        })
}

/// A tool loop of `times` the window, with thinking in every call when `thinking`.
fn tool_loop(window: u64, times: f64, thinking: bool) -> Vec<Message> {
    let history = sized_conversation(AGENT, (window as f64 * times) as u64, window, true);
    if thinking {
        with_thinking(history)
    } else {
        history
    }
}

/// `history` sent one prompt through a server of `window` tokens that states no limit and
/// counts the output, the reply budget a `share` of the window, auto-compaction on (the CLI's
/// default threshold).
fn send(
    history: Vec<Message>,
    window: u64,
    share: u64,
) -> (
    Arc<Server>,
    Driver<MemoryStore>,
    Result<Reply, CompactError>,
) {
    let log = MemoryLog::with_entries(history.into_iter().map(Entry::Message).collect());
    let ctx = log.replay();
    let mut server = Server::new(window, Stating::Unstated, true);
    server.reply_share = Some(share);
    let server = Arc::new(server);
    let compactor = Compactor::new(ModelRef::new(server.clone(), "m"));
    let mut driver = Driver::new(compactor, log, ctx)
        .with_system(AGENT)
        .with_max_output_tokens(u32::try_from(window / share).unwrap())
        .with_auto_compact(Some(0.8));
    let prompt = Message::user_text("now fix the last one");
    let result = block_on(driver.send(vec![prompt], &mut |_| {}));
    (server, driver, result)
}

/// A window of 1,100 tokens: the first compaction request (2,115 + 264) is refused, and the
/// limit falls to the least a fold can work in (1,159). The parts left are cut again for the
/// smaller requests, and the leads of the cut parts, measured again, took 2 tokens more than
/// that least was set for: the plan found no room, and the fold went back to whole turns,
/// whose first request carried 13 tokens of transcript (457 + 256) beside a turn of 412 that
/// did not fit. The try above it was refused, the fold climbed from 471 + 64: 11 requests for
/// the issue's 10. The limit now goes up to the least of the parts as cut (as it never goes
/// below the least): 783 + 256 is taken, 10 requests for 10. Over the probe's 972 such cases
/// (windows 1,100 to 3,193 tokens, 2.3 to 3.4 times the window, a half or a quarter of it
/// for the reply), 140 went over the issue's bound before, 4 since.
#[test]
fn a_cut_whose_leads_pass_the_least_limit_raises_the_limit_instead_of_going_back_to_whole_turns() {
    let (server, driver, result) = send(tool_loop(1_100, 2.3, true), 1_100, 2);
    let seen = server.seen();
    let describe = describe(&seen);
    assert_eq!(
        result.as_ref().map(|r| r.message.text()).ok().as_deref(),
        Some("the reply"),
        "{describe}: {result:?}"
    );
    let issue = issue_bound(seen[0].input, 1_100, Stating::Unstated);
    assert!(
        seen.len() <= issue,
        "{} for {issue}: {describe}",
        seen.len()
    );
    // The first compaction request taken carries a step's worth of transcript, not a sliver.
    let taken = seen.iter().find(|s| s.compaction && s.fits).unwrap();
    assert!(taken.transcript > 200, "{describe}");
    assert!(every_call_keeps_its_thinking(&driver.context().messages));
}

/// The loops over windows from 1,100 to 3,193 tokens (steps of 13), 2.3, 2.9 and 3.4 times
/// the window, the reply a half or a quarter of it: 972 cases, each answered, the thinking of
/// every call kept verbatim sent signed, within the bound derived from what the fold learned.
/// Within the issue's bound but for 4 (windows of 1,945 and 2,400 tokens, 2.9 times: a try
/// above what was taken refused by 124 and 2 tokens, 12 requests for 11, the conflict of
/// docs/compaction.md's search after refusals); 140 before the limit went up to the least of
/// the parts cut again. The same loops without thinking: 0 over (4 before).
/// `PROBE_NO_THINKING` runs them without thinking, `PROBE_WINDOW` one window with its requests.
#[test]
fn thinking_tool_loops_over_small_windows_end_answered_within_the_bound() {
    let only: Option<u64> = std::env::var("PROBE_WINDOW")
        .ok()
        .and_then(|s| s.parse().ok());
    let thinking = std::env::var("PROBE_NO_THINKING").is_err();
    let (mut over, mut broken) = (Vec::new(), Vec::new());
    for window in (1_100u64..=3_193).step_by(13) {
        if only.is_some_and(|w| w != window) {
            continue;
        }
        for times in [2.3, 2.9, 3.4] {
            for share in [2u64, 4] {
                let history = tool_loop(window, times, thinking);
                let (server, driver, result) = send(history, window, share);
                let seen = server.seen();
                let issue = issue_bound(seen[0].input, window, Stating::Unstated);
                let (most, _, _) = derived_bound(&server, &seen);
                let line = format!(
                    "w={window} x{times} share={share}: {} for {issue} (derived {most}): {}",
                    seen.len(),
                    describe(&seen)
                );
                if only.is_some() {
                    eprintln!("{line}");
                }
                let answered = result
                    .as_ref()
                    .is_ok_and(|r| r.message.text() == "the reply");
                let kept = every_call_keeps_its_thinking(&driver.context().messages);
                if !answered || !kept || seen.len() > most {
                    broken.push(format!("{line}: answered {answered}, thinking kept {kept}"));
                }
                if seen.len() > issue {
                    over.push(line);
                }
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    assert!(
        over.len() <= 4,
        "{} over the issue's bound: {over:#?}",
        over.len()
    );
}

/// The search after refusals used with the rest (issue 39: each capability with the others
/// on): a window of 1,044 tokens that states no limit and counts the output, a tool loop whose
/// every call carries signed thinking, the session in SQLite, auto-compaction on (the CLI's
/// default share), and two sends. The first overflows and folds after three refusals; the second,
/// a long prompt, is answered without compacting again (auto-compaction stays inert: the window
/// the driver knows is the bound below the refused request, as for any window that states no
/// limit). Each prompt is stored once, each send is answered within the bound derived from what
/// it learned and within the issue's, the entry keeps the model's summary, and the thinking of every call kept
/// verbatim goes out signed as it was stored.
#[tokio::test(flavor = "multi_thread")]
async fn an_unstated_window_found_by_refusals_holds_with_thinking_in_sqlite_and_auto_compaction_on()
{
    use panto_compact::SessionLog;
    use panto_store_sqlite::SqliteStore;

    let window = 1_044;
    let history = with_thinking(sized_conversation(AGENT, window * 5 / 2, window, true));
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.sqlite3"))
        .await
        .unwrap();
    let (mut log, _) = SessionLog::open(store.clone(), "s").await.unwrap();
    let entries: Vec<Entry> = history.into_iter().map(Entry::Message).collect();
    log.append(&entries).await.unwrap();

    let mut server = Server::new(window, Stating::Unstated, true);
    server.reply_share = Some(4);
    let server = Arc::new(server);
    let compactor = Compactor::new(ModelRef::new(server.clone(), "m"));
    let (driver, _) = Driver::open(compactor, store.clone(), "s").await.unwrap();
    let mut driver = driver
        .with_system(AGENT)
        .with_max_output_tokens(u32::try_from(window / 4).unwrap())
        .with_auto_compact(Some(0.8));
    // The second prompt is long: with the summary and the kept turns it takes most of the
    // window.
    let long = format!(
        "and run the tests again:{}",
        " the suite prints one line a test".repeat(45)
    );
    let prompts = ["now fix the last one", long.as_str()];
    for (n, prompt) in prompts.into_iter().enumerate() {
        let before = server.seen().len();
        let reply = driver
            .send(vec![Message::user_text(prompt)], &mut |_| {})
            .await;
        let seen = server.seen()[before..].to_vec();
        let describe = describe(&seen);
        assert_eq!(
            reply.as_ref().map(|r| r.message.text()).ok().as_deref(),
            Some("the reply"),
            "send {n}: {describe}: {reply:?}"
        );
        // Within the bound derived from what the fold learned, as the sweep holds a window
        // that states no limit, and within the issue's own (11 for the first send). A try
        // above the first request taken is refused (939 + 256) and the fold climbs back from
        // 492 + 64; its last steps then left 832 + 97, 832 + 97 and a sliver (369 + 560): 12
        // requests at `81649d7` (and `f75d9f2`), until the try counted the parts left packed
        // whole (`e839885`: 907 + 106, 916 + 106, then 728 + 294). Since the limit goes up to
        // the least of the parts cut again (`thinking_loops`), the first request taken carries
        // a step (783 + 256, not 457 + 256 with a sliver of transcript); two tries above it
        // are refused (1,255 + 256, then 987 + 119 after 837 + 95 was taken), and three steps
        // at what was taken end the fold: 11 requests still.
        let (most, _, room) = derived_bound(&server, &seen);
        assert!(
            seen.len() <= most,
            "send {n}: {} for {most} (room {room}): {describe}",
            seen.len()
        );
        let issue = issue_bound(seen[0].input, window, Stating::Unstated);
        assert!(
            seen.len() <= issue,
            "send {n}: {} for the issue's {issue}: {describe}",
            seen.len()
        );
        if n == 0 {
            assert_eq!(
                seen.iter().filter(|s| s.compaction && !s.fits).count(),
                3,
                "{describe}"
            );
        }
        // What was sent last (the retry, or the request after compacting ahead) is the
        // driver's context: every call kept verbatim carries its thinking, signed as stored.
        assert!(
            every_call_keeps_its_thinking(&driver.context().messages),
            "send {n}: a kept call lost its thinking"
        );
    }
    // The store holds what the driver holds: each prompt once, the entries' model summaries.
    let loaded = SessionLog::open(store, "s").await.unwrap().1;
    let texts: Vec<String> = loaded.context.messages.iter().map(Message::text).collect();
    for prompt in prompts {
        assert_eq!(
            texts.iter().filter(|t| t.as_str() == prompt).count(),
            1,
            "{prompt}"
        );
    }
    let entry = loaded.context.compaction.expect("a compaction entry");
    assert_ne!(entry.model.as_deref(), Some(RECORD_ONLY_MODEL));
    assert!(entry.summary.contains("Summary"), "{}", entry.summary);
}
