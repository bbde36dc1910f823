//! Real files appended to behind the mount (as the runtime appends to a transcript) and read
//! through normafs's own read path (no passthrough: the kernel's page cache) while they grow.
//! No read may show zeros where the file has bytes: the kernel zero-fills the page a read
//! ended in past that end, and sets a larger size before it drops the page (`fs/growth.rs`).
//! Readers that open the file again and again, readers holding one handle across the growth
//! (`less`, `tail -f`), and `stat`s racing both; then the same after the file was cut and
//! rewritten in place. Duration: `NORMAFS_SOAK_SECONDS` (default 3) per test.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{mount_without_passthrough, Mounted};

/// How long a read may take to show the file once it stops changing.
const SETTLE: Duration = Duration::from_secs(5);

fn duration() -> Duration {
    let secs = std::env::var("NORMAFS_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

/// Line `i` as the appender writes it (lengths vary, so sizes end anywhere in a page).
fn line(i: u64) -> String {
    format!("line {i} {}\n", "x".repeat((i % 97) as usize))
}

/// The appender's lines one after another, as many as any test appends.
fn lines() -> &'static [u8] {
    static LINES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| (0..400_000).flat_map(|i| line(i).into_bytes()).collect())
}

/// What went wrong with one read of the file (its bytes as read), if anything: every read
/// is the file's first bytes and then the appender's lines, the last of them perhaps cut
/// (a write crossing a page is seen page by page, natively too).
fn check(bytes: &[u8], first: &[u8]) -> Result<(), String> {
    if let Some(at) = memchr::memchr(0, bytes) {
        let nuls = bytes.iter().filter(|&&b| b == 0).count();
        return Err(format!(
            "{} bytes read, NUL at {at} (page offset {}), {nuls} NULs",
            bytes.len(),
            at % 4096
        ));
    }
    let rest = bytes
        .strip_prefix(first)
        .ok_or_else(|| format!("{} bytes read, not starting as the file", bytes.len()))?;
    let want = lines()
        .get(..rest.len())
        .ok_or_else(|| format!("{} bytes read, more than was appended", bytes.len()))?;
    match rest.iter().zip(want).position(|(a, b)| a != b) {
        Some(at) => Err(format!(
            "{} bytes read, differing from the lines at {}",
            bytes.len(),
            first.len() + at
        )),
        None => Ok(()),
    }
}

struct Shared {
    stop: AtomicBool,
    reads: AtomicU64,
    /// The longest read of a held handle.
    longest: AtomicU64,
    bad: Mutex<Vec<String>>,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            stop: AtomicBool::new(false),
            reads: AtomicU64::new(0),
            longest: AtomicU64::new(0),
            bad: Mutex::new(Vec::new()),
        })
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn judge(&self, bytes: &[u8], first: &[u8]) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = check(bytes, first) {
            let mut bad = self.bad.lock().unwrap_or_else(|e| e.into_inner());
            if bad.len() < 10 {
                bad.push(e);
            }
        }
    }
}

/// Everything a handle reads from offset 0 to its end, into `out` (its capacity kept).
fn read_all_at_into(f: &std::fs::File, out: &mut Vec<u8>) -> std::io::Result<()> {
    out.clear();
    loop {
        if out.capacity() - out.len() < 1 << 16 {
            out.reserve(1 << 20);
        }
        let len = out.len();
        out.resize(out.capacity(), 0);
        let n = f.read_at(&mut out[len..], len as u64);
        out.truncate(len + *n.as_ref().unwrap_or(&0));
        if n? == 0 {
            return Ok(());
        }
    }
}

fn read_all_at(f: &std::fs::File) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    read_all_at_into(f, &mut out)?;
    Ok(out)
}

/// Append lines to `backing` every half millisecond until stopped; how many.
fn appender(backing: PathBuf, shared: Arc<Shared>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&backing)
            .expect("open the backing file to append");
        let mut i = 0;
        while !shared.stopped() {
            f.write_all(line(i).as_bytes()).expect("append");
            i += 1;
            thread::sleep(Duration::from_micros(500));
        }
        i
    })
}

/// `stat` of `p` in a loop (each may bring the kernel a new size).
fn stater(p: PathBuf, shared: Arc<Shared>) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let mut n = 0;
        while !shared.stopped() {
            let _ = std::fs::metadata(&p);
            n += 1;
        }
        n
    })
}

/// Run the appender, `stats` stat loops and `readers` for [`duration`]; how many lines
/// were appended.
fn run(
    m: &Mounted,
    rel: &str,
    shared: &Arc<Shared>,
    readers: Vec<thread::JoinHandle<()>>,
    stats: usize,
) -> u64 {
    let mut statters = Vec::new();
    for _ in 0..stats {
        statters.push(stater(m.at(rel), shared.clone()));
    }
    let app = appender(m.root().join(rel), shared.clone());
    thread::sleep(duration());
    shared.stop.store(true, Ordering::Relaxed);
    let appended = app.join().expect("appender");
    for t in readers {
        t.join().expect("reader");
    }
    for t in statters {
        t.join().expect("stat loop");
    }
    appended
}

