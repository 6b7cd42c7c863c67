//! The ledger: a deterministic record of what a summarized part of a conversation did,
//! derived from its transcript items rather than from any model's answer.
//!
//! [`Ledger::from_items`] walks the items once: the user's requests (verbatim), the files
//! modified and read, the errors tools reported and whether a later call on the same target
//! succeeded, the distinct commands, the open todos of the latest todo list and the user's
//! answers to the agent's questions. [`Ledger::merge`] combines an older ledger with a newer
//! one (recency first) into the record stored typed on the compaction entry (see `serde`):
//! every item, bounded only by [`LEDGER_CAP_BYTES`] of JSON ([`Ledger::cap`], in `record`).
//! What the next model reads is a rendering of that record within a budget
//! ([`Ledger::render_within`], most telling first); [`Ledger::render`] writes all of it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::rc::Rc;

use panto_model::{CallIndex, ContentBlock, Message, RawJson, Role, ToolResultContent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::args;
use crate::item::{ItemView, ToolInput, TranscriptItem};
pub use crate::record::{LEDGER_CAP_BYTES, LedgerCounts};

/// The heading that opens a rendered ledger. Everything from a line equal to it to the end of a
/// summary is the ledger ([`strip_ledger`]).
pub const LEDGER_HEADING: &str =
    "## Ledger (recorded by panto from the conversation, not by a model)";

/// The most characters any request but the most recent keeps; longer ones are shortened.
pub const REQUEST_CHARS: usize = 600;
/// The most characters of a command, an error message, a todo or a path.
pub(crate) const ITEM_CHARS: usize = 200;
/// The most characters of one answer of the user.
pub(crate) const ANSWER_CHARS: usize = 400;

/// One error a tool reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LedgerError {
    /// The tool that failed.
    pub tool: String,
    /// What it was called on: a path, or the command (shortened).
    pub target: String,
    /// The most telling line of the error output.
    pub message: String,
    /// How often the same error occurred.
    pub count: u32,
    /// When a later call of the same tool on the same target succeeded: that call, described.
    pub resolved: Option<String>,
}

impl LedgerError {
    /// The first occurrence of an error, not resolved.
    fn first(tool: String, target: String, message: String) -> LedgerError {
        LedgerError {
            tool,
            target,
            message,
            count: 1,
            resolved: None,
        }
    }
}

/// The deterministic record of a summarized part of a conversation. Every list is most recent
/// first and holds no duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Ledger {
    /// The user's messages that are not tool results, bare slash commands or interruptions.
    pub requests: Vec<String>,
    /// Files that tool calls created, edited or deleted.
    pub modified: Vec<String>,
    /// Files that tool calls read, listed or searched (and not modified).
    pub read: Vec<String>,
    /// Errors that tools reported.
    pub errors: Vec<LedgerError>,
    /// Distinct shell commands, first line only.
    pub commands: Vec<String>,
    /// The items of the latest todo list that are not done, in the list's order.
    pub todos: Vec<String>,
    /// The user's answers to the agent's questions (answers to question tools).
    pub answers: Vec<String>,
    /// How many items the record no longer holds, over every merge so far: the oldest items
    /// dropped past [`LEDGER_CAP_BYTES`], and (in records an older panto wrote) the items its
    /// rendering budget cut from the record. One number, so that older readers still load it.
    pub left_out: u64,
    /// The items dropped past [`LEDGER_CAP_BYTES`], by category. Their sum is at most
    /// [`Ledger::left_out`]; the difference is what an older panto cut without counting by
    /// category.
    #[serde(skip_serializing_if = "LedgerCounts::is_empty")]
    pub dropped: LedgerCounts,
    /// Whether a todo list was seen (a newer list replaces an older one, even an empty one).
    #[serde(skip)]
    todo_list_seen: bool,
    /// The targets of successful calls, with the call described: they resolve older errors
    /// when this ledger is merged over an older one.
    #[serde(skip)]
    successes: Vec<(String, String)>,
}

impl Ledger {
    /// Whether the ledger records nothing.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
            && self.modified.is_empty()
            && self.read.is_empty()
            && self.errors.is_empty()
            && self.commands.is_empty()
            && self.todos.is_empty()
            && self.answers.is_empty()
    }

    /// The ledger of `items` (a transcript, oldest first). Deterministic; not budgeted.
    pub fn from_items(items: &[TranscriptItem]) -> Ledger {
        let mut walk = Walk::default();
        for item in items {
            walk.item(item.view());
        }
        walk.finish()
    }

    /// [`Ledger::from_items`] of the transcript items of `messages`, read one at a time
    /// instead of all held at once.
    pub fn from_messages(messages: &[Message]) -> Ledger {
        // The items of `crate::for_each_item` that the walk reads, taken from the blocks
        // directly: a user's text, a call, a result. A result's name is left out: the walk
        // names a result by its call, and one whose call it has not met has no name in the
        // items either. A result's text is joined from its blocks only when it is read.
        let mut walk = Walk::default();
        for message in messages {
            for block in &message.content {
                match block {
                    ContentBlock::Text(t) if message.role == Role::User => walk.request(&t.text),
                    ContentBlock::ToolUse(u) => walk.call_json(&u.id, &u.name, &u.input),
                    ContentBlock::ToolResult(r) => {
                        walk.result(&r.tool_use_id, None, r.failed(), || match &r.content {
                            ToolResultContent::Text(text) => Cow::Borrowed(text.as_str()),
                            content => Cow::Owned(content.text()),
                        });
                    }
                    _ => {}
                }
            }
        }
        walk.finish()
    }

    /// `newer` over `older`: newer items first, duplicates removed, older errors resolved by
    /// newer successes, the newer todo list when it saw one. The result is the record: every
    /// item of both, unless together they pass [`LEDGER_CAP_BYTES`] of JSON, when the oldest
    /// items of the least telling categories are dropped and counted ([`Ledger::cap`]). What
    /// a model reads is chosen later, by [`Ledger::render_within`].
    pub fn merge(older: &Ledger, newer: &Ledger) -> Ledger {
        // The first success of a key in `newer` (its most recent) resolves the older errors.
        let mut resolving: HashMap<&str, &str> = HashMap::with_capacity(newer.successes.len());
        for (key, how) in &newer.successes {
            resolving.entry(key.as_str()).or_insert(how.as_str());
        }
        let mut errors = newer.errors.clone();
        for e in &older.errors {
            let mut e = e.clone();
            if e.resolved.is_none() {
                e.resolved = resolving
                    .get(error_key(&e.tool, &e.target).as_str())
                    .map(|how| (*how).to_owned());
            }
            errors.push(e);
        }
        let modified = chain(&newer.modified, &older.modified);
        let is_modified: HashSet<&str> = modified.iter().map(String::as_str).collect();
        let read = chain(&newer.read, &older.read)
            .into_iter()
            .filter(|f| !is_modified.contains(f.as_str()))
            .collect();
        let mut successes = newer.successes.clone();
        successes.extend(older.successes.iter().cloned());
        let mut merged = Ledger {
            requests: chain(&newer.requests, &older.requests),
            modified,
            read,
            errors,
            commands: chain(&newer.commands, &older.commands),
            todos: if newer.todo_list_seen {
                newer.todos.clone()
            } else {
                older.todos.clone()
            },
            answers: chain(&newer.answers, &older.answers),
            left_out: older.left_out.saturating_add(newer.left_out),
            dropped: older.dropped.plus(&newer.dropped),
            todo_list_seen: newer.todo_list_seen || older.todo_list_seen,
            successes,
        };
        merged.cap(LEDGER_CAP_BYTES);
        merged
    }

    /// How many items the ledger holds, over every category.
    pub(crate) fn items(&self) -> usize {
        self.requests.len()
            + self.modified.len()
            + self.read.len()
            + self.errors.len()
            + self.commands.len()
            + self.todos.len()
            + self.answers.len()
    }

    /// The ledger stored on a compaction entry, read leniently: unknown fields are ignored, a
    /// missing field is empty, and a value that is not a ledger gives `None`. A record an older
    /// panto wrote (with `left_out` only) loads as it is.
    pub fn from_json(value: &Value) -> Option<Ledger> {
        let mut ledger = Ledger::deserialize(value).ok()?;
        ledger.left_out = ledger.left_out.max(ledger.dropped.total());
        Some(ledger)
    }

    /// The ledger as the JSON stored on a compaction entry.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// `summary` without a ledger rendered into it: everything from the first line equal to
