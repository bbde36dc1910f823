//! The noa core (SPEC 4): a pure library reproducing what the runtime computes for a freshly
//! resumed session. Inputs are the loaded files and a configuration; outputs are messages,
//! bytes and decisions. No I/O, no clock: time is passed in.
//!
//! - [`content`]: content messages, raw ids, the projection (2.5, 4.1); [`tokens`] (4.2);
//!   [`refs`] (4.3).
//! - [`pipeline`]: refs, liveness, prune, Compress-call hiding, measure, truncation (4.4);
//!   [`protect`] (4.6), [`turns`], [`recommend`] and [`nudge`] (4.7).
//! - [`assemble`]: provider messages and their `view.jsonl` lines; [`session`]: the view and
//!   the materialized history (4.9); [`render`]: view.md, raw ranges, status.json, forks (4.10);
//!   [`html`]: view.html and the root's index.html.
//! - [`args`] and [`compress`]: the Compress call (4.5); [`rebuild`]: replay (4.8).

pub mod args;
pub mod assemble;
pub mod compress;
pub mod content;
pub mod edit;
pub mod html;
pub mod lines;
pub mod nudge;
pub mod pipeline;
pub mod protect;
pub mod rebuild;
pub mod recommend;
pub mod refs;
pub mod render;
pub mod tokens;
pub mod turns;
pub mod views;
