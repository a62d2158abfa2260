//! iterion-driver-docker (placeholder until its issue lands).