/// [`LEDGER_HEADING`] on is removed (a model may copy the ledger of its previous summary).
pub fn strip_ledger(summary: &str) -> &str {
    let mut at = 0;
    for line in summary.split_inclusive('\n') {
        if line.trim_end() == LEDGER_HEADING {
            return summary[..at].trim_end();
        }
        at += line.len();
    }
    summary
}

pub(crate) fn error_line(e: &LedgerError) -> String {
    let mut line = format!(
        "{} on {}: {}",
        code_span(&e.tool),
        code_span(&e.target),
        e.message
    );
    if e.target.is_empty() {
        line = format!("{}: {}", code_span(&e.tool), e.message);
    }
    if e.count > 1 {
        let _ = write!(line, " (×{})", e.count);
    }
    match &e.resolved {
        Some(how) => {
            let _ = write!(line, " (resolved: later {how} succeeded)");
        }
        None => line.push_str(" (not resolved in the summarized turns)"),
    }
    line
}

/// Text in backticks, with as many backticks as it needs.
pub(crate) fn code_span(text: &str) -> String {
    let text = one_line(text);
    let ticks = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn chain(newer: &[String], older: &[String]) -> Vec<String> {
    unique(newer.iter().chain(older))
}

/// The first occurrence of each item of `items`, in order.
pub(crate) fn unique<'a>(items: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    items
        .filter(|item| seen.insert(item.as_str()))
        .cloned()
        .collect()
}

/// `text` on one line: whitespace collapsed to single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` characters, the last of them an ellipsis when it was cut.
pub fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// What kind of tool a call is, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Modify,
    Shell,
    Todo,
    Question,
    Other,
}

/// Names (their last segment, ASCII case aside) of the tools that modify files.
const MODIFY: &[&str] = &[
    "edit",
    "write",
    "multiedit",
    "multi_edit",
    "str_replace",
    "apply_patch",
    "create",
    "create_file",
    "write_file",
    "edit_file",
    "notebookedit",
    "notebook_edit",
    "delete",
    "delete_file",
    "patch",
    "replace",
    "insert",
];

/// Names (their last segment, ASCII case aside) of the tools that run shell commands.
const SHELL: &[&str] = &[
    "bash",
    "shell",
    "sh",
    "exec",
    "exec_command",
    "run",
    "run_command",
    "run_terminal_cmd",
    "terminal",
    "execute_command",
    "local_shell",
    "command",
];

fn kind(name: &str, input: &Value) -> Kind {
    // The last segment of the name, compared in place without regard to ASCII case (which
    // is what comparing its lowercase copy with these lowercase words does).
    let n = match name.bytes().rposition(|b| matches!(b, b'.' | b':' | b'/')) {
        Some(at) => &name[at + 1..],
        None => name,
    };
    let is = |word: &str| n.eq_ignore_ascii_case(word);
    let has = |word: &str| {
        n.as_bytes()
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word.as_bytes()))
    };
    if MODIFY.iter().any(|m| is(m)) {
        return Kind::Modify;
    }
    if has("edit") && input.get("command").and_then(Value::as_str).is_some() {
        // An editor tool with sub-commands (`view`, `create`, `str_replace`, ...).
        let sub = input["command"].as_str().unwrap_or("");
        return if sub == "view" {
            Kind::Other
        } else {
            Kind::Modify
        };
    }
    if SHELL.iter().any(|s| is(s)) {
        return Kind::Shell;
    }
    if has("todo") || is("update_plan") {
        return Kind::Todo;
    }
    let ask = n
        .as_bytes()
        .get(..3)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"ask"));
    if has("question") || ask {
        return Kind::Question;
    }
    Kind::Other
}

/// Whether strings under `key` in tool arguments name files or folders, at any depth.
pub(crate) fn is_path_key(key: &str) -> bool {
    matches!(
        key,
        "path"
            | "file"
            | "file_path"
            | "filepath"
            | "filename"
            | "notebook_path"
            | "target_file"
            | "dir"
            | "directory"
    )
}

/// Whether strings under `key` in tool arguments are read as patches ([`patch_paths`]), at any
/// depth.
pub(crate) fn is_patch_key(key: &str) -> bool {
    matches!(key, "patch" | "input")
}

/// Keys of the command a shell call runs, at the top level, in order of preference.
pub(crate) const COMMAND_KEYS: &[&str] = &["command", "cmd", "script"];

/// Keys of a todo call's list, at the top level, in order of preference.
pub(crate) const TODO_LIST_KEYS: &[&str] = &["todos", "plan"];

/// The key of a todo's status.
pub(crate) const TODO_STATUS: &str = "status";

/// Keys of a todo's text, in order of preference.
pub(crate) const TODO_TEXT_KEYS: &[&str] = &["content", "step", "title", "text", "task"];