fn assert_clean(shared: &Shared, what: &str) {
    let bad = shared.bad.lock().unwrap_or_else(|e| e.into_inner());
    let reads = shared.reads.load(Ordering::Relaxed);
    assert!(
        bad.is_empty(),
        "{what}: {} bad of {reads} reads: {bad:#?}",
        bad.len()
    );
    assert!(reads > 0, "{what}: no read was made");
}

fn fresh_readers(p: &Path, first: &[u8], shared: &Arc<Shared>) -> Vec<thread::JoinHandle<()>> {
    (0..2)
        .map(|_| {
            let (p, first, shared) = (p.to_path_buf(), first.to_vec(), shared.clone());
            thread::spawn(move || {
                while !shared.stopped() {
                    match std::fs::read(&p) {
                        Ok(b) => shared.judge(&b, &first),
                        Err(e) => shared.judge(format!("{e}").as_bytes(), b"open or read: "),
                    }
                }
            })
        })
        .collect()
}

fn held_readers(p: &Path, first: &[u8], shared: &Arc<Shared>) -> Vec<thread::JoinHandle<()>> {
    (0..2)
        .map(|_| {
            // Opened before the file grows: through the page cache.
            let f = std::fs::File::open(p).expect("open through the mount");
            let (first, shared) = (first.to_vec(), shared.clone());
            thread::spawn(move || {
                let mut b = Vec::new();
                while !shared.stopped() {
                    match read_all_at_into(&f, &mut b) {
                        Ok(()) => {
                            shared.longest.fetch_max(b.len() as u64, Ordering::Relaxed);
                            shared.judge(&b, &first);
                        }
                        Err(e) => shared.judge(format!("{e}").as_bytes(), b"read: "),
                    }
                }
            })
        })
        .collect()
}

#[test]
fn reads_of_a_file_growing_behind_the_mount_never_show_zeros() {
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let rel = "memory/growing.md";
    let first = b"# notes appended to\n".to_vec();
    std::fs::write(m.root().join(rel), &first).expect("write the backing file");
    let shared = Shared::new();
    let readers = fresh_readers(&m.at(rel), &first, &shared);
    let appended = run(&m, rel, &shared, readers, 2);
    assert_clean(&shared, "opened for each read");
    // Once it stops growing, a read shows every line.
    let whole = std::fs::read(m.root().join(rel)).expect("read the backing file");
    assert!(appended > 100, "{appended} lines appended");
    assert!(
        common::within(SETTLE, || std::fs::read(m.at(rel))
            .is_ok_and(|b| b == whole)),
        "a read after the appends shows them all"
    );
}

#[test]
fn a_handle_held_while_the_file_grows_follows_it_without_zeros() {
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let rel = "memory/held.md";
    let first = b"# notes held open\n".to_vec();
    std::fs::write(m.root().join(rel), &first).expect("write the backing file");
    let shared = Shared::new();
    let held = std::fs::File::open(m.at(rel)).expect("open through the mount");
    let readers = held_readers(&m.at(rel), &first, &shared);
    run(&m, rel, &shared, readers, 2);
    assert_clean(&shared, "held handles");
    let whole = std::fs::read(m.root().join(rel)).expect("read the backing file");
    // The handles followed the growth while it went on, and catch up once it stops.
    let longest = shared.longest.load(Ordering::Relaxed);
    assert!(
        longest * 2 > whole.len() as u64,
        "held handles read at most {longest} of {} bytes while it grew",
        whole.len()
    );
    assert!(
        common::within(SETTLE, || read_all_at(&held).is_ok_and(|b| b == whole)),
        "a held handle reads every line once the appends stop"
    );
}

#[test]
fn a_file_cut_and_rewritten_in_place_then_grown_reads_without_zeros() {
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let rel = "memory/rewritten.md";
    let first = b"# rewritten in place\n".to_vec();
    let backing = m.root().join(rel);
    // A long first version, read through the mount (its pages cached), then cut to its
    // first line in place and grown again while read.
    let long: Vec<u8> = [
        first.clone(),
        (0..3000).map(line).collect::<String>().into_bytes(),
    ]
    .concat();
    std::fs::write(&backing, &long).expect("write the backing file");
    assert_eq!(std::fs::read(m.at(rel)).expect("read"), long);
    let f = OpenOptions::new()
        .write(true)
        .open(&backing)
        .expect("open the backing file");
    f.set_len(first.len() as u64).expect("cut it");
    drop(f);
    // (Reads under way as the cut happens are another matter: see the README.)
    let cut = first.len() as u64;
    assert!(
        common::within(SETTLE, || std::fs::metadata(m.at(rel))
            .is_ok_and(|md| md.len() == cut)),
        "the cut shows"
    );
    let shared = Shared::new();
    let mut readers = fresh_readers(&m.at(rel), &first, &shared);
    readers.extend(held_readers(&m.at(rel), &first, &shared));
    run(&m, rel, &shared, readers, 1);
    assert_clean(&shared, "after the cut");
}
