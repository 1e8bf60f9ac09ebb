//! Shared helpers for cairn benchmarks (data generators).
