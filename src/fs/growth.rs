//! The size the kernel is told of a real file that grows behind the mount while it is read
//! through the page cache (no passthrough).
//!
//! A read whose reply ends inside a page (the file's end at that moment) leaves the kernel a
//! page zero-filled past that end. When the kernel is later given a larger size it sets the
//! size first and drops the file's pages after: a read in between copies the zeros. So a
//! size that reaches past a page some read may have filled short is told only once the pages
//! from that one on were dropped; then the file's size measured just before the drop may be
//! told, since every page read after the drop holds the file's bytes up to at least that
//! size. Until then the kernel keeps the size it had, and a later question gets the newer
//! one. Sizes ending on a page boundary leave no such page.
//!
//! A drop takes pages out of the cache, not out of the hands of readers already holding them:
//! a reader that found the short page (or waited for the read that filled it) and reads the
//! file's size only after the larger one was set copies the zeros all the same. So the size a
//! drop makes safe is told only [`DROP_GRACE`] after it, and a size held back is told with a short
//! TTL, so that the kernel asks again once it may be told.
//!
//! Opens of a file that grew a moment ago ([`GROWING`]) are not read through the page cache
//! at all (see `NormaFs::open`): their reads reach the file and see its end as it is. What
//! is above is for handles opened before, and for a file that starts growing again.
//!
//! Sizes come from stats taken on several workers at once, and arrive out of order: each is
//! placed by the file's ctime (which every change moves, and no one can set), so an older
//! stat never reads as a shrink. A shrink is told at once (the kernel cuts its pages first),
//! and what was measured before it counts for nothing after.

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::versions::TailDrop;

/// How long after a drop its size is held back still: longer than a reader that holds a
/// dropped page takes from finding it to reading the file's size (it may have waited for the
/// read that filled the page, and wake up late on a busy machine).
pub const DROP_GRACE: Duration = Duration::from_millis(20);

/// How long after it was last seen growing a file counts as growing still.
pub const GROWING: Duration = Duration::from_secs(2);

/// One stat of a file: its size, and its ctime (which orders stats of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub size: u64,
    pub ctime: SystemTime,
}

/// What the kernel may hold of one real file's size and pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grow {
    /// Sizes up to this may be told without a drop (never more than the file has).
    safe: u64,
    /// The smallest size ending inside a page told since the last drop: a page some read may
    /// have filled short is at or after the one it ends in.
    from: Option<u64>,
    /// A drop is asked for, or done and in its grace: larger sizes wait.
    dropping: bool,
    /// A drop done, the file's size just before it, and when that size may be told.
    done: Option<(u64, Instant)>,
    /// The same for the latest drop done after it (a file appended to all the time is dropped
    /// by the watcher on every append: each would put the first one's grace off again).
    next: Option<(u64, Instant)>,
    /// The newest stat taken.
    seen: Seen,
    /// Counts shrinks: a drop measured before one is ignored.
    epoch: u64,
    /// When the file was last seen larger than the sizes told.
    grew: Option<Instant>,
}

/// What to tell the kernel of a file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    pub size: u64,
    /// A larger size is held back: the kernel should ask again soon.
    pub held: bool,
}

impl Grow {
    fn new(seen: Seen, page: u64) -> Grow {
        let mut g = Grow {
            safe: seen.size,
            from: None,
            dropping: false,
            done: None,
            next: None,
            seen,
            epoch: 0,
            grew: None,
        };
        g.note(seen.size, page);
        g
    }

    fn note(&mut self, told: u64, page: u64) {
        if told % page != 0 {
            self.from = Some(self.from.map_or(told, |f| f.min(told)));
        }
    }

    /// Take stat `s`: the size to go by (an older stat goes by the newest one's), and
    /// whether the file shrank (then nothing measured before counts).
    fn observe(&mut self, s: Seen, page: u64) -> (u64, bool) {
        let newest = self.seen;
        if s.ctime < newest.ctime || (s.ctime == newest.ctime && s.size <= newest.size) {
            return (newest.size, false);
        }
        self.seen = s;
        if s.size >= newest.size {
            return (s.size, false);
        }
        self.reset(s, page);
        (s.size, true)
    }

