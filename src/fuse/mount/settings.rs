//! The settings files watched while mounted: the user's, the root's `.normafs.toml` and
//! `--config`, looked at every [`POLL`] (each is one `stat`; the root's file lives where the
//! watcher looks at nothing, and the others outside the root). A change is applied as any
//! other change of a session's inputs: the computed files of the sessions it concerns are
//! made again, once. A file that no longer parses leaves the settings as they were: the log
//! and every `audit.txt` say why until it is mended.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use crate::config::Sources;
use crate::fs::computed::SettingsError;

use super::*;

/// How often the settings files are looked at.
pub(super) const POLL: Duration = Duration::from_millis(500);

/// What a `stat` of each settings file says (`None`: absent).
type Seen = Vec<Option<(u64, u64, u64, i64, i64, i64)>>;

fn look(files: &[PathBuf]) -> Seen {
    files
        .iter()
        .map(|p| {
            std::fs::metadata(p).ok().map(|m| {
                (
                    m.dev(),
                    m.ino(),
                    m.len(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime_nsec(),
                )
            })
        })
        .collect()
}

/// The thread that watches the settings files; it ends when `stop` is set.
pub(super) struct SettingsWatch {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: JoinHandle<()>,
}

pub(super) fn watch_settings(
    sources: Sources,
    fs: Arc<NormaFs>,
    notifier: Notifier,
) -> io::Result<SettingsWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let files = sources.files();
    let thread = std::thread::Builder::new()
        .name("normafs-settings".into())
        .spawn(move || {
            let mut seen = look(&files);
            let step = Duration::from_millis(50);
            loop {
                // A look every POLL; an unmount waits a step at most.
                let mut slept = Duration::ZERO;
                while slept < POLL && !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(step);
                    slept += step;
                }
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let now = look(&files);
                if now == seen {
                    continue;
                }
                // A file being written: wait until two looks agree (at most a few).
                let mut settled = now;
                for _ in 0..10 {
                    std::thread::sleep(Duration::from_millis(100));
                    let again = look(&files);
                    if again == settled {
                        break;
                    }
                    settled = again;
                }
                seen = settled;
                apply(&sources, &fs, &notifier);
            }
        })?;
    Ok(SettingsWatch { stop, thread })
}

/// Load the settings again and apply them (or say why they cannot be).
fn apply(sources: &Sources, fs: &NormaFs, notifier: &Notifier) {
    let old = fs.settings();
    let loaded = match sources.load() {
        Ok((cfg, warnings)) => {
            for w in warnings {
                tracing::warn!("settings: {w}");
            }
            for (name, was, now) in [
                ("ttl_ms", old.ttl_ms.to_string(), cfg.ttl_ms.to_string()),
                (
                    "cache_mb",
                    format!("{:?}", old.cache_mb),
                    format!("{:?}", cfg.cache_mb),
                ),
            ] {
                if was != now {
                    tracing::warn!(
                        "settings: {name} changed; a mount's own settings apply at its next \
                         mount"
                    );
                }
            }
            Ok(cfg)
        }
        Err(e) => {
            tracing::warn!(
                "settings: {e}; the mount goes on with the settings it had (every audit.txt \
                 says so until the file is mended)"
            );
            Err(SettingsError::of(&e))
        }
    };
    let ok = loaded.is_ok();
    let invals = fs.settings_changed(loaded);
    if ok {
        // One for the root's files besides the sessions'.
        let sessions = invals.len().saturating_sub(1);
        tracing::warn!(
            "settings changed ({}): the computed files of {sessions} session{} change",
            describe_files(&fs.settings().origins.files),
            if sessions == 1 { "" } else { "s" }
        );
        if let Ok(d) = crate::store::root::discover(fs.paths()) {
            for line in fs.settings().unknown_session_tables(&d.sessions) {
                tracing::warn!("settings: {line}");
            }
        }
    }
    for i in &invals {
        invalidate(fs, notifier, i);
    }
}

fn describe_files(files: &[PathBuf]) -> String {
    if files.is_empty() {
        return "now the defaults".to_string();
    }
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    format!("from {}", names.join(", "))
}
