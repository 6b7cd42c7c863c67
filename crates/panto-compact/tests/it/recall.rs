//! The driver's recall: the index it keeps answers what the store's recall answers, after its
//! own appends, a compaction and another writer's appends; and its recall tool round trip.

use panto_compact::{CompactRun, Driver, MemoryLog, RECALL_TOOL, RecallQuery, Store};
use panto_model::{CompactionEntry, ContentBlock, Entry, Message, Role};
use serde_json::json;

use crate::{block_on, compactor, log_of, model, rounds, short_prompt};

const QUERIES: &[&str] = &[
    "file 3",
    "r2-2",
    "contents",
    "src/tool4.rs",
    "\"done with file\"",
];

/// Checks that the driver's recall and fetch give the store's answers.
async fn same_as_store(driver: &Driver<panto_compact::MemoryStore>) {
    let log = driver.log();
    for q in QUERIES {
        let query = RecallQuery::new(*q).with_limit(10);
        assert_eq!(
            driver.recall(&query).await.unwrap(),
            log.store().recall(log.session(), &query).await.unwrap(),
            "{q}"
        );
    }
    for id in ["tool2", "h3", "h5#0"] {
        assert_eq!(
            driver.fetch(id, 1).await.unwrap(),
            log.store().fetch(log.session(), id, 1).await.unwrap(),
            "{id}"
        );
    }
}

#[test]
fn the_driver_s_index_answers_as_the_store_does() {
    block_on(async {
        let (provider, active) = model("p", "m");
        let log: MemoryLog = log_of(&rounds(0, 6));
        let context = log.replay();
        let mut driver = Driver::new(
            compactor(active, 300).with_prompt(short_prompt()),
            log,
            context,
        )
        .with_recall_tool();
        same_as_store(&driver).await;
        provider.push_text("The user read files 0 to 5.");
        driver
            .compact_with(CompactRun::manual(None).with_force(true))
            .await
            .unwrap();
        same_as_store(&driver).await;
        // What the compaction summarized is found; what it kept is not.
        let found = driver.recall(&RecallQuery::new("r1-2")).await.unwrap();
        assert_eq!(found.hits[0].id, "tool1");
        assert!(found.hits[0].summarized_by.is_some());
        // Another writer appends: the driver reads only what is new, once it has caught up.
        let store = driver.log().store().clone();
        let head = store.head(driver.log().session()).await.unwrap();
        let more: Vec<Entry> = rounds(6, 8).into_iter().map(Entry::Message).collect();
        store
            .append(driver.log().session(), head, &more)
            .await
            .unwrap();
        driver.reload().await.unwrap();
        same_as_store(&driver).await;
        // The tool, answered from the index.
        let reply = Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                "c1",
                RECALL_TOOL,
                json!({"query": "contents of file 2"}),
            )],
        );
        let answers = driver.answer_recall(&reply).await;
        assert_eq!(answers.len(), 1);
        assert!(
            answers[0].1.text.contains("[tool2]"),
            "{}",
            answers[0].1.text
        );
        assert!(!answers[0].1.is_error);
        let fetch = Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                "c2",
                RECALL_TOOL,
                json!({"id": "tool2"}),
            )],
        );
        let answers = driver.answer_recall(&fetch).await;
        assert!(
            answers[0].1.text.contains("r2-2 contents of file 2"),
            "{}",
            answers[0].1.text
        );
        let bad = Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use("c3", RECALL_TOOL, json!({}))],
        );
        assert!(driver.answer_recall(&bad).await[0].1.is_error);
    });
}

