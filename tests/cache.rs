//! What the kernel may cache, and for how long: long TTLs, pages kept across opens and cached
//! directory listings only where inotify reports every change; and, through real mounts, that
//! those caches follow changes made behind the mount's back.

mod common;

use std::ffi::OsStr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{cat, example_root, mount, mount_example, mount_without_passthrough, tool, within};
use normafs::config::Config;
use normafs::fs::watch::Watcher;
use normafs::fs::{FsOptions, Node, NormaFs, ROOT_INO, WATCHED_TTL};
use normafs::fuse::MountOptions;
use normafs::store::root::RootPaths;

/// The corpus session with blocks and their archives.
const SID: &str = "s2-tier1";
/// The corpus session with a subagent.
const SUB: &str = "s4-subagent";

/// A change behind the mount's back must show well before any TTL here would end; the bound
/// only keeps a broken build from hanging.
const SOON: Duration = Duration::from_secs(5);

fn lookup(fs: &NormaFs, path: &str) -> (u64, Duration) {
    let mut at = (ROOT_INO, Duration::ZERO);
    for c in path.split('/').filter(|c| !c.is_empty()) {
        let e = fs.lookup(at.0, OsStr::new(c)).expect(path);
        at = (e.attr.ino, e.ttl);
    }
    at
}

fn ttl(fs: &NormaFs, path: &str) -> Duration {
    lookup(fs, path).1
}

/// The name TTL of the last component of `path`.
fn name_ttl(fs: &NormaFs, path: &str) -> Duration {
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let (p, _) = lookup(fs, parent);
    fs.lookup(p, OsStr::new(name)).expect(path).entry_ttl
}