    /// The kernel holds `s`'s size (told as it is), nothing measured before counts.
    fn reset(&mut self, s: Seen, page: u64) {
        self.seen = s;
        self.safe = s.size;
        self.from = None;
        self.note(s.size, page);
        self.dropping = false;
        self.done = None;
        self.next = None;
        self.epoch += 1;
    }

    /// Drops whose grace is over make their sizes safe.
    fn mature(&mut self, page: u64, now: Instant) {
        while let Some((head, at)) = self.done {
            if now < at {
                return;
            }
            self.safe = self.safe.max(head);
            self.from = None;
            self.note(self.safe, page);
            self.done = self.next.take();
            self.dropping = self.done.is_some();
        }
    }

    /// The size to tell at `now` of a file stat `s` found, and where a drop should start.
    fn tell(&mut self, s: Seen, page: u64, now: Instant) -> (Told, Option<u64>) {
        self.mature(page, now);
        let (size, shrank) = self.observe(s, page);
        if shrank {
            return (Told { size, held: false }, None);
        }
        if size <= self.safe {
            // (Less only when a write through the mount took the kernel's size further.)
            let size = self.safe;
            self.note(size, page);
            return (Told { size, held: false }, None);
        }
        self.grew = Some(now);
        let drop = match (self.dropping, self.from) {
            (true, _) => None,
            (false, None) => {
                self.safe = size;
                None
            }
            (false, Some(f)) => {
                self.dropping = true;
                Some(f)
            }
        };
        let told = Told {
            size: self.safe,
            held: self.safe < size,
        };
        self.note(told.size, page);
        (told, drop)
    }

    /// The pages were dropped at `now`; the drop was asked in `epoch` and the file was
    /// `head` just before (`None`: not known, and a later size asks for another drop).
    fn dropped(&mut self, epoch: u64, head: Option<Seen>, page: u64, now: Instant) {
        if epoch != self.epoch {
            return;
        }
        let Some(s) = head else {
            if self.done.is_none() {
                self.dropping = false;
            }
            return;
        };
        let (h, shrank) = self.observe(s, page);
        if shrank {
            return;
        }
        if h > self.safe {
            self.grew = Some(now);
        } else if !self.dropping {
            // Nothing held back, nothing new.
            return;
        }
        let d = (h, now + DROP_GRACE);
        match (self.done, self.next) {
            (None, _) => self.done = Some(d),
            (Some((first, _)), next) => {
                let before = next.map_or(first, |(n, _)| n.max(first));
                self.next = Some((h.max(before), d.1));
            }
        }
        self.dropping = true;
    }

    /// A write through the mount reached `end`: the kernel's size is at least that, and its
    /// pages hold what was written. So is the file's: `after`, its stat right after the
    /// write, is newer than every stat taken before it, none of which then reads as a shrink
    /// (without it, a later stat finding it shorter than `end` finds a shrink).
    fn wrote(&mut self, end: u64, after: Option<Seen>, page: u64) {
        if let Some(s) = after {
            self.observe(s, page);
        }
        self.safe = self.safe.max(end);
        self.seen.size = self.seen.size.max(end);
        self.note(end, page);
    }
}

/// The sizes told of real files read through the page cache; off (every size told as it
/// is) until [`Growth::set_tail_drops`].
#[derive(Default)]
pub(super) struct Growth {
    files: Mutex<HashMap<u64, Grow>>,
    tails: OnceLock<Sender<TailDrop>>,
}

fn page() -> u64 {
    super::real::page_size() as u64
}

impl Growth {
    /// Hold back sizes as above, asking for drops through `tx` (the mount answers each with
    /// [`Growth::dropped`]).
    pub fn set_tail_drops(&self, tx: Sender<TailDrop>) {
        let _ = self.tails.set(tx);
    }

    pub fn enabled(&self) -> bool {
        self.tails.get().is_some()
    }

