//! The mount where the kernel opens files itself (`--no-open`, issue 40): no OPEN, FLUSH or
//! RELEASE reaches the mount, so `ctl` is per write with results naming the writer's pid,
//! and a computed file's inode keeps the version the kernel read until the kernel forgets
//! it, whatever pages it drops.

mod common;

use std::io::Read;

use common::{mount, sh, text_of, write_session, Mounted, Session};
use normafs::config::Config;
use normafs::fuse::MountOptions;

/// A root with session `s1` of `pairs` questions and answers of `chars` characters each,
/// compressible at once, and its settings; with `memory/` and `noa/` when `dirs`.
fn root_of(
    pairs: usize,
    chars: usize,
    dirs: bool,
    cfg: Option<Config>,
) -> (tempfile::TempDir, Config) {
    let root = tempfile::tempdir().expect("tempdir");
    let mut s = Session::new("s1");
    for i in 0..pairs {
        s.user(&format!("question {i}: {}", text_of(chars, 'q')));
        s.assistant(&format!("answer {i}: {}", text_of(chars, 'a')));
    }
    write_session(root.path(), &s);
    if dirs {
        std::fs::create_dir_all(root.path().join("memory")).expect("mkdir");
        std::fs::create_dir_all(root.path().join("noa")).expect("mkdir");
    }
    let mut cfg = cfg.unwrap_or_default();
    cfg.noa.protect_recent_messages = 2;
    cfg.noa.protect_recent_tokens = 0;
    cfg.noa.min_range_chars = 0;
    cfg.noa.live_seconds = 0;
    (root, cfg)
}

/// `root` mounted without opens.
fn mount_no_open(root: tempfile::TempDir, cfg: Config) -> Option<Mounted> {
    let opts = MountOptions {
        no_open: true,
        ..MountOptions::default()
    };
    mount(root, cfg, opts)
}

/// A session of `pairs` questions and answers, compressible at once, mounted without opens.
fn mounted(pairs: usize, cfg: Option<Config>) -> Option<Mounted> {
    let (root, cfg) = root_of(pairs, 200, true, cfg);
    mount_no_open(root, cfg)
}

