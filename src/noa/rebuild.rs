//! Rebuild from history (SPEC 4.8): the state replayed from the transcript's Compress calls —
//! each against the projection up to and including it, as the runtime replays — and from
//! normafs's journal batches at their place in time.

use super::args;
use super::compress::{self, Applied, Placement};
use super::content::{Kind, COMPRESS_TOOL};
use super::pipeline::{self, Count};
use super::views::{ArchivePath, Projection};
use crate::config::NoaConfig;
use crate::format::archive::Archive;
use crate::format::state::State;

mod split;

/// A batch normafs committed through ctl (a line of `ctl.jsonl`).
#[derive(Debug, Clone)]
pub struct JournalBatch {
    /// How many projected content messages existed when it ran.
    pub prefix: usize,
    /// The Compress input it ran.
    pub input: String,
    pub call: String,
}

/// What a rebuild replayed.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub state: State,
    /// The archive of every block of the rebuilt state made by this replay.
    pub archives: Vec<Archive>,
    pub replayed: usize,
    /// Calls that made no block then or that no longer apply, with why.
    pub skipped: Vec<String>,
}

/// What the replay saw at one request: the view the runtime built before an assistant
/// message (issue 26's timeline).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Messages before the request: the assistant message at this index answered it.
    pub at: usize,
    /// Tokens of the content messages before it, as written (nothing compressed or cut).
    pub history: u64,
    /// The view's tokens as the runtime counted them for its decisions (after Compress-call
    /// hiding, before truncation).
    pub counted: u64,
    /// The view's tokens as sent: after truncation, the nudge included.
    pub sent: u64,
    /// Tool results cut by the truncation, and the tokens it took.
    pub cut: usize,
    pub cut_tokens: u64,
    /// Live blocks (summaries in the view).
    pub live_blocks: usize,
    /// The nudge, when one was shown.
    pub nudge: Option<Shown>,
}

/// A nudge as shown at a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub kind: super::nudge::NudgeKind,
    pub tier: u32,
    /// The blocks a tier-2/3 nudge asks to consolidate.
    pub targets: Vec<String>,
}

/// What one replayed Compress call or ctl batch made.
#[derive(Debug, Clone, PartialEq)]
pub struct Made {
    pub call: String,
    /// Messages before it: the request it answered is the one at this place or earlier.
    pub at: usize,
    /// The blocks made, with their tiers.
    pub blocks: Vec<(String, i64)>,
    /// The tokens the blocks took out of the view, as the runtime counts them.
    pub tokens: i64,
    /// Made by a ctl batch (normafs's journal), not by the model.
    pub journal: bool,
}

/// A session's history replayed up to a place: the states at the points asked for, and
/// every request before it.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub states: Vec<State>,
    pub requests: Vec<Request>,
    pub made: Vec<Made>,
    /// Calls that made no block then or that no longer apply, with why.
    pub skipped: Vec<String>,
    /// Requests made from the one before (see `pipeline::Growing`), and through the whole
    /// pipeline.
    pub grown: usize,
    pub whole: usize,
    /// The request from which a second thread made them, when one did (see `split`).
    pub split_at: Option<usize>,
}

enum Event<'j> {
    Call {
        index: usize,
    },
    Journal(&'j JournalBatch),
    /// A request the runtime made: the view of the messages before an assistant message.
    Request,
    /// The state wanted for the request after the first messages of the `k`-th point.
    Capture(usize),
}

/// A session's history to replay: its projection and configuration, where new blocks'
/// archives go (which names the session), the journal's batches and how summaries name
/// archives.
pub struct Replay<'r> {
    p: &'r Projection<'r>,
    cfg: &'r NoaConfig,
    place: &'r Placement<'r>,
    journal: &'r [JournalBatch],
    path: ArchivePath<'r>,
    /// Where the runtime made its requests ([`request_points`]); `None`: one before each
    /// assistant message past the first.
    requests: Option<&'r [usize]>,
}

