//! The filesystem layer without a mount: every operation the kernel would send.

mod common;

use std::ffi::OsStr;
use std::time::Duration;

use common::{example_root, lookup_path, snapshot};
use normafs::config::Config;
use normafs::fs::{FileKind, FsOptions, Node, NormaFs, PlusEntry, SetAttr, ROOT_INO};
use normafs::store::root::RootPaths;

/// The corpus session with 15 tier-1 blocks.
const SID: &str = "s2-tier1";

/// The corpus's settings, a small protected tail and no batch minimum.
fn fs_for(root: &std::path::Path, read_only: bool) -> NormaFs {
    let mut cfg: Config = common::corpus_config();
    cfg.noa.protect_recent_messages = 0;
    cfg.noa.protect_recent_tokens = 0;
    cfg.noa.min_range_chars = 0;
    let opts = FsOptions::new(&cfg, read_only);
    NormaFs::new(RootPaths::from_root(root), cfg, opts)
}

fn read_all(fs: &NormaFs, ino: u64) -> Vec<u8> {
    let o = fs.open(ino, libc::O_RDONLY).expect("open");
    let out = read_handle(fs, o.fh, 7);
    fs.release(o.fh);
    out
}

/// Everything handle `fh` reads from its start, `step` bytes at a time.
fn read_handle(fs: &NormaFs, fh: u64, step: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let chunk = fs.read(fh, out.len() as u64, step).expect("read");
        if chunk.is_empty() {
            break;
        }
        out.extend(chunk);
    }
    out
}

fn names(fs: &NormaFs, ino: u64) -> Vec<String> {
    let (fh, _) = fs.opendir(ino).expect("opendir");
    let e = fs.readdir(ino, fh, 0).expect("readdir");
    fs.releasedir(fh);
    e.into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn namespace_matches_the_spec_layout() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    assert_eq!(
        names(&fs, ROOT_INO),
        [
            ".",
            "..",
            "sessions",
            "memory",
            "audit.txt",
            "ctl",
            "timeline.svg",
            "index.html"
        ]
    );
    let sessions = lookup_path(&fs, "sessions").expect("sessions");
    assert_eq!(
        names(&fs, sessions)[2..].to_vec(),
        common::CORPUS_SESSIONS.map(String::from).to_vec()
    );
    let s = lookup_path(&fs, "sessions/s2-tier1").expect("session");
    assert_eq!(
        names(&fs, s),
        [
            ".",
            "..",
            "transcript.jsonl",
            "state.json",
            "tier1",
            "view.jsonl",
            "view.md",
            "materialized.jsonl",
            "audit.txt",
            "status.json",
            "raw",
            "memory",
            "ctl",
            "timeline.jsonl",
            "timeline.svg",
            "at",
            "view.html"
        ]
    );
    // A session that never compressed has no state.json and no tier directory; a session
    // with a subagent has its sidechains.
    let s4 = lookup_path(&fs, "sessions/s4-subagent").expect("session");
    let n4 = names(&fs, s4);
    assert!(n4.contains(&"subagents".to_string()), "{n4:?}");
    assert!(
        !n4.iter()
            .any(|n| n == "state.json" || n.starts_with("tier")),
        "{n4:?}"
    );
    let sub = lookup_path(&fs, "sessions/s4-subagent/subagents").expect("subagents");
    assert_eq!(names(&fs, sub), [".", "..", "agent-a7f3c2.jsonl"]);
    // raw/ lists one file per block range.
    let raw = lookup_path(&fs, "sessions/s2-tier1/raw").expect("raw");
    let mut want: Vec<String> =
        normafs::format::state::load_state(&d.path().join("noa/s2-tier1/state.json"), SID)
            .state
            .blocks()
            .iter()
            .map(|b| format!("{}-{}.md", b.start_ref, b.end_ref))
            .collect();
    want.sort();
    assert_eq!(want.len(), 15);
    assert_eq!(names(&fs, raw)[2..].to_vec(), want);
    let mem = lookup_path(&fs, "memory").expect("memory");
    assert_eq!(
        names(&fs, mem),
        [
            ".",
            "..",
            "MEMORY.md",
            ".md",
            "build-system.md",
            "ci-dashboard.md",
            "prefers-small-prs.md",
            "scratch-note-jwt-leeway.md",
            "user-role.md"
        ]
    );
    let link = lookup_path(&fs, "sessions/s2-tier1/memory").expect("link");
    assert_eq!(fs.getattr(link).expect("attr").attr.kind, FileKind::Symlink);
    assert_eq!(fs.readlink(link).expect("readlink"), b"../../memory");
}

