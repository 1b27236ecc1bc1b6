//! Rebuilds the fuzz harnesses' disk images under `crates/fuzz/images/`
//! (after a format change, when `tests/images.rs` says they no longer
//! recover): `cargo run -p epochdb-fuzz --bin make-images [NAME…]` (all
//! images without names; the engine's and the HybridLog's are not
//! byte-for-byte reproducible, so rebuild only those that need it).

use epochdb_fuzz::{engine, fcc, hybridlog, image::images_dir, Image};

fn write(name: &str, image: &Image) {
    let path = images_dir().join(format!("{name}.img"));
    std::fs::write(&path, image.encode()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    println!(
        "{}: {} files, {} bytes",
        path.display(),
        image.files.len(),
        image.bytes()
    );
}

fn main() {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let want = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    std::fs::create_dir_all(images_dir()).expect("images directory");
    for name in hybridlog::IMAGES {
        if want(name) {
            write(name, &hybridlog::build(name));
        }
    }
    for (name, mode) in engine::IMAGES {
        if want(name) {
            write(name, &engine::build(mode));
        }
    }
    if want(fcc::IMAGE) {
        write(fcc::IMAGE, &fcc::build());
    }
}
