//! The watcher's plans, coverage and invalidations, and inotify against real directories.

use super::*;

/// The plan for event `mask` on `name` in `d`, every session known.
fn event(d: &Dir, name: &str, mask: u32) -> Plan {
    plan(d, OsStr::new(name), mask, &|_| true)
}

fn has(p: &Plan, i: &Inval) -> bool {
    p.invals.contains(i)
}

/// The invalidations of kernel nodes (computed files aside).
fn kernel(p: &Plan) -> Vec<Inval> {
    p.invals
        .iter()
        .filter(|i| !matches!(i, Inval::Computed(_)))
        .cloned()
        .collect()
}

#[test]
fn every_event_reaches_the_computed_files_that_read_it() {
    let s = |sid: &str| Inval::Computed(Affected::Session(sid.into()));
    for (d, n, want) in [
        (Dir::Transcripts, "abc.jsonl", s("abc")),
        (Dir::Transcripts, "abc", s("abc")),
        (
            Dir::Transcripts,
            ".abc.jsonl.tmp-1",
            Inval::Computed(Affected::Root),
        ),
        (Dir::Archives, "abc", s("abc")),
        (Dir::ArchiveRoot("abc".into()), "state.json", s("abc")),
        (
            Dir::ArchiveRoot("abc".into()),
            ".state.json.tmp-1",
            s("abc"),
        ),
        (
            Dir::Tier("abc".into(), "tier1".into()),
            "b1_m0001-m0002.md",
            s("abc"),
        ),
        (Dir::Subagents("abc".into()), "agent-a.jsonl", s("abc")),
        (Dir::SessionTranscripts("abc".into()), "subagents", s("abc")),
        (Dir::Memory, "a.md", Inval::Computed(Affected::Memory)),
        (Dir::Memory, "MEMORY.md", Inval::Computed(Affected::Memory)),
        (Dir::ArchiveRoot("abc".into()), "", s("abc")),
    ] {
        for mask in [
            libc::IN_MODIFY,
            libc::IN_CREATE,
            libc::IN_DELETE,
            libc::IN_ATTRIB,
        ] {
            let p = event(&d, n, mask);
            assert!(has(&p, &want), "{d:?} {n} {mask:#x}: {:?}", p.invals);
        }
    }
}

fn real(b: Base, rel: &str) -> Node {
    Node::Real(b, PathBuf::from(rel))
}

#[test]
fn a_new_session_transcript_drops_the_sessions_entry() {
    let p = plan(
        &Dir::Transcripts,
        OsStr::new("abc.jsonl"),
        libc::IN_CREATE,
        &|_| false,
    );
    assert!(has(
        &p,
        &Inval::Entry {
            parent: Node::Sessions,
            name: "abc".into()
        }
    ));
    assert!(has(
        &p,
        &Inval::Inode {
            node: real(Base::Transcripts, "abc.jsonl"),
            data: true
        }
    ));
}

#[test]
fn an_append_drops_the_file_s_attributes_and_pages() {
    let p = plan(
        &Dir::Transcripts,
        OsStr::new("abc.jsonl"),
        libc::IN_MODIFY,
        &|_| false,
    );
    assert_eq!(
        kernel(&p),
        vec![
            Inval::Inode {
                node: real(Base::Transcripts, "abc.jsonl"),
                data: true
            },
            Inval::Inode {
                node: Node::Session("abc".into()),
                data: false
            },
        ]
    );
}

#[test]
fn temp_files_and_bad_names_are_ignored() {
    for (d, n) in [
        (Dir::Transcripts, ".abc.jsonl.tmp-1"),
        (Dir::Transcripts, "notes.txt"),
        (Dir::Memory, "MEMORY.md"),
    ] {
        let p = event(&d, n, libc::IN_CREATE);
        assert!(kernel(&p).is_empty() && p.watch.is_empty(), "{d:?} {n}");
    }
    // In an archive root they change only the session directory's mtime.
    for n in [".normafs.lock", ".state.json.tmp-x"] {
        let p = event(&Dir::ArchiveRoot("s".into()), n, libc::IN_CREATE);
        assert_eq!(
            kernel(&p),
            vec![Inval::Inode {
                node: Node::Session("s".into()),
                data: false
            }],
            "{n}"
        );
        assert!(p.watch.is_empty());
        let p = event(&Dir::ArchiveRoot("s".into()), n, libc::IN_MODIFY);
        assert!(
            kernel(&p).is_empty(),
            "{n}: a write changes no mtime we show"
        );
    }
}

