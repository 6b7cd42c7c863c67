//! Unit tests of the binary's pure parts: the progress lines printed for compaction events, the
//! context meter, error and chat-line handling, the help layout, the terminal neutralising of
//! text, and the trust table.

use panto_compact::{CompactionEvent, CompactionReport, Plan};
use panto_model::Trigger;

use crate::ui::describe_event;

/// A plan summarizing 4 messages (3 turns) and keeping 2 (2 turns).
fn plan() -> Plan {
    Plan::new(0, 4, 6)
        .with_turns(3, 2)
        .with_tokens(900, 100, 200)
}

fn report(before: u64, after: u64, truncated: bool) -> CompactionEvent {
    let mut report = CompactionReport::new("c1", "s", Trigger::Manual, "m", "p", plan())
        .with_tokens(before, after);
    report.truncated = truncated;
    CompactionEvent::Finished(Box::new(report))
}

#[test]
fn a_compaction_line_says_before_and_after() {
    assert_eq!(
        describe_event(&report(1000, 300, false)),
        "panto: compacted with m: conversation about 1000 -> 300 tokens (4 messages summarized, 2 kept)"
    );
}

#[test]
fn the_start_of_a_compaction_counts_messages_and_says_what_its_size_measures() {
    let started = CompactionEvent::Started {
        trigger: Trigger::Overflow,
        model: "m".into(),
        plan: plan(),
        tokens_before: 1000,
    };
    assert_eq!(
        describe_event(&started),
        "panto: compacting (overflow) with m: summarizing 4 messages, keeping 2; conversation about 1000 tokens"
    );
}

#[test]
fn a_failed_compaction_has_no_line_of_its_own_because_its_error_is_printed_once() {
    let failed = CompactionEvent::Failed {
        trigger: Trigger::Manual,
        fallback: false,
        plan: plan(),
        tokens_before: 1000,
        error: "server error".into(),
    };
    assert_eq!(describe_event(&failed), "");
}

#[test]
fn the_meter_gives_the_request_just_answered_and_the_next_ones_share_of_the_window() {
    use panto_model::Usage;

    use crate::ui::describe_meter;

    let mut usage = Usage::new(5_000, 88);
    usage.cache_read_input_tokens = Some(120);
    assert_eq!(
        describe_meter(Some(Some(&usage)), 5_300, Some(128_000)),
        "panto: 5120 tokens in, 88 out; context about 5300 tokens for the next request (4% of the 128000-token window)"
    );
    assert_eq!(
        describe_meter(Some(None), 40, Some(200_000)),
        "panto: the provider reported no token counts; context about 40 tokens for the next request (<1% of the 200000-token window)"
    );
    // After `/compact` there is no reply, and without a known window there is no share.
    assert_eq!(
        describe_meter(None, 900, None),
        "panto: context about 900 tokens for the next request"
    );
}

