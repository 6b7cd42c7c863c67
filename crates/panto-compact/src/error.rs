//! The error type of the crate.

use std::fmt;
use std::path::PathBuf;

use panto_model::Message;
use panto_provider::ProviderError;
use panto_store::StoreError;

use crate::attempt::AttemptFailure;
use crate::fold::FoldError;
use crate::plan::{NotSmaller, NothingToCompact};
use crate::report::CompactionReport;
use crate::window::Window;

/// Everything that can go wrong in this crate.
///
/// Whenever a variant is returned by a compaction, nothing was written to the session.
#[derive(Debug)]
#[non_exhaustive]
pub enum CompactError {
    /// A COMPACTION.md override exists but cannot be used (unreadable, a directory, not UTF-8).
    PromptUnreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
        /// The operating-system error behind `reason`, when there is one.
        cause: Option<std::io::Error>,
    },
    /// A COMPACTION.md override is empty or whitespace only; an empty system prompt cannot work.
    PromptEmpty {
        /// The file.
        path: PathBuf,
    },
    /// The only model tried (the active one, no `compaction_model` configured) failed.
    Compaction {
        /// The model that was asked.
        model: String,
        /// Why it failed.
        cause: AttemptFailure,
    },
    /// `compaction_model` failed, and so did the one retry with the active model.
    BothModelsFailed {
        /// The configured compaction model.
        compaction_model: String,
        /// Why it failed.
        first: Box<AttemptFailure>,
        /// The active model, tried second.
        active_model: String,
        /// Why it failed too.
        second: Box<AttemptFailure>,
    },
    /// No compaction request fits the window: the compaction prompt and the summary it must
    /// carry leave no room for the conversation.
    NoRoom(FoldError),
    /// One turn of the summarized prefix does not fit any compaction request even with every
    /// item body elided (a turn of very many items, say).
    TurnTooLarge {
        /// The turn's estimated transcript tokens.
        tokens: u64,
        /// The room a request had for it.
        capacity: u64,
    },
    /// A compaction request still overflowed after the fold shrank its requests
    /// [`crate::MAX_SHRINKS`] times; nothing was written.
    FoldOverflow {
        /// The step that did not fit, counting from 1.
        step: usize,
        /// The steps planned.
        steps: usize,
        /// How often the fold had shrunk its requests.
        shrinks: usize,
        /// panto's estimate of the last rejected request's input.
        estimated_tokens: u64,
        /// The limit the fold was fitting when it gave up, never above the last request
        /// rejected (its input and output less a token): a window found only by refusals lies
        /// below that request, whatever the least limit the fold could plan in.
        limit: Option<u64>,
        /// The provider's last answer.
        error: ProviderError,
    },
    /// The summary was obtained, but the compaction would not make the conversation smaller
    /// (see [`NotSmaller`]); it was not written. A run made
    /// [`CompactRun::with_force`](crate::CompactRun::with_force) writes it anyway. During
    /// overflow recovery it is the cause of [`CompactError::OverflowCompactionFailed`]: a
    /// request that cannot be made smaller is not sent again.
    NotSmaller(NotSmaller),
    /// The store refused the append of a compaction (another writer appended meanwhile:
    /// [`StoreError::Conflict`]; or it failed); nothing of that compaction is in effect. From
    /// [`Driver::send`](crate::Driver::send), the new messages are stored: it was the
    /// compaction ahead of the request that lost ([`Conflict::CompactionLost`]).
    Store(StoreError),
    /// The new messages given to [`Driver::send`](crate::Driver::send) were not stored: the
    /// store refused their append (a [`StoreError::Conflict`] when another writer appended since
    /// the driver last saw the session: [`Conflict::NotStored`]). Nothing was written or sent;
    /// after [`Driver::reload`](crate::Driver::reload), send them again.
    NotStored(StoreError),
    /// The reply was obtained but could not be appended to the session (another writer
    /// appended while the model answered, or the store failed). The reply is handed back, not
    /// dropped: the caller decides (for example [`Driver::reload`](crate::Driver::reload),
    /// then [`Driver::append`](crate::Driver::append) it). A compaction that ran before it
    /// stays written.
    ReplyNotAppended {
        /// The reply, as it would have been appended (with its id).
        reply: Box<Message>,
        /// The compaction that overflow recovery wrote before the reply, if any.
        compaction: Option<Box<CompactionReport>>,
        /// Why the append failed.
        error: StoreError,
    },
    /// A request failed with an error that compaction cannot help; passed through untouched.
    Provider(ProviderError),
    /// A request overflowed and the compaction meant to recover from it failed.
    OverflowCompactionFailed {
        /// The overflow the request ended with.
        overflow: ProviderError,
        /// Why compaction failed.
        compaction: Box<CompactError>,
    },
    /// A request overflowed and there was nothing to compact: the in-flight turn is all there is.
    OverflowNothingToCompact {
        /// The overflow the request ended with.
        overflow: ProviderError,
        /// The plan's verdict.
        nothing: NothingToCompact,
    },
    /// After the overflow compaction, the rebuilt request is estimated no smaller than the one
    /// that overflowed, or above the known limit: what the compaction kept verbatim (the
    /// in-flight turn, with the turns kept beside it and other writers' prompts that joined
    /// it) is too large, so the retry is not sent. The compaction stays written.
    OverflowNoProgress {
        /// The overflow the first request ended with.
        overflow: ProviderError,
        /// panto's estimate of the rebuilt request.
        estimated_tokens: u64,
        /// panto's estimate of the request that overflowed.
        overflowed_tokens: u64,
        /// The limit known, in panto's estimates.
        limit: Option<u64>,
        /// The compaction was a clearing alone (its report's `strategy` is `Clear`): it
        /// summarized nothing, so what is too large is the text it left verbatim, not
        /// necessarily the newest turn.
        by_clearing: bool,
        /// The compaction kept the newest turn alone (no older turn, no other writer's
        /// message after it): then it is that turn that is too large.
        newest_turn_alone: bool,
        /// The room for the reply counted against `limit`, in tokens: the reply budget when
        /// the server counts the output (within what the window leaves), else 0. When the
        /// request fits the limit without it, it is that room that does not fit
        /// ([`CompactError::reply_room_overflows`]).
        reply_room: u32,
    },
    /// There was nothing to compact ahead of a request: the cause of
    /// [`CompactError::ExceedsWindow`] when that request is too large anyway.
    NothingToCompact(NothingToCompact),
    /// [`undo`](crate::undo()) found nothing it can undo: why.
    NothingToUndo(String),
    /// A clearing found nothing worth clearing in the older turns: no tool result larger than
    /// a placeholder, no image, no thinking before the tool loop in flight.
    NothingToClear {
        /// The messages of the older turns it looked at.
        messages: usize,
    },
    /// With proactive compaction on
    /// ([`Driver::with_auto_compact`](crate::Driver::with_auto_compact)): the next request is
    /// estimated larger than the model's window, after the compaction ahead of it or because
    /// that compaction wrote nothing, so it was not sent. The new messages stay in the session.
    ExceedsWindow {
        /// panto's estimate of the request (system prompt, tools and messages).
        estimated_tokens: u64,
        /// The window, with its source.
        window: Window,
        /// Why compacting ahead did not make it fit, when it wrote nothing.
        compaction: Option<Box<CompactError>>,
        /// What it wrote was a clearing alone (see [`CompactError::OverflowNoProgress`]).
        by_clearing: bool,
    },
    /// The request still overflowed after compaction; it is not compacted again.
    OverflowAfterCompaction {
        /// The error of the retry.
        error: ProviderError,
        /// panto's estimate of the compacted request (system prompt and messages).
        estimated_tokens: u64,
        /// The compaction was a clearing alone (see [`CompactError::OverflowNoProgress`]).
        by_clearing: bool,
        /// The output budget the retry asked for, in tokens: beside the input on a server
        /// that counts the output, it may be what does not fit.
        reply_tokens: u32,
    },
}

