//! A batch's endpoints resolved against the view: refs and block ids, parsed leniently, to
//! places in the view's messages (or why they are not there).

use super::*;

/// One message of the view the batch is resolved against.
pub(super) struct M<'t, 'a> {
    pub(super) core: &'t Core<'a>,
    /// Its text begins with the summary header (see [`Turn::headed`]).
    pub(super) headed: bool,
    pub(super) chars: usize,
    pub(super) slot: &'t Slot,
    pub(super) tokens: u64,
}

impl M<'_, '_> {
    pub(super) fn id(&self) -> &str {
        &self.core.id
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndKind {
    Message,
    Block,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotFound {
    Unknown,
    Consumed,
    Invalid,
}

#[derive(Debug, Clone)]
pub(super) struct Resolved {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) kind: EndKind,
    pub(super) ids: Vec<String>,
    pub(super) nested: Vec<String>,
    pub(super) warnings: Vec<String>,
}

/// A requested range and how it resolved (`true`: skipped for overlapping an earlier one).
pub(super) type Requested = (Result<Resolved, (NotFound, String)>, bool);

/// Lookups over the view and the state.
pub(super) struct Ctx<'t, 'a, 's> {
    pub(super) msgs: Vec<M<'t, 'a>>,
    pub(super) state: &'s State,
    pub(super) index: crate::fasthash::FastMap<&'t str, usize>,
    pub(super) anchor: HashMap<String, usize>,
    pub(super) by_id: HashMap<&'s str, usize>,
}

impl<'t, 'a, 's> Ctx<'t, 'a, 's> {
    pub(super) fn block(&self, id: &str) -> Option<&'s Block> {
        self.by_id.get(id).map(|&i| &self.state.blocks()[i])
    }

    pub(super) fn anchors(
        state: &State,
        index: &crate::fasthash::FastMap<&'t str, usize>,
    ) -> HashMap<String, usize> {
        let mut anchor = HashMap::new();
        for b in state.blocks().iter().filter(|b| b.active) {
            let summary = format!("{}{}", crate::noa::content::SUMMARY_ID_PREFIX, b.block_id);
            if let Some(&i) = index.get(summary.as_str()) {
                anchor.insert(b.block_id.clone(), i);
                continue;
            }
            if let Some(i) = b
                .effective_message_ids
                .iter()
                .filter_map(|id| index.get(id.as_str()))
                .min()
            {
                anchor.insert(b.block_id.clone(), *i);
            }
        }
        anchor
    }

    /// The anchor of a live block that absorbed a child covering `raw`.
    pub(super) fn owner_anchor(&self, raw: &str) -> Option<(usize, &'s str)> {
        for owner in self.state.blocks() {
            if !owner.active || owner.direct_block_ids.is_empty() {
                continue;
            }
            for child in &owner.direct_block_ids {
                let Some(child) = self.block(child) else {
                    continue;
                };
                if child.effective_message_ids.iter().any(|id| id == raw) {
                    if let Some(&at) = self.anchor.get(&owner.block_id) {
                        return Some((at, owner.block_id.as_str()));
                    }
                }
            }
        }
        None
    }

    pub(super) fn anchor_of(
        &self,
        end: &End,
    ) -> Result<(usize, Option<String>), (NotFound, String)> {
        match end.kind {
            EndKind::Message => {
                let Some(id) = self.state.message_refs.by_ref.get(&end.name) else {
                    return Err((
                        NotFound::Unknown,
                        format!("{} does not exist in this session", end.name),
                    ));
                };
                if let Some(&i) = self.index.get(id.as_str()) {
                    return Ok((i, None));
                }
                if let Some(found) = self.owner_anchor(id) {
                    return Ok(snapped(end, found));
                }
                Err((
                    NotFound::Consumed,
                    format!("{} is already covered by an active block", end.name),
                ))
            }
            EndKind::Block => {
                let Some(b) = self.block(&end.name) else {
                    return Err((
                        NotFound::Unknown,
                        format!("block {} does not exist in this session", end.name),
                    ));
                };
                if b.active {
                    return match self.anchor.get(&end.name) {
                        Some(&at) => Ok((at, None)),
                        None => Err((
                            NotFound::Consumed,
                            format!(
                                "block {} is active but has no visible content to compress",
                                end.name
                            ),
                        )),
                    };
                }
                for id in &b.effective_message_ids {
                    if let Some(found) = self.owner_anchor(id) {
                        return Ok(snapped(end, found));
                    }
                }
                Err((
                    NotFound::Consumed,
                    format!(
                        "block {} was already consumed by a higher-tier block",
                        end.name
                    ),
                ))
            }
        }
    }

    pub(super) fn nested(&self, si: usize, ei: usize) -> Vec<String> {
        self.state
            .blocks()
            .iter()
            .filter(|b| b.active)
            .filter(|b| {
                self.anchor
                    .get(&b.block_id)
                    .is_some_and(|&at| at >= si && at <= ei)
            })
            .map(|b| b.block_id.clone())
            .collect()
    }

    pub(super) fn ids_in(&self, si: usize, ei: usize) -> Vec<String> {
        self.msgs[si.min(self.msgs.len())..(ei + 1).min(self.msgs.len())]
            .iter()
            .filter(|m| !m.core.id.is_empty() && !m.core.is_summary())
            .map(|m| m.core.id.to_string())
            .collect()
    }

    pub(super) fn resolve(&self, start: &str, end: &str) -> Result<Resolved, (NotFound, String)> {
        let s = parse_end(start).ok_or_else(|| (NotFound::Invalid, invalid(start)))?;
        let e = parse_end(end).ok_or_else(|| (NotFound::Invalid, invalid(end)))?;
        let mut warnings = Vec::new();
        let (mut si, w1) = self.anchor_of(&s)?;
        warnings.extend(w1);
        let (mut ei, w2) = self.anchor_of(&e)?;
        warnings.extend(w2);
        if si > ei {
            std::mem::swap(&mut si, &mut ei);
        }
        let kind = if s.kind == EndKind::Block || e.kind == EndKind::Block {
            EndKind::Block
        } else {
            EndKind::Message
        };
        Ok(Resolved {
            start: si,
            end: ei,
            kind,
            ids: self.ids_in(si, ei),
            nested: self.nested(si, ei),
            warnings,
        })
    }
}

pub(super) struct End {
    pub(super) kind: EndKind,
    pub(super) name: String,
}

/// `end` anchored where the block that absorbed it is, saying so.
fn snapped(end: &End, (at, owner): (usize, &str)) -> (usize, Option<String>) {
    let why = format!("Snapped {} to block {owner}, which absorbed it.", end.name);
    (at, Some(why))
}

pub(super) fn parse_end(s: &str) -> Option<End> {
    if let Some(n) = parse_ref(s) {
        return Some(End {
            kind: EndKind::Message,
            name: format_ref(n),
        });
    }
    parse_block_id(s).map(|n| End {
        kind: EndKind::Block,
        name: refs::block_name(n),
    })
}

pub(super) fn invalid(s: &str) -> String {
    format!(
        "{} is neither a message ref (mNNNNN) nor a block id (bN)",
        crate::format::gojson::quote(s)
    )
}
