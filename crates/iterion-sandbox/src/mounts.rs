//! Mount planning (facts §6) and the per-driver finalize step (ADR-143).
