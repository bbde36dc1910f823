//! normafs: AI-agent sessions (the Norma runtime's durable files) as a filesystem.
//!
//! Module map (see ../shared/SPEC.md for the formats and semantics):
//! - [`format`]: lossless on-disk models — transcript, memory, state, archive (read + write).
//! - [`noa`]: the pure core — tokens, refs, view, compress, rebuild, nudge; no I/O.
//! - [`store`]: the session root on disk — discovery, incremental loading, durable writes,
//!   lock, journal, and the compress/rebuild transactions.
//! - [`audit`]: the findings catalogue (SPEC 9).
//! - [`config`]: noa and mount settings.
//! - [`gen`]: synthetic session roots for tests, demos and benchmarks.
//! - [`fs`]: the filesystem without fuser: `NormaFs`, a façade over owners (the session
//!   layout table, the namespace, attributes, directory passes, handles and snapshots, the
//!   ctl log, changes), and freshness decisions.
//! - [`fuse`]: the fuser adapter and the mount.
//! - [`cli`]: the command line.

pub mod audit;
pub mod bytes;
pub mod cli;
pub mod config;
pub mod demo;
pub mod drop_later;
pub mod fasthash;
pub mod format;
pub mod fs;
pub mod fuse;
pub mod gen;
pub mod html;
pub mod noa;
pub mod pool;
pub mod store;
pub mod timeline;