#[test]
fn a_new_tier_and_archive() {
    let p = event(
        &Dir::ArchiveRoot("s".into()),
        "tier2",
        libc::IN_CREATE | libc::IN_ISDIR,
    );
    assert_eq!(p.watch, vec![Dir::Tier("s".into(), "tier2".into())]);
    assert!(has(
        &p,
        &Inval::Entry {
            parent: Node::Session("s".into()),
            name: "tier2".into()
        }
    ));
    let p = plan(
        &Dir::Tier("s".into(), "tier1".into()),
        OsStr::new("b3_m0001-m0004.md"),
        libc::IN_MOVED_TO,
        &|_| true,
    );
    assert!(has(
        &p,
        &Inval::Entry {
            parent: real(Base::Archives, "s/tier1"),
            name: "b3_m0001-m0004.md".into()
        }
    ));
}

#[test]
fn state_replaced_by_rename_drops_it_the_raw_listing_and_the_session() {
    let p = event(
        &Dir::ArchiveRoot("s".into()),
        "state.json",
        libc::IN_MOVED_TO,
    );
    for node in [
        real(Base::Archives, "s/state.json"),
        Node::RawDir("s".into()),
        Node::Session("s".into()),
    ] {
        let dropped = Inval::Inode { node, data: true };
        assert!(has(&p, &dropped), "{dropped:?}: {:?}", p.invals);
    }
}

#[test]
fn a_new_archive_root_is_watched_only_for_watched_sessions() {
    let m = libc::IN_CREATE | libc::IN_ISDIR;
    let p = plan(&Dir::Archives, OsStr::new("s"), m, &|_| false);
    assert!(p.watch.is_empty());
    assert!(has(
        &p,
        &Inval::Entry {
            parent: Node::Sessions,
            name: "s".into()
        }
    ));
    let p = event(&Dir::Archives, "s", m);
    assert_eq!(p.watch, vec![Dir::ArchiveRoot("s".into())]);
}

#[test]
fn memory_edits() {
    let p = plan(
        &Dir::Memory,
        OsStr::new("a.md"),
        libc::IN_CLOSE_WRITE,
        &|_| false,
    );
    assert_eq!(
        kernel(&p),
        vec![Inval::Inode {
            node: real(Base::Memory, "a.md"),
            data: true
        }]
    );
    let p = plan(&Dir::Memory, OsStr::new("b.md"), libc::IN_DELETE, &|_| {
        false
    });
    assert!(has(
        &p,
        &Inval::Entry {
            parent: Node::MemoryDir,
            name: "b.md".into()
        }
    ));
}

#[test]
fn events_parse_and_a_torn_buffer_is_cut() {
    let mut b = Vec::new();
    for (wd, mask, name) in [(1i32, 2u32, &b"ab"[..]), (3, 4, b"")] {
        let len = if name.is_empty() { 0 } else { 16 };
        b.extend_from_slice(&wd.to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(len as u32).to_ne_bytes());
        let mut n = name.to_vec();
        n.resize(len, 0);
        b.extend_from_slice(&n);
    }
    let ev = parse_events(&b);
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[0].name, "ab");
    assert_eq!((ev[1].wd, ev[1].mask), (3, 4));
    assert_eq!(parse_events(&b[..20]).len(), 0);
}

