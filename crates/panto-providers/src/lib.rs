//! panto's provider adapters, and the classification of the errors providers send.
//!
//! In this branch the crate holds only the error classifier: [`classify_response`] (an HTTP
//! error answer), [`classify_stream_error`] (an error event inside a stream that began with
//! HTTP 200) and [`error_in_success_body`] (a 2xx JSON body that is really an error) turn what a
//! provider sent into a [`panto_provider::ProviderError`]. The `explain_*` variants also say
//! which rule of the classification table fired.
//!
//! The design choice to know: the classification is a table of named rules evaluated in order,
//! first match wins, with the vetoes (rate limits, quotas, output caps) placed before every rule
//! that can say "context overflow". See `docs/providers.md`.

mod classify;

pub use classify::{
    Classification, Protocol, Verdict, classify_response, classify_stream_error,
    error_in_success_body, explain_response, explain_stream_error, explain_success_body,
};
