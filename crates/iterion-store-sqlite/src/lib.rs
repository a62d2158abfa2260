//! iterion-store-sqlite (placeholder until its issue lands).