#[test]
fn errors_are_errno_values() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let s = lookup_path(&fs, "sessions/s2-tier1").expect("session");
    assert_eq!(
        fs.lookup(s, OsStr::new("nope"))
            .expect_err("enoent")
            .errno(),
        libc::ENOENT
    );
    assert_eq!(
        lookup_path(&fs, "sessions/nosuch")
            .expect_err("enoent")
            .errno(),
        libc::ENOENT
    );
    assert_eq!(
        lookup_path(&fs, "sessions/s2-tier1/raw/m00001-m99999.md")
            .expect_err("enoent")
            .errno(),
        libc::ENOENT
    );
    assert_eq!(
        lookup_path(&fs, "sessions/s2-tier1/raw/garbage")
            .expect_err("enoent")
            .errno(),
        libc::ENOENT
    );
    assert_eq!(
        fs.lookup(s, OsStr::new("..")).expect_err("dotdot").errno(),
        libc::ENOENT
    );
    assert_eq!(
        fs.getattr(999_999).expect_err("stale").errno(),
        libc::ENOENT
    );
    let view = lookup_path(&fs, "sessions/s2-tier1/view.jsonl").expect("view");
    assert_eq!(
        fs.open(view, libc::O_WRONLY)
            .expect_err("synthetic write")
            .errno(),
        libc::EACCES
    );
    assert_eq!(
        fs.setattr(
            view,
            None,
            &SetAttr {
                size: Some(0),
                ..SetAttr::default()
            }
        )
        .expect_err("truncate")
        .errno(),
        // As a write: `> view.jsonl` of a kernel that opens files itself truncates first.
        libc::EACCES
    );
    assert_eq!(
        fs.read(424_242, 0, 10).expect_err("bad fh").errno(),
        libc::EBADF
    );
    // Creating outside memory/ is refused.
    assert_eq!(
        fs.create(s, OsStr::new("x.md"), 0o644, 0, libc::O_WRONLY)
            .expect_err("create")
            .errno(),
        libc::EACCES
    );
    assert_eq!(
        fs.unlink(s, OsStr::new("state.json"))
            .expect_err("unlink")
            .errno(),
        libc::EACCES
    );
}

#[test]
fn synthetic_sizes_are_exact_and_snapshots_consistent() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    for p in [
        "sessions/s2-tier1/view.jsonl",
        "sessions/s2-tier1/view.md",
        "sessions/s2-tier1/audit.txt",
        "sessions/s2-tier1/status.json",
        "sessions/s2-tier1/materialized.jsonl",
        "sessions/s2-tier1/raw/m00004-m00009.md",
        "sessions/s2-tier1/raw/m00001.md",
        "sessions/s4-subagent/status.json",
        "memory/MEMORY.md",
        "audit.txt",
    ] {
        let ino = lookup_path(&fs, p).expect(p);
        let size = fs.getattr(ino).expect("attr").attr.size;
        let bytes = read_all(&fs, ino);
        assert_eq!(size, bytes.len() as u64, "{p}");
        assert!(!bytes.is_empty(), "{p}");
    }
    // While the transcript grows, an open handle's reads and its fstat follow the longer
    // view, which extends what it read (as a file grown by appends does); what it read
    // stays. A view that does not extend it never reaches it (see the test of that below).
    let view = lookup_path(&fs, "sessions/s2-tier1/view.jsonl").expect("view");
    let o = fs.open(view, libc::O_RDONLY).expect("open");
    let size = fs.getattr(view).expect("attr").attr.size;
    let head = fs.read(o.fh, 0, 1000).expect("read");
    let tpath = d.path().join("transcripts/s2-tier1.jsonl");
    common::append_user_message(&tpath, SID, "one more");
    assert_eq!(
        fs.read(o.fh, 0, 1000).expect("read"),
        head,
        "what was read stays"
    );
    let grown = fs.getattr(view).expect("attr").attr.size;
    assert!(grown > size, "{grown} > {size}");
    let all = fs.read(o.fh, 0, 1 << 20).expect("read");
    assert_eq!(
        all.len() as u64,
        grown,
        "all of the version, as its size says"
    );
    fs.release(o.fh);
    let after = read_all(&fs, view);
    assert_eq!(after, all);
    // The new message gets the next ref after the 182 the view already hands out.
    assert!(String::from_utf8_lossy(&after)
        .contains("{\"refs\":[\"m00183\"],\"message\":{\"role\":\"user\""));
    assert_eq!(
        fs.getattr(view).expect("attr").attr.size,
        after.len() as u64
    );
}

#[test]
fn readdir_offsets_resume_where_they_stopped() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let s = lookup_path(&fs, "sessions/s2-tier1").expect("session");
    let (fh, _) = fs.opendir(s).expect("opendir");
    let all = fs.readdir(s, fh, 0).expect("all");
    for (i, e) in all.iter().enumerate() {
        let rest = fs.readdir(s, fh, e.offset).expect("rest");
        assert_eq!(rest, all[i + 1..].to_vec());
    }
    // Inodes in the listing are the ones lookup gives.
    for e in &all[2..] {
        assert_eq!(
            fs.lookup(s, &e.name).expect("lookup").attr.ino,
            e.ino,
            "{:?}",
            e.name
        );
    }
    fs.releasedir(fh);
}

#[test]
fn inodes_are_stable_and_lookups_counted() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let a = lookup_path(&fs, "sessions/s2-tier1/transcript.jsonl").expect("a");
    let b = lookup_path(&fs, "sessions/s2-tier1/transcript.jsonl").expect("b");
    assert_eq!(a, b);
    assert_eq!(fs.lookup_count(a), 2);
    fs.forget(a, 2);
    assert_eq!(fs.lookup_count(a), 0);
    assert_eq!(
        lookup_path(&fs, "sessions/s2-tier1/transcript.jsonl").expect("c"),
        a
    );
    assert_eq!(fs.ino_of(&Node::Root), ROOT_INO);
}

