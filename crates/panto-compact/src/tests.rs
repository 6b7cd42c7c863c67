//! Unit tests: the retention plan on literal conversations, the budget cap, prompt layering,
//! and the in-memory log.

use std::fs;
use std::sync::Arc;

use panto_model::{CompactionEntry, ContentBlock, Entry, Message, Role, replay};
use serde_json::json;

use crate::compactor::request_overhead;
use crate::testing::ScriptedProvider;
use crate::*;

/// A conversation from a compact spec: `u` a user prompt, `a` an assistant answer, `c:1,2` an
/// assistant message calling tools 1 and 2, `r:1,2` a user message answering them.
fn conversation(spec: &str) -> Vec<Message> {
    spec.split_whitespace()
        .map(|token| match token.split_once(':') {
            None if token == "u" => Message::user_text("prompt"),
            None if token == "a" => Message::assistant_text("answer"),
            Some(("c", ids)) => Message::new(
                Role::Assistant,
                ids.split(',')
                    .map(|id| ContentBlock::tool_use(id, "run", json!({})))
                    .collect(),
            ),
            Some(("r", ids)) => Message::new(
                Role::User,
                ids.split(',')
                    .map(|id| ContentBlock::tool_result(id, "output", false))
                    .collect(),
            ),
            _ => panic!("bad spec token {token}"),
        })
        .collect()
}

/// Plans `spec` (after a compaction message when `head`) with `sizes` (of the conversation
/// messages; the compaction message, if any, is sized 1000) and checks where the kept suffix
/// starts (in conversation positions) and how many turns it holds.
fn check(spec: &str, head: bool, sizes: &[u64], budget: u64, keep_from: usize, kept_turns: usize) {
    let mut entries = Vec::new();
    if head {
        entries.push(Entry::Compaction(CompactionEntry::new("earlier")));
    }
    entries.extend(conversation(spec).into_iter().map(Entry::Message));
    let ctx = replay(entries);
    let h = usize::from(head);
    let mut all_sizes = vec![1000; h];
    all_sizes.extend_from_slice(sizes);
    let p = plan(&ctx, &all_sizes, budget);
    assert_eq!(
        (p.keep_from - h, p.kept_turns),
        (keep_from, kept_turns),
        "{spec} with budget {budget}"
    );
    assert_eq!(p.head, h);
    assert_eq!(p.end, ctx.messages.len());
    assert_eq!(p.kept_tokens, all_sizes[p.keep_from..].iter().sum::<u64>());
    assert_eq!(
        p.summarized_tokens,
        all_sizes[h..p.keep_from].iter().sum::<u64>()
    );
    assert_eq!(p.budget, budget);
}

#[test]
fn plan_keeps_the_longest_whole_turn_suffix_that_fits() {
    check("u a u a", false, &[10, 10, 10, 10], 25, 2, 2);
    check("u a u a", false, &[10, 10, 10, 10], 30, 1, 3);
    check("u a u a", false, &[10, 10, 10, 10], 40, 0, 4);
    // A turn that does not fit stops the walk, even if an older one would.
    check("u a u a", false, &[1, 1, 50, 10], 30, 3, 1);
}

#[test]
fn plan_always_keeps_the_in_flight_turn() {
    check("u a u", false, &[10, 10, 100], 50, 2, 1);
    check("u a u", false, &[10, 10, 10], 0, 2, 1);
    check("u", false, &[1_000_000], 0, 0, 1);
}

#[test]
fn plan_never_separates_a_tool_call_from_its_results() {
    check("u c:1 r:1 a", false, &[10, 10, 10, 10], 25, 3, 1);
    check("u c:1 r:1 a", false, &[10, 10, 10, 10], 30, 1, 2);
    // Results spread over two messages stay with their call.
    check("u c:1,2 r:1 r:2 u", false, &[10; 5], 35, 4, 1);
    check("u c:1,2 r:1 r:2 u", false, &[10; 5], 40, 1, 2);
    // An interrupted tool loop in flight is kept whole.
    check("u a u c:1,2 r:1", false, &[10; 5], 0, 3, 1);
}