    /// The size to tell the kernel of real file `ino`, of which a stat found `s`.
    pub fn tell(&self, ino: u64, s: Seen) -> Told {
        let Some(tx) = self.tails.get() else {
            return Told {
                size: s.size,
                held: false,
            };
        };
        let page = page();
        let (told, drop) = {
            let mut files = self.files.lock();
            match files.get_mut(&ino) {
                Some(g) => g.tell(s, page, Instant::now()),
                None => {
                    files.insert(ino, Grow::new(s, page));
                    let told = Told {
                        size: s.size,
                        held: false,
                    };
                    (told, None)
                }
            }
        };
        if let Some(from) = drop {
            if tx.send(TailDrop { ino, from }).is_err() {
                // No mount to drop pages any more: nothing reads them either.
                let epoch = self.epoch(ino);
                self.dropped(ino, epoch, None);
            }
        }
        told
    }

    /// Whether `ino` grew within [`GROWING`] (its opens do not go through the page cache).
    pub fn growing(&self, ino: u64) -> bool {
        let files = self.files.lock();
        let grew = files.get(&ino).and_then(|g| g.grew);
        grew.is_some_and(|t| t.elapsed() < GROWING)
    }

    /// A truncation through the mount left the file as stat `s` found it: the kernel takes
    /// that size from the reply (and drops its pages itself), so it is told as it is.
    pub fn truncated(&self, ino: u64, s: Seen) -> u64 {
        if let Some(g) = self.files.lock().get_mut(&ino) {
            g.reset(s, page());
        }
        s.size
    }

    /// The epoch of `ino` while it is held back so (a drop of its pages must be reported
    /// with it); `None` for a file that is not.
    pub fn tracked(&self, ino: u64) -> Option<u64> {
        if !self.enabled() {
            return None;
        }
        self.files.lock().get(&ino).map(|g| g.epoch)
    }

    fn epoch(&self, ino: u64) -> u64 {
        self.files.lock().get(&ino).map_or(0, |g| g.epoch)
    }

    /// The kernel dropped `ino`'s pages from some page on that covers any drop asked for
    /// (asked in `epoch`, see [`Growth::tracked`]); a stat just before found `head`.
    pub fn dropped(&self, ino: u64, epoch: u64, head: Option<Seen>) {
        if let Some(g) = self.files.lock().get_mut(&ino) {
            g.dropped(epoch, head, page(), Instant::now());
        }
    }

    /// A write through the mount reached `end`; `after`: the file's stat right after it.
    pub fn wrote(&self, ino: u64, end: u64, after: Option<Seen>) {
        if let Some(g) = self.files.lock().get_mut(&ino) {
            g.wrote(end, after, page());
        }
    }

    /// The kernel forgot `ino`: it holds no size or page of it.
    pub fn forget(&self, ino: u64) {
        self.files.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant, SystemTime};

    use super::{Grow, Seen, Told, DROP_GRACE};

    fn at(n: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(n)
    }

    const P: u64 = 4096;

    /// A file told `size` first, its ctime, and a clock.
    struct T {
        g: Grow,
        now: Instant,
        ctime: u64,
    }

    impl T {
        fn new(size: u64) -> T {
            T {
                g: Grow::new(Seen { size, ctime: at(0) }, P),
                now: Instant::now(),
                ctime: 0,
            }
        }
        /// A stat taken now (the file changed since the last one).
        fn stat(&mut self, size: u64) -> Seen {
            self.ctime += 10;
            Seen {
                size,
                ctime: at(self.ctime),
            }
        }
        fn tell(&mut self, size: u64) -> (u64, Option<u64>) {
            let s = self.stat(size);
            self.tell_seen(s)
        }
        fn tell_seen(&mut self, s: Seen) -> (u64, Option<u64>) {
            let (t, d) = self.g.tell(s, P, self.now);
            (t.size, d)
        }
        /// A drop done now, the file `head` bytes just before; then the grace passes.
        fn dropped(&mut self, head: Option<u64>) {
            let s = head.map(|h| self.stat(h));
            self.g.dropped(self.g.epoch, s, P, self.now);
            self.now += DROP_GRACE;
        }
    }