/// `echo cmd > ctl; tail -n 1 ctl`, a thousand times in one shell: every time the last line
/// is this write's result, naming the shell's pid, never an older result or the command text
/// the kernel held from the write.
#[test]
fn a_thousand_writes_each_read_their_own_result() {
    let Some(m) = mounted(4, None) else {
        return;
    };
    let ctl = common::quoted(&m.at("sessions/s1/ctl"));
    let script = format!(
        "bad=0; for i in $(seq 1 1000); do \
           echo \"help\" > {ctl} || bad=$((bad+1)); \
           last=$(tail -n 1 {ctl}); \
           case \"$last\" in \
             *'\"seq\":'$i','*'\"pid\":'$$','*'\"command\":\"help\",\"ok\":true'*) ;; \
             *) bad=$((bad+1)); echo \"round $i: $last\" | cut -c1-200 >&2 ;; \
           esac; \
         done; echo $bad"
    );
    let o = sh(&script);
    assert_eq!(
        common::ok(&o).trim(),
        "0",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two shells writing at once: each finds each of its results by its pid, in order, and no
/// result is lost.
#[test]
fn two_writers_pick_their_own_results_by_pid() {
    let Some(m) = mounted(4, None) else {
        return;
    };
    let ctl = common::quoted(&m.at("sessions/s1/ctl"));
    let writer = |word: &str| {
        format!(
            "for i in $(seq 1 300); do echo 'help' > {ctl}; \
             r=$(grep -F '\"pid\":'$$',' {ctl} | tail -n 1); \
             case \"$r\" in *'\"command\":\"help\",\"ok\":true'*) ;; *) echo \"{word} $i: $r\" >&2; exit 1;; esac; \
             done; echo $$"
        )
    };
    let (a, b) = (writer("a"), writer("b"));
    let ta = std::thread::spawn(move || sh(&a));
    let tb = std::thread::spawn(move || sh(&b));
    let (oa, ob) = (ta.join().expect("a"), tb.join().expect("b"));
    let pa: u32 = common::ok(&oa).trim().parse().expect("pid a");
    let pb: u32 = common::ok(&ob).trim().parse().expect("pid b");
    // The last 32 results are the two writers' last ones, each naming its own.
    let results = common::lines(&common::cat(&m.at("sessions/s1/ctl")));
    assert_eq!(results.len(), 32);
    let seqs: Vec<u64> = results
        .iter()
        .map(|r| r["seq"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(seqs.last(), Some(&600), "every write ran once: {seqs:?}");
    assert!(results.iter().all(|r| r["pid"] == pa || r["pid"] == pb));
}

/// A reader holding `view.jsonl` open across a Compress and a drop of every cached page reads
/// to its end the version it opened: whole, never a mix, never EIO; the name shows the new
/// version. With a cache budget of 1 MiB the version is kept on disk, not in memory.
#[test]
fn a_reader_keeps_the_version_it_opened_across_a_compress_and_a_cache_drop() {
    // SAFETY: geteuid has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    if !root_user {
        assert!(!common::mount_required(), "this test runs as root under CI");
        eprintln!("notice: not root: the kernel's caches cannot be dropped; test skipped");
        return;
    }
    for cache_mb in [None, Some(1)] {
        let cfg = Config {
            cache_mb,
            ..Config::default()
        };
        let Some(m) = mounted(150, Some(cfg)) else {
            return;
        };
        let view = m.at("sessions/s1/view.jsonl");
        let old = std::fs::read(&view).expect("view");
        assert!(old.len() > 256 << 10, "a view of many pages: {}", old.len());
        let mut f = std::fs::File::open(&view).expect("open");
        let mut got = vec![0u8; 8192];
        f.read_exact(&mut got).expect("first read");
        // With a budget of 1 MiB, the version read is on disk once the cache lets go of its
        // bytes (they are in memory once, the cache's, until then): a quarter of the budget
        // at most stays pinned in memory.
        let pinned_in_budget = || {
            let (_, in_memory) = m.handle().fs().held_versions();
            assert!(in_memory <= 256 << 10, "{in_memory} bytes pinned in memory");
        };
        if cache_mb.is_some() {
            pinned_in_budget();
        }
        let o = sh(&format!(
            "echo 'compress m00003 m00200 The user asked a hundred questions about q and got answers.' > {} && tail -n 1 {}",
            common::quoted(&m.at("sessions/s1/ctl")),
            common::quoted(&m.at("sessions/s1/ctl"))
        ));
        let result = &common::lines(common::ok(&o).as_bytes())[0];
        assert_eq!(result["ok"], true, "{result}");
        let new = std::fs::read(&view).expect("the new view");
        assert_ne!(new, old, "the name shows the compressed view");
        assert!(String::from_utf8_lossy(&new).contains("\"block\":\"b1\""));
        if cache_mb.is_some() {
            // The mount passes over its pinned versions every half second.
            std::thread::sleep(std::time::Duration::from_millis(1200));
            pinned_in_budget();
        }
        std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
        f.read_to_end(&mut got).expect("the rest: never EIO");
        assert_eq!(got.len(), old.len(), "cache_mb {cache_mb:?}");
        assert!(
            got == old,
            "cache_mb {cache_mb:?}: the version opened, whole"
        );
        assert_eq!(f.metadata().expect("fstat").len(), old.len() as u64);
    }
}

/// A session's `timeline.jsonl` is kept by the kernel while the session is unchanged (a warm
/// `rg` stats it through its link on every pass) and follows the session when it grows: the
/// watcher tells the kernel to drop it.
#[test]
fn timeline_jsonl_follows_a_session_that_grows() {
    let Some(m) = mounted(4, None) else {
        return;
    };
    let t = m.at("sessions/s1/timeline.jsonl");
    let count = || common::lines(&std::fs::read(&t).expect("timeline.jsonl")).len();
    let before = count();
    assert!(before > 0, "a request at least");
    assert_eq!(count(), before, "unchanged");
    let mut s = Session::new("s1");
    for i in 0..6 {
        s.user(&format!("question {i}: {}", text_of(200, 'q')));
        s.assistant(&format!("answer {i}: {}", text_of(200, 'a')));
    }
    write_session(m.root(), &s);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut now = count();
    while now == before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        now = count();
    }
    assert!(
        now > before,
        "timeline.jsonl still has {now} lines after the session grew"
    );
    let svg = std::fs::read_to_string(m.at("sessions/s1/timeline.svg")).expect("svg");
    assert!(svg.contains("<svg"), "{svg}");
}

/// A root where the runtime never compressed has no `noa/` and no `memory/`. The kernel
/// still keeps a session's view between changes (a warm `cat` asks the mount nothing, where
/// it once asked for the attributes before each read), and the first compression, the
/// runtime's, written behind the mount, shows at once, as does the first memory.
#[test]
fn a_root_without_noa_is_kept_and_follows_its_first_compression() {
    let (root, cfg) = root_of(1500, 300, false, None);
    let noa = cfg.for_session("s1");
    let Some(m) = mount_no_open(root, cfg) else {
        return;
    };
    assert!(!m.root().join("noa").exists() && !m.root().join("memory").exists());
    let view = m.at("sessions/s1/view.jsonl");
    let cat = format!("cat {} > /dev/null", common::quoted(&view));
    common::ok(&sh(&cat));
    let count = |op: &str| m.requests_of(op);
    let (getattrs, reads) = (count("getattr"), count("read"));
    let old = std::fs::read(&view).expect("view");
    assert!(old.len() > 1 << 20, "a view of many reads: {}", old.len());
    common::ok(&sh(&cat));
    assert!(
        count("getattr") - getattrs <= 1 && count("read") == reads,
        "warm reads of an unchanged view: {} attribute requests, {} reads",
        count("getattr") - getattrs,
        count("read") - reads
    );
    // The runtime's first compression, behind the mount.
    let runner = normafs::store::ctl::Runner {
        paths: &normafs::store::root::RootPaths::from_root(m.root()),
        cfg: &noa,
        read_only: false,
    };
    let scope = normafs::store::ctl::Scope::Session("s1".into());
    let line = "compress m00003 m00200 The user asked many questions about q and got answers.";
    let rec = runner.run(&scope, line, 1, chrono::Utc::now());
    assert!(rec.ok, "{}", rec.message);
    assert!(m.root().join("noa/s1/state.json").exists());
    std::fs::create_dir(m.root().join("memory")).expect("mkdir memory");
    std::fs::write(
        m.root().join("memory/first.md"),
        "---\nname: first\ndescription: the first memory\ntype: user\n---\nA fact.\n",
    )
    .expect("write memory");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (mut compressed, mut listed) = (false, false);
    while !(compressed && listed) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let now = std::fs::read(&view).expect("view");
        compressed = String::from_utf8_lossy(&now).contains("\"block\":\"b1\"");
        let ls = sh(&format!("ls {}", common::quoted(&m.at("memory"))));
        listed = String::from_utf8_lossy(&ls.stdout)
            .lines()
            .any(|l| l == "first.md");
    }
    assert!(
        compressed,
        "the view shows the compression made behind the mount"
    );
    assert!(listed, "memory/ lists the first memory");
}

/// `ls -l` of a large session (its files are made one computation each, to learn their
/// sizes, and spooled) and then a read of each of its files, as a person looking around does:
/// the reads find the files made, none is made again (each was made again with its
/// computation's memory before: the listing's files stayed at hand a second, 16 MiB at most).
#[test]
fn a_large_session_s_listed_files_are_read_without_being_made_again() {
    // Some 5 MiB of transcript: past the size whose files are made one at a time.
    let (root, cfg) = root_of(2_500, 1_000, true, None);
    let len = std::fs::metadata(root.path().join("transcripts/s1.jsonl"))
        .expect("transcript")
        .len();
    assert!(len > 4 << 20, "a transcript of {len} bytes");
    let Some(m) = mount_no_open(root, cfg) else {
        return;
    };
    let dir = m.at("sessions/s1");
    let mut files = Vec::new();
    for e in std::fs::read_dir(&dir).expect("ls") {
        let p = e.expect("entry").path();
        let meta = std::fs::symlink_metadata(&p).expect("ls -l");
        if meta.is_file() && p.file_name().is_some_and(|n| n != "ctl") {
            files.push((p, meta.len()));
        }
    }
    let listed = m.handle().fs().computed_counts().computations;
    assert!(listed >= 4, "ls -l made {listed} computations");
    for (p, len) in &files {
        let got = std::fs::read(p).expect("read");
        assert_eq!(got.len() as u64, *len, "{} as listed", p.display());
    }
    let read = m.handle().fs().computed_counts().computations;
    assert_eq!(
        read - listed,
        0,
        "reading the {} files listed made computations again",
        files.len()
    );
}
