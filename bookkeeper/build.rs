//! Compiles `proto/DataFormats.proto` with `protox` (no system `protoc`) and
//! generates the Rust types with `prost-build`.

use std::error::Error;

const PROTO: &str = "proto/DataFormats.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