/// Calls `found` with each file or folder `input` names, in the order met (repeats included).
fn paths<'v>(input: &'v Value, found: &mut impl FnMut(&'v str)) {
    match input {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if is_path_key(k) && !s.trim().is_empty() => found(s.trim()),
                    Value::String(s) if is_patch_key(k) => patch_paths(s, found),
                    Value::Object(_) | Value::Array(_) => paths(v, found),
                    _ => {}
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| paths(v, found)),
        Value::String(s) => patch_paths(s, found),
        _ => {}
    }
}

/// Calls `found` with each file an `apply_patch` body names (`*** Update File: PATH` and its
/// kin).
fn patch_paths<'v>(text: &'v str, found: &mut impl FnMut(&'v str)) {
    for line in text.lines() {
        for prefix in ["*** Update File: ", "*** Add File: ", "*** Delete File: "] {
            if let Some(p) = line.strip_prefix(prefix) {
                found(p.trim());
            }
        }
    }
}

/// The command a shell call runs: its first non-empty line, trimmed.
fn command(input: &Value) -> Option<&str> {
    let text = match input {
        Value::String(s) => s.as_str(),
        _ => COMMAND_KEYS.iter().find_map(|k| match input.get(*k) {
            Some(Value::String(s)) => Some(s.as_str()),
            Some(Value::Array(a)) => a.last().and_then(Value::as_str),
            _ => None,
        })?,
    };
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

/// The open todos of a todo call's list, when it has one.
fn todo_list(input: &Value) -> Option<Vec<String>> {
    let list = TODO_LIST_KEYS
        .iter()
        .find_map(|k| input.get(*k))
        .and_then(Value::as_array)?;
    Some(list.iter().filter_map(open_todo).collect())
}

/// What an error is about, for matching a later success: the program of a command (its words up
/// to the first option, pipe or redirection, at most three, after any `cd DIR &&`), else the
/// target itself.
fn error_key(tool: &str, target: &str) -> String {
    let mut key = String::new();
    write_error_key(tool, target, &mut key);
    key
}

/// [`error_key`] written into `out`, which it clears first.
fn write_error_key(tool: &str, target: &str, out: &mut String) {
    out.clear();
    out.push_str(tool);
    out.make_ascii_lowercase();
    out.push('\u{0}');
    let mut rest = target.trim();
    while let Some(after_cd) = rest.strip_prefix("cd ") {
        match after_cd.split_once("&&") {
            Some((_, tail)) => rest = tail.trim(),
            None => break,
        }
    }
    let program = out.len();
    let words = rest
        .split_whitespace()
        .take_while(|w| !w.starts_with(|c: char| "-|;&><".contains(c)) && !w.contains('"'))
        .take(3);
    for (i, word) in words.enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
    if out.len() == program {
        out.push_str(rest);
    }
}

/// A successful call, described for the errors it resolves: the tool, and its target shortened.
fn success(tool: &str, target: &str) -> String {
    if target.is_empty() {
        code_span(tool)
    } else {
        format!("{} on {}", code_span(tool), code_span(&clip(target, 80)))
    }
}

/// The most telling line of an error output: the first that mentions an error or a failure,
/// else the first non-empty one.
fn error_message(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.clone().next();
    // Each line lowercased into the same buffer, not a new one per line.
    let mut lower = String::new();
    let telling = lines.find(|l| {
        lower.clear();
        lower.push_str(l);
        lower.make_ascii_lowercase();
        [
            "error",
            "fail",
            "panic",
            "not found",
            "no such",
            "denied",
            "exited with",
            "aborted",
        ]
        .iter()
        .any(|w| lower.contains(w))
    });
    one_line(telling.or(first).unwrap_or("(no output)"))
}

/// Whether a user text is a request: not empty, not a bare slash command (`/mode`), not an
/// interruption notice or a command's captured output.
pub fn is_request(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() || t.starts_with("[Request interrupted") {
        return false;
    }
    if t.starts_with("<local-command-stdout>") || t.starts_with("<local-command-stderr>") {
        return false;
    }
    let bare_command =
        t.starts_with('/') && !t.contains(char::is_whitespace) && !t[1..].contains('/');
    !bare_command
}

/// The state of one walk over items, oldest first.
///
/// Every step costs about the size of the item it reads, whatever the length of the walk so
/// far: the lists that must hold no duplicates (requests, files, commands, answers) are
/// appended to and made unique once, by `finish`; errors are found by their key through maps
/// rather than by comparing every earlier error. The strings a walk keeps (files, targets,
/// error keys) are stored once each and referred to by number ([`Names`]), so a result, which
/// only looks its call up, copies nothing; a success is described only when it resolves an
/// error or is the latest of its key.
#[derive(Default)]
struct Walk<'a> {
    /// Oldest first while walking; reversed by `finish`. Its `modified`, `read`, `commands`
    /// and `successes` are filled by `finish`.
    ledger: Ledger,
    /// The calls so far, for their results.
    calls: CallIndex<'a, Call<'a>>,
    /// Files, targets and error keys.
    names: Names,
    /// Every modified file, oldest first, repeats included.
    modified: Vec<Name>,
    /// Every file read while it had not been modified, oldest first, repeats included.
    read: Vec<Name>,
    /// Every shell command, oldest first, repeats included.
    commands: Vec<Name>,
    /// The unresolved errors: error key -> message -> index in `ledger.errors`. There is at
    /// most one unresolved error per key and message (a repeat counts on it).
    unresolved: HashMap<Name, HashMap<String, usize>>,
    /// By error key: the ordinal of its latest success and that call's tool and target.
    successes: Vec<Option<(usize, &'a str, Name)>>,
    /// How many successful results the walk has seen.
    succeeded: usize,
    /// Room to write an error key in before looking it up.
    key: String,
    /// By target: the latest tool seen with it and `error_key(tool, target)`.
    keys: Vec<Option<(&'a str, Name)>>,
    /// The files of the call being read, each once.
    files: Vec<Name>,
}

/// A tool call, as its results need it.
#[derive(Clone, Copy)]
struct Call<'a> {
    tool: &'a str,
    kind: Kind,
    target: Name,
    /// `error_key(tool, target)`.
    key: Name,
}

/// The number of a string in [`Names`].
type Name = usize;

/// Distinct strings, each stored once and numbered in the order met; the empty string is
/// number 0. It also records which of them are files modified so far.
struct Names {
    numbers: HashMap<Rc<str>, Name>,
    strings: Vec<Rc<str>>,
    modified: Vec<bool>,
}

impl Default for Names {
    fn default() -> Names {
        let empty: Rc<str> = Rc::from("");
        Names {
            numbers: HashMap::from([(Rc::clone(&empty), 0)]),
            strings: vec![empty],
            modified: vec![false],
        }
    }
}

impl Names {
    const EMPTY: Name = 0;

    /// The number of `s`, numbering it when it is new.
    fn number(&mut self, s: &str) -> Name {
        if let Some(&n) = self.numbers.get(s) {
            return n;
        }
        let n = self.strings.len();
        let s: Rc<str> = Rc::from(s);
        self.strings.push(Rc::clone(&s));
        self.numbers.insert(s, n);
        self.modified.push(false);
        n
    }

    fn get(&self, n: Name) -> &str {
        &self.strings[n]
    }

    /// The strings of `names`, each once, in order.
    fn unique(&self, names: impl Iterator<Item = Name>) -> Vec<String> {
        let mut seen = vec![false; self.strings.len()];
        names
            .filter(|&n| !std::mem::replace(&mut seen[n], true))
            .map(|n| self.get(n).to_owned())
            .collect()
    }
}

impl<'a> Walk<'a> {
    fn item(&mut self, item: ItemView<'a>) {
        match item {
            ItemView::Text {
                role: Role::User,
                text,
            } => self.request(text),
            ItemView::ToolCall {
                id, name, input, ..
            } => match input {
                ToolInput::Value(input) => self.call(id, name, input),
                ToolInput::Text(raw) => self.call_json(id, name, raw),
            },
            ItemView::ToolResult {
                id,
                name,
                is_error,
                text,
            } => self.result(id, name, is_error, || text),
            _ => {}
        }
    }

    fn request(&mut self, text: &str) {
        if is_request(text) {
            self.ledger.requests.push(text.trim().to_owned());
        }
    }

    /// A call whose arguments are JSON text: read without the strings the ledger never looks
    /// at when that is exact ([`args::read`]), else in full.
    fn call_json(&mut self, id: &'a str, name: &'a str, input: &RawJson) {
        match args::read(input.json()) {
            Some(value) => self.call(id, name, &value),
            None => self.call(id, name, &input.to_value()),
        }
    }

    fn call(&mut self, id: &'a str, name: &'a str, input: &Value) {
        let kind = kind(name, input);
        let names = &mut self.names;
        let files = &mut self.files;
        files.clear();
        if matches!(kind, Kind::Modify | Kind::Question | Kind::Other) {
            paths(input, &mut |f| {
                let f = names.number(f);
                if !files.contains(&f) {
                    files.push(f);
                }
            });
        }
        let target = match kind {
            Kind::Modify => {
                // A file modified is no longer listed as read (`finish` drops it there).
                for &f in files.iter() {
                    self.modified.push(f);
                    names.modified[f] = true;
                }
                files.first().copied().unwrap_or(Names::EMPTY)
            }
            Kind::Shell => {
                let c = names.number(command(input).unwrap_or_default());
                if c != Names::EMPTY {
                    self.commands.push(c);
                }
                c
            }
            Kind::Todo => {
                if let Some(todos) = todo_list(input) {
                    let l = &mut self.ledger;
                    l.todo_list_seen = true;
                    l.todos = todos;
                }
                Names::EMPTY
            }
            Kind::Question | Kind::Other => {
                for &f in files.iter() {
                    if !names.modified[f] {
                        self.read.push(f);
                    }
                }
                files.first().copied().unwrap_or(Names::EMPTY)
            }
        };
        let key = self.key(name, target);
        self.calls.push(
            id,
            Call {
                tool: name,
                kind,
                target,
                key,
            },
        );
    }

    /// The number of `error_key(tool, target)`, computed once per tool and target in a row.
    fn key(&mut self, tool: &'a str, target: Name) -> Name {
        if self.keys.len() <= target {
            self.keys.resize(target + 1, None);
        }
        match self.keys[target] {
            Some((seen, key)) if seen == tool => key,
            _ => {
                write_error_key(tool, self.names.get(target), &mut self.key);
                let key = self.names.number(&self.key);
                self.keys[target] = Some((tool, key));
                key
            }
        }
    }

    /// A result; its text is asked for only when it is read.
    fn result<'t>(
        &mut self,
        id: &str,
        name: Option<&'a str>,
        is_error: bool,
        text: impl FnOnce() -> Cow<'t, str>,
    ) {
        let call = match self.calls.latest(id) {
            Some(call) => call,
            None => {
                let tool = name.unwrap_or("tool");
                Call {
                    tool,
                    kind: Kind::Other,
                    target: Names::EMPTY,
                    key: self.key(tool, Names::EMPTY),
                }
            }
        };
        let l = &mut self.ledger;
        if is_error {
            let message = error_message(&text());
            let open = self.unresolved.entry(call.key).or_default();
            if let Some(&at) = open.get(&message) {
                l.errors[at].count += 1;
                return;
            }
            open.insert(message.clone(), l.errors.len());
            let target = self.names.get(call.target).to_owned();
            l.errors
                .push(LedgerError::first(call.tool.to_owned(), target, message));
            return;
        }
        if call.kind == Kind::Question {
            // An answer to a question, unless it is empty (then a plain success).
            let text = text();
            if !text.trim().is_empty() {
                l.answers.push(text.trim().to_owned());
                return;
            }
        }
        if !self.unresolved.is_empty()
            && let Some(open) = self.unresolved.remove(&call.key)
        {
            let how = success(call.tool, self.names.get(call.target));
            for at in open.into_values() {
                l.errors[at].resolved = Some(how.clone());
            }
        }
        self.succeeded += 1;
        if self.successes.len() <= call.key {
            self.successes.resize(call.key + 1, None);
        }
        self.successes[call.key] = Some((self.succeeded, call.tool, call.target));
    }

    fn finish(self) -> Ledger {
        let names = &self.names;
        let mut l = self.ledger;
        l.requests = unique(l.requests.iter().rev());
        l.answers = unique(l.answers.iter().rev());
        l.modified = names.unique(self.modified.iter().rev().copied());
        l.read = names.unique(
            self.read
                .iter()
                .rev()
                .copied()
                .filter(|&f| !names.modified[f]),
        );
        l.commands = names.unique(self.commands.iter().rev().copied());
        l.errors.reverse();
        let mut successes: Vec<(usize, Name, &str, Name)> = self
            .successes
            .iter()
            .enumerate()
            .filter_map(|(key, s)| s.map(|(ordinal, tool, target)| (ordinal, key, tool, target)))
            .collect();
        successes.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
        l.successes = successes
            .into_iter()
            .map(|(_, key, tool, target)| {
                (names.get(key).to_owned(), success(tool, names.get(target)))
            })
            .collect();
        l
    }
}

