//! Which version of a computed file each of its inodes stands for.
//!
//! The kernel keeps one size and one page cache per inode, shared by every open of it. So a
//! computed file's inode stands for one version of the file's content: the first one the
//! kernel was told of (a size in a reply, an open), and, while a handle of the inode is open,
//! the newer versions that extend it (a view grown by appends: a prefix of every byte the
//! kernel may hold stays what it was). The same bytes made from changed inputs are the same
//! version (see [`SAME_BYTES`](super::computed::SAME_BYTES)). Content that does not extend it (a compress rewrote the
//! view, or the inode was idle when the content changed) is another version, under a new
//! inode; the old one stays with its open handles, which keep reading what they opened. Every
//! size the kernel holds for an inode is then a whole version of it and every page it caches
//! is one of its bytes, so computed files can be read through the page cache (kept across
//! opens), and `fstat` on any handle reports what its reads return.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::computed::{digest, Rendered};
use super::Attr;
use super::Node;
use crate::bytes::Bytes;
use served::Served;
pub use spill::{Spilled, Spills};
use std::sync::Arc;

/// How long a lookup holds the version it found with no handle open: long enough for the
/// open that follows it in the kernel's path walk (or its retry after ESTALE), short enough
/// that an open through a name the kernel kept reads a version the watcher has not reported
/// gone yet only for that long at most.
pub const HOLD: Duration = Duration::from_millis(250);

/// How soon after an ESTALE the kernel's lookup of the name counts as its retry.
const RETRY: Duration = Duration::from_secs(1);

/// How long the lookup of the kernel's retry after an ESTALE holds what it found. The open it
/// is followed by must not fail again (the kernel hands a second ESTALE to the reader), and on
/// a loaded machine that open can arrive well after [`HOLD`]: the live-writer soak, beside
/// other tests on two cores, saw 300 ms between the retry's lookup and its open, and a
/// further 120 ms to make the content that open is measured against.
pub const RETRY_HOLD: Duration = Duration::from_secs(5);

/// The version an inode's open handles read, held from each lookup of the inode for
/// [`HOLD`] and while a handle is open.
struct Open {
    head: Head,
    mtime: SystemTime,
    handles: usize,
    until: Instant,
    /// When the last lookup held it (or it was opened).
    held_at: Instant,
    /// The size the kernel may be told: `head`'s, or while the page the last size told ends
    /// in is being dropped (see [`Versions::set_tail_drops`]), that size.
    safe: u64,
    /// A drop of that page is asked for and not done yet.
    dropping: bool,
    /// Lookups of the kernel's retries after an ESTALE not yet followed by an open: while
    /// any is pending, a ctl command does not end the hold (see
    /// [`Versions::answered_stale`]). Several readers may retry the same name at once and
    /// open the inode their lookups gave in turn: the first open must not end the hold the
    /// others' opens still need (the live-writer soak hit that under load).
    retries: u32,
    /// How far from its start the kernel read this version (reads it was answered).
    served: Served,
    /// The kernel read every page of it and none was dropped since (see
    /// [`Versions::whole`]).
    whole: bool,
    /// The kernel read some page of the inode since its pages were last dropped (it may hold
    /// pages of this version).
    touched: bool,
}

impl Open {
    fn new(c: &Rendered, until: Instant) -> Open {
        Open {
            head: Head::of(c),
            mtime: c.mtime,
            handles: 0,
            until,
            held_at: Instant::now(),
            safe: c.size,
            dropping: false,
            retries: 0,
            served: Served::default(),
            // Nothing to hold of an empty version: the kernel reads none of it.
            whole: c.size == 0,
            touched: false,
        }
    }
}

/// The bytes a version is, pinned, or known by their fingerprint, length and digest until a
/// read needs them (a file with a digest whose bytes were not at hand: the kernel serves its
/// reads from its page cache most of the time).
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub data: Option<Bytes>,
    pub fp: u64,
    pub len: u64,
    pub digest: Option<u64>,
    /// The bytes on disk, once more bytes were pinned than the budget allows (see
    /// [`Versions::set_pinned_budget`]).
    pub spill: Option<Arc<Spilled>>,
    /// The computation that made it: its bytes may still be at hand a moment after it
    /// (see `computed::RECENT`).
    pub made: u64,
}

/// Whether two versions, each by its inputs' fingerprint and its digest, are the same bytes:
/// by their digests when both have one (the same bytes from other inputs are the same
/// version; other bytes are not, even from inputs that look the same), else by their
/// fingerprints.
fn same(a: (u64, Option<u64>), b: (u64, Option<u64>)) -> bool {
    match (a.1, b.1) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.0 == b.0,
        _ => false,
    }
}

