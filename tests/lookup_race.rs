//! A lookup of a computed file that loses a race with lookups of the same name on other
//! workers: each of those, seeing the session changed, gives the name a new inode between the
//! moment this lookup took the name's inode and the moment it computes the attributes. The
//! lookup must answer with the name's current inode, not `ESTALE` (in the kernel's retry of an
//! open, an `ESTALE` reaches the reader) and not an inode already left behind. Uses the
//! process-wide test hook `set_before_computed_entry`, so it has a test binary of its own.

mod common;

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use normafs::config::Config;
use normafs::fs::{set_before_computed_entry, NormaFs};
use normafs::store::root::RootPaths;

const SID: &str = "s1-small";

/// Disarms the hook when dropped, also when the test fails.
struct Disarm;

impl Drop for Disarm {
    fn drop(&mut self) {
        set_before_computed_entry(None);
    }
}

#[test]
fn a_lookup_outraced_by_lookups_of_the_same_name_answers_its_current_inode() {
    let _disarm = Disarm;
    let d = common::example_root();
    let cfg = Config::default();
    let fs = Arc::new(NormaFs::new(
        RootPaths::from_root(d.path()),
        cfg.clone(),
        normafs::fs::FsOptions::new(&cfg, false),
    ));
    let dir = common::lookup_path(&fs, &format!("sessions/{SID}"))
        .unwrap_or_else(|e| panic!("lookup of sessions/{SID}: {e:?}"));
    let transcript = d.path().join(format!("transcripts/{SID}.jsonl"));
    for name in ["status.json", "audit.txt"] {
        let first = fs.lookup(dir, OsStr::new(name)).expect("lookup").attr.ino;
        // Each of the next `RACES` tries of the lookup meets a change of the session and
        // another worker's lookup of the same name renewing its inode.
        const RACES: usize = 2;
        let raced = Arc::new(AtomicUsize::new(0));
        let inside = Arc::new(AtomicBool::new(false));
        let other: Arc<dyn Fn() + Send + Sync> = {
            let (fs, raced, inside, t) = (
                fs.clone(),
                raced.clone(),
                inside.clone(),
                transcript.clone(),
            );
            Arc::new(move || {
                if raced.load(Ordering::SeqCst) >= RACES || inside.swap(true, Ordering::SeqCst) {
                    return;
                }
                let n = raced.fetch_add(1, Ordering::SeqCst);
                common::append_user_message(&t, SID, &format!("Change {n} under a lookup."));
                fs.lookup(dir, OsStr::new(name))
                    .expect("the other worker's lookup");
                inside.store(false, Ordering::SeqCst);
            })
        };
        set_before_computed_entry(Some(other));
        let got = fs.lookup(dir, OsStr::new(name));
        set_before_computed_entry(None);
        let got = got.unwrap_or_else(|e| panic!("{name}: the outraced lookup: {e:?}"));
        assert_ne!(got.attr.ino, first, "{name}: the session changed");
        // Nothing changed since: a lookup now gives the same inode and attributes, and the
        // inode reads what it said.
        let now = fs.lookup(dir, OsStr::new(name)).expect("lookup").attr;
        assert_eq!(got.attr.ino, now.ino, "{name}: the name's current inode");
        assert_eq!(got.attr.size, now.size, "{name}");
        let o = fs.open(got.attr.ino, libc::O_RDONLY).expect("open");
        let bytes = fs.read(o.fh, 0, 1 << 24).expect("read");
        fs.release(o.fh);
        assert_eq!(bytes.len() as u64, got.attr.size, "{name}: reads its size");
        assert_eq!(raced.load(Ordering::SeqCst), RACES, "{name}: the races ran");
    }
}
