//! Protocol validation: problems in a message sequence, returned as values.
//!
//! Validation never fails; it reports. Providers reject most of these problems, so a caller
//! decides whether to repair them on the wire (the adapters answer an unanswered call with a
//! synthetic error result) or to show them to the user.

use std::collections::HashMap;
use std::fmt;

use crate::message::{ContentBlock, Message, Role};

/// One protocol problem. Indices are positions in the validated message slice.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A tool result whose call does not come before it.
    OrphanResult {
        /// The message holding the result.
        message: usize,
        /// The id it answers.
        tool_use_id: String,
    },
    /// A tool call that no later message answers.
    UnansweredCall {
        /// The message holding the call.
        message: usize,
        /// The call id.
        tool_use_id: String,
    },
    /// Two tool calls with the same id.
    DuplicateToolId {
        /// The message holding the first call.
        first: usize,
        /// The message holding the repeated one.
        second: usize,
        /// The repeated id.
        tool_use_id: String,
    },
    /// A call answered more than once.
    DuplicateResult {
        /// The message holding the second answer.
        message: usize,
        /// The call id.
        tool_use_id: String,
    },
    /// A message with no content blocks.
    EmptyContent {
        /// The message.
        message: usize,
    },
    /// A block in a message of the wrong role: a tool call from the user, a tool result or a
    /// compaction from the assistant.
    MisplacedBlock {
        /// The message.
        message: usize,
        /// The block's position in `content`.
        block: usize,
        /// The block type.
        kind: String,
        /// The role it appeared in.
        role: Role,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::OrphanResult {
                message,
                tool_use_id,
            } => write!(
                f,
                "message {message}: tool result for `{tool_use_id}` has no earlier tool call"
            ),
            Problem::UnansweredCall {
                message,
                tool_use_id,
            } => write!(
                f,
                "message {message}: tool call `{tool_use_id}` is never answered"
            ),
            Problem::DuplicateToolId {
                first,
                second,
                tool_use_id,
            } => write!(
                f,
                "message {second}: tool call id `{tool_use_id}` was already used in message {first}"
            ),
            Problem::DuplicateResult {
                message,
                tool_use_id,
            } => write!(
                f,
                "message {message}: tool call `{tool_use_id}` is answered more than once"
            ),
            Problem::EmptyContent { message } => write!(f, "message {message}: empty content"),
            Problem::MisplacedBlock {
                message,
                block,
                kind,
                role,
            } => write!(
                f,
                "message {message}: content[{block}]: a `{kind}` block cannot come from the {}",
                role.as_str()
            ),
        }
    }
}

/// Finds every protocol problem in `messages`, in message order.
pub fn validate(messages: &[Message]) -> Vec<Problem> {
    let mut problems = Vec::new();
    // id -> (message of the latest call, answered yet)
    let mut calls: HashMap<&str, (usize, bool)> = HashMap::new();
    let mut order: Vec<(usize, &str)> = Vec::new();
    for (i, msg) in messages.iter().enumerate() {
        if msg.content.is_empty() {
            problems.push(Problem::EmptyContent { message: i });
        }
        for (b, block) in msg.content.iter().enumerate() {
            let misplaced = matches!(
                (block, msg.role),
                (ContentBlock::ToolUse(_), Role::User)
                    | (ContentBlock::ToolResult(_), Role::Assistant)
                    | (ContentBlock::Compaction(_), Role::Assistant)
            );
            if misplaced {
                problems.push(Problem::MisplacedBlock {
                    message: i,
                    block: b,
                    kind: block.type_name().to_owned(),
                    role: msg.role,
                });
            }
        }
        for id in msg.tool_result_ids() {
            match calls.get_mut(id) {
                Some((_, answered)) if *answered => problems.push(Problem::DuplicateResult {
                    message: i,
                    tool_use_id: id.to_owned(),
                }),
                Some((_, answered)) => *answered = true,
                None => problems.push(Problem::OrphanResult {
                    message: i,
                    tool_use_id: id.to_owned(),
                }),
            }
        }
        for id in msg.tool_use_ids() {
            if let Some((first, _)) = calls.get(id) {
                problems.push(Problem::DuplicateToolId {
                    first: *first,
                    second: i,
                    tool_use_id: id.to_owned(),
                });
            }
            calls.insert(id, (i, false));
            order.push((i, id));
        }
    }
    // Unanswered calls, reported at their latest occurrence, in call order.
    for (i, id) in order {
        if let Some((latest, answered)) = calls.get(id)
            && *latest == i
            && !*answered
        {
            problems.push(Problem::UnansweredCall {
                message: i,
                tool_use_id: id.to_owned(),
            });
        }
    }
    problems.sort_by_key(problem_message);
    problems
}

fn problem_message(p: &Problem) -> usize {
    match p {
        Problem::OrphanResult { message, .. }
        | Problem::UnansweredCall { message, .. }
        | Problem::DuplicateResult { message, .. }
        | Problem::EmptyContent { message }
        | Problem::MisplacedBlock { message, .. } => *message,
        Problem::DuplicateToolId { second, .. } => *second,
    }
}
