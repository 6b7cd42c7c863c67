//! The offline summarizer: a deterministic, extractive `Provider` that writes a compaction
//! summary with no network and no model, so that `panto compact` works on a fresh machine.
//!
//! It goes through the same pipeline as a real model: it receives the compaction request,
//! reads the transcript back with `panto_transcript::parse_request`, and extracts:
//! - the user's goal (the first prompt, or the goal of the previous summary),
//! - the later requests,
//! - the files and identifiers that tool calls and code spans touched,
//! - the tools used with counts,
//! - the errors seen and whether a later call of the same tool on the same target succeeded,
//! - the last state of the work (the last assistant text),
//! - lines matching the key terms of `/compact` instructions,
//!
//! merged with the previous summary when it has the same sections (a summary by another model
//! is carried over as a section of its own). Every section is bounded, so the summary is too.
//! It cannot chat: any request that is not a compaction request is refused as unsupported.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use panto_model::{Message, Role};
use panto_provider::{EventSink, Provider, ProviderError, Request, StreamEvent, async_trait};
use panto_transcript::{TranscriptItem, parse_request};
use serde_json::Value;

/// The model name the offline summarizer reports.
pub const MODEL: &str = "offline-extractive";

/// The heading under which `/compact` instructions are appended to the system prompt.
const INSTRUCTIONS_HEADING: &str = panto_compact::ADDITIONAL_INSTRUCTIONS_HEADING;

/// Caps that keep the summary bounded (characters or items).
const GOAL_CHARS: usize = 700;
const REQUEST_CHARS: usize = 240;
const MAX_REQUESTS: usize = 12;
const MAX_FILES: usize = 40;
const MAX_IDENTIFIERS: usize = 30;
const MAX_ERRORS: usize = 12;
const ERROR_CHARS: usize = 200;
const STATE_CHARS: usize = 900;
const MAX_FOCUS: usize = 10;
const FOCUS_CHARS: usize = 240;
const EARLIER_CHARS: usize = 3000;

/// A deterministic extractive summarizer.
#[derive(Debug, Default)]
pub struct OfflineSummarizer;

impl OfflineSummarizer {
    /// A new summarizer.
    pub fn new() -> OfflineSummarizer {
        OfflineSummarizer
    }
}

#[async_trait]
impl Provider for OfflineSummarizer {
    fn name(&self) -> &str {
        "offline"
    }

    async fn complete(
        &self,
        request: &Request,
        events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let summary = summarize_request(request)?;
        events(StreamEvent::Text(&summary));
        let mut message = Message::assistant_text(summary);
        message.model = Some(MODEL.to_owned());
        message.stop_reason = Some("end_turn".to_owned());
        Ok(message)
    }
}

/// Summarizes a compaction request.
///
/// # Errors
/// [`ProviderError::Unsupported`] when the request is not a compaction request.
pub fn summarize_request(request: &Request) -> Result<String, ProviderError> {
    let refuse = |why: &str| ProviderError::Unsupported {
        message: format!(
            "the offline summarizer only writes compaction summaries ({why}); configure a provider to chat"
        ),
    };
    let [message] = request.messages.as_slice() else {
        return Err(refuse("a compaction request has exactly one user message"));
    };
    if message.role != Role::User {
        return Err(refuse("a compaction request has exactly one user message"));
    }
    let text = message.text();
    let parsed = parse_request(&text).map_err(|e| refuse(&e.to_string()))?;
    let instructions = request
        .system
        .split_once(INSTRUCTIONS_HEADING)
        .map(|(_, rest)| rest.trim().to_owned())
        .filter(|s| !s.is_empty());
    Ok(summarize(
        &parsed.items,
        parsed.previous_summary.as_deref(),
        instructions.as_deref(),
    ))
}

/// The sections of a summary, in the order they are written.
#[derive(Debug, Default)]
struct Summary {
    goal: Option<String>,
    requests: Vec<String>,
    files: Vec<String>,
    identifiers: Vec<String>,
    tools: BTreeMap<String, u64>,
    errors: Vec<String>,
    focus: Vec<String>,
    state: Option<String>,
    earlier: Option<String>,
}

const H_GOAL: &str = "## Goal";
const H_REQUESTS: &str = "## Later requests";
const H_FILES: &str = "## Files touched";
const H_IDENTIFIERS: &str = "## Identifiers";
const H_TOOLS: &str = "## Tools used";
const H_ERRORS: &str = "## Errors";
const H_FOCUS: &str = "## Asked to keep";
const H_STATE: &str = "## Last state";
const H_EARLIER: &str = "## Earlier summary";
const OWN_MARK: &str = "<!-- panto offline summary -->";

