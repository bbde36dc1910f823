//! A session's computed views (SPEC 4.4, 4.9) from its loaded messages, state and
//! configuration: what a freshly resumed runtime would send, and the materialized history.

use super::assemble::{self, Assembled};
use super::content::{self, Core, Origin, Slot};
use super::lines::{self, LineCache};
use super::pipeline::{self, Count, Turn};
use super::render;
use crate::bytes::Bytes;
use crate::config::NoaConfig;
use crate::format::state::{Block, State};
use crate::format::transcript::Message;

/// A session's messages as a resumed runtime holds them, and their projection.
pub struct Projection<'a> {
    pub msgs: Vec<&'a Message>,
    pub cores: Vec<Core<'a>>,
}

/// The messages a resumed runtime continues from: trailing assistant messages that call a
/// tool (a turn cut off before its results were recorded) are dropped (SPEC 2.1).
pub fn resumed(mut msgs: Vec<&Message>) -> Vec<&Message> {
    while let Some(last) = msgs.last() {
        let calls = last.content.iter().any(|c| c.type_name() == "tool_use");
        if last.role == "assistant" && calls {
            msgs.pop();
        } else {
            break;
        }
    }
    msgs
}

impl<'a> Projection<'a> {
    pub fn new(msgs: Vec<&'a Message>) -> Projection<'a> {
        let msgs = resumed(msgs);
        let cores = content::project(&msgs);
        Projection { msgs, cores }
    }

    /// [`Projection::new`] reusing what `memo` knows of an earlier projection of a prefix of
    /// the messages, and teaching it this one.
    pub fn with_memo(msgs: Vec<&'a Message>, memo: &mut content::ProjectionMemo) -> Projection<'a> {
        let msgs = resumed(msgs);
        let cores = memo.project(&msgs);
        Projection { msgs, cores }
    }
}

/// What a session's computed files keep for the next computation over the same transcript
/// with appended records: the projection's ids and the lines written.
#[derive(Debug, Default)]
pub struct ViewMemo {
    pub projection: content::ProjectionMemo,
    pub lines: Lines,
}

/// The lines written for each session file that is made of lines.
#[derive(Debug, Default)]
pub struct Lines {
    view: LineCache,
    materialized: LineCache,
}

impl Lines {
    /// A new spool beside the lines' spools, if they are spooled (for a file made whole
    /// each time, as `view.md`: dropped with its last version).
    pub fn fresh_spool(&self) -> Option<std::sync::Arc<crate::bytes::Spool>> {
        let dir = self.view.spool_dir()?;
        match crate::bytes::Spool::new(dir) {
            Ok(s) => Some(std::sync::Arc::new(s)),
            Err(e) => {
                tracing::warn!("kept in memory: no spool in {}: {e}", dir.display());
                None
            }
        }
    }

    /// Write the lines of the files made from here on to spools in `dir`, not memory (see
    /// [`LineCache::spool_to`]).
    pub fn spool_to(&mut self, dir: &std::path::Path) {
        for c in [&mut self.view, &mut self.materialized] {
            c.spool_to(|| match crate::bytes::Spool::new(dir) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("lines kept in memory: no spool in {}: {e}", dir.display());
                    None
                }
            });
        }
    }
}

/// A session file the view makes: the mount's `view.jsonl`, `materialized.jsonl` and
/// `view.md`, the CLI's `view`, a history point's `at/<n>/` files.
#[derive(Clone, Copy)]
pub enum Form<'p> {
    View,
    Materialized,
    /// Naming places as `places` says.
    Markdown(&'p render::Places<'p>),
    /// `view.html`, with what the page shows besides the view.
    Html(&'p super::html::Extras),
}

/// One session's views and files over one projection and state: the turn its view and
/// `view.md` share is made once, when first asked for.
pub struct Files<'x, 'a> {
    p: &'x Projection<'a>,
    state: &'x State,
    cfg: &'x NoaConfig,
    sid: &'x str,
    path: ArchivePath<'x>,
    turn: std::cell::OnceCell<Turn<'x, 'a>>,
}

