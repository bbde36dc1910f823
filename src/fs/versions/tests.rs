use std::time::{Instant, SystemTime};

use super::{Fit, Versions};
use crate::bytes::Bytes;
use crate::fs::computed::Rendered;
use crate::fs::{Attr, FileKind};

fn content(s: &str, fp: u64) -> Rendered {
    let data = Bytes::from(s.as_bytes().to_vec());
    let size = data.len();
    Rendered {
        digest: (size <= crate::fs::computed::SAME_BYTES)
            .then(|| crate::fs::computed::digest(&data, size))
            .flatten(),
        data: Some(data),
        size,
        fp,
        made: 0,
        perm: 0o444,
        mtime: SystemTime::UNIX_EPOCH,
    }
}

fn text(h: &super::Head) -> String {
    let b = h.data.as_ref().expect("pinned");
    String::from_utf8(b.window(0, u32::MAX).into_owned()).expect("utf-8")
}

#[test]
fn an_idle_inode_stands_for_the_first_version_it_was_told_of() {
    let v = Versions::default();
    let (fit, d) = v.fit(7, true, &content("a\n", 1));
    assert_eq!(fit, Fit::Fits);
    assert_eq!(text(&d.expect("described").head), "a\n");
    assert_eq!(v.fit(7, true, &content("a\n", 1)).0, Fit::Fits);
    // Even an extension is another version once no handle holds the bytes to compare.
    assert_eq!(
        v.fit(7, true, &content("a\nb\n", 2)).0,
        Fit::Left { held: false }
    );
    // An inode that is not the name's any more stands for nothing new.
    assert_eq!(
        v.fit(8, false, &content("a\n", 1)).0,
        Fit::Left { held: false }
    );
    // Forgotten by the kernel: free for the next version.
    v.forget(7, None, &|| true);
    assert_eq!(v.fit(7, true, &content("a\nb\n", 2)).0, Fit::Fits);
}

#[test]
fn the_same_bytes_from_other_inputs_are_the_same_version() {
    let v = Versions::default();
    assert_eq!(v.fit(7, true, &content("a\n", 1)).0, Fit::Fits);
    assert_eq!(v.fit(7, true, &content("a\n", 2)).0, Fit::Fits);
    assert_eq!(
        v.fit(7, true, &content("b\n", 3)).0,
        Fit::Left { held: false }
    );
    // Open handles too: they read the same bytes either way.
    assert_eq!(
        v.open(9, true, &content("x\n", 1), Instant::now())
            .expect("open")
            .fit,
        Fit::Fits
    );
    assert_eq!(v.fit(9, true, &content("x\n", 2)).0, Fit::Fits);
    assert_eq!(
        v.open(9, true, &content("x\n", 2), Instant::now())
            .expect("open")
            .fit,
        Fit::Fits
    );
    assert_eq!(
        v.fit(9, true, &content("y\n", 3)).0,
        Fit::Left { held: true }
    );
    // Too large to keep for the comparison while idle: another version.
    let big = "z".repeat(crate::fs::computed::SAME_BYTES as usize + 1);
    assert_eq!(v.fit(11, true, &content(&big, 1)).0, Fit::Fits);
    assert_eq!(
        v.fit(11, true, &content(&big, 2)).0,
        Fit::Left { held: false }
    );
}