impl Head {
    fn id(&self) -> (u64, Option<u64>) {
        (self.fp, self.digest)
    }

    fn of(c: &Rendered) -> Head {
        Head {
            data: c.data.clone(),
            fp: c.fp,
            len: c.size,
            digest: c.digest,
            spill: None,
            made: c.made,
        }
    }

    /// Whether this version's bytes are at hand, in memory or on disk.
    pub fn kept(&self) -> bool {
        self.data.is_some() || self.spill.is_some()
    }

    /// The bytes of this version found in `c` (the current content, with its bytes): all of
    /// them when `c` is this version, the first `len` when `c` extends it (told by the
    /// digest); `None` when `c` is another version, whose bytes tell nothing of these.
    pub fn found_in(&self, c: &Rendered) -> Option<Bytes> {
        let data = c.data.as_ref()?;
        if same(self.id(), (c.fp, c.digest)) && data.len() == self.len {
            return Some(data.clone());
        }
        let d = self.digest?;
        (digest(data, self.len) == Some(d)).then(|| data.prefix(self.len))
    }
}

/// What a computed file's inode is described and read as.
#[derive(Clone)]
pub(super) struct Described {
    pub head: Head,
    /// The size to tell the kernel (`data`'s, or less while a page is dropped).
    pub size: u64,
    /// Always the inputs' current mode (a chmod is no new version).
    pub perm: u16,
    pub mtime: SystemTime,
}

/// A handle opened on an inode's version (its reads read [`Versions::head`]).
pub(super) struct Opening {
    /// `Left`: the version a lookup held, while the content moved on.
    pub fit: Fit,
    /// The kernel was last told the size of `head`.
    pub size_told: bool,
}

/// How new content fits an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fit {
    /// The inode's version, or one that extends it: describe it.
    Fits,
    /// Another version: the inode stays with its open handles (`held`), or with nothing
    /// (the kernel must look the name up again: ESTALE).
    Left { held: bool },
}

#[derive(Default)]
pub(super) struct Versions {
    inner: Mutex<Inner>,
    /// Where to ask for a page to be dropped (see [`Versions::set_tail_drops`]).
    tails: std::sync::OnceLock<std::sync::mpsc::Sender<TailDrop>>,
    /// How many bytes of pinned versions stay in memory, and where the rest goes (see
    /// [`Versions::set_pinned_budget`]).
    pinned_budget: std::sync::OnceLock<(u64, Spills)>,
    /// How long a lookup holds what it found, when not [`HOLD`] (see
    /// [`Versions::hold_for`]).
    hold_for: std::sync::OnceLock<Duration>,
    /// The kernel opens files itself (see [`Versions::hold_for`]): an open is a first read,
    /// which the kernel does not retry.
    kernel_opens: std::sync::atomic::AtomicBool,
}

/// Ask the kernel to drop the pages of `ino` from the one `from` is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailDrop {
    pub ino: u64,
    pub from: u64,
}

/// The kernel's page size: where a version may end within a page.
fn page() -> u64 {
    super::real::page_size() as u64
}

#[derive(Default)]
struct Inner {
    /// Inodes with open handles or looked up a moment ago: the newest version they read.
    open: HashMap<u64, Open>,
    /// Inodes the kernel was told of without an open handle: their version.
    told: HashMap<u64, Idle>,
    /// The attributes last sent for each computed file the kernel holds (see
    /// [`NormaFs::entry_plus`](super::NormaFs::entry_plus)).
    attrs: HashMap<u64, Attr>,
    /// Sizes are held back until a page is dropped (see [`Versions::set_tail_drops`]).
    drops: bool,
    /// Drops to ask for once the lock is let go.
    wanted: Vec<TailDrop>,
    /// Names an open or `getattr` answered ESTALE for, and when: the kernel looks them up
    /// again and retries.
    stale: HashMap<Node, Instant>,
    /// At least the bytes pinned in memory and held by no one else: what the last
    /// [`Versions::trim`] left, plus every byte offered since (a version's bytes are pinned
    /// only through `fit`, `open`, `hold` and `pin`). Below the budget, a trim needs no pass
    /// over the versions; bytes that were shared when it passed and are no longer are found
    /// by the next [`Versions::trim_all`].
    pinned_at_most: u64,
}

