//! What a compaction request was rendered from, for summarizers that read transcript items
//! instead of reading the request's text back.

use panto_model::Message;
use panto_provider::{ProviderError, Request};
use panto_transcript::{ItemView, for_each_item, request_len};

/// What one compaction request was rendered from: the messages it summarizes and the previous
/// summary it carries as `<previous-summary>`.
///
/// [`RequestSource::for_each_item`] gives the transcript items of those messages whole, even
/// where the request's text elides a body to fit the window.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestSource<'a> {
    /// The summarized messages, a slice of the effective context.
    pub messages: &'a [Message],
    /// The summary the request carries as `<previous-summary>`, when it carries one.
    pub previous_summary: Option<&'a str>,
    /// The length in bytes of the request's user prompt (the text of its one user message),
    /// which the compactor may leave unwritten for a [`SourceSummarizer`].
    pub prompt_len: usize,
}

impl<'a> RequestSource<'a> {
    /// The source of a request over `messages` with `previous_summary`, whose user prompt is
    /// the request of those messages ([`panto_transcript::render_request`], measured here
    /// without writing it).
    pub fn new(messages: &'a [Message], previous_summary: Option<&'a str>) -> RequestSource<'a> {
        RequestSource {
            messages,
            previous_summary,
            prompt_len: request_len(messages, previous_summary),
        }
    }

    /// Calls `f` with each transcript item of the messages, in order, one at a time and
    /// borrowed: what `panto_transcript::parse_request` would read back from the request's
    /// text, without the parse, without copies and without holding every item at once.
    pub fn for_each_item(&self, f: impl FnMut(ItemView<'a>)) {
        for_each_item(self.messages, f);
    }
}

/// A summarizer that answers a compaction request from its [`RequestSource`] rather than from
/// the text of its user message: the compactor calls it in place of
/// [`Provider::complete`](panto_provider::Provider::complete) for a
/// [`ModelRef`](crate::ModelRef) made with
/// [`ModelRef::with_source`](crate::ModelRef::with_source). Real model adapters do not
/// implement it: a model reads the text. It exists so that a local, extractive summarizer (the
/// CLI's offline one) does not parse back a transcript rendered a moment earlier.
pub trait SourceSummarizer: Send + Sync {
    /// Answers `request`, whose transcript was rendered from `source`, like
    /// [`Provider::complete`](panto_provider::Provider::complete) would. The text of the
    /// request's one user message may be left empty (the compactor writes a prompt of whole
    /// turns only for a model that reads it, so that the transcript is never held whole for
    /// a summarizer that does not): its length is [`RequestSource::prompt_len`].
    ///
    /// # Errors
    /// A [`ProviderError`], as the provider would give.
    fn summarize_source(
        &self,
        request: &Request,
        source: RequestSource<'_>,
    ) -> Result<Message, ProviderError>;
}
