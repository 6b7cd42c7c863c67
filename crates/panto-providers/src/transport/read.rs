//! Reading answers: a streamed answer event by event, each chunk of a body within the idle
//! wait, error bodies up to their limit, and the size cap.

use std::time::{Duration, Instant};

use panto_model::Message;
use panto_provider::{ProviderError, Wait};
use serde_json::Value;

use super::{Clock, Sink, StreamParser, Transport, Wire};
use crate::sse::{SseDecoder, SseEvent};

/// The most bytes of an error body that are read (and passed to the classifier).
const ERROR_BODY_LIMIT: usize = 256 * 1024;

impl Transport {
    pub(super) async fn read_stream<W: Wire>(
        &self,
        wire: &W,
        mut response: reqwest::Response,
        sink: &mut Sink<'_>,
        clock: &Clock,
    ) -> Result<Message, ProviderError> {
        let mut decoder = SseDecoder::new();
        let mut parser = wire.stream();
        let mut events = Vec::new();
        // The idle wait runs from the last progress: an event, or part of one. Keep-alive
        // comments and pings prove the connection is alive, not that the answer is coming.
        let mut progress = Instant::now();
        let mut pinged = false;
        let cap = self.config.max_response_bytes;
        let mut received = 0u64;
        loop {
            let what = if pinged {
                "only keep-alive pings arrived, no stream event"
            } else {
                "the stream went silent"
            };
            let chunk = self
                .next_chunk(&mut response, clock, progress, what)
                .await?;
            if let Some(bytes) = &chunk {
                received += bytes.len() as u64;
                if received > cap {
                    return Err(too_large(cap));
                }
            }
            let ended = chunk.is_none();
            match chunk {
                Some(bytes) => decoder.push(&bytes, &mut events),
                None => decoder.finish(&mut events),
            }
            let mut moved = decoder.in_event();
            for event in events.drain(..) {
                moved |= !is_keep_alive(&event);
                if parser.event(&event, sink)? {
                    return parser.finish(true);
                }
            }
            if ended {
                return parser.finish(false);
            }
            if moved {
                progress = Instant::now();
                pinged = false;
            } else {
                pinged = true;
            }
        }
    }

    /// A whole (not streamed) answer's body, each chunk within the idle wait, refused when its
    /// announced or read length passes the size cap.
    pub(super) async fn read_whole(
        &self,
        response: &mut reqwest::Response,
        clock: &Clock,
    ) -> Result<Vec<u8>, ProviderError> {
        let cap = self.config.max_response_bytes;
        if response.content_length().is_some_and(|len| len > cap) {
            return Err(too_large(cap));
        }
        let mut bytes = Vec::new();
        let mut since = Instant::now();
        while let Some(chunk) = self
            .next_chunk(response, clock, since, "the answer stopped arriving")
            .await?
        {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_large(cap));
            }
            bytes.extend_from_slice(&chunk);
            since = Instant::now();
        }
        Ok(bytes)
    }

    /// The next chunk of an answer's body, within the idle wait from `since`.
    pub(super) async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        clock: &Clock,
        since: Instant,
        what: &str,
    ) -> Result<Option<bytes::Bytes>, ProviderError> {
        clock
            .within(
                Wait::Idle,
                since,
                self.config.idle_timeout,
                what,
                response.chunk(),
            )
            .await?
            .map_err(|e| self.reqwest_error(&e))
    }
}

/// Whether an event only keeps the connection alive (Anthropic's `ping`).
fn is_keep_alive(event: &SseEvent) -> bool {
    event.event == "ping"
        || serde_json::from_str::<Value>(&event.data)
            .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("ping"))
}

/// Reads at most [`ERROR_BODY_LIMIT`] bytes of an error body; a read that fails or times out
/// keeps what arrived (the status is already known).
pub(super) async fn read_limited(mut response: reqwest::Response, deadline: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = ERROR_BODY_LIMIT - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(deadline, read).await;
    body
}

/// The error for an answer over the size cap.
pub(super) fn too_large(cap: u64) -> ProviderError {
    ProviderError::MalformedResponse {
        message: format!(
            "the answer is larger than the limit of {} bytes ({} MiB); it was not read further",
            cap,
            cap / (1024 * 1024)
        ),
    }
}