#[test]
fn plan_leaves_the_compaction_message_out_of_both_sides() {
    check("u a u", true, &[10, 10, 10], 15, 2, 1);
    check("u a u", true, &[10, 10, 10], 30, 0, 3);
    let ctx = replay([
        Entry::Compaction(CompactionEntry::new("earlier")),
        Entry::Message(Message::user_text("x")),
        Entry::Message(Message::assistant_text("y")),
    ]);
    let p = plan(&ctx, &[5, 5, 5], 5);
    assert_eq!(p.prefix(), 1..2);
    assert_eq!(p.kept(), 2..3);
}

#[test]
fn plan_of_an_empty_conversation_is_empty() {
    check("", false, &[], 100, 0, 0);
    check("", true, &[], 100, 0, 0);
    let ctx = replay([Entry::Compaction(CompactionEntry::new("s"))]);
    assert!(plan(&ctx, &[7], 0).is_empty());
}

#[test]
fn plan_counts_missing_sizes_as_unbounded() {
    let ctx = replay(conversation("u a u a").into_iter().map(Entry::Message));
    let p = plan(&ctx, &[1, 1], u64::MAX - 1);
    assert_eq!((p.keep_from, p.kept_turns), (3, 1));
    assert_eq!(p.kept_tokens, u64::MAX);
}

#[test]
fn the_budget_is_capped_at_a_quarter_of_a_reported_limit() {
    assert_eq!(keep_budget(20_000, None), 20_000);
    assert_eq!(keep_budget(20_000, Some(200_000)), 20_000);
    assert_eq!(keep_budget(20_000, Some(32_000)), 8_000);
    assert_eq!(keep_budget(20_000, Some(3)), 0);
    assert_eq!(DEFAULT_KEEP_TOKENS, 20_000);
}

#[cfg(unix)]
#[test]
fn a_project_prompt_that_links_outside_the_project_is_refused_naming_it() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    fs::create_dir_all(project.join(".panto")).unwrap();
    let secret = dir.path().join("credentials");
    fs::write(&secret, "aws_secret_access_key = do-not-send\n").unwrap();
    let prompt = project.join(".panto/COMPACTION.md");
    symlink(&secret, &prompt).unwrap();
    let layer = LayerFile::new(&prompt).within(&project);
    let err = CompactionPrompt::load_layers(std::slice::from_ref(&layer)).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, CompactError::PromptUnreadable { ref path, .. } if path == &prompt),
        "{err:?}"
    );
    assert!(text.contains("symbolic link that leads outside"), "{text}");
    assert!(!text.contains("do-not-send"), "{text}");
    // The user's own files may be linked from anywhere (a dotfile manager does that).
    assert_eq!(
        CompactionPrompt::load(&[&prompt]).unwrap().text(),
        "aws_secret_access_key = do-not-send\n"
    );
    // A link that stays inside the project is followed.
    fs::remove_file(&prompt).unwrap();
    fs::write(project.join("prompt.md"), "inside").unwrap();
    symlink("../prompt.md", &prompt).unwrap();
    let p = CompactionPrompt::load_layers(std::slice::from_ref(&layer)).unwrap();
    assert_eq!(p.text(), "inside");
    // A `.panto` folder that is itself a link out of the project is refused the same way.
    fs::remove_dir_all(project.join(".panto")).unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("COMPACTION.md"), "from outside").unwrap();
    symlink(&outside, project.join(".panto")).unwrap();
    let err = CompactionPrompt::load_layers(&[layer]).unwrap_err();
    assert!(err.to_string().contains("leads outside"), "{err}");
}

#[cfg(unix)]
#[test]
fn layer_files_that_are_not_small_regular_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.md");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let err = read_layer_file(&LayerFile::new(&fifo).within(dir.path())).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: it is not a regular file", fifo.display())
    );

    let big = dir.path().join("big.md");
    fs::write(&big, vec![b'x'; MAX_LAYER_FILE_BYTES as usize + 1]).unwrap();
    let err = read_layer_file(&LayerFile::new(&big)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: it is larger than 1024 KiB", big.display())
    );

    let dangling = dir.path().join("dangling.md");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let err = read_layer_file(&LayerFile::new(&dangling)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: it is a symbolic link to nothing", dangling.display())
    );
    assert_eq!(
        read_layer_file(&LayerFile::new(dir.path().join("absent"))).unwrap(),
        None
    );
}