#[test]
fn real_files_pass_through_with_real_attributes() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let t = lookup_path(&fs, "sessions/s2-tier1/transcript.jsonl").expect("t");
    let attr = fs.getattr(t).expect("attr").attr;
    let meta = std::fs::metadata(d.path().join("transcripts/s2-tier1.jsonl")).expect("meta");
    assert_eq!(attr.size, meta.len());
    assert_eq!(
        attr.perm as u32,
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777
    );
    assert_eq!(
        read_all(&fs, t),
        std::fs::read(d.path().join("transcripts/s2-tier1.jsonl")).expect("bytes")
    );
    let arch = lookup_path(&fs, "sessions/s2-tier1/tier1/b1_m00004-m00009.md").expect("archive");
    assert_eq!(
        read_all(&fs, arch),
        std::fs::read(d.path().join("noa/s2-tier1/tier1/b1_m00004-m00009.md")).expect("bytes")
    );
}

/// A real file's inode stands for one backing file for its whole life, held open from the
/// kernel's lookup to its forget: `state.json` replaced by rename (as the runtime writes it)
/// is a new inode at the next lookup, and the old inode goes on answering for the old file —
/// its size and its bytes — so no page cache or size of one file ever serves another.
#[test]
fn a_file_replaced_by_rename_is_a_new_inode_and_the_old_one_keeps_its_file() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let path = format!("sessions/{SID}/state.json");
    let held_before = fs.files_held();
    let old = lookup_path(&fs, &path).expect("state.json");
    assert_eq!(
        fs.files_held(),
        held_before + 1,
        "the lookup holds the file"
    );
    let old_bytes = read_all(&fs, old);
    // The runtime's replace: a temporary file renamed over the name.
    let backing = d.path().join(format!("noa/{SID}/state.json"));
    let tmp = d.path().join(format!("noa/{SID}/.state.json.tmp"));
    let new_bytes = b"{\"version\":1,\"sessionId\":\"s2-tier1\"}\n".to_vec();
    std::fs::write(&tmp, &new_bytes).expect("write");
    std::fs::rename(&tmp, &backing).expect("rename");

    // The kernel has not looked the name up again yet: an open of the old inode, with no
    // other handle open, reads the old file; `fstat` (no handle) reports the old size.
    let o = fs.open(old, libc::O_RDONLY).expect("open of the old inode");
    assert_eq!(read_handle(&fs, o.fh, 4096), old_bytes);
    assert_eq!(
        fs.getattr(old).expect("fstat").attr.size,
        old_bytes.len() as u64
    );
    fs.release(o.fh);
    // A write must reach the file the name names: refused on the old inode (the kernel
    // looks the name up again and retries).
    assert_eq!(
        fs.open(old, libc::O_WRONLY).expect_err("write").errno(),
        libc::ESTALE
    );
    let new = lookup_path(&fs, &path).expect("state.json again");
    assert_ne!(new, old, "the replaced file has an inode of its own");
    assert_eq!(read_all(&fs, new), new_bytes);
    assert_eq!(
        fs.getattr(new).expect("attr").attr.size,
        new_bytes.len() as u64
    );
    assert_eq!(
        fs.getattr(old).expect("attr").attr.size,
        old_bytes.len() as u64,
        "the old inode still answers for its own file"
    );
    // Forgotten by the kernel: the old file is let go (its disk space freed), and the
    // inode, its name gone, names nothing (it never answers for another file).
    let held = fs.files_held();
    fs.forget(old, fs.lookup_count(old));
    assert_eq!(fs.files_held(), held - 1);
    assert_eq!(fs.getattr(old).expect_err("gone").errno(), libc::ENOENT);
    assert_eq!(
        fs.open(old, libc::O_RDONLY).expect_err("gone").errno(),
        libc::ENOENT
    );
    // Appends keep the identity: the same inode, its new size.
    let t = lookup_path(&fs, &format!("sessions/{SID}/transcript.jsonl")).expect("t");
    common::append_user_message(
        &d.path().join(format!("transcripts/{SID}.jsonl")),
        SID,
        "more",
    );
    assert_eq!(
        lookup_path(&fs, &format!("sessions/{SID}/transcript.jsonl")).expect("t"),
        t
    );
    assert_eq!(
        fs.getattr(t).expect("attr").attr.size,
        std::fs::metadata(d.path().join(format!("transcripts/{SID}.jsonl")))
            .expect("meta")
            .len()
    );
}

