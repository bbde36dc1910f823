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
    assert_eq!(r.next(0xab), "h_00000000000000ab");
    assert_eq!(r.next(0xab), "h_00000000000000ab_1");
    assert_eq!(r.next(0xab), "h_00000000000000ab_2");
    assert_eq!(r.next(0xcd), "h_00000000000000cd");
}
