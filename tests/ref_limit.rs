//! When the ref numbers run out (`m99999`; here a limit of 40, set for this test's process
//! alone), the runtime hands out no more: the first core that needs a number and every core
//! after it get none. A replay's requests grown from the one before must then be the whole
//! pipeline's, request for request — before, growth stopped there, and every later request of
//! a 100,000-message session went through the whole pipeline (its history took minutes).

mod common;

use common::{text_of, Session};
use normafs::config::NoaConfig;
use normafs::noa::compress::Placement;
use normafs::noa::content::Slot;
use normafs::noa::rebuild;
use normafs::noa::views::{self, Projection};
use serde_json::json;

fn place() -> Placement<'static> {
    Placement::new("/r/noa/s1", "s1", "2026-11-30T12:00:00Z", 1_796_040_000)
}

#[test]
fn grown_requests_past_the_last_ref_are_the_whole_pipelines() {
    normafs::noa::refs::set_ref_limit(40);
    let cfg = NoaConfig {
        window: 1_000_000,
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        protected_tools: vec!["Bash".to_string()],
        ..NoaConfig::default()
    };
    for seed in 0..12u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut s = Session::new("s1");
        for n in 0..90 {
            let size = 5 + next(40) as usize;
            match next(5) {
                0 => s.user(&format!("u{n} {}", text_of(size, 'u'))),
                1 => s.assistant(&format!("a{n} {}", text_of(size, 'a'))),
                2 => s.tool(
                    &format!("t{n}"),
                    "Read",
                    json!({"path": format!("f{n}")}),
                    &text_of(size, 'r'),
                ),
                3 => s.tool(
                    &format!("b{n}"),
                    "Bash",
                    json!({"cmd": format!("ls {n}")}),
                    &text_of(size, 'b'),
                ),
                _ => s.thinking(&format!("t{n} {}", text_of(size, 't')), &format!("a{n}")),
            };
        }
        let p = Projection::new(s.msgs());
        let points: Vec<usize> = (0..=p.msgs.len()).collect();
        let replay = |asked| {
            rebuild::Replay::new(&p, &cfg, &place(), &[], &views::runtime_path).history(asked)
        };
        let a = replay(rebuild::Asked::requests(&points));
        let b = replay(rebuild::Asked::whole(&points));
        assert_eq!(a.requests, b.requests, "seed {seed}");
        assert_eq!(a.made, b.made, "seed {seed}");
        assert!(a.states == b.states, "seed {seed}: the states differ");
        // The numbers ran out, and the requests after went on growing.
        let last = a.states.last().expect("a state");
        let turn = views::turn(&p, last, &cfg, &views::runtime_path);
        let unnumbered = turn
            .items
            .iter()
            .filter(|&&q| matches!(turn.slot(q), Slot::None))
            .count();
        assert!(
            unnumbered > 10,
            "seed {seed}: {unnumbered} cores without a ref"
        );
        assert!(
            a.grown * 2 > a.requests.len(),
            "seed {seed}: {} of {} requests grown",
            a.grown,
            a.requests.len()
        );
    }
}
