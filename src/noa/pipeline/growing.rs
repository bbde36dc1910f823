//! Steps 1–4 (refs, liveness, prune, Compress-call hiding) kept from one request of a
//! replay to the next (issue 26): while the state's blocks stay the same, a request's prefix
//! is the one before and its new messages, so its refs, liveness and pruned list are the
//! earlier ones and those of the new messages. What a new message could change in the earlier
//! ones — it carries an id a block covers, it answers (or is answered by) an earlier call, or
//! the earlier list ends inside a turn — sends the request through the whole pipeline
//! instead, as does any request after the blocks changed. Step 4 and the view's tokens carry
//! over while no Compress call comes; what the blocks and pairs make of each message (its
//! [`Kept::facts`]) is found once per blocks.

use super::ids::id_hash;
use super::*;

/// A view after step 4.
struct Hidden {
    items: Vec<Pos>,
    stubs: Vec<(u32, Edit)>,
    measure: u64,
}

/// What consecutive requests share (see the module).
#[derive(Default)]
pub struct Growing<'p, 'a> {
    /// Whether what is kept is of the current blocks (the replay resets it when they change).
    kept: bool,
    /// Whether `slots` are those of the first `len` cores, each recorded in the state the next
    /// request is over (a whole run then numbers only the cores after them).
    recorded: bool,
    /// The cores it was made for: the first `len` of the projection.
    len: usize,
    slots: Vec<Slot>,
    active: Vec<bool>,
    /// The summaries (a request's nudge is pushed after them and taken off again).
    synth: Vec<Core<'a>>,
    summaries: usize,
    /// The view after step 3.
    items: Vec<Pos>,
    /// Whether step 3 strips orphans (some block is live and covers something).
    stripping: bool,
    /// Call ids of the cores it was made for.
    calls: FastSet<&'a str>,
    /// Which cores `calls` holds those of: the first `.1` of the projection at `.0`.
    calls_of: (usize, usize),
    /// Per core: [`COVERED`], [`PAIRED`], [`MADE`], [`LIVE`] (see [`Kept::facts`]).
    facts: std::sync::Arc<Vec<u8>>,
    /// Per block of the state ([`Kept::blocks`]).
    blocks: std::sync::Arc<Vec<BlockMeasure>>,
    /// The call ids of the state's blocks, and of its live blocks.
    made: FastSet<String>,
    live_calls: FastSet<String>,
    /// The next ref number to hand out.
    cursor: u32,
    /// The numbers ran out before the last core: no later core gets a slot (as
    /// `refs::assign` stops at the first core it has no number for).
    exhausted: bool,
    /// The view after step 4 of the request before, with its stubs and tokens: what the
    /// next one starts from while no Compress call comes (`None` after the blocks changed).
    hidden: Option<Hidden>,
    /// How many of `items` the last growth added.
    added: usize,
    /// The nudge's recommendation, taken up from the request before's scan.
    resume: crate::noa::recommend::Resume,
    /// What the truncation may cut, found for the requests before.
    candidates: truncate::Candidates,
    /// The ids of the projection numbered, and the state's blocks' (for the whole runs).
    index: (ids::Ids<'p>, ids::Blocks),
    /// The room a turn's edits and list took, given to the next one.
    spare_edits: Edits,
    spare_items: Vec<Pos>,
    /// `spare_items` is the last step 4's list (`hidden`'s before the growth), the nudge
    /// after it or not: the next grown request extends it instead of copying the list (a copy
    /// per request made a long history's replay quadratic).
    spare_is_hidden: bool,
    /// Every request through the whole pipeline (what grown ones are checked against).
    never: bool,
    /// Requests made from what was kept, and through the whole pipeline (what a test or a
    /// benchmark asks).
    pub grown: usize,
    pub whole: usize,
}

impl<'p, 'a> Growing<'p, 'a> {
    /// One that never grows: every request through the whole pipeline.
    pub fn never() -> Growing<'p, 'a> {
        Growing {
            never: true,
            ..Growing::default()
        }
    }

    /// The refs the last turn handed out are not recorded (or the state is another): the next
    /// request goes through the whole pipeline.
    pub fn reset(&mut self) {
        self.kept = false;
        self.recorded = false;
    }

    /// The state's blocks changed, its refs stay those of the last turn: the next request goes
    /// through the whole pipeline but for the refs of the cores the last turn had.
    pub fn blocks_changed(&mut self) {
        self.kept = false;
    }