    #[test]
    fn a_size_past_a_page_read_short_waits_for_the_drop_then_the_size_before_it() {
        // Told 100 bytes: a read may have filled page 0 with zeros past 100.
        let mut t = T::new(100);
        // The file grew to 300: 100 is told until page 0 is dropped.
        assert_eq!(t.tell(300), (100, Some(100)));
        assert_eq!(t.tell(500), (100, None), "one drop at a time");
        // Dropped with the file 500 bytes just before: pages read since hold at least that.
        t.dropped(Some(500));
        assert_eq!(t.tell(500), (500, None));
        // 500 ends inside page 0 too: the next growth needs the next drop, from 500.
        assert_eq!(t.tell(800), (500, Some(500)));
        t.dropped(Some(800));
        assert_eq!(t.tell(900), (800, Some(800)));
    }

    #[test]
    fn a_held_size_says_so() {
        let mut t = T::new(100);
        let told = |t: &mut T, size| {
            let s = t.stat(size);
            t.g.tell(s, P, t.now).0
        };
        assert_eq!(
            told(&mut t, 300),
            Told {
                size: 100,
                held: true
            }
        );
        t.dropped(Some(300));
        assert_eq!(
            told(&mut t, 300),
            Told {
                size: 300,
                held: false
            }
        );
    }

    #[test]
    fn the_size_a_drop_makes_safe_is_told_only_after_the_grace() {
        let mut t = T::new(100);
        assert_eq!(t.tell(300), (100, Some(100)));
        let s = t.stat(300);
        t.g.dropped(t.g.epoch, Some(s), P, t.now);
        // A reader holding the dropped page may not have read the size yet.
        t.now += DROP_GRACE / 2;
        assert_eq!(t.tell(300), (100, None));
        t.now += DROP_GRACE / 2;
        assert_eq!(t.tell(300), (300, None));
    }

    #[test]
    fn drops_all_the_time_do_not_put_the_size_off_for_ever() {
        let mut t = T::new(100);
        assert_eq!(t.tell(150), (100, Some(100)));
        // The watcher drops every page on each append, every millisecond.
        let step = Duration::from_millis(1);
        let start = t.now;
        let mut size = 150;
        let mut drops = Vec::new();
        let mut told = Vec::new();
        for _ in 0..100 {
            size += 50;
            let s = t.stat(size);
            t.g.dropped(t.g.epoch, Some(s), P, t.now);
            drops.push((size, t.now));
            t.now += step;
            let (s, _) = t.tell(size + 10);
            // Never more than a drop whose grace is over made safe.
            let safe = drops
                .iter()
                .filter(|&&(_, at)| at + DROP_GRACE <= t.now)
                .map(|&(h, _)| h)
                .max()
                .unwrap_or(100);
            assert!(s <= safe, "told {s} at {:?}, safe {safe}", t.now - start);
            told.push(s);
        }
        // And the size moves on: what was safe a grace or two before.
        assert!(told.windows(2).all(|w| w[0] <= w[1]), "{told:?}");
        let two_graces = 2 * DROP_GRACE.as_millis() as u64 * 50;
        assert!(*told.last().unwrap() + two_graces >= size, "{told:?}");
    }

    #[test]
    fn growth_seen_in_a_question_or_a_drop_is_remembered() {
        let mut t = T::new(100);
        t.tell(100);
        assert_eq!(t.g.grew, None, "the same size");
        let asked = t.now;
        t.tell(200);
        assert_eq!(t.g.grew, Some(asked));
        // Dropped, then the grace passes and 200 is told: no growth past it since.
        t.dropped(Some(200));
        t.tell(200);
        t.dropped(Some(200));
        assert_eq!(t.g.grew, Some(asked));
        // The watcher's drop finds the file larger than told.
        let dropped = t.now;
        t.dropped(Some(300));
        assert_eq!(t.g.grew, Some(dropped));
    }

