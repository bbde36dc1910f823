//! What the mount keeps in memory, as a user measures it: the resident size of a
//! `normafs mount --daemon` (its VmRSS) over a 1,000-session root, at the default settings.
//! A `stat` of every file keeps no bytes and no parse state (at most 64 MiB over the fresh
//! mount); a read of every file, as `grep -r` does, leaves the daemon small once idle (at most
//! 256 MiB): the kernel's page cache holds what was read.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{fuse_available, is_mounted, pid_of, stderr, Daemon};

const BIN: &str = env!("CARGO_BIN_EXE_normafs");
const MIB: u64 = 1 << 20;

/// A memory figure of process `pid` from its status (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: u64 = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect(field);
    kb * 1024
}

/// The resident size of process `pid`, in bytes.
fn rss(pid: i32) -> u64 {
    status_bytes(pid, "VmRSS")
}

/// The peak resident size of process `pid` so far, in bytes.
fn peak(pid: i32) -> u64 {
    status_bytes(pid, "VmHWM")
}

/// A root made by `normafs gen` with `args`, mounted by `normafs mount --daemon`: the root,
/// the mount point, and the daemon (unmounted when dropped).
fn gen_mounted(args: &[&str]) -> (tempfile::TempDir, tempfile::TempDir, Daemon) {
    let root = tempfile::tempdir().expect("tempdir");
    let o = Command::new(BIN)
        .arg("gen")
        .arg(root.path())
        .args(args)
        .output()
        .expect("gen");
    assert!(o.status.success(), "{}", stderr(&o));
    let mnt = tempfile::tempdir().expect("tempdir");
    let o = Command::new(BIN)
        .args(["mount", "--daemon"])
        .arg(root.path())
        .arg(mnt.path())
        .output()
        .expect("mount");
    assert!(o.status.success(), "{}", stderr(&o));
    let d = Daemon {
        pid: pid_of(&stderr(&o)),
        mnt: mnt.path().to_path_buf(),
    };
    assert!(is_mounted(mnt.path()));
    (root, mnt, d)
}

/// Every path under `dir`, not following links (what `du`, `ls -lR` and `grep -r` visit);
/// `stat` of each as it goes. The files, to read.
fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).expect("lstat");
        if m.is_dir() {
            walk(&p, files);
        } else if m.is_file() && p.file_name().is_some_and(|n| n != "ctl") {
            files.push(p);
        }
    }
}

/// The daemon's memory once its holds are over (a lookup holds what it found for 2 s; idle
/// bytes are let go every half second and the heap given back at most every 2 s): the least
/// of a few readings.
fn settled_rss(pid: i32) -> u64 {
    std::thread::sleep(Duration::from_secs(5));
    (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            rss(pid)
        })
        .min()
        .unwrap_or(0)
}

#[test]
fn a_thousand_sessions_stat_and_read_leave_the_daemon_small() {
    if !fuse_available() {
        return;
    }
    let (_root, mnt, d) = gen_mounted(&["--sessions", "1000", "--messages", "100"]);
    let pid = d.pid;
    let fresh = rss(pid);

    let mut files = Vec::new();
    walk(mnt.path(), &mut files);
    assert!(files.len() > 8_000, "{} files", files.len());
    let after_stat = settled_rss(pid);
    eprintln!(
        "resident: fresh {} MiB, after stat of {} files {} MiB",
        fresh / MIB,
        files.len(),
        after_stat / MIB
    );
    assert!(
        after_stat <= fresh + 64 * MIB,
        "a stat of every file keeps {} MiB over the fresh mount's {} MiB (at most 64)",
        (after_stat.saturating_sub(fresh)) / MIB,
        fresh / MIB
    );

    // Read every file whole, as grep -r does; then once more from the kernel's cache.
    let mut read = 0u64;
    for _ in 0..2 {
        for f in &files {
            read += std::fs::read(f).map_or(0, |b| b.len() as u64);
        }
    }
    let after_read = settled_rss(pid);
    eprintln!(
        "resident: after reading {} MiB twice, {} MiB",
        read / 2 / MIB,
        after_read / MIB
    );
    assert!(
        after_read <= 256 * MIB,
        "idle after reading every file: {} MiB (at most 256)",
        after_read / MIB
    );
}

