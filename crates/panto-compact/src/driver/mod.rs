//! The conversation driver: compact ahead of a request when asked to, send it, and on context
//! overflow (or a reply the provider truncated silently) compact once and retry once.
//!
//! One file per job: the type, its settings and the send loop (`mod.rs`); the window and
//! compacting ahead of a request (`ahead.rs`); overflow recovery, one compaction and one retry
//! (`recover.rs`).

mod ahead;
mod cost;
mod recall;
mod recover;
mod shared;

use panto_model::{EffectiveContext, Entry, IdKind, Message};
use panto_provider::{EventSink, ProviderError, Request, RequestOptions, ToolSpec};
use panto_size::{RequestEstimate, Truncation, estimate, silent_truncation};
use panto_store::{Loaded, SessionLog, Store, StoreError, Warning};
use panto_transcript::Ledger;
use tracing::{Instrument, info_span};

use crate::compactor::Compactor;
use crate::config::{CompactRun, Conversation, DEFAULT_MAX_OUTPUT_TOKENS};
use crate::error::CompactError;
use crate::ledger::previous_ledger;
use crate::report::{CompactOutcome, CompactionReport};
use crate::undo::Undone;
use crate::window::KnownWindows;

pub use ahead::NextRequest;
pub use cost::{COLD_SHARE, CacheAware, Clock, Spent};
pub use shared::{SharedReply, SharedTurns};

/// The answer to [`Driver::send`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Reply {
    /// The assistant message, as appended to the log.
    pub message: Message,
    /// The compaction that overflow recovery ran before the reply, if any.
    pub compaction: Option<CompactionReport>,
    /// The compaction the driver ran ahead of the request (proactive compaction, trigger
    /// `auto`), if any.
    pub compacted_ahead: Option<CompactionReport>,
    /// When the first answer came from a request the provider truncated silently (it was
    /// discarded, and the request compacted and sent again): the provider's count and the
    /// least the request could honestly count.
    pub truncation: Option<Truncation>,
}

impl Reply {
    /// The reply `message`, with the compaction that overflow recovery ran before it, if any.
    pub fn new(message: Message, compaction: Option<CompactionReport>) -> Reply {
        Reply {
            message,
            compaction,
            compacted_ahead: None,
            truncation: None,
        }
    }
}

/// Drives a conversation over one session of a [`Store`] (through its [`SessionLog`]): keeps
/// the effective context in step with the log, sends requests with the active model, and
/// recovers from context overflow.
///
/// Invariants:
/// - new messages are appended to the log before the request is sent, so a failure never
///   loses them; the assistant reply is appended only after success, and when that append
///   fails the reply is handed back ([`CompactError::ReplyNotAppended`]), never dropped;
/// - every append is conditional on the session as this driver last saw it: another writer's
///   entries are a conflict ([`StoreError::Conflict`]), never interleaved with this one's;
///   [`Driver::reload`] catches up, and [`Driver::send_shared`] takes turns with the others;
/// - at most one compaction ahead of the request (when proactive compaction is on), and at
///   most one compaction and one retry after it, whatever the provider answers;
/// - with proactive compaction on and a window known, no request estimated larger than the
///   window is sent;
/// - the turn in flight (the new prompt, or the tool results being answered) is kept verbatim.
#[derive(Debug)]
pub struct Driver<S> {
    compactor: Compactor,
    log: SessionLog<S>,
    context: EffectiveContext,
    system: String,
    tools: Vec<ToolSpec>,
    options: RequestOptions,
    max_output_tokens: u32,
    /// Everything known of the model's window: the one home of the window, which every
    /// compaction run takes and gives back updated.
    windows: KnownWindows,
    /// The share of the window above which a request is compacted ahead, when on.
    auto_compact: Option<f64>,
    /// Whether `WindowUnknown` was reported.
    said_no_window: bool,
    /// Whether a compaction ahead of this turn's request lost its append to another writer
    /// since the last reply: the turn then does not compact ahead again while its request fits
    /// the window, so writers that take turns on one session cannot keep each other's turns
    /// compacting (issue 39).
    ahead_lost: bool,
    /// What the requests cost, and when the last one was answered.
    accounts: cost::Accounts,
    /// The index of the session that recall reads, kept current (`recall::RecallCache`).
    recall_cache: recall::RecallCache,
    /// The random pauses of [`Driver::send_shared`].
    jitter: shared::Jitter,
}

