//! The whole mount read again, warm (issue 24): a second `grep -r` over a root whose computed
//! files are far larger than the cache's budget computes nothing (but for a read of a page
//! the kernel let go, which it may do now and then) and asks the mount for no lookup, and the
//! kernel forgets no inode; a `stat` of computed files keeps none of their bytes; a change is
//! seen by the next read though the kernel keeps the pages of computed files across opens.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{mount, within, Mounted};
use normafs::config::Config;
use normafs::fs::computed::Counts;
use normafs::fuse::MountOptions;
use normafs::gen::{generate, GenOptions};

/// A generated root of `sessions` sessions of `messages` messages.
fn root(sessions: usize, messages: usize) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    let opts = GenOptions {
        sessions,
        messages,
        ..GenOptions::default()
    };
    generate(d.path(), &opts, &mut |_, _| {}).expect("gen");
    d
}

/// Read every file under `dir` the way `grep -r` does (open, fstat, read to the end, close),
/// links not followed; how many bytes.
fn read_all(dir: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let t = e.file_type().expect("type");
        if t.is_dir() {
            total += read_all(&e.path());
        } else if t.is_file() {
            let f = std::fs::File::open(e.path()).expect("open");
            let _ = f.metadata().expect("fstat");
            let mut f = f;
            total += std::io::copy(&mut f, &mut std::io::sink()).expect("read");
        }
    }
    total
}

/// The count of `op` among the mount's requests.
fn count(m: &Mounted, op: &str) -> u64 {
    m.requests_of(op)
}

/// Files under `dir` (named `name`, when given).
fn files(dir: &Path, name: Option<&str>) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let t = e.file_type().expect("type");
        if t.is_dir() {
            n += files(&e.path(), name);
        } else if name.is_none_or(|name| e.file_name() == name) {
            n += 1;
        }
    }
    n
}

#[test]
fn a_warm_pass_over_a_root_past_the_budget_computes_nothing() {
    for (passthrough, no_open) in [(true, false), (false, false), (false, true)] {
        let cfg = Config {
            cache_mb: Some(1),
            ..Config::default()
        };
        let Some(m) = mount(
            root(24, 200),
            cfg,
            MountOptions {
                passthrough,
                no_open,
                ..MountOptions::default()
            },
        ) else {
            return;
        };
        let first = read_all(m.mnt());
        let c1 = m.handle().fs().computed_counts();
        let computed = files(m.mnt(), None).saturating_sub(files(m.root(), None));
        assert!(
            computed > 200,
            "{computed} computed files (mount less backing root)"
        );
        assert!(
            first > 4 << 20,
            "the computed files ({first} bytes in all) are far past the 1 MiB budget"
        );
        // One computation per session (and one each for MEMORY.md and the root's audit).
        assert!(
            c1.computations <= 24 + 2,
            "first pass: {c1:?} for 24 sessions"
        );
        assert!(m.handle().fs().cache_used() <= 1 << 20, "within the budget");
        // The second pass: the kernel holds the pages; the mount makes nothing but for a
        // page the kernel let go (it may, now and then, even with memory to spare).
        let reads1 = count(&m, "read");
        assert_eq!(read_all(m.mnt()), first);
        let reads2 = count(&m, "read") - reads1;
        let c2 = m.handle().fs().computed_counts();
        warm_pass_made_nothing(&c1, &c2, computed, "second pass");
        // The third: no lookup at all, and attributes asked only of what the kernel cannot
        // keep (ctl, whose size changes with every command; real files read through
        // passthrough, whose access time the kernel drops after each read, as it does after
        // every read that reaches the mount: ctl's, and the second pass's others).
        let (lookups, getattrs) = (count(&m, "lookup"), count(&m, "getattr"));
        let forgets = count(&m, "forget");
        let opens = ["open", "release", "flush"].map(|op| count(&m, op));
        assert_eq!(read_all(m.mnt()), first);
        let c3 = m.handle().fs().computed_counts();
        warm_pass_made_nothing(&c2, &c3, computed, "third pass");
        assert_eq!(count(&m, "lookup"), lookups, "a warm pass sends no LOOKUP");
        // Nor does the kernel let an inode go (its pages would go with it): a listing must
        // not cut the time an entry is kept.
        assert_eq!(count(&m, "forget"), forgets, "a warm pass forgets no inode");
        let ctl = files(m.mnt(), Some("ctl"));
        let real = read_real(m.root());
        let asked = count(&m, "getattr") - getattrs;
        if no_open {
            // The kernel opens files itself: no OPEN, RELEASE or FLUSH at all after the one
            // OPEN answered ENOSYS, and no attribute asked of what the watcher covers.
            assert_eq!(
                ["open", "release", "flush"].map(|op| count(&m, op)),
                opens,
                "a warm pass sends no OPEN, RELEASE or FLUSH"
            );
            assert!(opens[0] <= 1 && opens[1] == 0, "{opens:?}");
            // Only for pages the kernel let go and read again in the pass before (a read that
            // reaches the mount makes the kernel drop the file's access time).
            assert!(
                asked <= reads2,
                "no-open: {asked} GETATTRs in a warm pass, at most {reads2} (reads in the \
                 pass before)"
            );
        } else {
            let allowed = 2 * ctl + reads2 + if passthrough { real } else { 0 };
            assert!(
                asked <= allowed,
                "passthrough {passthrough}: {asked} GETATTRs in a warm pass, at most {allowed} \
                 (ctl {ctl}, real files {real}, reads in the pass before {reads2})"
            );
        }
        assert!(
            m.handle().fs().cache_used() <= 1 << 20,
            "the cache keeps to its budget"
        );

        // A change is seen by the next read, though the kernel keeps the view's pages.
        let sid = "s1-0003";
        let view = m.at(&format!("sessions/{sid}/view.jsonl"));
        let before = std::fs::read(&view).expect("view");
        let t = m.root().join(format!("transcripts/{sid}.jsonl"));
        common::append_user_message(&t, sid, "warm-pass-marker-7f3a");
        assert!(
            within(Duration::from_secs(5), || std::fs::read(&view)
                .is_ok_and(|b| b.len() > before.len()
                    && String::from_utf8_lossy(&b)
                        .contains("warm-pass-marker-7f3a"))),
            "the appended message shows in view.jsonl"
        );
    }
}

