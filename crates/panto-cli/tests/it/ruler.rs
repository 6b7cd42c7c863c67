//! One ruler (issue 30): every size panto shows for a conversation comes from one estimate,
//! and its parts add up. Checked on the example sessions and on the shared real sessions
//! (`../shared/data/sessions`, or `PANTO_CALIBRATE_SESSIONS`; skipped with a line when absent):
//! `panto context` (its total, its parts, its rows), `panto context --json`, the compaction's
//! lines, `panto compact --json` and the entry a compaction writes.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{Sandbox, repo_root};

/// The sessions to check: the examples, and the shared real sessions when present.
fn sessions() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        "debugging.jsonl",
        "design-discussion.jsonl",
        "compacted-twice.jsonl",
    ]
    .iter()
    .map(|n| repo_root().join("examples/sessions").join(n))
    .collect();
    let shared = std::env::var_os("PANTO_CALIBRATE_SESSIONS").map_or_else(
        || repo_root().join("../shared/data/sessions"),
        PathBuf::from,
    );
    match std::fs::read_dir(&shared) {
        Ok(dir) => {
            let mut real: Vec<PathBuf> = dir
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            real.sort();
            out.extend(real);
        }
        Err(_) => eprintln!(
            "ruler: SKIPPED the shared sessions: no folder at {}",
            shared.display()
        ),
    }
    out
}

/// The number after `prefix` in `text` (up to the next character that is not a digit).
fn number_after(text: &str, prefix: &str) -> u64 {
    let rest = text
        .split_once(prefix)
        .unwrap_or_else(|| panic!("{prefix:?} not in {text:?}"))
        .1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {prefix:?} in {text:?}"))
}

/// The parts of `panto context`'s second line (`  = 20 system prompt + 120 summary + 3562
/// messages`), by name.
fn parts(line: &str) -> Vec<(String, u64)> {
    let sum = line
        .strip_prefix("  = ")
        .unwrap_or_else(|| panic!("not a line of parts: {line:?}"));
    let sum = sum.split(" (").next().unwrap();
    sum.split(" + ")
        .map(|part| {
            let (n, name) = part.split_once(' ').unwrap();
            (name.to_owned(), n.parse().unwrap())
        })
        .collect()
}

fn check_session(sb: &Sandbox, path: &Path) {
    let name = path.file_name().unwrap().to_str().unwrap();
    let copy = sb.work().join(name);
    std::fs::copy(path, &copy).unwrap();
    let session = copy.to_str().unwrap();

    // The JSON document: parts that add up to the total and to the conversation.
    let doc = sb
        .run(&["context", session, "--json"])
        .expect_code(0)
        .json();
    let total = doc["estimated_tokens"].as_u64().unwrap();
    let conversation = doc["conversation_tokens"].as_u64().unwrap();
    let size = &doc["size"];
    let part = |k: &str| {
        size[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: size.{k}"))
    };
    assert_eq!(
        part("system_prompt") + part("tools") + part("summary") + part("messages"),
        total,
        "{name}: {size}"
    );
    assert_eq!(part("summary") + part("messages"), conversation, "{name}");

    // The human-readable context: the same total, the same parts, and rows that add up to
    // the conversation.
    let run = sb.run(&["context", session]);
    run.expect_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        number_after(lines[0], "; about "),
        total,
        "{name}: {}",
        lines[0]
    );
    let shown = parts(lines[1]);
    assert_eq!(
        shown.iter().map(|(_, n)| n).sum::<u64>(),
        total,
        "{name}: {}",
        lines[1]
    );
    let by_name = |k: &str| shown.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
    assert_eq!(by_name("system prompt"), part("system_prompt"), "{name}");
    assert_eq!(by_name("summary"), part("summary"), "{name}");
    assert_eq!(by_name("messages"), part("messages"), "{name}");
    let rows: u64 = lines
        .iter()
        .filter(|l| l.len() > 22 && l[..4].trim().parse::<usize>().is_ok())
        .map(|l| l[15..22].trim().parse::<u64>().unwrap())
        .sum();
    assert_eq!(rows, conversation, "{name}: the rows do not add up");

    // A compaction: its lines and its document count the conversation as `context` does, and
    // the context after it is the `tokens_after` it reported and wrote.
    let run = sb.run(&["compact", session, "--force", "--json"]);
    run.expect_code(0);
    let report = run.json();
    if report["nothing_to_compact"] == true {
        assert_eq!(
            report["tokens_before"].as_u64(),
            Some(conversation),
            "{name}"
        );
        return;
    }
    let before = report["tokens_before"].as_u64().unwrap();
    let after = report["tokens_after"].as_u64().unwrap();
    assert_eq!(before, conversation, "{name}");
    let started = run
        .stderr
        .lines()
        .find(|l| l.starts_with("panto: compacting ("))
        .unwrap_or_else(|| panic!("{name}: {}", run.stderr));
    assert_eq!(
        number_after(started, "conversation about "),
        before,
        "{name}"
    );
    let finished = run
        .stderr
        .lines()
        .find(|l| l.starts_with("panto: compacted ("))
        .unwrap_or_else(|| panic!("{name}: {}", run.stderr));
    assert_eq!(
        number_after(finished, "conversation about "),
        before,
        "{name}"
    );
    assert_eq!(number_after(finished, " -> "), after, "{name}");
    let now = sb
        .run(&["context", session, "--json"])
        .expect_code(0)
        .json();
    assert_eq!(now["conversation_tokens"].as_u64(), Some(after), "{name}");
    let text = std::fs::read_to_string(&copy).unwrap();
    let entry: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .rfind(|e| e["type"] == "compaction")
        .unwrap();
    assert_eq!(entry["tokens_before"].as_u64(), Some(before), "{name}");
    assert_eq!(entry["tokens_after"].as_u64(), Some(after), "{name}");
}

#[test]
fn every_size_of_a_conversation_comes_from_one_ruler_and_adds_up() {
    for path in sessions() {
        let sb = Sandbox::new();
        eprintln!("ruler: {}", path.display());
        check_session(&sb, &path);
    }
}