    /// The turn of a request over `proj` (a prefix of the projection the earlier requests
    /// were over), as [`run`] makes it, its nudge decided as `nudge` asks. Give it back with
    /// [`Growing::keep`] once done with it; [`Growing::reset`] when its refs are not
    /// recorded in the state the next request is over.
    pub fn turn(
        &mut self,
        proj: &'p [Core<'a>],
        state: &State,
        cfg: &NoaConfig,
        archive_path: &dyn Fn(&Block) -> String,
        count: Count,
        nudge: Deciding,
    ) -> Turn<'p, 'a> {
        let new_from = self.len as u32;
        let reuse = std::mem::take(&mut self.spare_is_hidden);
        let (mut t, grown) = match self.grow(proj, state, cfg) {
            Some(new_refs) => {
                self.grown += 1;
                let slots = std::mem::take(&mut self.slots);
                let synth = std::mem::take(&mut self.synth);
                let active = self.active.clone();
                // Its list is step 4's, made by `hide`.
                let mut items = std::mem::take(&mut self.spare_items);
                if !reuse {
                    items.clear();
                }
                let mut t = Turn::before_step4(proj, slots, new_refs, active, synth, items);
                t.kept = Some(Kept {
                    new_from,
                    facts: self.facts.clone(),
                    blocks: self.blocks.clone(),
                });
                (t, true)
            }
            None => {
                self.whole += 1;
                let known =
                    (self.recorded && self.slots.len() == self.len && self.len <= proj.len())
                        .then(|| std::mem::take(&mut self.slots));
                let (t, live) =
                    sized_knowing(proj, state, cfg, archive_path, known, &mut self.index);
                self.start(&t, state, cfg, live);
                (t, false)
            }
        };
        debug_assert!(t.edits.is_empty());
        t.edits = std::mem::take(&mut self.spare_edits);
        let measure = self.hide(&mut t, state, grown, reuse);
        let carried = Carried {
            resume: &mut self.resume,
            candidates: &mut self.candidates,
        };
        settle(
            &mut t,
            state,
            cfg,
            count,
            nudge,
            Some(measure),
            Some(carried),
        );
        t
    }

    /// Step 4 over a turn whose step 3 is `self.items`, from the request before when it
    /// was `grown` from it and no Compress call came since (nothing new then changes what
    /// is hidden, and the new messages are shown as they are); the view's tokens. What it
    /// makes is kept for the next request.
    fn hide(&mut self, t: &mut Turn<'_, 'a>, state: &State, grown: bool, reuse: bool) -> u64 {
        let before = self.hidden.take().filter(|_| {
            grown
                && !t.proj[t.kept.as_ref().map_or(0, |k| k.new_from as usize)..]
                    .iter()
                    .any(Core::is_compress_call)
        });
        let hidden = match before {
            Some(mut h) => {
                let added = &self.items[self.items.len() - self.added..];
                // The list the last request had (its nudge after it, or not), extended; else
                // a copy.
                let old = h.items.len();
                let nudge_after = t.items.len() == old + 1
                    && t.items.last().is_some_and(|p| matches!(p, Pos::Synth(_)));
                if grown && reuse && (t.items.len() == old || nudge_after) {
                    t.items.truncate(old);
                } else {
                    t.items.clone_from(&h.items);
                }
                debug_assert_eq!(t.items, h.items, "the list kept is the last step 4's");
                h.items.extend_from_slice(added);
                t.items.extend_from_slice(added);
                h.measure += added.iter().map(|&p| t.tokens(p)).sum::<u64>();
                for (i, e) in &h.stubs {
                    t.edits.insert(*i, e.clone(), t.proj.len());
                }
                h
            }
            None => {
                // Another view than the one before and new messages: no scan is taken up.
                self.resume.reset();
                self.candidates.reset();
                t.items.clone_from(&self.items);
                let stubs = hide_compress_calls(t, state);
                Hidden {
                    items: t.items.clone(),
                    stubs,
                    measure: t.items.iter().map(|&p| t.tokens(p)).sum(),
                }
            }
        };
        let measure = hidden.measure;
        self.hidden = Some(hidden);
        measure
    }

    /// Take back what a turn from [`Growing::turn`] borrowed.
    pub fn keep(&mut self, mut t: Turn<'_, 'a>) {
        self.spare_edits = std::mem::take(&mut t.edits);
        self.spare_edits.clear();
        self.spare_items = std::mem::take(&mut t.items);
        // Nothing after step 4 changes the list but the nudge's place at its end.
        self.spare_is_hidden = self.hidden.is_some();
        if self.kept && t.slots.len() == self.len {
            self.slots = t.slots;
            self.synth = t.synth;
            self.synth.truncate(self.summaries);
            // The caller records them, or says otherwise with `reset`.
            self.recorded = true;
        } else {
            self.kept = false;
            self.recorded = false;
        }
    }

