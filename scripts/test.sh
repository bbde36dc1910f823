#!/usr/bin/env bash
# The test command of normafs: formatting, lints, and every test (unit, integration, property).
# Used as-is by CI (.ci/run) and given in the README.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tools the mount tests drive (installed only when missing; needs root or sudo): jq, python3,
# fuse3 (fusermount3, mount.fuse3) for the ordinary-user, daemon and fstab tests, and
# rsvg-convert (librsvg2-bin), the SVG renderer the timeline tests draw timeline.svg with, and
# chromium, the browser the page tests open view.html and index.html in.
need=()
for t in jq:jq python3:python3 fusermount3:fuse3 rsvg-convert:librsvg2-bin chromium:chromium; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need[*]}"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]}; tests that need them print a notice and skip that step" >&2
  fi
fi

rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
# The library and binary as users build them: without the test targets, the dev-only feature
# `testhook` (Cargo.toml) is off, and its stand-ins are what is linted.
cargo clippy --lib --bins --locked -- -D warnings
cargo test --locked --all-targets

# fsx on memory/ of real mounts (as root with and without passthrough, and as an ordinary
# user): every variant with a fixed seed and one with a random seed (printed). Needs root and
# /dev/fuse; a failing operation fails the tests.
if [ "$(id -u)" = 0 ] && [ -c /dev/fuse ]; then
  scripts/fsx.sh
else
  echo "note: scripts/fsx.sh needs root and /dev/fuse; skipped" >&2
fi

# The benchmark harness in its short mode, so that it cannot rot (figures are printed, never
# asserted: these machines are shared). Needs root (drop_caches) and /dev/fuse.
if [ "$(id -u)" = 0 ] && [ -c /dev/fuse ]; then
  scripts/bench.sh --quick
else
  echo "note: scripts/bench.sh --quick needs root and /dev/fuse; skipped" >&2
fi