/// A listing made before a name was renamed over links the name to a new inode with the new
/// file's attributes: the kernel applies a `readdirplus` entry's attributes to the inode it
/// names, which must never get another file's size.
#[test]
fn readdirplus_links_a_name_renamed_over_to_a_new_inode() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let dir = lookup_path(&fs, "memory").expect("memory");
    let old = lookup_path(&fs, "memory/build-system.md").expect("memory file");
    let old_size = fs.getattr(old).expect("attr").attr.size;
    let (fh, _) = fs.opendir(dir).expect("opendir");
    let listed = fs.readdir(dir, fh, 0).expect("readdir");
    let e = listed
        .iter()
        .find(|e| e.name == "build-system.md")
        .expect("listed");
    assert_eq!(e.ino, old);
    let tmp = d.path().join("memory/.build-system.md.tmp");
    std::fs::write(
        &tmp,
        "---\nname: b\n---\nnew and longer than before, by far\n".repeat(9),
    )
    .expect("write");
    std::fs::rename(&tmp, d.path().join("memory/build-system.md")).expect("rename");
    let new_size = std::fs::metadata(d.path().join("memory/build-system.md"))
        .expect("meta")
        .len();
    assert_ne!(new_size, old_size);
    let PlusEntry::Linked(en) = fs.entry_plus(e) else {
        panic!("linked");
    };
    assert_ne!(en.attr.ino, old, "a new inode for the new file");
    assert_eq!(en.attr.size, new_size);
    assert_eq!(
        fs.getattr(old).expect("attr").attr.size,
        old_size,
        "the old inode keeps its own file's size"
    );
    fs.releasedir(fh);
}

/// Held files are bounded: past the limit the least recently used idle ones are let go, and
/// an inode let go still opens its file while its name names it (and holds it again).
#[test]
fn held_files_are_bounded_and_an_inode_let_go_still_opens_its_file() {
    let d = example_root();
    let mut cfg: Config = common::corpus_config();
    cfg.noa.protect_recent_messages = 0;
    cfg.noa.protect_recent_tokens = 0;
    cfg.noa.min_range_chars = 0;
    let opts = FsOptions::new(&cfg, false);
    let fs = NormaFs::setup(RootPaths::from_root(d.path()), cfg, opts)
        .files_held_at_most(64)
        .build();
    for i in 0..200 {
        std::fs::write(
            d.path().join(format!("memory/n{i:03}.md")),
            format!("---\nname: n{i}\n---\nnote {i}\n"),
        )
        .expect("write");
    }
    let inos: Vec<u64> = (0..200)
        .map(|i| lookup_path(&fs, &format!("memory/n{i:03}.md")).expect("lookup"))
        .collect();
    assert!(fs.files_held() <= 64, "{} held", fs.files_held());
    for (i, &ino) in inos.iter().enumerate() {
        assert_eq!(
            String::from_utf8(read_all(&fs, ino)).expect("utf-8"),
            format!("---\nname: n{i}\n---\nnote {i}\n")
        );
    }
    assert!(fs.files_held() <= 64, "{} held", fs.files_held());
}

#[test]
fn memory_edits_create_rename_unlink_setattr() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let mem = lookup_path(&fs, "memory").expect("memory");
    let (e, o) = fs
        .create(
            mem,
            OsStr::new("new-note.md"),
            0o644,
            0o022,
            libc::O_WRONLY | libc::O_EXCL,
        )
        .expect("create");
    let body =
        b"---\nname: New note\ndescription: made through the mount\ntype: user\n---\nhello\n";
    assert_eq!(fs.write(o.fh, 0, body).expect("write"), body.len() as u32);
    fs.fsync(o.fh, false).expect("fsync");
    fs.release(o.fh);
    fs.fsyncdir(mem).expect("fsyncdir");
    assert_eq!(
        std::fs::read(d.path().join("memory/new-note.md")).expect("real"),
        body
    );
    let idx = lookup_path(&fs, "memory/MEMORY.md").expect("index");
    assert!(String::from_utf8_lossy(&read_all(&fs, idx))
        .contains("- [New note](new-note.md) — made through the mount\n"));
    // sed -i style: write a temp file, rename it over.
    let (_, o) = fs
        .create(mem, OsStr::new("sedXYZ"), 0o600, 0o022, libc::O_WRONLY)
        .expect("tmp");
    fs.write(
        o.fh,
        0,
        b"---\nname: New note\ndescription: edited\n---\nbye\n",
    )
    .expect("write");
    fs.release(o.fh);
    fs.setattr(
        lookup_path(&fs, "memory/sedXYZ").expect("tmp"),
        None,
        &SetAttr {
            mode: Some(0o644),
            ..SetAttr::default()
        },
    )
    .expect("chmod");
    fs.rename(mem, OsStr::new("sedXYZ"), mem, OsStr::new("new-note.md"), 0)
        .expect("rename");
    // The inode renamed over still answers for its own file (unlinked now) while the kernel
    // holds it, as `fstat` of a descriptor open on it does on a local disk.
    let replaced = fs.getattr(e.attr.ino).expect("the replaced inode's file");
    assert_eq!(
        (replaced.attr.nlink, replaced.attr.size),
        (0, body.len() as u64)
    );
    fs.forget(e.attr.ino, fs.lookup_count(e.attr.ino));
    assert_eq!(
        fs.getattr(e.attr.ino).expect_err("forgotten").errno(),
        libc::ENOENT
    );
    let renamed = lookup_path(&fs, "memory/new-note.md").expect("renamed");
    assert_eq!(fs.getattr(renamed).expect("attr").attr.perm, 0o644);
    // The index changed: another version, under the inode its name has now (the kernel
    // looks it up again when the old one answers ESTALE).
    let idx = lookup_path(&fs, "memory/MEMORY.md").expect("index");
    assert!(String::from_utf8_lossy(&read_all(&fs, idx)).contains("— edited"));
    // truncate and utimes
    let t0 = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    let a = fs
        .setattr(
            renamed,
            None,
            &SetAttr {
                size: Some(3),
                mtime: Some(t0),
                ..SetAttr::default()
            },
        )
        .expect("setattr")
        .attr;
    assert_eq!((a.size, a.mtime), (3, t0));
    fs.unlink(mem, OsStr::new("new-note.md")).expect("unlink");
    assert!(!d.path().join("memory/new-note.md").exists());
    // MEMORY.md is synthetic: cannot be replaced or removed.
    assert_eq!(
        fs.unlink(mem, OsStr::new("MEMORY.md"))
            .expect_err("index")
            .errno(),
        libc::EACCES
    );
}

