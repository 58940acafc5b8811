//! Compiles `proto/PulsarApi.proto` with `protox` (no system `protoc`) and
//! generates the Rust types with `prost-build`.
//!
//! `CommandConnect` is not generated: `src/connect.rs` implements it by hand
//! so that its fields are written in Pulsar's order.

use std::error::Error;

const PROTO_DIR: &str = "proto";
const PROTO: &str = "proto/PulsarApi.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], [PROTO_DIR])?;
    prost_build::Config::new()
        .extern_path(
            ".pulsar.proto.CommandConnect",
            "crate::connect::CommandConnect",
        )
        .compile_fds(descriptors)?;
    Ok(())
}
