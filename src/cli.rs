//! The command line (SPEC 7): parse once into validated settings, run, map errors to an exit
//! code. Every error is one line on stderr: `normafs: <message>`.

use std::io::{IsTerminal, Write};
use std::path::Path;

use clap::Parser;

use crate::audit::{self, PathStyle};
use crate::config::{self, Config, Sources};
use crate::store::ctl::{Runner, Scope};
use crate::store::root::{self, RootOverrides, RootPaths};
use crate::store::session;

mod args;
mod daemon;
mod mount_opts;

use args::*;
pub use args::{parse_settings, SettingsArgsError};

/// A failed command: its message and exit code.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: i32,
}

impl CliError {
    /// A usage or I/O error: exit 2.
    fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 2,
        }
    }
}

/// A root that `view`, `audit` and `ctl` read must look like one: a transcripts, archive or
/// memory directory (an empty root would silently report nothing).
fn check_root(paths: &RootPaths, root: &Path) -> Result<(), CliError> {
    if [&paths.transcripts, &paths.archives, &paths.memory]
        .iter()
        .any(|d| d.is_dir())
    {
        return Ok(());
    }
    Err(CliError::new(format!(
        "{} is not a session root: it has none of {}, {} and {}",
        root.display(),
        paths.transcripts.display(),
        paths.archives.display(),
        paths.memory.display()
    )))
}

