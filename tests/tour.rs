//! The README's tour, re-run (issue 43): every command of its first listing runs in a fresh
//! demo root's mount, and its output must be what the README shows, with what changes from
//! run to run masked (dates, sizes, the temporary paths, the shell's line numbers) and a `…`
//! in the README standing for text it leaves out.

mod common;

use std::path::Path;

/// The README's listings of real output (each after a paragraph saying "Real output"): each
/// `$ command` and the lines the README shows after it, in order.
fn tour() -> Vec<(String, Vec<String>)> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("Real output") {
        rest = &rest[at..];
        let start = rest.find("```\n").expect("its listing") + 4;
        let end = start + rest[start..].find("\n```").expect("its end");
        for line in rest[start..end].lines() {
            match line.strip_prefix("$ ") {
                Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
                None if line.is_empty() => {}
                None => steps
                    .last_mut()
                    .expect("output after a command")
                    .1
                    .push(line.to_string()),
            }
        }
        rest = &rest[end..];
    }
    steps
}

/// What differs between two runs of the same tour, masked.
fn mask(line: &str, mnt: &Path, root: &Path) -> String {
    let mut s = line
        .replace(&mnt.display().to_string(), "/tmp/normafs-demo")
        .replace(&root.display().to_string(), "ROOT")
        .replace(
            &normafs::config::user_file_shown(),
            "/root/.config/normafs/config.toml",
        );
    // The README's own run: its root's temporary name.
    while let Some(i) = s.find("/tmp/normafs-demo-") {
        let end = s[i + 18..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(s.len(), |e| i + 18 + e);
        s.replace_range(i..end, "ROOT");
    }
    // `ls -l`: owner, group, size and date; `total`.
    let words: Vec<&str> = s.split_whitespace().collect();
    let is_mode = words.first().is_some_and(|w| {
        w.len() == 10
            && w.starts_with(['-', 'd', 'l'])
            && w[1..].chars().all(|c| "rwx-".contains(c))
    });
    if is_mode && words.len() >= 9 {
        return format!(
            "{} {} N U G SIZE DATE {}",
            words[0],
            words[1],
            words[8..].join(" ")
        );
    }
    if words.first() == Some(&"total") && words.len() == 2 {
        return "total N".into();
    }
    // The writer's pid, times of results, the shell's line numbers.
    if let Some(i) = s.find("\"pid\":") {
        let e = s[i + 6..]
            .find(|c: char| !c.is_ascii_digit())
            .map_or(s.len(), |e| i + 6 + e);
        s.replace_range(i + 6..e, "P");
    }
    if let Some(i) = s.find("\"at\":\"") {
        if let Some(e) = s[i + 6..].find('"') {
            s.replace_range(i + 6..i + 6 + e, "T");
        }
    }
    // `bash: line 195: …` (the shell, and where its line count stood, vary).
    if let Some(i) = s.find(": line ") {
        let rest = &s[i + 7..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && rest[digits..].starts_with(':') {
            s = format!("SHELL: line N{}", &rest[digits..]);
        }
    }
    s
}

/// Whether `got` is `want`, a `…` in `want` standing for any text.
fn matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split('…').collect();
    if parts.len() == 1 {
        return want == got;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !got.starts_with(first) || !got.ends_with(last) || got.len() < first.len() + last.len() {
        return false;
    }
    let mut at = first.len();
    for p in &parts[1..parts.len() - 1] {
        match got[at..got.len() - last.len()].find(p) {
            Some(i) => at += i + p.len(),
            None => return false,
        }
    }
    true
}

#[test]
fn the_readme_tour_prints_what_the_readme_shows() {
    let steps = tour();
    assert!(
        steps.len() >= 13,
        "the tour and the history have their commands: {steps:?}"
    );
    let root = tempfile::tempdir().expect("tempdir");
    normafs::demo::write_demo_root(root.path(), &normafs::config::NoaConfig::default())
        .expect("the demo root");
    let root_path = root.path().to_path_buf();
    let Some(m) = common::mount(
        root,
        normafs::config::Config::default(),
        normafs::fuse::MountOptions::default(),
    ) else {
        return;
    };
    let mnt = m.mnt().to_path_buf();
    for (cmd, want) in &steps {
        let o = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("cd '{}' && {{ {cmd}\n}} 2>&1", mnt.display()))
            .output()
            .expect("bash");
        let got: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| mask(l, &mnt, &root_path))
            .collect();
        let want: Vec<String> = want.iter().map(|l| mask(l, &mnt, &root_path)).collect();
        assert_eq!(
            got.len(),
            want.len(),
            "$ {cmd}\ngot:\n{}\nwant:\n{}",
            got.join("\n"),
            want.join("\n")
        );
        for (g, w) in got.iter().zip(&want) {
            assert!(matches(w, g), "$ {cmd}\n got: {g}\nwant: {w}");
        }
    }
}

#[test]
fn the_readme_stays_short() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let n = readme.lines().count();
    assert!(
        n <= 450,
        "README.md is for users: at most 450 lines, not {n} (the rest in docs/)"
    );
    assert!(
        !readme.contains("../shared"),
        "every reference stays inside the repository"
    );
}

#[test]
fn masking_reads_as_the_readme_does() {
    let (m, r) = (Path::new("/tmp/.tmpmQ7YzK"), Path::new("/tmp/.tmpdjiGWY"));
    assert_eq!(
        mask("bash: line 195: echo: write error: Invalid argument", m, r),
        "SHELL: line N: echo: write error: Invalid argument"
    );
    assert_eq!(
        mask("-r--r--r-- 1 root root 38 Dec  6 03:46 audit.txt", m, r),
        "-r--r--r-- 1 N U G SIZE DATE audit.txt"
    );
    assert!(matches("a…c…e", "abcde") && !matches("a…c…e", "abde"));
}
