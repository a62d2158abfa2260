//! iterion-store-postgres (placeholder until its issue lands).
