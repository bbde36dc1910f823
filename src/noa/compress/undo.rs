//! Taking a batch back without copying the state it was given.

use super::*;

/// What [`apply_owned`] may change in the state it is given, kept to put back: the blocks
/// it adds and the ones it deactivates, the next block id, the stats and the nudge's pacing
/// (a caller taking a batch back need not copy the whole state, its blocks' id lists
/// among it).
pub struct Undo {
    /// How many blocks there were, and whether each was active (`None`: no block list).
    blocks: Option<(usize, Vec<bool>)>,
    next_block_id: i64,
    stats: crate::format::state::Stats,
    nudge: crate::format::state::NudgeState,
}

impl Undo {
    pub fn of(state: &State) -> Undo {
        Undo {
            blocks: state
                .blocks
                .as_ref()
                .map(|b| (b.len(), b.iter().map(|b| b.active).collect())),
            next_block_id: state.next_block_id,
            stats: state.stats.clone(),
            nudge: state.nudge.clone(),
        }
    }

    /// `state` as it was when this was taken, given what [`apply_owned`] made of it.
    pub fn restore(self, state: &mut State) {
        match self.blocks {
            None => state.blocks = None,
            Some((len, active)) => {
                if let Some(blocks) = state.blocks.as_mut() {
                    blocks.truncate(len);
                    for (b, a) in blocks.iter_mut().zip(active) {
                        b.active = a;
                    }
                }
            }
        }
        state.next_block_id = self.next_block_id;
        state.stats = self.stats;
        state.nudge = self.nudge;
    }
}