#[test]
fn the_tool_shows_the_region_of_a_big_output_that_matched_as_large_as_its_room() {
    block_on(async {
        // A config dump of 1,000 lines; the asked key's value sits 150 characters after the
        // words that find it, past what a 240-character snippet shows before its end.
        let mut dump = String::new();
        for i in 0..1_000 {
            dump.push_str(&format!("setting_{i}: value number {i}\n"));
        }
        let at = dump.find("setting_520").unwrap();
        dump.insert_str(
            at,
            &format!(
                "# retry policy for the upstream pool {}\nretry_backoff_ms: 4711\n",
                "of the gateway service ".repeat(6)
            ),
        );
        let result = Message::new(
            Role::User,
            vec![ContentBlock::tool_result("cat1", dump, false)],
        );
        // A compaction summarized both: recall searches them.
        let log = MemoryLog::with_entries(vec![
            Entry::Message(Message::user_text("show me the gateway config").with_id("h1")),
            Entry::Message(result.with_id("h2")),
            Entry::Compaction(CompactionEntry::new("The gateway config was read.").with_id("c1")),
        ]);
        let found = log
            .store()
            .recall(
                log.session(),
                &RecallQuery::new("retry policy upstream pool"),
            )
            .await
            .unwrap();
        let snippet = &found.hits[0].snippet;
        assert!(snippet.contains("retry policy"), "{snippet}");
        assert!(
            !snippet.contains("4711"),
            "the snippet is too short: {snippet}"
        );
        let answer = panto_compact::answer_recall(
            log.store(),
            log.session(),
            &json!({"query": "retry policy upstream pool", "limit": 1}),
        )
        .await;
        assert!(
            answer.text.contains("retry_backoff_ms: 4711"),
            "{}",
            answer.text
        );
        assert!(answer.text.contains("retry policy"), "{}", answer.text);
        assert!(answer.text.chars().count() <= panto_compact::RECALL_ANSWER_CHARS);
        assert!(
            !answer.text.contains("setting_100:") && !answer.text.contains("setting_900:"),
            "around the match: {}",
            answer.text
        );
    });
}

/// A session whose summarized part has an assistant's words with the call they made, its
/// result, and a second call whose result failed.
fn calls_log() -> MemoryLog {
    let said = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text("Let me look at the retry budget in the scheduler."),
            ContentBlock::tool_use(
                "t1",
                "bash",
                json!({"command": "grep -n \"retry\" src/sched.rs | head -3"}),
            ),
        ],
    );
    let found = Message::new(
        Role::User,
        vec![ContentBlock::tool_result(
            "t1",
            "src/sched.rs:14: const RETRIES: u32 = 7;\nsrc/sched.rs:40: retry(job)",
            false,
        )],
    );
    let run = Message::new(
        Role::Assistant,
        vec![ContentBlock::tool_use(
            "t2",
            "bash",
            json!({"command": "cargo test -p sched overnight_backfill"}),
        )],
    );
    let failed = Message::new(
        Role::User,
        vec![ContentBlock::tool_result(
            "t2",
            "running 3 tests\ntest backfill ... FAILED\npanicked at 'quota exhausted'",
            true,
        )],
    );
    MemoryLog::with_entries(vec![
        Entry::Message(Message::user_text("fix the flaky scheduler").with_id("h1")),
        Entry::Message(said.with_id("h2")),
        Entry::Message(found.with_id("h3")),
        Entry::Message(run.with_id("h4")),
        Entry::Message(failed.with_id("h5")),
        Entry::Compaction(CompactionEntry::new("The scheduler was examined.").with_id("c1")),
    ])
}

/// The recall tool's answer to `query` with one hit, in `log`'s store and through a driver.
async fn tool_answer(log: MemoryLog, query: &str) -> String {
    let input = json!({"query": query, "limit": 1});
    let by_store = panto_compact::answer_recall(log.store(), log.session(), &input).await;
    let (_, active) = model("p", "m");
    let context = log.replay();
    let driver = Driver::new(compactor(active, 300), log, context);
    let reply = Message::new(
        Role::Assistant,
        vec![ContentBlock::tool_use("c1", RECALL_TOOL, input)],
    );
    let by_driver = driver.answer_recall(&reply).await.remove(0).1;
    assert_eq!(
        by_store.text, by_driver.text,
        "the driver answers as the store"
    );
    by_store.text
}

