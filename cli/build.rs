//! Links the `cairn` binary as a position-dependent executable on Linux.
//!
//! Every hook, script and binding that runs `cairn` pays its start-up,
//! and a query from a new process is mostly start-up (docs/BENCHMARKS.md,
//! "Queries from a new process"). Linked as a position-independent
//! executable (rustc's default), the dynamic loader applies about 22,000
//! relative relocations at every start (vtables, panic locations, string
//! tables of the HTTP and TLS stacks the archive commands carry), copying
//! some 90 pages on write: 0.33 ms of a 1.6 ms `cairn --version` on the
//! 2-core machine the benchmarks run on. Without PIE the linker resolves
//! them once, at link time.
//!
//! The cost: the binary's own code and data load at a fixed address, so
//! address-space layout randomisation covers the shared libraries, the
//! stack, the heap and the maps, but not the executable's image. The
//! library crate, the Python and Node bindings and every test binary are
//! unaffected. `CAIRN_PIE=1 cargo build` builds the binary as a PIE again.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CAIRN_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let gnu_or_musl = matches!(
        std::env::var("CARGO_CFG_TARGET_ENV").as_deref(),
        Ok("gnu") | Ok("musl")
    );
    let pie_asked = std::env::var("CAIRN_PIE").is_ok_and(|v| v == "1");
    if linux && gnu_or_musl && !pie_asked {
        println!("cargo:rustc-link-arg-bin=cairn=-no-pie");
    }
}