#[test]
fn open_handles_follow_extensions_and_keep_their_version_otherwise() {
    let v = Versions::default();
    let first = content("a\n", 1);
    assert_eq!(
        v.open(3, true, &first, Instant::now()).expect("open").fit,
        Fit::Fits
    );
    assert_eq!(
        v.open(3, true, &first, Instant::now()).expect("open").fit,
        Fit::Fits
    );
    assert_eq!(text(&v.head(3).expect("open")), "a\n");
    // The view grew: both handles read the longer version, under the same inode.
    let (fit, d) = v.fit(3, true, &content("a\nb\n", 2));
    assert_eq!(fit, Fit::Fits);
    assert_eq!(text(&d.expect("described").head), "a\nb\n");
    assert_eq!(text(&v.head(3).expect("open")), "a\nb\n");
    // Rewritten: the handles keep what they read; the name needs another inode.
    let (fit, d) = v.fit(3, true, &content("x\n", 3));
    assert_eq!(fit, Fit::Left { held: true });
    assert_eq!(text(&d.expect("described").head), "a\nb\n");
    // Not current any more: no extension reaches it either.
    assert_eq!(
        v.fit(3, false, &content("a\nb\nc\n", 4)).0,
        Fit::Left { held: true }
    );
    assert_eq!(text(&v.head(3).expect("open")), "a\nb\n");
    // An open meanwhile is refused (the kernel looks the name up again), unless a
    // lookup held the version a moment ago: the open of the kernel's path walk then
    // reads what the lookup found.
    assert_eq!(
        v.open(3, true, &content("x\n", 3), Instant::now()).err(),
        Some(Fit::Left { held: true })
    );
    v.hold(3, &first, &crate::fs::Node::RootAudit);
    let o = v
        .open(3, true, &content("x\n", 3), Instant::now())
        .expect("open");
    assert_eq!(
        (text(&v.head(3).expect("open")), o.fit),
        ("a\nb\n".to_string(), Fit::Left { held: true })
    );
    v.closed(3);
    v.closed(3);
    assert!(v.is_open(3));
    v.closed(3);
    assert!(v.is_open(3), "held a moment after its lookup");
    // A ctl command ends the hold.
    v.release_holds([3], Instant::now());
    assert!(!v.is_open(3));
    // Idle now, it still stands for the version its handles read.
    assert_eq!(v.fit(3, true, &content("a\nb\n", 2)).0, Fit::Fits);
    assert_eq!(
        v.fit(3, true, &content("x\n", 3)).0,
        Fit::Left { held: false }
    );
}

#[test]
fn a_growing_size_is_told_once_the_page_it_ended_in_is_dropped() {
    let v = Versions::default();
    let (tx, rx) = std::sync::mpsc::channel();
    v.set_tail_drops(tx);
    let size = |v: &Versions, c: &Rendered| v.fit(5, true, c).1.expect("described").size;
    v.open(5, true, &content("a\n", 1), Instant::now())
        .expect("open");
    // Grown: read whole, told as before until the page the old size ends in is dropped.
    let (fit, d) = v.fit(5, true, &content("a\nb\n", 2));
    let d = d.expect("described");
    assert_eq!((fit, d.size, d.head.len), (Fit::Fits, 2, 4));
    assert_eq!(
        rx.try_recv().ok(),
        Some(super::TailDrop { ino: 5, from: 2 })
    );
    // Grown again meanwhile: still the old size, no second drop yet.
    assert_eq!(size(&v, &content("a\nb\nc\n", 3)), 2);
    assert!(rx.try_recv().is_err());
    // The drop asked when the handles read 4 bytes: 4 may be told; the 6 needs the next.
    v.tail_dropped(5, 4);
    assert_eq!(size(&v, &content("a\nb\nc\n", 3)), 4);
    assert_eq!(
        rx.try_recv().ok(),
        Some(super::TailDrop { ino: 5, from: 4 })
    );
    assert_eq!(v.head_len(5), Some(6));
    v.tail_dropped(5, 6);
    assert_eq!(size(&v, &content("a\nb\nc\n", 3)), 6);
    assert!(rx.try_recv().is_err());
    // Not let go while a drop is under way.
    assert_eq!(size(&v, &content("a\nb\nc\nd\n", 4)), 6);
    v.closed(5);
    v.release_holds([5], Instant::now());
    assert!(v.is_open(5), "kept until its drop is done");
    v.tail_dropped(5, 8);
    v.release_holds([5], Instant::now());
    assert!(!v.is_open(5));
}

#[test]
fn a_forget_overtaken_by_a_lookup_keeps_what_the_kernel_read_since() {
    let v = Versions::default();
    let c = content("abcdefg\n", 1);
    v.open(4, true, &c, Instant::now()).expect("open");
    v.served(4, 0, 8);
    v.closed(4);
    assert!(v.whole(4));
    // The kernel looked the inode up again before the forget was handled.
    v.forget(4, None, &|| false);
    assert!(v.whole(4), "kept: the kernel holds the inode and its pages");
    v.forget(4, None, &|| true);
    assert!(!v.whole(4), "forgotten: the kernel holds no page of it");
}

