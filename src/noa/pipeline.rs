//! The runtime's per-request pipeline over a projection (SPEC 4.4 steps 1-7): refs, block
//! liveness, prune, Compress-call hiding, the measure, emergency truncation and the nudge
//! decision. A [`Turn`] is its result: the view as positions into the projection plus the few
//! messages noa writes itself (summaries, stubbed or cut texts).

mod growing;
mod hide;
mod ids;
mod prune;
mod truncate;
pub use super::edit::{Edit, TRUNCATE_MIN_TOKENS, TRUNCATION_MARKER};
pub use growing::Growing;
pub use hide::stub_compress_arguments;
use hide::*;
use prune::*;
pub use truncate::truncate_threshold;
use truncate::*;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use super::content::{
    Core, Kind, Origin, Role, Slot, COMPRESS_TOOL, NUDGE_ID, SUMMARY_HEADER, SUMMARY_ID_PREFIX,
};
use super::{nudge, protect, refs, turns};
use crate::config::NoaConfig;
use crate::fasthash::{FastMap, FastSet};
use crate::format::state::{Block, State};

/// A message of the view: a content message of the projection, or one noa made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pos {
    Core(u32),
    Synth(u32),
}

/// The edits of a turn, by projection index (looked up for nearly every message of a view,
/// many times over).
#[derive(Debug, Clone, Default)]
pub struct Edits {
    /// Per projection index, its edit's place in `list` (`u32::MAX`: none); empty while
    /// there is no edit.
    at: Vec<u32>,
    list: Vec<Edit>,
    /// The projection index of each of `list`.
    of: Vec<u32>,
}

impl Edits {
    #[inline]
    pub fn get(&self, i: u32) -> Option<&Edit> {
        let k = *self.at.get(i as usize)?;
        self.list.get(k as usize)
    }

    /// Set the edit of index `i` of a projection of `len` messages.
    pub fn insert(&mut self, i: u32, edit: Edit, len: usize) {
        let i = i as usize;
        if self.at.len() <= i {
            self.at.resize(len.max(i + 1), u32::MAX);
        }
        match self.list.get_mut(self.at[i] as usize) {
            Some(slot) => *slot = edit,
            None => {
                self.at[i] = self.list.len() as u32;
                self.list.push(edit);
                self.of.push(i as u32);
            }
        }
    }

    /// No edit, the room for them kept (a replay's turns reuse it).
    pub fn clear(&mut self) {
        for &i in &self.of {
            self.at[i as usize] = u32::MAX;
        }
        self.list.clear();
        self.of.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// What the token count of a turn is taken from.
#[derive(Debug, Clone, Copy)]
pub enum Count {
    /// The projected view's own measure (a resumed runtime's view).
    Measured,
    /// A given count (the runtime's rebuild replays with 0: no truncation, no nudge).
    Given(u64),
}

/// One turn of the pipeline over a projection.
#[derive(Debug)]
pub struct Turn<'p, 'a> {
    pub proj: &'p [Core<'a>],
    /// The ref of every projected content message.
    pub slots: Vec<Slot>,
    /// Projection indices whose ref the state did not record (handed out by this turn).
    pub new_refs: Vec<u32>,
    /// Liveness of every state block (SPEC 4.4 step 2).
    pub active: Vec<bool>,
    /// Summaries (and the nudge, when one is injected).
    pub synth: Vec<Core<'a>>,
    pub edits: Edits,
    /// The view, in order.
    pub items: Vec<Pos>,
    /// Tokens of the view after Compress-call hiding, before truncation (step 5).
    pub measure: u64,
    /// The count the truncation and nudge decisions used.
    pub count: u64,
    pub truncated: usize,
    /// What the cuts took: the tokens of the cut results less their cut texts', each at
    /// least 0 (`cut_tokens`) and as the truncation counts it (`saved`).
    pub cut_tokens: u64,
    pub saved: i64,
    /// The tool results cut, in the order they were cut.
    pub cuts: Vec<u32>,
    /// The nudge decision (step 7); the nudge is in `items` only after [`Turn::inject_nudge`].
    pub nudge: Option<nudge::Decision>,
    /// What a turn [`Growing`] grew from the one before keeps of it (`None` for any other).
    pub kept: Option<Kept>,
}

/// What a turn grown from the request before (over the same blocks) keeps of it.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The first core the request before did not have: every tag of an earlier one was shown
    /// and recorded then.
    pub new_from: u32,
    /// Per core, what the blocks and the view's pairs make of it: [`COVERED`], [`PAIRED`].
    pub facts: Arc<Vec<u8>>,
    /// Per block of the state, what the nudge measures of it.
    pub blocks: Arc<Vec<BlockMeasure>>,
}

