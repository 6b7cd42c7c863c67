//! Property tests of the model: round trip, turns, replay, validation, robustness.

mod build;
mod decode;
mod replay;
mod roundtrip;
mod turns;
mod validate;