/// Builds the summary of transcript `items`, merged with `previous`.
pub fn summarize(
    items: &[TranscriptItem],
    previous: Option<&str>,
    instructions: Option<&str>,
) -> String {
    let mut s = match previous {
        Some(p) if p.starts_with(OWN_MARK) => parse_own(p),
        Some(p) => Summary {
            earlier: Some(carried_over(p)),
            ..Summary::default()
        },
        None => Summary::default(),
    };
    let mut first_prompt = true;
    // Errors waiting for a later success of the same tool on the same target.
    let mut calls: HashMap<String, (String, String)> = HashMap::new(); // id -> (tool, target)
    let mut open_errors: Vec<(String, String, String)> = Vec::new(); // (tool, target, line)
    let terms = instructions.map(key_terms).unwrap_or_default();
    for item in items {
        match item {
            TranscriptItem::Text {
                role: Role::User,
                text,
            } => {
                collect_code_spans(text, &mut s.identifiers);
                let line = one_line(text);
                if line.is_empty() {
                    continue;
                }
                if first_prompt && s.goal.is_none() && s.earlier.is_none() {
                    s.goal = Some(clip(&line, GOAL_CHARS));
                } else {
                    s.requests.push(clip(&line, REQUEST_CHARS));
                }
                first_prompt = false;
                focus(&terms, "user", text, &mut s.focus);
            }
            TranscriptItem::Text {
                role: Role::Assistant,
                text,
            } => {
                collect_code_spans(text, &mut s.identifiers);
                if !text.trim().is_empty() {
                    s.state = Some(clip_block(text.trim(), STATE_CHARS));
                }
                focus(&terms, "assistant", text, &mut s.focus);
            }
            TranscriptItem::ToolCall {
                id, name, input, ..
            } => {
                *s.tools.entry(name.clone()).or_insert(0) += 1;
                let mut targets = Vec::new();
                collect_paths(input, &mut targets);
                for t in &targets {
                    push_unique(&mut s.files, t);
                }
                let target = targets
                    .first()
                    .cloned()
                    .unwrap_or_else(|| command_head(input));
                calls.insert(id.clone(), (name.clone(), target));
            }
            TranscriptItem::ToolResult {
                id,
                name,
                is_error,
                text,
            } => {
                let (tool, target) = calls.get(id).cloned().unwrap_or_else(|| {
                    (
                        name.clone().unwrap_or_else(|| "tool".to_owned()),
                        String::new(),
                    )
                });
                if *is_error {
                    let first = text
                        .lines()
                        .find(|l| !l.trim().is_empty())
                        .unwrap_or("")
                        .trim();
                    let line = if target.is_empty() {
                        format!("`{tool}`: {}", clip(first, ERROR_CHARS))
                    } else {
                        format!("`{tool}` on `{target}`: {}", clip(first, ERROR_CHARS))
                    };
                    open_errors.push((tool, target, line));
                } else {
                    open_errors.retain(|(t, g, line)| {
                        let resolved = *t == tool && *g == target;
                        if resolved {
                            s.errors.push(format!("{line} (resolved later)"));
                        }
                        !resolved
                    });
                }
                focus(&terms, "tool result", text, &mut s.focus);
            }
            // A summary inside the transcript: carry it like a previous summary.
            TranscriptItem::Summary { text } if s.earlier.is_none() => {
                s.earlier = Some(carried_over(text));
            }
            _ => {}
        }
    }
    for (_, _, line) in open_errors {
        s.errors.push(format!("{line} (not resolved in this part)"));
    }
    render(&s, instructions)
}

