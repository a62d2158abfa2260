//! iterion-testkit (placeholder until its issue lands).