#[test]
fn long_ttls_and_kept_caches_only_where_inotify_covers() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let cfg = Config::default();
    let short = Duration::from_millis(cfg.ttl_ms);
    let s = format!("sessions/{SID}");

    // Without a watcher: the configured TTL, nothing kept across opens.
    let fs = NormaFs::new(paths.clone(), cfg.clone(), FsOptions::new(&cfg, false));
    assert_eq!(ttl(&fs, &format!("{s}/transcript.jsonl")), short);
    assert_eq!(ttl(&fs, "memory/ci-dashboard.md"), short);
    let (t, _) = lookup(&fs, &format!("{s}/transcript.jsonl"));
    assert!(!fs.open(t, libc::O_RDONLY).expect("open").keep_cache);
    let (dir, _) = lookup(&fs, "memory");
    assert!(!fs.opendir(dir).expect("opendir").1);

    let w = Arc::new(Watcher::new(&paths).expect("inotify"));
    let fs = NormaFs::setup(paths.clone(), cfg.clone(), FsOptions::new(&cfg, false))
        .watcher(Some(w.clone()))
        .build();
    assert_eq!(ttl(&fs, "sessions"), WATCHED_TTL);
    assert_eq!(ttl(&fs, "memory/ci-dashboard.md"), WATCHED_TTL);
    // A session is covered once its own directories are watched: the lookup that has the
    // kernel hold it starts the watches before its reply is made, so that reply gets the
    // long TTL already.
    let session = |sid: &str| Node::Session(sid.to_string());
    assert!(!w.covers(&session(SID), true));
    assert_eq!(ttl(&fs, &s), WATCHED_TTL);
    assert!(w.covers(&session(SID), true));
    assert_eq!(ttl(&fs, &format!("{s}/state.json")), WATCHED_TTL);
    // A session the kernel links from a readdirplus answer is watched alike.
    assert!(!w.covers(&session(SUB), true));
    fs.count_lookup(fs.ino_of(&session(SUB)));
    assert!(w.covers(&session(SUB), true));
    for p in [
        s.clone(),
        format!("{s}/transcript.jsonl"),
        format!("{s}/state.json"),
        format!("{s}/tier1"),
        format!("{s}/tier1/b1_m00004-m00009.md"),
        format!("sessions/{SUB}/subagents"),
        format!("sessions/{SUB}/subagents/agent-a7f3c2.jsonl"),
        format!("{s}/raw"),
    ] {
        assert_eq!(ttl(&fs, &p), WATCHED_TTL, "{p}");
    }
    // A ctl file's name is kept as long as its session's; its size (what a fresh open reads)
    // changes with every command, so it is never kept.
    for p in [format!("{s}/ctl"), "ctl".to_string()] {
        assert_eq!(name_ttl(&fs, &p), WATCHED_TTL, "{p}");
        assert_eq!(ttl(&fs, &p), Duration::ZERO, "{p}");
    }
    // Computed files whose every input is watched: kept for long too (the watcher invalidates
    // them when an input changes), names and sizes.
    for p in [
        format!("{s}/view.jsonl"),
        format!("{s}/status.json"),
        format!("{s}/raw/m00004-m00009.md"),
        format!("{s}/materialized.jsonl"),
        "memory/MEMORY.md".to_string(),
    ] {
        assert_eq!(ttl(&fs, &p), WATCHED_TTL, "{p}");
        assert_eq!(name_ttl(&fs, &p), WATCHED_TTL, "{p}");
    }
    // The root's audit.txt reads every session: its first request has every session watched
    // (before they are read), so it is covered too.
    assert!(!w.watches_all());
    assert_eq!(ttl(&fs, "audit.txt"), WATCHED_TTL);
    assert!(w.watches_all());
    let (t, _) = lookup(&fs, &format!("{s}/transcript.jsonl"));
    let o = fs.open(t, libc::O_RDONLY).expect("open");
    assert!(o.keep_cache && !o.direct_io);
    // A computed file is read through the page cache, kept across opens: its inode stands
    // for one version of it (`fs/versions.rs`).
    let (v, _) = lookup(&fs, &format!("{s}/view.jsonl"));
    let o = fs.open(v, libc::O_RDONLY).expect("open");
    // The lookup told the kernel this very size: nothing to drop before the open.
    assert!(!o.direct_io && o.keep_cache && !o.stale_attr);
    // Under `--ttl-ms 0` the kernel keeps nothing: direct I/O.
    let cfg0 = Config {
        ttl_ms: 0,
        ..Config::default()
    };
    let fs0 = NormaFs::new(paths.clone(), cfg0.clone(), FsOptions::new(&cfg0, false));
    let (v0, _) = lookup(&fs0, &format!("{s}/view.jsonl"));
    let o0 = fs0.open(v0, libc::O_RDONLY).expect("open");
    assert!(o0.direct_io);
    assert!(!fs0.read(o0.fh, 0, 1 << 20).expect("read").is_empty());
    fs0.release(o0.fh);
    fs.release(o.fh);
    for p in [
        "sessions",
        &s,
        &format!("{s}/tier1"),
        &format!("{s}/raw"),
        "memory",
    ] {
        let (dir, _) = lookup(&fs, p);
        assert!(fs.opendir(dir).expect("opendir").1, "{p}");
    }

    // `--ttl-ms 0` asks for no caching at all.
    let zero = Config {
        ttl_ms: 0,
        ..Config::default()
    };
    let fs = NormaFs::setup(paths.clone(), zero.clone(), FsOptions::new(&zero, false))
        .watcher(Some(w))
        .build();
    assert_eq!(ttl(&fs, &format!("{s}/transcript.jsonl")), Duration::ZERO);
}

