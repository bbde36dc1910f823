#!/usr/bin/env python3
"""A session root of one tool-heavy session, in a shape `normafs gen` does not make.

Usage: scripts/heavy.py ROOT [--messages N] [--seed S]

For the benchmark (scripts/bench.sh, rows P4h-P7h): real agent sessions carry fields the
runtime's model does not know on every record (kept as written), file dumps of many kilobytes
as tool results (line-numbered, tabs, quotes and backslashes to escape), results of one item
or several, now and then an image item (an item of a type normafs keeps
as raw JSON) and an error, edits whose inputs hold whole functions, long thinking with
signatures, and Korean, Japanese and Chinese text. `gen`'s sessions are tool-heavy too, but
regular: this one is the other data the bench checks its figures on.

Writes ROOT/transcripts/<sid>.jsonl and ROOT/memory/MEMORY.md; prints the session id.
"""

import argparse
import base64
import json
import os
import random
import sys

CJK = [
    "이 함수는 세션을 다시 읽습니다",
    "テストが失敗しました。原因を調べます",
    "这个文件太大了，需要分页读取",
    "좋아요, 그렇게 해 주세요",
    "ログを確認してください",
    "请检查配置文件中的路径",
]
WORDS = (
    "session view transcript compress block tier summary archive memory index state "
    "reader writer buffer offset length cache page inode kernel mount daemon request reply"
).split()
TOOLS = ["Read", "Edit", "Bash", "Grep", "Write", "Glob"]


def code_lines(rng, n):
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        kind = rng.randrange(6)
        if kind == 0:
            out.append(f'    let {w}_{i} = "{rng.choice(WORDS)}\\t{rng.choice(WORDS)}";')
        elif kind == 1:
            out.append(f"    // {rng.choice(CJK)}")
        elif kind == 2:
            out.append(f'    if {w}.len() > {rng.randrange(1000)} {{ return Err("bad {w}: \\"{i}\\""); }}')
        elif kind == 3:
            out.append(f"fn {w}_{i}(path: &str) -> Result<(), Error> {{")
        elif kind == 4:
            out.append(f'    println!("{{}} C:\\\\{w}\\\\{i}", {w});')
        else:
            out.append("}")
    return out


def file_dump(rng, lines):
    body = code_lines(rng, lines)
    return "\n".join(f"{i + 1:>6}\t{l}" for i, l in enumerate(body))


def tool_input(rng, name):
    path = f"/home/dev/project/src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.rs"
    if name == "Read":
        return {"file_path": path, "offset": rng.randrange(500), "limit": 2000}
    if name == "Edit":
        return {
            "file_path": path,
            "old_string": "\n".join(code_lines(rng, rng.randrange(2, 12))),
            "new_string": "\n".join(code_lines(rng, rng.randrange(2, 12))),
            "replace_all": False,
        }
    if name == "Bash":
        return {
            "command": f"cargo test --release -- {rng.choice(WORDS)} 2>&1 | tail -n {rng.randrange(200)}",
            "description": rng.choice(CJK),
            "timeout": 120000,
        }
    if name == "Grep":
        return {"pattern": f"fn {rng.choice(WORDS)}\\(", "path": path, "output_mode": "content", "-n": True}
    if name == "Write":
        return {"file_path": path, "content": "\n".join(code_lines(rng, rng.randrange(5, 40)))}
    return {"pattern": f"**/{rng.choice(WORDS)}*.rs"}


