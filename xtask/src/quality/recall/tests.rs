//! Unit tests of the recall exam: each category's needles (and what is not one), the matching
//! rule, the query words, and the choice of questions.

use panto_model::{ContentBlock, Message, Role, ToolResultBlock, ToolResultContent, ToolUseBlock};
use serde_json::json;

use super::needles::{Category, Source, needles};
use super::questions::{Draw, Haystack, query_words, questions};

/// The answers of `category` in `text`, as output of a successful call.
fn found(text: &str, category: Category) -> Vec<String> {
    needles(text, Source::Output, false)
        .into_iter()
        .filter(|f| f.category == category)
        .map(|f| f.answer)
        .collect()
}

#[test]
fn hex_ids_are_shas_colors_and_uuids_not_words_or_numbers() {
    let text = "merged 45ffe0a and 9f3c2b1d0e into main; color #8abeb7 and #fff; \
                id 123e4567-e89b-12d3-a456-426614174000; not deadbeef, 1234567, abc1234x, x-45ffe0b";
    assert_eq!(
        found(text, Category::HexId),
        [
            "45ffe0a",
            "9f3c2b1d0e",
            "#8abeb7",
            "#fff",
            "123e4567-e89b-12d3-a456-426614174000"
        ]
    );
}

#[test]
fn numbers_keep_their_keys_and_code_assignments_inline_are_not_numbers() {
    let text = "Total: 37\nUse offset=280 to continue\n\"fontSize\": 14,\nport = 8080\n\
                private x = 0;\nat 12:30 and https://host:443/x and main.ts:100";
    assert_eq!(
        found(text, Category::Number),
        ["Total: 37", "offset=280", "\"fontSize\": 14", "port = 8080"]
    );
}

#[test]
fn config_values_are_whole_lines_or_environment_assignments_and_not_numbers() {
    let text = "{\n  \"accent\": \"#8abeb7\",\n  \"size\": 3\n}\nmode = \"dark\"\n\
                this.theme = theme\nrun with TERM=xterm-256color` now";
    assert_eq!(
        found(text, Category::Config),
        [
            "\"accent\": \"#8abeb7\"",
            "mode = \"dark\"",
            "TERM=xterm-256color"
        ]
    );
}

#[test]
fn urls_path_lines_and_versions() {
    let text = "see https://github.com/a/b/issues/3. and src/main.rs:120:5, \
                ../tui/test/chat.ts(28,2): error; example.com:8080 is no file; \
                v0.7.29 and 2.0.0-rc.1 but not 127.0.0.1 or 01.27.21";
    assert_eq!(
        found(text, Category::Url),
        ["https://github.com/a/b/issues/3"]
    );
    assert_eq!(
        found(text, Category::PathLine),
        ["src/main.rs:120:5", "../tui/test/chat.ts(28,2)"]
    );
    assert_eq!(found(text, Category::Version), ["v0.7.29", "2.0.0-rc.1"]);
}

#[test]
fn error_lines_are_a_failures_first_line_and_lines_that_report_an_error() {
    let out = "compiling\nsrc/a.ts(3,4): error TS2554: Expected 1 arguments, but got 0.\n\
               const e = new Error('x');\nError: Invalid hex color: #000cc\n";
    assert_eq!(
        found(out, Category::ErrorLine),
        [
            "src/a.ts(3,4): error TS2554: Expected 1 arguments, but got 0.",
            "Error: Invalid hex color: #000cc"
        ]
    );
    let failed: Vec<String> = needles("  grep: no match here\nmore", Source::Failure, false)
        .into_iter()
        .filter(|f| f.category == Category::ErrorLine)
        .map(|f| f.answer)
        .collect();
    assert_eq!(failed, ["grep: no match here"]);
    let long = format!("error: {}", "word ".repeat(40));
    let cut = &found(&long, Category::ErrorLine)[0];
    assert!(cut.len() <= 100 && long.starts_with(cut.as_str()) && !cut.ends_with(' '));
}

#[test]
fn paths_names_and_commands() {
    let text = "read packages/tui/src/editor.ts and ~/.pi/agent/themes/dark.json, \
                call formatToolExecution() or total_tokens but not plain words";
    assert_eq!(
        found(text, Category::Path),
        ["packages/tui/src/editor.ts", "~/.pi/agent/themes/dark.json"]
    );
    assert_eq!(
        found(text, Category::Name),
        ["formatToolExecution", "total_tokens"]
    );
    let command: Vec<String> = needles("\n  npm run check 2>&1 | tail\nsecond", Source::Call, true)
        .into_iter()
        .filter(|f| f.category == Category::Command)
        .map(|f| f.answer)
        .collect();
    assert_eq!(command, ["npm run check 2>&1 | tail"]);
}