fn names(p: &Path) -> Vec<String> {
    let o = tool("ls", &[p.as_os_str()]);
    assert!(o.status.success(), "ls {}", p.display());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Append one user message saying "Appended." to the transcript at `p`.
fn append_record(p: &Path) {
    common::append_user_message(p, SID, "Appended.");
}

#[test]
fn kept_pages_follow_writes_in_place() {
    // The userspace path reads through the page cache, kept across opens.
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let mem = m.at("memory/ci-dashboard.md");
    let before = cat(&mem);
    assert_eq!(cat(&mem), before);
    // Same size, other bytes, written in place by a writer that keeps the file open: no
    // rename, no truncation, no close.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.root().join("memory/ci-dashboard.md"))
        .expect("open");
    f.write_all_at(b"ZZZZ", 10).expect("write");
    let mut want = before.clone();
    want[10..14].copy_from_slice(b"ZZZZ");
    assert!(
        within(SOON, || cat(&mem) == want),
        "the new bytes show through the mount"
    );
    drop(f);
}

#[test]
fn cached_listings_follow_names_behind_the_mount() {
    let Some(m) = mount(example_root(), Config::default(), MountOptions::default()) else {
        return;
    };
    let root = m.root().to_path_buf();
    let s = m.at(&format!("sessions/{SID}"));
    for d in [
        m.at("sessions"),
        s.clone(),
        s.join("tier1"),
        s.join("raw"),
        m.at("memory"),
    ] {
        assert!(!names(&d).is_empty(), "{} lists", d.display());
    }

    // A tier directory filled at once, maybe before it is watched.
    let tier2 = root.join(format!("noa/{SID}/tier2"));
    std::fs::create_dir(&tier2).expect("mkdir");
    std::fs::write(tier2.join("b99_m00001-m00010.md"), "x").expect("write");
    assert!(within(SOON, || names(&s).contains(&"tier2".to_string())));
    assert!(within(SOON, || names(&s.join("tier2"))
        == vec!["b99_m00001-m00010.md".to_string()]));
    std::fs::remove_file(root.join(format!("noa/{SID}/tier1/b2_m00012-m00017.md"))).expect("rm");
    assert!(within(SOON, || !names(&s.join("tier1"))
        .contains(&"b2_m00012-m00017.md".to_string())));

    // A memory file added and one removed.
    std::fs::write(root.join("memory/new-note.md"), "---\nname: n\n---\nx\n").expect("write");
    std::fs::remove_file(root.join("memory/build-system.md")).expect("rm");
    assert!(within(SOON, || {
        let n = names(&m.at("memory"));
        n.contains(&"new-note.md".to_string()) && !n.contains(&"build-system.md".to_string())
    }));

    // A new session, then its subagents directory (the parent appears with it).
    std::fs::copy(
        root.join(format!("transcripts/{SID}.jsonl")),
        root.join("transcripts/s9-copy.jsonl"),
    )
    .expect("copy");
    assert!(within(SOON, || names(&m.at("sessions"))
        .contains(&"s9-copy".to_string())));
    let s2 = m.at("sessions/s9-copy");
    assert!(!names(&s2).contains(&"subagents".to_string()));
    let sub = root.join("transcripts/s9-copy/subagents");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::write(sub.join("agent-x.jsonl"), "").expect("write");
    assert!(within(SOON, || names(&s2).contains(&"subagents".to_string())));
    assert!(within(SOON, || names(&s2.join("subagents"))
        == vec!["agent-x.jsonl".to_string()]));

    // A computed file's size follows its inputs under its cached name.
    let view = s.join("view.jsonl");
    let size = |p: &Path| std::fs::metadata(p).expect("stat").len();
    let before = size(&view);
    assert_eq!(before, cat(&view).len() as u64);
    append_record(&root.join(format!("transcripts/{SID}.jsonl")));
    // An open reads the new bytes at once; stat sees their size as soon as inotify reports
    // the append (the kernel kept the old size until then).
    let fresh = cat(&view);
    assert!(fresh.len() as u64 > before && fresh.ends_with(b"\n"));
    assert!(within(SOON, || size(&view) == fresh.len() as u64));
    assert_eq!(cat(&view), fresh, "read again");

    // raw/ lists the block ranges of state.json.
    assert!(!names(&s.join("raw")).is_empty());
    std::fs::remove_file(root.join(format!("noa/{SID}/state.json"))).expect("rm");
    assert!(within(SOON, || names(&s.join("raw")).is_empty()));
}

/// A computed file's inode stands for one version of its content: open handles follow the
/// versions that extend it (the transcript grew), and keep theirs when the content is
/// rewritten, while the name moves to a new inode; an idle inode whose version is gone
/// answers ESTALE, so the kernel looks the name up again.
#[test]
fn a_computed_files_inode_stands_for_one_version() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let cfg = Config::default();
    let w = Arc::new(Watcher::new(&paths).expect("inotify"));
    let fs = NormaFs::setup(paths.clone(), cfg.clone(), FsOptions::new(&cfg, false))
        .watcher(Some(w.clone()))
        .build();
    w.watch_session(SID);
    let name = format!("sessions/{SID}/view.jsonl");
    let (v, _) = lookup(&fs, &name);
    let first = fs.open(v, libc::O_RDONLY).expect("open");
    let old = fs.read(first.fh, 0, 1 << 24).expect("read");
    let e = fs.getattr(v).expect("fstat");
    assert_eq!((e.attr.size, e.ttl), (old.len() as u64, WATCHED_TTL));

    // The transcript grows while the handle is open (the watcher, not running here, would
    // report it: a covered file's inputs are checked again once it does): the view extends
    // its version, under the same inode, for every handle of it and for the name.
    let t = d.path().join(format!("transcripts/{SID}.jsonl"));
    let report = || fs.invalidate_computed(&normafs::fs::watch::Affected::Session(SID.into()));
    append_record(&t);
    report();
    let grown = fs.getattr(v).expect("fstat").attr.size;
    assert!(grown > old.len() as u64, "the new size");
    assert_eq!(lookup(&fs, &name).0, v, "still the name's inode");
    let all = fs.read(first.fh, 0, 1 << 24).expect("read");
    assert_eq!(all.len() as u64, grown);
    assert!(all.starts_with(&old) && String::from_utf8_lossy(&all).contains("Appended."));
    let second = fs.open(v, libc::O_RDONLY).expect("open");
    assert_eq!(fs.read(second.fh, 0, 1 << 24).expect("read"), all);

    // Rewritten (the transcript emptied): the view does not extend the version. The open
    // handles keep reading it (and so does an open of the old inode while it is held); the
    // name gets a new inode of the new content.
    std::fs::write(&t, b"").expect("truncate the transcript");
    report();
    assert_eq!(fs.getattr(v).expect("fstat").attr.size, grown);
    let (nv, _) = lookup(&fs, &name);
    assert_ne!(nv, v, "a new inode for the new content");
    let fresh = fs.getattr(nv).expect("getattr").attr.size;
    assert!(fresh < grown, "{fresh} < {grown}");
    let third = fs.open(v, libc::O_RDONLY).expect("the old inode, held");
    assert_eq!(fs.read(third.fh, 0, 1 << 24).expect("read"), all);
    let o = fs.open(nv, libc::O_RDONLY).expect("open");
    assert_eq!(fs.read(o.fh, 0, 1 << 24).expect("read").len() as u64, fresh);
    assert_eq!(fs.read(first.fh, 0, 1 << 24).expect("read"), all);
    assert_eq!(fs.read(second.fh, 0, 1 << 24).expect("read"), all);
    for h in [first.fh, second.fh, third.fh, o.fh] {
        fs.release(h);
    }
    // Once no handle is open and the moment after its lookup is over, the old inode
    // stands for nothing that is still there: ESTALE, and the kernel looks the name up.
    std::thread::sleep(normafs::fs::versions::HOLD + Duration::from_millis(50));
    assert_eq!(
        fs.getattr(v).expect_err("no handle").errno(),
        libc::ESTALE,
        "an idle inode of a version gone"
    );
    assert_eq!(
        fs.open(v, libc::O_RDONLY).expect_err("no handle").errno(),
        libc::ESTALE
    );

    // The watcher reports a change of an input: the kernel drops the attributes of the
    // session's computed files, and their names.
    let dir = lookup(&fs, &format!("sessions/{SID}")).0;
    let gone = fs.invalidate_computed(&normafs::fs::watch::Affected::Session(SID.into()));
    let i = gone.iter().find(|i| i.ino == nv).expect("the view");
    assert_eq!(i.entry, Some((dir, "view.jsonl".to_string())));
    assert!(!i.open);
}