/// A root with one session `s` (transcript, state, a tier with an archive), a memory file
/// and a memory sub-directory.
fn small_root() -> (tempfile::TempDir, RootPaths) {
    let d = tempfile::tempdir().expect("tempdir");
    let paths = RootPaths::from_root(d.path());
    for p in [
        paths.transcripts.clone(),
        paths.memory.join("sub"),
        paths.archive_root("s").join("tier1"),
    ] {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    for (p, text) in [
        (paths.transcript_path("s"), ""),
        (paths.state_path("s"), "{}"),
        (paths.archive_root("s").join("tier1/b1_m0001-m0002.md"), "x"),
        (paths.memory.join("a.md"), "a"),
        (paths.memory.join("sub/b.md"), "b"),
    ] {
        std::fs::write(p, text).expect("write");
    }
    (d, paths)
}

#[test]
fn coverage_follows_the_watches() {
    let (_d, paths) = small_root();
    let w = Watcher::new(&paths).expect("inotify");
    let state = real(Base::Archives, "s/state.json");
    let archive = real(Base::Archives, "s/tier1/b1_m0001-m0002.md");
    for (n, dir) in [
        (Node::Root, true),
        (Node::Sessions, true),
        (Node::MemoryDir, true),
        (real(Base::Memory, "a.md"), false),
        (real(Base::Transcripts, "s.jsonl"), false),
    ] {
        assert!(w.covers(&n, dir), "{n:?} is covered from the start");
    }
    for (n, dir) in [
        (real(Base::Memory, "sub"), true),
        (real(Base::Memory, "sub/b.md"), false),
        (Node::Session("s".into()), true),
        (state.clone(), false),
        (archive.clone(), false),
    ] {
        assert!(!w.covers(&n, dir), "{n:?} is not covered");
    }
    w.watch_session("s");
    for (n, dir) in [
        (Node::Session("s".into()), true),
        (Node::RawDir("s".into()), true),
        (state.clone(), false),
        (real(Base::Archives, "s/tier1"), true),
        (archive.clone(), false),
    ] {
        assert!(
            w.covers(&n, dir),
            "{n:?} is covered once the session is watched"
        );
    }
    for (n, dir) in [
        // Computed files of a watched session: every input is watched.
        (
            Node::Computed("s".into(), crate::fs::ComputedKind::VIEW),
            false,
        ),
        (Node::Raw("s".into(), "m0001".into(), "m0002".into()), false),
        (Node::MemoryIndex, false),
    ] {
        assert!(w.covers(&n, dir), "{n:?} is covered");
    }
    for (n, dir) in [
        (
            Node::Computed("other".into(), crate::fs::ComputedKind::VIEW),
            false,
        ),
        (
            Node::Raw("other".into(), "m0001".into(), "m0002".into()),
            false,
        ),
        // It reads every session: covered only once all are watched.
        (Node::RootAudit, false),
        (Node::Session("other".into()), true),
        (real(Base::Memory, "sub/b.md"), false),
        // A directory where a file is expected: its listing is not watched.
        (state.clone(), true),
        (real(Base::Archives, "s/tier1/b1_m0001-m0002.md"), true),
    ] {
        assert!(!w.covers(&n, dir), "{n:?} is not covered");
    }
    w.watch_all(&["s".to_string(), "other".to_string()]);
    assert!(
        w.covers(&Node::RootAudit, false),
        "all sessions are watched"
    );
    assert!(w.covers(
        &Node::Computed("other".into(), crate::fs::ComputedKind::AUDIT),
        false
    ));
    assert!(
        w.watched("new"),
        "a session that appears later is watched too"
    );
    w.state.lock().degraded = true;
    assert!(
        !w.covers(&Node::Sessions, true)
            && !w.covers(&state, false)
            && !w.covers(&Node::RootAudit, false),
        "after a failed watch nothing is covered"
    );
}

#[test]
fn a_directory_that_appears_is_watched_then_read() {
    let (_d, paths) = small_root();
    let w = Watcher::new(&paths).expect("inotify");
    w.watch_session("s");
    // Filled before anyone watched it.
    let tier = paths.archive_root("s").join("tier2");
    std::fs::create_dir(&tier).expect("mkdir");
    std::fs::write(tier.join("b2_m0001-m0004.md"), "y").expect("write");
    let mut out = Vec::new();
    w.add_new(Dir::Tier("s".into(), "tier2".into()), &mut out);
    assert!(out.contains(&Inval::Entry {
        parent: real(Base::Archives, "s/tier2"),
        name: "b2_m0001-m0004.md".into()
    }));
    assert!(w.covers(&real(Base::Archives, "s/tier2/b2_m0001-m0004.md"), false));
    assert!(w.covers(&real(Base::Archives, "s/tier2"), true));
    // A whole session directory: its subagents/ is found and watched too.
    let sub = paths.subagents_dir("s");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::write(sub.join("agent-a.jsonl"), "").expect("write");
    let mut out = Vec::new();
    w.add_new(Dir::SessionTranscripts("s".into()), &mut out);
    assert!(out.contains(&Inval::Entry {
        parent: Node::Session("s".into()),
        name: "subagents".into()
    }));
    assert!(w.covers(&real(Base::Transcripts, "s/subagents/agent-a.jsonl"), false));
    assert!(w.covers(&real(Base::Transcripts, "s/subagents"), true));
}

#[test]
fn after_lost_events_nothing_is_covered() {
    let (_d, paths) = small_root();
    let w = Watcher::new(&paths).expect("inotify");
    w.watch_session("s");
    let state = real(Base::Archives, "s/state.json");
    assert!(w.covers(&state, false) && w.covers(&Node::Sessions, true));
    let mut told = 0;
    let overflow = Event {
        wd: -1,
        mask: libc::IN_Q_OVERFLOW,
        name: OsString::new(),
    };
    w.process(&[overflow], &mut |_| {}, &mut || told += 1);
    assert_eq!(told, 1, "the caller is told");
    assert!(!w.covers(&state, false) && !w.covers(&Node::Sessions, true));
}

#[test]
fn events_of_a_watched_directory_itself() {
    let p = event(&Dir::Memory, "", libc::IN_ATTRIB);
    assert_eq!(
        kernel(&p),
        vec![Inval::Inode {
            node: Node::MemoryDir,
            data: false
        }]
    );
    let p = plan(
        &Dir::Tier("s".into(), "tier1".into()),
        OsStr::new(""),
        libc::IN_ATTRIB,
        &|_| true,
    );
    assert_eq!(
        kernel(&p),
        vec![Inval::Inode {
            node: real(Base::Archives, "s/tier1"),
            data: false
        }]
    );
}

#[test]
fn the_watcher_reports_a_real_change() {
    let d = tempfile::tempdir().expect("tempdir");
    let paths = RootPaths::from_root(d.path());
    for p in [&paths.transcripts, &paths.memory, &paths.archives] {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    let w = std::sync::Arc::new(Watcher::new(&paths).expect("inotify"));
    assert_eq!(w.watches(), 3);
    let (tx, rx) = std::sync::mpsc::channel();
    let w2 = w.clone();
    let t = std::thread::spawn(move || {
        w2.run(
            &mut |i| {
                let _ = tx.send(i.clone());
            },
            &mut || {},
        )
    });
    std::fs::write(paths.memory.join("x.md"), "hi").expect("write");
    let want = Inval::Entry {
        parent: Node::MemoryDir,
        name: "x.md".into(),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut found = false;
    while std::time::Instant::now() < deadline {
        if let Ok(i) = rx.recv_timeout(std::time::Duration::from_millis(100)) {
            if i == want {
                found = true;
                break;
            }
        }
    }
    w.stop();
    t.join().expect("join");
    assert!(found, "the watcher reported the new memory file");
}

/// Invalidations from a watcher running on its own thread, received until `done` holds of
/// the watcher and what came so far, or five seconds pass; whether it came to hold.
fn wait_for(
    w: &Watcher,
    rx: &std::sync::mpsc::Receiver<Inval>,
    got: &mut Vec<Inval>,
    done: impl Fn(&Watcher, &[Inval]) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if let Ok(i) = rx.recv_timeout(std::time::Duration::from_millis(50)) {
            got.push(i);
        }
        if done(w, got) {
            return true;
        }
    }
    false
}

/// A root where the runtime never compressed has no `noa/` (nor, often, `memory/`): what
/// the mount serves is still covered, its parent watched for them, and once they appear they
/// are watched and what is in them reported; gone again, they are awaited again.
#[test]
fn missing_backing_directories_are_awaited_then_watched() {
    let d = tempfile::tempdir().expect("tempdir");
    let paths = RootPaths::from_root(d.path());
    std::fs::create_dir_all(&paths.transcripts).expect("mkdir");
    std::fs::write(paths.transcript_path("s"), "").expect("write");
    let w = std::sync::Arc::new(Watcher::new(&paths).expect("inotify"));
    w.watch_session("s");
    let view = Node::Computed("s".into(), crate::fs::ComputedKind::VIEW);
    let state = real(Base::Archives, "s/state.json");
    for (n, dir) in [
        (Node::Sessions, true),
        (Node::Session("s".into()), true),
        (view.clone(), false),
        (Node::MemoryDir, true),
        (Node::MemoryIndex, false),
    ] {
        assert!(w.covers(&n, dir), "{n:?} is covered while noa/ is awaited");
    }
    assert!(!w.covers(&state, false), "no archive root is watched yet");
    let (tx, rx) = std::sync::mpsc::channel();
    let w2 = w.clone();
    let lost = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lost2 = lost.clone();
    let t = std::thread::spawn(move || {
        w2.run(
            &mut |i| {
                let _ = tx.send(i.clone());
            },
            &mut || {
                lost2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            },
        )
    });
    // The runtime's first compression: noa/s/ with a tier and a state, made at once.
    std::fs::create_dir_all(paths.archive_root("s").join("tier1")).expect("mkdir");
    std::fs::write(paths.state_path("s"), "{}").expect("write");
    std::fs::create_dir_all(&paths.memory).expect("mkdir");
    std::fs::write(paths.memory.join("a.md"), "a").expect("write");
    let mut got = Vec::new();
    let appeared = wait_for(&w, &rx, &mut got, |w, got| {
        w.covers(&state, false)
            && w.covers(&real(Base::Memory, "a.md"), false)
            && got.contains(&Inval::Computed(Affected::Session("s".into())))
            && got.contains(&Inval::Entry {
                parent: Node::MemoryDir,
                name: "a.md".into(),
            })
    });
    assert!(appeared, "noa/ and memory/ were watched and read: {got:?}");
    assert!(w.covers(&view, false) && w.covers(&Node::MemoryIndex, false));
    // Removed: awaited again, so still covered.
    std::fs::remove_dir_all(&paths.archives).expect("rm -r noa");
    let mut got = Vec::new();
    let awaited = wait_for(&w, &rx, &mut got, |w, got| {
        !w.state.lock().dirs.contains_key(&Dir::Archives)
            && w.state.lock().awaited.contains(&Dir::Archives)
            && got.contains(&Inval::Computed(Affected::Session("s".into())))
    });
    assert!(awaited, "noa/ is awaited again once removed: {got:?}");
    assert!(w.covers(&view, false) && !w.covers(&state, false));
    // Made again: watched again.
    std::fs::create_dir_all(paths.archive_root("s")).expect("mkdir");
    std::fs::write(paths.state_path("s"), "{}").expect("write");
    let mut got = Vec::new();
    let again = wait_for(&w, &rx, &mut got, |w, _| w.covers(&state, false));
    assert!(again, "noa/ made again is watched again: {got:?}");
    // Moved away, its watch would report from elsewhere: as if events were lost.
    let away = d.path().join("noa.old");
    std::fs::rename(&paths.archives, &away).expect("mv noa noa.old");
    let mut got = Vec::new();
    let gave_up = wait_for(&w, &rx, &mut got, |w, _| {
        lost.load(std::sync::atomic::Ordering::SeqCst) == 1 && !w.covers(&view, false)
    });
    w.stop();
    t.join().expect("join");
    assert!(
        gave_up,
        "a backing directory moved away covers nothing: {got:?}"
    );
}

/// An archive base inside the transcripts directory, not there: its parent is the
/// transcripts directory, watched as itself, so the archive base is not awaited (nothing is
/// covered that needs it) and the transcripts directory keeps its watch.
#[test]
fn an_awaited_directory_s_parent_watched_as_itself_stays_itself() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut paths = RootPaths::from_root(d.path());
    paths.archives = paths.transcripts.join("noa");
    std::fs::create_dir_all(&paths.transcripts).expect("mkdir");
    std::fs::create_dir_all(&paths.memory).expect("mkdir");
    std::fs::write(paths.transcript_path("s"), "").expect("write");
    let w = Watcher::new(&paths).expect("inotify");
    assert!(
        !w.covers(&Node::Sessions, true),
        "the archive base is not awaited"
    );
    assert!(w.covers(&real(Base::Transcripts, "s.jsonl"), false));
    assert!(w.covers(&Node::MemoryDir, true));
    assert_eq!(
        w.state
            .lock()
            .by_wd
            .values()
            .filter(|d| **d == Dir::Transcripts)
            .count(),
        1
    );
}

/// `noa` a link to a directory not there: its target appearing would be reported by no
/// watch, so it is not awaited, and nothing that needs it is covered.
#[test]
fn a_dangling_link_is_not_awaited() {
    let d = tempfile::tempdir().expect("tempdir");
    let paths = RootPaths::from_root(d.path());
    std::fs::create_dir_all(&paths.transcripts).expect("mkdir");
    std::fs::create_dir_all(&paths.memory).expect("mkdir");
    std::os::unix::fs::symlink(d.path().join("elsewhere/noa"), &paths.archives).expect("ln -s");
    let w = Watcher::new(&paths).expect("inotify");
    assert!(!w.covers(&Node::Sessions, true));
    assert!(w.covers(&Node::MemoryDir, true));
}
