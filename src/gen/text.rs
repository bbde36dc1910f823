//! Deterministic content for the generator: a splitmix64 PRNG and realistic agent-session text
//! (prompts, Markdown answers, thinking, tool inputs and outputs, summaries), integer-only so the
//! same seed gives the same bytes everywhere.

use serde_json::{json, Value};

/// splitmix64: tiny, fast, and good enough for synthetic data.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

/// FNV-1a of a string, to derive independent streams from names.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// An independent stream for `name` under `seed` (one per session, per damage, ...).
    pub fn derive(seed: u64, name: &str) -> Rng {
        let mut r = Rng::new(seed ^ fnv1a(name).rotate_left(17));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo).saturating_add(1))
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs.get(self.below(xs.len())).copied().unwrap_or("")
    }

    /// `n` lowercase hex digits.
    pub fn hex(&mut self, n: usize) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(n);
        let mut bits = 0u64;
        for i in 0..n {
            if i % 16 == 0 {
                bits = self.next_u64();
            }
            s.push(char::from(HEX[(bits & 15) as usize]));
            bits >>= 4;
        }
        s
    }

    /// A 128-bit random hex id, as the runtime writes record uuids.
    pub fn uuid(&mut self) -> String {
        self.hex(32)
    }

    fn alphabet(&mut self, n: usize, alphabet: &[u8]) -> String {
        (0..n)
            .map(|_| char::from(alphabet[self.below(alphabet.len())]))
            .collect()
    }

    /// A provider-style tool_use id: `toolu_01` and 22 base62 characters.
    pub fn tool_id(&mut self) -> String {
        const B62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        format!("toolu_01{}", self.alphabet(22, B62))
    }

    /// A base64-looking thinking signature.
    pub fn signature(&mut self) -> String {
        const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let n = self.range(20, 75) * 4;
        let mut s = format!("Eq{}", self.alphabet(n, B64));
        s.push_str("==");
        s
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

const PATHS: &[&str] = &[
    "src/store/journal.rs",
    "src/noa/view.rs",
    "src/fs/inode.rs",
    "src/fs/handle.rs",
    "src/format/state.rs",
    "src/format/archive.rs",
    "src/cli.rs",
    "src/main.rs",
    "build.rs",
    "Cargo.toml",
    "tests/mount.rs",
    "tests/journal.rs",
    "docs/README.md",
    "scripts/bench.sh",
    "ci/nightly.yml",
    "web/src/App.tsx",
    "web/src/api/client.ts",
    "db/migrations/0042_add_session_index.sql",
    "tools/release.py",
    "benches/view.rs",
];

const IDENTS: &[&str] = &[
    "journal", "state", "inode", "handle", "view", "block", "archive", "entry", "offset", "cursor",
    "buffer", "path", "root", "session", "record", "line", "token", "summary", "tier", "lock",
    "batch", "snapshot", "index", "reader", "writer",
];

const FNS: &[&str] = &[
    "append_line",
    "load_state",
    "materialize",
    "flush_dir",
    "open_handle",
    "parse_frontmatter",
    "render_index",
    "assign_refs",
    "write_atomic",
    "replay_batch",
    "lookup_inode",
    "read_chunk",
    "apply_batch",
    "scan_memory",
    "next_block_id",
];

const CRATES: &[&str] = &[
    "serde",
    "serde_json",
    "fuser",
    "regex",
    "clap",
    "sha2",
    "memchr",
    "indexmap",
    "tracing",
    "thiserror",
    "chrono",
    "libc",
];

const TOPICS: &[&str] = &[
    "build fixes",
    "journal fsync",
    "flaky mount test",
    "inode cache",
    "CI pipeline",
    "memory index",
    "release notes",
    "error mapping",
    "benchmarks",
    "state rebuild",
    "archive format",
    "CLI flags",
    "국제화 (i18n)",
    "로그 정리",
    "dependency bump",
];

const KOREAN: &[&str] = &[
    "빌드가 계속 실패해요.",
    "테스트를 다시 실행해 주세요.",
    "로그를 확인했어요.",
    "경로 처리에 버그가 있는 것 같아요.",
    "좋아요, 고마워요!",
    "이 함수는 너무 길어요. 나눠 주세요.",
    "한국어 주석은 그대로 두세요.",
    "배포 전에 한 번 더 확인해 주세요.",
    "캐시가 무효화되지 않는 것 같습니다.",
];

const EMOJI: &[&str] = &["🎉", "✅", "🙏", "🚀", "🔥", "👀", "🐛", "📦", "⚠️", "🧪"];

const COMMANDS: &[&str] = &[
    "cargo test --lib",
    "cargo test --test journal",
    "cargo build --release",
    "cargo clippy --all-targets -- -D warnings",
    "git status --short",
    "git log --oneline -n 20",
    "git diff --stat",
    "ls -la target/debug",
    "npm run lint",
    "python3 tools/release.py --dry-run",
    "make bench",
    "du -sh ~/.norma",
];

fn path(rng: &mut Rng) -> &'static str {
    rng.pick(PATHS)
}

