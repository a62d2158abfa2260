//! iterion-dsl (placeholder until its issue lands).