/// What the nudge measures of a block: where it starts and its summary's tokens (the same at
/// every request over the same blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockMeasure {
    /// Its start ref's number (0 when not a ref).
    pub start: u32,
    pub summary_tokens: u64,
}

impl BlockMeasure {
    pub fn of(b: &Block) -> BlockMeasure {
        BlockMeasure {
            start: refs::parse_ref(&b.start_ref).unwrap_or(0),
            summary_tokens: crate::noa::tokens::count(&b.summary),
        }
    }
}

/// A live block covers the core (SPEC 2.5).
pub const COVERED: u8 = 1;
/// The core is hard-protected or the other half of such an exchange in the view.
pub const PAIRED: u8 = 2;
/// A Compress call that made a block of the state.
pub const MADE: u8 = 4;
/// A Compress call that made a live block.
pub const LIVE: u8 = 8;

/// What the nudge's measures ask of each view message: kept with a grown turn, or found
/// for this view.
pub enum Facts<'s> {
    Kept(&'s [u8]),
    Found {
        covered: FastSet<&'s str>,
        calls: HashSet<&'s str>,
    },
}

impl Facts<'_> {
    /// Whether a live block covers the message.
    pub fn covered(&self, p: Pos, c: &Core<'_>) -> bool {
        match (self, p) {
            (Facts::Kept(f), Pos::Core(i)) => f.get(i as usize).is_some_and(|&f| f & COVERED != 0),
            (Facts::Kept(_), Pos::Synth(_)) => false,
            (Facts::Found { covered, .. }, _) => {
                !covered.is_empty() && covered.contains(c.id.as_ref())
            }
        }
    }

    /// Whether the message is hard-protected or the other half of such an exchange.
    pub fn paired(&self, p: Pos, c: &Core<'_>, cfg: &NoaConfig) -> bool {
        match (self, p) {
            (Facts::Kept(f), Pos::Core(i)) => f.get(i as usize).is_some_and(|&f| f & PAIRED != 0),
            (Facts::Kept(_), Pos::Synth(_)) => protect::is_hard(c, cfg),
            (Facts::Found { calls, .. }, _) => protect::is_hard_paired(c, cfg, calls),
        }
    }
}

