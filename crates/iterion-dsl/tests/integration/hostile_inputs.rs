//! Generators of hostile `.iter` inputs of a given size, shared by the
//! bounds tests (`hostile.rs`, allocation and output) and the parse bench
//! (`benches/parse.rs`, wall time), so both measure the same inputs.

pub fn nul(n: usize) -> String {
    "\0".repeat(n)
}

pub fn deep_indent(n: usize) -> String {
    let mut s = String::from("workflow w:\n");
    let mut depth = 1;
    while s.len() < n {
        s.push_str(&" ".repeat(depth * 2));
        s.push_str("k:\n");
        depth = depth % 400 + 1;
    }
    s
}

pub fn deep_brackets(n: usize) -> String {
    let mut s = String::from("tool a:\n  command: \"x\"\n  tools: ");
    s.push_str(&"[{(".repeat(n / 6));
    s.push_str(&")}]".repeat(n / 6));
    s.push_str("\n\nworkflow w:\n  entry: a\n  a -> done\n");
    s
}

pub fn long_line(n: usize) -> String {
    format!("tool a:\n  command: \"{}\n", "x".repeat(n))
}

pub fn many_errors(n: usize) -> String {
    // distinct lexer and compile errors, alternating, so nothing merges
    let mut s = String::new();
    let mut i = 0usize;
    while s.len() < n {
        s.push_str(&format!("# c{i}\n@@ {i} ]]\nagent a{i}:\n  bogus{i}: 1\n"));
        i += 1;
    }
    s
}

pub fn open_bracket_then_blank(n: usize) -> String {
    format!("tool a:\n  tools: [\n{}", "\n".repeat(n))
}

/// Every kind at `n` bytes, named.
#[allow(
    dead_code,
    reason = "the bench uses it, the tests use the kinds one by one"
)]
pub fn all(n: usize) -> Vec<(&'static str, String)> {
    vec![
        ("NULs", nul(n)),
        ("deep nesting", deep_indent(n)),
        ("deep brackets", deep_brackets(n)),
        ("long line", long_line(n)),
        ("many errors", many_errors(n)),
        ("open bracket", open_bracket_then_blank(n)),
    ]
}
