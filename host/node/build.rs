//! Links the addon as Node.js expects (napi-rs).

fn main() {
    napi_build::setup();
}
