//! `normafs gen`: placeholder until the generator lands.
use std::path::Path;

use crate::cli::CliError;

pub fn run(
    _root: &Path,
    _sessions: usize,
    _messages: usize,
    _seed: u64,
    _corrupt: bool,
    _progress: &mut dyn FnMut(usize, usize),
) -> Result<i32, CliError> {
    Err(CliError {
        message: "gen is not available yet".into(),
        code: 1,
    })
}
