//! The stats stage: pure decision functions over per-round timings (being written).
