use super::*;

#[test]
fn strips_only_one_trailing_tag() {
    assert_eq!(
        strip_ref_tag("hi\n<noa-ref id=\"m00001\" tokens=\"1\"/>"),
        "hi"
    );
    assert_eq!(strip_ref_tag("<noa-ref id=\"m00001\" tokens=\"1\"/>"), "");
    assert_eq!(strip_ref_tag("hi\n\n<noa-ref id=\"m00001\"/>\n"), "hi\n");
    assert_eq!(
        strip_ref_tag("<noa-ref id=\"m00001\"/> then text"),
        "<noa-ref id=\"m00001\"/> then text"
    );
    assert_eq!(
        strip_ref_tag("x <noa-ref id=\"m1\"/>"),
        "x <noa-ref id=\"m1\"/>"
    );
}

#[test]
fn ids_hash_role_type_call_tool_text() {
    // sha256("user|text|||Refactor the authentication subsystem and keep it tested.")
    let id = derive_id(
        Role::User,
        Kind::Text,
        "",
        "",
        "Refactor the authentication subsystem and keep it tested.",
    );
    assert!(id.starts_with("h_") && id.len() == 18, "{id}");
    let mut r = Repeats::default();
    assert_eq!(&*r.next(0xab), "h_00000000000000ab");
    assert_eq!(&*r.next(0xab), "h_00000000000000ab_1");
    assert_eq!(&*r.next(0xab), "h_00000000000000ab_2");
    assert_eq!(&*r.next(0xcd), "h_00000000000000cd");
    assert_eq!(id_text(u64::MAX, 0), "h_ffffffffffffffff");
    assert_eq!(id_text(0x0123_4567_89ab_cdef, 10), "h_0123456789abcdef_10");
    assert_eq!(id_text(1 << 60, u32::MAX), "h_1000000000000000_4294967295");
}

/// A projection large enough to be measured on several cores gives what one made a few
/// messages at a time (measured one by one) gives: ids with their repeats, measures, pairs,
/// origins.
#[test]
fn a_projection_measured_on_several_cores_equals_one_made_in_steps() {
    use crate::format::transcript::{
        Content, Message, ToolResultContent, ToolResultPart, ToolUsePart,
    };
    let mut msgs = Vec::new();
    for i in 0..12_000u32 {
        // Repeated texts (ids with `_N`), tool calls and their results, thinking, CJK.
        let said = format!("question {} 質問", i % 50);
        msgs.push(Message::new("user", vec![Content::text(&said)]));
        let call = format!("t{i}");
        msgs.push(Message::new(
            "assistant",
            vec![
                Content::text("looking 見る"),
                Content::ToolUse(ToolUsePart {
                    id: call.clone(),
                    name: "Bash".into(),
                    input: crate::format::transcript::RawJson::from_text("{\"n\":1}")
                        .expect("json"),
                    extra: Default::default(),
                }),
            ],
        ));
        msgs.push(Message::new(
            "user",
            vec![Content::ToolResult(ToolResultPart {
                tool_use_id: call,
                content: Some(ToolResultContent::Text(format!("output {}", i % 7))),
                is_error: None,
                extra: Default::default(),
            })],
        ));
    }
    let refs: Vec<&Message> = msgs.iter().collect();
    let blocks: usize = refs.iter().map(|m| m.content.len()).sum();
    assert!(blocks >= 2 * PARALLEL_BLOCKS, "{blocks} blocks");
    let whole = project(&refs);
    let mut memo = ProjectionMemo::default();
    let mut stepped: Vec<Core> = Vec::new();
    // Each list given back to be made again in (as after an append): the last step, which
    // appends nothing, is made in the list of the one before.
    let mut reused = 0;
    for end in (0..=refs.len()).step_by(999).chain([refs.len()]) {
        let given = stepped.as_ptr();
        memo.give_back(std::mem::take(&mut stepped), true);
        stepped = memo.project(&refs[..end]);
        reused += usize::from(stepped.as_ptr() == given);
    }
    assert!(reused >= 1, "no list was made again in place");
    let key = |c: &Core| {
        (
            c.id.to_string(),
            c.role,
            c.kind,
            c.text.get().into_owned(),
            c.tokens,
            c.chars,
            c.pair,
            c.tool.to_string(),
            c.call.to_string(),
            format!("{:?}", c.origin),
            (c.by_assistant, c.marked, c.headed),
        )
    };
    assert_eq!(whole.len(), stepped.len());
    assert!(whole.iter().map(key).eq(stepped.iter().map(key)));
    assert!(whole.iter().any(|c| c.id.ends_with("_1")));
}

#[test]
fn repeats_are_numbered_in_order_of_occurrence() {
    let mut r = Repeats::default();
    let got: Vec<String> = [7u64, 7, 9, 7, 9, 11, 7]
        .into_iter()
        .map(|d| r.next(d).to_string())
        .collect();
    assert_eq!(
        got,
        [
            "h_0000000000000007",
            "h_0000000000000007_1",
            "h_0000000000000009",
            "h_0000000000000007_2",
            "h_0000000000000009_1",
            "h_000000000000000b",
            "h_0000000000000007_3",
        ]
    );
}