fn resolve_root(root: &Path, dirs: &RootArgs) -> Result<RootPaths, CliError> {
    if !root.is_dir() {
        return Err(CliError::new(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    Ok(RootPaths::with_overrides(
        &abs(root),
        RootOverrides {
            transcripts: dirs.transcripts.as_deref().map(abs),
            memory: dirs.memory.as_deref().map(abs),
            archives: dirs.archives.as_deref().map(abs),
        },
    ))
}

/// What `normafs config` prints: the files read, the top level's keys, and each session's
/// (`every`: all its keys; else its window and the keys whose value differs from the top
/// level's), each `key = value  # where it came from`.
fn show_config(cfg: &Config, root: &Path, sids: &[String], every: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let files = &cfg.origins.files;
    let _ = writeln!(
        out,
        "# settings files read, lowest first: {}",
        if files.is_empty() {
            "none".to_string()
        } else {
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let absent: Vec<String> = config::default_files(Some(root))
        .into_iter()
        .filter(|p| !files.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    if !absent.is_empty() {
        let _ = writeln!(out, "# read when present: {}", absent.join(", "));
    }
    let line = |out: &mut String, name: &str, value: serde_json::Value, origin: String| {
        let _ = writeln!(out, "{name} = {value}  # {origin}");
    };
    let _ = writeln!(
        out,
        "\n# the top level (every session, unless its table says otherwise)"
    );
    let top = &cfg.noa;
    for k in config::keys() {
        let value = match k.owner {
            config::KeyOwner::Noa => top.get(k.name),
            config::KeyOwner::Mount => cfg.get_mount(k.name),
        };
        line(&mut out, k.name, value, cfg.origins.of(None, k.name));
    }
    for sid in sids {
        let noa = cfg.for_session(sid);
        let _ = writeln!(out, "\n[sessions.{sid:?}]");
        for k in config::keys().filter(|k| k.owner == config::KeyOwner::Noa) {
            let origin = cfg.origins.of(Some(sid), k.name);
            let differs =
                noa.get(k.name) != top.get(k.name) || origin != cfg.origins.of(None, k.name);
            if every || differs || k.name == "window" {
                let origin = if k.name == "window" && cfg.window_assumed(sid).is_some() {
                    format!("{origin}: assumed, no setting gives this session's window")
                } else {
                    origin
                };
                line(&mut out, k.name, noa.get(k.name), origin);
            }
        }
    }
    out
}

/// The root a command reads (it must look like one) and its settings, warnings printed for
/// `sid`'s too.
fn open_root(
    root: &Path,
    dirs: &RootArgs,
    settings: &ConfigArgs,
    sid: Option<&str>,
) -> Result<(RootPaths, Config), CliError> {
    let paths = resolve_root(root, dirs)?;
    check_root(&paths, root)?;
    Ok((paths, config(settings, root, sid)?))
}

/// Load the settings and print their warnings; with `sid`, also those about that session's.
/// A setting that cannot be used is a usage error (exit 2).
fn config(args: &ConfigArgs, root: &Path, sid: Option<&str>) -> Result<Config, CliError> {
    let sources = Sources {
        root: Some(root.to_path_buf()),
        ..args.0.clone()
    };
    let (cfg, warnings) = sources.load().map_err(|e| CliError {
        message: e.to_string(),
        code: 2,
    })?;
    let mut shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    if let Some(sid) = sid {
        for w in cfg.session_checked(sid).1 {
            let line = w.to_string();
            if !shown.contains(&line) {
                shown.push(line);
            }
        }
    }
    for line in shown {
        eprintln!("normafs: warning: {line}");
    }
    Ok(cfg)
}

fn check_session(paths: &RootPaths, sid: &str) -> Result<(), CliError> {
    root::valid_session_name(std::ffi::OsStr::new(sid))
        .map_err(|e| CliError::new(format!("{sid:?} is not a session name: {e}")))?;
    // Symbolic links are followed only as discovery follows them (SPEC 1, store::root).
    let transcript_link =
        root::is_escaping_link(&paths.transcripts, format!("{sid}.jsonl").as_ref(), false);
    let archive_link = root::is_escaping_link(&paths.archives, sid.as_ref(), true);
    let has_transcript = !transcript_link && paths.transcript_path(sid).is_file();
    let has_archive = !archive_link && paths.archive_root(sid).is_dir();
    if !has_transcript && !has_archive && (transcript_link || archive_link) {
        return Err(CliError::new(format!(
            "no session {sid}: {} is a symbolic link leading outside its directory (not followed)",
            if transcript_link {
                paths.transcript_path(sid)
            } else {
                paths.archive_root(sid)
            }
            .display()
        )));
    }
    if !has_transcript && !has_archive {
        return Err(CliError::new(format!(
            "no session {sid} (neither {} nor {} exists)",
            paths.transcript_path(sid).display(),
            paths.archive_root(sid).display()
        )));
    }
    Ok(())
}

/// A progress bar on a terminal, nothing otherwise.
fn progress(label: &'static str) -> impl FnMut(usize, usize) {
    let tty = std::io::stderr().is_terminal();
    let mut bar: Option<indicatif::ProgressBar> = None;
    move |done, total| {
        if !tty || total < 2 {
            return;
        }
        let b = bar.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed}")
            {
                b.set_style(style);
            }
            b.set_prefix(label);
            b
        });
        b.set_position(done as u64);
        if done >= total {
            b.finish_and_clear();
        }
    }
}

/// Write computed bytes to stdout, piece by piece through one buffer.
fn write_pieces(b: &crate::bytes::Bytes) -> Result<(), CliError> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let written = b
        .pieces()
        .iter()
        .try_for_each(|p| out.write_all(p))
        .and_then(|_| out.flush());
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::new(format!("cannot write to stdout: {e}"))),
    }
}

fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::new(format!("cannot write to stdout: {e}"))),
    }
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

fn mount(
    root: &Path,
    mnt: &Path,
    opts: crate::fuse::MountOptions,
    verbose: bool,
    log_file: Option<&Path>,
    paths: RootPaths,
    settings: &ConfigArgs,
) -> Result<i32, CliError> {
    let cfg = config(settings, root, None)?;
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
    let h = crate::fuse::mount_background(paths, cfg, opts, mnt)
        .map_err(|e| CliError::new(e.to_string()))?;
    let mut lines = vec![format!(
        "normafs: mounted {} at {} (pid {}, passthrough: {}); {}",
        root.display(),
        mnt.display(),
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
                root.join(config::ROOT_FILE).display(),
                config::user_file_shown()
            )
        } else {
            files_read.join(", ")
        },
        root.display()
    ));
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
        .map_err(|e| CliError::new(format!("cannot unmount {}: {e}", mnt.display())))?;
    match signal {
        Some(_) => eprintln!("normafs: unmounted {}", mnt.display()),
        None => eprintln!("normafs: {} was unmounted", mnt.display()),
    }
    Ok(0)
}

