//! The request body as it goes on the wire: a JSON value, with pieces of exact JSON text
//! spliced in where a value must be sent back byte for byte (a provider's native compaction
//! block, an unknown block as it was received), and the request's extra fields merged in.
//!
//! A `serde_json::Value` cannot hold text verbatim (its maps sort keys, its numbers are
//! re-spelled), so such a piece stands in the value as a placeholder string, unique to the
//! body, that [`WireBody::to_bytes`] replaces with the piece once the value is serialized.

use panto_provider::{Request, merge_json};
use serde_json::Value;

/// A rendered body and the exact pieces spliced into it.
#[derive(Debug, Default)]
pub(crate) struct WireBody {
    /// The body, with placeholders where the pieces go.
    pub(crate) value: Value,
    splice: Splice,
}

/// The exact pieces of a body being rendered.
#[derive(Debug)]
pub(crate) struct Splice {
    nonce: u64,
    pieces: Vec<String>,
}

impl Default for Splice {
    fn default() -> Splice {
        Splice {
            nonce: fastrand::u64(..),
            pieces: Vec::new(),
        }
    }
}

impl Splice {
    /// A placeholder for `json` (one JSON value's exact text), to put where it goes.
    pub(crate) fn raw(&mut self, json: &str) -> Value {
        let placeholder = self.placeholder(self.pieces.len());
        self.pieces.push(json.to_owned());
        Value::String(placeholder)
    }

    fn placeholder(&self, index: usize) -> String {
        format!("\u{1}panto-raw:{:016x}:{index}\u{1}", self.nonce)
    }

    /// The exact text a placeholder stands for, when it is one of this body's.
    pub(crate) fn piece(&self, placeholder: &str) -> Option<&str> {
        let index = placeholder
            .strip_prefix(&format!("\u{1}panto-raw:{:016x}:", self.nonce))?
            .strip_suffix('\u{1}')?
            .parse::<usize>()
            .ok()?;
        self.pieces.get(index).map(String::as_str)
    }
}

impl WireBody {
    /// A body of `value` with the pieces of `splice`, and the request's extra body fields
    /// (`RequestOptions::extra_body`) merged in.
    pub(crate) fn new(mut value: Value, splice: Splice, request: &Request) -> WireBody {
        for (key, patch) in &request.options.extra_body {
            if let Value::Object(map) = &mut value {
                match map.get_mut(key) {
                    Some(existing) => merge_json(existing, patch.clone()),
                    None => {
                        map.insert(key.clone(), patch.clone());
                    }
                }
            }
        }
        WireBody { value, splice }
    }

    /// The value to change, and the pieces it refers to.
    pub(crate) fn parts_mut(&mut self) -> (&mut Value, &Splice) {
        (&mut self.value, &self.splice)
    }

    /// The bytes to send: the value serialized, each placeholder replaced by its piece.
    ///
    /// # Errors
    /// The serializer's error (a value that cannot be JSON, which the adapters never build).
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut text = serde_json::to_string(&self.value)?;
        for (i, piece) in self.splice.pieces.iter().enumerate() {
            let quoted = serde_json::to_string(&self.splice.placeholder(i))?;
            text = text.replacen(&quoted, piece, 1);
        }
        Ok(text.into_bytes())
    }
}