/// Every change of a session makes its computed files new inodes; once the kernel forgot a
/// retired one and no handle reads it, its number is given to a later inode: a live session
/// read again and again (`watch cat status.json`) keeps the inode table as large as what the
/// kernel holds, not one slot per version it ever saw.
#[test]
fn retired_computed_inodes_give_their_numbers_back() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let cfg = Config::default();
    let fs = NormaFs::new(paths, cfg.clone(), FsOptions::new(&cfg, false));
    let t = d.path().join(format!("transcripts/{SID}.jsonl"));
    let original = std::fs::read(&t).expect("transcript");
    let name = format!("sessions/{SID}/status.json");
    let mut seen = std::collections::BTreeSet::new();
    let mut sizes = Vec::new();
    let mut held: Option<u64> = None;
    let mut counts = std::collections::HashMap::new();
    for round in 0..12 {
        // Past the moment a lookup holds its version for.
        std::thread::sleep(normafs::fs::versions::HOLD + Duration::from_millis(20));
        // Every other round the transcript is cut back: not an extension of the last version.
        if round % 2 == 0 {
            std::fs::write(&t, &original).expect("rewrite");
        } else {
            append_record(&t);
        }
        // The kernel's path walk: one lookup per component.
        let mut walked = Vec::new();
        let mut at = ROOT_INO;
        for c in name.split('/') {
            at = fs.lookup(at, OsStr::new(c)).expect("lookup").attr.ino;
            walked.push(at);
        }
        seen.insert(at);
        let o = fs.open(at, libc::O_RDONLY).expect("open");
        let bytes = fs.read(o.fh, 0, 1 << 20).expect("read");
        assert!(
            serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
            "round {round}"
        );
        fs.release(o.fh);
        // The kernel keeps the file's inode while its name is valid; the name of a retired
        // version was dropped (the watcher says so), and the kernel forgets its inode.
        for i in &walked[..walked.len() - 1] {
            fs.forget(*i, 1);
        }
        *counts.entry(at).or_insert(0u64) += 1;
        if let Some(old) = held.replace(at).filter(|&old| old != at) {
            fs.forget(old, counts.remove(&old).unwrap_or(0));
        }
        sizes.push(fs.inode_numbers());
    }
    assert!(seen.len() > 1, "rewrites gave new inodes: {seen:?}");
    let (first, last) = (sizes[3], *sizes.last().expect("rounds"));
    assert!(
        last <= first + 2,
        "the table grew from {first} to {last}: {sizes:?}"
    );
    // The name still reads as the file it is now.
    let (ino, _) = lookup(&fs, &name);
    let o = fs.open(ino, libc::O_RDONLY).expect("open");
    let now: serde_json::Value =
        serde_json::from_slice(&fs.read(o.fh, 0, 1 << 20).expect("read")).expect("json");
    assert!(now.is_object());
}