fn ident(rng: &mut Rng) -> &'static str {
    rng.pick(IDENTS)
}

fn func(rng: &mut Rng) -> &'static str {
    rng.pick(FNS)
}

pub fn topic(rng: &mut Rng) -> String {
    rng.pick(TOPICS).to_string()
}

/// One line of source code (Rust mostly), sometimes with a Korean comment.
pub fn code_line(rng: &mut Rng) -> String {
    let (a, b, f) = (ident(rng), ident(rng), func(rng));
    match rng.below(12) {
        0 => format!("pub fn {f}({a}: &mut {}) -> Result<(), Error> {{", cap(b)),
        1 => format!("    let {a} = {f}(&{b})?;"),
        2 => format!("    if {a}.is_empty() {{"),
        3 => "        return Ok(());".to_string(),
        4 => "    }".to_string(),
        5 => format!(
            "    // {} the {a} before the {b} is written",
            rng.pick(&["flush", "check", "lock", "copy"])
        ),
        6 => format!("    // {}", rng.pick(KOREAN)),
        7 => format!("    {a}.{f}({})?;", rng.range(0, 4096)),
        8 => format!("use crate::{a}::{{{}, {}}};", cap(b), cap(ident(rng))),
        9 => format!("    tracing::debug!({a} = ?{b}, \"{f} done\");"),
        10 => String::new(),
        _ => format!(
            "    let {a}_len = {b}.len().saturating_sub({});",
            rng.range(1, 64)
        ),
    }
}

fn cap(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// One line of build, test or service output.
pub fn log_line(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => format!(
            "   Compiling {} v{}.{}.{}",
            rng.pick(CRATES),
            rng.range(0, 4),
            rng.range(0, 30),
            rng.range(0, 12)
        ),
        1 | 2 => format!(
            "test {}::{}_{} ... {}",
            ident(rng),
            func(rng),
            ident(rng),
            if rng.percent(92) { "ok" } else { "FAILED" }
        ),
        3 => format!("warning: unused variable: `{}`", ident(rng)),
        4 => format!(
            "  --> {}:{}:{}",
            path(rng),
            rng.range(1, 900),
            rng.range(1, 80)
        ),
        5 => format!(
            "2026-11-0{}T{:02}:{:02}:{:02}Z INFO request id={} took {}ms",
            rng.range(1, 9),
            rng.range(0, 23),
            rng.range(0, 59),
            rng.range(0, 59),
            rng.hex(12),
            rng.range(1, 2500)
        ),
        6 => format!(
            "error[E0{}]: mismatched types in `{}`",
            rng.range(200, 799),
            func(rng)
        ),
        7 => format!(
            "    Finished `{}` profile [optimized] target(s) in {}.{:02}s",
            rng.pick(&["dev", "release", "test"]),
            rng.range(0, 90),
            rng.range(0, 99)
        ),
        _ => format!(
            "{} {} {}",
            rng.pick(&["note:", "help:", "info:"]),
            ident(rng),
            rng.pick(KOREAN)
        ),
    }
}

/// A Markdown-ish sentence about the work.
pub fn sentence(rng: &mut Rng) -> String {
    let (p, f, a) = (path(rng), func(rng), ident(rng));
    match rng.below(10) {
        0 => format!("`{f}` in `{p}` does not flush the {a} before returning."),
        1 => format!("The failing test is `{a}::{f}`; it expects the {a} to survive a restart."),
        2 => format!("I changed `{f}` to take the lock first, then write the {a}."),
        3 => format!("`{p}` has {} call sites of `{f}`.", rng.range(1, 14)),
        4 => format!(
            "After the change {} tests pass and {} are ignored.",
            rng.range(40, 400),
            rng.range(0, 6)
        ),
        5 => format!("The {a} cache is rebuilt on every read, which explains the latency."),
        6 => format!("{} {}", rng.pick(KOREAN), rng.pick(EMOJI)),
        7 => format!("Running `{}` shows the regression.", rng.pick(COMMANDS)),
        8 => format!("The {a} and the {} disagree after a crash.", ident(rng)),
        _ => format!("Next: tidy up `{f}` and document the {a} format."),
    }
}

fn sentences(rng: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&sentence(rng));
    }
    s
}