/// Where the runtime made its requests, by how many messages came before each: one before
/// each assistant message past the first, except an assistant message that answered the
/// same request as the assistant message before it. The provider reports its usage once per
/// request, and the runtime stamps it on every message that request returned: two assistant
/// messages with the same reported input (input, cache-read and cache-write tokens, the
/// input not zero) came from one request — a Compress call and the turn the model went on
/// with, written together by the runtime's agent loop, with no request for the call's
/// result between them. `usage(m)` is message `m`'s reported usage, where recorded.
pub fn request_points<'u>(
    msgs: &[&crate::format::transcript::Message],
    usage: &dyn Fn(usize) -> Option<&'u crate::format::transcript::Usage>,
) -> Vec<usize> {
    let reported = |m: usize| {
        usage(m)
            .filter(|u| u.input_tokens > 0)
            .map(|u| (u.input_tokens, u.cache_read_tokens, u.cache_write_tokens))
    };
    let mut out = Vec::new();
    let mut before = None;
    for (m, msg) in msgs.iter().enumerate() {
        if msg.role != "assistant" {
            continue;
        }
        let this = reported(m);
        let same = this.is_some() && this == before;
        before = this;
        if m > 0 && !same {
            out.push(m);
        }
    }
    out
}

impl<'r> Replay<'r> {
    pub fn new(
        p: &'r Projection<'r>,
        cfg: &'r NoaConfig,
        place: &'r Placement<'r>,
        journal: &'r [JournalBatch],
        path: ArchivePath<'r>,
    ) -> Self {
        Replay {
            p,
            cfg,
            place,
            journal,
            path,
            requests: None,
        }
    }

    /// The replay with the runtime's requests at `points` (sorted; see [`request_points`]).
    pub fn with_requests(self, points: &'r [usize]) -> Self {
        Replay {
            requests: Some(points),
            ..self
        }
    }

    /// Replay the whole history.
    pub fn rebuild(&self) -> Rebuilt {
        replay(self, None).0
    }

    /// The history replayed as `asked`: the states the runtime held when it built the request
    /// after the first `n` messages of the projection, for each `n` of its points, in one
    /// replay — the rebuild replay stopped there, with every request the runtime made before
    /// it made again (at its request points), so that the refs it assigned and
    /// the token counts its tags first showed are recorded as the runtime recorded them —
    /// and, when asked, what each request and each replayed call saw and made on the way.
    pub fn history(&self, asked: Asked<'_>) -> History {
        replay(self, Some(asked)).1
    }
}

/// What a history replay is asked for besides the rebuild.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'p> {
    /// The states wanted: at the request after the first `n` messages, for each `n`.
    points: &'p [usize],
    /// Whether a request may grow from the one before (`pipeline::Growing`).
    grow: bool,
    /// Whether what each request showed is wanted (its nudge decided, its figures kept): a
    /// state needs neither (a nudge has no ref, and its pacing is not in the states).
    requests: bool,
}

impl Asked<'_> {
    /// The states at `points` only.
    pub fn states(points: &[usize]) -> Asked<'_> {
        Asked {
            points,
            grow: true,
            requests: false,
        }
    }

    /// The states at `points`, and every request and call on the way.
    pub fn requests(points: &[usize]) -> Asked<'_> {
        Asked {
            requests: true,
            ..Asked::states(points)
        }
    }

    /// [`Asked::requests`] with every request through the whole pipeline (what the grown
    /// requests are checked against).
    pub fn whole(points: &[usize]) -> Asked<'_> {
        Asked {
            grow: false,
            ..Asked::requests(points)
        }
    }
}

/// How many of `p`'s cores come from its first `m` messages: for every `m` (indexed by it,
/// one more than the messages), in one pass over the cores.
fn cores_before_each(p: &Projection<'_>) -> Vec<usize> {
    let n = p.msgs.len();
    // The first core of each message, then the first of each message or a later one.
    let mut first = vec![p.cores.len(); n + 2];
    for (i, c) in p.cores.iter().enumerate() {
        if let super::content::Origin::Block { msg, .. } = c.origin {
            let k = (msg as usize).min(n + 1);
            first[k] = first[k].min(i);
        }
    }
    for k in (0..=n).rev() {
        first[k] = first[k].min(first[k + 1]);
    }
    first
}