/// Between counts `a` and `b` (a warm pass over `computed` computed files), every
/// computation was for a read of pages the kernel had let go, and those were few.
fn warm_pass_made_nothing(a: &Counts, b: &Counts, computed: u64, pass: &str) {
    let refills = b.refills - a.refills;
    assert!(
        b.computations - a.computations <= refills,
        "{pass}: {b:?} after {a:?}: computations not asked for by a read of pages the kernel \
         let go"
    );
    assert!(
        b.input_checks - a.input_checks <= refills,
        "{pass}: {b:?} after {a:?}: inputs checked"
    );
    assert!(
        refills * 10 <= computed,
        "{pass}: {refills} reads of {computed} computed files found their pages gone"
    );
}

/// Real files under the backing root (transcripts, archives, memory), for the GETATTR bound.
fn read_real(root: &Path) -> u64 {
    ["transcripts", "noa", "memory"]
        .iter()
        .map(|d| root.join(d))
        .filter(|p| p.is_dir())
        .map(|p| files(&p, None))
        .sum()
}

#[test]
fn a_stat_of_computed_files_keeps_none_of_their_bytes() {
    let Some(m) = mount(root(6, 120), Config::default(), MountOptions::default()) else {
        return;
    };
    let mut sizes = 0;
    for e in std::fs::read_dir(m.at("sessions"))
        .expect("sessions")
        .flatten()
    {
        for name in [
            "view.jsonl",
            "view.md",
            "materialized.jsonl",
            "audit.txt",
            "status.json",
        ] {
            sizes += std::fs::metadata(e.path().join(name)).expect("stat").len();
        }
    }
    assert!(sizes > 0);
    assert_eq!(
        m.handle().fs().cached_bytes(),
        0,
        "a stat computes the sizes and keeps no bytes in the cache"
    );
    // The last computation's bytes are at hand outside the cache for a moment (a reader of
    // the directory opens its files next), then let go.
    let recent = normafs::fs::computed::RECENT + Duration::from_millis(700);
    assert!(within(recent + Duration::from_secs(2), || m
        .handle()
        .fs()
        .recent_bytes()
        == 0));
    let c = m.handle().fs().computed_counts();
    assert!(
        c.computations <= 6 + 1,
        "one computation per session: {c:?}"
    );
    // Reading them makes them again (from the parsed transcripts kept) and serves them.
    let sid = "s1-0002";
    let v = std::fs::read(m.at(&format!("sessions/{sid}/view.jsonl"))).expect("read");
    assert_eq!(
        v.len() as u64,
        std::fs::metadata(m.at(&format!("sessions/{sid}/view.jsonl")))
            .expect("stat")
            .len()
    );
}
