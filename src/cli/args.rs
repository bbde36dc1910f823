//! The command line's words (SPEC 7): the commands, their arguments, and the settings every
//! command takes (one flag per key of [`config::keys`]).

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, Parser, Subcommand};

use crate::config::{self, Kind, Sources};

#[derive(Debug, Parser)]
#[command(
    name = "normafs",
    version,
    about = "AI-agent sessions as a filesystem: views, audits and control of Norma session roots",
    after_help = EXIT_CODES
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Cmd,
    /// The command line as parsed (a `mount.fuse3` call rewritten to `mount --daemon`).
    #[arg(skip)]
    pub(super) argv: Vec<std::ffi::OsString>,
}

/// Where the three backing directories are.
#[derive(Debug, Clone, Args)]
pub(super) struct RootArgs {
    /// Transcripts directory [default: ROOT/transcripts]
    #[arg(long, value_name = "DIR")]
    pub(super) transcripts: Option<PathBuf>,
    /// Memory directory [default: ROOT/memory]
    #[arg(long, value_name = "DIR")]
    pub(super) memory: Option<PathBuf>,
    /// Archive base directory; a session's archive root is DIR/<sid> [default: ROOT/noa]
    #[arg(long, value_name = "DIR")]
    pub(super) archives: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(super) enum Cmd {
    /// Mount a session root (stays in the foreground unless --daemon; Ctrl-C, SIGTERM or umount ends it)
    Mount(MountArgs),
    /// Write a built-in example root to a temporary directory and mount it at MNT: the one-command first run
    Demo(DemoArgs),
    /// Print a session's view.jsonl (or view.md) without mounting
    View(ViewArgs),
    /// Print a session's timeline.jsonl (or timeline.svg): every request's history and view
    /// tokens against the window, truncation, the nudge shown, the Compress calls answered
    Timeline(TimelineArgs),
    /// Print a session's view.html (or, without a session, the root's index.html): the page a
    /// browser shows from the mount
    Html(HtmlArgs),
    /// Print the settings each session gets, and where each value came from
    Config(ConfigArgs),
    /// Audit a root (or one session): exit 0 when no errors, 1 when there are errors
    Audit(AuditArgs),
    /// Run a control command without mounting; prints its result line
    #[command(
        after_help = "Session commands: compress {json} | compress START END SUMMARY… | rebuild | help; compress! … and rebuild! run on a session that looks live (its runtime may overwrite the result).\nUse `-` as SID for the root commands: reindex-memory | help.\nA command with a word that starts with `-`: put `--` before it (normafs ctl ROOT SID -- compress m00010 m00042 -- a summary)."
    )]
    Ctl(CtlArgs),
    /// Write a synthetic session root (for tests, demos, benchmarks)
    Gen(GenArgs),
}

/// The arguments of `normafs mount`.
#[derive(Debug, Args)]
pub(super) struct MountArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// The mount point: an existing, empty directory
    pub(super) mnt: PathBuf,
    /// Refuse every change (EROFS), ctl commands that would write included
    #[arg(long)]
    pub(super) read_only: bool,
    /// Answer every open and hand real files' reads and writes to the kernel (FUSE passthrough; root only, else opens are answered and real files read with pread). By default the kernel opens files itself and serves warm reads from its page cache
    #[arg(long, conflicts_with_all = ["no_passthrough", "no_open"])]
    pub(super) passthrough: bool,
    /// The default (accepted for scripts that pass it)
    #[arg(long, hide = true)]
    pub(super) no_passthrough: bool,
    /// The default (accepted for scripts that pass it)
    #[arg(long, hide = true)]
    pub(super) no_open: bool,
    /// Say how the mount is set up (passthrough, threads, inotify) and log failed requests
    #[arg(long)]
    pub(super) verbose: bool,
    /// Let other users reach the mount (FUSE allow_other)
    #[arg(long)]
    pub(super) allow_other: bool,
    /// Worker threads
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(super) threads: u16,
    /// Return once the mount is up (exit 0) or has failed; a background process serves it
    #[arg(long)]
    pub(super) daemon: bool,
    /// Write the log (warnings; with --verbose, failed requests) to FILE, appending
    #[arg(long, value_name = "FILE")]
    pub(super) log_file: Option<PathBuf>,
    /// Have fusermount3 unmount when normafs ends, even by kill -9 (FUSE auto_unmount)
    #[arg(long)]
    pub(super) auto_unmount: bool,
    /// Mount ROOT even when it has none of transcripts/, noa/ and memory/ yet (a root the runtime will fill)
    #[arg(long)]
    pub(super) allow_empty: bool,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs demo`.
#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// The mount point (created when missing)
    pub(super) mnt: PathBuf,
    /// Answer every open and use FUSE passthrough for real files (see `normafs mount --help`)
    #[arg(long, conflicts_with = "no_passthrough")]
    pub(super) passthrough: bool,
    /// The default (accepted for scripts that pass it)
    #[arg(long, hide = true)]
    pub(super) no_passthrough: bool,
}

/// The arguments of `normafs view`.
#[derive(Debug, Args)]
pub(super) struct ViewArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// The session id
    pub(super) sid: String,
    /// Print the materialized history (materialized.jsonl) instead
    #[arg(long, conflicts_with = "md")]
    pub(super) materialized: bool,
    /// Print view.md instead of view.jsonl
    #[arg(long)]
    pub(super) md: bool,
    /// The view of the request after the first N transcript messages: compression as the
    /// recorded Compress calls had left it then, refs and truncation as then
    #[arg(long, value_name = "N")]
    pub(super) at: Option<usize>,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs timeline`.
