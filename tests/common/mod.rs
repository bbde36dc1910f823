//! Shared helpers of the integration tests: hand-written sessions.
#![allow(dead_code)]

use normafs::format::transcript::{parse_line, Record};
use normafs::noa::Msg;
use serde_json::{json, Value};

/// Builds a transcript the way the runtime writes one: chained uuids, one record per message.
pub struct Session {
    pub sid: String,
    pub records: Vec<Record>,
    n: u64,
}

impl Session {
    pub fn new(sid: &str) -> Session {
        Session {
            sid: sid.to_string(),
            records: Vec::new(),
            n: 0,
        }
    }

    fn push(&mut self, kind: &str, message: Option<Value>) -> &mut Self {
        self.n += 1;
        let uuid = format!("{:032x}", 0xabc000 + self.n);
        let mut v = json!({"uuid": uuid});
        if let Some(prev) = self.records.last() {
            v["parent_uuid"] = json!(prev.uuid);
        }
        v["session_id"] = json!(self.sid);
        v["timestamp"] = json!(format!(
            "2026-11-30T10:{:02}:{:02}.000000001Z",
            self.n / 60,
            self.n % 60
        ));
        v["type"] = json!(kind);
        if let Some(m) = message {
            v["message"] = m;
        }
        let line = serde_json::to_string(&v).expect("json");
        self.records
            .push(parse_line(line.as_bytes()).expect("record"));
        self
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"user","content":[{"type":"text","text":text}]})),
        )
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"assistant","content":[{"type":"text","text":text}]})),
        )
    }

    pub fn tool_use(&mut self, id: &str, name: &str, input: Value) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"assistant","content":[{"type":"tool_use","id":id,"name":name,"input":input}]})),
        )
    }

    pub fn tool_result(&mut self, id: &str, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":[{"type":"text","text":text}]}]})),
        )
    }

    pub fn boundary(&mut self) -> &mut Self {
        self.push("boundary", None)
    }

    /// The uuid of the n-th message (0-based).
    pub fn raw(&self, n: usize) -> String {
        self.records
            .iter()
            .filter(|r| r.as_message().is_some())
            .nth(n)
            .map(|r| r.uuid.clone())
            .expect("message")
    }

    pub fn msgs(&self) -> Vec<Msg<'_>> {
        self.records
            .iter()
            .filter_map(|r| {
                r.as_message().map(|m| Msg {
                    raw_id: &r.uuid,
                    message: m,
                    timestamp: r.timestamp.as_deref(),
                })
            })
            .collect()
    }

    pub fn jsonl(&self) -> String {
        let mut s = String::new();
        for r in &self.records {
            s.push_str(&r.to_line());
            s.push('\n');
        }
        s
    }
}

/// A text of exactly `tokens` tokens (4 bytes each).
pub fn text_of(tokens: usize, fill: char) -> String {
    std::iter::repeat_n(fill, tokens * 4).collect()
}

/// Parse view.jsonl bytes into JSON values.
pub fn lines(bytes: &[u8]) -> Vec<Value> {
    std::str::from_utf8(bytes)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("view line is JSON"))
        .collect()
}