/// `normafs demo MNT`: example root in a temporary directory, mounted until Ctrl-C, then removed.
fn demo(mnt: &Path, no_passthrough: bool) -> Result<i32, CliError> {
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
        passthrough: !no_passthrough,
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

fn run(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Cmd::Demo {
            mnt,
            no_passthrough,
        } => demo(&mnt, no_passthrough),
        Cmd::Mount {
            root,
            mnt,
            read_only,
            no_passthrough,
            verbose,
            allow_other,
            threads,
            daemon,
            log_file,
            auto_unmount,
            allow_empty,
            mut dirs,
            mut settings,
        } => {
            // `-o ro,allow_other,threads=8,…`: the mount's own items; the rest are settings.
            let o = mount_opts::take(&mut settings.0.options)
                .map_err(|e| CliError::new(e.to_string()))?;
            settings.0.file = settings.0.file.or(o.config);
            dirs.transcripts = dirs.transcripts.or(o.transcripts);
            dirs.memory = dirs.memory.or(o.memory);
            dirs.archives = dirs.archives.or(o.archives);
            let log_file = log_file.or(o.log_file);
            // A typo of the root (its parent, a sibling) mounts an empty tree that looks
            // fine: refused, as view, audit and ctl refuse it, before any daemon starts.
            let paths = resolve_root(&root, &dirs)?;
            if !(allow_empty || o.allow_empty) {
                check_root(&paths, &root).map_err(|e| {
                    CliError::new(format!(
                        "{} (--allow-empty mounts it anyway, for a root that will be filled)",
                        e.message
                    ))
                })?;
            }
            let opts = crate::fuse::MountOptions {
                read_only: read_only || o.read_only,
                passthrough: !(no_passthrough || o.no_passthrough),
                allow_other: allow_other || o.allow_other,
                threads: usize::from(o.threads.unwrap_or(threads)),
                auto_unmount: auto_unmount || o.auto_unmount,
                no_exec: o.no_exec,
                source: Some(std::path::absolute(&root).unwrap_or_else(|_| root.clone())),
            };
            if daemon {
                let args: Vec<std::ffi::OsString> = cli
                    .argv
                    .iter()
                    .skip(1)
                    .filter(|a| a.as_os_str() != "--daemon")
                    .cloned()
                    .collect();
                return daemon::run(&args, log_file.as_deref());
            }
            mount(
                &root,
                &mnt,
                opts,
                verbose || o.verbose,
                log_file.as_deref(),
                paths,
                &settings,
            )
        }
        Cmd::View {
            root,
            sid,
            md,
            materialized,
            at,
            dirs,
            settings,
        } => {
            let (paths, cfg) = open_root(&root, &dirs, &settings, Some(&sid))?;
            check_session(&paths, &sid)?;
            let noa = cfg.for_session(&sid);
            use crate::noa::{render, views as view};
            let places = render::Places::Relative;
            let form = if materialized {
                view::Form::Materialized
            } else if md {
                view::Form::Markdown(&places)
            } else {
                view::Form::View
            };
            let path = &view::runtime_path;
            if let Some(n) = at {
                let now = chrono::Utc::now();
                let b = crate::timeline::view_at(&paths, &sid, &noa, n, now, path, form)
                    .map_err(|e| CliError::new(e.to_string()))?;
                write_pieces(&b)?;
                return Ok(0);
            }
            let s = session::load(&paths, &sid);
            if let Some(e) = &s.state.error {
                eprintln!("normafs: warning: {e}; showing the view without compression state");
            }
            let (state, _) = session::opened_state(&paths, &sid, &s.state.state, &noa);
            let p = view::Projection::new(s.messages());
            let files = view::Files::new(&p, &state, &noa, &sid, path);
            write_pieces(&files.bytes(form, &mut Default::default()))?;
            Ok(0)
        }
        Cmd::Timeline {
            root,
            sid,
            svg,
            dirs,
            settings,
        } => {
            let (paths, cfg) = open_root(&root, &dirs, &settings, sid.as_deref())?;
            let now = chrono::Utc::now();
            let out = match &sid {
                Some(sid) => {
                    check_session(&paths, sid)?;
                    let tl = crate::timeline::build(&paths, sid, &cfg.for_session(sid), now)
                        .map_err(|e| CliError::new(format!("{sid}: {e}")))?;
                    if svg {
                        tl.svg().into_bytes()
                    } else {
                        tl.to_jsonl()
                    }
                }
                None if svg => {
                    let d = root::discover(&paths)
                        .map_err(|e| CliError::new(format!("cannot list the root: {e}")))?;
                    let mut a = audit::Audit::default();
                    audit::audit_bounds_of(&mut a, &paths, &d.sessions, &cfg, PathStyle::Root);
                    crate::timeline::root_svg(
                        &crate::timeline::peaks_by_session(&d.sessions, &a.peaks),
                        cfg.noa.pressure_ratio,
                        cfg.noa.truncate_ratio,
                    )
                    .into_bytes()
                }
                None => return Err(CliError::new(
                    "name a session (timeline ROOT SID), or give --svg for every session's peak",
                )),
            };
            write_stdout(&out)?;
            Ok(0)
        }
        Cmd::Audit {
            root,
            sid,
            json,
            no_bounds,
            dirs,
            settings,
        } => {
            let (paths, cfg) = open_root(&root, &dirs, &settings, sid.as_deref())?;
            let d = root::discover(&paths)
                .map_err(|e| CliError::new(format!("cannot list the root: {e}")))?;
            // One session: its own files only, as its audit.txt (SPEC 9); memory findings and
            // bad names are the root's.
            let a = match &sid {
                Some(sid) => {
                    check_session(&paths, sid)?;
                    let mut a = audit::Audit::default();
                    let s = crate::store::session::load(&paths, sid);
                    let noa = cfg.for_session(sid);
                    audit::audit_session_in(&mut a, &s, &noa, PathStyle::Root, &paths);
                    if !no_bounds {
                        let now = chrono::Utc::now();
                        audit::audit_bounds_in(&mut a, &s, &noa, PathStyle::Root, &paths, now);
                    }
                    a.sort();
                    a
                }
                None => {
                    let mut progress = progress("audit");
                    if no_bounds {
                        audit::audit_root(&paths, &d, &cfg, PathStyle::Root, &mut progress)
                    } else {
                        audit::audit_root_bounded(&paths, &d, &cfg, PathStyle::Root, &mut progress)
                    }
                }
            };
            if json {
                let mut s = serde_json::to_string_pretty(&a.to_json()).unwrap_or_default();
                s.push('\n');
                write_stdout(s.as_bytes())?;
            } else {
                write_stdout(a.to_text().as_bytes())?;
            }
            Ok(if a.has_errors() { 1 } else { 0 })
        }
        Cmd::Ctl {
            root,
            sid,
            command,
            dirs,
            settings,
        } => {
            let (paths, cfg) = open_root(
                &root,
                &dirs,
                &settings,
                (sid != "-").then_some(sid.as_str()),
            )?;
            let (scope, noa) = if sid == "-" {
                (Scope::Root, cfg.noa.clone())
            } else {
                check_session(&paths, &sid)?;
                let noa = cfg.for_session(&sid);
                (Scope::Session(sid), noa)
            };
            let line = command.join(" ");
            let runner = Runner {
                paths: &paths,
                cfg: &noa,
                read_only: false,
            };
            let rec = runner.run(&scope, &line, 1, chrono::Utc::now());
            if rec.ok {
                let mut s = rec.to_json().to_string();
                s.push('\n');
                write_stdout(s.as_bytes())?;
                Ok(0)
            } else {
                Err(CliError {
                    message: rec.message.replace('\n', " "),
                    code: 1,
                })
            }
        }
        Cmd::Config {
            root,
            sid,
            dirs,
            settings,
        } => {
            let (paths, cfg) = open_root(&root, &dirs, &settings, sid.as_deref())?;
            let sids: Vec<String> = match &sid {
                Some(sid) => {
                    check_session(&paths, sid)?;
                    vec![sid.clone()]
                }
                None => {
                    root::discover(&paths)
                        .map_err(|e| CliError::new(format!("cannot list the root: {e}")))?
                        .sessions
                }
            };
            write_stdout(show_config(&cfg, &root, &sids, sid.is_some()).as_bytes())?;
            Ok(0)
        }
        Cmd::Gen {
            root,
            sessions,
            messages,
            seed,
            corrupt,
            settings,
        } => {
            let cfg = config(&settings, &root, None)?;
            let opts = crate::gen::GenOptions {
                sessions,
                messages,
                seed,
                corrupt,
                config: cfg.noa,
                ..crate::gen::GenOptions::default()
            };
            let report = crate::gen::generate(&root, &opts, &mut progress("gen"))
                .map_err(|e| CliError::new(e.to_string()))?;
            eprintln!("normafs: {}", report.summary());
            Ok(0)
        }
    }
}