/// A directory the watcher does not cover (below `memory/`): the kernel keeps its listing, and
/// drops it when the directory's mtime changes, seen once the attributes expire.
#[test]
fn listings_of_unwatched_directories_follow_their_mtime() {
    let d = example_root();
    std::fs::create_dir(d.path().join("memory/sub")).expect("mkdir");
    std::fs::write(d.path().join("memory/sub/a.md"), "a").expect("write");
    let Some(m) = mount(d, Config::default(), MountOptions::default()) else {
        return;
    };
    let sub = m.at("memory/sub");
    assert_eq!(names(&sub), vec!["a.md".to_string()]);
    assert_eq!(names(&sub), vec!["a.md".to_string()], "listed again");
    std::fs::write(m.root().join("memory/sub/b.md"), "b").expect("write");
    assert!(within(SOON, || names(&sub)
        == vec!["a.md".to_string(), "b.md".to_string()]));
    std::fs::remove_file(m.root().join("memory/sub/a.md")).expect("rm");
    assert!(within(SOON, || names(&sub) == vec!["b.md".to_string()]));
}

/// `readdir` without a handle (the kernel opens directories itself): a pass keeps its own
/// snapshot while the directory changes and another pass starts.
#[test]
fn unopened_listing_passes_keep_their_snapshot() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let cfg = Config::default();
    let fs = NormaFs::new(paths, cfg.clone(), FsOptions::new(&cfg, false));
    let (mem, _) = lookup(&fs, "memory");
    let names = |v: &[normafs::fs::DirEntry]| -> Vec<String> {
        v.iter()
            .map(|e| e.name.to_string_lossy().into_owned())
            .collect()
    };
    let a = fs.readdir(mem, 0, 0).expect("pass a");
    assert!(a.len() > 4, "{:?}", names(&a));
    // Pass a stops after three entries; the directory changes; pass b starts.
    std::fs::write(d.path().join("memory/zz-new.md"), "x").expect("write");
    let b = fs.readdir(mem, 0, 0).expect("pass b");
    assert!(names(&b).contains(&"zz-new.md".to_string()));
    let rest = fs.readdir(mem, 0, a[2].offset).expect("pass a goes on");
    assert_eq!(
        names(&rest),
        names(&a[3..]),
        "pass a reads its own snapshot"
    );
    let last = a.last().expect("an entry").offset;
    assert!(fs.readdir(mem, 0, last).expect("end").is_empty());
    // Offsets are increasing within a pass, and never 0.
    assert!(b.windows(2).all(|w| w[0].offset < w[1].offset) && b[0].offset > 0);
}