// Written out rather than derived: `source()` hands out the boxed inner errors themselves
// (a `CompactError`, an `AttemptFailure`), which a derive would hand out as their boxes.
impl CompactError {
    /// Whether the last model asked answered, and its summary failed panto's checks (as
    /// opposed to a provider error or a window too small): a fold step that fails so can go
    /// on from panto's record of its turns.
    pub(crate) fn is_rejected_answer(&self) -> bool {
        match self {
            CompactError::Compaction { cause, .. } => cause.is_rejected_summary(),
            CompactError::BothModelsFailed { second, .. } => second.is_rejected_summary(),
            _ => false,
        }
    }
}

impl fmt::Display for CompactError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompactError::PromptUnreadable { path, reason, .. } => {
                write!(
                    f,
                    "cannot read compaction prompt {}: {reason}",
                    path.display()
                )
            }
            CompactError::PromptEmpty { path } => write!(
                f,
                "compaction prompt {} is empty; write a prompt in it or delete it to use the built-in one",
                path.display()
            ),
            CompactError::Compaction { model, cause } => {
                write!(f, "compaction with {model} failed: {cause}")
            }
            CompactError::BothModelsFailed {
                compaction_model,
                first,
                active_model,
                second,
            } => write!(
                f,
                "compaction failed with the compaction model {compaction_model} ({first}) and with the active model {active_model} ({second})"
            ),
            CompactError::NoRoom(e) => e.fmt(f),
            CompactError::TurnTooLarge { tokens, capacity } => write!(
                f,
                "a turn of about {tokens} tokens does not fit a compaction request (room for about {capacity}) even with its item bodies elided"
            ),
            CompactError::FoldOverflow {
                step,
                steps,
                shrinks,
                estimated_tokens,
                limit,
                error,
            } => write!(
                f,
                "compaction request {step} of {steps} (about {estimated_tokens} tokens{}) was rejected as too large, also after {shrinks} smaller tries: {error}",
                LimitNote(*limit)
            ),
            CompactError::NotSmaller(n) => n.fmt(f),
            CompactError::NothingToCompact(n) => n.fmt(f),
            CompactError::NothingToUndo(why) => write!(f, "nothing to undo: {why}"),
            CompactError::NothingToClear { messages } => write!(
                f,
                "nothing to clear: the {messages} older messages hold no tool result larger than a placeholder, no image and no thinking of a finished tool loop"
            ),
            CompactError::Store(e) => write!(f, "could not write to the session: {e}"),
            CompactError::NotStored(e) => write!(
                f,
                "the new message was not written to the session, and nothing was sent: {e}"
            ),
            CompactError::ReplyNotAppended { error, .. } => write!(
                f,
                "the reply could not be written to the session, so it was not added to the conversation: {error}"
            ),
            CompactError::Provider(e) => e.fmt(f),
            CompactError::OverflowCompactionFailed {
                overflow,
                compaction,
            } => match compaction.as_ref() {
                CompactError::NotSmaller(n) => write!(
                    f,
                    "the request was too large for the model ({overflow}), and compacting cannot make it smaller ({n}): nothing was written, and the request was not sent again"
                ),
                compaction => write!(
                    f,
                    "the request overflowed the context window ({overflow}) and compaction failed: {compaction}"
                ),
            },
            CompactError::OverflowNothingToCompact { overflow, nothing } => write!(
                f,
                "the request overflowed the context window ({overflow}) and {nothing}"
            ),
            CompactError::OverflowNoProgress {
                estimated_tokens,
                overflowed_tokens,
                limit,
                by_clearing,
                newest_turn_alone,
                reply_room,
                ..
            } => {
                let reply;
                let (cause, after) = if self.reply_room_overflows() {
                    let after = if *by_clearing {
                        "clearing"
                    } else {
                        "compaction"
                    };
                    reply = format!(
                        "the room kept for the reply ({reply_room} tokens) does not fit beside what the {after} kept"
                    );
                    (reply.as_str(), after)
                } else if *by_clearing {
                    (CLEARED_TEXT_TOO_LARGE, "clearing")
                } else if *newest_turn_alone {
                    (
                        "the newest turn is too large for the context window on its own",
                        "compaction",
                    )
                } else {
                    (
                        "what the compaction kept verbatim (the newest turn with the turns or other writers' messages kept beside it) is too large for the context window",
                        "compaction",
                    )
                };
                write!(
                    f,
                    "{cause}: after {after} the request is still about {estimated_tokens} tokens (it was about {overflowed_tokens}{}), so it was not sent again",
                    LimitNote(*limit)
                )
            }
            CompactError::ExceedsWindow {
                estimated_tokens,
                window,
                compaction,
                by_clearing,
            } => {
                write!(
                    f,
                    "the next request is about {estimated_tokens} tokens, more than the model's window of {} tokens ({}), so it was not sent",
                    window.tokens,
                    window.source.describe()
                )?;
                match compaction {
                    Some(c) => write!(f, "; compacting first wrote nothing: {c}"),
                    None if *by_clearing => write!(f, "; {CLEARED_TEXT_TOO_LARGE}"),
                    None => f.write_str("; the newest turn is too large on its own"),
                }
            }
            CompactError::OverflowAfterCompaction {
                estimated_tokens,
                error,
                by_clearing,
                reply_tokens,
            } => {
                write!(
                    f,
                    "the request still overflows after compaction: about {estimated_tokens} tokens remain"
                )?;
                let numbers = error.token_numbers().filter(|n| !n.is_empty());
                if let Some(numbers) = numbers {
                    write!(f, " (the provider stated {numbers})")?;
                }
                if self.reply_room_overflows() {
                    f.write_str("; the input fits, the room asked for the reply does not")
                } else if *by_clearing {
                    write!(f, "; {CLEARED_TEXT_TOO_LARGE}")
                } else if self.input_alone_overflows() {
                    f.write_str("; the newest turn may be too large on its own")
                } else {
                    // The numbers do not say which part is over: the output counts on many
                    // servers, and its budget may be half a small window.
                    write!(
                        f,
                        "; the newest turn may be too large on its own, or the {reply_tokens} tokens asked for the reply too many beside it"
                    )
                }
            }
        }
    }
}