#[test]
fn a_text_answers_when_it_holds_the_answer_whole_with_any_spacing() {
    let text =
        Haystack::new("merged  45ffe0a1\n into main; Total:   37 and \"accent\" = '#8abeb7'");
    let ask = |answer: &str, pair: Option<(&str, &str)>| {
        let q = super::questions::Question {
            category: Category::HexId,
            answer: answer.to_owned(),
            pair: pair.map(|(k, v)| (k.to_owned(), v.to_owned())),
            query: Vec::new(),
            sources: Default::default(),
            message: None,
        };
        q.found_in(&text)
    };
    assert!(ask("45ffe0a1 into", None), "whitespace runs are one space");
    assert!(
        !ask("45ffe0a", None),
        "a prefix of a longer word is not the answer"
    );
    assert!(ask("Total: 37", Some(("Total", "37"))));
    assert!(ask("accent: #8abeb7", Some(("accent", "#8abeb7"))));
    assert!(!ask("Total: 3", Some(("Total", "3"))), "37 is not 3");
    assert!(!ask("main: 37", Some(("main", "37"))));
}

#[test]
fn query_words_are_near_and_never_part_of_the_answer() {
    let text = "The build printed commit 45ffe0a after the merge of the theme branch";
    let at = text.find("45ffe0a").unwrap();
    let words = query_words(text, at, at + 7, "45ffe0a", &[], &["git log --oneline"]);
    assert_eq!(
        words,
        ["commit", "after", "printed", "merge", "build", "theme"]
    );
    let words = query_words("port = 8080 in config", 0, 11, "8080", &["port"], &[]);
    assert_eq!(words[0], "port", "a key leads its query");
    assert!(!words.iter().any(|w| w.contains("8080")));
}

fn text(role: Role, t: &str) -> Message {
    Message::new(role, vec![ContentBlock::text(t)])
}

fn call_and_result(id: &str, command: &str, output: &str) -> [Message; 2] {
    let call = ToolUseBlock::new(id, "bash", json!({ "command": command }));
    [
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Let me look at the recent history of the branch"),
                ContentBlock::ToolUse(call),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::ToolResult(ToolResultBlock::new(
                id,
                ToolResultContent::Text(output.to_owned()),
                Some(false),
            ))],
        ),
    ]
}

#[test]
fn questions_leave_out_what_the_kept_suffix_answers_and_are_deterministic() {
    let mut messages = vec![text(
        Role::User,
        "please check the history of the release branch",
    )];
    messages.extend(call_and_result(
        "t1",
        "git log --oneline -3",
        "45ffe0a fix the parser\n9c0ffee2 add the cache\nb00c4fe3 release v1.2.3",
    ));
    let kept = Haystack::new("the kept turns mention 9c0ffee2 only");
    let all = questions(&messages, &kept, 25, Draw::Occurrences);
    let answers: Vec<&str> = all.iter().map(|q| q.answer.as_str()).collect();
    assert!(answers.contains(&"45ffe0a") && answers.contains(&"b00c4fe3"));
    assert!(answers.contains(&"v1.2.3") && answers.contains(&"git log --oneline -3"));
    assert!(!answers.contains(&"9c0ffee2"), "the kept suffix answers it");
    let sha = all.iter().find(|q| q.answer == "45ffe0a").unwrap();
    assert!(sha.only_in_output());
    assert_eq!(all, questions(&messages, &kept, 25, Draw::Occurrences));
}

#[test]
fn a_cap_draws_evenly_over_occurrences_or_over_answers() {
    // `aaaaaa1` is mentioned in nine results, ten other SHAs once each.
    let mut messages = Vec::new();
    for i in 0..10 {
        let mut out = format!("commit {:07x}0 was printed by the log", 0xabc0000 + i);
        if i < 9 {
            out.push_str("\nand aaaaaa1 is the merge base of the branch");
        }
        messages.extend(call_and_result(&format!("t{i}"), "git log", &out));
    }
    let kept = Haystack::new("");
    let hex = |draw| -> Vec<String> {
        questions(&messages, &kept, 4, draw)
            .into_iter()
            .filter(|q| q.category == Category::HexId)
            .map(|q| q.answer)
            .collect()
    };
    let by_occurrence = hex(Draw::Occurrences);
    let by_answer = hex(Draw::Answers);
    assert_eq!(by_occurrence.len(), 4);
    assert_eq!(by_answer.len(), 4);
    assert!(by_occurrence.contains(&"aaaaaa1".to_owned()));
    assert_eq!(
        by_answer[0], "abc00000",
        "over answers, the first answer comes first"
    );
}
