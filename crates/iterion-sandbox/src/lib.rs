//! iterion-sandbox (placeholder until its issue lands).