/// The text of a todo that is not done: `{"content"|"step"|"title", "status"}`.
fn open_todo(todo: &Value) -> Option<String> {
    let status = todo.get(TODO_STATUS).and_then(Value::as_str).unwrap_or("");
    if matches!(
        status.to_ascii_lowercase().as_str(),
        "completed" | "complete" | "done" | "cancelled" | "canceled"
    ) {
        return None;
    }
    let text = TODO_TEXT_KEYS
        .iter()
        .find_map(|k| todo.get(*k).and_then(Value::as_str))
        .or(todo.as_str())?;
    Some(if status.is_empty() {
        text.to_owned()
    } else {
        format!("{text} ({status})")
    })
}

#[cfg(test)]
mod tests {
    //! The walk against the plain one it replaced (every step comparing with every earlier
    //! error, success and list item), kept here as the reference of what a ledger records.

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    /// The readers of tool arguments as they were when they read the full value, kept as the
    /// reference of what the walk decides from pruned arguments.
    mod full {
        use serde_json::Value;

        use super::super::{Kind, MODIFY, SHELL};

        /// Keys of tool arguments that name files or folders.
        pub(super) const PATH_KEYS: &[&str] = &[
            "path",
            "file",
            "file_path",
            "filepath",
            "filename",
            "notebook_path",
            "target_file",
            "dir",
            "directory",
        ];

