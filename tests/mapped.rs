//! Real files read through normafs's own read path (no passthrough): large reads are answered
//! from a mapping of the backing file (`fs::real::Windows`). Through a real mount, the bytes are
//! the file's, at every offset; when a file is truncated between a read's sizing and its reply,
//! the kernel's copy from the mapping fails (the FUSE device ends that request with `EIO`;
//! the kernel then asks for the page alone, which finds the new end), the mount process does
//! not die of `SIGBUS`, and it keeps serving. Uses the process-wide test hook, so the tests
//! here run one at a time.

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{mount_without_passthrough, sh};
use normafs::fs::set_before_mapped_reply;

static SERIAL: Mutex<()> = Mutex::new(());

/// Disarms the hook when dropped, also when a test fails.
struct Disarm;

impl Drop for Disarm {
    fn drop(&mut self) {
        set_before_mapped_reply(None);
    }
}

/// `len` bytes that tell their offsets apart (a period prime to every page and window size).
fn patterned(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn large_reads_of_a_real_file_are_its_bytes_at_every_offset() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    // Past two 8 MiB windows, ending mid-page.
    let bytes = patterned((17 << 20) + 1234);
    std::fs::write(m.root().join("memory/big.md"), &bytes).expect("write backing");
    let path = m.at("memory/big.md");
    assert_eq!(std::fs::read(&path).expect("read through the mount"), bytes);
    let o = sh(&format!(
        "dd if='{}' bs=1M status=none | cmp - '{}'",
        path.display(),
        m.root().join("memory/big.md").display()
    ));
    assert!(o.status.success(), "dd | cmp: {o:?}");
    // Reads that start anywhere (the kernel asks for whole pages around them).
    let mut f = std::fs::File::open(&path).expect("open");
    for at in [
        1u64,
        4095,
        (8 << 20) - 3,
        (16 << 20) + 77,
        bytes.len() as u64 - 10,
    ] {
        let mut buf = vec![0u8; 300_000];
        f.seek(SeekFrom::Start(at)).expect("seek");
        let n = f.read(&mut buf).expect("read");
        assert!(n > 0, "read at {at}");
        assert_eq!(buf[..n], bytes[at as usize..at as usize + n], "at {at}");
    }
}

#[test]
fn a_file_truncated_under_a_mapped_read_fails_that_read_and_the_mount_keeps_serving() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _disarm = Disarm;
    let Some(m) = mount_without_passthrough() else {
        return;
    };
    let backing = m.root().join("memory/big.md");
    let bytes = patterned(4 << 20);
    std::fs::write(&backing, &bytes).expect("write backing");
    let path = m.at("memory/big.md");
    // The first mapped read's reply finds the file truncated to nothing.
    let fired = Arc::new(AtomicBool::new(false));
    let (b, once) = (backing.clone(), fired.clone());
    set_before_mapped_reply(Some(Arc::new(move || {
        if !once.swap(true, Ordering::SeqCst) {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&b)
                .and_then(|f| f.set_len(0))
                .expect("truncate backing");
        }
    })));
    let raced = std::fs::read(&path);
    assert!(
        fired.load(Ordering::SeqCst),
        "the read was served from a mapping"
    );
    // What the reader got: an error of the failed request, or a prefix of the bytes ending
    // where the truncation found them, zero-filled up to a page by the kernel (see the
    // rewrite test below).
    match &raced {
        Ok(got) => {
            let same = got.iter().zip(&bytes).take_while(|(a, b)| a == b).count();
            assert!(
                got.len() < bytes.len() && got[same..].iter().all(|&b| b == 0),
                "{} bytes, the file's up to {same}",
                got.len()
            );
        }
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
    }
    set_before_mapped_reply(None);
    // Alive and serving: the file as it is now, the rest of the mount as before.
    std::fs::write(&backing, b"after\n").expect("rewrite backing");
    let mut now = Vec::new();
    for _ in 0..200 {
        now = std::fs::read(&path).expect("read after");
        if now == b"after\n" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(now, b"after\n");
    let status = std::fs::read(m.at("sessions/s2-tier1/status.json")).expect("status.json");
    assert!(!status.is_empty());
}

