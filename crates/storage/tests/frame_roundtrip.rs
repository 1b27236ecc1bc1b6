//! Why: the framing decoder reads whatever a crash or a bad disk leaves, so
//! it must never panic on any bytes, must return exactly what was encoded,
//! and must call every cut of valid data a torn tail.

use epochdb_storage::{
    blocks, decode_block, encode_block, seal_block, FrameError, BLOCK_HEADER_BYTES,
};
use proptest::prelude::*;

const MAGIC: u32 = 0x4652_4d31;

fn block_strategy() -> impl Strategy<Value = (u16, u16, Vec<u8>)> {
    (
        any::<u16>(),
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
}

proptest! {
    #[test]
    fn random_bytes_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..400),
        offset in 0usize..450,
        magic in any::<u32>(),
    ) {
        let _ = decode_block(&data, offset, magic);
        prop_assert!(blocks(&data, magic).count() <= data.len() / BLOCK_HEADER_BYTES + 1);
    }

    #[test]
    fn garbage_after_magic_never_panics(
        tail in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        // Random bytes rarely start with the magic; force the deeper paths.
        let mut data = MAGIC.to_le_bytes().to_vec();
        data.extend_from_slice(&tail);
        let _ = blocks(&data, MAGIC).count();
    }

    #[test]
    fn round_trip(items in proptest::collection::vec(block_strategy(), 0..8)) {
        let mut data = Vec::new();
        for (version, kind, payload) in &items {
            encode_block(&mut data, MAGIC, *version, *kind, payload);
        }
        let decoded: Vec<_> = blocks(&data, MAGIC).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(decoded.len(), items.len());
        for ((_, block), (version, kind, payload)) in decoded.iter().zip(&items) {
            prop_assert_eq!(block.version, *version);
            prop_assert_eq!(block.kind, *kind);
            prop_assert_eq!(block.payload, &payload[..]);
        }
        prop_assert_eq!(decode_block(&data, data.len(), MAGIC), Ok(None));
    }

    #[test]
    fn every_cut_is_a_torn_tail(
        items in proptest::collection::vec(block_strategy(), 1..5),
        cut_fraction in 0.0f64..1.0,
    ) {
        let mut data = Vec::new();
        let mut starts = Vec::new();
        for (version, kind, payload) in &items {
            starts.push(data.len());
            encode_block(&mut data, MAGIC, *version, *kind, payload);
        }
        let cut = (data.len() as f64 * cut_fraction) as usize;
        let cut_data = &data[..cut];
        let mut decoded = 0;
        let mut end = None;
        for item in blocks(cut_data, MAGIC) {
            match item {
                Ok(_) => decoded += 1,
                Err(e) => end = Some(e),
            }
        }
        let whole = starts.iter().filter(|&&s| s < cut).count();
        if starts.contains(&cut) {
            prop_assert_eq!(end, None);
            prop_assert_eq!(decoded, whole);
        } else {
            prop_assert_eq!(end, Some(FrameError::TornTail { offset: starts[whole - 1] }));
            prop_assert_eq!(decoded, whole - 1);
        }
    }
}

#[test]
fn seal_in_place_matches_encode() {
    let payload = b"built in place";
    let mut in_place = vec![0u8; BLOCK_HEADER_BYTES];
    in_place.extend_from_slice(payload);
    seal_block(&mut in_place, MAGIC, 3, 4);
    let mut encoded = Vec::new();
    encode_block(&mut encoded, MAGIC, 3, 4, payload);
    assert_eq!(in_place, encoded);
}

#[test]
fn offset_past_end_is_corrupt() {
    assert!(matches!(
        decode_block(&[], 1, MAGIC),
        Err(FrameError::Corrupt { offset: 1, .. })
    ));
}