impl<'p, 'a> Turn<'p, 'a> {
    /// A turn after steps 1–3 (its refs, liveness, summaries and list): nothing hidden,
    /// measured, cut or decided yet.
    fn before_step4(
        proj: &'p [Core<'a>],
        slots: Vec<Slot>,
        new_refs: Vec<u32>,
        active: Vec<bool>,
        synth: Vec<Core<'a>>,
        items: Vec<Pos>,
    ) -> Self {
        Turn {
            proj,
            slots,
            new_refs,
            active,
            synth,
            edits: Edits::default(),
            items,
            measure: 0,
            count: 0,
            truncated: 0,
            cut_tokens: 0,
            saved: 0,
            cuts: Vec::new(),
            nudge: None,
            kept: None,
        }
    }

    /// The edit of a projected message (most views have none).
    #[inline]
    pub fn edit(&self, i: u32) -> Option<&Edit> {
        self.edits.get(i)
    }

    pub fn core(&self, p: Pos) -> &Core<'a> {
        match p {
            Pos::Core(i) => &self.proj[i as usize],
            Pos::Synth(i) => &self.synth[i as usize],
        }
    }

    /// The positions of `items` whose message passes `keep`.
    pub fn items_where(&self, items: &[Pos], keep: impl Fn(&Core<'a>) -> bool) -> Vec<Pos> {
        items
            .iter()
            .copied()
            .filter(|&p| keep(self.core(p)))
            .collect()
    }

    /// A message's text as the view holds it (a cut's is made on each call: see
    /// [`Turn::lead`]).
    pub fn text(&self, p: Pos) -> Cow<'_, str> {
        match p {
            Pos::Core(i) => {
                let own = &self.proj[i as usize].text;
                match self.edit(i) {
                    Some(e) => e.text_of(own),
                    None => own.get(),
                }
            }
            Pos::Synth(i) => self.synth[i as usize].text.get(),
        }
    }

    /// The text as a value that lives as long as the transcript (an edit's is a copy).
    pub fn text_ref(&self, p: Pos) -> Cow<'a, str> {
        match p {
            Pos::Core(i) => match self.edit(i) {
                Some(e) => Cow::Owned(e.text_of(&self.proj[i as usize].text).into_owned()),
                None => self.proj[i as usize].text.get_ref(),
            },
            Pos::Synth(i) => self.synth[i as usize].text.get_ref(),
        }
    }

    /// Whether [`Turn::text`] begins with the summary header (from the message's flag
    /// unless an edit gave it a text of its own).
    pub fn headed(&self, p: Pos) -> bool {
        match p {
            Pos::Core(i) => match self.edit(i) {
                Some(e) => e.headed(self.proj[i as usize].headed),
                None => self.proj[i as usize].headed,
            },
            Pos::Synth(i) => self.synth[i as usize].headed,
        }
    }

    pub fn slot(&self, p: Pos) -> &Slot {
        static NONE: Slot = Slot::None;
        match p {
            Pos::Core(i) => &self.slots[i as usize],
            Pos::Synth(_) => &NONE,
        }
    }

    /// Tokens of a message's text as the view holds it (counted once for unedited content).
    pub fn tokens(&self, p: Pos) -> u64 {
        match p {
            Pos::Core(i) => match self.edit(i) {
                Some(e) => e.tokens,
                None => self.proj[i as usize].tokens(),
            },
            Pos::Synth(i) => self.synth[i as usize].tokens(),
        }
    }

    /// [`Turn::tokens`], [`Turn::chars`] and [`Turn::headed`] of a projected message, its
    /// edit looked up once (the nudge's measures ask them of every message of a view).
    pub fn measures(&self, i: u32) -> (u64, usize, bool) {
        let c = &self.proj[i as usize];
        match self.edit(i) {
            Some(e) => (e.tokens, e.chars, e.headed(c.headed)),
            None => (c.tokens(), c.chars as usize, c.headed),
        }
    }

    /// Characters of a message's text as the view holds it.
    pub fn chars(&self, p: Pos) -> usize {
        match p {
            Pos::Core(i) => match self.edit(i) {
                Some(e) => e.chars,
                None => self.proj[i as usize].chars as usize,
            },
            Pos::Synth(i) => self.synth[i as usize].chars as usize,
        }
    }

    pub fn is_truncated(&self, p: Pos) -> bool {
        matches!(p, Pos::Core(i) if self.edit(i).is_some_and(Edit::truncated))
    }

    /// Append the nudge to the view when the decision injects one (what the runtime sends;
    /// its rebuild's replay never does).
    pub fn inject_nudge(&mut self) {
        self.inject_nudge_with(None);
    }

    /// [`Turn::inject_nudge`], its range lines taken from and kept in `lines` (a replay's).
    pub fn inject_nudge_with(&mut self, lines: Option<&mut nudge::RangeLines>) {
        let Some(d) = self.nudge.as_ref().filter(|d| d.inject) else {
            return;
        };
        let core = match lines {
            // Measured from the lines' counts kept with them.
            Some(lines) => {
                let (text, measured) = nudge::render_measured(d, lines);
                debug_assert_eq!(
                    measured,
                    crate::noa::tokens::count_and_chars(&text),
                    "a nudge's measure from kept lines differs"
                );
                Core::synthetic_measured(NUDGE_ID, text, Origin::Nudge, measured)
            }
            None => nudge_core(nudge::render(d)),
        };
        debug_assert_eq!(
            core.text.get(),
            nudge::render(d),
            "a nudge from kept lines differs"
        );
        self.synth.push(core);
        // One more: a projection's worth of positions is not doubled for it.
        self.items.reserve_exact(1);
        self.items.push(Pos::Synth(self.synth.len() as u32 - 1));
    }

    /// The tokens of the view as sent (after the cuts, the nudge included) of a turn whose
    /// count was measured: the sum of [`Turn::tokens`] over the view, without a pass over it.
    pub fn sent(&self) -> u64 {
        let nudge = match (self.injected(), self.items.last()) {
            (Some(_), Some(&p @ Pos::Synth(_))) => self.tokens(p),
            _ => 0,
        };
        (self.measure as i64 - self.saved).max(0) as u64 + nudge
    }

    /// The injected nudge's decision.
    pub fn injected(&self) -> Option<&nudge::Decision> {
        self.nudge.as_ref().filter(|d| d.inject)
    }

    /// What the nudge's measures ask of each view message.
    pub fn facts<'s>(&'s self, state: &'s State, cfg: &NoaConfig) -> Facts<'s> {
        match &self.kept {
            Some(k) => Facts::Kept(&k.facts),
            None => Facts::Found {
                covered: covered(state, &self.active),
                calls: protect::protected_calls(self.view().map(|(_, c)| c), cfg),
            },
        }
    }

    /// The view's messages, in order.
    pub fn view(&self) -> impl DoubleEndedIterator<Item = (Pos, &Core<'a>)> + '_ {
        self.items.iter().map(|&p| (p, self.core(p)))
    }

    /// The ref → raw id map of the state extended by this turn's refs.
    pub fn raw_of_ref<'s>(&'s self, state: &'s State) -> HashMap<Cow<'s, str>, &'s str> {
        let mut m: HashMap<Cow<'s, str>, &'s str> = state
            .message_refs
            .by_ref
            .iter()
            .map(|(r, id)| (Cow::Borrowed(r.as_str()), id.as_str()))
            .collect();
        for &i in &self.new_refs {
            if let Some(name) = self.slots[i as usize].name() {
                m.insert(
                    Cow::Owned(name.into_owned()),
                    self.proj[i as usize].id.as_ref(),
                );
            }
        }
        m
    }

    /// The slot of any raw id: the state's record, or this turn's assignment.
    pub fn slot_of_raw(&self, state: &State, id: &str) -> Slot {
        if let Some(r) = state.message_refs.by_raw.get(id) {
            return refs::slot_of(r);
        }
        self.new_by_raw().get(id).cloned().unwrap_or(Slot::None)
    }

    fn new_by_raw(&self) -> HashMap<&str, Slot> {
        self.new_refs
            .iter()
            .map(|&i| {
                (
                    self.proj[i as usize].id.as_ref(),
                    self.slots[i as usize].clone(),
                )
            })
            .collect()
    }

    /// The state as the runtime holds it after this turn: its refs recorded, liveness set,
    /// the token snapshot kept for refs still projected (plus `tagged`, the counts the view's
    /// tags showed for the first time).
    pub fn ledger(&self, state: &State, tagged: &[(String, i64)]) -> State {
        let mut out = state.clone();
        self.record(&mut out, tagged);
        out
    }

    /// [`Turn::ledger`] in place: `state` becomes the state after this turn.
    pub fn record(&self, out: &mut State, tagged: &[(String, i64)]) {
        self.record_into(out, tagged, None);
    }

    /// [`Turn::record`] (no tags), keeping what it changed: [`UndoRecord::undo`] puts `out`
    /// back. A replay records a Compress call's view in its state this way rather than in a
    /// copy, as a copy's ref maps would be copied whole at the first ref added.
    pub fn record_undoable(&self, out: &mut State) -> UndoRecord {
        let mut undo = UndoRecord::default();
        self.record_into(out, &[], Some(&mut undo));
        undo
    }

    fn record_into(
        &self,
        out: &mut State,
        tagged: &[(String, i64)],
        mut undo: Option<&mut UndoRecord>,
    ) {
        let refs = &mut out.message_refs;
        let mut put = |by_ref: bool, key: String, value: String| {
            let map = if by_ref {
                &mut refs.by_ref
            } else {
                &mut refs.by_raw
            };
            // The key is copied only for an undo (a replay records refs at every request).
            match undo.as_deref_mut() {
                Some(u) => {
                    let before = map.insert(key.clone(), value);
                    u.refs.push((by_ref, key, before));
                }
                None => {
                    map.insert(key, value);
                }
            }
        };
        for &i in &self.new_refs {
            let id = &self.proj[i as usize].id;
            match &self.slots[i as usize] {
                // Copied as a string (not through its `Display`: one per new ref).
                Slot::Blocked => put(false, id.as_ref().to_owned(), refs::BLOCKED.to_owned()),
                slot => {
                    if let Some(name) = slot.name() {
                        put(false, id.as_ref().to_owned(), name.as_ref().to_owned());
                        put(true, name.into_owned(), id.as_ref().to_owned());
                    }
                }
            }
        }
        if let Some(blocks) = out.blocks.as_mut() {
            if let Some(u) = undo.as_deref_mut() {
                u.active = blocks.iter().map(|b| b.active).collect();
            }
            for (b, &live) in blocks.iter_mut().zip(&self.active) {
                b.active = live;
            }
        }
        // A turn grown from the one before projects every ref that one did, and that one kept
        // only projected refs: nothing to drop.
        if !out.token_snapshot.is_empty() && self.kept.is_none() {
            if let Some(u) = undo {
                u.snapshot = Some(out.token_snapshot.clone());
            }
            // The refs still projected: canonical ones by number (no name is made for each
            // slot), any other by name.
            let mut numbered: Vec<bool> = Vec::new();
            let mut named: HashSet<&str> = HashSet::new();
            for s in &self.slots {
                match s {
                    Slot::Num(n) => {
                        let n = *n as usize;
                        if numbered.len() <= n {
                            numbered.resize(n + 1, false);
                        }
                        numbered[n] = true;
                    }
                    Slot::Other(name) => {
                        named.insert(name.as_str());
                    }
                    Slot::None | Slot::Blocked => {}
                }
            }
            out.token_snapshot.retain(|r, _| {
                named.contains(r.as_str())
                    || matches!(refs::slot_of(r),
                        Slot::Num(n) if numbered.get(n as usize) == Some(&true))
            });
        }
        for (r, n) in tagged {
            out.token_snapshot.entry(r.clone()).or_insert(*n);
        }
    }
}