        pub(super) fn kind(name: &str, input: &Value) -> Kind {
            let n = name.to_ascii_lowercase();
            let n = n.rsplit(['.', ':', '/']).next().unwrap_or(&n);
            if MODIFY.contains(&n) {
                return Kind::Modify;
            }
            if n.contains("edit") && input.get("command").and_then(Value::as_str).is_some() {
                // An editor tool with sub-commands (`view`, `create`, `str_replace`, ...).
                let sub = input["command"].as_str().unwrap_or("");
                return if sub == "view" {
                    Kind::Other
                } else {
                    Kind::Modify
                };
            }
            if SHELL.contains(&n) {
                return Kind::Shell;
            }
            if n.contains("todo") || n == "update_plan" {
                return Kind::Todo;
            }
            if n.contains("question") || n.starts_with("ask") {
                return Kind::Question;
            }
            Kind::Other
        }

        pub(super) fn paths(input: &Value, out: &mut Vec<String>) {
            match input {
                Value::Object(map) => {
                    for (k, v) in map {
                        match v {
                            Value::String(s)
                                if PATH_KEYS.contains(&k.as_str()) && !s.trim().is_empty() =>
                            {
                                push_unique(out, s.trim());
                            }
                            Value::String(s) if k == "patch" || k == "input" => patch_paths(s, out),
                            Value::Object(_) | Value::Array(_) => paths(v, out),
                            _ => {}
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| paths(v, out)),
                Value::String(s) => patch_paths(s, out),
                _ => {}
            }
        }

        /// The files an `apply_patch` body names (`*** Update File: PATH` and its kin).
        pub(super) fn patch_paths(text: &str, out: &mut Vec<String>) {
            for line in text.lines() {
                for prefix in ["*** Update File: ", "*** Add File: ", "*** Delete File: "] {
                    if let Some(p) = line.strip_prefix(prefix) {
                        push_unique(out, p.trim());
                    }
                }
            }
        }

        pub(super) fn push_unique(list: &mut Vec<String>, item: &str) {
            if !list.iter().any(|x| x == item) {
                list.push(item.to_owned());
            }
        }

        /// The command a shell call runs: its first non-empty line, trimmed.
        pub(super) fn command(input: &Value) -> Option<String> {
            let text = match input {
                Value::String(s) => s.as_str(),
                _ => ["command", "cmd", "script"]
                    .iter()
                    .find_map(|k| match input.get(*k) {
                        Some(Value::String(s)) => Some(s.as_str()),
                        Some(Value::Array(a)) => a.last().and_then(Value::as_str),
                        _ => None,
                    })?,
            };
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_owned)
        }

        /// What an error is about, for matching a later success: the program of a command (its words up
        /// to the first option, pipe or redirection, at most three, after any `cd DIR &&`), else the
        /// target itself.
        pub(super) fn error_key(tool: &str, target: &str) -> String {
            let mut rest = target.trim();
            while let Some(after_cd) = rest.strip_prefix("cd ") {
                match after_cd.split_once("&&") {
                    Some((_, tail)) => rest = tail.trim(),
                    None => break,
                }
            }
            let words: Vec<&str> = rest
                .split_whitespace()
                .take_while(|w| !w.starts_with(|c: char| "-|;&><".contains(c)) && !w.contains('"'))
                .take(3)
                .collect();
            let program = if words.is_empty() {
                rest.to_owned()
            } else {
                words.join(" ")
            };
            format!("{}\u{0}{program}", tool.to_ascii_lowercase())
        }
    }

    /// The ledger of `items` as the first walk computed it: quadratic, obviously right.
    fn reference(items: &[TranscriptItem]) -> Ledger {
        let mut l = Ledger::default();
        let mut calls: Vec<(String, String, Kind, String)> = Vec::new();
        for item in items {
            match item.view() {
                ItemView::Text {
                    role: Role::User,
                    text,
                } if is_request(text) => l.requests.push(text.trim().to_owned()),
                ItemView::ToolCall {
                    id, name, input, ..
                } => {
                    let input = &*input.value();
                    let kind = full::kind(name, input);
                    let mut files = Vec::new();
                    full::paths(input, &mut files);
                    let target = match kind {
                        Kind::Modify => {
                            for f in &files {
                                l.read.retain(|r| r != f);
                                l.modified.retain(|m| m != f);
                                l.modified.push(f.clone());
                            }
                            files.first().cloned().unwrap_or_default()
                        }
                        Kind::Shell => {
                            let c = full::command(input).unwrap_or_default();
                            if !c.is_empty() {
                                l.commands.retain(|x| *x != c);
                                l.commands.push(c.clone());
                            }
                            c
                        }
                        Kind::Todo => {
                            if let Some(list) = input
                                .get("todos")
                                .or_else(|| input.get("plan"))
                                .and_then(Value::as_array)
                            {
                                l.todo_list_seen = true;
                                l.todos = list.iter().filter_map(open_todo).collect();
                            }
                            String::new()
                        }
                        Kind::Question | Kind::Other => {
                            for f in &files {
                                if !l.modified.contains(f) {
                                    l.read.retain(|r| r != f);
                                    l.read.push(f.clone());
                                }
                            }
                            files.first().cloned().unwrap_or_default()
                        }
                    };
                    calls.push((id.to_owned(), name.to_owned(), kind, target));
                }
                ItemView::ToolResult {
                    id,
                    name,
                    is_error,
                    text,
                } => {
                    let (tool, kind, target) = match calls.iter().rev().find(|c| c.0 == id) {
                        Some((_, tool, kind, target)) => (tool.clone(), *kind, target.clone()),
                        None => (
                            name.unwrap_or("tool").to_owned(),
                            Kind::Other,
                            String::new(),
                        ),
                    };
                    if kind == Kind::Question && !is_error && !text.trim().is_empty() {
                        l.answers.push(text.trim().to_owned());
                        continue;
                    }
                    let key = full::error_key(&tool, &target);
                    if is_error {
                        let message = error_message(&text);
                        if let Some(e) = l.errors.iter_mut().find(|e| {
                            e.resolved.is_none()
                                && full::error_key(&e.tool, &e.target) == key
                                && e.message == message
                        }) {
                            e.count += 1;
                            continue;
                        }
                        l.errors.push(LedgerError::first(tool, target, message));
                    } else {
                        let how = success(&tool, &target);
                        for e in &mut l.errors {
                            if e.resolved.is_none() && full::error_key(&e.tool, &e.target) == key {
                                e.resolved = Some(how.clone());
                            }
                        }
                        l.successes.retain(|(k, _)| *k != key);
                        l.successes.push((key, how));
                    }
                }
                _ => {}
            }
        }
        for list in [
            &mut l.requests,
            &mut l.modified,
            &mut l.read,
            &mut l.commands,
            &mut l.answers,
        ] {
            list.reverse();
            let mut seen: Vec<String> = Vec::new();
            list.retain(|x| {
                let new = !seen.contains(x);
                if new {
                    seen.push(x.clone());
                }
                new
            });
        }
        l.errors.reverse();
        l.successes.reverse();
        l
    }

