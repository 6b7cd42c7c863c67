//! What the adapters with a native compaction share (Anthropic's on-demand compaction, OpenAI's
//! `/responses/compact`): posting the compaction request, and reading its answer, whose list of
//! blocks or items is kept exactly as received, beside the model and the usage.

use std::collections::HashMap;

use panto_model::{RawJson, Usage};
use panto_provider::{NativeCompaction, ProviderError, Request};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::body::WireBody;
use crate::transport::{Transport, Wire, malformed};

/// Posts the compaction request `body` to `url` and returns the answer's bytes, with the
/// transport's retries, waits and scrubbing.
///
/// # Errors
/// A body that cannot be encoded is a malformed request; the transport's errors otherwise.
pub(crate) async fn post<W: Wire>(
    transport: &Transport,
    wire: &W,
    request: &Request,
    url: &str,
    body: &WireBody,
) -> Result<Vec<u8>, ProviderError> {
    let body = body
        .to_bytes()
        .map_err(|e| malformed(format!("could not encode the request: {e}")))?;
    transport.post_json(wire, request, url, &body).await
}

/// A compaction answer as received: its top-level fields, and the elements of its list (the
/// array under `list`), each as its exact text.
pub(crate) struct Answer {
    top: HashMap<String, Box<RawValue>>,
    /// The elements of the list, in order.
    elements: Vec<Box<RawValue>>,
}

impl Answer {
    /// Reads `bytes` as an object with an array under `list`.
    ///
    /// # Errors
    /// A malformed answer when it is not such an object.
    pub(crate) fn read(bytes: &[u8], list: &str) -> Result<Answer, ProviderError> {
        let top: HashMap<String, Box<RawValue>> = serde_json::from_slice(bytes)
            .map_err(|e| malformed(format!("the compaction answer cannot be read: {e}")))?;
        let raw = top
            .get(list)
            .ok_or_else(|| malformed(format!("the compaction answer has no `{list}`")))?;
        let elements: Vec<Box<RawValue>> = serde_json::from_str(raw.get()).map_err(|e| {
            malformed(format!(
                "the compaction answer's `{list}` cannot be read: {e}"
            ))
        })?;
        Ok(Answer { top, elements })
    }

    /// The elements as the exact texts the payload keeps, each first shown to `look`, which
    /// reads what it needs of it; `what` names an element in the error (`block`, `item`).
    ///
    /// # Errors
    /// `look`'s, or a malformed answer when a text is not JSON panto can carry.
    pub(crate) fn exact_elements(
        &self,
        what: &str,
        mut look: impl FnMut(&str) -> Result<(), ProviderError>,
    ) -> Result<Vec<RawJson>, ProviderError> {
        self.elements
            .iter()
            .map(|element| {
                look(element.get())?;
                RawJson::from_text(element.get().to_owned())
                    .map_err(|e| malformed(format!("a compaction answer {what}: {e}")))
            })
            .collect()
    }

    /// `native` with the answer's `model`, and the usage `usage` reads from its `usage`.
    pub(crate) fn finish(
        &self,
        mut native: NativeCompaction,
        usage: impl FnOnce(&Value) -> Option<Usage>,
    ) -> NativeCompaction {
        let field = |k: &str| {
            self.top
                .get(k)
                .and_then(|v| serde_json::from_str::<Value>(v.get()).ok())
        };
        if let Some(model) = field("model").as_ref().and_then(Value::as_str) {
            native = native.with_model(model);
        }
        if let Some(usage) = field("usage").as_ref().and_then(usage) {
            native = native.with_usage(usage);
        }
        native
    }
}