    /// Keep what a whole run of steps 1–3 made (`live`: the ids its live blocks cover).
    fn start(&mut self, t: &Turn<'_, 'a>, state: &State, cfg: &NoaConfig, live: ids::Covered) {
        self.hidden = None;
        self.len = t.proj.len();
        self.slots = t.slots.clone();
        self.active = t.active.clone();
        self.synth = t.synth.clone();
        self.summaries = t.synth.len();
        self.items = t.items.clone();
        self.stripping = !state.blocks().is_empty() && live.any();
        let calls = protect::protected_calls(t.items.iter().map(|&p| t.core(p)), cfg);
        let of_blocks = block_calls(state, &t.active);
        let mut facts = vec![0u8; t.proj.len()];
        let ids = &self.index.0;
        #[cfg(debug_assertions)]
        let by_id = covered(state, &t.active);
        for ((i, f), c) in facts.iter_mut().enumerate().zip(t.proj) {
            let is_covered = live.any() && live.contains(ids.first(i));
            #[cfg(debug_assertions)]
            assert_eq!(
                is_covered,
                by_id.contains(c.id.as_ref()),
                "covered ids differ"
            );
            if is_covered {
                *f |= COVERED;
            }
            *f |= call_facts(c, &of_blocks);
        }
        self.made = of_blocks.0.iter().map(|c| c.to_string()).collect();
        self.live_calls = of_blocks.1.iter().map(|c| c.to_string()).collect();
        for &p in &t.items {
            if let Pos::Core(i) = p {
                if protect::is_hard_paired(&t.proj[i as usize], cfg, &calls) {
                    facts[i as usize] |= PAIRED;
                }
            }
        }
        self.facts = std::sync::Arc::new(facts);
        self.blocks = std::sync::Arc::new(state.blocks().iter().map(BlockMeasure::of).collect());
        // A replay's turns are over prefixes of one projection: the calls of the cores met
        // before are kept.
        let base = t.proj.as_ptr() as usize;
        if self.calls_of.0 != base || self.calls_of.1 > t.proj.len() {
            self.calls.clear();
            self.calls_of = (base, 0);
        }
        self.calls.extend(
            t.proj[self.calls_of.1..]
                .iter()
                .filter(|c| !c.call.is_empty())
                .map(|c| c.call),
        );
        self.calls_of.1 = t.proj.len();
        // Every effective id of the state's blocks, hashed, for what `grow` asks of a new
        // message (two ids of one hash only send a request through the whole pipeline).
        self.index.1.hash(state);
        #[cfg(debug_assertions)]
        {
            let all: FastSet<u64> = state
                .blocks()
                .iter()
                .flat_map(|b| b.effective_message_ids.iter().map(|id| id_hash(id)))
                .collect();
            assert_eq!(&all, self.index.1.hashed(), "kept effective ids differ");
        }
        let mut cursor = refs::highest_recorded(state) + 1;
        for &i in &t.new_refs {
            if let Slot::Num(n) = t.slots[i as usize] {
                cursor = cursor.max(n + 1);
            }
        }
        // Numbers the state's maps disagree on are skipped by the whole pipeline's count:
        // such a state is never grown.
        let taken = state.message_refs.by_ref.highest_key_ref() >= cursor;
        self.cursor = cursor;
        // `assign` gives every core of a message a slot unless it stopped for want of a number.
        self.exhausted = t
            .proj
            .iter()
            .zip(&t.slots)
            .any(|(c, s)| *s == Slot::None && !c.is_synthetic() && !c.id.is_empty());
        self.kept = !taken;
    }