    /// Items drawn from small pools, so that ids, targets, messages and successes repeat.
    fn item() -> impl Strategy<Value = TranscriptItem> {
        let id = (0..6u8).prop_map(|i| format!("t{i}"));
        let call = (
            id.clone(),
            prop::sample::select(vec!["bash", "Bash", "read", "edit", "grep", "ask_user"]),
            prop::sample::select(vec![
                "cargo test",
                "cd a && cargo test -q",
                "cargo test --release",
                "ls -la",
                "make",
            ]),
            prop::sample::select(vec!["a.rs", "b.rs", "src/c.rs"]),
        )
            .prop_map(|(id, name, command, path)| TranscriptItem::ToolCall {
                role: Role::Assistant,
                id,
                name: name.to_owned(),
                input: if name.eq_ignore_ascii_case("bash") {
                    json!({ "command": command })
                } else {
                    json!({ "path": path, "pattern": command })
                },
            });
        let todos = prop::sample::select(vec!["pending", "completed"]).prop_map(|status| {
            TranscriptItem::ToolCall {
                role: Role::Assistant,
                id: "todo".to_owned(),
                name: "TodoWrite".to_owned(),
                input: json!({"todos": [{"content": "a", "status": status}]}),
            }
        });
        let result = (
            id,
            proptest::option::of(prop::sample::select(vec!["bash", "read"])),
            any::<bool>(),
            prop::sample::select(vec!["error: x", "failed y", "ok", "", "note\nerror: x"]),
        )
            .prop_map(|(id, name, is_error, text)| TranscriptItem::ToolResult {
                id,
                name: name.map(str::to_owned),
                is_error,
                text: text.to_owned(),
            });
        let request =
            prop::sample::select(vec!["fix it", "/mode", "again", " fix it "]).prop_map(|text| {
                TranscriptItem::Text {
                    role: Role::User,
                    text: text.to_owned(),
                }
            });
        prop_oneof![3 => call, 1 => todos, 4 => result, 1 => request]
    }

    proptest! {
        #[test]
        fn the_walk_records_what_the_reference_walk_records(
            items in prop::collection::vec(item(), 0..80),
        ) {
            prop_assert_eq!(Ledger::from_items(&items), reference(&items));
        }

        #[test]
        fn a_merge_resolves_as_the_first_matching_success(
            older in prop::collection::vec(item(), 0..40),
            newer in prop::collection::vec(item(), 0..40),
        ) {
            let (older, newer) = (reference(&older), reference(&newer));
            let merged = Ledger::merge(&older, &newer);
            for (e, m) in older.errors.iter().zip(&merged.errors[newer.errors.len()..]) {
                let expect = e.resolved.clone().or_else(|| {
                    newer
                        .successes
                        .iter()
                        .find(|(key, _)| *key == full::error_key(&e.tool, &e.target))
                        .map(|(_, how)| how.clone())
                });
                prop_assert_eq!(&m.resolved, &expect);
            }
            prop_assert_eq!(merged.errors.len(), older.errors.len() + newer.errors.len());
        }
    }

    #[test]
    fn a_repeated_error_counts_until_a_success_then_starts_again() {
        let call = |id: &str| TranscriptItem::ToolCall {
            role: Role::Assistant,
            id: id.to_owned(),
            name: "bash".to_owned(),
            input: json!({"command": "cargo test -q"}),
        };
        let result = |id: &str, is_error: bool| TranscriptItem::ToolResult {
            id: id.to_owned(),
            name: None,
            is_error,
            text: if is_error { "error: x" } else { "ok" }.to_owned(),
        };
        let items = [
            call("1"),
            result("1", true),
            call("2"),
            result("2", true),
            call("3"),
            result("3", false),
            call("4"),
            result("4", true),
        ];
        let l = Ledger::from_items(&items);
        assert_eq!(l, reference(&items));
        let counts: Vec<(u32, bool)> = l
            .errors
            .iter()
            .map(|e| (e.count, e.resolved.is_some()))
            .collect();
        assert_eq!(counts, [(1, false), (2, true)]);
    }

    /// JSON as text may spell it: objects keep repeated keys, numbers keep their spelling.
    #[derive(Clone, Debug)]
    enum Json {
        Null,
        Bool(bool),
        Number(&'static str),
        String(String),
        Array(Vec<Json>),
        Object(Vec<(String, Json)>),
    }

    /// Writes `json` as text, choosing the whitespace and the escapes from `choices` (cycled):
    /// characters written plainly or as `\uXXXX`, `/` as `\/`, characters beyond the BMP as
    /// surrogate pairs, and, when `lone` is true, a lone surrogate escape in some strings.
    fn write_json(json: &Json, choices: &[u8], lone: bool, out: &mut String) {
        let mut at = 0usize;
        let mut choose = |n: u8| {
            at += 1;
            choices[at % choices.len()] % n
        };
        write_with(json, &mut choose, lone, out);
    }