/// What [`Turn::record_undoable`] changed in a state, to be put back.
#[derive(Debug, Default)]
pub struct UndoRecord {
    /// Each ref map entry set (in `by_ref` or `by_raw`), with the value it replaced.
    refs: Vec<(bool, String, Option<String>)>,
    /// The blocks' liveness before.
    active: Vec<bool>,
    /// The token snapshot before, when it was pruned.
    snapshot: Option<crate::fasthash::FastMap<String, i64>>,
}

impl UndoRecord {
    /// Puts `state` back as it was before the record.
    pub fn undo(self, state: &mut State) {
        let refs = &mut state.message_refs;
        for (by_ref, key, before) in self.refs.into_iter().rev() {
            let map = if by_ref {
                &mut refs.by_ref
            } else {
                &mut refs.by_raw
            };
            match before {
                Some(v) => {
                    map.insert(key, v);
                }
                None => {
                    map.remove(&key);
                }
            }
        }
        if let Some(blocks) = state.blocks.as_mut() {
            for (b, live) in blocks.iter_mut().zip(self.active) {
                b.active = live;
            }
        }
        if let Some(s) = self.snapshot {
            state.token_snapshot = s;
        }
    }
}

/// The union of the effective coverage of the live blocks.
pub fn covered<'s>(state: &'s State, active: &[bool]) -> FastSet<&'s str> {
    let live = || {
        state
            .blocks()
            .iter()
            .zip(active)
            .filter(|(_, &a)| a)
            .map(|(b, _)| &b.effective_message_ids)
    };
    // Sized once: a long session's blocks cover most of it.
    let mut out = FastSet::with_capacity_and_hasher(live().map(Vec::len).sum(), Default::default());
    out.extend(live().flatten().map(String::as_str));
    out
}