#[test]
fn read_only_refuses_every_change() {
    let d = example_root();
    let before = snapshot(d.path());
    let fs = fs_for(d.path(), true);
    let mem = lookup_path(&fs, "memory").expect("memory");
    assert_eq!(
        fs.create(mem, OsStr::new("x.md"), 0o644, 0, libc::O_WRONLY)
            .expect_err("create")
            .errno(),
        libc::EROFS
    );
    let f = lookup_path(&fs, "memory/build-system.md").expect("file");
    assert_eq!(
        fs.open(f, libc::O_WRONLY).expect_err("open").errno(),
        libc::EROFS
    );
    assert_eq!(
        fs.unlink(mem, OsStr::new("build-system.md"))
            .expect_err("unlink")
            .errno(),
        libc::EROFS
    );
    assert_eq!(
        fs.setattr(
            f,
            None,
            &SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            }
        )
        .expect_err("chmod")
        .errno(),
        libc::EROFS
    );
    let ctl = lookup_path(&fs, "sessions/s2-tier1/ctl").expect("ctl");
    let o = fs
        .open(ctl, libc::O_WRONLY | libc::O_TRUNC)
        .expect("open ctl");
    assert_eq!(
        fs.write(o.fh, 0, b"rebuild\n")
            .expect_err("rebuild")
            .errno(),
        libc::EROFS
    );
    fs.release(o.fh);
    // `help` still works (on a handle of its own: a failure is its handle's).
    let o = fs.open(ctl, libc::O_WRONLY).expect("open ctl");
    assert!(fs.write(o.fh, 0, b"help\n").is_ok());
    assert_eq!(snapshot(d.path()), before);
}

#[test]
fn ctl_runs_commands_and_reports_results() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let ctl = lookup_path(&fs, "sessions/s2-tier1/ctl").expect("ctl");
    assert_eq!(fs.getattr(ctl).expect("attr").attr.perm, 0o600);
    // `echo … > ctl`: open with O_TRUNC and the size-0 setattr are accepted.
    let o = fs.open(ctl, libc::O_WRONLY | libc::O_TRUNC).expect("open");
    fs.setattr(
        ctl,
        Some(o.fh),
        &SetAttr {
            size: Some(0),
            ..SetAttr::default()
        },
    )
    .expect("truncate ctl");
    let before = snapshot(d.path());
    let e = fs.write(o.fh, 0, b"nonsense\n").expect_err("nonsense");
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(
        snapshot(d.path()),
        before,
        "a failed command changes nothing"
    );
    // Each write stands alone: the next one on the same handle runs.
    assert!(fs.write_as(o.fh, 9, b"help\n", Some(42)).is_ok());
    fs.release(o.fh);
    // Two commands in one write; the second fails: the first stays done.
    let o = fs.open(ctl, libc::O_RDWR).expect("open");
    let cmd = b"compress m00170 m00175 The late part of the session: more files read, nothing decided.\ncompress m00001 m99999 a summary that is long enough to be taken as one\n";
    assert_eq!(
        fs.write_as(o.fh, 0, cmd, Some(7))
            .expect_err("second fails")
            .errno(),
        libc::EINVAL
    );
    fs.release(o.fh);
    // The view shows the block.
    let view = lookup_path(&fs, "sessions/s2-tier1/view.jsonl").expect("view");
    assert!(String::from_utf8_lossy(&read_all(&fs, view)).contains("\"block\":\"b16\""));
    // A read gives the session's latest results, each naming the process that wrote its
    // command, and that is the file's size.
    let o = fs.open(ctl, libc::O_RDONLY).expect("open");
    let text = String::from_utf8(fs.read(o.fh, 0, 1 << 20).expect("read")).expect("utf8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(lines[0]["ok"], false, "{text}");
    assert_eq!(
        lines[0]["pid"],
        serde_json::Value::Null,
        "no process named: {text}"
    );
    assert_eq!(
        (&lines[1]["command"], &lines[1]["ok"]),
        (&"help".into(), &true.into())
    );
    assert_eq!(lines[1]["pid"], 42, "{text}");
    assert_eq!(lines[2]["ok"], true, "{text}");
    assert_eq!(lines[2]["result"]["blocks"][0]["blockId"], "b16");
    assert_eq!(lines[3]["ok"], false);
    assert_eq!((&lines[2]["pid"], &lines[3]["pid"]), (&7.into(), &7.into()));
    assert!(
        lines[3]["message"]
            .as_str()
            .is_some_and(|m| m.contains("m99999 does not exist in this session")),
        "{}",
        lines[3]
    );
    assert_eq!(fs.getattr(ctl).expect("attr").attr.size, text.len() as u64);
    fs.release(o.fh);
    // A write at max_write is refused: it may be a split command.
    let o = fs.open(ctl, libc::O_WRONLY).expect("open");
    let big = vec![b'x'; fs.options().max_write as usize];
    assert_eq!(
        fs.write(o.fh, 0, &big).expect_err("too big").errno(),
        libc::EINVAL
    );
    // Root ctl.
    let rctl = lookup_path(&fs, "ctl").expect("root ctl");
    let o = fs.open(rctl, libc::O_WRONLY).expect("open");
    assert!(fs.write(o.fh, 0, b"reindex-memory").is_ok());
    assert_eq!(
        fs.write(o.fh, 0, b"rebuild").expect_err("not here").errno(),
        libc::EINVAL
    );
}

