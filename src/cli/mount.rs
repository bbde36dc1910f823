//! The commands that mount: `mount` (in the foreground, or served by a process of its own
//! with `--daemon`) and `demo`, and the logging they set up.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::Path;

use super::args::{DemoArgs, MountArgs, SettingsArgs};
use super::root::{check_root, load_settings, resolve_root};
use super::{daemon, mount_opts, CliError};
use crate::config::{self, Config};
use crate::store::root::RootPaths;

/// `normafs mount ROOT MNT`: the `-o` items of the mount merged with its flags, the root
/// checked, then served here or, with `--daemon`, by a process of its own.
pub(super) fn mount(mut a: MountArgs, argv: &[OsString]) -> Result<i32, CliError> {
    // `-o ro,allow_other,threads=8,…`: the mount's own items; the rest are settings.
    let o =
        mount_opts::take(&mut a.settings.0.options).map_err(|e| CliError::new(e.to_string()))?;
    a.settings.0.file = a.settings.0.file.or(o.config);
    a.dirs.transcripts = a.dirs.transcripts.or(o.transcripts);
    a.dirs.memory = a.dirs.memory.or(o.memory);
    a.dirs.archives = a.dirs.archives.or(o.archives);
    let log_file = a.log_file.or(o.log_file);
    // A typo of the root (its parent, a sibling) mounts an empty tree that looks
    // fine: refused, as view, audit and ctl refuse it, before any daemon starts.
    let paths = resolve_root(&a.root, &a.dirs)?;
    if !(a.allow_empty || o.allow_empty) {
        check_root(&paths, &a.root).map_err(|e| {
            CliError::new(format!(
                "{} (--allow-empty mounts it anyway, for a root that will be filled)",
                e.message
            ))
        })?;
    }
    inside_root(&a.root, &paths, &a.mnt)?;
    let opts = crate::fuse::MountOptions {
        read_only: a.read_only || o.read_only,
        passthrough: a.passthrough || o.passthrough,
        no_open: !(a.passthrough || o.passthrough),
        allow_other: a.allow_other || o.allow_other,
        threads: usize::from(o.threads.unwrap_or(a.threads)),
        auto_unmount: a.auto_unmount || o.auto_unmount,
        no_exec: o.no_exec,
        source: Some(std::path::absolute(&a.root).unwrap_or_else(|_| a.root.clone())),
        computed_files: Vec::new(),
        settings: None,
    };
    if a.daemon {
        let args: Vec<OsString> = argv
            .iter()
            .skip(1)
            .filter(|w| w.as_os_str() != "--daemon")
            .cloned()
            .collect();
        return daemon::run(&args, log_file.as_deref());
    }
    serve(
        &a.root,
        &a.mnt,
        opts,
        a.verbose || o.verbose,
        log_file.as_deref(),
        paths,
        &a.settings,
    )
}

/// A mount point inside the root it mounts is refused: whatever walks the root (`grep -r`,
/// `find`, `du`, a backup) would descend into the mount and read every session again through
/// it, and a mount of the root from inside itself would show itself.
fn inside_root(root: &Path, paths: &RootPaths, mnt: &Path) -> Result<(), CliError> {
    let (Ok(r), Ok(m)) = (root.canonicalize(), mnt.canonicalize()) else {
        // A missing one is said by the mount's own checks.
        return Ok(());
    };
    // Inside a backing directory: the mount's own check names which.
    let in_backing = [&paths.transcripts, &paths.memory, &paths.archives]
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .any(|d| m.starts_with(d));
    if m.starts_with(&r) && !in_backing {
        return Err(CliError::new(format!(
            "mount point {} is inside the session root {}: tools that walk the root (grep -r, \
             find, du, backups) would descend into the mount; choose a mount point outside it",
            m.display(),
            r.display()
        )));
    }
    Ok(())
}

