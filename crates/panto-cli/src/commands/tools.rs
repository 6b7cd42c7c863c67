//! The chat's tools: the answers to the calls of one reply. The recall calls are answered from
//! the session (`Driver::answer_recall`), one line each said ("recalled 3 passages for
//! 'migration error'"); a call of any other tool is answered with an error result, since panto
//! runs no other tool. The loop that sends them back is `send::answer_tools`.

use panto_compact::{ContentBlock, Message};

use crate::screen::say;

use super::CliDriver;

/// The most rounds of tool calls after one prompt: a model that keeps calling is stopped.
pub(super) const MAX_ROUNDS: usize = 8;

/// The tool results answering every call of `reply`, in order, with a line said for each.
pub(super) async fn results(driver: &CliDriver, reply: &Message) -> Vec<ContentBlock> {
    let mut recalled = driver.answer_recall(reply).await.into_iter();
    let mut out = Vec::new();
    for block in &reply.content {
        let ContentBlock::ToolUse(call) = block else {
            continue;
        };
        if call.name.as_str() == panto_compact::RECALL_TOOL {
            if let Some((id, answer)) = recalled.next() {
                say(&format!("panto: {}", answer.line));
                out.push(answer.to_block(&id));
            }
        } else {
            say(&format!(
                "panto: the model called {}, a tool panto does not run",
                call.name
            ));
            out.push(ContentBlock::tool_result(
                &call.id,
                format!(
                    "There is no tool named {}; the only tool is recall.",
                    call.name
                ),
                true,
            ));
        }
    }
    out
}