#[derive(Debug, Args)]
pub(super) struct TimelineArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// The session id (without it and with --svg: every session's peak, one bar each)
    pub(super) sid: Option<String>,
    /// Print the picture (SVG) instead of the JSON lines
    #[arg(long)]
    pub(super) svg: bool,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs html`.
#[derive(Debug, Args)]
#[command(
    after_help = "The pages are self-contained (inline style, no script, no network) and link to the files beside them in the mount by relative paths: saved as sessions/<sid>/view.html and index.html in a copy of the mount, their links work there too."
)]
pub(super) struct HtmlArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// The session id (without it: the root's index.html, every session in one table)
    pub(super) sid: Option<String>,
    /// The page of the request after the first N transcript messages (at/N/view.html)
    #[arg(long, value_name = "N", requires = "sid")]
    pub(super) at: Option<usize>,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs config`.
#[derive(Debug, Args)]
pub(super) struct ConfigArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// Only this session, every key (without it: the top level, then for each session
    /// its window and what differs from the top level)
    pub(super) sid: Option<String>,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs audit`.
#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// Only this session (the memory directory and bad names are still checked)
    pub(super) sid: Option<String>,
    /// Print JSON instead of audit.txt lines
    #[arg(long)]
    pub(super) json: bool,
    /// Leave out boundedness (view.over-window, view.over-truncate, nudge.ignored and each
    /// session's peak), which replays every session: what the mount's audit.txt shows
    #[arg(long)]
    pub(super) no_bounds: bool,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs ctl`.