fn render(s: &Summary, instructions: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(OWN_MARK);
    out.push('\n');
    let _ = writeln!(
        out,
        "Extractive summary written by panto's offline summarizer (no model was used): facts quoted from the conversation, not an interpretation."
    );
    section_text(&mut out, H_EARLIER, s.earlier.as_deref());
    section_text(&mut out, H_GOAL, s.goal.as_deref());
    section_list(&mut out, H_REQUESTS, tail(&s.requests, MAX_REQUESTS));
    section_list(
        &mut out,
        H_FILES,
        head(&s.files, MAX_FILES)
            .iter()
            .map(|f| format!("`{f}`"))
            .collect(),
    );
    let identifiers: Vec<String> = s
        .identifiers
        .iter()
        .filter(|i| !s.files.contains(i))
        .cloned()
        .collect();
    section_list(
        &mut out,
        H_IDENTIFIERS,
        head(&identifiers, MAX_IDENTIFIERS)
            .iter()
            .map(|f| format!("`{f}`"))
            .collect(),
    );
    let mut tools: Vec<(&String, &u64)> = s.tools.iter().collect();
    tools.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    section_list(
        &mut out,
        H_TOOLS,
        tools.iter().map(|(n, c)| format!("`{n}` ×{c}")).collect(),
    );
    section_list(&mut out, H_ERRORS, tail(&s.errors, MAX_ERRORS));
    if let Some(i) = instructions {
        let _ = writeln!(
            out,
            "\n{H_FOCUS}\nInstructions for this run: {}",
            clip(&one_line(i), 300)
        );
        for f in head(&s.focus, MAX_FOCUS) {
            let _ = writeln!(out, "- {f}");
        }
    } else if !s.focus.is_empty() {
        section_list(&mut out, H_FOCUS, head(&s.focus, MAX_FOCUS));
    }
    section_text(&mut out, H_STATE, s.state.as_deref());
    out
}

fn section_text(out: &mut String, heading: &str, text: Option<&str>) {
    if let Some(t) = text {
        let _ = writeln!(out, "\n{heading}\n{t}");
    }
}

fn section_list(out: &mut String, heading: &str, items: Vec<String>) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}");
    for i in items {
        let _ = writeln!(out, "- {i}");
    }
}

/// The last `n` items, with a note of how many were left out.
fn tail(items: &[String], n: usize) -> Vec<String> {
    if items.len() <= n {
        return items.to_vec();
    }
    let mut out = vec![format!("({} earlier items left out)", items.len() - n)];
    out.extend_from_slice(&items[items.len() - n..]);
    out
}

/// The first `n` items, with a note of how many were left out.
fn head(items: &[String], n: usize) -> Vec<String> {
    if items.len() <= n {
        return items.to_vec();
    }
    let mut out = items[..n].to_vec();
    out.push(format!("({} more left out)", items.len() - n));
    out
}

/// Reads back a summary this module wrote, to merge it with new material.
fn parse_own(text: &str) -> Summary {
    let mut s = Summary::default();
    let mut heading = "";
    let mut body: Vec<&str> = Vec::new();
    let flush = |heading: &str, body: &mut Vec<&str>, s: &mut Summary| {
        let items: Vec<String> = body
            .iter()
            .filter_map(|l| l.strip_prefix("- "))
            .filter(|l| !l.starts_with('(') || !l.ends_with(" left out)"))
            .map(str::to_owned)
            .collect();
        let text = body.join("\n").trim().to_owned();
        match heading {
            H_GOAL if !text.is_empty() => s.goal = Some(text),
            H_REQUESTS => s.requests = items,
            H_FILES => s.files = items.iter().map(|i| unquote(i)).collect(),
            H_IDENTIFIERS => s.identifiers = items.iter().map(|i| unquote(i)).collect(),
            H_TOOLS => {
                for i in items {
                    if let Some((name, count)) = i.rsplit_once(" ×")
                        && let Ok(n) = count.parse::<u64>()
                    {
                        *s.tools.entry(unquote(name)).or_insert(0) += n;
                    }
                }
            }
            H_ERRORS => s.errors = items,
            H_EARLIER if !text.is_empty() => s.earlier = Some(text),
            _ => {}
        }
        body.clear();
    };
    for line in text.lines() {
        if line.starts_with("## ") {
            flush(heading, &mut body, &mut s);
            heading = match line {
                H_GOAL | H_REQUESTS | H_FILES | H_IDENTIFIERS | H_TOOLS | H_ERRORS | H_FOCUS
                | H_STATE | H_EARLIER => line,
                _ => "",
            };
        } else if !heading.is_empty() {
            body.push(line);
        }
    }
    flush(heading, &mut body, &mut s);
    s
}

fn unquote(s: &str) -> String {
    s.trim_matches('`').to_owned()
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !item.is_empty() && !list.iter().any(|x| x == item) {
        list.push(item.to_owned());
    }
}

/// Whitespace collapsed to single spaces.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, with an ellipsis when cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Keys of tool arguments that name files or folders.
const PATH_KEYS: &[&str] = &[
    "path",
    "file",
    "file_path",
    "filepath",
    "filename",
    "notebook_path",
    "dir",
    "directory",
    "cwd",
    "target_file",
];