#[test]
fn an_error_quoted_by_every_layer_that_wraps_it_is_printed_once() {
    use crate::ui::error_text;

    #[derive(Debug)]
    struct Layer(&'static str, std::io::Error);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.0, self.1)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }
    let disk_full = std::io::Error::from_raw_os_error(28);
    let os = disk_full.to_string();
    let error = anyhow::Error::new(Layer("cannot append to s.jsonl", disk_full))
        .context("could not write to the session");
    let text = error_text(&error);
    assert_eq!(text.matches(&os).count(), 1, "{text}");
    assert_eq!(
        text,
        format!("could not write to the session: cannot append to s.jsonl: {os}")
    );
}

#[test]
fn a_compaction_error_whose_causes_are_reachable_prints_each_cause_once() {
    use crate::ui::error_text;
    use panto_compact::{AttemptFailure, CompactError};
    use panto_provider::ProviderError;

    let server = || ProviderError::Server {
        status: 500,
        message: "internal error".into(),
    };
    let overflow = ProviderError::ContextOverflow {
        message: "prompt is too long".into(),
        input_tokens: Some(2_000),
        limit: Some(1_600),
    };
    let err = CompactError::OverflowCompactionFailed {
        overflow,
        compaction: Box::new(CompactError::Compaction {
            model: "big".into(),
            cause: AttemptFailure::Provider(server()),
        }),
    };
    // The chain is four deep: recovery, compaction, attempt, provider.
    let depth = std::iter::successors(std::error::Error::source(&err), |c| c.source()).count();
    assert_eq!(depth, 3);
    let text = error_text(&anyhow::Error::new(err));
    assert_eq!(text.matches(&server().to_string()).count(), 1, "{text}");
    assert_eq!(
        text,
        "the request overflowed the context window (context overflow: prompt is too long (2000 \
         tokens, limit 1600)) and compaction failed: compaction with big failed: server error \
         (HTTP 500): internal error"
    );
}

#[test]
fn a_closed_pipe_is_recognised_through_the_chain() {
    use crate::ui::is_broken_pipe;
    let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        .context("writing the context");
    assert!(is_broken_pipe(&pipe));
    let other = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
    assert!(!is_broken_pipe(&other));
}

#[test]
fn chat_lines_are_messages_or_the_commands_help_lists() {
    use crate::chat::{HELP, Line, parse_line};
    let check = |input: &str, expect: Line<'_>| assert_eq!(parse_line(input), expect, "{input:?}");
    check("  ", Line::Nothing);
    check(" hello there ", Line::Message("hello there"));
    check("//etc/hosts is odd", Line::Message("/etc/hosts is odd"));
    check("/help", Line::Help);
    check("/context", Line::Context);
    check("/summary", Line::Summary);
    check("/compact", Line::Compact(None));
    check(
        "/compact  focus on the parser ",
        Line::Compact(Some("focus on the parser")),
    );
    check("/compacted", Line::Unknown("/compacted"));
    check("/retry", Line::Retry);
    check("/quit", Line::Exit);
    check("/exit", Line::Exit);
    for command in [
        "/help", "/context", "/summary", "/compact", "/retry", "/exit",
    ] {
        assert!(
            HELP.lines().any(|l| l.starts_with(command)),
            "{command} is missing from /help"
        );
    }
}

#[test]
fn exchanges_count_the_prompts_a_person_typed() {
    use panto_model::{ContentBlock, Message, Role};

    use crate::commands::exchanges;

    let messages = vec![
        Message::compaction("earlier"),
        Message::user_text("fix the test"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use("t1", "read", serde_json::json!({}))],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result("t1", "fn main() {}", false)],
        ),
        Message::assistant_text("fixed"),
        Message::user_text("thanks"),
    ];
    assert_eq!(exchanges(&messages), 2);
    assert_eq!(exchanges(&[]), 0);
}

#[test]
fn config_says_whether_the_key_variable_is_set_and_never_more() {
    use crate::commands::key_state;
    assert_eq!(key_state(Some(("OPENAI_API_KEY", Some(true)))).0, "set");
    assert_eq!(key_state(Some(("OPENAI_API_KEY", Some(false)))).0, "empty");
    let (state, note) = key_state(Some(("GEMINI_API_KEY", None)));
    assert_eq!(state, "not set");
    assert!(note.contains("GEMINI_API_KEY"), "{note}");
    assert_eq!(key_state(None).0, "not needed");
}

#[test]
fn nothing_to_compact_is_said_without_turns() {
    use panto_compact::NothingToCompact;

    use crate::commands::nothing_text;

    for turns in 0..4 {
        let text = nothing_text(&NothingToCompact::new(turns, 120, 20_000));
        assert!(text.starts_with("nothing to compact: "), "{text}");
        assert!(!text.contains("turn"), "{text}");
    }
}