/// `readdirplus`: a listing hands the kernel what a lookup would, except for a computed file
/// the kernel does not hold, which gets a placeholder kept for no time (the kernel asks again
/// before it uses it); `.` and `..` are never linked; a name gone since the listing is left
/// out.
#[test]
fn listing_attributes_compute_only_files_the_kernel_holds() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let dir = lookup_path(&fs, &format!("sessions/{SID}")).expect("session");
    let (fh, _) = fs.opendir(dir).expect("opendir");
    let entries = fs.readdir(dir, fh, 0).expect("readdir");
    fs.releasedir(fh);
    let entry = |n: &str| {
        entries
            .iter()
            .find(|e| e.name == n)
            .unwrap_or_else(|| panic!("{n} listed"))
            .clone()
    };
    let linked = |e: &normafs::fs::DirEntry| match fs.entry_plus(e) {
        PlusEntry::Linked(a) => a,
        other => panic!("{:?}: {other:?}", e.name),
    };
    for n in [".", ".."] {
        assert!(matches!(fs.entry_plus(&entry(n)), PlusEntry::Unlinked(_)));
    }
    // A real file: its own attributes, as a lookup gives them.
    let t = entry("transcript.jsonl");
    let len = std::fs::metadata(d.path().join(format!("transcripts/{SID}.jsonl")))
        .expect("transcript")
        .len();
    let a = linked(&t);
    assert_eq!((a.attr.ino, a.attr.size), (t.ino, len));
    assert_eq!(a, fs.getattr(t.ino).expect("getattr"));
    // A computed file the kernel does not hold: a placeholder, kept for no time.
    let v = entry("view.jsonl");
    let p = linked(&v);
    assert_eq!(p.attr.kind, FileKind::File);
    assert_eq!((p.ttl, p.entry_ttl), (Duration::ZERO, Duration::ZERO));
    assert_eq!(
        fs.lookup_count(v.ino),
        0,
        "computing nothing counts nothing"
    );
    // Held by the kernel: the attributes last sent, never a placeholder over them, and
    // kept for no time either.
    let told = fs.lookup(dir, OsStr::new("view.jsonl")).expect("view").attr;
    let ino = told.ino;
    let bytes = read_all(&fs, ino);
    assert!(!bytes.is_empty());
    let h = linked(&v);
    assert_eq!((h.attr.size, h.ttl), (bytes.len() as u64, Duration::ZERO));
    assert_eq!(h.attr, told);
    // The session changes: a listing still sends what the kernel was told (it computes
    // nothing). The inode stands for the version it was told of: the next getattr of it
    // answers ESTALE (the kernel looks the name up again), and the lookup gives the new
    // version a new inode, which a listing made then links with what it was told.
    let t_path = d.path().join(format!("transcripts/{SID}.jsonl"));
    common::append_user_message(&t_path, SID, "Appended.");
    assert_eq!(linked(&v).attr, told, "a listing computes nothing");
    std::thread::sleep(normafs::fs::versions::HOLD + Duration::from_millis(50));
    assert_eq!(
        fs.getattr(ino).expect_err("another version").errno(),
        libc::ESTALE
    );
    let now = fs.lookup(dir, OsStr::new("view.jsonl")).expect("view").attr;
    assert!(now.size > told.size, "the new view is longer");
    assert_ne!(now.ino, ino);
    let (fh, _) = fs.opendir(dir).expect("opendir");
    let again = fs.readdir(dir, fh, 0).expect("readdir");
    fs.releasedir(fh);
    let v2 = again
        .iter()
        .find(|e| e.name == "view.jsonl")
        .expect("listed")
        .clone();
    assert_eq!(v2.ino, now.ino);
    assert_eq!(linked(&v2).attr, now);
    fs.forget(ino, 1);
    fs.forget(now.ino, 1);
    assert_eq!(linked(&v2).ttl, Duration::ZERO);
    // Each linked entry the kernel gets is one lookup it forgets later.
    fs.count_lookup(t.ino);
    assert_eq!(fs.lookup_count(t.ino), 1);
    fs.forget(t.ino, 1);
    // Gone since the listing: left out.
    let mem = lookup_path(&fs, "memory").expect("memory");
    let (fh, _) = fs.opendir(mem).expect("opendir");
    let listed = fs.readdir(mem, fh, 0).expect("readdir");
    fs.releasedir(fh);
    let gone = listed
        .iter()
        .find(|e| e.name == "build-system.md")
        .expect("listed");
    std::fs::remove_file(d.path().join("memory/build-system.md")).expect("rm");
    assert!(matches!(fs.entry_plus(gone), PlusEntry::Gone));
}