#[test]
fn prompt_layering_last_present_file_wins() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user/COMPACTION.md");
    let project = dir.path().join("project/COMPACTION.md");
    let candidates = [user.clone(), project.clone()];

    let p = CompactionPrompt::load(&candidates).unwrap();
    assert_eq!((p.text(), p.source()), (BUILTIN_PROMPT, None));

    fs::create_dir_all(user.parent().unwrap()).unwrap();
    fs::write(&user, "user prompt").unwrap();
    let p = CompactionPrompt::load(&candidates).unwrap();
    assert_eq!(
        (p.text(), p.source()),
        ("user prompt", Some(user.as_path()))
    );

    fs::create_dir_all(project.parent().unwrap()).unwrap();
    fs::write(&project, "project prompt").unwrap();
    let p = CompactionPrompt::load(&candidates).unwrap();
    assert_eq!(
        (p.text(), p.source()),
        ("project prompt", Some(project.as_path()))
    );

    fs::remove_file(&user).unwrap();
    let p = CompactionPrompt::load(&candidates).unwrap();
    assert_eq!(p.text(), "project prompt");
    assert_eq!(
        CompactionPrompt::load::<&str>(&[]).unwrap(),
        CompactionPrompt::builtin()
    );
}

#[test]
fn a_prompt_file_that_cannot_be_used_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.md");
    fs::write(&good, "fine").unwrap();
    let check = |path: &std::path::Path, expect: &str| {
        let err = CompactionPrompt::load(&[path, good.as_path()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            expect.replace("{}", &path.display().to_string())
        );
        // Also when it comes last.
        assert!(CompactionPrompt::load(&[good.as_path(), path]).is_err());
    };

    let as_dir = dir.path().join("COMPACTION.md");
    fs::create_dir(&as_dir).unwrap();
    check(
        &as_dir,
        "cannot read compaction prompt {}: it is a directory",
    );

    let latin1 = dir.path().join("latin1.md");
    fs::write(&latin1, b"caf\xe9").unwrap();
    check(
        &latin1,
        "cannot read compaction prompt {}: not valid UTF-8 (at byte 3)",
    );

    for (name, text) in [("empty.md", ""), ("blank.md", " \n\t\n")] {
        let empty = dir.path().join(name);
        fs::write(&empty, text).unwrap();
        check(
            &empty,
            "compaction prompt {} is empty; write a prompt in it or delete it to use the built-in one",
        );
    }

    #[cfg(unix)]
    {
        let dangling = dir.path().join("dangling.md");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let err = CompactionPrompt::load(&[&dangling]).unwrap_err();
        assert!(
            matches!(err, CompactError::PromptUnreadable { ref path, .. } if path == &dangling)
        );
    }
}

#[test]
fn instructions_are_appended_under_their_heading() {
    let p = CompactionPrompt::from_text("Summarize.\n\n").unwrap();
    assert_eq!(p.system_prompt(None), "Summarize.\n\n");
    assert_eq!(p.system_prompt(Some(" \n ")), "Summarize.\n\n");
    assert_eq!(
        p.system_prompt(Some("  keep bug #3\n")),
        "Summarize.\n\n## Additional instructions for this compaction run\n\nkeep bug #3\n"
    );
    assert!(CompactionPrompt::from_text("   ").is_err());
}

#[test]
fn the_builtin_prompt_names_the_envelope_the_transcript_crate_renders() {
    let user_prompt = panto_transcript::render_request(
        &[Message::user_text("hello")],
        Some("an earlier summary"),
    );
    for tag in ["<previous-summary>", "<transcript>"] {
        assert!(
            user_prompt.contains(tag),
            "render_request no longer emits {tag}"
        );
        assert!(
            BUILTIN_PROMPT.contains(tag),
            "COMPACTION.md must explain {tag}"
        );
    }
    assert!(BUILTIN_PROMPT.contains("never orders for you"));
}

