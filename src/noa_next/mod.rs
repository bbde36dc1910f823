//! The new noa core (being built beside the old one; becomes `noa`).

pub mod args;
pub mod assemble;
pub mod compress;
pub mod content;
pub mod nudge;
pub mod pipeline;
pub mod protect;
pub mod recommend;
pub mod rebuild;
pub mod refs;
pub mod render;
pub mod session;
pub mod tokens;
pub mod turns;