    #[test]
    fn sizes_on_a_page_boundary_leave_no_short_page() {
        let mut t = T::new(2 * P);
        assert_eq!(t.tell(3 * P), (3 * P, None));
        // 3P + 10 ends inside a page: the next growth waits for a drop from there.
        assert_eq!(t.tell(3 * P + 10), (3 * P + 10, None));
        assert_eq!(t.tell(4 * P), (3 * P + 10, Some(3 * P + 10)));
        // The file was 4P just before the drop: no short page since.
        t.dropped(Some(4 * P));
        assert_eq!(t.tell(5 * P + 1), (5 * P + 1, None));
    }

    #[test]
    fn an_older_stat_is_no_shrink() {
        let mut t = T::new(100);
        let older = t.stat(150);
        assert_eq!(t.tell(300), (100, Some(100)));
        t.dropped(Some(300));
        assert_eq!(t.tell(300), (300, None));
        // A worker's stat from before, answered late: the file is no shorter.
        assert_eq!(t.tell_seen(older), (300, None));
        assert_eq!(t.tell(310), (300, Some(300)), "no shrink reset 300 to 150");
    }

    #[test]
    fn a_shrink_is_told_at_once_and_forgets_what_was_measured_before() {
        let mut t = T::new(P + 7);
        assert_eq!(t.tell(2 * P), (P + 7, Some(P + 7)));
        let epoch = t.g.epoch;
        // The file is cut to 9 bytes (rewritten in place).
        assert_eq!(t.tell(9), (9, None));
        // The drop asked before reports a size measured before the cut: ignored.
        let before = Seen {
            size: 2 * P,
            ctime: at(5),
        };
        t.g.dropped(epoch, Some(before), P, t.now);
        t.now += DROP_GRACE;
        // It grows again from 9: a page may be short there, so a drop comes first.
        assert_eq!(t.tell(100), (9, Some(9)));
        t.dropped(Some(100));
        assert_eq!(t.tell(100), (100, None));
    }

    #[test]
    fn a_truncation_through_the_mount_is_told_as_it_is() {
        let mut t = T::new(100);
        assert_eq!(t.tell(300), (100, Some(100)));
        let s = t.stat(3 * P);
        t.g.reset(s, P);
        assert_eq!(t.tell_seen(s), (3 * P, None));
        // No page is short at 100 any more: the kernel dropped them; 3P is on a boundary.
        assert_eq!(t.tell(4 * P + 5), (4 * P + 5, None));
    }

    #[test]
    fn a_drop_whose_head_is_unknown_keeps_the_size_and_asks_again() {
        let mut t = T::new(100);
        assert_eq!(t.tell(200), (100, Some(100)));
        t.dropped(None);
        assert_eq!(t.tell(200), (100, Some(100)));
    }

    #[test]
    fn two_drops_crossing_keep_the_larger_head() {
        let mut t = T::new(100);
        assert_eq!(t.tell(200), (100, Some(100)));
        // The watcher's drop of every page, measured at 700, ends first; the tail drop,
        // measured before it at 200, after it: both dropped pages, so 700 stays safe.
        let early = t.stat(200);
        let s = t.stat(700);
        t.g.dropped(t.g.epoch, Some(s), P, t.now);
        t.g.dropped(t.g.epoch, Some(early), P, t.now);
        t.now += DROP_GRACE;
        assert_eq!(t.tell(700), (700, None));
    }

    #[test]
    fn a_write_through_the_mount_sets_the_size_the_kernel_holds() {
        let mut t = T::new(100);
        // A write through the mount to 150: the kernel holds 150 and the written bytes.
        t.g.wrote(150, None, P);
        assert_eq!(t.tell(150), (150, None));
        // A stat from before the write goes by the kernel's size.
        assert_eq!(
            t.tell_seen(Seen {
                size: 100,
                ctime: at(0)
            }),
            (150, None)
        );
        assert_eq!(t.tell(400), (150, Some(100)));
    }

    #[test]
    fn a_file_cut_behind_the_mount_below_a_write_through_it_is_a_shrink() {
        let mut t = T::new(100);
        t.g.wrote(150, None, P);
        // Cut to 120 from the backing side: told as it is, not the 150 the write reached.
        assert_eq!(t.tell(120), (120, None));
    }
}