#[derive(Debug, Args)]
pub(super) struct CtlArgs {
    /// The session root
    pub(super) root: PathBuf,
    /// The session id, or `-` for the root control file
    pub(super) sid: String,
    /// The command and its arguments (flags may come before or after it; after `--` every word
    /// is the command's, those that start with `-` too)
    #[arg(required = true, num_args = 1..)]
    pub(super) command: Vec<String>,
    #[command(flatten)]
    pub(super) dirs: RootArgs,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The arguments of `normafs gen`.
#[derive(Debug, Args)]
pub(super) struct GenArgs {
    /// Where to write it (must not exist or be empty)
    pub(super) root: PathBuf,
    /// Number of sessions
    #[arg(long, default_value_t = 3)]
    pub(super) sessions: usize,
    /// Messages per main transcript
    #[arg(long, default_value_t = 200)]
    pub(super) messages: usize,
    /// Seed: the same options give the same bytes
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Also add every kind of damage the audit catalogue names: one more session per kind a
    /// session can have (37, after the --sessions clean ones: `--sessions 5 --corrupt` writes
    /// 42) and damaged entries in the root itself
    #[arg(long)]
    pub(super) corrupt: bool,
    #[command(flatten)]
    pub(super) settings: SettingsArgs,
}

/// The exit codes, as `--help` states them.
const EXIT_CODES: &str = "Exit status: 0 ok; 1 findings (`audit` found errors) or a failed command (`ctl`); 2 usage or I/O (a bad argument, a directory that is no session root, an unreadable file).";

/// The settings arguments of a command (SPEC 10): `--config FILE`, `-o key=value,…` and one
/// flag per key of [`config::keys`], so that a key cannot be settable one way and not another.
#[derive(Debug, Clone, Default)]
pub(super) struct SettingsArgs(pub(super) Sources);

const SETTINGS_HELP: &str = "Settings (every key in docs/FORMATS.md; flags win over -o, -o over --config, --config over ROOT/.normafs.toml, that over $XDG_CONFIG_HOME/normafs/config.toml; `normafs config ROOT` shows what each session gets)";

impl Args for SettingsArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let mut cmd = cmd
            .next_help_heading(SETTINGS_HELP)
            .arg(
                Arg::new("config")
                    .long("config")
                    .value_name("FILE")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(
                        "A TOML file: any key below at the top level, and \
                         [sessions.\"<sid>\"] tables overriding noa keys for one session; \
                         read over ROOT/.normafs.toml and ~/.config/normafs/config.toml, \
                         which are read when present",
                    ),
            )
            .arg(
                Arg::new("options")
                    .short('o')
                    .value_name("KEY=VALUE,…")
                    .action(ArgAction::Append)
                    .help(
                        "Any key below as key=value, comma-separated; a list value is \
                         separated by ':' or given by repeating -o (-o parents=s2:s1). For \
                         mount also the mount's words: ro, allow_other, auto_unmount, noexec, \
                         threads=N, log_file=FILE, config=FILE, … (docs/USING.md, \"Mounting\")",
                    ),
            );
        // The mount's own keys (`ttl_ms`, `cache_mb`) are flags of the commands that mount.
        let mounts = !matches!(cmd.get_name(), "view" | "audit" | "ctl" | "gen");
        for k in config::keys().filter(|k| mounts || k.owner != config::KeyOwner::Mount) {
            let kind = k.kind;
            let mut arg = Arg::new(k.name)
                .long(k.flag())
                .value_name(kind.value_name())
                .help(format!("{} [default: {}]", k.help.trim(), k.default_text()))
                .value_parser(move |text: &str| kind.parse(text))
                .action(if kind.accumulates() {
                    ArgAction::Append
                } else {
                    ArgAction::Set
                });
            if matches!(kind, Kind::Count | Kind::Number | Kind::CountOrAuto) {
                // A negative count is a questionable value (a warning), not a usage error.
                arg = arg.allow_negative_numbers(true);
            }
            cmd = cmd.arg(arg);
        }
        cmd.next_help_heading(None::<&'static str>)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for SettingsArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut src = Sources {
            file: m.get_one::<PathBuf>("config").cloned(),
            options: m
                .get_many::<String>("options")
                .map(|v| v.cloned().collect())
                .unwrap_or_default(),
            ..Sources::default()
        };
        for k in config::keys() {
            let Ok(values) = m.try_get_many::<config::Value>(k.name) else {
                continue;
            };
            for v in values.into_iter().flatten() {
                src.flags
                    .insert(k.name, v.clone())
                    .map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, e))?;
            }
        }
        Ok(SettingsArgs(src))
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

/// Settings arguments that clap refused. Its message is clap's first line (`error: invalid
/// value 'abc' for '--window <N>': …`); the rest is clap's advice for a terminal.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.to_string().lines().next().unwrap_or_default())]
pub struct SettingsArgsError(pub clap::Error);

/// The settings arguments alone (`--config`, `-o`, the flags), parsed as every command parses
/// them: for tests and tools that need the command line's settings without a command.
pub fn parse_settings<I, T>(args: I) -> Result<Sources, SettingsArgsError>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::FromArgMatches as _;
    let cmd = SettingsArgs::augment_args(clap::Command::new("normafs").no_binary_name(true));
    let m = cmd.try_get_matches_from(args).map_err(SettingsArgsError)?;
    SettingsArgs::from_arg_matches(&m)
        .map(|a| a.0)
        .map_err(SettingsArgsError)
}