#[test]
fn help_examples_fit_80_columns_so_no_command_is_wrapped() {
    use clap::CommandFactory;

    let mut root = crate::cli::Cli::command().term_width(80);
    root.build();
    let mut helps = vec![root.render_help().to_string()];
    for sub in root.get_subcommands_mut() {
        helps.push(sub.clone().term_width(80).render_help().to_string());
    }
    for help in helps {
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            assert!(line.chars().count() <= 80, "too wide: {line:?}");
            // A command line that goes on does so with `\`, onto an indented line.
            if line.trim_start().starts_with("panto ") && i + 1 < lines.len() {
                let next = lines[i + 1];
                let fresh = next.trim().is_empty()
                    || !next.starts_with(' ')
                    || next.trim_start().starts_with("panto ")
                    || next.trim_start().starts_with("> ");
                if line.ends_with('\\') {
                    assert!(next.starts_with("      "), "{line}\n{next}");
                } else {
                    assert!(fresh, "a command wrapped in the middle:\n{line}\n{next}");
                }
            }
        }
    }
}

#[test]
fn a_compaction_that_saved_nothing_says_so() {
    assert!(describe_event(&report(117, 307, false)).ends_with("so this compaction saved nothing"));
    assert!(describe_event(&report(1000, 300, true)).ends_with("may be cut short"));
}

#[test]
fn a_fold_of_several_steps_is_announced_and_a_single_request_is_not() {
    let folding = |steps| CompactionEvent::Folding {
        steps,
        limit: Some(4_000),
        transcript_tokens: 9_000,
    };
    assert_eq!(
        describe_event(&folding(4)),
        "panto: compacting in 4 steps: about 9000 tokens of conversation to summarize, about 4000 tokens per request"
    );
    assert_eq!(describe_event(&folding(1)), "");
    let shrink = CompactionEvent::Shrinking {
        step: 2,
        limit: 3_000,
        steps: 5,
        cause: "prompt is too long".into(),
    };
    assert_eq!(
        describe_event(&shrink),
        "panto: step 2 was too large for the model (prompt is too long); retrying with requests of about 3000 tokens, 5 steps in all"
    );
}

#[test]
fn a_retry_line_says_which_when_and_why_in_few_words() {
    use std::time::Duration;

    use panto_provider::{ProviderError, RetryNotice};

    use crate::ui::describe_retry;

    let refused = ProviderError::Connection {
        message: "could not connect: error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)".into(),
    };
    assert_eq!(
        describe_retry(&RetryNotice::new(2, 3, Duration::from_secs(4), &refused)),
        "panto: retrying 2/3 in 4 s: connection failed: Connection refused (os error 111)"
    );
    let busy = ProviderError::Server {
        status: 503,
        message: "busy".into(),
    };
    assert_eq!(
        describe_retry(&RetryNotice::new(1, 3, Duration::from_millis(700), &busy)),
        "panto: retrying 1/3 in 0.7 s: server error (HTTP 503): busy"
    );
}