/// The number of a block id as the prune orders anchors (`b12` → 12; anything else 0).
fn block_number(id: &str) -> i64 {
    id.strip_prefix('b').unwrap_or(id).parse().unwrap_or(0)
}

/// The message that stands in for a block (SPEC 4.4 step 3).
pub fn summary_text(b: &Block, path: &str) -> String {
    let mut s = String::from(SUMMARY_HEADER);
    if !b.topic.is_empty() {
        s.push_str(" — ");
        s.push_str(&b.topic);
    }
    let summary = b.summary.trim();
    if !summary.is_empty() {
        s.push('\n');
        s.push_str(summary);
    }
    s.push_str("\n\n");
    s.push_str(&format!(
        "<noa-archive block=\"{}\" tier=\"{}\" range=\"{}-{}\" path=\"{}\"/>",
        b.block_id, b.tier, b.start_ref, b.end_ref, path
    ));
    s
}

fn summary_core(block: u32, b: &Block, path: &str) -> Core<'static> {
    Core::synthetic(
        &format!("{SUMMARY_ID_PREFIX}{}", b.block_id),
        summary_text(b, path),
        Origin::Summary { block },
    )
}

/// Steps 1-3 only (refs, liveness, prune): what materializing applies (SPEC 4.9).
pub fn prune_only<'p, 'a>(
    proj: &'p [Core<'a>],
    state: &State,
    cfg: &NoaConfig,
    archive_path: &dyn Fn(&Block) -> String,
) -> Turn<'p, 'a> {
    sized(proj, state, cfg, archive_path)
}