def result_content(rng, name):
    """A tool result's `content`: one or more items (text, now and then an image)."""
    roll = rng.random()
    if roll < 0.004:
        # A very large output: the emergency band cuts these.
        return [{"type": "text", "text": file_dump(rng, rng.randrange(1000, 3000))}]
    if roll < 0.25:
        return [{"type": "text", "text": f"{name}: ok\n" + "\n".join(code_lines(rng, rng.randrange(1, 12)))}]
    items = [{"type": "text", "text": file_dump(rng, rng.randrange(3, 40))}]
    if rng.random() < 0.2:
        items.append({"type": "text", "text": f"[{rng.choice(CJK)}] {rng.randrange(10**6)} lines total"})
    if rng.random() < 0.005:
        data = base64.b64encode(rng.randbytes(rng.randrange(3000, 20000))).decode()
        items.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}})
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--messages", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    sid = f"h{a.seed}-heavy"
    os.makedirs(os.path.join(a.root, "transcripts"), exist_ok=True)
    os.makedirs(os.path.join(a.root, "memory"), exist_ok=True)
    with open(os.path.join(a.root, "memory", "MEMORY.md"), "w") as f:
        f.write("# Memory\n")
    seconds = 0
    parent = None
    n = 0
    call = 0
    path = os.path.join(a.root, "transcripts", f"{sid}.jsonl")
    with open(path, "w", encoding="utf-8") as out:

        def emit(role, content, usage=None):
            nonlocal parent, seconds, n
            seconds += rng.randrange(1, 9)
            uuid = f"{rng.getrandbits(128):032x}"
            rec = {"uuid": uuid}
            if parent:
                rec["parent_uuid"] = parent
            rec.update({
                "session_id": sid,
                "timestamp": f"2026-0{1 + seconds // 2_000_000 % 9}-{1 + seconds // 86400 % 28:02d}T"
                f"{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{rng.randrange(10**9):09d}Z",
                "type": "message",
                "message": {"role": role, "content": content},
                # Fields the runtime's model does not know, on every record.
                "cwd": "/home/dev/project",
                "version": "2.0.14",
                "git_branch": rng.choice(["main", "fix/torn-tail", "feat/세션"]),
                "user_type": "external",
            })
            if usage:
                rec["usage"] = usage
                rec["request_id"] = f"req_{rng.getrandbits(64):016x}"
            out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            parent = uuid
            n += 1

        while n < a.messages:
            said = f"{rng.choice(CJK)}. Please look at `{rng.choice(WORDS)}` again: {' '.join(rng.choices(WORDS, k=rng.randrange(5, 60)))}"
            emit("user", [{"type": "text", "text": said}])
            for _ in range(rng.randrange(1, 8)):
                if n >= a.messages:
                    break
                content = [{
                    "type": "thinking",
                    "thinking": " ".join(rng.choices(WORDS + CJK, k=rng.randrange(10, 120))),
                    "signature": base64.b64encode(rng.randbytes(rng.randrange(150, 400))).decode(),
                }]
                if rng.random() < 0.3:
                    content.append({"type": "text", "text": f"I will check {rng.choice(WORDS)} next."})
                calls = []
                for _ in range(rng.choice([1, 1, 1, 2, 3])):
                    call += 1
                    name = rng.choice(TOOLS)
                    cid = f"toolu_{call:08d}{rng.getrandbits(64):016x}"
                    item = {"type": "tool_use", "id": cid, "name": name, "input": tool_input(rng, name)}
                    if rng.random() < 0.1:
                        item["cache_control"] = {"type": "ephemeral"}
                    content.append(item)
                    calls.append((cid, name))
                usage = {"input_tokens": rng.randrange(100, 5000), "output_tokens": rng.randrange(10, 900),
                         "cache_read_tokens": rng.randrange(100000), "cache_write_tokens": rng.randrange(3000)}
                emit("assistant", content, usage)
                if n >= a.messages:
                    break
                results = []
                for cid, name in calls:
                    r = {"type": "tool_result", "tool_use_id": cid, "content": result_content(rng, name)}
                    if rng.random() < 0.05:
                        r["is_error"] = True
                    results.append(r)
                emit("user", results)
            if n < a.messages:
                emit("assistant", [{"type": "text", "text": f"Done: {rng.choice(CJK)}. " + " ".join(rng.choices(WORDS, k=40))}],
                     {"input_tokens": 10, "output_tokens": 50, "cache_read_tokens": 0, "cache_write_tokens": 0})
    print(sid)


if __name__ == "__main__":
    sys.exit(main())
