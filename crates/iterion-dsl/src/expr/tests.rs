//! Unit tests of the expression language.

use serde_json::json;

use super::*;

fn eval_on(src: &str, input: &Value) -> Result<Value, ExprError> {
    Expr::parse(src)?.eval(&MapScope {
        input: Some(input),
        ..MapScope::default()
    })
}

#[test]
fn precedence_and_operators() {
    let input = json!({"a": 2, "b": 3, "ok": true, "s": "x", "list": [1, 2, 2]});
    for (src, want) in [
        ("1 + 2 * 3", json!(7)),
        ("(1 + 2) * 3", json!(9)),
        ("-a + b", json!(1)),
        ("7 % 4", json!(3)),
        ("7 / 2", json!(3)),
        // integral floats divide as integers, as upstream
        ("7.0 / 2", json!(3)),
        ("7.5 / 2", json!(3.75)),
        ("a < b && ok", json!(true)),
        ("not ok or a == 2", json!(true)),
        ("!ok", json!(false)),
        ("s + 1", json!("x1")),
        ("s == 'x'", json!(true)),
        ("a == 2.0", json!(true)),
        ("a == \"2\"", json!(false)),
        ("length(list)", json!(3)),
        ("length(unique(list))", json!(2)),
        ("contains(list, 2)", json!(true)),
        ("join(list, \"-\")", json!("1-2-2")),
        ("concat(list, list)", json!([1, 2, 2, 1, 2, 2])),
        ("if(a > 5, 1 / 0, 'small')", json!("small")),
        ("input.a + 1", json!(3)),
        ("missing", Value::Null),
        ("missing.deep.path == missing", json!(true)),
    ] {
        assert_eq!(eval_on(src, &input), Ok(want), "{src}");
    }
}

#[test]
fn truthiness_as_upstream() {
    for (v, want) in [
        (json!(null), false),
        (json!("false"), false),
        (json!(" No "), false),
        (json!("0"), false),
        (json!(""), false),
        (json!("yes"), true),
        (json!(0.0), false),
        (json!([]), false),
        (json!({"k": 1}), true),
    ] {
        assert_eq!(truthy(&v), want, "{v}");
    }
}

#[test]
fn parse_errors_point_at_the_column() {
    for (src, offset) in [
        ("a ==", 4),
        ("a = b", 2),
        ("a & b", 2),
        ("(a", 2),
        ("a b", 2),
        ("'open", 0),
        ("x.1", 2),
        ("a @ b", 2),
    ] {
        let e = Expr::parse(src).expect_err(src);
        assert_eq!(e.code(), "C040", "{src}");
        assert_eq!(e.offset(), Some(offset), "{src}: {e}");
    }
    let e = Expr::parse("len(x)").expect_err("unknown function");
    assert!(matches!(e, ExprError::UnknownFunction { ref name, offset: 0 } if name == "len"));
}

#[test]
fn depth_is_capped_without_recursing_on_chains() {
    let deep = format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000));
    assert!(matches!(Expr::parse(&deep), Err(ExprError::TooDeep { .. })));
    let nots = format!("{}a", "!".repeat(10_000));
    assert!(matches!(Expr::parse(&nots), Err(ExprError::TooDeep { .. })));
    let ok = format!("{}a{}", "(".repeat(200), ")".repeat(200));
    assert!(Expr::parse(&ok).is_ok());
    // a flat chain of a million terms parses and evaluates on a test
    // thread's stack: chains are not nested nodes
    let long = vec!["1"; 1_000_000].join(" + ");
    assert_eq!(eval_on(&long, &Value::Null), Ok(json!(1_000_000)));
}

#[test]
fn eval_errors_are_typed() {
    for src in [
        "1 / 0",
        "9223372036854775807 + 1",
        "'a' + list",
        "length(1)",
        "join(list)",
        "-'x'",
        "ok < 1",
    ] {
        let e = eval_on(src, &json!({"list": [1], "ok": true})).expect_err(src);
        assert_eq!(e.code(), "EXPR_EVAL", "{src}");
    }
}

#[test]
fn refs_name_their_namespace() {
    let e = Expr::parse("vars.x > outputs.n.count && approved").expect("parse");
    let refs: Vec<(String, Vec<String>)> = e
        .refs()
        .into_iter()
        .map(|r| (r.namespace, r.path))
        .collect();
    assert_eq!(
        refs,
        vec![
            ("vars".into(), vec!["x".into()]),
            ("outputs".into(), vec!["n".into(), "count".into()]),
            ("input".into(), vec!["approved".into()]),
        ]
    );
}

proptest::proptest! {
    #[test]
    fn never_panics(src in "[ -~]{0,60}") {
        if let Ok(e) = Expr::parse(&src) {
            let _ = e.eval(&MapScope::default());
        }
    }
}