    fn write_with(json: &Json, choose: &mut impl FnMut(u8) -> u8, lone: bool, out: &mut String) {
        out.push_str(["", " ", "\n", "\t ", "\r\n"][usize::from(choose(5))]);
        match json {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(n),
            Json::String(s) => write_string(s, choose, lone, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_with(item, choose, lone, out);
                }
                out.push_str(if choose(2) == 0 { "]" } else { " ]" });
            }
            Json::Object(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, choose, false, out);
                    out.push_str(if choose(2) == 0 { ":" } else { " : " });
                    write_with(v, choose, lone, out);
                }
                out.push_str(if choose(2) == 0 { "}" } else { "\n}" });
            }
        }
    }

    fn write_string(s: &str, choose: &mut impl FnMut(u8) -> u8, lone: bool, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            let escape = choose(4) == 0;
            match c {
                '"' => out.push_str(if escape { "\\u0022" } else { "\\\"" }),
                '\\' => out.push_str(if escape { "\\u005C" } else { "\\\\" }),
                '\n' => out.push_str(if escape { "\\u000a" } else { "\\n" }),
                '\t' => out.push_str("\\t"),
                '/' if escape => out.push_str("\\/"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c if escape => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04X}");
                    }
                }
                c => out.push(c),
            }
        }
        if lone && choose(3) == 0 {
            out.push_str(["\\ud800", "\\uDC01", "\\ud83d x"][usize::from(choose(3))]);
        }
        out.push('"');
    }

    /// Keys the readers look for, their near misses, and keys of big contents.
    fn keys() -> Vec<&'static str> {
        let others = [
            "patch",
            "input",
            "command",
            "cmd",
            "script",
            "todos",
            "plan",
            "status",
            "content",
            "step",
            "title",
            "text",
            "task",
            "Path",
            "oldText",
            "newText",
            "old_string",
            "new_string",
            "timeout",
            "",
        ];
        full::PATH_KEYS.iter().copied().chain(others).collect()
    }

    /// Strings that name files, commands, patches and todo states, with their whitespace.
    const STRINGS: &[&str] = &[
        "src/a.rs",
        " src/b.rs ",
        "",
        "  ",
        "view",
        "cargo test\nmore",
        "\n  cd x && make -j\n",
        "*** Begin Patch\n*** Update File: src/c.rs\n*** Add File: d.rs\n*** End Patch",
        "pending",
        "completed",
        "Done",
        "in_progress",
        "fix \"it\" \\ now/then",
        "é ü 😀",
        "tab\there\u{1}",
    ];

    /// Numbers as text, some beyond what an `f64` holds.
    const NUMBERS: &[&str] = &[
        "0",
        "-12",
        "3.25",
        "1e5",
        "1E+2",
        "-0.5e-3",
        "2e-400",
        "1e400",
        "123456789012345678901234567890",
    ];

    /// A string of the pools, or a big one (an edit's text, with escapes on every line).
    fn string() -> impl Strategy<Value = Json> {
        prop_oneof![
            6 => prop::sample::select(STRINGS).prop_map(|s| Json::String(s.to_owned())),
            1 => (1usize..3000, prop::sample::select(STRINGS)).prop_map(|(n, s)| {
                Json::String(format!("{}{s}", "line \"q\" \\ x\n".repeat(n / 14 + 1)))
            }),
        ]
    }

    /// Any JSON, with the keys the readers look for (and near misses) at every depth.
    fn json() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            1 => Just(Json::Null),
            1 => any::<bool>().prop_map(Json::Bool),
            2 => prop::sample::select(NUMBERS).prop_map(Json::Number),
            8 => string(),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                1 => prop::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
                3 => prop::collection::vec((prop::sample::select(keys()), inner), 0..6)
                    .prop_map(|entries| {
                        Json::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                    }),
            ]
        })
    }

    /// A todo list: objects with a status, a text under any of its keys and other fields, or
    /// plain strings.
    fn todos() -> impl Strategy<Value = Json> {
        let field = prop::sample::select(vec![
            "status", "content", "step", "title", "text", "task", "path", "note",
        ]);
        let text_key = prop::sample::select(TODO_TEXT_KEYS);
        let todo = prop_oneof![
            3 => (
                prop::option::of(string()),
                text_key,
                string(),
                prop::collection::vec((field, prop_oneof![4 => string(), 1 => json()]), 0..3),
                any::<bool>(),
            )
                .prop_map(|(status, text_key, text, more, status_last)| {
                    let mut entries = vec![(text_key.to_owned(), text)];
                    entries.extend(more.into_iter().map(|(k, v)| (k.to_owned(), v)));
                    if let Some(status) = status {
                        let at = if status_last { entries.len() } else { 0 };
                        entries.insert(at, ("status".to_owned(), status));
                    }
                    Json::Object(entries)
                }),
            1 => string(),
        ];
        prop::collection::vec(todo, 0..4).prop_map(Json::Array)
    }

    /// Tool arguments: mostly an object whose keys the readers look for, some holding todo
    /// lists, with repeated keys, nesting, strings in arrays and at the top, and big contents.
    fn arguments() -> impl Strategy<Value = Json> {
        let value = prop_oneof![3 => json(), 1 => todos()];
        let key = prop_oneof![
            2 => prop::sample::select(keys()),
            1 => prop::sample::select(vec!["todos", "plan", "command", "path"]),
        ];
        prop_oneof![
            1 => json(),
            4 => prop::collection::vec((key, value), 0..6).prop_map(
                |entries| {
                    Json::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                }
            ),
        ]
    }

    /// Tool names of every kind.
    const NAMES: &[&str] = &[
        "edit",
        "str_replace_editor",
        "mcp.Edit",
        "bash",
        "TodoWrite",
        "update_plan",
        "AskUserQuestion",
        "read",
        "grep",
    ];

    /// What the readers decide from `input`: for each name its kind, then the files, the
    /// command and the todo list. The walk's readers read `pruned`; the reference ones `full`.
    fn decisions(pruned: &Value) -> (Vec<Kind>, Vec<String>, Option<String>, Option<Vec<String>>) {
        let mut files: Vec<String> = Vec::new();
        paths(pruned, &mut |f| {
            if !files.iter().any(|x| x == f) {
                files.push(f.to_owned());
            }
        });
        (
            NAMES.iter().map(|n| kind(n, pruned)).collect(),
            files,
            command(pruned).map(str::to_owned),
            todo_list(pruned),
        )
    }

    fn full_decisions(
        full: &Value,
    ) -> (Vec<Kind>, Vec<String>, Option<String>, Option<Vec<String>>) {
        let mut files = Vec::new();
        full::paths(full, &mut files);
        let todos = full
            .get("todos")
            .or_else(|| full.get("plan"))
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(open_todo).collect());
        (
            NAMES.iter().map(|n| full::kind(n, full)).collect(),
            files,
            full::command(full),
            todos,
        )
    }

    /// Checks that the walk decides on the pruned arguments of `text` what the reference
    /// readers decide on its full value, and says whether the pruned reading was used.
    fn check_arguments(text: &str) -> Result<bool, TestCaseError> {
        let raw = RawJson::from_text(text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let full = raw.to_value();
        let Some(pruned) = args::read(text) else {
            return Ok(false);
        };
        prop_assert_eq!(
            decisions(&pruned),
            full_decisions(&full),
            "arguments {}",
            text
        );
        Ok(true)
    }

    proptest! {
        #[test]
        fn pruned_arguments_decide_what_the_full_value_decides(
            json in arguments(),
            choices in prop::collection::vec(any::<u8>(), 1..64),
            lone in prop::bool::weighted(0.2),
        ) {
            let mut text = String::new();
            write_json(&json, &choices, lone, &mut text);
            check_arguments(&text)?;
            // As `serde_json` writes it, the pruned reading is taken, unless a number may be
            // too big or a lone surrogate makes `serde_json` refuse the text.
            let compact = raw_compact(&text);
            let big = NUMBERS[6..].iter().any(|n| compact.contains(n));
            prop_assert!(check_arguments(&compact)? || big || lone, "{}", compact);
        }

        #[test]
        fn a_tool_kind_is_what_the_lowercase_name_decided(
            name in "(([a-zA-Z]{0,4}|mcp__x)[.:/]){0,2}(edit|Edit|BASH|Sh|todo_Write|AskUser|a|\
                     ask|my_Question|update_PLAN|str_replace_editor|Write_File|ÉDIT|[a-zA-Zé_]{0,8})",
            sub in prop::sample::select(vec![json!({"command": "view"}), json!({"command": "create"}),
                                             json!({"command": 1}), json!({})]),
        ) {
            prop_assert_eq!(kind(&name, &sub), full::kind(&name, &sub), "{}", name);
        }

        #[test]
        fn a_ledger_from_argument_texts_is_the_reference_ledger(
            calls in prop::collection::vec(
                (arguments(), prop::collection::vec(any::<u8>(), 1..16), prop::sample::select(NAMES),
                 0..4usize, any::<bool>(), prop::sample::select(vec!["error: x", "ok", "", "failed"])),
                0..12,
            ),
        ) {
            let mut messages = Vec::new();
            for (json, choices, name, id, is_error, result) in calls {
                let mut text = String::new();
                write_json(&json, &choices, false, &mut text);
                let raw = RawJson::from_text(text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                messages.push(Message::new(Role::Assistant, vec![ContentBlock::tool_use(format!("t{id}"), name, raw)]));
                messages.push(Message::new(Role::User, vec![ContentBlock::tool_result(format!("t{id}"), result, is_error)]));
            }
            let items = crate::transcript_items(&messages);
            prop_assert_eq!(Ledger::from_messages(&messages), reference(&items));
        }
    }

    /// `text` with the whitespace between tokens removed, as `serde_json` writes it.
    fn raw_compact(text: &str) -> String {
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(_) => return text.to_owned(),
        };
        value.to_string()
    }

    /// Texts on which the pruned reading must step aside, each read as the full parse reads it.
    #[test]
    fn unusual_arguments_are_left_to_the_full_parse() {
        let deep = format!("{}\"*** Add File: z\"{}", "[".repeat(130), "]".repeat(130));
        let fairly_deep = format!("{}{{\"path\":\"p\"}}{}", "[".repeat(101), "]".repeat(101));
        for text in [
            // Beyond `serde_json`'s nesting limit: the full value is the text as a string.
            deep.as_str(),
            // Out of an f64's range: the full value is the text as a string.
            r#"{"path":"a","n":1e400}"#,
            // A key `serde_json` reads as a raw value.
            r#"{"$serde_json::private::RawValue":"{\"path\":\"b\"}"}"#,
            // Deeper than this reading goes, though within `serde_json`'s limit.
            fairly_deep.as_str(),
            // A lone surrogate in a string that is kept, and in a key: the full parse reads it
            // as U+FFFD.
            r#"{"path":"a\ud800"}"#,
            r#"{"pa\ud800th":"a"}"#,
            // A lone surrogate in a string of an array (a shrunk case of the property).
            r#"["\u0070\u0065\u006E\u0064\u0069\u006E\u0067\uDC01"]"#,
        ] {
            assert_eq!(args::read(text), None, "{text}");
            check_arguments(text).unwrap();
        }
        for text in [
            "",
            "{",
            r#"{"path":"a",}"#,
            r#"[1,]"#,
            r#"{"path":"a"} x"#,
            "\"a\u{1}\"",
            r#""\x""#,
            r#""\u12G4""#,
            "01",
            "-",
            "1.",
            "1e",
            "nul",
        ] {
            assert_eq!(args::read(text), None, "{text}");
        }
    }

    /// Texts the pruned reading takes, with what it keeps: every key, number and container,
    /// and the strings the readers read; the other strings are `null`.
    #[test]
    fn pruned_arguments_keep_what_the_readers_read() {
        for (text, expect) in [
            (
                r#"{"path":" a.rs ","oldText":"x\n\"y\"","newText":"z","timeout":30}"#,
                json!({"path": " a.rs ", "oldText": null, "newText": null, "timeout": 30}),
            ),
            // A later repeat of a key wins, as in the full value.
            (r#"{"x":{"path":"p"},"x":"big"}"#, json!({"x": null})),
            (r#"{"path":"p","path":7}"#, json!({"path": 7})),
            (
                r#"{"todos":5,"plan":[{"step":"s","status":"pending","note":"n"}]}"#,
                json!({"todos": 5, "plan": [{"step": "s", "status": "pending", "note": null}]}),
            ),
            // Strings in arrays and at the top stay.
            (
                r#"["a",{"content":"c"}, ["b"]]"#,
                json!(["a", {"content": null}, ["b"]]),
            ),
            (r#""*** Add File: q""#, json!("*** Add File: q")),
            (
                r#"{"content":"big","command":["ls","-la"]}"#,
                json!({"content": null, "command": ["ls", "-la"]}),
            ),
            (
                r#"{"cmd":"a\u0041\/\t","n":-1.5E+3,"pair":"\ud83d\ude00"}"#,
                json!({"cmd": "aA/\t", "n": -1500.0, "pair": null}),
            ),
            (
                r#"{"path":"a","n":1e0005}"#,
                json!({"path": "a", "n": 100000.0}),
            ),
            // A string left out is skipped as text: a lone surrogate in it does not matter.
            (
                r#"{"content":"\ud800","command":["ls","-la"]}"#,
                json!({"content": null, "command": ["ls", "-la"]}),
            ),
            // Under a key whose strings are left out, objects and arrays are still read.
            (
                r#"{"edits":[{"file_path":"f","old_string":"o"}],"n":{"x":"y"}}"#,
                json!({"edits": [{"file_path": "f", "old_string": null}], "n": {"x": null}}),
            ),
        ] {
            assert_eq!(args::read(text), Some(expect), "{text}");
            check_arguments(text).unwrap();
        }
    }
}
