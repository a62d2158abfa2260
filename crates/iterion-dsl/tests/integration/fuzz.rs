//! Arbitrary bytes and mutations of the real fixtures through the lexer,
//! parser and compiler: diagnostics are fine, panics are not.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

fn corpus() -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["valid", "invalid"] {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(kind);
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        paths.sort();
        for p in paths {
            out.push(std::fs::read_to_string(p).expect("read"));
        }
    }
    out
}

fn check(text: &str) {
    let c = iterion_dsl::compile_source(text, Path::new("fuzz.iter"));
    for d in &c.diagnostics {
        assert!(d.line >= 1 && d.column >= 1);
    }
    assert!(c.diagnostics.len() <= iterion_dsl::diag::MAX_PER_FILE);
    let human = iterion_dsl::render_human(text, &c.diagnostics);
    crate::hostile::assert_rendering_bounded(&human, c.diagnostics.len());
    let json = iterion_dsl::diag::json_file("fuzz.iter", &c.diagnostics, c.omitted);
    assert!(serde_json::to_string(&json).is_ok());
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize, usize),
    Insert(usize, String),
    Duplicate(usize, usize),
    Swap(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "\n",
                "  ",
                "\t",
                "\"",
                "`",
                "|",
                ":",
                "[",
                "]",
                "{",
                "}",
                "(",
                ")",
                "->",
                "##",
                "#",
                "\\",
                "when",
                "as x(",
                "with {",
                "sandbox:\n    ",
                "\u{feff}",
                "é",
                "\r\n",
            ])
            .prop_map(str::to_string)
        )
            .prop_map(|(a, s)| Mutation::Insert(a, s)),
        (any::<usize>(), 0usize..200).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
    ]
}

fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for m in muts {
        let len = chars.len().max(1);
        match m {
            Mutation::Delete(a, n) => {
                let a = a % len;
                let b = (a + n).min(chars.len());
                if a < b {
                    chars.drain(a..b);
                }
            }
            Mutation::Insert(a, s) => {
                let a = a % (chars.len() + 1);
                chars.splice(a..a, s.chars());
            }
            Mutation::Duplicate(a, n) => {
                let a = a % len;
                let b = (a + n).min(chars.len());
                if a < b {
                    let dup: Vec<char> = chars[a..b].to_vec();
                    chars.splice(b..b, dup);
                }
            }
            Mutation::Swap(a, b) => {
                if !chars.is_empty() {
                    let (a, b) = (a % chars.len(), b % chars.len());
                    chars.swap(a, b);
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    // 256 cases by default; `PROPTEST_CASES=N` runs more
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn token_soup_never_panics(parts in prop::collection::vec(prop::sample::select(vec![
        "tool", "agent", "workflow", "w", "a", ":", "\n", "  ", "->", "done", "fail", "when",
        "not", "as", "l(", "3", ")", "with", "{", "}", "[", "]", ",", "\"s\"", "`r`", "|",
        "sandbox", "mode", "network", "read_back", "##c", "#", "prompt", "schema", "bool",
    ]), 0..200)) {
        check(&parts.concat());
    }

    #[test]
    fn mutated_fixtures_never_panic(idx in any::<usize>(), muts in prop::collection::vec(mutation(), 1..8)) {
        let corpus = corpus();
        let base = &corpus[idx % corpus.len()];
        check(&apply(base, &muts));
    }
}

#[test]
fn committed_crash_corpus() {
    // inputs that once broke an early version; kept small on purpose
    for text in [
        "",
        "\n\n\n",
        "prompt p:",
        "prompt p:\n",
        "a: |",
        "a: |\n",
        "workflow w:\n  a -> b with {",
        "workflow w:\n  sandbox:\n    network:\n",
        "`",
        "\"",
        "x: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "tool a:\n        command: \"x\"\n  output: y\n",
        "workflow w:\n  entry: a\n  a -> a -> a -> done as l(0)",
        "workflow w:\n  x -> y as foreach(",
    ] {
        check(text);
    }
}