/// The replay, and the history `asked` for.
fn replay(inputs: &Replay<'_>, asked: Option<Asked<'_>>) -> (Rebuilt, History) {
    let Replay {
        p,
        cfg,
        place,
        journal,
        path,
        requests: at_requests,
    } = *inputs;
    // Only the rebuild keeps the archives.
    let history_place;
    let place = if asked.is_some() {
        history_place = place.without_entries();
        &history_place
    } else {
        place
    };
    let points = asked.map(|a| a.points);
    let (grow, requests) = asked.map_or((true, false), |a| (a.grow, a.requests));
    let last = points.map(|ps| ps.iter().copied().max().unwrap_or(0));
    let before = cores_before_each(p);
    let cores_before = |m: usize| before.get(m).copied().unwrap_or(p.cores.len());
    let end = last.map_or(p.cores.len(), cores_before);
    let cores = &p.cores[..end];
    // A call counts as having made blocks when its result's panel lists one: the runtime's
    // own test (its `is_error` is not consulted).
    let mut succeeded = std::collections::HashMap::new();
    for c in cores {
        if c.kind == Kind::ToolResult && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            succeeded.insert(c.call, compress::panel_block_count(&c.text.get()) > 0);
        }
    }
    // By place in the cores, then calls before the journal's batches before requests and
    // captures; those by message, a capture before the request at its own message.
    let mut events: Vec<((usize, u8, usize, u8), Event<'_>)> = Vec::new();
    for (i, c) in cores.iter().enumerate() {
        if c.kind == Kind::ToolCall && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            events.push(((i + 1, 0, 0, 0), Event::Call { index: i }));
        }
    }
    for b in journal {
        if last.is_some() && b.prefix > cores.len() {
            continue;
        }
        events.push(((b.prefix.min(cores.len()), 1, 0, 0), Event::Journal(b)));
    }
    let every;
    let at_requests = match at_requests {
        Some(r) => r,
        None => {
            every = request_points(&p.msgs, &|_| None);
            &every[..]
        }
    };
    let mut at_request = false;
    if let (Some(n), Some(ps)) = (last, points) {
        for &m in at_requests.iter().take_while(|&&m| m < n) {
            events.push(((cores_before(m), 2, m, 1), Event::Request));
        }
        // A state captured where the runtime made a request carries the pacing it had then.
        at_request = ps.iter().any(|at| at_requests.binary_search(at).is_ok());
        for (k, &at) in ps.iter().enumerate() {
            events.push(((cores_before(at), 2, at, 0), Event::Capture(k)));
        }
    }
    events.sort_by_key(|(key, _)| *key);
    // Tokens of the first k cores as written.
    let mut history_tokens = Vec::with_capacity(cores.len() + 1);
    history_tokens.push(0u64);
    for c in cores {
        let last = history_tokens.last().copied().unwrap_or(0);
        history_tokens.push(last + c.tokens());
    }
    let ctx = Ctx {
        p,
        cores,
        cfg,
        place,
        path,
        succeeded: &succeeded,
        history_tokens: &history_tokens,
        points: points.map_or(0, <[usize]>::len),
        made: points.is_some(),
        requests: at_requests,
        at_request,
    };
    let mode = Mode {
        grow,
        requests,
        pacing: requests || at_request,
    };
    // What each request showed is most of a timeline's work: past a place in the history
    // another thread takes it up (see `split`).
    if requests && journal.is_empty() {
        if let Some(done) = split::replay(&ctx, &events, mode) {
            return done;
        }
    }
    let mut walk = Walk::new(&ctx, mode);
    for (key, ev) in &events {
        walk.step(&ctx, *key, ev);
    }
    walk.finish()
}

/// What a replay's walk over its events reads.
struct Ctx<'c, 'a> {
    p: &'c Projection<'a>,
    cores: &'c [super::content::Core<'a>],
    cfg: &'c NoaConfig,
    place: &'c Placement<'c>,
    path: ArchivePath<'c>,
    succeeded: &'c std::collections::HashMap<&'a str, bool>,
    history_tokens: &'c [u64],
    /// How many states are asked for, and whether what each call made is kept.
    points: usize,
    made: bool,
    /// Where the runtime made its requests (sorted), and whether a state is asked for at one
    /// of them (it then carries the nudges' pacing the runtime had there).
    requests: &'c [usize],
    at_request: bool,
}

impl Ctx<'_, '_> {
    /// Whether the runtime made a request after the first `m` messages.
    fn is_request(&self, m: usize) -> bool {
        self.requests.binary_search(&m).is_ok()
    }

    /// The message core `i` comes from (for where a call was made).
    fn msg_of(&self, i: usize) -> usize {
        match self.cores[i].origin {
            super::content::Origin::Block { msg, .. } => msg as usize,
            _ => 0,
        }
    }
}

/// How a walk makes its requests: grown from the one before or whole, whether what each
/// showed is kept (its nudge decided), and whether the nudges' pacing is kept (what was
/// shown decided) for the states captured at requests.
#[derive(Debug, Clone, Copy)]
struct Mode {
    grow: bool,
    requests: bool,
    pacing: bool,
}