#[test]
fn the_short_prompt_keeps_the_long_one_s_sections_and_its_ledger_note_in_brief() {
    // The headings the summary must use: the one fenced block of each prompt.
    let format = |p: &'static str| -> &'static str {
        let start = p.find("```\n").unwrap() + 4;
        let end = start + p[start..].find("```").unwrap();
        &p[start..end]
    };
    assert_eq!(format(BUILTIN_PROMPT).lines().count(), 9);
    assert_eq!(format(BUILTIN_SHORT_PROMPT), format(BUILTIN_PROMPT));
    for p in [BUILTIN_PROMPT, BUILTIN_SHORT_PROMPT] {
        assert!(p.contains(panto_transcript::LEDGER_HEADING));
        for tag in [
            "<previous-summary>",
            "<transcript>",
            "[Tool error NAME (ID)]:",
        ] {
            assert!(p.contains(tag), "{tag}");
        }
    }
    // A few hundred tokens, where the long one takes about 2,000.
    let short = Heuristic.text(BUILTIN_SHORT_PROMPT);
    let long = Heuristic.text(BUILTIN_PROMPT);
    assert!(short < 400 && long > 4 * short, "{short} {long}");
    println!("short prompt {short} tokens, long {long}");
}

#[test]
fn the_short_form_is_chosen_below_the_threshold_for_the_built_in_prompt_only() {
    let builtin = CompactionPrompt::builtin();
    assert!(!builtin.is_layered());
    assert_eq!(builtin.text_for(None), BUILTIN_PROMPT);
    assert_eq!(builtin.text_for(Some(SHORT_PROMPT_BELOW)), BUILTIN_PROMPT);
    assert_eq!(
        builtin.text_for(Some(SHORT_PROMPT_BELOW - 1)),
        BUILTIN_SHORT_PROMPT
    );
    assert!(builtin.uses_short_form(Some(2_048)));
    assert_eq!(
        builtin.system_prompt_for(Some("keep bug #3"), Some(2_048)),
        format!(
            "{}\n\n{ADDITIONAL_INSTRUCTIONS_HEADING}\n\nkeep bug #3\n",
            BUILTIN_SHORT_PROMPT.trim_end()
        )
    );
    assert_eq!(builtin.system_prompt(None), BUILTIN_PROMPT);
    // A prompt the user gave, as text or as a layered file, is never replaced.
    let text = CompactionPrompt::from_text("mine").unwrap();
    assert!(text.is_layered() && !text.uses_short_form(Some(2_048)));
    assert_eq!(text.system_prompt_for(None, Some(1_000)), "mine");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("COMPACTION.md");
    fs::write(&file, "my file").unwrap();
    let layered = CompactionPrompt::load(&[&file]).unwrap();
    assert!(layered.is_layered());
    assert_eq!(layered.text_for(Some(2_048)), "my file");
    // A layer that is absent leaves the built-in prompt, short form included.
    let absent = CompactionPrompt::load(&[dir.path().join("absent.md")]).unwrap();
    assert!(absent.uses_short_form(Some(4_096)));
}

#[test]
fn model_refs_show_provider_and_model_only() {
    let r = ModelRef::new(Arc::new(ScriptedProvider::new("anthropic")), "claude-x");
    assert_eq!(
        format!("{r:?}"),
        "ModelRef { provider: \"anthropic\", model: \"claude-x\" }"
    );
}

#[test]
fn compact_config_defaults() {
    let c = CompactorConfig::default();
    assert_eq!((c.keep_tokens, c.max_output_tokens), (20_000, 8_192));
}

// The summary checks. The degenerate answers below are written by hand from the descriptions in
// issue 18 (no captured model output was available in this worktree).
mod summary_checks {
    use crate::attempt::AttemptFailure;
    use crate::check::{Replaced, check_summary};
    use crate::prompt::BUILTIN_PROMPT;

    const LAST: &str = "test result: FAILED. 3 passed; 1 failed\nthread 'parse_empty' panicked at src/parse.rs:41:5:\nassertion failed: tokens.is_empty()";