/// Link targets kept by the kernel follow a replaced link: at once in a watched directory,
/// after the TTL below it.
#[test]
fn kept_link_targets_follow_replaced_links() {
    let d = example_root();
    std::fs::create_dir(d.path().join("memory/sub")).expect("mkdir");
    for l in ["memory/link.md", "memory/sub/link.md"] {
        std::os::unix::fs::symlink("a.md", d.path().join(l)).expect("symlink");
    }
    let Some(m) = mount(d, Config::default(), MountOptions::default()) else {
        return;
    };
    let target = |l: &str| -> String {
        let o = tool("readlink", &[m.at(l).as_os_str()]);
        assert!(o.status.success(), "readlink {l}");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    for l in ["memory/link.md", "memory/sub/link.md"] {
        assert_eq!(target(l), "a.md");
        assert_eq!(target(l), "a.md", "read again");
        // Replaced by rename, as editors and runtimes do.
        let tmp = m.root().join(format!("{l}.new"));
        std::os::unix::fs::symlink("b.md", &tmp).expect("symlink");
        std::fs::rename(&tmp, m.root().join(l)).expect("rename");
        assert!(within(SOON, || target(l) == "b.md"), "{l}");
    }
    let s = format!("sessions/{SID}/memory");
    assert_eq!(target(&s), "../../memory");
}

fn sizes_by_listing(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::DirEntryExt;
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let e = e.expect("entry");
            (e.file_name().to_string_lossy().into_owned(), e.ino())
        })
        .collect();
    v.sort();
    v
}

/// A listing hands the kernel each real file's attributes (`readdirplus`): `stat` after it
/// asks the mount for nothing more. Computed files are listed with placeholders the kernel
/// must not use: their sizes are right right after a listing, also for a file the kernel
/// holds while its session changes.
#[test]
fn a_listing_hands_over_attributes_never_a_placeholder_size() {
    let Some(m) = mount_example() else {
        return;
    };
    let fs = m.handle().fs().clone();
    let dir = m.at(&format!("sessions/{SID}"));
    let listed = sizes_by_listing(&dir);
    let ino_of = |n: &str| listed.iter().find(|(x, _)| x == n).expect(n).1;
    let t = ino_of("transcript.jsonl");
    assert_eq!(
        fs.lookup_count(t),
        1,
        "linked by the listing, without a lookup"
    );
    let st = std::fs::symlink_metadata(dir.join("transcript.jsonl")).expect("stat");
    assert_eq!(
        fs.lookup_count(t),
        1,
        "stat after the listing sends no lookup"
    );
    assert_eq!(st.len(), cat(&dir.join("transcript.jsonl")).len() as u64);
    let computed = [
        "view.jsonl",
        "view.md",
        "materialized.jsonl",
        "audit.txt",
        "status.json",
    ];
    for n in computed {
        let p = dir.join(n);
        let size = std::fs::metadata(&p).expect(n).len();
        assert_eq!(size, cat(&p).len() as u64, "{n}: size after a listing");
        assert!(size > 0, "{n}");
    }
    // Held by the kernel (open) while the session changes: listed again with its new size.
    // Opened by another thread: a `stat` from the opener reports its handle's snapshot.
    let p = dir.join("view.jsonl");
    let held = std::thread::spawn(move || std::fs::File::open(p).expect("open"))
        .join()
        .expect("opener");
    let before = std::fs::metadata(dir.join("view.jsonl"))
        .expect("stat")
        .len();
    append_record(&m.root().join(format!("transcripts/{SID}.jsonl")));
    assert!(
        within(SOON, || {
            sizes_by_listing(&dir);
            std::fs::metadata(dir.join("view.jsonl"))
                .expect("stat")
                .len()
                != before
        }),
        "the new view's size shows"
    );
    for n in computed {
        let p = dir.join(n);
        sizes_by_listing(&dir);
        assert_eq!(
            std::fs::metadata(&p).expect(n).len(),
            cat(&p).len() as u64,
            "{n}: size after a listing of the changed session"
        );
    }
    drop(held);
}