impl std::error::Error for CompactError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CompactError::PromptUnreadable { cause, .. } => cause
                .as_ref()
                .map(|e| e as &(dyn std::error::Error + 'static)),
            CompactError::PromptEmpty { .. }
            | CompactError::TurnTooLarge { .. }
            | CompactError::NotSmaller(_)
            | CompactError::NothingToCompact(_)
            | CompactError::NothingToUndo(_)
            | CompactError::NothingToClear { .. } => None,
            CompactError::Compaction { cause, .. } => Some(cause),
            CompactError::BothModelsFailed { second, .. } => Some(second.as_ref()),
            // The two pass-through variants are their inner error: they have its causes.
            CompactError::NoRoom(e) => e.source(),
            CompactError::Provider(e) => e.source(),
            CompactError::Store(e)
            | CompactError::NotStored(e)
            | CompactError::ReplyNotAppended { error: e, .. } => Some(e),
            CompactError::OverflowCompactionFailed { compaction, .. } => Some(compaction.as_ref()),
            CompactError::ExceedsWindow { compaction, .. } => compaction
                .as_deref()
                .map(|c| c as &(dyn std::error::Error + 'static)),
            CompactError::FoldOverflow { error, .. }
            | CompactError::OverflowAfterCompaction { error, .. } => Some(error),
            CompactError::OverflowNothingToCompact { overflow, .. }
            | CompactError::OverflowNoProgress { overflow, .. } => Some(overflow),
        }
    }
}

impl CompactError {
    /// Whether the request after an overflow's compaction fits the limit, and it is the room
    /// for the reply counted against that limit that does not: the limit and the output the
    /// retry's overflow stated ([`TokenNumbers::output_overflows`]), or, for a retry not sent,
    /// panto's estimate within the limit known and over it with the reply's room. A smaller
    /// reply budget would have fitted, a shorter turn is not needed.
    ///
    /// [`TokenNumbers::output_overflows`]: panto_provider::TokenNumbers::output_overflows
    pub fn reply_room_overflows(&self) -> bool {
        match self {
            CompactError::OverflowAfterCompaction { error, .. } => {
                error.token_numbers().is_some_and(|n| n.output_overflows())
            }
            CompactError::OverflowNoProgress {
                estimated_tokens,
                overflowed_tokens,
                limit: Some(limit),
                reply_room,
                ..
            } => {
                estimated_tokens < overflowed_tokens
                    && estimated_tokens < limit
                    && estimated_tokens.saturating_add(u64::from(*reply_room)) > *limit
            }
            _ => false,
        }
    }

    /// Whether the retry's overflow stated numbers that put its input alone at the limit or
    /// over it ([`TokenNumbers::input_over_limit`]): then it is the request, not the reply's
    /// room. Neither this nor [`CompactError::reply_room_overflows`] holds when the provider
    /// stated no numbers, or numbers that contradict its refusal.
    ///
    /// [`TokenNumbers::input_over_limit`]: panto_provider::TokenNumbers::input_over_limit
    pub fn input_alone_overflows(&self) -> bool {
        match self {
            CompactError::OverflowAfterCompaction { error, .. } => {
                error.token_numbers().is_some_and(|n| n.input_over_limit())
            }
            _ => false,
        }
    }

    /// Whether the compaction failed because no model wrote a usable summary (provider
    /// failures, rejected summaries, requests that never fitted), as opposed to the prompt, the
    /// log or the conversation itself.
    pub fn no_summary_obtained(&self) -> bool {
        matches!(
            self,
            CompactError::Compaction { .. }
                | CompactError::BothModelsFailed { .. }
                | CompactError::FoldOverflow { .. }
                | CompactError::NoRoom(_)
                | CompactError::TurnTooLarge { .. }
        )
    }
}

/// What of a turn the session holds when another writer's append made
/// [`Driver::send`](crate::Driver::send) fail ([`CompactError::conflict`]). No lock is held
/// while a model answers, so two writers of one session meet this way; what to do depends on
/// whether the new messages are stored. [`Driver::send_shared`](crate::Driver::send_shared)
/// does this, with pauses that let every writer have its turn; by hand:
///
/// ```no_run
/// # async fn turn<S: panto_compact::Store>(
/// #     agent: &mut panto_compact::Driver<S>,
/// #     prompt: panto_compact::Message,
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// use panto_compact::Conflict;
///
/// let mut new = vec![prompt];
/// loop {
///     match agent.send(new.clone(), &mut |_| {}).await {
///         Ok(_reply) => break,
///         Err(e) => match e.conflict() {
///             // Nothing was written: catch up, and send the same messages again.
///             Some(Conflict::NotStored) => {}
///             // The messages are stored: sending them again would store them twice.
///             Some(_) => new.clear(),
///             None => return Err(e.into()),
///         },
///     }
///     agent.reload().await?;
///     if new.is_empty() && !agent.awaits_reply() {
///         break; // another writer's reply answered them
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Conflict {
    /// The new messages were not stored and nothing was sent ([`CompactError::NotStored`]):
    /// after [`Driver::reload`](crate::Driver::reload), send them again.
    NotStored,
    /// The new messages are stored; a compaction (ahead of the request, or after an overflow)
    /// lost to another writer, nothing of it is in effect, and the request was not sent (or
    /// not sent again). After a reload, send nothing new
    /// ([`Driver::awaits_reply`](crate::Driver::awaits_reply) says whether another writer
    /// answered already): sending the messages again would store them twice.
    CompactionLost,
    /// The new messages are stored and the model answered, but another writer appended first:
    /// the reply is handed back ([`CompactError::ReplyNotAppended`]), never written. After a
    /// reload, send nothing new (it answered a conversation that has changed since), or append
    /// the reply as it is.
    ReplyLost,
}

impl Conflict {
    /// Whether the new messages of the turn are in the session.
    pub fn prompt_stored(self) -> bool {
        !matches!(self, Conflict::NotStored)
    }
}

impl CompactError {
    /// Whether, and how, another writer's append made this fail: `None` when it is not a
    /// conflict (a store that failed, a provider error, ...).
    pub fn conflict(&self) -> Option<Conflict> {
        match self {
            CompactError::NotStored(e) if e.is_conflict() => Some(Conflict::NotStored),
            CompactError::Store(e) if e.is_conflict() => Some(Conflict::CompactionLost),
            CompactError::ReplyNotAppended { error, .. } if error.is_conflict() => {
                Some(Conflict::ReplyLost)
            }
            CompactError::OverflowCompactionFailed { compaction, .. } => compaction
                .conflict()
                .filter(|c| *c == Conflict::CompactionLost),
            _ => None,
        }
    }
}

/// What is too large after a clearing alone that did not fit: it summarizes nothing.
const CLEARED_TEXT_TOO_LARGE: &str = "clearing old tool output is not enough: the conversation's text it keeps verbatim (prompts, answers, calls and placeholders) is too large for the window, and a clearing summarizes none of it (`compaction_strategy = \"tiered\"` or `\"summary\"` would)";

struct LimitNote(Option<u64>);

impl fmt::Display for LimitNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(l) => write!(f, ", limit about {l}"),
            None => Ok(()),
        }
    }
}