#[test]
fn a_lookup_that_found_the_bytes_leaves_them_to_the_open_it_holds_for() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    let c = content("abc\n", 1);
    let bare = crate::fs::computed::Rendered {
        data: None,
        ..c.clone()
    };
    v.hold(3, &bare, &node);
    assert!(!v.pinned(3), "a lookup without the bytes holds none");
    v.hold(3, &content("abd\n", 2), &node);
    assert!(!v.pinned(3), "another version's bytes are not this one's");
    v.hold(3, &c, &node);
    assert!(
        v.pinned(3),
        "the retry's lookup made them: its open reads them"
    );
}

#[test]
fn an_empty_version_is_whole_from_the_start() {
    let v = Versions::default();
    v.open(4, true, &content("", 1), Instant::now())
        .expect("open");
    assert!(v.whole(4), "the kernel reads nothing of an empty file");
}

#[test]
fn the_kernel_holds_a_version_whole_once_it_read_every_page_and_none_was_dropped() {
    let v = Versions::default();
    let c = content("abcdefg\n", 1);
    v.open(4, true, &c, Instant::now()).expect("open");
    assert!(!v.whole(4));
    v.served(4, 5, 3);
    v.served(4, 0, 3);
    assert!(!v.whole(4), "a gap from 3 to 5");
    v.served(4, 3, 2);
    assert!(v.whole(4), "answered in any order");
    // Idle, the inode keeps it; a drop of its pages ends it.
    v.closed(4);
    v.release_holds([4], Instant::now());
    assert!(!v.is_open(4));
    assert!(v.whole(4));
    assert_eq!(
        v.open(4, true, &c, Instant::now()).expect("open again").fit,
        Fit::Fits
    );
    assert!(v.whole(4), "an open of it keeps it");
    v.pages_dropped(4, 4);
    assert!(!v.whole(4));
    // A version that grew was not read past its old end.
    v.served(4, 0, 8);
    assert!(v.whole(4));
    let (fit, _) = v.fit(4, true, &content("abcdefg\nh\n", 2));
    assert_eq!(fit, Fit::Fits);
    assert!(!v.whole(4));
}

#[test]
fn the_hold_of_a_retry_outlasts_a_command_until_its_open() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    let old = content("a\n", 1);
    // A lookup before a command: the command ends its hold, and an open after it of
    // content that moved on is answered ESTALE (the kernel read pages of the version).
    v.open(3, true, &old, Instant::now()).expect("open");
    v.served(3, 0, 2);
    v.closed(3);
    v.hold(3, &old, &node);
    v.release_holds([3], Instant::now());
    assert!(v.open(3, true, &content("b\n", 2), Instant::now()).is_err());
    v.answered_stale(&node);
    // The retry's lookup holds its version; a command before its open leaves the hold.
    v.hold(4, &content("b\n", 2), &node);
    v.release_holds([4], Instant::now());
    let o = v
        .open(4, true, &content("c\n", 3), Instant::now())
        .expect("the retried open");
    assert_eq!(o.fit, Fit::Left { held: true });
    v.closed(4);
    // Opened: the next command ends the hold as any other.
    v.release_holds([4], Instant::now());
    assert!(!v.is_open(4));
}

#[test]
fn a_lookup_held_without_bytes_gives_its_inode_to_the_content_at_the_open() {
    // When the mount answers opens, such an open fails: the kernel looks the name up again.
    let answers = Versions::default();
    let node = crate::fs::Node::RootAudit;
    let mut old = content("a\n", 1);
    old.data = None;
    assert_eq!(answers.fit(8, true, &old).0, Fit::Fits);
    answers.hold(8, &old, &node);
    assert!(answers
        .open(8, true, &content("xy\n", 2), Instant::now())
        .is_ok_and(|o| o.fit != Fit::Fits));
    // When the kernel opens files itself, the first read is the open.
    let v = Versions::default();
    v.set_kernel_opens();
    assert_eq!(v.fit(8, true, &old).0, Fit::Fits);
    v.hold(8, &old, &node);
    // Rewritten before the open: the kernel has no page of the inode, so the open reads
    // the content now, and is told to ask the size again.
    let o = v
        .open(8, true, &content("xy\n", 2), Instant::now())
        .expect("open");
    assert_eq!((o.fit, o.size_told), (Fit::Fits, false));
    assert_eq!(text(&v.head(8).expect("open")), "xy\n");
    // Not once the kernel read a page of it: the handles keep their version.
    v.served(8, 0, 3);
    let mut held = content("xy\n", 2);
    held.data = None;
    v.hold(9, &held, &node);
    v.served(9, 0, 1);
    assert!(v
        .open(9, true, &content("q\n", 3), Instant::now())
        .is_ok_and(|o| o.fit != Fit::Fits));
}

