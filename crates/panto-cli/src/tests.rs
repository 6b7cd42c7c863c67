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
        "panto: compacted (m): conversation about 1000 -> 300 tokens; 4 summarized, 2 kept"
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
    // An overflow is named before the compaction that recovers from it.
    assert_eq!(
        describe_event(&started),
        "panto: the request was too large for the model: compacting, then retrying once\n\
         panto: compacting (m): summarizing 4 messages, keeping 2; conversation about 1000 tokens"
    );
    let manual = CompactionEvent::Started {
        trigger: Trigger::Manual,
        model: "m".into(),
        plan: plan(),
        tokens_before: 1000,
    };
    assert_eq!(
        describe_event(&manual),
        "panto: compacting (m): summarizing 4 messages, keeping 2; conversation about 1000 tokens"
    );
    let retrying = CompactionEvent::Retrying {
        estimated_tokens: 230,
        overflowed_tokens: 3_700,
    };
    assert_eq!(
        describe_event(&retrying),
        "panto: retrying the request: about 230 tokens now, 3700 before"
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
fn the_meter_gives_the_share_of_the_window_the_request_just_answered_and_the_model() {
    use panto_model::Usage;

    use crate::ui::{METER_WIDTH, Meter, describe_meter};

    let mut usage = Usage::new(5_000, 88);
    usage.cache_read_input_tokens = Some(120);
    let meter = |answered, next_request, window, say_unknown, model| {
        describe_meter(&Meter {
            answered,
            next_request,
            window,
            say_unknown,
            model,
            auto_compact: None,
            spent: None,
        })
    };
    assert_eq!(
        meter(Some(Some(&usage)), 5_300, Some(128_000), false, "gpt-4o"),
        "panto: context 5.3k/128k (4%); 5.1k in, 88 out; gpt-4o"
    );
    assert_eq!(
        meter(Some(None), 40, Some(200_000), false, "m"),
        "panto: context 40/200k (<1%); no token counts; m"
    );
    // After `/compact` there is no reply; an unknown window is said once, then left out.
    assert_eq!(
        meter(None, 900, None, true, "m"),
        "panto: context 900, window unknown; m"
    );
    assert_eq!(meter(None, 900, None, false, "m"), "panto: context 900; m");
    // A long model name: the counts go first, then the name is shortened; never past 60
    // columns.
    let long = meter(
        Some(Some(&usage)),
        123_456,
        Some(1_000_000),
        false,
        "claude-sonnet-4-5-20250929",
    );
    assert_eq!(
        long,
        "panto: context 123k/1M (12%); claude-sonnet-4-5-20250929"
    );
    let longer = meter(
        Some(Some(&usage)),
        999_999,
        Some(1_048_576),
        true,
        "accounts/fireworks/models/llama-v3p1-405b-instruct",
    );
    assert_eq!(longer.chars().count(), METER_WIDTH, "{longer}");
    assert!(
        longer.starts_with("panto: context 1M/1M (95%); accounts/fireworks/"),
        "{longer}"
    );
    assert!(longer.ends_with('…'), "{longer}");
    // With proactive compaction on, the share it compacts at, beside the share used.
    let ahead = describe_meter(&Meter {
        answered: Some(Some(&usage)),
        next_request: 106_000,
        window: Some(128_000),
        say_unknown: false,
        model: "gpt-4o",
        auto_compact: Some(0.8),
        spent: None,
    });
    assert_eq!(
        ahead,
        "panto: context 106k/128k (82%, compacts at 80%); gpt-4o"
    );
}

#[test]
fn the_meter_says_what_the_conversation_cost_so_far() {
    use panto_model::{Price, Prices, Usage, usage_cost};

    use crate::ui::{METER_WIDTH, Meter, describe_meter, describe_spent};

    let usage = Usage::new(200, 60)
        .with_cache_read(9_000)
        .with_cache_creation(800);
    let tokens = usage_cost(&usage, Some("claude-x"), &Prices::new());
    // 200 + 9,000 × 0.1 + 800 × 1.25 = 2,100 tokens billed; 90% of the input read.
    assert_eq!(describe_spent(&tokens).unwrap(), "2.1k billed (90% cached)");
    let prices = Prices::new().with("claude-x", Price::new(3.0, 15.0));
    let money = usage_cost(&usage, Some("claude-x"), &prices);
    // 200 × 3 + 9,000 × 0.3 + 800 × 3.75 + 60 × 15 millionths.
    assert_eq!(describe_spent(&money).unwrap(), "spent 0.0072 (90% cached)");
    assert_eq!(describe_spent(&panto_model::Cost::default()), None);
    // Without a price and without caching, the counts already say it all.
    let plain = usage_cost(&Usage::new(900, 10), Some("claude-x"), &Prices::new());
    assert_eq!(describe_spent(&plain), None);
    // On the meter the cost stays when the counts of the request just answered do not fit,
    // beside the model's name shortened, or without it when too little room is left.
    let line = describe_meter(&Meter {
        answered: Some(Some(&usage)),
        next_request: 10_100,
        window: Some(200_000),
        say_unknown: false,
        model: "claude-sonnet-4-5-20250929",
        auto_compact: None,
        spent: Some(money),
    });
    assert_eq!(
        line,
        "panto: context 10k/200k (5%); spent 0.0072 (90% cached)"
    );
    let shorter = describe_meter(&Meter {
        answered: None,
        next_request: 900,
        window: None,
        say_unknown: false,
        model: "claude-sonnet-4-5-20250929",
        auto_compact: None,
        spent: Some(tokens),
    });
    assert_eq!(shorter.chars().count(), METER_WIDTH, "{shorter}");
    assert!(
        shorter.starts_with("panto: context 900; 2.1k billed (90% cached); claude-"),
        "{shorter}"
    );
    assert!(shorter.ends_with('…'), "{shorter}");
}

#[test]
fn proactive_compaction_and_silent_truncation_are_said_in_a_persons_words() {
    use panto_compact::{CompactionEvent, Window, WindowSource};

    let ahead = CompactionEvent::CompactingAhead {
        estimated_tokens: 106_240,
        threshold_tokens: 102_400,
        window: Window::new(128_000, WindowSource::Configured),
    };
    assert_eq!(
        describe_event(&ahead),
        "panto: compacting ahead: the next request is 83% of the 128k window (about 106240 tokens; compacting above 102400)"
    );
    let skipped = CompactionEvent::AheadSkipped {
        reason: "nothing to compact: the conversation is only its newest message".into(),
        sending: true,
    };
    assert!(
        describe_event(&skipped).ends_with("sending the request as it is (it fits the window)")
    );
    assert!(describe_event(&CompactionEvent::WindowUnknown).contains("context window is unknown"));
    let sizes = panto_size::silent_truncation(
        &[
            panto_model::Message::user_text("a"),
            panto_model::Message::assistant_text("b")
                .with_usage(panto_model::Usage::new(24_000, 9)),
            panto_model::Message::user_text("c"),
        ],
        &panto_model::Message::assistant_text("d").with_usage(panto_model::Usage::new(12_564, 9)),
    )
    .unwrap();
    let cut = describe_event(&CompactionEvent::SilentTruncation {
        truncation: sizes,
        estimated_tokens: 24_020,
    });
    assert!(
        cut.starts_with(
            "panto: the server truncated the request silently: it counted 12564 input tokens"
        ),
        "{cut}"
    );
    assert!(
        cut.contains("hint: raise the server's context window (Ollama: num_ctx"),
        "{cut}"
    );
}

#[test]
fn short_counts_keep_three_significant_figures_at_most() {
    use crate::ui::short_count;
    let cases = [
        (0, "0"),
        (999, "999"),
        (1_000, "1k"),
        (3_633, "3.6k"),
        (9_949, "9.9k"),
        (9_950, "10k"),
        (128_000, "128k"),
        (999_499, "999k"),
        (999_500, "1M"),
        (1_048_576, "1M"),
        (2_500_000, "2.5M"),
    ];
    for (n, text) in cases {
        assert_eq!(short_count(n), text, "{n}");
    }
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
    use panto_provider::{ProviderError, TokenNumbers};

    let server = || ProviderError::Server {
        status: 500,
        message: "internal error".into(),
    };
    let overflow = ProviderError::ContextOverflow {
        message: "prompt is too long".into(),
        numbers: TokenNumbers::new(Some(2_000), Some(1_600)),
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
    let compact = |instructions, force| Line::Compact {
        instructions,
        force,
    };
    check("/compact", compact(None, false));
    check(
        "/compact  focus on the parser ",
        compact(Some("focus on the parser"), false),
    );
    check("/compact --force", compact(None, true));
    check(
        "/compact --force keep the test names",
        compact(Some("keep the test names"), true),
    );
    check(
        "/compact --forceful please",
        compact(Some("--forceful please"), false),
    );
    check("/compacted", Line::Unknown("/compacted"));
    check("/undo", Line::Undo);
    check("/model", Line::Model(None));
    check("/model  gpt-4o-mini ", Line::Model(Some("gpt-4o-mini")));
    check("/clear", Line::Clear);
    check("/new", Line::Clear);
    check("/retry", Line::Retry);
    check("/quit", Line::Exit);
    check("/exit", Line::Exit);
    // A bare command word is held back, not sent; a longer line is a message.
    check("clear", Line::Habit("clear"));
    check(" Exit ", Line::Habit("Exit"));
    check("clear the cache", Line::Message("clear the cache"));
    check(
        "first line\nsecond line",
        Line::Message("first line\nsecond line"),
    );
    for command in [
        "/help", "/context", "/summary", "/compact", "/undo", "/model", "/clear", "/retry", "/exit",
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

    for keep in [None, Some(20_000)] {
        let config = test_config(keep);
        for turns in 0..4 {
            let text = nothing_text(&NothingToCompact::new(turns, 120, 20_000), &config);
            assert!(text.starts_with("nothing to compact: "), "{text}");
            assert!(!text.contains("turn"), "{text}");
            // When a setting decides it, the words name the flag and the setting.
            if turns > 1 {
                assert!(text.contains("a smaller --keep-tokens"), "{text}");
            }
        }
    }
}

/// A configuration from defaults and flags only (no files), with `--keep-tokens` when given.
fn test_config(keep_tokens: Option<u64>) -> crate::config::Config {
    use crate::config::{Config, Flags, Locations};
    let locations = Locations {
        user_dir: None,
        project_dir: None,
        user_dir_from_env: false,
        start: std::path::PathBuf::from("/"),
    };
    let flags = Flags {
        keep_tokens,
        ..Flags::default()
    };
    Config::load(&locations, &flags).unwrap()
}

#[test]
fn a_mistake_in_a_config_file_is_said_in_panto_words_with_the_nearest_key() {
    use crate::config::explain_value_error;
    let unknown = "unknown field `modle`, expected one of `provider`, `model`";
    assert_eq!(
        explain_value_error(unknown, None).as_deref(),
        Some("unknown key `modle`; did you mean `model`?")
    );
    assert_eq!(
        explain_value_error("unknown field `keep_tokenz`, expected one of `model`", None)
            .as_deref(),
        Some("unknown key `keep_tokenz`; did you mean `keep_tokens`?")
    );
    let far = explain_value_error("unknown field `colour`, expected one of `model`", None).unwrap();
    assert!(
        far.starts_with("unknown key `colour`; the keys are `provider`, `model`"),
        "{far}"
    );
    assert_eq!(
        explain_value_error(
            "invalid type: string \"abc\", expected u64",
            Some("keep_tokens")
        )
        .as_deref(),
        Some("`keep_tokens` must be a whole number, like keep_tokens = 20000; it is \"abc\"")
    );
    assert_eq!(
        explain_value_error("invalid value: integer `-5`, expected u32", Some("retries"))
            .as_deref(),
        Some("`retries` must be a whole number, like retries = 3; it is -5")
    );
    assert_eq!(
        explain_value_error(
            "invalid type: integer `5`, expected a string",
            Some("model")
        )
        .as_deref(),
        Some("`model` must be text in quotes, like model = \"...\"; it is 5")
    );
    assert_eq!(
        explain_value_error(
            "unknown variant `opnai`, expected one of `anthropic`",
            Some("provider")
        )
        .as_deref(),
        Some("`provider` must be one of anthropic, openai, openai-responses, gemini, offline")
    );
    // TOML syntax is the parser's to explain.
    assert_eq!(explain_value_error("invalid string", Some("model")), None);
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
    assert!(
        describe_event(&report(117, 307, false))
            .ends_with("this compaction saves nothing, and went ahead only because it was forced")
    );
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
        "panto: compacting in 4 steps: its transcript is about 9000 tokens, about 4000 tokens per request"
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
        "panto: step 2 was too large for the model: prompt is too long\npanto: retrying with smaller requests: about 3000 tokens each by panto's estimate, 5 steps in all"
    );
    let one = CompactionEvent::Shrinking {
        step: 1,
        limit: 3_000,
        steps: 1,
        cause: "prompt is too long".into(),
    };
    assert!(describe_event(&one).ends_with(", 1 step in all"));
    let elided = |items, bytes| CompactionEvent::Elided {
        step: 3,
        items,
        bytes,
    };
    assert_eq!(
        describe_event(&elided(1, 1)),
        "panto: step 3: 1 item too large for any request was shortened in the transcript (1 byte left out; the session keeps it)"
    );
    assert_eq!(
        describe_event(&elided(2, 5_000)),
        "panto: step 3: 2 items too large for any request were shortened in the transcript (5000 bytes left out; the session keeps them)"
    );
}

#[test]
fn a_retry_line_says_which_when_and_why_in_few_words() {
    use std::time::Duration;

    use panto_provider::{ProviderError, RetryNotice};

    use crate::ui::describe_retry;

    // panto's words, without the library's cause after them.
    let refused = ProviderError::Connection {
        message: "connection refused by 127.0.0.1:9: nothing is listening there; cause: error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)".into(),
    };
    assert_eq!(
        describe_retry(&RetryNotice::new(2, 3, Duration::from_secs(4), &refused)),
        "panto: retrying 2/3 in 4 s: connection failed: connection refused by 127.0.0.1:9: nothing is listening there"
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

#[test]
fn a_library_cause_goes_on_a_line_of_its_own_after_panto_words() {
    use crate::ui::error_text;
    let e = anyhow::anyhow!(
        "connection failed: connection refused by 127.0.0.1:9: nothing is listening there; cause: tcp connect error: Connection refused (os error 111)\nhint: check that the server at http://127.0.0.1:9/v1 is running"
    );
    assert_eq!(
        error_text(&e),
        "connection failed: connection refused by 127.0.0.1:9: nothing is listening there\n\
         cause: tcp connect error: Connection refused (os error 111)\n\
         hint: check that the server at http://127.0.0.1:9/v1 is running"
    );
}

#[test]
fn a_reply_cut_short_is_said_in_plain_words_and_the_protocol_is_the_cause() {
    use panto_compact::CompactError;
    use panto_provider::ProviderError;

    use crate::commands::failure;
    use crate::ui::error_text;

    let cut = CompactError::Provider(ProviderError::MalformedResponse {
        message: "the stream ended before a finish_reason or `data: [DONE]`".into(),
    });
    assert_eq!(
        error_text(&failure(cut, &test_config(None))),
        "the connection closed before the reply finished, so nothing of it was kept\n\
         cause: malformed response: the stream ended before a finish_reason or `data: [DONE]`"
    );
    let broke = CompactError::Provider(ProviderError::Connection {
        message: format!(
            "{}{}error decoding response body",
            panto_providers::CLOSED_EARLY,
            panto_providers::CAUSE
        ),
    });
    assert_eq!(
        error_text(&failure(broke, &test_config(None))),
        "the connection closed before the reply finished, so nothing of it was kept\n\
         cause: error decoding response body"
    );
}

#[test]
fn a_new_session_is_named_after_the_old_one() {
    use crate::commands::{AnyStore, next_session_name};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store: AnyStore = std::sync::Arc::new(panto_compact::MemoryStore::new());
    runtime.block_on(async {
        assert_eq!(
            next_session_name(&store, "notes.jsonl").await.unwrap(),
            "notes-2.jsonl"
        );
        assert_eq!(
            next_session_name(&store, "dir.d/notes").await.unwrap(),
            "dir.d/notes-2"
        );
        assert_eq!(
            next_session_name(&store, "notes-2.jsonl").await.unwrap(),
            "notes-3.jsonl"
        );
        assert_eq!(
            next_session_name(&store, ".hidden").await.unwrap(),
            ".hidden-2"
        );
        // A name that holds something is skipped.
        let mut log =
            panto_compact::SessionLog::new(store.clone(), "notes-2.jsonl", Default::default());
        log.append(&[panto_model::Entry::Message(
            panto_model::Message::user_text("hi"),
        )])
        .await
        .unwrap();
        assert_eq!(
            next_session_name(&store, "notes.jsonl").await.unwrap(),
            "notes-3.jsonl"
        );
    });
}

#[test]
fn the_windows_file_keeps_one_learned_and_one_discovered_window_per_model_and_no_credential() {
    use crate::windows::{Record, WindowFile, without_credentials};

    assert_eq!(
        without_credentials("http://user:secret@127.0.0.1:8080/v1"),
        "http://127.0.0.1:8080/v1"
    );
    assert_eq!(
        without_credentials("https://host/v1/a@b"),
        "https://host/v1/a@b"
    );
    let record = |model: &str, tokens: u64, source: &str| Record {
        provider: "openai".into(),
        base_url: "http://127.0.0.1:8080/v1".into(),
        model: model.into(),
        tokens,
        source: source.into(),
        detail: String::new(),
        at: 0,
        counts_output: None,
    };
    let mut file = WindowFile::default();
    assert!(file.put(record("m", 4096, "discovered")));
    assert!(file.put(record("m", 8192, "overflow")));
    assert!(!file.put(record("m", 8192, "overflow")), "nothing changed");
    // Whether the server counts the output is kept with the learned window (and read back
    // below): learning it changes the record.
    let counting = Record {
        counts_output: Some(true),
        ..record("m", 8192, "overflow")
    };
    assert!(file.put(counting.clone()));
    assert!(!file.put(counting), "nothing changed");
    let text = toml::to_string(&file).unwrap();
    assert!(text.contains("counts_output = true"), "{text}");
    let back: WindowFile = toml::from_str(&text).unwrap();
    assert_eq!(back.windows, file.windows);
    // A bound replaces the stated limit (both are learned); the discovered one stays.
    assert!(file.put(record("m", 3000, "bound")));
    assert!(file.put(record("other", 2048, "overflow")));
    assert_eq!(file.windows.len(), 3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data/windows.toml");
    file.write(&path).unwrap();
    let back = WindowFile::read(&path).unwrap();
    assert_eq!(back.windows, file.windows);
    let mut back = back;
    let key = crate::windows::Key {
        provider: "openai".into(),
        base_url: "http://127.0.0.1:8080/v1".into(),
        model: "m".into(),
    };
    assert_eq!(back.forget(Some(&key)), 2);
    assert_eq!(back.forget(None), 1);
    assert!(back.windows.is_empty());
}

// ---------------------------------------------------------------------------------------------
// the chat's line editor and the width rules (issue 40)

mod editor {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use proptest::prelude::*;

    use crate::editor::{Action, Editor};
    use crate::fit::{fit, width, wrap_words};

    const COMMANDS: &[&str] = &["/help", "/context", "/compact", "/clear"];

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn ctrl(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
    }

    fn typed(editor: &mut Editor, text: &str) {
        for c in text.chars() {
            editor.key(key(KeyCode::Char(c)));
        }
    }

    #[test]
    fn a_long_paste_is_one_marker_sent_whole_and_deleted_whole() {
        let mut e = Editor::new(Vec::new(), COMMANDS);
        typed(&mut e, "see: ");
        let paste = "line\n".repeat(4);
        e.paste(&paste.replace('\n', "\r"));
        assert_eq!(e.shown(), "see: [Pasted text #1: 4 lines, 20 characters]");
        // Left steps over the marker as one character.
        e.key(key(KeyCode::Left));
        assert_eq!(e.view().1, (0, 5));
        e.key(key(KeyCode::End));
        assert_eq!(
            e.key(key(KeyCode::Enter)),
            Action::Submit {
                text: format!("see: {paste}"),
                shown: "see: [Pasted text #1: 4 lines, 20 characters]".to_owned(),
            }
        );
        e.paste(&paste);
        e.key(key(KeyCode::Backspace));
        assert!(e.is_empty(), "{:?}", e.shown());
        // A short paste is typed in as it is.
        e.paste("two\rlines");
        assert_eq!(e.shown(), "two\nlines");
    }

    #[test]
    fn keys_for_lines_quitting_and_completion() {
        let mut e = Editor::new(vec!["old".to_owned()], COMMANDS);
        assert_eq!(e.key(ctrl('d')), Action::End);
        assert_eq!(e.key(ctrl('c')), Action::Interrupt);
        typed(&mut e, "a\\");
        assert_eq!(e.key(key(KeyCode::Enter)), Action::Edited);
        e.key(ctrl('j'));
        e.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT));
        typed(&mut e, "b");
        assert_eq!(e.shown(), "a\n\n\nb");
        e.clear();
        e.key(key(KeyCode::Up));
        assert_eq!(e.shown(), "old");
        e.key(key(KeyCode::Down));
        assert_eq!(e.shown(), "");
        typed(&mut e, "/con");
        e.key(key(KeyCode::Tab));
        assert_eq!(e.shown(), "/context ");
        e.clear();
        typed(&mut e, "/c");
        assert_eq!(
            e.key(key(KeyCode::Tab)),
            Action::Candidates(vec!["/context", "/compact", "/clear"])
        );
        typed(&mut e, "om");
        e.key(key(KeyCode::Tab));
        assert_eq!(e.shown(), "/compact ");
    }

    /// One edit of the draft.
    #[derive(Clone, Debug)]
    enum Edit {
        Type(char),
        Paste(usize),
        Key(u8),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            prop::sample::select(vec!['a', ' ', 'é', '字', '\\']).prop_map(Edit::Type),
            (1usize..8).prop_map(Edit::Paste),
            (0u8..16).prop_map(Edit::Key),
        ]
    }

    fn apply(e: &mut Editor, edit: &Edit, pastes: &mut Vec<String>) {
        match edit {
            Edit::Type(c) => {
                e.key(key(KeyCode::Char(*c)));
            }
            Edit::Paste(lines) => {
                // Pastes of more than 3 lines are collapsed, numbered from 1 in order.
                let text = format!("paste {}\n", pastes.len()).repeat(*lines);
                e.paste(&text);
                if *lines > 3 {
                    pastes.push(text);
                }
            }
            Edit::Key(k) => {
                let event = match k {
                    0 => key(KeyCode::Left),
                    1 => key(KeyCode::Right),
                    2 => key(KeyCode::Backspace),
                    3 => key(KeyCode::Delete),
                    4 => key(KeyCode::Home),
                    5 => key(KeyCode::End),
                    6 => key(KeyCode::Up),
                    7 => key(KeyCode::Down),
                    8 => ctrl('w'),
                    9 => ctrl('k'),
                    10 => ctrl('u'),
                    11 => ctrl('j'),
                    12 => KeyEvent::new(KeyCode::Left, KeyModifiers::CONTROL),
                    13 => KeyEvent::new(KeyCode::Right, KeyModifiers::CONTROL),
                    14 => ctrl('a'),
                    _ => ctrl('e'),
                };
                e.key(event);
            }
        }
    }

    proptest! {
        /// Whatever is typed, moved or deleted, each paste whose marker is still in the draft is
        /// sent whole, and the cursor stays in the draft.
        #[test]
        fn a_paste_is_sent_whole_or_not_at_all(edits in prop::collection::vec(edit(), 0..40)) {
            let mut e = Editor::new(Vec::new(), &[]);
            let mut pastes = Vec::new();
            for edit in &edits {
                apply(&mut e, edit, &mut pastes);
                let (lines, (line, column)) = e.view();
                prop_assert!(line < lines.len());
                prop_assert!(column <= width(lines[line]));
            }
            let shown = e.shown().to_owned();
            let markers: Vec<usize> = (1..=pastes.len())
                .filter(|n| shown.contains(&format!("[Pasted text #{n}:")))
                .collect();
            e.key(key(KeyCode::End));
            while !e.view().0.is_empty() && e.view().1.0 + 1 < e.view().0.len() {
                e.key(key(KeyCode::Down));
                e.key(key(KeyCode::End));
            }
            if let Action::Submit { text, .. } = e.key(key(KeyCode::Enter)) {
                for n in markers {
                    prop_assert!(text.contains(&pastes[n - 1]), "paste {n} is not whole in {text:?}");
                }
                prop_assert!(!text.contains("[Pasted text #"));
            }
        }

        /// A fitted row and a wrapped sentence never pass the width; wrapping keeps each word
        /// that fits a line.
        #[test]
        fn rows_and_sentences_fit_their_width(
            words in prop::collection::vec("[a-z字]{1,8}", 1..30),
            columns in 20usize..120,
        ) {
            let text = words.join(" ");
            let row = fit(&text, columns);
            prop_assert!(width(&row) <= columns);
            prop_assert!(row == text || row.ends_with('…'));
            let wrapped = wrap_words(&text, columns, 4);
            for line in wrapped.lines() {
                prop_assert!(width(line) <= columns, "{line:?}");
            }
            let rewords: Vec<&str> = wrapped.split_whitespace().collect();
            prop_assert_eq!(rewords, words.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lists written once: the docs' lists of stores, providers, variables, strategies and trusted
// keys are the definitions' own.

/// A file of the repository, read whole.
#[expect(
    clippy::disallowed_methods,
    reason = "the repository's own documents, read whole by a test"
)]
fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The lists `doc` marks `<!-- list: NAME -->` ... `<!-- /list -->`: each one's items in
/// backticks, in order.
fn doc_lists(doc: &str, name: &str) -> Vec<Vec<String>> {
    let open = format!("<!-- list: {name} -->");
    let mut lists = Vec::new();
    let mut rest = doc;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let end = after
            .find("<!-- /list -->")
            .unwrap_or_else(|| panic!("`{open}` without its `<!-- /list -->`"));
        let items = after[..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        lists.push(items);
        rest = &after[end..];
    }
    lists
}

/// Checks that every list `name` of each of `files` is `expected`, and that there is one.
fn check_doc_lists(files: &[&str], name: &str, expected: &[&str]) {
    for file in files {
        let lists = doc_lists(&repo_file(file), name);
        assert!(!lists.is_empty(), "{file}: no `<!-- list: {name} -->`");
        for list in lists {
            assert_eq!(list, expected, "{file}: the list of {name}");
        }
    }
}

/// The line of the README's configuration example that sets `key`.
fn readme_example_line(key: &str) -> String {
    let readme = repo_file("README.md");
    let prefix = format!("{key} = ");
    readme
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("README.md: no `{prefix}` line"))
        .to_owned()
}

#[test]
fn the_docs_list_the_stores_of_the_one_table() {
    let forms: Vec<&str> = crate::store_value::KINDS
        .iter()
        .flat_map(|k| k.forms.iter().copied())
        .collect();
    check_doc_lists(&["README.md", "docs/session.md"], "stores", &forms);
}

#[test]
fn every_store_form_parses_to_its_kind_and_errors_name_every_form() {
    use crate::store_value::{Choice, KINDS, help, parse};
    for (i, kind) in KINDS.iter().enumerate() {
        for form in kind.forms {
            // As written: `sqlite:PATH` names a file called PATH.
            let choice = parse(form).unwrap_or_else(|e| panic!("{form}: {e}"));
            let row = match choice {
                Choice::Jsonl(_) => 0,
                Choice::Sqlite(_) => 1,
                Choice::Postgres(_) => 2,
            };
            assert_eq!(row, i, "{form}");
            assert!(help().contains(form), "--store's help lacks {form}");
        }
    }
    let err = parse("mysql://u:secret@h/db").unwrap_err();
    assert_eq!(
        err,
        "unknown store `mysql://u:<redacted>@h/db`: use jsonl, jsonl:DIR, sqlite:PATH or postgres://USER@HOST/DB"
    );
    assert_eq!(
        parse("sqlite://").unwrap_err(),
        "sqlite: needs a file: sqlite:PATH"
    );
    assert_eq!(
        parse(" postgresql://a@h/d "),
        Ok(Choice::Postgres("postgresql://a@h/d".to_owned()))
    );
    assert_eq!(
        crate::store_value::forms(|k| k.database, " or "),
        "sqlite:PATH or postgres://USER@HOST/DB"
    );
}

#[test]
fn the_docs_list_the_providers_and_their_variables_of_the_one_definition() {
    use crate::config::ProviderKind;
    use clap::ValueEnum;
    let names: Vec<&str> = ProviderKind::value_variants()
        .iter()
        .map(|k| k.as_str())
        .collect();
    let line = readme_example_line("provider");
    let (_, comment) = line
        .split_once('#')
        .expect("a comment naming the providers");
    let listed: Vec<&str> = comment.split('|').map(str::trim).collect();
    assert_eq!(listed, names, "README.md: {line}");
    check_doc_lists(
        &["README.md"],
        "key variables",
        &ProviderKind::key_variables(),
    );
    check_doc_lists(
        &["README.md"],
        "base URL variables",
        &ProviderKind::base_url_variables(),
    );
    assert_eq!(
        ProviderKind::key_variables(),
        ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"]
    );
}

#[test]
fn the_docs_list_the_strategies_and_trusted_keys_of_the_one_definition() {
    use crate::config::{KEYS, Needs};
    use panto_compact::CompactionStrategy;
    let line = readme_example_line("compaction_strategy");
    let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    assert_eq!(quoted, CompactionStrategy::NAMES, "README.md: {line}");
    let trusted: Vec<&str> = KEYS
        .iter()
        .filter(|(_, n)| matches!(n, Needs::Trust(_)))
        .map(|(k, _)| *k)
        .collect();
    check_doc_lists(
        &["README.md", "docs/trust.md", "docs/architecture.md"],
        "trusted keys",
        &trusted,
    );
}

#[test]
fn lists_in_words_join_with_the_last_word_before_the_last_item() {
    let text = crate::lists::listed(&crate::config::ProviderKind::key_variables(), " or ");
    assert_eq!(text, "ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY");
    assert_eq!(crate::lists::listed(&["a"], " or "), "a");
    assert_eq!(crate::lists::listed::<&str>(&[], " or "), "");
}

#[test]
fn a_tiered_run_that_writes_the_clearing_alone_says_so_after_saying_it_summarizes() {
    use panto_compact::CompactionEvent;

    let not_enough = CompactionEvent::ClearingNotEnough {
        tokens_before: 9_000,
        tokens_after: 8_500,
        cleared: 2,
        reason: "it frees about 500 tokens, less than a tenth of the window (8192)".into(),
    };
    assert!(describe_event(&not_enough).contains("not enough"));
    let alone = CompactionEvent::ClearedAlone {
        reason: "the compaction would not make the conversation smaller".into(),
    };
    let said = describe_event(&alone);
    assert_eq!(
        said,
        "panto: the summary of the cleared conversation is not written (the compaction would not make the conversation smaller): writing the clearing alone"
    );
}
