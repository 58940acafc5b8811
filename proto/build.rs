//! Compiles the `.proto` files in `proto/` with `protox` (no system `protoc`)
//! and generates the Rust types with `prost-build`.

use std::error::Error;

const PROTO_DIR: &str = "proto";
const PROTOS: [&str; 2] = [
    "proto/MLDataFormats.proto",
    "proto/SchemaStorageFormat.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_DIR}");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, [PROTO_DIR])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
