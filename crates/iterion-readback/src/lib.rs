//! ADR-143 drain (lands with its issue).