#[test]
fn a_retry_hold_survives_the_kernel_forgetting_the_inode_it_revalidated() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    v.answered_stale(&node);
    v.hold(6, &content("b\n", 2), &node);
    // The revalidating lookup answered an inode other than the entry's: the kernel
    // forgets it and looks the name up afresh.
    v.forget(6, Some(&node), &|| true);
    v.hold(6, &content("b\n", 2), &node);
    // A command before the open leaves the retry's hold.
    v.release_holds([6], Instant::now());
    let o = v
        .open(6, true, &content("c\n", 3), Instant::now())
        .expect("the retried open");
    assert_eq!(o.fit, Fit::Left { held: true });
}

#[test]
fn the_attributes_told_are_kept_until_the_kernel_forgets_the_inode() {
    let v = Versions::default();
    let t = SystemTime::UNIX_EPOCH;
    let a = Attr {
        ino: 4,
        kind: FileKind::File,
        size: 12,
        blocks: 1,
        perm: 0o444,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        atime: t,
        mtime: t,
        ctime: t,
    };
    assert_eq!(v.told(4), None);
    v.tell(4, &a);
    assert_eq!(v.told(4), Some(a));
    v.forget(4, None, &|| true);
    assert_eq!(v.told(4), None);
}

#[test]
fn a_hold_covers_the_open_that_arrived_within_it_however_long_its_content_took() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    v.hold(3, &content("a\n", 1), &node);
    let arrived = Instant::now();
    // The content the open is measured against moved on, and was made after the hold's
    // moment was over: the open arrived within it, so it reads what the lookup found.
    let late = content("b\n", 2);
    let o = v
        .open(3, true, &late, arrived)
        .expect("the open of the path walk");
    assert_eq!(o.fit, Fit::Left { held: true });
    assert_eq!(text(&v.head(3).expect("open")), "a\n");
    // One that arrived after it is refused when the kernel may hold pages of the version:
    // the kernel looks the name up again.
    let a = content("a\n", 1);
    v.open(5, true, &a, Instant::now()).expect("open");
    v.served(5, 0, 2);
    v.closed(5);
    v.hold(5, &a, &node);
    let after = Instant::now() + super::HOLD + std::time::Duration::from_millis(1);
    assert_eq!(
        v.open(5, true, &late, after).err(),
        Some(Fit::Left { held: false })
    );
}

#[test]
fn the_retry_after_an_estale_is_held_until_a_slow_open_arrives() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    v.answered_stale(&node);
    // The dentry's revalidation and the fresh lookup after it both count as the retry.
    v.hold(3, &content("a\n", 1), &node);
    v.hold(4, &content("b\n", 2), &node);
    // Its open arrives long after an ordinary hold would be over (a loaded machine).
    let slow = Instant::now() + super::HOLD * 4;
    assert!(slow < Instant::now() + super::RETRY_HOLD);
    let o = v
        .open(4, true, &content("c\n", 3), slow)
        .expect("the retried open must not fail again");
    assert_eq!(o.fit, Fit::Left { held: true });
    assert_eq!(text(&v.head(4).expect("open")), "b\n");
    // Past that, even the retry's hold is over: once the kernel read a page of the
    // version, an open of content that moved on is refused.
    v.served(4, 0, 2);
    v.closed(4);
    let never = Instant::now() + super::RETRY_HOLD + std::time::Duration::from_millis(1);
    assert!(v.open(4, true, &content("d\n", 4), never).is_err());
}