/// Pages of `p` the kernel holds (mapped and asked with `mincore`, never touched).
fn resident_pages(p: &Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(p).expect("open");
    let len = f.metadata().expect("meta").len() as usize;
    let page = 4096;
    let pages = len.div_ceil(page);
    // SAFETY: a read-only private mapping of a file we hold open, unmapped below; mincore
    // writes one byte per page into a vector of that many bytes.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED, "mmap {}", p.display());
        let mut v = vec![0u8; pages];
        assert_eq!(libc::mincore(at, len, v.as_mut_ptr()), 0, "mincore");
        libc::munmap(at, len);
        (v.iter().filter(|b| **b & 1 == 1).count(), pages)
    }
}

/// Descriptors of this process (the mount's daemon runs in it) open on deleted files under
/// `root`.
fn deleted_files_open(root: &Path) -> usize {
    let root = root.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| t.starts_with(&root) && t.ends_with(" (deleted)"))
        .count()
}

/// Without passthrough (an ordinary user's mount), a real file is read through the page
/// cache, kept across opens; a change in place shows at once; and a file removed or
/// replaced behind the mount is let go soon (the inode that held it is forgotten), so its
/// disk space is not kept.
#[test]
fn real_files_without_passthrough_are_kept_in_the_page_cache_and_let_go_once_deleted() {
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let backing = m.root().join("memory/big-notes.md");
    let body: Vec<u8> = (0..4 << 20).map(|i| b"abcdefghij\n"[i % 11]).collect();
    std::fs::write(&backing, &body).expect("write");
    let through = m.at("memory/big-notes.md");
    assert_eq!(cat(&through), body);
    // (The watcher's report of the write, late on a loaded machine, may drop the pages once:
    // read again until the file's change is reported.)
    assert!(
        within(SOON, || {
            cat(&through) == body && {
                let (resident, pages) = resident_pages(&through);
                resident == pages
            }
        }),
        "read once, every page is kept"
    );
    // Appended behind the mount: the new bytes show.
    let mut more = body.clone();
    more.extend_from_slice(b"appended\n");
    std::fs::write(&backing, &more).expect("rewrite");
    assert!(within(SOON, || cat(&through) == more), "the append shows");

    // Files the kernel looked up, then removed or replaced behind its back.
    let names: Vec<String> = (0..20).map(|i| format!("memory/gone-{i}.md")).collect();
    for n in &names {
        std::fs::write(m.root().join(n), "---\nname: gone\n---\nsoon\n").expect("write");
        assert_eq!(cat(&m.at(n)), b"---\nname: gone\n---\nsoon\n");
    }
    let state = m.at(&format!("sessions/{SID}/state.json"));
    assert!(!cat(&state).is_empty());
    for n in &names {
        std::fs::remove_file(m.root().join(n)).expect("rm");
    }
    let real_state = m.root().join(format!("noa/{SID}/state.json"));
    let tmp = real_state.with_file_name("state.json.tmp");
    std::fs::copy(&real_state, &tmp).expect("copy");
    std::fs::rename(&tmp, &real_state).expect("rename");
    assert!(
        within(SOON, || deleted_files_open(m.root()) == 0),
        "{} deleted files still held open",
        deleted_files_open(m.root())
    );
}