impl<'x, 'a> Files<'x, 'a> {
    /// Summaries name their archives by `path`.
    pub fn new(
        p: &'x Projection<'a>,
        state: &'x State,
        cfg: &'x NoaConfig,
        sid: &'x str,
        path: ArchivePath<'x>,
    ) -> Self {
        Files {
            p,
            state,
            cfg,
            sid,
            path,
            turn: std::cell::OnceCell::new(),
        }
    }

    /// The view a resumed runtime sends, as a turn (see [`turn`]).
    pub fn turn(&self) -> &Turn<'x, 'a> {
        self.turn
            .get_or_init(|| turn(self.p, self.state, self.cfg, self.path))
    }

    /// Let the turn go (it is made again if asked for).
    pub fn let_go(&mut self) {
        self.turn.take();
    }

    /// The bytes of `form`, reusing the lines `lines` has and adding the new ones to it.
    pub fn bytes(&self, form: Form<'_>, lines: &mut Lines) -> Bytes {
        let (p, state) = (self.p, self.state);
        match form {
            Form::View => lines::view_lines(self.turn(), &p.msgs, state, true, &mut lines.view),
            Form::Materialized => self.materialized_bytes(&mut lines.materialized),
            Form::Markdown(places) => self.markdown_bytes(places, lines),
            Form::Html(x) => {
                let msgs = self.view();
                let page =
                    super::html::session_page(&msgs, self.turn(), state, self.cfg, self.sid, x);
                Bytes::from(page.into_bytes())
            }
        }
    }

    /// `view.jsonl`'s bytes (those of [`Files::bytes`] with [`Form::View`]) written to `out`
    /// as its lines are made, none kept: `normafs view` of a large session does not hold the
    /// whole view in memory beside the transcript it was made from.
    /// (`out` should be buffered: each line is one write.)
    pub fn write_view(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut line = Vec::new();
        let mut written = Ok(());
        let every = |_| true;
        assemble::each_wanted(
            self.turn(),
            &self.p.msgs,
            self.state,
            true,
            &every,
            &mut |m, _| {
                if let Some(m) = m.filter(|_| written.is_ok()) {
                    line.clear();
                    m.write_line(&mut line);
                    written = out.write_all(&line);
                }
            },
        );
        written
    }

    /// The view's provider messages, tagged.
    pub fn view(&self) -> Assembled<'a> {
        assemble::assemble(self.turn(), &self.p.msgs, self.state, true)
    }

    /// The materialized history (SPEC 4.9): the state applied without tags, hiding,
    /// truncation or nudge; a session with no live block is its messages as they are.
    pub fn materialized(&self) -> Assembled<'a> {
        let (p, state) = (self.p, self.state);
        let t = pipeline::prune_only(&p.cores, state, self.cfg, self.path);
        if !state.blocks().iter().any(|b| b.active) {
            let by_msg = self.slots_by_message(&t);
            return assemble::verbatim(&p.msgs, |i| by_msg.get(i).cloned().unwrap_or_default());
        }
        assemble::assemble(&t, &p.msgs, state, false)
    }

    /// `materialized.jsonl`'s bytes, reusing the lines `cache` has and adding the new ones.
    fn materialized_bytes(&self, cache: &mut LineCache) -> Bytes {
        let (p, state) = (self.p, self.state);
        let t = pipeline::prune_only(&p.cores, state, self.cfg, self.path);
        if !state.blocks().iter().any(|b| b.active) {
            let by_msg = self.slots_by_message(&t);
            return lines::verbatim_lines(
                &p.msgs,
                |i| by_msg.get(i).cloned().unwrap_or_default(),
                cache,
            );
        }
        lines::view_lines(&t, &p.msgs, state, false, cache)
    }

    /// The refs of each transcript message's blocks in `t`, by message.
    fn slots_by_message(&self, t: &Turn<'_, '_>) -> Vec<Vec<Slot>> {
        let p = self.p;
        let mut by_msg: Vec<Vec<Slot>> = vec![Vec::new(); p.msgs.len()];
        for (c, s) in p.cores.iter().zip(&t.slots) {
            if let Origin::Block { msg, .. } = c.origin {
                if let Some(slots) = by_msg.get_mut(msg as usize) {
                    slots.push(s.clone());
                }
            }
        }
        by_msg
    }

    /// `view.md`'s bytes, written a message at a time (to a spool when `lines` has them).
    fn markdown_bytes(&self, places: &render::Places<'_>, lines: &Lines) -> Bytes {
        let t = self.turn();
        let mut body = lines::Chunks::new(lines.fresh_spool());
        let mut part = String::new();
        let mut count = 0;
        assemble::each(t, &self.p.msgs, self.state, true, &mut |m, _| {
            count += 1;
            part.clear();
            render::message_md(&mut part, &m, self.state, self.sid, places);
            body.push(part.as_bytes());
        });
        let head = render::markdown_head(count, t, self.cfg, self.sid);
        body.finish(head.into_bytes())
    }
}