#[test]
fn a_hit_on_the_assistant_s_words_shows_the_call_they_made() {
    block_on(async {
        let text = tool_answer(calls_log(), "retry budget scheduler").await;
        assert!(text.contains("[h2#0] assistant"), "{text}");
        assert!(
            text.contains(
                "[h2#1] tool call of bash: bash\ncommand: grep -n \"retry\" src/sched.rs | head -3"
            ),
            "{text}"
        );
    });
}

#[test]
fn a_hit_on_a_tool_result_shows_its_command() {
    block_on(async {
        let text = tool_answer(calls_log(), "RETRIES const").await;
        assert!(text.contains("[t1] tool result of bash"), "{text}");
        assert!(
            text.contains("command: grep -n \"retry\" src/sched.rs | head -3"),
            "the command, unescaped: {text}"
        );
    });
}

#[test]
fn a_hit_on_a_call_shows_the_head_of_its_result() {
    block_on(async {
        let text = tool_answer(calls_log(), "overnight_backfill").await;
        assert!(text.contains("[h4#0] tool call of bash"), "{text}");
        assert!(
            text.contains("[t2] tool result of bash, failed:\nrunning 3 tests"),
            "{text}"
        );
    });
}

#[test]
fn a_hit_on_a_call_shows_its_result_s_error_lines_past_its_head() {
    block_on(async {
        let mut out: Vec<String> = (0..300).map(|i| format!("compiling crate_{i}")).collect();
        out[250] = "error[E0425]: cannot find value `budget` in this scope".to_owned();
        let log = MemoryLog::with_entries(vec![
            Entry::Message(
                Message::new(
                    Role::Assistant,
                    vec![ContentBlock::tool_use(
                        "b1",
                        "bash",
                        json!({"command": "cargo build --workspace"}),
                    )],
                )
                .with_id("h1"),
            ),
            Entry::Message(
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result("b1", out.join("\n"), true)],
                )
                .with_id("h2"),
            ),
            Entry::Compaction(CompactionEntry::new("The build failed.").with_id("c1")),
        ]);
        let text = tool_answer(log, "cargo build workspace").await;
        assert!(text.contains("[h1#0] tool call of bash"), "{text}");
        assert!(text.contains("compiling crate_0"), "the head: {text}");
        assert!(
            text.contains("error[E0425]: cannot find value `budget` in this scope"),
            "{text}"
        );
    });
}

#[test]
fn short_hits_leave_their_room_to_a_long_one() {
    block_on(async {
        // Two short hits and one long dump: the dump's passage gets what the short ones leave,
        // more than a third of the answer.
        let dump: String = (0..400)
            .map(|i| format!("queue_depth sample {i}: {}\n", i * 7))
            .collect();
        let log = MemoryLog::with_entries(vec![
            Entry::Message(Message::user_text("queue depth is fine").with_id("h1")),
            Entry::Message(Message::assistant_text("queue depth looks fine").with_id("h2")),
            Entry::Message(
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result("d1", dump, false)],
                )
                .with_id("h3"),
            ),
            Entry::Compaction(CompactionEntry::new("Queue depth was sampled.").with_id("c1")),
        ]);
        let answer = panto_compact::answer_recall(
            log.store(),
            log.session(),
            &json!({"query": "queue depth", "limit": 3}),
        )
        .await;
        let text = answer.text;
        assert!(text.contains("[d1]"), "{text}");
        let dump_part = &text[text.find("[d1]").unwrap()..];
        let lines = dump_part
            .lines()
            .filter(|l| l.starts_with("queue_depth"))
            .count();
        assert!(
            lines * 28 > panto_compact::RECALL_ANSWER_CHARS / 2,
            "{lines} lines: {text}"
        );
        assert!(text.chars().count() <= panto_compact::RECALL_ANSWER_CHARS);
    });
}