    fn replaced(chars: usize) -> Replaced<'static> {
        Replaced {
            system: BUILTIN_PROMPT,
            previous: "",
            last_message: LAST,
            chars,
        }
    }

    #[test]
    fn a_good_handoff_passes() {
        let summary = "## Goal\nFix `parse_empty` in src/parse.rs without changing the public API.\n\n## Progress\n- The test fails: `assertion failed: tokens.is_empty()` at src/parse.rs:41.\n\n## Next steps\n- Make the tokenizer return no tokens for empty input.";
        assert_eq!(check_summary(summary, &replaced(5_000)), Ok(()));
    }

    #[test]
    fn an_empty_summary_fails() {
        assert_eq!(
            check_summary("", &replaced(5_000)),
            Err(AttemptFailure::EmptySummary)
        );
    }

    #[test]
    fn one_phrase_repeated_to_the_output_limit_fails() {
        // What SmolLM2-135M did: one phrase until the output limit.
        let summary = "The user wants to fix the test. ".repeat(200);
        assert!(matches!(
            check_summary(summary.trim(), &replaced(50_000)),
            Err(AttemptFailure::RepetitiveSummary { distinct_percent }) if distinct_percent < 25
        ));
    }

    #[test]
    fn an_echo_of_the_compaction_prompt_fails() {
        // What Qwen2.5-Coder-0.5B did once: it wrote COMPACTION.md back.
        let summary: String = BUILTIN_PROMPT
            .lines()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            check_summary(&summary, &replaced(50_000)),
            Err(AttemptFailure::EchoedPrompt)
        );
    }

    #[test]
    fn a_copy_of_the_last_tool_result_fails() {
        assert_eq!(
            check_summary(LAST, &replaced(50_000)),
            Err(AttemptFailure::EchoedLastMessage)
        );
    }

    #[test]
    fn smollm2_copying_the_last_message_in_the_e2e_overflow_scenario_fails() {
        // Captured in `cargo xtask e2e --provider openai` (target/e2e/openai/overflow): the
        // transcript's last message was SmolLM2-135M's own earlier answer below, and its
        // "summary" was rejected as a copy of it. The answer text itself is not logged by the
        // server, so the copy here is that message, as the check's verdict says it was.
        let last = "I'm glad to have you as a helpful assistant. I'm here to assist with creative writing tasks. What can I help you with today?";
        let replaced = Replaced {
            system: "You summarize a conversation between a user and an assistant (E2E-COMPACTION-PROMPT).\nWrite a short plain summary of the facts the user stated, in at most five sentences.\n",
            previous: "",
            last_message: last,
            chars: 6_000,
        };
        assert_eq!(
            check_summary(last, &replaced),
            Err(AttemptFailure::EchoedLastMessage)
        );
    }

    #[test]
    fn a_summary_longer_than_what_it_replaces_fails() {
        let summary: String = (0..400)
            .map(|i| format!("fact {i} about item{i}\n"))
            .collect();
        assert!(matches!(
            check_summary(&summary, &replaced(2_000)),
            Err(AttemptFailure::LongerThanReplaced {
                replaced_chars: 2_000,
                ..
            })
        ));
        // A short summary of a very short prefix is fine.
        assert_eq!(
            check_summary("## Goal\nSay hello to the user.", &replaced(10)),
            Ok(())
        );
    }
}

mod copy_through {
    use crate::attempt::AttemptFailure;
    use crate::check::{Replaced, check_summary};

    /// A previous summary as a model writes one.
    const PREVIOUS: &str = "## Goal\n- Port the settings loader from YAML to TOML without changing `config::Settings`.\n\n## Decisions\n- Keep serde defaults; reject unknown keys with a clear error.\n\n## Progress\n- `src/settings/load.rs` reads TOML; the YAML path is still there behind a flag.\n\n## Next steps\n- Remove the YAML path once the migration test passes.";

