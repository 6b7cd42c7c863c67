//! The walk over transcript items that derives a ledger: one step per item, oldest first, at a
//! cost about the size of the item whatever the length of the walk so far ([`Walk`]), and how
//! an error is told apart and matched with a later success (`error_key`, `success`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::rc::Rc;

use panto_model::{CLEARED_IMAGE_PREFIX, CLEARED_PREFIX, CallIndex, RawJson, Role};
use serde_json::Value;

use super::ids::Tally;
use super::scan::Origin;
use super::tools::{Kind, command, kind, paths, todo_list};
use super::{Ledger, LedgerError, clip, code_span, is_request, one_line, unique};
use crate::item::{ItemView, ToolInput};

/// What an error is about, for matching a later success: the program of a command (its words up
/// to the first option, pipe or redirection, at most three, after any `cd DIR &&`), else the
/// target itself.
pub(super) fn error_key(tool: &str, target: &str) -> String {
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
pub(super) fn success(tool: &str, target: &str) -> String {
    if target.is_empty() {
        code_span(tool)
    } else {
        format!("{} on {}", code_span(tool), code_span(&clip(target, 80)))
    }
}

/// The most telling line of an error output: the first that mentions an error or a failure,
/// else the first non-empty one.
pub(super) fn error_message(text: &str) -> String {
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
pub(super) struct Walk<'a> {
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
    /// The identifiers of every item.
    ids: Tally,
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
    pub(super) fn item(&mut self, item: ItemView<'a>) {
        match item {
            ItemView::Text { role, text } => self.text(role, text),
            ItemView::ToolCall {
                id, name, input, ..
            } => match input {
                ToolInput::Value(input) => self.call(id, name, input),
                ToolInput::Text(raw) => self.call_json(id, name, raw),
            },
            // A transcript item carries no `cleared` mark: a placeholder is known by its text.
            ItemView::ToolResult { text, .. } if is_placeholder(&text) => {}
            ItemView::ToolResult {
                id,
                name,
                is_error,
                text,
            } => self.result(id, name, is_error, || text),
            _ => {}
        }
    }

    /// A text block of `role`: a request when a user's, and its identifiers. An image's
    /// placeholder is the clearing's words, not the user's: nothing.
    pub(super) fn text(&mut self, role: Role, text: &str) {
        if text.starts_with(CLEARED_IMAGE_PREFIX) {
            return;
        }
        if role == Role::User {
            self.request(text);
        }
        self.said(text);
    }

    /// A user's or assistant's text: its identifiers.
    pub(super) fn said(&mut self, text: &str) {
        self.ids.text(text, Origin::Said);
        self.ids.next_item();
    }

    pub(super) fn request(&mut self, text: &str) {
        if is_request(text) {
            self.ledger.requests.push(text.trim().to_owned());
        }
    }

    /// A call whose arguments are JSON text: its identifiers and what the ledger reads of it
    /// from one parse that leaves out the strings the ledger never reads, when that is exact
    /// ([`Tally::json`]), else from the parsed value.
    pub(super) fn call_json(&mut self, id: &'a str, name: &'a str, input: &RawJson) {
        match self.ids.json(input.json()) {
            Some(value) => self.read_call(id, name, &value),
            None => self.call(id, name, &input.to_value()),
        }
    }

    /// A call whose arguments are a value.
    fn call(&mut self, id: &'a str, name: &'a str, input: &Value) {
        self.ids.value(input);
        self.read_call(id, name, input);
    }

    /// What the ledger reads of a call: its files, command, todo list, and its target.
    fn read_call(&mut self, id: &'a str, name: &'a str, input: &Value) {
        self.ids.next_item();
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

    /// A result: its identifiers, and what it says of its call.
    pub(super) fn result<'t>(
        &mut self,
        id: &str,
        name: Option<&'a str>,
        is_error: bool,
        text: impl FnOnce() -> Cow<'t, str>,
    ) {
        let text = text();
        let origin = if is_error {
            Origin::Failed
        } else {
            Origin::Output
        };
        self.ids.text(&text, origin);
        self.ids.next_item();
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
            let message = error_message(&text);
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

    pub(super) fn finish(self) -> Ledger {
        let names = &self.names;
        let mut l = self.ledger;
        l.identifiers = self.ids.finish();
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

/// Whether a tool result's text is a placeholder a clearing left (it starts with
/// [`CLEARED_PREFIX`]): panto's words, not the tool's. The clearing's own ledger recorded the
/// original, and a summary after it merges that; reading the placeholder would add its size as
/// an identifier and its failure a second time.
pub(super) fn is_placeholder(text: &str) -> bool {
    text.starts_with(CLEARED_PREFIX)
}
