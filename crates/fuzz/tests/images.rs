//! Why this exists: a fuzz harness over an image that no longer recovers
//! (a format changed) would only ever test the first check that refuses
//! it. Each committed image must recover, undamaged, to exactly the state
//! its workload committed — and the harness must run on it.

use epochdb_fuzz::{engine, fcc, hybridlog, image, Damage};

#[test]
fn hybridlog_images_recover_their_last_checkpoint() {
    for (name, image) in hybridlog::IMAGES.iter().zip(hybridlog::images()) {
        let store = hybridlog::open(image).unwrap_or_else(|e| {
            panic!("{name}: {e} (cargo run -p epochdb-fuzz --bin make-images)")
        });
        let info = store.recovered().expect("a checkpoint was recovered");
        assert_eq!(info.sessions.len(), 1, "{name}: {info:?}");
        let got = hybridlog::read_all(&store).unwrap();
        let want = hybridlog::committed(name);
        assert!(want.len() > 500, "{name}: {} keys", want.len());
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn engine_images_recover_every_acknowledged_commit() {
    for ((name, mode), image) in engine::IMAGES.iter().zip(engine::images()) {
        let db = engine::open(image, *mode).unwrap_or_else(|e| {
            panic!("{name}: {e} (cargo run -p epochdb-fuzz --bin make-images)")
        });
        assert_eq!(engine::read_all(&db).unwrap(), engine::expected(), "{name}");
    }
}

#[test]
fn the_fcc_image_recovers_every_released_tick() {
    let recovered = fcc::open(fcc::loaded())
        .unwrap_or_else(|e| panic!("{e} (cargo run -p epochdb-fuzz --bin make-images)"));
    assert_eq!(recovered.tick, 43);
    assert!(recovered.replayed_ticks > 0, "{}", recovered.replayed_ticks);
    assert_eq!(recovered.words, fcc::expected());
}

#[test]
fn a_flipped_checksummed_byte_is_refused_by_the_engine() {
    // The metadata-like files are framed: one flipped payload byte without
    // a fresh checksum must be caught, not loaded.
    let (name, mode) = engine::IMAGES[0];
    let image = image::load(name);
    let framed: Vec<usize> = (0..image.files.len())
        .filter(|&i| image.framed_magic(&image.files[i].path).is_some())
        .collect();
    assert!(framed.len() >= 3, "{name}: framed files {framed:?}");
    let mut refused = 0;
    for &i in &framed {
        let damage = Damage {
            image: 0,
            reseal: false,
            edits: vec![epochdb_fuzz::Edit::Xor {
                file: i as u8,
                at: 20,
                mask: 0x10,
            }],
        };
        if engine::open(&damage.apply(&image), mode).is_err() {
            refused += 1;
        }
    }
    assert!(refused >= 1, "{name}: no flipped file was refused");
}

#[test]
fn the_harnesses_run_on_undamaged_and_damaged_images() {
    for input in [
        &[][..],
        &[1, 0],
        &[2, 1, 0, 3, 0, 0, 0, 9, 0xff],
        &[0, 1, 4, 2],
    ] {
        hybridlog::recover_damaged(input);
        engine::recover_damaged(input);
        fcc::recover_damaged(input);
    }
}
