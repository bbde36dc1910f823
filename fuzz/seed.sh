#!/usr/bin/env bash
# Seed corpora for the fuzz targets from the runtime's corpus (tests/data/norma/corpus) plus a
# few hand-written inputs. Corpora are not committed (fuzz/.gitignore); run this once before
# fuzzing.
set -euo pipefail
cd "$(dirname "$0")"
C=../tests/data/norma/corpus
mkdir -p corpus/{transcript,state,archive,memory,ctl,journal}
# transcript: a header byte (0 = no chunking, else chunk lengths follow), then the file.
{ printf '\x00'; cat "$C/transcripts/s1-small.jsonl"; } > corpus/transcript/s1-small
{ printf '\x03\x10\x40\x07'; cat "$C/transcripts/s1-small.jsonl"; } > corpus/transcript/s1-small-chunked
{ printf '\x00'; cat "$C/transcripts/s4-subagent/subagents/agent-a7f3c2.jsonl"; } > corpus/transcript/sidechain
for s in s2-tier1 s3-tier2 s5-fork-of-s2; do
  cp "$C/noa/$s/state.json" "corpus/state/$s"
done
printf '{"version":1,"sessionId":"s","nextBlockId":1,"blocks":null,"messageRefs":{"byRaw":{},"byRef":{}},"nudge":{"lastPerMessageNudgeTokens":0,"lastNudgeShownTokens":0},"stats":{"tokensCompressed":0,"compressionCount":0}}' > corpus/state/initial
# archive: the text, then (after a 0xFF byte) the entries of a round trip, each after 0xFE:
# a kind byte (modulo 5: text, thinking, tool_use, tool_result, absorbed block) and a body.
for f in "$C"/noa/s2-tier1/tier1/b1_*.md "$C"/noa/s3-tier2/tier2/*.md; do
  cp "$f" "corpus/archive/$(basename "$f")"
done
printf 'x\xffa summary\xfe\x00hello\xfe\x02{"a":1}\xfe\x03```out```\xfe\x04folded' > corpus/archive/round-trip
# memory: a header byte (its value modulo 17 = the length of the file stem that follows), then the file.
for f in "$C"/memory/*.md; do
  n=$(basename "$f" .md)
  [ -n "$n" ] || n=empty
  { printf "\\x$(printf %02x ${#n})%s" "$n"; cat "$f"; } > "corpus/memory/$n"
done
printf 'compress {"content":[{"startId":"m00004","endId":"m00009","topic":"t","summary":"a summary that is long enough to stand in for the range"}]}' > corpus/ctl/json
printf 'compress! m00004 m00009 a summary that is long enough to stand in for the range' > corpus/ctl/positional
printf 'compress ```json\n{"content":[{"startId":"b1","endId":"b5","summary":"s",}]}\n```' > corpus/ctl/fenced
printf 'rebuild\nrebuild!\nhelp' > corpus/ctl/rebuild
printf 'reindex-memory\n' > corpus/ctl/reindex
printf '{"at":"2026-11-30T12:00:00.000000001Z","input":{"content":[{"startId":"m00001","endId":"m00004","summary":"s"}]},"blocks":[{"blockId":"b1"}],"callId":"ctl-1","after":"0123"}\n{"at":"x","input":1,"blocks":[],"callId":"ctl-2","extra":[1.5e300]}\n{"torn' > corpus/journal/two
echo "seeded: $(find corpus -type f | wc -l) files"
