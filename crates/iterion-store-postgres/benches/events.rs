//! Placeholder; the benchmark lands next.
fn main() {}
