//! `gen --corrupt`: damaged sessions and files (stub while porting).

use super::{Damage, GenError, GenOptions, GenReport, Out};

pub(crate) const SESSION_DAMAGES: &[&str] = &[];

pub(crate) fn session(
    code: &'static str,
    _opts: &GenOptions,
    _slot: usize,
    _out: &mut Out,
    _report: &mut GenReport,
) -> Result<Vec<Damage>, GenError> {
    Err(GenError::Damage { code, reason: "todo".into() })
}

pub(crate) fn memories(_out: &mut Out, _first: u64) -> Result<(Vec<Damage>, usize), GenError> {
    Ok((Vec::new(), 0))
}

pub(crate) fn root_entries(_out: &mut Out, _opts: &GenOptions) -> Result<Vec<Damage>, GenError> {
    Ok(Vec::new())
}