/// A replay's walk over its events: what it has made so far.
struct Walk<'c, 'a> {
    out: Rebuilt,
    seen: History,
    /// Which of `seen.states` were captured.
    captured: Vec<bool>,
    mode: Mode,
    /// The pacing of nudges as the live runtime kept it between requests: never in the
    /// state it wrote, and in a state captured here only where the runtime made a request
    /// (a view of it is the one the runtime sent; of any other, a resumed runtime's).
    pacing: crate::format::state::NudgeState,
    range_lines: super::nudge::RangeLines,
    /// Steps 1-3 kept from request to request while the blocks stay.
    growing: pipeline::Growing<'c, 'a>,
}

impl<'c, 'a> Walk<'c, 'a> {
    fn new(ctx: &Ctx<'c, 'a>, mode: Mode) -> Self {
        Walk {
            out: Rebuilt {
                state: State::initial(ctx.place.session),
                archives: Vec::new(),
                replayed: 0,
                skipped: Vec::new(),
            },
            seen: History {
                states: vec![State::initial(ctx.place.session); ctx.points],
                ..History::default()
            },
            captured: vec![false; ctx.points],
            mode,
            pacing: Default::default(),
            range_lines: Default::default(),
            growing: Self::growing(mode),
        }
    }

    fn growing(mode: Mode) -> pipeline::Growing<'c, 'a> {
        if mode.grow {
            pipeline::Growing::default()
        } else {
            pipeline::Growing::never()
        }
    }

    /// The event at `(at, _, msg, _)`.
    fn step(&mut self, ctx: &Ctx<'c, 'a>, (at, _, msg, _): (usize, u8, usize, u8), ev: &Event<'_>) {
        let (cores, cfg, place, path) = (ctx.cores, ctx.cfg, ctx.place, ctx.path);
        let Walk {
            out,
            seen,
            captured,
            mode,
            pacing,
            range_lines,
            growing,
        } = self;
        let prefix = &cores[..at];
        let (journal_batch, call, mut applied, recorded) = match *ev {
            Event::Call { index } => {
                let c = &cores[index];
                if !ctx.succeeded.get(c.call).copied().unwrap_or(false) {
                    out.skipped
                        .push(format!("{}: its result reports no block", c.call));
                    return;
                }
                let parsed = args::parse(&c.text.get());
                if parsed.ranges.is_empty() {
                    out.skipped.push(format!("{}: no usable range", c.call));
                    return;
                }
                // The runtime replays without a token count: no truncation, no nudge. The
                // view grows from the request before.
                let deciding = pipeline::Deciding::No;
                let t = growing.turn(prefix, &out.state, cfg, path, Count::Given(0), deciding);
                // The call's refs go into the state itself (a copy would copy its ref maps),
                // taken back if the call is not replayed.
                let recorded = t.record_undoable(&mut out.state);
                // The state goes into the call, what the call may change kept to put back
                // if it is refused.
                let undo = Taken::of(&out.state);
                let ledger = std::mem::replace(&mut out.state, State::initial(""));
                let applied = compress::apply_owned(&t, ledger, &parsed.ranges, cfg, c.call, place);
                growing.keep(t);
                (
                    false,
                    (c.call.to_string(), ctx.msg_of(index)),
                    applied,
                    Some((recorded, undo)),
                )
            }
            Event::Capture(k) => {
                seen.states[k] = out.state.clone();
                if mode.pacing && ctx.is_request(msg) {
                    seen.states[k].nudge = pacing.clone();
                }
                captured[k] = true;
                return;
            }
            Event::Request => {
                let resumed = std::mem::replace(&mut out.state.nudge, pacing.clone());
                // What was shown is all a timeline keeps (the whole decision where it is
                // checked against grown requests).
                let deciding = match (mode.requests, mode.grow) {
                    (false, _) if !mode.pacing => pipeline::Deciding::No,
                    (false, _) | (true, true) => pipeline::Deciding::Shown,
                    (true, false) => pipeline::Deciding::Whole,
                };
                let mut t = growing.turn(prefix, &out.state, cfg, path, Count::Measured, deciding);
                out.state.nudge = resumed;
                if let Some(d) = &t.nudge {
                    super::nudge::stamp(pacing, cfg, t.count, d);
                }
                t.inject_nudge_with(Some(range_lines));
                let tagged = super::assemble::fresh_tags(&t, &out.state);
                t.record(&mut out.state, &tagged);
                if mode.requests {
                    seen.requests.push(observe(&t, msg, ctx.history_tokens[at]));
                }
                growing.keep(t);
                return;
            }
            Event::Journal(b) => {
                let parsed = args::parse(&b.input);
                let sub = Projection {
                    msgs: ctx.p.msgs.clone(),
                    cores: prefix.to_vec(),
                };
                let applied =
                    ctl_apply(&sub, &out.state, cfg, &parsed.ranges, &b.call, place, path);
                let at = if at == 0 { 0 } else { ctx.msg_of(at - 1) + 1 };
                (true, (b.call.clone(), at), applied, None)
            }
        };
        let (call, made_at) = call;
        let state = std::mem::replace(&mut applied.state, State::initial(""));
        let why = if !applied.errors.is_empty() {
            Some(applied.errors.join("; "))
        } else if applied.created.is_empty() {
            Some("made no block".to_string())
        } else if journal_batch && !applied.whole() {
            // A ctl batch is all or nothing, then and now.
            Some("part of the batch no longer applies".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            // The refs the call's view handed out are not recorded: the next request hands
            // them out again.
            match recorded {
                Some((refs, taken)) => {
                    out.state = taken.restore(state);
                    refs.undo(&mut out.state);
                }
                None => drop(state),
            }
            growing.reset();
            out.skipped.push(format!("{call}: {why}"));
            return;
        }
        if ctx.made {
            seen.made.push(Made {
                call: call.clone(),
                at: made_at,
                blocks: applied
                    .created
                    .iter()
                    .map(|b| (b.block_id.clone(), b.tier))
                    .collect(),
                tokens: applied.tokens_compressed,
                journal: journal_batch,
            });
        }
        out.archives.extend(applied.archives);
        out.state = state;
        out.replayed += 1;
        growing.blocks_changed();
        // A compression starts the pacing of nudges again (the runtime's Compress clears
        // it in the state it goes on with).
        *pacing = crate::format::state::NudgeState::default();
    }

    /// What the walk made.
    fn finish(self) -> (Rebuilt, History) {
        let Walk {
            out,
            mut seen,
            growing,
            ..
        } = self;
        (seen.grown, seen.whole) = (growing.grown, growing.whole);
        finished(out, seen)
    }
}

/// A replay's outcome once its walk is over: only the archives of blocks the final state
/// holds, and the calls skipped.
fn finished(mut out: Rebuilt, mut seen: History) -> (Rebuilt, History) {
    let ids: std::collections::HashSet<&str> = out
        .state
        .blocks()
        .iter()
        .map(|b| b.block_id.as_str())
        .collect();
    out.archives.retain(|a| ids.contains(a.block_id.as_str()));
    seen.skipped.clone_from(&out.skipped);
    (out, seen)
}

/// The replay's state as it went into a Compress call (see [`compress::Undo`]); in debug
/// builds the whole of it, to check what is put back.
struct Taken {
    undo: compress::Undo,
    #[cfg(debug_assertions)]
    whole: State,
}

impl Taken {
    fn of(state: &State) -> Taken {
        Taken {
            undo: compress::Undo::of(state),
            #[cfg(debug_assertions)]
            whole: state.clone(),
        }
    }