/// A `readdirplus` answer with room for `room` entries.
struct Answer {
    room: usize,
    got: Vec<(String, u64, Duration)>,
}

impl normafs::fs::PlusReplier for Answer {
    fn add(&mut self, e: &normafs::fs::DirEntry, attr: &normafs::fs::Attr, ttl: Duration) -> bool {
        if self.got.len() == self.room {
            return true;
        }
        self.got
            .push((e.name.to_string_lossy().into_owned(), attr.ino, ttl));
        false
    }
}

#[test]
fn readdirplus_counts_a_lookup_for_each_linked_entry_the_answer_holds() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let dir = lookup_path(&fs, "sessions").expect("sessions");
    let (fh, _) = fs.opendir(dir).expect("opendir");
    let all = fs.readdir(dir, fh, 0).expect("readdir");
    assert!(all.len() > 4, "sessions listed");
    let before: Vec<u64> = all.iter().map(|e| fs.lookup_count(e.ino)).collect();
    let counted = |i: usize| fs.lookup_count(all[i].ino) - before[i];
    // Room for four: `.` and `..` (never linked), then two sessions; the rest does not fit.
    let mut a = Answer {
        room: 4,
        got: Vec::new(),
    };
    fs.readdirplus(dir, fh, 0, &mut a).expect("readdirplus");
    let names: Vec<&str> = a.got.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(
        names,
        [
            ".",
            "..",
            &*all[2].name.to_string_lossy(),
            &*all[3].name.to_string_lossy()
        ]
    );
    for (i, e) in all.iter().enumerate() {
        let want = u64::from((2..4).contains(&i));
        assert_eq!(counted(i), want, "{:?}: linked only once sent", e.name);
    }
    // The next answer goes on after the last entry sent, from the same snapshot.
    let mut b = Answer {
        room: 100,
        got: Vec::new(),
    };
    fs.readdirplus(dir, fh, all[3].offset, &mut b)
        .expect("readdirplus");
    assert_eq!(b.got.len(), all.len() - 4);
    fs.releasedir(fh);
    // Without an open (handle 0): a pass of its own, the same entries.
    let mut c = Answer {
        room: 100,
        got: Vec::new(),
    };
    fs.readdirplus(dir, 0, 0, &mut c)
        .expect("readdirplus unopened");
    let unopened: Vec<&str> = c.got.iter().map(|g| g.0.as_str()).collect();
    let listed: Vec<String> = all
        .iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .collect();
    assert_eq!(unopened, listed);
}

#[test]
fn a_created_file_gets_the_callers_mode_and_umask_not_the_mounts() {
    use std::os::unix::fs::PermissionsExt;
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let mem = lookup_path(&fs, "memory").expect("memory");
    // (mode, the caller's umask, the file's mode): pjdfstest open/02 among them.
    for (i, (mode, umask, want)) in [
        (0o620, 0o000, 0o620),
        (0o666, 0o022, 0o644),
        (0o666, 0o027, 0o640),
        (0o777, 0o000, 0o777),
        (0o640, 0o077, 0o600),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("made-{i}.md");
        let (e, o) = fs
            .create(mem, OsStr::new(&name), mode, umask, libc::O_WRONLY)
            .expect("create");
        fs.release(o.fh);
        let on_disk = std::fs::metadata(d.path().join("memory").join(&name))
            .expect("made")
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(on_disk, want, "{mode:o} under umask {umask:o}");
        assert_eq!(u32::from(e.attr.perm), want, "the reply says so too");
    }
    // A file that is there already keeps its mode (O_CREAT without O_EXCL opens it).
    let existing = d.path().join("memory/build-system.md");
    let before = std::fs::metadata(&existing)
        .expect("there")
        .permissions()
        .mode();
    let (_, o) = fs
        .create(mem, OsStr::new("build-system.md"), 0o600, 0, libc::O_WRONLY)
        .expect("open existing");
    fs.release(o.fh);
    assert_eq!(
        std::fs::metadata(&existing)
            .expect("there")
            .permissions()
            .mode(),
        before
    );
    assert_eq!(
        fs.create(
            mem,
            OsStr::new("build-system.md"),
            0o600,
            0,
            libc::O_WRONLY | libc::O_EXCL
        )
        .expect_err("exclusive")
        .errno(),
        libc::EEXIST
    );
}