#[test]
fn an_idle_inode_the_kernel_read_nothing_of_stands_for_the_content_at_its_open() {
    let v = Versions::default();
    assert_eq!(v.fit(6, true, &content("a\n", 1)).0, Fit::Fits);
    // The content moved on and no hold stands: nothing the kernel kept of inode 6 is of the
    // old version, so its open (however late) reads the content now, and the kernel is to
    // ask its size again.
    let o = v
        .open(6, false, &content("ab\n", 2), Instant::now())
        .expect("rebound at its open");
    assert_eq!(o.fit, Fit::Fits);
    assert!(!o.size_told);
    assert_eq!(text(&v.head(6).expect("open")), "ab\n");
    // Read, closed, then moved on again: now the kernel may hold its pages.
    v.served(6, 0, 3);
    v.closed(6);
    v.release_holds([6], Instant::now());
    assert!(v
        .open(6, false, &content("abc\n", 3), Instant::now())
        .is_err());
    assert!(v.rebind_untouched(6, &content("abc\n", 3)).is_none());
    // An attribute request of an untouched idle inode describes the content now.
    assert_eq!(v.fit(7, true, &content("x\n", 4)).0, Fit::Fits);
    let d = v
        .rebind_untouched(7, &content("xyz\n", 5))
        .expect("nothing of it kept");
    assert_eq!(d.size, 4);
}

#[test]
fn one_retry_opening_leaves_the_hold_to_the_others_pending() {
    let v = Versions::default();
    let node = crate::fs::Node::RootAudit;
    v.answered_stale(&node);
    // Two readers' retries look the name up and get inode 4; the first opens it.
    v.hold(4, &content("a\n", 1), &node);
    v.hold(4, &content("a\n", 1), &node);
    v.open(4, true, &content("a\n", 1), Instant::now())
        .expect("the first retried open");
    // A command, then the content moves on: the second reader's open still reads the
    // version its lookup found.
    v.release_holds([4], Instant::now());
    let o = v
        .open(4, true, &content("b\n", 2), Instant::now())
        .expect("the second retried open must not fail");
    assert_eq!(o.fit, Fit::Left { held: true });
    assert_eq!(text(&v.head(4).expect("open")), "a\n");
    // Both opened: the next command ends the hold as any other.
    v.closed(4);
    v.closed(4);
    v.release_holds([4], Instant::now());
    assert!(!v.is_open(4));
}

#[test]
fn pinned_bytes_past_the_budget_go_to_disk_and_stay_readable() {
    let v = Versions::default();
    let dir = tempfile::tempdir().expect("tempdir");
    v.set_pinned_budget(40, dir.path().to_path_buf());
    let node = crate::fs::Node::RootAudit;
    let body = |i: u64| format!("version {i:02} of the file\n");
    for i in 0..10u64 {
        v.hold(100 + i, &content(&body(i), i + 1), &node);
        v.trim();
        let (_, in_memory) = v.held();
        assert!(in_memory <= 40, "{in_memory} bytes in memory after {i}");
    }
    // Every version reads whole, from memory or from disk.
    for i in 0..10u64 {
        let head = v.head(100 + i).expect("held");
        let bytes = match (&head.data, &head.spill) {
            (Some(d), _) => d.to_vec(),
            (None, Some(s)) => s.bytes().expect("read back").to_vec(),
            (None, None) => panic!("version {i} lost its bytes"),
        };
        assert_eq!(String::from_utf8(bytes).expect("utf8"), body(i));
    }
    // Under the budget again, a trim spills nothing more.
    let (n, _) = v.held();
    v.trim();
    assert_eq!(v.held().0, n);
}

#[test]
fn pinned_bytes_the_cache_shares_stay_in_memory_until_it_lets_go() {
    let v = Versions::default();
    let dir = tempfile::tempdir().expect("tempdir");
    v.set_pinned_budget(40, dir.path().to_path_buf());
    let node = crate::fs::Node::RootAudit;
    let body = "a large version that the cache holds as well\n".repeat(4);
    let c = content(&body, 1);
    // The cache's copy: the same bytes.
    let cached = c.data.clone().expect("bytes");
    v.hold(7, &c, &node);
    drop(c);
    v.trim();
    let head = v.head(7).expect("held");
    assert!(
        head.data.is_some(),
        "spilled while the cache still holds the bytes"
    );
    assert!(head.spill.is_none());
    drop(head);
    // The cache lets go: the next pass over every version writes them to disk.
    drop(cached);
    v.trim_all();
    let head = v.head(7).expect("held");
    assert!(head.data.is_none(), "kept in memory past the budget");
    let spill = head.spill.as_ref().expect("on disk");
    assert_eq!(spill.bytes().expect("read back").to_vec(), body.as_bytes());
}