fn sized<'p, 'a>(
    proj: &'p [Core<'a>],
    state: &State,
    cfg: &NoaConfig,
    archive_path: &dyn Fn(&Block) -> String,
) -> Turn<'p, 'a> {
    let mut index = Default::default();
    sized_knowing(proj, state, cfg, archive_path, None, &mut index).0
}

/// [`sized`], the refs of the first cores `known` already (each recorded in `state`, as
/// [`refs::assign`] would find them), its ids numbered in `index` (grown from what it held
/// of a shorter prefix of the same projection); with the ids its live blocks cover.
fn sized_knowing<'p, 'a>(
    proj: &'p [Core<'a>],
    state: &State,
    cfg: &NoaConfig,
    archive_path: &dyn Fn(&Block) -> String,
    known: Option<Vec<Slot>>,
    index: &mut (ids::Ids<'p>, ids::Blocks),
) -> (Turn<'p, 'a>, ids::Covered) {
    let protected = |c: &Core<'_>| protect::is_hard(c, cfg);
    let (slots, new_refs) = match known {
        Some(mut slots) => {
            let from = slots.len();
            // Numbers that ran out among the known: none after them gets a slot.
            let exhausted = proj[..from]
                .iter()
                .zip(&slots)
                .any(|(c, s)| *s == Slot::None && !c.is_synthetic() && !c.id.is_empty());
            let (more, new) = if exhausted {
                (vec![Slot::None; proj.len() - from], Vec::new())
            } else {
                refs::assign(&proj[from..], state, protected)
            };
            #[cfg(debug_assertions)]
            {
                let (all, none) = refs::assign(&proj[..from], state, protected);
                assert!(
                    all == slots && none.is_empty(),
                    "known refs differ from the state's"
                );
            }
            slots.extend(more);
            (slots, new.into_iter().map(|i| i + from as u32).collect())
        }
        None => refs::assign(proj, state, protected),
    };
    let items = (0..proj.len() as u32).map(Pos::Core).collect();
    let mut t = Turn::before_step4(proj, slots, new_refs, Vec::new(), Vec::new(), items);
    let (ids, blocks) = index;
    if state.blocks().is_empty() {
        // None to number (what was kept of other blocks goes).
        blocks.cover(state, ids);
        return (t, ids::Covered::of(blocks, &[], 0));
    }
    ids.cover(proj);
    blocks.cover(state, ids);
    t.active = liveness(state, blocks);
    let live = ids::Covered::of(blocks, &t.active, proj.len());
    if live.any() {
        prune(&mut t, state, (ids, blocks), archive_path, live.clone());
    }
    (t, live)
}

