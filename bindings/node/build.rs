//! Sets the linker flags a Node addon needs (undefined N-API symbols are
//! resolved by the node process that loads it).
fn main() {
    napi_build::setup();
}
