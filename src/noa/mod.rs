//! The noa core (SPEC 4): a pure library. Inputs are loaded files and a configuration; outputs
//! are bytes and decisions. No I/O, no clock: time is passed in.
//!
//! - [`tokens`]: the token estimate (4.1).
//! - [`refs`]: stable refs (4.2).
//! - [`view`]: materialize (4.8) and the projection (4.3) with truncation, protection (4.5) and
//!   the nudge (4.6); `view.jsonl` and `view.md` bytes.
//! - [`compress`]: validation and block building of a Compress batch (4.4 steps 1-3, commit).
//! - [`replay`]: rebuild from history (4.7).

pub mod compress;
pub mod refs;
pub mod replay;
pub mod status;
pub mod tokens;
pub mod view;

use crate::format::transcript::Message;

/// One transcript message as the core sees it (SPEC 3 "Messages").
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// The record's `uuid`: the message's raw id.
    pub raw_id: &'a str,
    pub message: &'a Message,
    pub timestamp: Option<&'a str>,
}