/// `ls -l` of a large session makes `view.md` and `materialized.jsonl` to learn their sizes:
/// each is written out as it is made (to a spool, as `view.jsonl` is), never held whole. What
/// they add to the view's peak stays under half the larger one's size (it was twice a file's
/// size: the whole file, and the messages it was made from, at once). The history is the
/// larger: the view cuts long results it keeps whole.
#[test]
fn a_large_session_s_markdown_and_materialized_history_are_not_held_whole() {
    if !fuse_available() {
        return;
    }
    let (_root, mnt, d) = gen_mounted(&["--sessions", "1", "--messages", "40000"]);
    let pid = d.pid;
    let session = mnt.path().join("sessions/s1-0001");
    let view = std::fs::read(session.join("view.jsonl")).expect("view.jsonl");
    let after_view = peak(pid);
    let mut sizes = Vec::new();
    for name in ["materialized.jsonl", "view.md"] {
        let len = std::fs::metadata(session.join(name)).expect(name).len();
        sizes.push((name, len));
    }
    let after = peak(pid);
    let largest = sizes.iter().map(|&(_, l)| l).max().unwrap_or(0);
    eprintln!(
        "peak: {} MiB after view.jsonl ({} MiB), {} MiB after {sizes:?}",
        after_view / MIB,
        view.len() as u64 / MIB,
        after / MIB
    );
    assert!(largest > 40 * MIB, "a large session's files: {sizes:?}");
    assert!(
        after - after_view < largest / 2,
        "making {sizes:?} raised the peak by {} MiB (at most half a file)",
        (after - after_view) / MIB
    );
    // What a user reads is the same: the history file is the transcript's messages.
    let md = std::fs::read_to_string(session.join("view.md")).expect("view.md");
    assert!(
        md.starts_with("# View of s1-0001\n"),
        "{}",
        &md[..md.len().min(200)]
    );
    assert_eq!(md.len() as u64, sizes[1].1);
}

/// A large session's texts (its tool results, its text and thinking blocks) stay on disk
/// while its view is made and served: the peak of the mount over a first read of
/// `view.jsonl` is under 1.25× the transcript (when the parse held every text it was about
/// 1.55× on this session).
#[test]
fn a_large_session_s_texts_stay_on_disk_while_its_view_is_made() {
    if !fuse_available() {
        return;
    }
    let (root, mnt, d) = gen_mounted(&["--sessions", "1", "--messages", "40000"]);
    let transcript = std::fs::metadata(root.path().join("transcripts/s1-0001.jsonl"))
        .expect("transcript")
        .len();
    let view = std::fs::read(mnt.path().join("sessions/s1-0001/view.jsonl")).expect("view");
    let top = peak(d.pid);
    eprintln!(
        "peak {} MiB over a {} MiB transcript ({} MiB view)",
        top / MIB,
        transcript / MIB,
        view.len() as u64 / MIB
    );
    assert!(transcript > 40 * MIB, "a large session: {transcript} bytes");
    assert!(
        top * 4 < transcript * 5,
        "the mount peaked at {} MiB serving the view of a {} MiB transcript (at most 1.25×)",
        top / MIB,
        transcript / MIB
    );
    // The texts read back are the texts: the view holds the transcript's last result whole.
    let last_result = std::fs::read_to_string(root.path().join("transcripts/s1-0001.jsonl"))
        .expect("transcript")
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|r| {
            let items = r["message"]["content"].as_array()?.clone();
            items.iter().find_map(|c| {
                (c["type"] == "tool_result")
                    .then(|| c["content"][0]["text"].as_str().map(String::from))?
            })
        })
        .expect("a tool result");
    let view = String::from_utf8(view).expect("utf-8");
    let escaped = serde_json::to_string(&last_result).expect("json");
    assert!(
        view.contains(escaped.trim_matches('"')),
        "the view holds the last result's text as written"
    );
}