/// SPEC 5: a handle that read to its end and reads again gets the newer content when it
/// extends what it read (`tail -f view.jsonl`); else it keeps what it read. (normafs: every
/// handle of the inode reads the extended version, README "Design decisions".)
#[test]
fn a_handle_at_its_end_follows_appends_that_extend_it() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let sid = "s1-small";
    let view = lookup_path(&fs, &format!("sessions/{sid}/view.jsonl")).expect("view");
    let o = fs.open(view, libc::O_RDONLY).expect("open");
    let other = fs.open(view, libc::O_RDONLY).expect("open");
    let first = fs.read(o.fh, 0, 1 << 24).expect("read");
    let end = first.len() as u64;
    assert!(fs.read(o.fh, end, 4096).expect("at the end").is_empty());
    // An append the view shows as one more line: the handle reads it from where it stopped.
    let t = d.path().join(format!("transcripts/{sid}.jsonl"));
    common::append_user_message(&t, sid, "Followed by tail -f.");
    let more = fs.read(o.fh, end, 1 << 24).expect("read on");
    assert!(!more.is_empty(), "the newer view extends what was read");
    assert!(String::from_utf8_lossy(&more).contains("Followed by tail -f."));
    let fresh = read_all(&fs, view);
    assert_eq!([first.clone(), more.clone()].concat(), fresh);
    // fstat reports what the handles read now.
    assert_eq!(
        fs.getattr(view).expect("fstat").attr.size,
        fresh.len() as u64
    );
    assert_eq!(fs.read(other.fh, 0, 1 << 24).expect("read"), fresh);
    fs.release(other.fh);
    // A change that rewrites the view (its last block's summary, say) does not extend it:
    // the handle keeps what it read, and the name moves to a new inode.
    let held = fresh.len() as u64;
    std::fs::write(&t, b"").expect("truncate the transcript");
    assert!(fs
        .read(o.fh, held, 4096)
        .expect("read at the end")
        .is_empty());
    assert_eq!(fs.read(o.fh, 0, 1 << 24).expect("read again"), fresh);
    assert_eq!(fs.getattr(view).expect("fstat").attr.size, held);
    let now = lookup_path(&fs, &format!("sessions/{sid}/view.jsonl")).expect("view");
    assert_ne!(now, view);
    assert!(read_all(&fs, now).len() < fresh.len());
    fs.release(o.fh);
}

/// A script reads the view, compresses through ctl, and reads the view again at once: even
/// before inotify reports what the command wrote (here nothing watches at all), the open
/// through the inode the kernel still has for the name does not read the version a lookup
/// held a moment ago: ESTALE, and the name's lookup finds the compressed view.
#[test]
fn a_read_right_after_a_compress_shows_it() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let name = format!("sessions/{SID}/view.jsonl");
    let view = lookup_path(&fs, &name).expect("view");
    let before = read_all(&fs, view);
    let ctl = lookup_path(&fs, &format!("sessions/{SID}/ctl")).expect("ctl");
    let o = fs.open(ctl, libc::O_WRONLY).expect("open ctl");
    let cmd =
        b"compress m00170 m00175 The late part of the session: more files read, nothing decided.\n";
    fs.write(o.fh, 0, cmd).expect("compress");
    fs.release(o.fh);
    assert_eq!(
        fs.open(view, libc::O_RDONLY)
            .expect_err("the view before")
            .errno(),
        libc::ESTALE
    );
    let now = lookup_path(&fs, &name).expect("view");
    assert_ne!(now, view);
    let after = read_all(&fs, now);
    assert_ne!(after, before);
    assert!(String::from_utf8_lossy(&after).contains("The late part of the session"));
}

/// The kernel's retry after an ESTALE (a lookup, then the open again) finds what its lookup
/// found even when a ctl command runs in between, as when the open waits behind the command
/// for a worker: ending that hold too answered the retried open ESTALE, which the kernel
/// hands to the reader (`open: Stale file handle` in the live-writer soak).
#[test]
fn a_retried_open_outlasts_a_command_after_its_lookup() {
    let d = example_root();
    let fs = fs_for(d.path(), false);
    let name = format!("sessions/{SID}/view.jsonl");
    let view = lookup_path(&fs, &name).expect("view");
    read_all(&fs, view);
    let compress = |cmd: &[u8]| {
        let ctl = lookup_path(&fs, &format!("sessions/{SID}/ctl")).expect("ctl");
        let o = fs.open(ctl, libc::O_WRONLY).expect("open ctl");
        fs.write(o.fh, 0, cmd).expect("compress");
        fs.release(o.fh);
    };
    compress(
        b"compress m00170 m00175 The late part of the session: more files read, nothing decided.\n",
    );
    // The kernel opens the inode it kept: gone, ESTALE; it looks the name up again...
    assert_eq!(
        fs.open(view, libc::O_RDONLY).expect_err("gone").errno(),
        libc::ESTALE
    );
    let retry = lookup_path(&fs, &name).expect("the retry's lookup");
    assert_ne!(retry, view);
    // ...a command runs before the open it retries...
    compress(b"compress m00176 m00181 Even later: the last files read, still nothing decided.\n");
    // ...which reads what the lookup found.
    let o = fs.open(retry, libc::O_RDONLY).expect("the retried open");
    let got = fs.read(o.fh, 0, 1 << 24).expect("read");
    fs.release(o.fh);
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("The late part of the session") && !text.contains("Even later"));
    // The name goes on to the newest view.
    compress(b"compress m00160 m00165 Later still: a last look at the files, nothing decided.\n");
    let now = lookup_path(&fs, &name).expect("view");
    assert!(String::from_utf8_lossy(&read_all(&fs, now)).contains("Later still"));
}
