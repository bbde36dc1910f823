//! The session root on disk: discovery, incremental loading, durable writes, lock, journal.

pub mod cache;
pub mod ctl;
pub mod durable;
pub mod failpoint;
pub mod inputs;
pub mod journal;
pub mod lock;
pub mod root;
pub mod session;
pub mod transcripts;
pub mod txn;