/// A summary written by someone else, carried over whole (bounded), with its headings moved one
/// level down so they cannot be mistaken for this summary's own sections.
fn carried_over(text: &str) -> String {
    let demoted: Vec<String> = text
        .trim()
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("#{l}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    clip_block(&demoted.join("\n"), EARLIER_CHARS)
}

/// Like [`clip`], but cuts at the end of a line (or a word) when one is near.
fn clip_block(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    let at = cut
        .rfind('\n')
        .filter(|&i| i > cut.len() / 2)
        .or_else(|| cut.rfind(' ').filter(|&i| i > cut.len() / 2))
        .unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end())
}

/// File-like values in tool arguments: path keys, and path-looking words of commands.
fn collect_paths(input: &Value, out: &mut Vec<String>) {
    match input {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    (k, Value::String(s)) if PATH_KEYS.contains(&k) => push_unique(out, s.trim()),
                    ("command" | "cmd" | "script", Value::String(s)) => {
                        for word in s.split(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                            if looks_like_path(word) {
                                push_unique(out, word.trim_end_matches([';', ',', ')']));
                            }
                        }
                    }
                    (_, v @ (Value::Object(_) | Value::Array(_))) => collect_paths(v, out),
                    _ => {}
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_paths(v, out)),
        _ => {}
    }
}

const EXTENSIONS: &[&str] = &[
    ".rs", ".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".java", ".kt", ".c", ".h", ".cc", ".cpp",
    ".hpp", ".cs", ".rb", ".php", ".swift", ".md", ".toml", ".json", ".jsonl", ".yaml", ".yml",
    ".txt", ".sh", ".lock", ".sql", ".html", ".css", ".ex", ".exs", ".lua", ".proto",
];

fn looks_like_path(word: &str) -> bool {
    let w = word.trim_end_matches([';', ',', ')']);
    if w.len() < 3 || w.len() > 200 || w.starts_with('-') || w.contains("://") {
        return false;
    }
    let has_ext = EXTENSIONS.iter().any(|e| w.ends_with(e));
    (w.contains('/')
        && w.chars()
            .all(|c| c.is_alphanumeric() || "/._-~".contains(c)))
        || has_ext
}

/// The program a command runs, as the target of a call with no file argument.
fn command_head(input: &Value) -> String {
    input
        .get("command")
        .or_else(|| input.get("cmd"))
        .and_then(Value::as_str)
        .map(|c| c.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Inline code spans (`like_this`) that look like identifiers, paths or commands.
fn collect_code_spans(text: &str, out: &mut Vec<String>) {
    let mut parts = text.split('`');
    parts.next();
    while let Some(span) = parts.next() {
        let span = span.trim();
        let word_like = span.len() >= 2
            && span.len() <= 60
            && !span.contains(char::is_whitespace)
            && span.chars().any(char::is_alphanumeric);
        if word_like {
            push_unique(out, span);
        }
        // Skip the text between this span and the next.
        if parts.next().is_none() {
            break;
        }
    }
}

/// The words of the instructions worth searching for: longer words and anything with a digit
/// or a symbol (like `#3`), lowercase.
fn key_terms(instructions: &str) -> Vec<String> {
    const COMMON: &[&str] = &[
        "about",
        "after",
        "again",
        "all",
        "and",
        "are",
        "be",
        "before",
        "being",
        "careful",
        "carefully",
        "details",
        "every",
        "for",
        "from",
        "full",
        "have",
        "into",
        "keep",
        "make",
        "more",
        "most",
        "our",
        "please",
        "preserve",
        "should",
        "sure",
        "that",
        "the",
        "their",
        "them",
        "then",
        "this",
        "those",
        "understanding",
        "what",
        "when",
        "which",
        "with",
        "you",
        "your",
        "focus",
    ];
    let mut terms = Vec::new();
    for raw in instructions.split(|c: char| c.is_whitespace() || ",;:()\"'".contains(c)) {
        let w = raw
            .trim_matches(|c: char| c == '.' || c == '!' || c == '?')
            .to_lowercase();
        let special = w.chars().any(|c| c.is_ascii_digit() || "#_/.-".contains(c));
        if (w.chars().count() >= 4 || (special && w.len() >= 2)) && !COMMON.contains(&w.as_str()) {
            push_unique(&mut terms, &w);
        }
    }
    terms
}

/// Lines of `text` that mention one of `terms`, quoted with where they came from.
fn focus(terms: &[String], from: &str, text: &str, out: &mut Vec<String>) {
    if terms.is_empty() || out.len() >= MAX_FOCUS * 2 {
        return;
    }
    for line in text.lines() {
        let lower = line.to_lowercase();
        if terms.iter().any(|t| lower.contains(t.as_str())) {
            let quoted = format!("{from}: {}", clip(&one_line(line), FOCUS_CHARS));
            push_unique(out, &quoted);
        }
    }
}