/// The version an idle inode stands for: its inputs' fingerprint, and the digest of its
/// bytes while the inode is the name's (see [`SAME_BYTES`](super::computed::SAME_BYTES)).
struct Idle {
    fp: u64,
    digest: Option<u64>,
    /// Its mtime: told again as it was when the same bytes come from inputs that changed (the
    /// kernel drops an inode's pages when its mtime changes).
    mtime: SystemTime,
    /// The kernel read every page of it (see [`Versions::whole`]).
    whole: bool,
    /// The kernel read some page of it.
    touched: bool,
}

impl Idle {
    /// Content `c` as an idle inode's version the kernel read nothing of yet.
    fn of(c: &Rendered) -> Idle {
        Idle {
            fp: c.fp,
            digest: c.digest,
            mtime: c.mtime,
            whole: c.size == 0,
            touched: false,
        }
    }
}

impl Inner {
    /// Bytes that may be pinned from now on (see [`Inner::pinned_at_most`]).
    fn offered(&mut self, data: Option<&Bytes>) {
        self.pinned_at_most = self
            .pinned_at_most
            .saturating_add(data.map_or(0, |d| d.resident_len()));
    }

    /// `now`: when the request asking arrived (a hold covers the requests that arrive within
    /// it, however long their content takes to make).
    fn fit(
        &mut self,
        ino: u64,
        current: bool,
        c: &Rendered,
        now: Instant,
    ) -> (Fit, Option<Described>) {
        self.let_go_if_idle(ino, now);
        if let Some(o) = self.open.get_mut(&ino) {
            let moved = current && !same(o.head.id(), (c.fp, c.digest));
            // The same bytes count as an extension (by nothing).
            let extends = moved
                && c.size >= o.head.len
                && match (&c.data, &o.head.data) {
                    (Some(new), Some(old)) => new.starts_with(old),
                    // Kept on disk: read back to compare (the content changed: rare).
                    (Some(new), None) if o.head.spill.is_some() => o
                        .head
                        .spill
                        .as_ref()
                        .and_then(|sp| sp.bytes().ok())
                        .is_some_and(|old| new.starts_with(&old)),
                    (Some(new), None) => {
                        o.head.digest.is_some() && digest(new, o.head.len) == o.head.digest
                    }
                    // Nothing to compare (the caller gives the bytes where it matters,
                    // see `Versions::wants_bytes`): another version.
                    _ => false,
                };
            if extends {
                let told = o.head.len;
                o.whole &= o.head.len == c.size;
                o.head = Head::of(c);
                o.mtime = c.mtime;
                if !self.drops {
                    o.safe = o.head.len;
                } else if !o.dropping {
                    if told % page() == 0 || o.head.len == told {
                        o.safe = o.head.len;
                    } else {
                        o.dropping = true;
                        self.wanted.push(TailDrop { ino, from: told });
                    }
                }
            }
            let d = Described {
                head: o.head.clone(),
                size: o.safe.min(o.head.len),
                perm: c.perm,
                mtime: o.mtime,
            };
            let fit = if same(o.head.id(), (c.fp, c.digest)) {
                Fit::Fits
            } else {
                Fit::Left { held: true }
            };
            return (fit, Some(d));
        }
        if !current {
            // Never the name's again: nothing to compare with.
            if let Some(t) = self.told.get_mut(&ino) {
                t.digest = None;
            }
            return (Fit::Left { held: false }, None);
        }
        match self.told.get_mut(&ino) {
            Some(t) if !same((t.fp, t.digest), (c.fp, c.digest)) => {
                t.digest = None;
                return (Fit::Left { held: false }, None);
            }
            // The same bytes (from other inputs, maybe).
            Some(t) => t.fp = c.fp,
            None => {
                self.told.insert(ino, Idle::of(c));
            }
        }
        let mtime = self.told.get(&ino).map_or(c.mtime, |t| t.mtime);
        let d = Described {
            head: Head::of(c),
            size: c.size,
            perm: c.perm,
            mtime,
        };
        (Fit::Fits, Some(d))
    }

    /// Whether idle inode `ino` holds nothing the kernel may have kept: no handle, no hold,
    /// and no page read since its pages were last dropped.
    fn untouched(&self, ino: u64) -> bool {
        !self.open.contains_key(&ino) && self.told.get(&ino).is_none_or(|t| !t.touched && !t.whole)
    }

