//! Token estimate (SPEC 4.1): `Σ ceil(utf8_bytes(part) / 4)` over a message's parts.

use std::io::Write;

use crate::format::transcript::{Content, Message};

fn ceil4(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// Bytes of serde_json's compact form of `v`, counted without building the string.
pub fn compact_json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a Value into a counter cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Tokens of one content part. A tool_use is one part (`name` + compact `input`); a
/// tool_result counts each nested part, recursively; other types count 0.
pub fn part_tokens(c: &Content) -> u64 {
    match c {
        Content::Text(t) => ceil4(t.text.len()),
        Content::Thinking(t) => ceil4(t.thinking.len()),
        Content::ToolUse(u) => ceil4(u.name.len() + u.input.get().len()),
        Content::ToolResult(r) => match &r.content {
            Some(crate::format::transcript::ToolResultContent::Text(t)) => ceil4(t.len()),
            Some(crate::format::transcript::ToolResultContent::Items(items)) => {
                items.iter().map(part_tokens).sum()
            }
            None => 0,
        },
        Content::CompactBoundary(_) | Content::Other(_) => 0,
    }
}

/// Tokens of a list of parts.
pub fn parts_tokens<'a>(parts: impl IntoIterator<Item = &'a Content>) -> u64 {
    parts.into_iter().map(part_tokens).sum()
}

/// Tokens of a message: no per-message overhead.
pub fn message_tokens(m: &Message) -> u64 {
    parts_tokens(&m.content)
}

/// Tokens of a plain text (a summary message's only part).
pub fn text_tokens(s: &str) -> u64 {
    ceil4(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(v: serde_json::Value) -> Message {
        serde_json::from_value(v).expect("message")
    }

    #[test]
    fn estimates_follow_the_spec() {
        // 57 bytes of text -> 15 tokens.
        let m = msg(
            json!({"role":"user","content":[{"type":"text","text":"The nightly build fails on the linker step. Can you look?"}]}),
        );
        assert_eq!(message_tokens(&m), 15);
        // thinking 23 bytes -> 6; tool_use "Read" + 48 bytes of JSON = 52 -> 13.
        let m = msg(json!({"role":"assistant","content":[
            {"type":"thinking","thinking":"Check the CI log first.","signature":"c2ln"},
            {"type":"tool_use","id":"toolu_a1","name":"Read","input":{"path":"ci/nightly.log","offset":0,"limit":200}}]}));
        assert_eq!(message_tokens(&m), 19);
        // nested tool_result parts count each; a plain string is one text part; images count 0.
        let m = msg(json!({"role":"user","content":[
            {"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"abcde"},{"type":"text","text":"a"},{"type":"image","source":{}}]},
            {"type":"tool_result","tool_use_id":"u","content":"abcdefghi"}]}));
        assert_eq!(message_tokens(&m), 2 + 1 + 3);
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("한"), 1);
    }
}
