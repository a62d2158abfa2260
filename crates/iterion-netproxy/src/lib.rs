//! iterion-netproxy (placeholder until its issue lands).