fn code_block(rng: &mut Rng, lines: usize) -> String {
    let lang = rng.pick(&["rust", "rust", "bash", "toml", ""]);
    let mut s = format!("```{lang}\n");
    for _ in 0..lines {
        if lang == "bash" {
            s.push_str(rng.pick(COMMANDS));
        } else if lang == "toml" {
            s.push_str(&format!(
                "{} = \"{}.{}\"",
                rng.pick(CRATES),
                rng.range(0, 4),
                rng.range(0, 30)
            ));
        } else {
            s.push_str(&code_line(rng));
        }
        s.push('\n');
    }
    s.push_str("```");
    s
}

/// What the user types.
pub fn user_prompt(rng: &mut Rng) -> String {
    let (p, f) = (path(rng), func(rng));
    match rng.below(9) {
        0 => format!("The nightly build fails in `{p}`. Can you look?"),
        1 => format!("Please refactor `{f}` in {p} so it does one thing."),
        2 => format!(
            "Run the tests for `{}` and fix what breaks.",
            ident(rng)
        ),
        3 => format!("{} `{p}` 좀 봐줄래요?", rng.pick(KOREAN)),
        4 => {
            let mut s = String::from("I get this error:\n\n```\n");
            for _ in 0..rng.range(2, 6) {
                s.push_str(&log_line(rng));
                s.push('\n');
            }
            s.push_str("```\n\nAny idea?");
            s
        }
        5 => format!(
            "Nice, that worked {} Now make `{f}` handle the empty case.",
            rng.pick(EMOJI)
        ),
        6 => format!("Why is `{}` slow on large sessions?", rng.pick(COMMANDS)),
        7 => format!(
            "Add a test for `{f}` that covers a torn last line, then commit.\n\n- keep it small\n- no fixed paths"
        ),
        _ => format!("Can you explain how `{f}` and `{}` interact?", func(rng)),
    }
}

/// A short follow-up the user sends right after a prompt.
pub fn user_followup(rng: &mut Rng) -> String {
    format!(
        "Also: {}",
        match rng.below(3) {
            0 => format!("don't touch `{}`.", path(rng)),
            1 => rng.pick(KOREAN).to_string(),
            _ => "keep the public API unchanged.".to_string(),
        }
    )
}

/// A short text before a tool call.
pub fn assistant_preamble(rng: &mut Rng) -> String {
    match rng.below(5) {
        0 => format!("I'll start by reading `{}`.", path(rng)),
        1 => format!("Let me check where `{}` is called.", func(rng)),
        2 => "Running the tests to see the current state.".to_string(),
        3 => format!("Now I'll update `{}`.", func(rng)),
        _ => sentence(rng),
    }
}

/// A finished assistant answer in Markdown.
pub fn assistant_answer(rng: &mut Rng) -> String {
    match rng.below(5) {
        0 => {
            let n = rng.range(1, 3);
            format!("Done. {} {}", sentences(rng, n), rng.pick(EMOJI))
        }
        1 => {
            let mut s = String::from("## Findings\n\n");
            for _ in 0..rng.range(2, 5) {
                s.push_str("- ");
                s.push_str(&sentence(rng));
                s.push('\n');
            }
            s.push('\n');
            let n = rng.range(2, 8);
            s.push_str(&code_block(rng, n));
            s
        }
        2 => format!(
            "{}\n\n**Next steps**\n\n1. {}\n2. {}",
            sentences(rng, 2),
            sentence(rng),
            sentence(rng)
        ),
        3 => format!("{} {}", rng.pick(KOREAN), sentences(rng, 1)),
        _ => {
            let n = rng.range(1, 4);
            sentences(rng, n)
        }
    }
}

pub fn thinking(rng: &mut Rng) -> String {
    format!(
        "The error mentions `{}`. I should check `{}` first, then run `{}`. {}",
        func(rng),
        path(rng),
        rng.pick(COMMANDS),
        sentence(rng)
    )
}

/// The tools the generator calls (besides Compress and Task).
pub const TOOLS: &[&str] = &[
    "Read", "Read", "Read", "Bash", "Bash", "Grep", "Edit", "Edit", "Glob", "LS", "Write",
];

/// A realistic input for `tool`.
pub fn tool_input(rng: &mut Rng, tool: &str) -> Value {
    let p = format!("/home/dev/project/{}", path(rng));
    match tool {
        "Read" => {
            if rng.percent(50) {
                json!({"file_path": p})
            } else {
                json!({"file_path": p, "offset": rng.range(1, 800), "limit": rng.range(50, 400)})
            }
        }
        "Bash" => {
            json!({"command": rng.pick(COMMANDS), "description": sentence(rng), "timeout": 120000})
        }
        "Grep" => json!({
            "pattern": format!("fn {}|{}\\(", func(rng), func(rng)),
            "path": "src",
            "output_mode": "content",
            "-n": true
        }),
        "Edit" => json!({
            "file_path": p,
            "old_string": code_line(rng),
            "new_string": format!("{}\n{}", code_line(rng), code_line(rng))
        }),
        "Glob" => {
            json!({"pattern": rng.pick(&["**/*.rs", "src/**/*.rs", "tests/*.rs", "**/*.md"])})
        }
        "LS" => {
            json!({"path": format!("/home/dev/project/{}", rng.pick(&["src", "src/fs", "tests", "scripts"]))})
        }
        "Write" => {
            let mut content = String::new();
            for _ in 0..rng.range(3, 12) {
                content.push_str(&code_line(rng));
                content.push('\n');
            }
            json!({"file_path": p, "content": content})
        }
        _ => json!({}),
    }
}

