//! The chat's terminal in raw mode, for the whole chat, and the keys read from it.
//!
//! crossterm switches the terminal to raw mode and parses what it sends (keys with their
//! modifiers, bracketed pastes of any size, resizes); panto then turns the terminal's output
//! processing back on, so that every line printed above the prompt still ends with a plain
//! newline. Bracketed paste is switched on, and the kitty keyboard protocol's first level
//! (terminals that know it report Shift-Enter apart from Enter; the others ignore the request).
//! Everything is put back when the chat ends, and on a panic.
//!
//! Keys are read on a thread of their own and handed over through a channel, so they are read
//! (never echoed, never lost) whether the chat waits at its prompt or for a reply.

use std::io::Write;

use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, Event, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{disable_raw_mode, enable_raw_mode};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// The terminal in raw mode, and the keys it sends; dropping it puts the terminal back.
pub(crate) struct Keys {
    events: UnboundedReceiver<std::io::Result<Event>>,
}

impl Keys {
    /// Switches the terminal to raw mode and starts reading it.
    ///
    /// # Errors
    /// When the terminal's mode cannot be changed.
    pub(crate) fn start() -> std::io::Result<Keys> {
        enable_raw_mode()?;
        if let Err(e) = output_processing_on() {
            restore();
            return Err(e);
        }
        let mut out = std::io::stdout().lock();
        let _ = crossterm::execute!(
            out,
            EnableBracketedPaste,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        );
        let _ = out.flush();
        drop(out);
        restore_on_panic();
        let (tx, events) = unbounded_channel();
        std::thread::spawn(move || {
            loop {
                let event = crossterm::event::read();
                let failed = event.is_err();
                if tx.send(event).is_err() || failed {
                    return;
                }
            }
        });
        Ok(Keys { events })
    }

    /// The next event; `None` when the terminal can no longer be read.
    pub(crate) async fn next(&mut self) -> Option<std::io::Result<Event>> {
        self.events.recv().await
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        restore();
    }
}

/// Turns output processing back on after `enable_raw_mode` turned it off, so that `\n` is
/// written as a new line at its start (CR LF), as in cooked mode.
fn output_processing_on() -> std::io::Result<()> {
    use rustix::termios::{OptionalActions, OutputModes, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let mut mode = tcgetattr(&stdin)?;
    mode.output_modes |= OutputModes::OPOST | OutputModes::ONLCR;
    tcsetattr(&stdin, OptionalActions::Now, &mode)?;
    Ok(())
}

/// Puts the terminal back as it was: keyboard protocol, bracketed paste, cooked mode.
fn restore() {
    let mut out = std::io::stdout().lock();
    let _ = crossterm::execute!(out, PopKeyboardEnhancementFlags, DisableBracketedPaste);
    let _ = out.flush();
    let _ = disable_raw_mode();
}

/// A panic in the chat leaves the terminal as it found it, then says what happened.
fn restore_on_panic() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