/// Run the pipeline over a projection. `archive_path` names each block's archive in its
/// summary (the runtime writes the block's `archivePath`).
pub fn run<'p, 'a>(
    proj: &'p [Core<'a>],
    state: &State,
    cfg: &NoaConfig,
    count: Count,
    archive_path: &dyn Fn(&Block) -> String,
) -> Turn<'p, 'a> {
    let mut t = sized(proj, state, cfg, archive_path);
    finish(&mut t, state, cfg, count, Deciding::Whole);
    t
}

/// How much of the nudge's decision a turn needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deciding {
    /// None (`Turn::nudge` stays `None`).
    No,
    /// Whether one is shown, of what kind, tier and targets: a nudge held back by its cadence
    /// is decided without measuring what it would have said (`nudge::held_back`).
    Shown,
    /// All of it, with its measures and reason (status.json, view.md).
    Whole,
}

/// Steps 4–7 over a turn after step 3 (the nudge as `nudge` asks).
fn finish(t: &mut Turn<'_, '_>, state: &State, cfg: &NoaConfig, count: Count, nudge: Deciding) {
    hide_compress_calls(t, state);
    settle(t, state, cfg, count, nudge, None, None);
}

/// What a replay's requests carry from one to the next for steps 6 and 7 (see `Growing`).
struct Carried<'g> {
    resume: &'g mut super::recommend::Resume,
    candidates: &'g mut truncate::Candidates,
}

/// Steps 5–7 over a turn after step 4; `measure` is the view's tokens when already known.
fn settle(
    t: &mut Turn<'_, '_>,
    state: &State,
    cfg: &NoaConfig,
    count: Count,
    nudge: Deciding,
    measure: Option<u64>,
    carried: Option<Carried<'_>>,
) {
    let (resume, candidates) = match carried {
        Some(c) => (Some(c.resume), Some(c.candidates)),
        None => (None, None),
    };
    if nudge == Deciding::No && !new_cut_possible(t, cfg) {
        // What such a turn is asked for is its new messages (their refs and tags), and the
        // truncation would cut none of them: no count, no truncation.
        return;
    }
    t.measure = measure.unwrap_or_else(|| t.items.iter().map(|&p| t.tokens(p)).sum());
    t.count = match count {
        Count::Measured => t.measure,
        Count::Given(n) => n,
    };
    cut_results(t, cfg, candidates);
    t.nudge = match nudge {
        Deciding::No => None,
        Deciding::Shown if nudge::held_back(t, state, cfg) => Some(nudge::not_shown(t, cfg)),
        Deciding::Shown | Deciding::Whole => Some(match resume {
            Some(r) => {
                let rec = r.recommend(t, state, cfg);
                nudge::decide_with(t, state, cfg, rec, nudge == Deciding::Whole)
            }
            None => nudge::decide(t, state, cfg),
        }),
    };
}

/// Whether the truncation could cut a message a grown turn shows for the first time (any
/// message of another turn): whether one is before the recent tail the truncation leaves.
fn new_cut_possible(t: &Turn<'_, '_>, cfg: &NoaConfig) -> bool {
    let Some(k) = &t.kept else { return true };
    // A grown turn's new messages end its list.
    let cutoff = t.items.len().saturating_sub(cfg.protect_recent_messages);
    cutoff
        .checked_sub(1)
        .and_then(|last| t.items.get(last))
        .is_some_and(|&p| matches!(p, Pos::Core(i) if i >= k.new_from))
}

/// The nudge message appended to the view (SPEC 4.7): its own id, no ref.
pub fn nudge_core(text: String) -> Core<'static> {
    Core::synthetic(NUDGE_ID, text, Origin::Nudge)
}
