#!/usr/bin/env bash
# Seed corpora for the fuzz targets from the example root (tests/data/example-root) plus a few
# hand-written inputs. Corpora are not committed (fuzz/.gitignore); run this once before fuzzing.
set -euo pipefail
cd "$(dirname "$0")"
E=../tests/data/example-root
mkdir -p corpus/{transcript,state,archive,memory,ctl,journal}
# transcript: a header byte (0 = no chunking, else chunk lengths follow), then the file.
{ printf '\x00'; cat "$E/transcripts/7f0c2a.jsonl"; } > corpus/transcript/example
{ printf '\x03\x10\x40\x07'; cat "$E/transcripts/7f0c2a.jsonl"; } > corpus/transcript/example-chunked
{ printf '\x00'; cat "$E/transcripts/7f0c2a/subagents/agent-ag-41.jsonl"; } > corpus/transcript/sidechain
cp "$E/noa/7f0c2a/state.json" corpus/state/example
cat > corpus/state/core <<'JSON'
{"version":1,"sessionId":"s","nextBlockId":2,"blocks":[{"blockId":"b1","tier":1,"topic":"t","summary":"the build question","directMessageIds":["u1","u2","u3"],"effectiveMessageIds":["u1","u2","u3"],"directBlockIds":[],"archivePath":"/r/noa/s/tier1/b1_m0001-m0003.md","archiveRel":"tier1/b1_m0001-m0003.md","compressedTokens":40,"startRef":"m0001","endRef":"m0003","createdAt":"2026-11-30T12:00:00Z","active":true,"compressCallId":"c1"}],"messageRefs":{"byRaw":{"u1":"m0001","u2":"m0002","u3":"m0003","u4":"m0004"},"byRef":{"m0001":"u1","m0002":"u2","m0003":"u3","m0004":"u4"}},"tokenSnapshot":{"byRef":{"m0001":13,"m0002":20}},"nudge":{"lastPerMessageNudgeTokens":0,"lastNudgeShownTokens":0},"stats":{"tokensCompressed":40,"compressionCount":1}}
JSON
cp "$E"/noa/7f0c2a/tier1/*.md corpus/archive/
# memory: a header byte (its value modulo 17 = the length of the file stem that follows), then the file.
for f in "$E"/memory/*.md; do
  n=$(basename "$f" .md)
  { printf "\\x$(printf %02x ${#n})%s" "$n"; cat "$f"; } > "corpus/memory/$n"
done
printf 'compress {"ranges":[{"start":"m0001","end":"m0004","topic":"t","summary":"a summary that is long enough"}]}' > corpus/ctl/json
printf 'compress m0001 m0004 a summary that is long enough' > corpus/ctl/positional
printf 'rebuild' > corpus/ctl/rebuild
printf 'reindex-memory\n' > corpus/ctl/reindex
printf '{"at":"2026-11-30T12:00:00.000000001Z","input":{"ranges":[{"start":"m0001","end":"m0004","summary":"s"}]},"blocks":[{"blockId":"b1"}],"callId":"ctl-1"}\n{"at":"x","input":1,"blocks":[],"callId":"ctl-2","extra":[1.5e300]}\n{"torn' > corpus/journal/two
echo "seeded: $(find corpus -type f | wc -l) files"