/// How a summary names its archive.
pub type ArchivePath<'f> = &'f (dyn Fn(&Block) -> String + Sync);

/// The runtime's own naming: the block's `archivePath`.
pub fn runtime_path(b: &Block) -> String {
    b.archive_path.clone()
}

/// The view a resumed runtime sends (nudge included), as a turn.
pub fn turn<'p, 'a>(
    p: &'p Projection<'a>,
    state: &State,
    cfg: &NoaConfig,
    path: ArchivePath<'_>,
) -> Turn<'p, 'a> {
    let mut t = pipeline::run(&p.cores, state, cfg, Count::Measured, path);
    t.inject_nudge();
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{generate_profiled, GenOptions, Profile};
    use crate::store::root::RootPaths;
    use crate::store::session;

    /// A large session's first `view.jsonl` and `materialized.jsonl` (made in parts on
    /// several cores: in tests, from 64 items on) are the lines made one by one, and so is the next version, made from
    /// the first's lines: with live summaries (the view's lines) and without (the
    /// transcript's lines as they are).
    #[test]
    fn a_large_first_version_made_in_parts_is_the_one_made_line_by_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        let opts = GenOptions {
            sessions: 2,
            messages: 600,
            seed: 41,
            subagents: false,
            memories: 0,
            max_result_bytes: 20_000,
            ..GenOptions::default()
        };
        let report = generate_profiled(
            &root,
            &opts,
            &[Profile::Showcase, Profile::Plain],
            &mut |_, _| {},
        )
        .expect("gen");
        let paths = RootPaths::from_root(&root);
        let cfg = NoaConfig::default();
        let mut live = 0;
        for sid in &report.clean_sessions {
            let s = session::load(&paths, sid);
            let (state, _) = session::opened_state(&paths, sid, &s.state.state, &cfg);
            let p = Projection::new(s.messages());
            let files = Files::new(&p, &state, &cfg, sid, &runtime_path);
            let items = files.turn().items.len();
            assert!(
                items >= 4 * 64,
                "{sid}: {items} items, too few to be made in parts"
            );
            live += usize::from(state.blocks().iter().any(|b| b.active));
            let mut one_by_one = Vec::new();
            files.write_view(&mut one_by_one).expect("write");
            let materialized: Vec<u8> = files
                .materialized()
                .messages
                .iter()
                .flat_map(|m| {
                    let mut line = Vec::new();
                    m.write_line(&mut line);
                    line
                })
                .collect();
            let mut lines = Lines::default();
            for version in ["first", "next"] {
                let view = files.bytes(Form::View, &mut lines);
                assert!(
                    view.to_vec() == one_by_one,
                    "{sid}: {version} view.jsonl differs"
                );
                let m = files.bytes(Form::Materialized, &mut lines);
                assert!(
                    m.to_vec() == materialized,
                    "{sid}: {version} materialized.jsonl differs"
                );
            }
        }
        assert_eq!(live, 1, "one session with live summaries, one without");
    }
}
