#!/usr/bin/env bash
#! fsx (the File System eXerciser; the registry's Rust port, `cargo install fsx`) on memory/ of
#! real mounts, as its users reach them: as root mounted by default (the kernel opens files
#! itself; no passthrough), as root with `--passthrough` (every open answered, real files
#! passed through), and as an ordinary user (through fusermount3, by default). Every variant with a
#! fixed seed, then one with a random seed (printed, so a failure can be run again). Each fsx
#! checks every read against its own model of the file; any mismatch fails the run.
#
# Usage: scripts/fsx.sh [--quick] [--seed N] [--keep]
#   --quick   10,000 operations for the default variant and 5,000 for the others
#   --seed N  the random seed's run uses N (default: a new one, printed)
#   --keep    keep the roots and logs (printed at the end)
#
# Variants (fsx.toml weights; the default ones are fsx's own):
#   default    reads, writes, mapped reads and writes, truncations: 100,000 operations
#   nommap     no mapped I/O (pread/pwrite only), more truncations: 20,000
#   closeopen  the file closed and opened again between operations: 20,000
#   alloc      posix_fallocate, hole punching, copy_file_range, sendfile, posix_fadvise,
#              msync(MS_INVALIDATE), fsync, fdatasync mixed in: 20,000
#   random     the default variant with a random seed: 20,000
# O_DIRECT is not in this port: tests/posix.rs covers it (dd oflag=direct, both ways).
#
# Needs root (the ordinary user is made for the run, and /dev/fuse, mode 0600 here, is opened
# to it for the run and put back) and /dev/fuse. The three mounts run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
KEEP=0
SEED=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --keep) KEEP=1 ;;
        --seed) SEED="${2:?--seed needs a number}"; shift ;;
        *) echo "fsx.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "fsx.sh: needs root (an ordinary user's mount is made for it)" >&2; exit 2; }
[ -c /dev/fuse ] || { echo "fsx.sh: /dev/fuse is missing" >&2; exit 2; }
command -v fusermount3 >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null
}
[ -n "$SEED" ] || SEED=$(( (RANDOM << 15) | RANDOM ))

# fsx itself, pinned, built once into target/tools.
FSX_VERSION=0.3.2
FSX=target/tools/bin/fsx
if ! [ -x "$FSX" ] || ! "$FSX" --version 2>/dev/null | grep -q "$FSX_VERSION"; then
    echo "fsx.sh: installing fsx $FSX_VERSION"
    cargo install --quiet --locked --root target/tools fsx --version "$FSX_VERSION"
fi
cargo build --quiet --release --locked
BIN=$PWD/target/release/normafs
FSX=$PWD/$FSX

WORK=$(mktemp -d /tmp/normafs-fsx.XXXXXX)
chmod 755 "$WORK"
USER_NAME=normafs-fsx
USER_MADE=0
FUSE_MODE=$(stat -c %a /dev/fuse)
MOUNTED=()
cleanup() {
    local m
    for m in "${MOUNTED[@]}"; do
        if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; fi
    done
    chmod "$FUSE_MODE" /dev/fuse
    [ "$USER_MADE" = 0 ] || userdel "$USER_NAME" 2>/dev/null || true
    if [ "$KEEP" = 1 ]; then echo "fsx.sh: roots and logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /bin/sh "$USER_NAME"
    USER_MADE=1
fi
chmod 0666 /dev/fuse

ops() { # ops FULL QUICK
    if [ "$QUICK" = 1 ]; then echo "$2"; else echo "$1"; fi
}
cat >"$WORK/default.toml" <<'EOF'
EOF
cat >"$WORK/nommap.toml" <<'EOF'
[weights]
mapread = 0
mapwrite = 0
truncate = 3
EOF
cat >"$WORK/closeopen.toml" <<'EOF'
[weights]
close_open = 8
EOF
cat >"$WORK/alloc.toml" <<'EOF'
[weights]
close_open = 1
invalidate = 1
truncate = 2
fsync = 1
fdatasync = 1
posix_fallocate = 2
punch_hole = 2
sendfile = 2
posix_fadvise = 2
copy_file_range = 2
EOF
VARIANTS=(
    "default default 1 $(ops 100000 10000)"
    "nommap nommap 2 $(ops 20000 5000)"
    "closeopen closeopen 3 $(ops 20000 5000)"
    "alloc alloc 4 $(ops 20000 5000)"
    "random default $SEED $(ops 20000 5000)"
)

# run_way NAME [RUNAS...]: mount a root of its own (a session root with memory/) as NAME
# says, run every variant in its memory/, unmount; one line per variant in NAME.result.
run_way() {
    local name=$1 flags=$2
    shift 2
    local root="$WORK/$name/root" mnt="$WORK/$name/mnt" log="$WORK/$name.log"
    mkdir -p "$root/transcripts" "$root/memory" "$mnt"
    if [ $# -gt 0 ]; then chown -R "$USER_NAME" "$WORK/$name"; fi
    # shellcheck disable=SC2086
    "$@" "$BIN" mount "$root" "$mnt" --daemon $flags >"$log" 2>&1 || {
        echo "$name: the mount failed: $(head -n 3 "$log")" >"$WORK/$name.result"
        return
    }
    : >"$WORK/$name.result"
    local v cfg seed n
    for line in "${VARIANTS[@]}"; do
        read -r v cfg seed n <<<"$line"
        local start=$SECONDS
        if "$@" env -C "$mnt/memory" "$FSX" -N "$n" -S "$seed" -f "$WORK/$cfg.toml" \
            -P "$WORK/$name" "fsx-$v" >"$WORK/$name-$v.log" 2>&1; then
            echo "ok     $name  $v  seed $seed  $n operations  $((SECONDS - start)) s" >>"$WORK/$name.result"
        else
            echo "FAILED $name  $v  seed $seed  $n operations: $(grep -m 1 -E 'error|Error' "$WORK/$name-$v.log" | cut -c1-160)" >>"$WORK/$name.result"
            tail -n 40 "$WORK/$name-$v.log" >>"$WORK/$name.failures"
        fi
    done
    # Unmount what this mounted (as its user for the ordinary user's mount).
    if [ $# -gt 0 ]; then "$@" fusermount3 -u "$mnt" || umount "$mnt"; else umount "$mnt"; fi
}

RUNAS=(setpriv "--reuid=$(id -u "$USER_NAME")" "--regid=$(id -g "$USER_NAME")" --clear-groups)
for w in default passthrough user; do MOUNTED+=("$WORK/$w/mnt"); done
echo "fsx.sh: fsx $FSX_VERSION on memory/ of three mounts; random seed $SEED"
run_way default "" &
run_way passthrough "--passthrough" &
run_way user "" "${RUNAS[@]}" &
wait

failed=0
for w in default passthrough user; do
    cat "$WORK/$w.result"
    if grep -qv '^ok ' "$WORK/$w.result"; then
        failed=1
        [ ! -f "$WORK/$w.failures" ] || sed 's/^/    /' "$WORK/$w.failures"
    fi
done
if [ "$failed" = 1 ]; then
    echo "fsx.sh: FAILED (run again with --seed $SEED --keep to keep the logs)" >&2
    exit 1
fi
echo "fsx.sh: every variant passed on every mount"