    /// Steps 1–3 over `proj` from what is kept and its new cores, when nothing of the kept
    /// can change (see the module); the refs handed out. `None`: the whole pipeline.
    fn grow(&mut self, proj: &[Core<'a>], state: &State, cfg: &NoaConfig) -> Option<Vec<u32>> {
        let a = self.len;
        if self.never || !self.kept || a == 0 || proj.len() < a || self.slots.len() != a {
            return None;
        }
        // The earlier list ends with its last core, shown, outside a turn.
        let last = &proj[a - 1];
        if self.items.last() != Some(&Pos::Core(a as u32 - 1))
            || last.kind == Kind::Reasoning
            || last.is_act()
        {
            return None;
        }
        let new = &proj[a..];
        let effective = self.index.1.hashed();
        for c in new {
            if (!c.call.is_empty() && self.calls.contains(c.call))
                || (!effective.is_empty() && effective.contains(&id_hash(&c.id)))
            {
                return None;
            }
        }
        // Step 1 for the new cores, as `refs::assign` hands them out.
        let by_raw = &state.message_refs.by_raw;
        let mut cursor = self.cursor;
        let mut exhausted = self.exhausted;
        let mut slots = Vec::with_capacity(new.len());
        let mut new_refs = Vec::new();
        for (k, c) in new.iter().enumerate() {
            let i = (a + k) as u32;
            if exhausted || c.is_synthetic() || c.id.is_empty() {
                slots.push(Slot::None);
                continue;
            }
            if let Some(r) = (!by_raw.is_empty())
                .then(|| by_raw.get(c.id.as_ref()))
                .flatten()
            {
                slots.push(refs::slot_of(r));
                continue;
            }
            if protect::is_hard(c, cfg) {
                slots.push(Slot::Blocked);
            } else {
                if cursor > refs::ref_limit() {
                    // Out of numbers: this core and every later one get none.
                    exhausted = true;
                    slots.push(Slot::None);
                    continue;
                }
                slots.push(Slot::Num(cursor));
                cursor += 1;
            }
            new_refs.push(i);
        }
        // Step 3 for the new cores: none is covered; orphans among them go (their calls and
        // results are among them).
        let kept = if self.stripping {
            strip_new(new, a)
        } else {
            (a..proj.len()).map(|i| Pos::Core(i as u32)).collect()
        };
        // The new cores' facts: none is covered; their pairs are among them.
        let calls = protect::protected_calls(
            kept.iter().filter_map(|&p| match p {
                Pos::Core(i) => Some(&proj[i as usize]),
                Pos::Synth(_) => None,
            }),
            cfg,
        );
        let facts = std::sync::Arc::make_mut(&mut self.facts);
        facts.resize(proj.len(), 0);
        for (f, c) in facts[a..].iter_mut().zip(new) {
            if c.is_compress_call() {
                if self.made.contains(c.call) {
                    *f |= MADE;
                }
                if self.live_calls.contains(c.call) {
                    *f |= LIVE;
                }
            }
        }
        for &p in &kept {
            if let Pos::Core(i) = p {
                if protect::is_hard_paired(&proj[i as usize], cfg, &calls) {
                    facts[i as usize] |= PAIRED;
                }
            }
        }
        self.added = kept.len();
        self.items.extend(kept);
        self.slots.extend(slots);
        self.calls
            .extend(new.iter().filter(|c| !c.call.is_empty()).map(|c| c.call));
        self.calls_of.1 = proj.len();
        self.cursor = cursor;
        self.exhausted = exhausted;
        self.len = proj.len();
        Some(new_refs)
    }
}

/// [`strip_orphans`] over new cores `new` (the first at index `first`) whose calls and
/// results pair among themselves only.
fn strip_new(new: &[Core<'_>], first: usize) -> Vec<Pos> {
    let results: FastSet<&str> = new
        .iter()
        .filter(|c| c.kind == Kind::ToolResult && !c.call.is_empty())
        .map(|c| c.call)
        .collect();
    let items: Vec<usize> = (0..new.len())
        .filter(|&k| {
            let c = &new[k];
            c.kind != Kind::ToolCall
                || c.call.is_empty()
                || c.tool == COMPRESS_TOOL
                || results.contains(c.call)
        })
        .collect();
    let calls: FastSet<&str> = items
        .iter()
        .map(|&k| &new[k])
        .filter(|c| c.kind == Kind::ToolCall && !c.call.is_empty())
        .map(|c| c.call)
        .collect();
    let items: Vec<usize> = items
        .into_iter()
        .filter(|&k| {
            let c = &new[k];
            !(c.kind == Kind::ToolResult && !c.call.is_empty() && !calls.contains(c.call))
        })
        .collect();
    let mut keep = vec![true; items.len()];
    let mut i = 0;
    while i < items.len() {
        if new[items[i]].kind != Kind::Reasoning {
            i += 1;
            continue;
        }
        let start = i;
        while i < items.len() && new[items[i]].kind == Kind::Reasoning {
            i += 1;
        }
        if i >= items.len() || !new[items[i]].is_act() {
            keep[start..i].iter_mut().for_each(|k| *k = false);
        }
    }
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(k, keep)| keep.then_some(Pos::Core((first + k) as u32)))
        .collect()
}