    /// A version held by a lookup only, whose moment is over, is let go: the inode stands
    /// for it still, as for a version whose last handle closed.
    fn let_go_if_idle(&mut self, ino: u64, now: Instant) {
        if let Some(o) = self.open.get(&ino) {
            // Not while a page is being dropped: the idle inode would be described whole.
            if o.handles == 0 && o.until <= now && !o.dropping {
                let t = Idle {
                    fp: o.head.fp,
                    digest: o.head.digest,
                    mtime: o.mtime,
                    whole: o.whole,
                    touched: o.touched,
                };
                self.open.remove(&ino);
                self.told.insert(ino, t);
            }
        }
    }
}

impl Versions {
    /// How content `c` fits inode `ino` (`current`: the inode the file's name has now), and
    /// what the inode is then described as: for an inode with open handles, their version,
    /// brought up to `c` when `c` extends it and the inode is current; else `c`, which
    /// becomes the inode's version if it had none.
    pub(super) fn fit(&self, ino: u64, current: bool, c: &Rendered) -> (Fit, Option<Described>) {
        let mut g = self.inner.lock();
        g.offered(c.data.as_ref());
        let r = g.fit(ino, current, c, Instant::now());
        self.ask(g);
        r
    }

    /// Idle inode `ino`, of which the kernel holds no page, described as standing for content
    /// `c` from now on (an attribute request of an inode whose content moved on: nothing the
    /// kernel kept of it is of another version); `None` when the kernel may hold some of it.
    pub(super) fn rebind_untouched(&self, ino: u64, c: &Rendered) -> Option<Described> {
        let mut g = self.inner.lock();
        if !g.untouched(ino) {
            return None;
        }
        g.told.insert(ino, Idle::of(c));
        Some(Described {
            head: Head::of(c),
            size: c.size,
            perm: c.perm,
            mtime: c.mtime,
        })
    }

    /// Sizes of open computed files are told to the kernel only once the page their last
    /// size told ends in is dropped, asked for through `tx` (see [`TailDrop`]), then
    /// reported by [`Versions::tail_dropped`]. The kernel zero-fills that page past the end
    /// of the version it read it for and keeps it when the file grows (it sets the new size,
    /// then drops the file's pages: a read in between copies the zeros, which the
    /// live-writer soak saw); dropped first, the page is read again from a version that
    /// reaches past its end. Without this (no kernel, or no cache), every extension is told
    /// at once.
    pub fn set_tail_drops(&self, tx: std::sync::mpsc::Sender<TailDrop>) {
        if self.tails.set(tx).is_ok() {
            self.inner.lock().drops = true;
        }
    }

    /// The size of what `ino`'s handles read now: what a drop asked for now covers.
    pub fn head_len(&self, ino: u64) -> Option<u64> {
        self.inner.lock().open.get(&ino).map(|o| o.head.len)
    }

    /// The kernel dropped the pages of `ino` from the one a size told ended in, with `head`
    /// the size its handles read when the drop was asked: every page it holds now is of that
    /// version or a later one, so that size may be told. A later extension asks for the next
    /// drop.
    pub fn tail_dropped(&self, ino: u64, head: u64) {
        let mut g = self.inner.lock();
        let Some(o) = g.open.get_mut(&ino) else {
            return;
        };
        o.safe = o.safe.max(head.min(o.head.len));
        if o.head.len > o.safe && o.safe % page() != 0 {
            let from = o.safe;
            g.wanted.push(TailDrop { ino, from });
        } else {
            o.safe = o.head.len;
            o.dropping = false;
        }
        self.ask(g);
    }

    /// Send the drops asked for, after the lock is let go.
    fn ask(&self, mut g: parking_lot::MutexGuard<'_, Inner>) {
        let wanted = std::mem::take(&mut g.wanted);
        drop(g);
        if let Some(tx) = self.tails.get() {
            for w in wanted {
                let _ = tx.send(w);
            }
        }
    }

