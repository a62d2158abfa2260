//! iterion-runtime (placeholder until its issue lands).