impl<S: Store> Driver<S> {
    /// A driver over `log`, whose replay is `context`. No system prompt, no tools, and an
    /// output limit of [`DEFAULT_MAX_OUTPUT_TOKENS`] until set.
    pub fn new(compactor: Compactor, log: SessionLog<S>, context: EffectiveContext) -> Driver<S> {
        Driver {
            compactor,
            log,
            context,
            system: String::new(),
            tools: Vec::new(),
            options: RequestOptions::default(),
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            windows: KnownWindows::new(),
            auto_compact: None,
            said_no_window: false,
            ahead_lost: false,
            accounts: cost::Accounts::default(),
            recall_cache: recall::RecallCache::default(),
            jitter: shared::Jitter::new(),
        }
    }

    /// Sets the agent's system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Driver<S> {
        self.system = system.into();
        self
    }

    /// Sets the tools offered to the model.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Driver<S> {
        self.tools = tools;
        self
    }

    /// Sets the options of conversation requests (temperature, reasoning effort, tool choice,
    /// ...), which each adapter maps to its protocol. Compaction requests do not carry them: a
    /// summary is asked for with the provider's defaults.
    pub fn with_request_options(mut self, options: RequestOptions) -> Driver<S> {
        self.options = options;
        self
    }

    /// Sets the output limit of conversation requests.
    pub fn with_max_output_tokens(mut self, max_output_tokens: u32) -> Driver<S> {
        self.max_output_tokens = max_output_tokens;
        self
    }

    /// The effective context the next request is built from.
    pub fn context(&self) -> &EffectiveContext {
        &self.context
    }

    /// A driver over `session` of `store`, loaded now (a session that does not exist yet is
    /// the empty conversation; the first append creates it), with the load's warnings.
    ///
    /// # Errors
    /// As [`SessionLog::open`].
    pub async fn open(
        compactor: Compactor,
        store: S,
        session: impl Into<String>,
    ) -> Result<(Driver<S>, Vec<Warning>), StoreError> {
        let (log, loaded) = SessionLog::open(store, session).await?;
        Ok((Driver::new(compactor, log, loaded.context), loaded.warnings))
    }

    /// Reads the session again (after a conflict: another writer appended) and goes on from it
    /// as it is now. Returns the load's warnings.
    ///
    /// # Errors
    /// As [`SessionLog::reload`]; the driver is unchanged then.
    pub async fn reload(&mut self) -> Result<Vec<Warning>, StoreError> {
        let Loaded {
            context, warnings, ..
        } = self.log.reload().await?;
        self.context = context;
        Ok(warnings)
    }

    /// Appends `messages` (a reply handed back by [`CompactError::ReplyNotAppended`], or tool
    /// results, say) to the session and the context, without sending anything. Messages
    /// without an id get one.
    ///
    /// # Errors
    /// As [`SessionLog::append`]; nothing is appended then.
    pub async fn append(&mut self, messages: Vec<Message>) -> Result<(), StoreError> {
        let mut entries = Vec::with_capacity(messages.len());
        for mut m in messages {
            if m.id.is_none() {
                m.id = Some(self.compactor.next_id(IdKind::Message).into());
            }
            entries.push(Entry::Message(m));
        }
        self.log.append(&entries).await?;
        self.context
            .messages
            .extend(entries.into_iter().filter_map(|e| match e {
                Entry::Message(m) => Some(m),
                _ => None,
            }));
        Ok(())
    }

    /// Whether the conversation awaits a reply: it ends with a user message (a prompt, or tool
    /// results) that no reply follows. After a conflict that stored the new messages
    /// ([`Conflict::prompt_stored`](crate::Conflict::prompt_stored)) and a reload, a driver
    /// that still awaits a reply sends nothing new (`send(vec![], ..)`); one that does not was
    /// answered by another writer.
    pub fn awaits_reply(&self) -> bool {
        self.context
            .conversation()
            .last()
            .is_some_and(|m| m.role == panto_model::Role::User)
    }

    /// The whole ledger the latest compaction of the context recorded (empty when the context
    /// starts from none): the requests, files, errors, commands, todos and answers of
    /// everything summarized so far, of which a summary shows only the most telling part. An
    /// agent can offer it to its model as a tool, or show it to a person.
    pub fn ledger(&self) -> Ledger {
        previous_ledger(&self.context)
    }

    /// The log: the session and where this driver last saw it end.
    pub fn log(&self) -> &SessionLog<S> {
        &self.log
    }

    /// The agent's system prompt.
    pub fn system(&self) -> &str {
        &self.system
    }

    /// The tools offered to the model.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The options of conversation requests.
    pub fn request_options(&self) -> &RequestOptions {
        &self.options
    }

    /// The output limit of conversation requests.
    pub fn max_output_tokens(&self) -> u32 {
        self.max_output_tokens
    }

    /// The compactor.
    pub fn compactor(&self) -> &Compactor {
        &self.compactor
    }

    /// The compactor (to change the active model, for example).
    pub fn compactor_mut(&mut self) -> &mut Compactor {
        &mut self.compactor
    }

    /// The compactor, the log and the context.
    pub fn into_parts(self) -> (Compactor, SessionLog<S>, EffectiveContext) {
        (self.compactor, self.log, self.context)
    }

    /// panto's estimate of the next request (the system prompt, the tools and the context), in
    /// parts that add up (`panto_size::estimate`): the one ruler the driver's own checks use.
    pub fn estimate(&self) -> RequestEstimate {
        estimate(
            &self.system,
            &tools_text(&self.tools),
            &self.context.messages,
        )
    }

    /// The request the context would be sent as now. Its cache settings are the request
    /// options', with the compaction message that leads a compacted context marked stable
    /// (`PromptCache::stable_messages`), so that the adapter may anchor the cache after it.
    pub fn request(&self) -> Request {
        let mut options = self.options.clone();
        if self.context.summary().is_some() {
            options.cache.stable_messages = 1;
        }
        Request::new(
            self.compactor.active().model.clone(),
            self.system.clone(),
            self.context.messages.clone(),
            self.max_output_tokens,
        )
        .with_tools(self.tools.clone())
        .with_options(options)
    }

    /// Appends `new` (a user prompt, or tool results; may be empty to resend the context),
    /// sends the context to the active model, and appends the reply.
    ///
    /// With proactive compaction on ([`Driver::with_auto_compact`]) and a window known, a
    /// request estimated above the configured share of the window is compacted first (trigger
    /// `auto`, reported by
    /// [`CompactionEvent::CompactingAhead`](crate::CompactionEvent::CompactingAhead)); a
    /// compaction that writes nothing (nothing to compact, not smaller, a failure) is reported
    /// ([`CompactionEvent::AheadSkipped`](crate::CompactionEvent::AheadSkipped)) and the
    /// request is sent as it is when it fits the window. A compaction ahead that another
    /// writer's messages overtook (written after them, which join its kept turns) and that
    /// leaves the request over the window is compacted once more, up to
    /// [`MAX_REBASES`](crate::MAX_REBASES) times, as an overflow's is. A request estimated
    /// larger than the window is not sent.
    ///
    /// On [`ProviderError::ContextOverflow`] it compacts (trigger `overflow`, the keep budget
    /// capped at a quarter of the reported limit, every compaction request fitted below the
    /// request that overflowed), then sends the compacted context once more, but only when it
    /// is estimated smaller than the request that overflowed and within the known limit. An
    /// answer whose usage shows that the provider cut the request to fit its window and said
    /// nothing (`panto_size::silent_truncation`: its input count far below what the request
    /// holds; [`CompactionEvent::SilentTruncation`](crate::CompactionEvent::SilentTruncation))
    /// is treated as an overflow: discarded, then the same compaction and retry. The limit an
    /// overflow states, or the bound a request that did not fit teaches, is remembered
    /// ([`Driver::learned_window`]). Streamed text of every attempt goes to `stream`. Messages
    /// without an id get one.
    ///
    /// When another writer appended meanwhile, [`CompactError::conflict`] says what of the turn
    /// is stored ([`Conflict`](crate::Conflict)): either `new` was not stored (send it again
    /// after [`Driver::reload`]), or it is stored and a compaction or the reply lost (after a
    /// reload, send nothing new while [`Driver::awaits_reply`]; sending `new` again would store
    /// it twice).
    ///
    /// # Errors
    /// - [`CompactError::NotStored`]: the store refused the append of `new` (a
    ///   [`StoreError::Conflict`] when another writer appended since this driver last saw the
    ///   session): nothing was sent or written;
    /// - [`CompactError::Store`]: `new` is stored, and the store refused the append of the
    ///   compaction ahead of the request (another writer appended meanwhile), or another
    ///   writer had appended before the compaction ahead began (no model was asked); nothing
    ///   was sent;
    /// - [`CompactError::ExceedsWindow`]: with proactive compaction on, the request is still
    ///   estimated larger than the window, so it was not sent (a compaction ahead overtaken by
    ///   other writers' messages is compacted once more first);
    /// - [`CompactError::ReplyNotAppended`]: the reply could not be appended; it is handed back;
    /// - [`CompactError::Provider`]: any error other than an overflow, untouched (no compaction
    ///   when it comes first; after a compaction when it answers the retry);
    /// - [`CompactError::OverflowNothingToCompact`], [`CompactError::OverflowCompactionFailed`]:
    ///   the overflow could not be compacted away; nothing was written (a compaction that
    ///   would not make the conversation smaller, [`CompactError::NotSmaller`], is not written
    ///   and the request is not sent again);
    /// - [`CompactError::OverflowNoProgress`]: the compacted request would not be smaller, or
    ///   not within the known limit (what the compaction kept verbatim is too large), so it
    ///   was not sent; the compaction stays written (a compaction overtaken by other writers'
    ///   prompts is compacted once more first);
    /// - [`CompactError::OverflowAfterCompaction`]: the retry overflowed too (the compaction
    ///   stays written); it is not compacted again.
    pub async fn send(
        &mut self,
        new: Vec<Message>,
        stream: EventSink<'_>,
    ) -> Result<Reply, CompactError> {
        if !new.is_empty() {
            self.append(new).await.map_err(CompactError::NotStored)?;
        }
        let ahead = self.compact_ahead().await?;

        let (overflow, truncation) = match self.complete(&mut *stream, "first").await {
            Ok(reply) => match silent_truncation(&self.context.messages, &reply) {
                None => {
                    let mut reply = self.accept(reply, None).await?;
                    self.ahead_lost = false;
                    reply.compacted_ahead = ahead;
                    return Ok(reply);
                }
                Some(truncation) => (recover::truncated_overflow(&truncation), Some(truncation)),
            },
            Err(e) if e.is_context_overflow() => (e, None),
            Err(e) => return Err(CompactError::Provider(e)),
        };
        let mut reply = self.recover(overflow, truncation, stream).await?;
        self.ahead_lost = false;
        reply.compacted_ahead = ahead;
        reply.truncation = truncation;
        Ok(reply)
    }

    /// Makes the effective context before the latest compaction or clearing current again, by
    /// appending an undo entry (nothing is rewritten), and goes on from it; undoing again goes
    /// one step further back (docs/session.md, "Undo").
    ///
    /// # Errors
    /// As [`undo`](crate::undo()); the driver is unchanged then.
    pub async fn undo(&mut self) -> Result<Undone, CompactError> {
        let ids = self.compactor.ids();
        let undone = crate::undo::undo(&self.context, &mut self.log, ids).await?;
        self.context = undone.context.clone();
        Ok(undone)
    }

    /// Compacts the context now (`/compact`), with optional extra instructions.
    ///
    /// # Errors
    /// As [`Compactor::compact`].
    pub async fn compact(
        &mut self,
        instructions: Option<String>,
    ) -> Result<CompactOutcome, CompactError> {
        self.compact_with(CompactRun::manual(instructions)).await
    }

    /// Compacts the context now as `run` asks (a manual run with `--force`, or its own keep
    /// budget, say), with the run's trigger recorded on the entry as the caller gives it:
    /// [`CompactRun::manual`], [`CompactRun::auto`] (an agent's own threshold check, which
    /// fits the conversation to the window it names), or an agent's own reason
    /// (`CompactRun::manual(None).with_trigger(Trigger::Other("nightly".into()))`).
    /// What the conversation's requests hold besides their messages (system prompt, tools,
    /// reply) is added to `run` unless it says, and so is what its requests look like (for
    /// native compaction, [`CompactRun::conversation`]); the run works within the window the driver
    /// knows ([`Driver::windows`]), and what it learns of it stays with the driver.
    ///
    /// # Errors
    /// As [`Compactor::compact`].
    pub async fn compact_with(&mut self, run: CompactRun) -> Result<CompactOutcome, CompactError> {
        let mut run = if run.reserved_tokens.is_some() {
            run
        } else {
            run.with_reserved_tokens(self.reserved_tokens(), u64::from(self.max_output_tokens))
        };
        if run.conversation.is_none() {
            run = run.with_conversation(self.conversation());
        }
        let outcome = self
            .compactor
            .compact(&self.context, &mut self.log, run, &mut self.windows)
            .await?;
        if let CompactOutcome::Compacted(c) = &outcome {
            self.context = c.context.clone();
            self.count_compaction(&c.report);
        }
        Ok(outcome)
    }

    /// What a conversation request holds besides its messages and the reply, in estimated
    /// tokens: the system prompt and the tools. A compaction leaves this much of the window
    /// free, and room for the reply.
    fn reserved_tokens(&self) -> u64 {
        let parts = estimate(&self.system, &tools_text(&self.tools), &[]);
        parts.system + parts.tools
    }

    /// What this driver's requests look like, for native compaction.
    fn conversation(&self) -> Conversation {
        Conversation::new(self.system.clone())
            .with_tools(self.tools.clone())
            .with_options(self.options.clone())
            .with_max_output_tokens(self.max_output_tokens)
    }

    /// Sends the context now to the active model. The future borrows nothing of the driver
    /// (it owns the request and a handle on the model), so it is `Send` whatever the log.
    fn complete<'s>(
        &self,
        stream: EventSink<'s>,
        attempt: &'static str,
    ) -> impl Future<Output = Result<Message, ProviderError>> + Send + 's {
        let request = self.request();
        let active = self.compactor.active().clone();
        async move {
            let span = info_span!(
                "send",
                attempt,
                provider = active.provider.name(),
                model = %active.model
            );
            active
                .provider
                .complete(&request, stream)
                .instrument(span)
                .await
        }
    }

    /// Appends the reply; when the append fails, hands the reply back with the error.
    async fn accept(
        &mut self,
        mut reply: Message,
        compaction: Option<CompactionReport>,
    ) -> Result<Reply, CompactError> {
        if reply.id.is_none() {
            reply.id = Some(self.compactor.next_id(IdKind::Message).into());
        }
        if let Err(error) = self.log.append(&[Entry::Message(reply.clone())]).await {
            return Err(CompactError::ReplyNotAppended {
                reply: Box::new(reply),
                compaction: compaction.map(Box::new),
                error,
            });
        }
        self.note_sent();
        self.count_reply(&reply);
        self.context.messages.push(reply.clone());
        Ok(Reply::new(reply, compaction))
    }
}

/// The tool definitions as the text a request carries for them (one JSON array of name,
/// description and schema), for sizing; empty when there are none.
fn tools_text(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let list: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}
