//! The command line (SPEC 7): parse once into validated settings, run, map errors to an exit
//! code. Every error is one line on stderr: `normafs: <message>`. [`run`] hands each command
//! to a function of its own: `mount` and `demo` in `cli/mount.rs`, the others below.

use std::io::{IsTerminal, Write};
use std::path::Path;

use clap::Parser;

use crate::audit::{self, PathStyle};
use crate::config::{self, Config};
use crate::noa::{render, views};
use crate::store::ctl::{Runner, Scope};
use crate::store::session;

mod args;
mod daemon;
mod mount;
mod mount_opts;
mod root;

use args::*;
pub use args::{parse_settings, SettingsArgsError};
use root::{check_session, discover, load_settings, open_root};

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

/// Run the parsed command; `Ok` holds the exit code.
fn run(cli: Cli) -> Result<i32, CliError> {
    match cli.command {
        Cmd::Mount(a) => mount::mount(a, &cli.argv),
        Cmd::Demo(a) => mount::demo(a),
        Cmd::View(a) => view(a),
        Cmd::Timeline(a) => timeline(a),
        Cmd::Html(a) => html(a),
        Cmd::Config(a) => config(a),
        Cmd::Audit(a) => audit(a),
        Cmd::Ctl(a) => ctl(a),
        Cmd::Gen(a) => gen(a),
    }
}

/// `normafs view ROOT SID`: the session's view.jsonl, view.md or materialized.jsonl, now or
/// (`--at N`) as it was after N transcript messages.
fn view(a: ViewArgs) -> Result<i32, CliError> {
    let (paths, cfg) = open_root(&a.root, &a.dirs, &a.settings, Some(&a.sid))?;
    check_session(&paths, &a.sid)?;
    let noa = cfg.for_session(&a.sid);
    let places = render::Places::Relative;
    let form = if a.materialized {
        views::Form::Materialized
    } else if a.md {
        views::Form::Markdown(&places)
    } else {
        views::Form::View
    };
    let path = &views::runtime_path;
    if let Some(n) = a.at {
        let now = chrono::Utc::now();
        let b = crate::timeline::view_at(&paths, &a.sid, &noa, n, now, path, form)
            .map_err(|e| CliError::new(e.to_string()))?;
        write_bytes(&b)?;
        return Ok(0);
    }
    let s = session::load(&paths, &a.sid);
    if let Some(e) = &s.state.error {
        eprintln!("normafs: warning: {e}; showing the view without compression state");
    }
    let (state, _) = session::opened_state(&paths, &a.sid, &s.state.state, &noa);
    let p = views::Projection::new(s.messages());
    let files = views::Files::new(&p, &state, &noa, &a.sid, path);
    if matches!(form, views::Form::View) {
        // Written as it is made: a large session's view is not held whole.
        write_stdout_with(|out| files.write_view(out))?;
        return Ok(0);
    }
    let b = files.bytes(form, &mut Default::default());
    write_bytes(&b)?;
    Ok(0)
}

/// `normafs timeline ROOT [SID]`: a session's timeline.jsonl or timeline.svg; without a
/// session, `--svg` draws every session's peak.
fn timeline(a: TimelineArgs) -> Result<i32, CliError> {
    let (paths, cfg) = open_root(&a.root, &a.dirs, &a.settings, a.sid.as_deref())?;
    let now = chrono::Utc::now();
    let out = match &a.sid {
        Some(sid) => {
            check_session(&paths, sid)?;
            let tl = crate::timeline::build(&paths, sid, &cfg.for_session(sid), now)
                .map_err(|e| CliError::new(format!("{sid}: {e}")))?;
            if a.svg {
                tl.svg().into_bytes()
            } else {
                tl.to_jsonl()
            }
        }
        None if a.svg => {
            let d = discover(&paths)?;
            let mut found = audit::Audit::default();
            audit::audit_bounds_of(&mut found, &paths, &d.sessions, &cfg, PathStyle::Root);
            crate::timeline::root_svg(
                &crate::timeline::peaks_by_session(&d.sessions, &found.peaks),
                cfg.noa.pressure_ratio,
                cfg.noa.truncate_ratio,
            )
            .into_bytes()
        }
        None => {
            return Err(CliError::new(
                "name a session (timeline ROOT SID), or give --svg for every session's peak",
            ))
        }
    };
    write_stdout([&out[..]])?;
    Ok(0)
}

/// `normafs html ROOT [SID] [--at N]`: a session's view.html (at/N/view.html), or the root's
/// index.html.
fn html(a: HtmlArgs) -> Result<i32, CliError> {
    let (paths, cfg) = open_root(&a.root, &a.dirs, &a.settings, a.sid.as_deref())?;
    let now = chrono::Utc::now();
    let path = &views::runtime_path;
    let out = match (&a.sid, a.at) {
        (Some(sid), Some(n)) => {
            check_session(&paths, sid)?;
            crate::html::page_at(&paths, &cfg, sid, n, now, path)
                .map_err(|e| CliError::new(format!("{sid}: {e}")))?
        }
        (Some(sid), None) => {
            check_session(&paths, sid)?;
            crate::html::session_page(&paths, &cfg, sid, now, path)
        }
        (None, _) => {
            discover(&paths)?;
            let page = crate::html::index_page(&paths, &cfg, now)
                .map_err(|e| CliError::new(format!("{}: {e}", a.root.display())))?;
            page.into_bytes().into()
        }
    };
    write_bytes(&out)?;
    Ok(0)
}