    /// What the summary replaces: the previous summary and a chunk of `transcript` characters.
    fn replaced(transcript: usize) -> Replaced<'static> {
        Replaced {
            system: "Summarize the transcript.",
            previous: PREVIOUS,
            last_message: "",
            chars: transcript + PREVIOUS.len(),
        }
    }

    #[test]
    fn the_previous_summary_handed_back_fails() {
        let failure = check_summary(PREVIOUS, &replaced(8_000)).unwrap_err();
        assert_eq!(
            failure,
            AttemptFailure::RepeatedPreviousSummary {
                repeated_percent: 100,
                new_chars: 0,
                transcript_chars: 8_000,
            }
        );
        assert_eq!(
            failure.to_string(),
            "the model's summary repeats the previous summary (100% of it) and adds only 0 characters about 8000 characters of new conversation"
        );
        // Reflowed, re-bulleted and with a heading of its own, it is the same copy.
        let reflowed = format!(
            "## Summary\n{}",
            PREVIOUS.replace("- ", "* ").replace(' ', "  ")
        );
        assert!(matches!(
            check_summary(&reflowed, &replaced(8_000)),
            Err(AttemptFailure::RepeatedPreviousSummary { .. })
        ));
    }

    #[test]
    fn one_new_line_about_a_long_chunk_is_still_a_copy() {
        let answer = format!("{PREVIOUS}\n- The user said to go on.");
        assert!(matches!(
            check_summary(&answer, &replaced(20_000)),
            Err(AttemptFailure::RepeatedPreviousSummary {
                repeated_percent: 92,
                new_chars: 23,
                ..
            })
        ));
    }

    #[test]
    fn the_previous_summary_carried_forward_with_an_account_of_the_new_turns_passes() {
        // A long previous summary, as a chain of compactions grows one.
        let previous: String = (0..30)
            .map(|i| {
                format!("- Decision {i}: keep module {i} as it is; its tests cover the parser.\n")
            })
            .collect::<String>()
            + PREVIOUS;
        let replaced = |transcript: usize| Replaced {
            system: "Summarize the transcript.",
            previous: &previous,
            last_message: "",
            chars: transcript + previous.len(),
        };
        // What the prompt asks for: every fact still true carried over, the new turns added.
        let answer = format!(
            "{previous}\n- The migration test `tests/migrate.rs` now passes on the three sample files; `cargo test -p settings` is green.\n- The user asked to keep the YAML reader for one more release, behind `--legacy-yaml`, and to log a warning when it is used.\n- `src/settings/legacy.rs` holds the YAML path now; the warning is emitted once per process."
        );
        assert_eq!(check_summary(&answer, &replaced(20_000)), Ok(()));
        // The same account of a chunk five times larger is too thin: under 1% of it.
        assert!(matches!(
            check_summary(&answer, &replaced(100_000)),
            Err(AttemptFailure::RepeatedPreviousSummary { .. })
        ));
    }

    #[test]
    fn an_account_of_a_thousand_characters_covers_any_chunk() {
        // A chain's long previous summary, and a chunk of a megabyte: 1% of it is more than a
        // model writes, so 1,000 characters of new account are enough.
        let previous: String = (0..100)
            .map(|i| {
                format!("- Decision {i}: keep module {i} as it is; its tests cover the parser.\n")
            })
            .collect();
        let replaced = Replaced {
            system: "Summarize the transcript.",
            previous: &previous,
            last_message: "",
            chars: 1_000_000 + previous.len(),
        };
        let line = |i: usize| {
            format!("\n- Step {i:02} of the migration moved table {i:02} and its readers to TOML.")
        };
        let account: String = (0..16).map(line).collect();
        // Without its markers: 16 lines of 64 characters.
        assert_eq!(account.len(), 16 * (64 + 3));
        let answer = format!("{previous}{account}");
        assert_eq!(check_summary(&answer, &replaced), Ok(()));
        // Shorter, it is a copy-through of so long a chunk.
        let short: String = (0..10).map(line).collect();
        assert!(matches!(
            check_summary(&format!("{previous}{short}"), &replaced),
            Err(AttemptFailure::RepeatedPreviousSummary { new_chars: 640, .. })
        ));
    }

    #[test]
    fn a_rewritten_summary_and_a_copy_of_a_short_chunk_pass() {
        let rewritten = "## Goal\n- Move settings to TOML, public API of `config::Settings` unchanged.\n\n## Progress\n- Loader reads TOML; YAML kept behind a flag until the migration test passes.";
        assert_eq!(check_summary(rewritten, &replaced(50_000)), Ok(()));
        // Under 1,000 characters of new turns, carrying the summary unchanged is allowed.
        assert_eq!(check_summary(PREVIOUS, &replaced(900)), Ok(()));
        // Without a previous summary there is nothing to repeat.
        let first = Replaced {
            previous: "",
            chars: 8_000,
            ..replaced(0)
        };
        assert_eq!(check_summary(PREVIOUS, &first), Ok(()));
    }
}

#[test]
fn a_summary_that_quotes_the_last_message_as_a_quote_is_not_a_copy() {
    use crate::check::{Replaced, check_summary};
    let last = "I renamed parse_config to load_config in src/config.rs and every test passes now.";
    let summary =
        format!("## Goal\nRename the config loader.\n\n## Where the work left off\n> {last}\n");
    let replaced = Replaced {
        system: "Summarize.",
        previous: "",
        last_message: last,
        chars: 10_000,
    };
    assert_eq!(check_summary(&summary, &replaced), Ok(()));
    // The same words unquoted are a copy.
    let copied = format!("{last}\n{last}\n");
    assert!(check_summary(&copied, &replaced).is_err());
}