/// A large real file rewritten in place over and over (truncated, then written again with
/// the same bytes) while two readers read it whole through the mount. Every byte read is the
/// file's at its offset, or a zero of a page a reply cut short by a truncation left
/// zero-filled (the kernel fills such a reply with zeros up to the size it holds, which it
/// keeps when the watcher's invalidation crossed the request, and keeps the page until it is
/// told to drop it: the mount tells it at once). No byte of another file or offset is ever
/// read, the mount serves on, leaves no reader hanging, and reads the file whole once it is
/// quiet.
#[test]
fn readers_of_a_file_truncated_and_rewritten_under_them_get_its_bytes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for no_open in [false, true] {
        let opts = normafs::fuse::MountOptions {
            passthrough: false,
            no_open,
            ..normafs::fuse::MountOptions::default()
        };
        let cfg = normafs::config::Config::default();
        let Some(m) = common::mount(common::example_root(), cfg, opts) else {
            return;
        };
        churn(&m, no_open);
    }
}

/// Rewrite a file in place under two readers (see the test above); `no_open`: the kernel
/// opens files itself.
fn churn(m: &common::Mounted, no_open: bool) {
    let backing = m.root().join("memory/churn.md");
    let bytes = Arc::new(patterned(3 << 20));
    std::fs::write(&backing, &*bytes).expect("write backing");
    let path = m.at("memory/churn.md");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, backing, bytes) = (stop.clone(), backing.clone(), bytes.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&backing)
                    .expect("open backing");
                f.set_len(0).expect("truncate");
                std::io::Write::write_all(&mut f, &bytes).expect("rewrite");
                rounds += 1;
            }
            rounds
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, path, bytes) = (stop.clone(), path.clone(), bytes.clone());
            std::thread::spawn(move || {
                let (mut whole, mut zeros, mut cut) = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::SeqCst) {
                    match std::fs::read(&path) {
                        Ok(got) => {
                            let same = got
                                .iter()
                                .zip(bytes.iter())
                                .take_while(|(a, b)| a == b)
                                .count();
                            let rest = &got[same..];
                            // Every byte read is the file's at its offset, or a zero of a
                            // page a reply cut short left zero-filled (the kernel opens
                            // files itself: it keeps such a page until told to drop it).
                            let wrong = rest
                                .iter()
                                .zip(&bytes[same..])
                                .position(|(&g, &b)| g != 0 && g != b);
                            assert!(
                                got.len() <= bytes.len() && wrong.is_none(),
                                "{} bytes: the file's up to {same}, then other bytes: {:?}, \
                                 where the file has {:?}",
                                got.len(),
                                &got[same..(same + 16).min(got.len())],
                                &bytes[same..(same + 16).min(bytes.len())]
                            );
                            whole += u64::from(got.len() == bytes.len() && rest.is_empty());
                            zeros += u64::from(!rest.is_empty());
                            cut += u64::from(!got.is_empty() && got.len() < bytes.len());
                        }
                        Err(e) => panic!("read: {e}"),
                    }
                }
                (whole, zeros, cut)
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(3));
    stop.store(true, Ordering::SeqCst);
    let rounds = writer.join().expect("writer");
    let results: Vec<_> = readers
        .into_iter()
        .map(|r| r.join().expect("reader"))
        .collect();
    eprintln!("rewrites {rounds}, reads (whole, zero-filled, cut short) {results:?}");
    assert!(rounds > 10, "the writer rewrote the file {rounds} times");
    if no_open {
        // While the file is cut every few milliseconds, a read through the page cache may
        // meet a page a short reply left zero-filled: the kernel opens files itself, so the
        // mount cannot have later opens skip the page cache.
        assert!(
            results.iter().map(|r| r.0 + r.1 + r.2).sum::<u64>() > 0,
            "the readers read: {results:?}"
        );
    } else {
        // Whether a read falls between two truncations is timing (on a loaded machine none
        // may): what is asserted is that the readers read bytes, all of them right.
        assert!(
            results.iter().any(|r| r.0 + r.2 > 0),
            "the readers read no bytes: {results:?}"
        );
        // The first reply cut short marks the file: later opens read it with direct I/O,
        // where a short read is its end. Only reads already under way then can be
        // zero-filled (some twenty in three seconds before that).
        let zero_filled: u64 = results.iter().map(|r| r.1).sum();
        assert!(
            zero_filled <= 4,
            "{zero_filled} reads zero-filled: {results:?}"
        );
    }
    // Quiet again: the file reads whole.
    let mut last = Vec::new();
    for _ in 0..200 {
        last = std::fs::read(&path).expect("read after");
        if last == *bytes {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(last, *bytes);
}