    /// The state before the call, from the one the call left.
    fn restore(self, mut state: State) -> State {
        self.undo.restore(&mut state);
        #[cfg(debug_assertions)]
        assert!(
            state == self.whole,
            "a refused call's state is not put back whole"
        );
        state
    }
}

/// What a request's turn shows.
fn observe(t: &pipeline::Turn<'_, '_>, at: usize, history: u64) -> Request {
    let (sent, cut_tokens) = (t.sent(), t.cut_tokens);
    debug_assert_eq!(sent, t.items.iter().map(|&q| t.tokens(q)).sum::<u64>());
    Request {
        at,
        history,
        counted: t.count,
        sent,
        cut: t.truncated,
        cut_tokens,
        live_blocks: t.active.iter().filter(|&&a| a).count(),
        nudge: t.injected().and_then(|d| {
            Some(Shown {
                kind: d.kind?,
                tier: d.tier,
                targets: d.targets.iter().map(|b| b.block_id.clone()).collect(),
            })
        }),
    }
}

/// A ctl batch as ctl runs it: against the view a resumed runtime sends (nudge included),
/// on the state with that view's refs recorded.
pub fn ctl_apply(
    p: &Projection<'_>,
    state: &State,
    cfg: &NoaConfig,
    ranges: &[args::Range],
    call: &str,
    place: &Placement<'_>,
    path: ArchivePath<'_>,
) -> Applied {
    let t = super::views::turn(p, state, cfg, path);
    let shown = super::assemble::assemble(&t, &p.msgs, state, true);
    let ledger = t.ledger(state, &shown.tagged);
    compress::apply_owned(&t, ledger, ranges, cfg, call, place)
}
