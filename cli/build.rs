//! Links the `cairn` binary as a position-dependent executable on Linux
//! with glibc (`-no-pie`).
//!
//! Why: most commands are short processes (a hook, a script, a query from
//! a new process), so what the loader does before `main` is part of every
//! answer. As a position-independent executable the binary carries ~22,000
//! relative relocations that the loader applies at every start, writing
//! (and so copying) each page of `.data.rel.ro` they touch: ~80 of the 340
//! page faults of `cairn --version`. Linked at a fixed address, the linker
//! resolves them once and the loader has none to apply. Paired runs
//! (`cairn --version` and `cairn log --session s1 --kind prompt --limit 5
//! --json` on a store of 1,000,000 events, old binary against new): 0.85x
//! CPU and 0.89x CPU. The cost: the executable's own image is no longer
//! placed at a random address (its libraries, heap and stacks still are).
//!
//! Only the binaries of this package are linked so; the libraries and the
//! bindings (shared objects, which must stay position-independent) are not.
//! Other targets (macOS, musl, Windows) keep their defaults.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