/// `normafs audit ROOT [SID]`: the root's findings (or one session's, as its audit.txt has
/// them); exit 1 when any is an error.
fn audit(a: AuditArgs) -> Result<i32, CliError> {
    let (paths, cfg) = open_root(&a.root, &a.dirs, &a.settings, a.sid.as_deref())?;
    let d = discover(&paths)?;
    // One session: its own files only, as its audit.txt (SPEC 9); memory findings and
    // bad names are the root's.
    let found = match &a.sid {
        Some(sid) => {
            check_session(&paths, sid)?;
            let mut found = audit::Audit::default();
            let s = session::load(&paths, sid);
            let noa = cfg.for_session(sid);
            audit::audit_session_in(&mut found, &s, &noa, PathStyle::Root, &paths);
            if !a.no_bounds {
                let now = chrono::Utc::now();
                audit::audit_bounds_in(&mut found, &s, &noa, PathStyle::Root, &paths, now);
            }
            found.sort();
            found
        }
        None => {
            let mut progress = progress("audit");
            let how = audit::How {
                bounds: !a.no_bounds,
                ..audit::How::new(PathStyle::Root)
            };
            audit::audit_root(&paths, &d, &cfg, how, &mut progress)
        }
    };
    if a.json {
        let mut s = serde_json::to_string_pretty(&found.to_json()).unwrap_or_default();
        s.push('\n');
        write_stdout([s.as_bytes()])?;
    } else {
        write_stdout([found.to_text().as_bytes()])?;
    }
    Ok(if found.has_errors() { 1 } else { 0 })
}

/// `normafs ctl ROOT SID COMMAND…`: one control command, run as the session's ctl file (or
/// the root's, for `-`) runs it; its result line, or its message and exit 1.
fn ctl(a: CtlArgs) -> Result<i32, CliError> {
    let at_root = a.sid == "-";
    let (paths, cfg) = open_root(
        &a.root,
        &a.dirs,
        &a.settings,
        (!at_root).then_some(a.sid.as_str()),
    )?;
    let (scope, noa) = if at_root {
        (Scope::Root, cfg.noa.clone())
    } else {
        check_session(&paths, &a.sid)?;
        let noa = cfg.for_session(&a.sid);
        (Scope::Session(a.sid), noa)
    };
    let line = a.command.join(" ");
    let runner = Runner {
        paths: &paths,
        cfg: &noa,
        read_only: false,
    };
    let rec = runner.run(&scope, &line, 1, chrono::Utc::now());
    if rec.ok {
        let mut s = rec.to_json().to_string();
        s.push('\n');
        write_stdout([s.as_bytes()])?;
        Ok(0)
    } else {
        // As written: a refused batch's panel is several lines.
        Err(CliError {
            message: rec.message.trim_end().to_string(),
            code: 1,
        })
    }
}

/// `normafs config ROOT [SID]`: the settings each session gets and where they came from.
fn config(a: ConfigArgs) -> Result<i32, CliError> {
    let (paths, cfg) = open_root(&a.root, &a.dirs, &a.settings, a.sid.as_deref())?;
    let sids: Vec<String> = match &a.sid {
        Some(sid) => {
            check_session(&paths, sid)?;
            vec![sid.clone()]
        }
        None => discover(&paths)?.sessions,
    };
    write_stdout([show_config(&cfg, &a.root, &sids, a.sid.is_some()).as_bytes()])?;
    Ok(0)
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

/// `normafs gen ROOT`: a synthetic session root.
fn gen(a: GenArgs) -> Result<i32, CliError> {
    let cfg = load_settings(&a.settings, &a.root, None)?;
    let opts = crate::gen::GenOptions {
        sessions: a.sessions,
        messages: a.messages,
        seed: a.seed,
        corrupt: a.corrupt,
        config: cfg.noa,
        ..crate::gen::GenOptions::default()
    };
    let report = crate::gen::generate(&a.root, &opts, &mut progress("gen"))
        .map_err(|e| CliError::new(e.to_string()))?;
    eprintln!("normafs: {}", report.summary());
    Ok(0)
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

/// Write to stdout, piece by piece through one buffer.
fn write_stdout<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Result<(), CliError> {
    write_stdout_with(|out| pieces.into_iter().try_for_each(|p| out.write_all(p)))
}

/// `b` to standard output.
fn write_bytes(b: &crate::bytes::Bytes) -> Result<(), CliError> {
    write_stdout_with(|out| b.each_piece(|p| out.write_all(p)))
}

/// Standard output, buffered, to `write`; a closed pipe is no error.
fn write_stdout_with(
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), CliError> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let written = write(&mut out).and_then(|_| out.flush());
    match written {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::new(format!("cannot write to stdout: {e}"))),
    }
}
