//! Rebuilds the fuzz harnesses' disk images under `crates/fuzz/images/`
//! (after a format change, when `tests/images.rs` says they no longer
//! recover): `cargo run -p epochdb-fuzz --bin make-images`.

use epochdb_fuzz::{engine, hybridlog, image::images_dir, Image};

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
    std::fs::create_dir_all(images_dir()).expect("images directory");
    for name in hybridlog::IMAGES {
        write(name, &hybridlog::build(name));
    }
    for (name, mode) in engine::IMAGES {
        write(name, &engine::build(mode));
    }
}