mod plan_turns {
    use panto_model::{EffectiveContext, arbitrary, replay, turns};
    use panto_size::{Heuristic, Sizer};
    use proptest::prelude::*;

    use crate::plan::plan_and_turns;

    proptest! {
        /// The plan's first turns are the turns of the summarized prefix on its own, which is
        /// what `Compactor::prepare` renders instead of segmenting the prefix again.
        #[test]
        fn the_plans_first_turns_are_the_prefixs_turns(
            session in arbitrary::session(8),
            budget in 0u64..3000,
        ) {
            let context: EffectiveContext = replay(
                session.messages.into_iter().map(panto_model::Entry::Message).collect::<Vec<_>>(),
            );
            let sizes = Heuristic.message_sizes(&context.messages);
            let (plan, all) = plan_and_turns(&context, &sizes, budget);
            let prefix = &context.messages[plan.prefix()];
            let own = turns(prefix);
            prop_assert_eq!(&all[..plan.summarized_turns], own.as_slice());
        }
    }
}

#[test]
fn with_the_short_prompt_a_later_fold_request_carries_about_half_a_small_window() {
    // The figures of `SHORT_PROMPT_BELOW`'s and `MIN_OUTPUT_TOKENS`' docs.
    let fixed = request_overhead(BUILTIN_SHORT_PROMPT);
    // Just under half at Ollama's 2,048 (the prompt's headings and the envelope cost about 500
    // tokens there), well over half from 4,096.
    for (window, least) in [(2_048u64, 920u64), (4_096, 2_048)] {
        let capacity = FoldBudget::new(Some(window), fixed, 0, 8_192)
            .later_capacity()
            .unwrap();
        assert!(capacity > least, "{window}: {capacity}");
    }
    let long = request_overhead(BUILTIN_PROMPT);
    assert!(
        FoldBudget::new(Some(2_048), long, 0, 8_192)
            .later_capacity()
            .is_none()
    );
}

/// Issue 39 point 3: under `TINY_PROMPT_BELOW` the built-in prompt is the tiny form, and with
/// the output floor a tenth of the limit a later fold request keeps at least half the window
/// for the transcript, from 1,000 tokens up; from 2,000 tokens the short form and the floor of
/// 256 are as before.
#[test]
fn under_2k_the_tiny_prompt_and_the_smaller_floor_leave_a_later_request_half_the_window() {
    let builtin = CompactionPrompt::builtin();
    assert_eq!(
        builtin.text_for(Some(TINY_PROMPT_BELOW)),
        BUILTIN_SHORT_PROMPT
    );
    assert_eq!(
        builtin.text_for(Some(TINY_PROMPT_BELOW - 1)),
        BUILTIN_TINY_PROMPT
    );
    // A prompt the user gave is never replaced.
    let text = CompactionPrompt::from_text("mine").unwrap();
    assert_eq!(text.system_prompt_for(None, Some(1_000)), "mine");
    assert!(BUILTIN_TINY_PROMPT.contains("ledger"));
    let tiny = Heuristic.text(BUILTIN_TINY_PROMPT);
    assert!(tiny < 130, "{tiny}");
    println!("tiny prompt {tiny} tokens");
    assert_eq!(output_floor(Some(TINY_PROMPT_BELOW)), 256);
    assert_eq!(output_floor(None), 256);
    assert_eq!(output_floor(Some(1_000)), 100);
    assert_eq!(output_floor(Some(600)), MIN_SMALL_OUTPUT_TOKENS);
    let fixed = request_overhead(BUILTIN_TINY_PROMPT);
    for window in (1_000u64..TINY_PROMPT_BELOW).step_by(50) {
        let budget = FoldBudget::new(Some(window), fixed, 0, 8_192);
        let capacity = budget.later_capacity().unwrap();
        assert!(capacity >= window / 2, "{window}: {capacity}");
        let plan = fold(&[window * 3], &budget).unwrap();
        assert!(
            plan.output >= output_floor(Some(window)),
            "{window}: {plan:?}"
        );
    }
}
