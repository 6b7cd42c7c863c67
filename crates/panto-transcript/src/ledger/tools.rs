//! The tool tables and the readers of a call's arguments: what kind of tool a call is, from its
//! name ([`Kind`]: modifies files, runs a shell command, writes a todo list, asks a question),
//! the keys under which arguments name files, commands and todos, and the readers that take
//! those out of the arguments (`paths`, `command`, `todo_list`).
//!
//! The readers treat any value that is not a string as absent, so they decide on the pruned
//! arguments of `args.rs` what they decide on the full value.

use serde_json::Value;

/// What kind of tool a call is, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Modify,
    Shell,
    Todo,
    Question,
    Other,
}

/// Names (their last segment, ASCII case aside) of the tools that modify files.
pub(super) const MODIFY: &[&str] = &[
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
pub(super) const SHELL: &[&str] = &[
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

pub(super) fn kind(name: &str, input: &Value) -> Kind {
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
pub(super) fn is_path_key(key: &str) -> bool {
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
pub(super) fn is_patch_key(key: &str) -> bool {
    matches!(key, "patch" | "input")
}

/// Keys of the command a shell call runs, at the top level, in order of preference.
pub(super) const COMMAND_KEYS: &[&str] = &["command", "cmd", "script"];

/// Keys of a todo call's list, at the top level, in order of preference.
pub(super) const TODO_LIST_KEYS: &[&str] = &["todos", "plan"];

/// The key of a todo's status.
pub(super) const TODO_STATUS: &str = "status";

/// Keys of a todo's text, in order of preference.
pub(super) const TODO_TEXT_KEYS: &[&str] = &["content", "step", "title", "text", "task"];

/// Calls `found` with each file or folder `input` names, in the order met (repeats included).
pub(super) fn paths<'v>(input: &'v Value, found: &mut impl FnMut(&'v str)) {
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
pub(super) fn command(input: &Value) -> Option<&str> {
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
pub(super) fn todo_list(input: &Value) -> Option<Vec<String>> {
    let list = TODO_LIST_KEYS
        .iter()
        .find_map(|k| input.get(*k))
        .and_then(Value::as_array)?;
    Some(list.iter().filter_map(open_todo).collect())
}

/// The text of a todo that is not done: `{"content"|"step"|"title", "status"}`.
pub(super) fn open_todo(todo: &Value) -> Option<String> {
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