/// A computed file is read through the page cache, kept across opens; an open handle
/// follows the versions that extend what it read (the transcript grew) under the same inode,
/// and keeps its version when the view is rewritten, while the name moves to a new inode.
#[test]
fn computed_files_are_kept_in_the_page_cache_and_a_rewrite_is_a_new_inode() {
    use std::io::{Read, Seek};
    use std::os::unix::fs::MetadataExt;
    for passthrough in [false, true] {
        let Some(m) = mount(
            example_root(),
            Config::default(),
            MountOptions {
                passthrough,
                ..MountOptions::default()
            },
        ) else {
            return;
        };
        let view = m.at(&format!("sessions/{SID}/view.jsonl"));
        let first = cat(&view);
        assert!(!first.is_empty());
        let (resident, pages) = resident_pages(&view);
        assert_eq!(resident, pages, "read once, every page is kept");
        assert_eq!(cat(&view), first, "read again");
        let ino = std::fs::metadata(&view).expect("stat").ino();

        let mut held = std::fs::File::open(&view).expect("open");
        let mut got = Vec::new();
        held.read_to_end(&mut got).expect("read");
        assert_eq!(got, first);
        // The transcript grows: the open handle reads on into the longer view.
        let t = m.root().join(format!("transcripts/{SID}.jsonl"));
        append_record(&t);
        assert!(within(SOON, || cat(&view).len() > first.len()));
        let grown = cat(&view);
        assert!(grown.starts_with(&first));
        let mut more = Vec::new();
        held.read_to_end(&mut more).expect("read on");
        assert_eq!([first.clone(), more].concat(), grown, "followed the append");
        assert_eq!(held.metadata().expect("fstat").len(), grown.len() as u64);
        assert_eq!(std::fs::metadata(&view).expect("stat").ino(), ino);

        // Rewritten (the transcript emptied): the name is a new inode of the new view; the
        // open handle keeps the version it read.
        std::fs::write(&t, b"").expect("truncate");
        assert!(within(SOON, || std::fs::metadata(&view)
            .map(|s| s.ino() != ino && s.len() < grown.len() as u64)
            .unwrap_or(false)));
        let fresh = cat(&view);
        assert!(fresh.len() < grown.len());
        assert_eq!(
            std::fs::metadata(&view).expect("stat").len(),
            fresh.len() as u64
        );
        held.rewind().expect("rewind");
        let mut again = Vec::new();
        held.read_to_end(&mut again).expect("read again");
        assert_eq!(again, grown, "the handle keeps its version");
        assert_eq!(held.metadata().expect("fstat").len(), grown.len() as u64);
        drop(held);
    }
}

/// A change of a session that leaves a computed file's bytes as they were (a raw range when
/// the transcript grows) keeps the file's inode: its number and its kept pages stay, while a
/// file whose bytes changed (the view) follows the change.
#[test]
fn computed_files_whose_bytes_stay_keep_their_inode() {
    use std::os::unix::fs::MetadataExt;
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let raw = m.at(&format!("sessions/{SID}/raw"));
    let ranges = names(&raw);
    assert!(!ranges.is_empty(), "the session has archived ranges");
    let before: Vec<(u64, Vec<u8>)> = ranges
        .iter()
        .map(|r| {
            let p = raw.join(r);
            let bytes = cat(&p);
            (std::fs::metadata(&p).expect("stat").ino(), bytes)
        })
        .collect();
    // Held open (a pager, an agent's reader): the kernel keeps the inodes meanwhile.
    let held: Vec<std::fs::File> = ranges
        .iter()
        .map(|r| std::fs::File::open(raw.join(r)).expect("open"))
        .collect();
    let view = m.at(&format!("sessions/{SID}/view.jsonl"));
    let old_view = cat(&view);
    for round in 0..3 {
        // Past the moment a lookup holds its version for.
        std::thread::sleep(normafs::fs::versions::HOLD + Duration::from_millis(50));
        append_record(&m.root().join(format!("transcripts/{SID}.jsonl")));
        let want = old_view.len() + round;
        assert!(within(SOON, || cat(&view).len() > want), "the view grew");
        for (r, (ino, bytes)) in ranges.iter().zip(&before) {
            let p = raw.join(r);
            eprintln!("{r} {} {ino}", std::fs::metadata(&p).expect("stat").ino());
            assert_eq!(&cat(&p), bytes, "{r}: the same bytes");
            assert_eq!(std::fs::metadata(&p).expect("stat").ino(), *ino, "{r}");
        }
    }
    for (f, (ino, bytes)) in held.iter().zip(&before) {
        assert_eq!(f.metadata().expect("fstat").ino(), *ino);
        let mut got = vec![0; bytes.len() + 1];
        let n = f.read_at(&mut got, 0).expect("read");
        assert_eq!(&got[..n], bytes.as_slice());
    }
}