/// A tool result size in bytes, roughly log-distributed: mostly small, a few large, rarely near
/// `max` (power-of-two buckets with decreasing weights; integer-only).
pub fn result_size(rng: &mut Rng, max: usize) -> usize {
    if max <= 8 {
        return rng.range(0, max);
    }
    let top = usize::BITS - 1 - max.leading_zeros(); // floor(log2(max))
    let weight = |b: u32| -> usize {
        match b {
            0..=6 => 32,
            7..=9 => 40,
            10..=11 => 24,
            12..=13 => 10,
            14..=15 => 3,
            _ => 1,
        }
    };
    let total: usize = (3..=top).map(weight).sum();
    let mut x = rng.below(total);
    let mut bucket = 3;
    for b in 3..=top {
        let w = weight(b);
        if x < w {
            bucket = b;
            break;
        }
        x -= w;
    }
    let lo = 1usize << bucket;
    let hi = (lo * 2 - 1).min(max);
    rng.range(lo.min(max), hi)
}

/// The output of `tool` of about `size` bytes (never more than `size`).
pub fn tool_output(rng: &mut Rng, tool: &str, size: usize) -> String {
    let mut s = String::with_capacity(size + 128);
    match tool {
        "Edit" | "Write" => {
            s.push_str(&format!(
                "The file /home/dev/project/{} has been updated.",
                path(rng)
            ));
        }
        _ => {}
    }
    let mut n = rng.range(1, 700);
    while s.len() < size {
        if !s.is_empty() {
            s.push('\n');
        }
        match tool {
            "Read" | "Edit" | "Write" => {
                s.push_str(&format!("{n:>6}\t{}", code_line(rng)));
                n += 1;
            }
            "Grep" => s.push_str(&format!(
                "{}:{}:{}",
                path(rng),
                rng.range(1, 900),
                code_line(rng).trim_start()
            )),
            "Glob" | "LS" => s.push_str(&format!("/home/dev/project/{}", path(rng))),
            _ => s.push_str(&log_line(rng)),
        }
    }
    let len = cut(&s, size).len();
    s.truncate(len);
    s
}

/// The text of a failed tool call.
pub fn tool_error(rng: &mut Rng, tool: &str) -> String {
    match tool {
        "Read" => "File does not exist.".to_string(),
        "Edit" => {
            "<tool_use_error>String to replace not found in file.</tool_use_error>".to_string()
        }
        _ => {
            let mut s = format!("Exit code {}\n", rng.pick(&["1", "2", "101"]));
            for _ in 0..rng.range(1, 6) {
                s.push_str(&log_line(rng));
                s.push('\n');
            }
            s
        }
    }
}

/// A summary of at least `min_chars` characters and at most `max_bytes` bytes, or `None` when
/// that is impossible.
pub fn summary(rng: &mut Rng, min_chars: usize, max_bytes: usize) -> Option<String> {
    let target = rng.range(120, 520).max(min_chars + 8).min(max_bytes);
    let mut s = String::new();
    while s.len() < target {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&sentence(rng));
    }
    let mut out = cut(&s, max_bytes).to_string();
    if out.len() < s.len() {
        // Cut at the last word boundary and end the sentence.
        if let Some(space) = out.rfind(' ') {
            out.truncate(space);
        }
        if out.len() < max_bytes {
            out.push('.');
        }
    }
    (out.chars().count() >= min_chars && out.len() <= max_bytes).then_some(out)
}

/// A consolidation summary built from the children's summaries.
pub fn consolidated_summary(
    rng: &mut Rng,
    children: &[(String, String)],
    min_chars: usize,
    max_bytes: usize,
) -> Option<String> {
    let mut s = String::from("Consolidated:");
    for (id, summary) in children {
        let first = summary.split(". ").next().unwrap_or(summary);
        s.push_str(&format!(
            " {id}: {}.",
            cut(first, 140).trim_end_matches('.')
        ));
    }
    s.push(' ');
    s.push_str(&sentence(rng));
    let out = cut(&s, max_bytes).to_string();
    (out.chars().count() >= min_chars).then_some(out)
}

/// A subagent's task prompt.
pub fn subagent_task(rng: &mut Rng) -> String {
    format!(
        "Search the repository for every caller of `{}` and report which ones ignore its error.",
        func(rng)
    )
}