#[test]
fn neutralize_escapes_controls_and_bidi_overrides_but_keeps_text_newlines_and_tabs() {
    use crate::ui::neutralize;
    let check = |input: &str, expect: &str| assert_eq!(neutralize(input), expect, "{input:?}");
    check(
        "plain text, é and 漢字\n\tindented",
        "plain text, é and 漢字\n\tindented",
    );
    check("\u{1b}]52;c;ZXZpbA==\u{7}", r"\x1b]52;c;ZXZpbA==\x07");
    check("\u{1b}[2J\u{9b}31m", r"\x1b[2J\u{9b}31m");
    check("del\u{7f} nul\u{0}", r"del\x7f nul\x00");
    check(
        "abc\u{202e}txt.exe \u{2066}",
        r"abc\u{202e}txt.exe \u{2066}",
    );
    check("windows\r\nline", "windows\nline");
    check("over\rwrite", r"over\x0dwrite");
    assert!(matches!(
        neutralize("nothing to do"),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn only_the_project_layer_needs_trust_and_only_for_routing_keys() {
    use crate::config::{KEYS, Layer, Needs, may_set};
    let routing: Vec<&str> = KEYS
        .iter()
        .filter(|(_, n)| matches!(n, Needs::Trust(_)))
        .map(|(k, _)| *k)
        .collect();
    // `store` too: a repository must not choose the database your conversations go to.
    assert_eq!(
        routing,
        ["provider", "base_url", "max_response_mib", "store"]
    );
    for (key, _) in KEYS {
        for layer in [Layer::Default, Layer::UserFile, Layer::Env, Layer::Flag] {
            assert!(may_set(key, layer, false), "{key} from {layer:?}");
        }
        assert!(may_set(key, Layer::ProjectFile, true), "{key}");
        assert_eq!(
            may_set(key, Layer::ProjectFile, false),
            !routing.contains(key),
            "{key}"
        );
    }
}

#[test]
fn the_trust_table_names_every_key_a_config_file_may_hold() {
    // The parser lists the keys it accepts when it meets an unknown one.
    let err = toml::from_str::<crate::config::FileConfig>("zzz = 1").unwrap_err();
    let message = err.message().to_owned();
    let (_, expected) = message.split_once("expected one of").expect(&message);
    let accepted: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let table: Vec<&str> = crate::config::KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(accepted, table);
}

mod offline_source {
    use panto_compact::{RequestSource, SourceSummarizer};
    use panto_model::{ContentBlock, Message, Role};
    use panto_provider::Request;
    use panto_transcript::render_request;
    use serde_json::json;

    use crate::offline::{OfflineSummarizer, summarize_request};

    fn conversation() -> Vec<Message> {
        vec![
            Message::user_text("Fix the failing test in `src/parse.rs` please"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("Reading `parse_line` first."),
                    ContentBlock::tool_use("t1", "read", json!({"path": "src/parse.rs"})),
                ],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result("t1", "fn parse_line() {}", false)],
            ),
            Message::assistant_text("Fixed: `parse_line` skipped the last field."),
        ]
    }

    #[test]
    fn the_summary_from_the_source_is_the_summary_from_the_text() {
        let messages = conversation();
        for previous in [None, Some("## Goal\nAn earlier goal.")] {
            let text = render_request(&messages, previous);
            let request = Request::new(
                "offline-extractive",
                "Summarize.",
                vec![Message::user_text(text)],
                1000,
            );
            let from_text = summarize_request(&request).unwrap();
            let from_source = OfflineSummarizer::new()
                .summarize_source(&request, RequestSource::new(&messages, previous))
                .unwrap();
            assert_eq!(from_source.text(), from_text);
            assert!(from_text.contains("parse_line"), "{from_text}");
        }
    }

    #[test]
    fn a_request_that_is_not_a_compaction_is_refused_from_the_source_too() {
        let messages = conversation();
        let request = Request::new("offline-extractive", "", Vec::new(), 1000);
        let error = OfflineSummarizer::new()
            .summarize_source(&request, RequestSource::new(&messages, None))
            .unwrap_err();
        assert!(
            error.to_string().contains("exactly one user message"),
            "{error}"
        );
    }
}

/// The spans of a walk come out as the list they replaced gave them: every sighting kept, sorted
/// by item (latest first, stable), each span at its first place in that order.
#[test]
fn code_spans_are_listed_most_recent_first_as_the_full_list_gave_them() {
    use crate::offline::Spans;
    fn reference(sightings: &[(&str, usize)]) -> Vec<String> {
        let mut all: Vec<(String, usize)> = sightings
            .iter()
            .map(|(s, at)| ((*s).to_owned(), *at))
            .collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.1));
        let mut out: Vec<String> = Vec::new();
        for (span, _) in all {
            if !out.contains(&span) {
                out.push(span);
            }
        }
        out
    }
    const WORDS: [&str; 6] = ["a1", "b2", "c3", "d4", "e5", "f6"];
    // A small linear congruential sequence: many walks with repeats within and across items.
    let mut state = 7u64;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for _ in 0..500 {
        let mut sightings = Vec::new();
        let mut at = 1;
        for _ in 0..next(20) {
            at += next(3) as usize;
            sightings.push((WORDS[next(6) as usize], at));
        }
        let mut spans = Spans::default();
        for (span, at) in &sightings {
            spans.push(span, *at);
        }
        assert_eq!(
            spans.most_recent_first(),
            reference(&sightings),
            "{sightings:?}"
        );
    }
}