/// A clap error on one line: its first line, with the arguments it lists after it (a missing
/// argument is named), and the usage line's command for `--help`.
fn one_line(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    let rest: Vec<&str> = lines.collect();
    let usage = rest
        .iter()
        .find_map(|l| l.strip_prefix("Usage: "))
        .and_then(|u| {
            let words: Vec<&str> = u
                .split_whitespace()
                .take_while(|w| !w.starts_with(['<', '[', '-']))
                .collect();
            (!words.is_empty()).then(|| words.join(" "))
        })
        .unwrap_or_else(|| "normafs".into());
    let named: Vec<&str> = rest
        .iter()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more"))
        .copied()
        .collect();
    let mut out = first;
    if out.ends_with(':') && !named.is_empty() {
        out.push(' ');
        out.push_str(&named.join(" "));
    }
    format!("{out} (see `{usage} --help`)")
}

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    // Before any thread: the pipe of a waiting `--daemon` command, if we serve for one.
    let _ = daemon::is_served();
    let argv = helper_argv(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(&argv) {
        Ok(mut c) => {
            c.argv = argv;
            c
        }
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                };
            }
            let e = CliError::new(one_line(&e.render().to_string()));
            daemon::failed(&e);
            eprintln!("normafs: {}", e.message);
            return e.code;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            daemon::failed(&e);
            eprintln!("normafs: {}", e.message);
            e.code
        }
    }
}

/// `mount -t fuse.normafs ROOT MNT -o …` runs `normafs ROOT MNT -o …` (through
/// `mount.fuse3`), which is `normafs mount --daemon ROOT MNT -o …`: the first argument is an
/// existing path, not a command.
fn helper_argv(mut argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let Some(first) = argv.get(1) else {
        return argv;
    };
    let is_command = Cli::command()
        .get_subcommands()
        .any(|c| c.get_name() == first || c.get_all_aliases().any(|a| a == first))
        || first == "help";
    let path_like = first.to_string_lossy().contains('/') || Path::new(first).exists();
    if !is_command && !first.to_string_lossy().starts_with('-') && path_like {
        argv.splice(1..1, ["mount".into(), "--daemon".into()]);
    }
    argv
}
