//! Lossless on-disk models of the runtime's files (SPEC 2), with tolerant loaders.

pub mod archive;
pub mod loader;
pub mod memory;
pub mod state;
pub mod transcript;