    /// Open a handle of `ino` on content `c`; its reads read the inode's
    /// version (brought up to `c` when `c` extends it), or when the content moved on, the
    /// version a lookup held a moment ago (the kernel's path walk looked the name up, then
    /// opens what it found). `Err` otherwise: the kernel must look the name up again (its
    /// lookup holds the version it finds, so the open it retries finds it held).
    /// `arrived`: when the open reached the mount, before `c` was made; a hold standing then
    /// covers it.
    pub(super) fn open(
        &self,
        ino: u64,
        current: bool,
        c: &Rendered,
        arrived: Instant,
    ) -> Result<Opening, Fit> {
        let mut g = self.inner.lock();
        g.offered(c.data.as_ref());
        let now = arrived;
        let fit = match g.fit(ino, current, c, now) {
            (Fit::Fits, Some(_)) => Fit::Fits,
            (left @ Fit::Left { held: true }, Some(_))
                if g.open.get(&ino).is_some_and(|o| o.until > now) =>
            {
                left
            }
            (Fit::Fits, None) => return Err(Fit::Left { held: false }),
            // Idle, and the kernel holds no page of it: the inode may stand for the content
            // now, whenever its open arrives (below). The kernel's retry after an ESTALE
            // opens the fresh inode its lookup found; on a loaded machine that open can come
            // seconds later, after the content moved on again.
            (Fit::Left { held: false }, _) if g.untouched(ino) => Fit::Left { held: false },
            (left, _) => return Err(left),
        };
        let unheld = fit == Fit::Left { held: false };
        let told = g.told.get(&ino).map(|t| (t.whole, t.touched, t.mtime));
        let o = g.open.entry(ino).or_insert_with(|| {
            let mut o = Open::new(c, Instant::now());
            if let Some((whole, touched, mtime)) = told {
                (o.whole, o.touched, o.mtime) = (whole, touched || whole, mtime);
                o.served = Served::upto(if whole { o.head.len } else { 0 });
            }
            o
        });
        // A lookup held a version without its bytes, and the content left it before this
        // open: while the kernel has no page of the inode and no handle reads it, the inode
        // is free to stand for the content now, when the kernel opens files itself (this
        // "open" is a first read, which the kernel does not retry). When the mount answers
        // opens, the open answers ESTALE instead and the kernel looks the name up again:
        // rebinding there, with the kernel told to ask the size again, still let a reader
        // read a view cut mid-line or padded with zeros (the runtime-rename soak, about
        // one run in ten under load; none in 30 without it).
        let mut fit = fit;
        let rebound = unheld
            || self.kernel_opens.load(std::sync::atomic::Ordering::Relaxed)
                && matches!(fit, Fit::Left { held: true })
                && o.head.data.is_none()
                && o.handles == 0
                && !o.touched
                && c.data.is_some();
        if rebound {
            o.head = Head::of(c);
            o.mtime = c.mtime;
            o.safe = c.size;
            o.served = Served::default();
            o.whole = c.size == 0;
            fit = Fit::Fits;
        }
        o.handles += 1;
        // One retry's open is this one: once none is pending, commands end the hold again.
        o.retries = o.retries.saturating_sub(1);
        let len = o.safe.min(o.head.len);
        g.told.remove(&ino);
        let size_told = !rebound && g.attrs.get(&ino).is_some_and(|a| a.size == len);
        self.ask(g);
        Ok(Opening { fit, size_told })
    }