/// Mount in the foreground until a signal or an unmount ends it; a waiting `--daemon` command
/// is told once the mount is up.
fn serve(
    root: &Path,
    mnt: &Path,
    opts: crate::fuse::MountOptions,
    verbose: bool,
    log_file: Option<&Path>,
    paths: RootPaths,
    settings: &SettingsArgs,
) -> Result<i32, CliError> {
    // Named absolutely in what is printed, as the unmount hint beside them.
    let (root_abs, mnt_abs) = (
        std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf()),
        std::path::absolute(mnt).unwrap_or_else(|_| mnt.to_path_buf()),
    );
    let cfg = load_settings(settings, &root_abs, None)?;
    // Watched while mounted: a change of a settings file applies to the sessions it concerns.
    let mut opts = opts;
    opts.settings = Some(crate::config::Sources {
        root: Some(root_abs.clone()),
        ..settings.0.clone()
    });
    let ttl_ms = cfg.ttl_ms;
    let files_read: Vec<String> = cfg
        .origins
        .files
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    init_logging(verbose, log_file)?;
    // Before any thread exists, so that every thread leaves these signals to `wait_for_exit`.
    crate::fuse::block_exit_signals();
    let threads = opts.threads;
    let unknown = super::root::unknown_tables(&paths, &cfg);
    let h = crate::fuse::mount_background(paths, cfg, opts, mnt)
        .map_err(|e| CliError::new(e.to_string()))?;
    let mut lines = vec![format!(
        "normafs: mounted {} at {} (pid {}, passthrough: {}); {}",
        root_abs.display(),
        mnt_abs.display(),
        std::process::id(),
        h.passthrough_summary(),
        if daemon::is_served() {
            format!(
                "`{}` or kill {} unmounts",
                h.unmount_command(),
                std::process::id()
            )
        } else {
            "Ctrl-C to unmount".to_string()
        }
    )];
    lines.push(format!(
        "normafs: settings from {}; `normafs config {}` shows what each session gets",
        if files_read.is_empty() {
            format!(
                "the defaults (no {} or {})",
                root_abs.join(config::ROOT_FILE).display(),
                config::user_file_shown()
            )
        } else {
            files_read.join(", ")
        },
        root_abs.display()
    ));
    for line in unknown {
        lines.push(format!("normafs: warning: {line}"));
    }
    for (dir, fs) in h.blind_dirs() {
        lines.push(format!(
            "normafs: {} is on {fs}, where inotify misses changes made elsewhere: what is in \
             it is served with the attribute TTL ({ttl_ms} ms, --ttl-ms)",
            dir.display()
        ));
    }
    if verbose {
        lines.push(format!("normafs: {}", h.mounted_via()));
        lines.push(format!("normafs: passthrough {}", h.passthrough_note()));
        lines.push(format!(
            "normafs: {threads} worker threads, max_write {} bytes, attribute TTL {ttl_ms} ms, \
             inotify watching {} directories",
            h.fs().max_write(),
            h.watches()
        ));
    }
    let lines = lines.join("\n");
    eprintln!("{lines}");
    // A waiting `--daemon` command prints them and returns.
    daemon::ready(&lines);
    let signal = crate::fuse::wait_for_exit(&h);
    h.unmount()
        .map_err(|e| CliError::new(format!("cannot unmount {}: {e}", mnt_abs.display())))?;
    match signal {
        Some(_) => eprintln!("normafs: unmounted {}", mnt_abs.display()),
        None => eprintln!("normafs: {} was unmounted", mnt_abs.display()),
    }
    Ok(0)
}

/// `normafs demo MNT`: example root in a temporary directory, mounted until Ctrl-C, then removed.
pub(super) fn demo(a: DemoArgs) -> Result<i32, CliError> {
    let mnt = a.mnt.as_path();
    let created_mnt = if mnt.exists() {
        false
    } else {
        std::fs::create_dir_all(mnt)
            .map_err(|e| CliError::new(format!("cannot create {}: {e}", mnt.display())))?;
        true
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let root = std::env::temp_dir().join(format!("normafs-demo-{}-{nanos:x}", std::process::id()));
    let cleanup = |root: &Path| {
        let _ = std::fs::remove_dir_all(root);
        if created_mnt {
            let _ = std::fs::remove_dir(mnt);
        }
    };
    let cfg = Config::default();
    let d = match crate::demo::write_demo_root(&root, &cfg.noa) {
        Ok(d) => d,
        Err(e) => {
            cleanup(&root);
            return Err(CliError::new(format!("cannot write the demo root: {e}")));
        }
    };
    init_logging(false, None)?;
    crate::fuse::block_exit_signals();
    let opts = crate::fuse::MountOptions {
        passthrough: a.passthrough,
        no_open: !a.passthrough,
        source: Some(root.clone()),
        ..crate::fuse::MountOptions::default()
    };
    let h = match crate::fuse::mount_background(RootPaths::from_root(&root), cfg, opts, mnt) {
        Ok(h) => h,
        Err(e) => {
            cleanup(&root);
            return Err(CliError::new(e.to_string()));
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(crate::demo::instructions(&d, mnt).as_bytes());
    let _ = out.flush();
    drop(out);
    let _ = crate::fuse::wait_for_exit(&h);
    let unmounted = h.unmount();
    cleanup(&root);
    unmounted.map_err(|e| CliError::new(format!("cannot unmount {}: {e}", mnt.display())))?;
    eprintln!(
        "normafs: unmounted {} and removed {}",
        mnt.display(),
        root.display()
    );
    Ok(0)
}

/// Logs on stderr (or appended to `file`): warnings, or with `--verbose` also failed
/// requests; `RUST_LOG` wins.
fn init_logging(verbose: bool, file: Option<&Path>) -> Result<(), CliError> {
    let default = if verbose {
        "normafs=info"
    } else {
        "normafs=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match file {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    CliError::new(format!("cannot open the log file {}: {e}", p.display()))
                })?;
            b.with_writer(std::sync::Mutex::new(f))
                .with_ansi(false)
                .try_init()
        }
        None => b
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    Ok(())
}