    /// The kernel looked `ino` up and was told of content `c`, which fits it: hold its
    /// version for a moment, so that the open following the lookup reads it even when the
    /// content changes meanwhile (a live session appends; without it that open would answer
    /// ESTALE, and so could the kernel's one retry).
    pub(super) fn hold(&self, ino: u64, c: &Rendered, node: &Node) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        g.offered(c.data.as_ref());
        // Every lookup of the name within the moment counts: the kernel's retry may look it
        // up twice (the dentry's revalidation finds a new inode, then the name is looked up
        // afresh), and the content may move on between the two.
        let retry = g
            .stale
            .get(node)
            .is_some_and(|at| now.duration_since(*at) < RETRY);
        let until = now
            + if retry {
                RETRY_HOLD
            } else {
                *self.hold_for.get().unwrap_or(&HOLD)
            };
        if let Some(o) = g.open.get_mut(&ino) {
            o.until = o.until.max(until);
            o.held_at = now;
            o.retries += u32::from(retry);
            // The lookup found the version's bytes: the open it holds for needs them
            // unless the kernel holds every page.
            let fits = c.data.as_ref().is_some_and(|d| d.len() == o.head.len);
            if !o.head.kept() && fits && same(o.head.id(), (c.fp, c.digest)) {
                o.head.data.clone_from(&c.data);
            }
            return;
        }
        if g.told
            .get(&ino)
            .is_some_and(|t| !same((t.fp, t.digest), (c.fp, c.digest)))
        {
            return;
        }
        let told = g.told.remove(&ino);
        let mut o = Open::new(c, until);
        if let Some(t) = told {
            (o.whole, o.touched, o.mtime) = (t.whole, t.touched || t.whole, t.mtime);
            o.served = Served::upto(if t.whole { o.head.len } else { 0 });
        }
        o.retries = u32::from(retry);
        g.open.insert(ino, o);
    }

    /// An open or `getattr` of `node` was answered ESTALE: the kernel's next lookup of it
    /// is its retry, whose hold a ctl command does not end (ending it answered the retried
    /// open ESTALE as well, which the kernel hands to the reader: an `open` waiting behind a
    /// command for a worker meets the command's end of holds).
    pub(super) fn answered_stale(&self, node: &Node) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        g.stale.retain(|_, at| now.duration_since(*at) < RETRY);
        g.stale.insert(node.clone(), now);
    }

    /// A ctl command that started at `since` changed the inputs of `inos`: what their
    /// lookups before it held is held no more, so an open through a name the kernel still
    /// keeps finds the change (ESTALE, and the kernel looks the name up again) instead of
    /// the version before it. A hold since then stays: it may be the lookup of the kernel's
    /// retry after such an ESTALE, and ending it would answer the retried open ESTALE too,
    /// which the kernel hands to the reader. Open handles keep theirs.
    pub(super) fn release_holds(&self, inos: impl IntoIterator<Item = u64>, since: Instant) {
        let now = Instant::now();
        let mut g = self.inner.lock();
        for ino in inos {
            if let Some(o) = g.open.get_mut(&ino) {
                if o.held_at < since && o.retries == 0 {
                    o.until = o.until.min(now);
                }
            }
            g.let_go_if_idle(ino, now);
        }
    }

    /// Keep at most `budget` bytes of the versions pinned for inodes in memory; the rest is
    /// written to unlinked files in `dir` (the least recently held first) and read back from
    /// there. When the kernel opens files itself, a version the kernel read stays pinned until
    /// it forgets the inode: its pages may be dropped and read again at any time.
    pub fn set_pinned_budget(&self, budget: u64, dir: std::path::PathBuf) {
        let _ = self.pinned_budget.set((budget, Spills::new(dir)));
    }

    /// Have a lookup (or an attribute request) hold what it found for `d`: when the kernel
    /// opens files itself, its first read of the inode may come later than an open would
    /// have, and must find the version the kernel was told of.
    pub fn hold_for(&self, d: Duration) {
        let _ = self.hold_for.set(d);
    }

    /// The kernel opens files itself: an open is the first read of an inode (see
    /// [`Versions::open`]).
    pub fn set_kernel_opens(&self) {
        self.kernel_opens
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Move pinned bytes past the budget to disk (see [`Versions::set_pinned_budget`]).
    /// Bytes another holder has as well (the cache of computed contents, mostly) stay: on
    /// disk they would be written and read back for nothing, since they stay in memory all
    /// the same. They count once no one else holds them.
    pub(super) fn trim(&self) {
        self.trim_when(false)
    }

    /// [`Versions::trim`] with a pass over every pinned version, whatever was pinned since the
    /// last one (bytes the cache let go of meanwhile are the pinned versions' alone now).
    pub(super) fn trim_all(&self) {
        self.trim_when(true)
    }

    fn trim_when(&self, always: bool) {
        let Some((budget, spills)) = self.pinned_budget.get() else {
            return;
        };
        let chosen: Vec<(u64, Head)> = {
            let mut g = self.inner.lock();
            if !always && g.pinned_at_most <= *budget {
                return;
            }
            let mut pinned: Vec<(Instant, u64, u64)> = g
                .open
                .iter()
                .filter_map(|(&ino, o)| {
                    // Spooled bytes are on disk already.
                    let d = o.head.data.as_ref().filter(|d| !d.shared())?;
                    let resident = d.resident_len();
                    (resident > 0).then_some((o.held_at, ino, resident))
                })
                .collect();
            let total: u64 = pinned.iter().map(|p| p.2).sum();
            g.pinned_at_most = total;
            if total <= *budget {
                return;
            }
            // Down to three quarters of the budget: the next passes wait for a quarter of it
            // to be pinned again (a cold `grep -r` pins thousands of versions, and a pass
            // over all of them at each cost a few percent of the mount's time).
            pinned.sort_unstable();
            let mut over = total - budget / 4 * 3;
            let mut out = Vec::new();
            for (_, ino, len) in pinned {
                if over == 0 {
                    break;
                }
                if let Some(o) = g.open.get(&ino) {
                    out.push((ino, o.head.clone()));
                    g.pinned_at_most -= len;
                }
                over = over.saturating_sub(len);
            }
            out
        };
        for (i, (ino, head)) in chosen.iter().enumerate() {
            let Some(data) = &head.data else { continue };
            let spilled = match spills.write(data) {
                Ok(s) => Arc::new(s),
                Err(e) => {
                    tracing::warn!(
                        "cannot keep a version of {} bytes in {}: {e}; it stays in memory",
                        head.len,
                        spills.dir().display()
                    );
                    let kept: u64 = chosen[i..].iter().map(|(_, h)| h.len).sum();
                    let mut g = self.inner.lock();
                    g.pinned_at_most = g.pinned_at_most.saturating_add(kept);
                    return;
                }
            };
            let mut g = self.inner.lock();
            if let Some(o) = g.open.get_mut(ino) {
                if o.head.fp == head.fp && o.head.len == head.len && o.head.data.is_some() {
                    o.head.data = None;
                    o.head.spill = Some(spilled);
                }
            }
        }
    }

    /// Let go of the versions held with no handle open whose moment is over; the bytes of
    /// theirs that were in memory.
    pub(super) fn let_go_idle(&self) -> usize {
        let now = Instant::now();
        let mut g = self.inner.lock();
        let idle: Vec<u64> = g
            .open
            .iter()
            .filter(|(_, o)| o.handles == 0 && o.until <= now)
            .map(|(&ino, _)| ino)
            .collect();
        let mut freed = 0;
        for &ino in &idle {
            freed += g
                .open
                .get(&ino)
                .and_then(|o| o.head.data.as_ref())
                .map_or(0, |d| d.len());
            g.let_go_if_idle(ino, now);
        }
        freed as usize
    }

    /// What the open handles of `ino` read.
    pub(super) fn head(&self, ino: u64) -> Option<Head> {
        self.inner.lock().open.get(&ino).map(|o| o.head.clone())
    }

    /// The bytes of the version the handles of `ino` read (of fingerprint `fp` and their
    /// length), found when a read needed them: kept from now on.
    pub(super) fn pin(&self, ino: u64, fp: u64, data: &Bytes) {
        let mut g = self.inner.lock();
        g.offered(Some(data));
        if let Some(o) = g.open.get_mut(&ino) {
            if !o.head.kept() && o.head.fp == fp && o.head.len == data.len() {
                o.head.data = Some(data.clone());
            }
        }
    }

    /// The kernel was answered a read of `ino` of `n` bytes from `offset` (of the version
    /// its handles read).
    pub(super) fn served(&self, ino: u64, offset: u64, n: u64) {
        let mut g = self.inner.lock();
        if let Some(o) = g.open.get_mut(&ino) {
            o.touched = true;
            o.served.add(offset, offset.saturating_add(n));
            o.whole |= o.served.contiguous() >= o.head.len;
        }
    }

    /// Whether the kernel holds every page of the version `ino` stands for: it read them all
    /// and the mount had none dropped since. Its handles then read the kernel's pages, and
    /// the version's bytes are needed only should the kernel drop some on its own: an open
    /// needs no bytes at hand (they are made again from the inputs when a read asks).
    pub(super) fn whole(&self, ino: u64) -> bool {
        let g = self.inner.lock();
        match g.open.get(&ino) {
            Some(o) => o.whole,
            None => g.told.get(&ino).is_some_and(|t| t.whole),
        }
    }

    /// Whether the kernel read some of the version `ino` stands for (and the mount had not
    /// all of it dropped since): the inode is bound to that version.
    pub(super) fn touched(&self, ino: u64) -> bool {
        let g = self.inner.lock();
        match g.open.get(&ino) {
            Some(o) => o.touched,
            None => g.told.get(&ino).is_some_and(|t| t.touched),
        }
    }

    /// Whether the next lookup of `node` is the kernel's retry after an ESTALE (its open must
    /// not fail again: its hold takes the version's bytes).
    pub(super) fn retrying(&self, node: &Node) -> bool {
        let now = Instant::now();
        self.inner
            .lock()
            .stale
            .get(node)
            .is_some_and(|at| now.duration_since(*at) < RETRY)
    }

    /// What is known of `ino`'s open version (for the log).
    pub(super) fn describe(&self, ino: u64) -> String {
        match self.inner.lock().open.get(&ino) {
            Some(o) => format!(
                "{} bytes, {} handles, served {:?}, whole {}, touched {}",
                o.head.len, o.handles, o.served.0, o.whole, o.touched
            ),
            None => "not open".into(),
        }
    }

    /// The versions whose bytes are held for open handles or lookups: how many, and the
    /// bytes of those no one else holds (memory outside the cache's budget; bytes the cache
    /// has too are counted there).
    pub fn held(&self) -> (usize, u64) {
        let g = self.inner.lock();
        g.open
            .values()
            .filter_map(|o| o.head.data.as_ref())
            .fold((0, 0), |(n, b), d| {
                (n + 1, b + if d.shared() { 0 } else { d.len() })
            })
    }

    /// Whether the version `ino`'s handles (or a lookup's hold) read has its bytes at hand.
    pub(super) fn pinned(&self, ino: u64) -> bool {
        self.inner
            .lock()
            .open
            .get(&ino)
            .is_some_and(|o| o.head.kept())
    }

    /// The mount had the kernel drop the pages of `ino` from offset `from` on.
    pub fn pages_dropped(&self, ino: u64, from: u64) {
        let mut g = self.inner.lock();
        if let Some(o) = g.open.get_mut(&ino) {
            o.served.cut(from);
            o.whole &= o.served.contiguous() >= o.head.len;
            o.touched &= from > 0;
        }
        if let Some(t) = g.told.get_mut(&ino) {
            t.whole = false;
            t.touched &= from > 0;
        }
    }

    /// Whether telling how content `c` fits `ino` needs `c`'s bytes: its open handles read
    /// a version of other inputs, which `c` may extend.
    pub(super) fn wants_bytes(&self, ino: u64, c: &Rendered) -> bool {
        c.data.is_none()
            && self
                .inner
                .lock()
                .open
                .get(&ino)
                .is_some_and(|o| !same(o.head.id(), (c.fp, c.digest)))
    }

    /// A handle of `ino` was released; the last one leaves the inode standing for the
    /// version it read.
    pub(super) fn closed(&self, ino: u64) {
        let mut g = self.inner.lock();
        let Some(o) = g.open.get_mut(&ino) else {
            return;
        };
        o.handles = o.handles.saturating_sub(1);
        g.let_go_if_idle(ino, Instant::now());
    }

    /// The kernel was given `attr` for computed file `ino`. An inode's versions only ever
    /// grow, so a smaller size is of an older one, sent by a reply that was computed before
    /// and lost the race: what a listing sends again is the newest.
    pub(super) fn tell(&self, ino: u64, attr: &Attr) {
        let mut g = self.inner.lock();
        match g.attrs.get(&ino) {
            Some(a) if a.size > attr.size => {}
            _ => {
                g.attrs.insert(ino, attr.clone());
            }
        }
    }

    /// The attributes the kernel was last given for `ino`.
    pub(super) fn told(&self, ino: u64) -> Option<Attr> {
        self.inner.lock().attrs.get(&ino).cloned()
    }

    /// The attributes last sent for `ino` when they describe content `c` (the same bytes).
    pub(super) fn told_of(&self, ino: u64, c: &Rendered) -> Option<Attr> {
        let g = self.inner.lock();
        let a = g.attrs.get(&ino)?;
        let id = match (g.told.get(&ino), g.open.get(&ino)) {
            (Some(t), _) => (t.fp, t.digest),
            (None, Some(o)) => o.head.id(),
            (None, None) => return None,
        };
        (a.size == c.size && same(id, (c.fp, c.digest))).then(|| a.clone())
    }

    /// Whether `ino` has open handles (or is held a moment after a lookup).
    pub(super) fn is_open(&self, ino: u64) -> bool {
        let mut g = self.inner.lock();
        g.let_go_if_idle(ino, Instant::now());
        g.open.contains_key(&ino)
    }

    /// The kernel forgot `ino` (it holds no handle of it either): it stands for nothing now.
    /// The hold of a retry's lookup survives it (`node`: the inode's name): the kernel
    /// forgets the inode a revalidating lookup answers when it is not the one its entry had,
    /// and looks the name up afresh, which holds the version again as the retry's.
    ///
    /// `forgotten` tells, asked under this table's lock, whether the kernel still holds no
    /// lookup of `ino`: a lookup that came in since the caller found none may already have
    /// been answered, and what the kernel reads of it from then on must stay recorded.
    pub(super) fn forget(&self, ino: u64, node: Option<&Node>, forgotten: &dyn Fn() -> bool) {
        let mut g = self.inner.lock();
        if !forgotten() {
            return;
        }
        g.attrs.remove(&ino);
        g.told.remove(&ino);
        if g.open.get(&ino).is_some_and(|o| o.handles == 0) {
            let now = Instant::now();
            let retried = g
                .open
                .remove(&ino)
                .is_some_and(|o| o.retries > 0 && o.until > now);
            if let (true, Some(n)) = (retried, node) {
                g.stale.insert(n.clone(), now);
            }
        }
    }
}

mod served;
mod spill;
#[cfg(test)]
mod tests;
