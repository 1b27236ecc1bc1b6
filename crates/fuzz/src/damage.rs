//! What a fuzzer does to a disk image: [`Damage`], decoded from its bytes
//! with `arbitrary`, and how it is applied.

use arbitrary::{Arbitrary, Unstructured};
use epochdb_storage::{seal_block, BLOCK_HEADER_BYTES};

use crate::image::Image;

/// One change to one file of an image. `file` picks a file (modulo the
/// image's file count), `at` a byte (modulo the file's length).
#[derive(Arbitrary, Debug, Clone)]
pub enum Edit {
    /// XORs one byte with `mask`.
    Xor {
        /// The file.
        file: u8,
        /// The byte.
        at: u32,
        /// Bits to flip.
        mask: u8,
    },
    /// Overwrites the 8-byte word at `at` rounded down to 8 (addresses,
    /// lengths and counts in every format are 8-byte words or lie in one).
    Word {
        /// The file.
        file: u8,
        /// A byte in the word.
        at: u32,
        /// The new word.
        value: u64,
    },
    /// Adds `delta` to the 8-byte word at `at` rounded down to 8: an
    /// address or length moved a little, which random words rarely do.
    Nudge {
        /// The file.
        file: u8,
        /// A byte in the word.
        at: u32,
        /// Added, wrapping.
        delta: i16,
    },
    /// Cuts the file to `len` bytes (modulo its length + 1).
    Truncate {
        /// The file.
        file: u8,
        /// The new length.
        len: u32,
    },
    /// Removes the file.
    Remove {
        /// The file.
        file: u8,
    },
}

/// Damage to one of a store's images.
#[derive(Arbitrary, Debug, Clone)]
pub struct Damage {
    /// Which image (modulo the number of images).
    pub image: u8,
    /// Recompute the checksum of every block of the files that were framed
    /// blocks before the damage, so the decoders behind the checksum see
    /// the damaged payloads.
    pub reseal: bool,
    /// The edits, applied in order.
    pub edits: Vec<Edit>,
}

impl Damage {
    /// Decodes fuzzer bytes (anything decodes; short input means fewer
    /// edits).
    pub fn from_bytes(data: &[u8]) -> Self {
        Damage::arbitrary_take_rest(Unstructured::new(data)).unwrap_or(Damage {
            image: 0,
            reseal: false,
            edits: Vec::new(),
        })
    }

    /// Applies the edits to a copy of `image` and, when asked, reseals
    /// its framed files.
    pub fn apply(&self, image: &Image) -> Image {
        let mut out = image.clone();
        for edit in &self.edits {
            apply_edit(&mut out, edit);
        }
        if self.reseal {
            for file in &mut out.files {
                if let Some(magic) = image.framed_magic(&file.path) {
                    reseal(&mut file.bytes, magic);
                }
            }
        }
        out
    }
}

fn apply_edit(image: &mut Image, edit: &Edit) {
    let count = image.files.len();
    if count == 0 {
        return;
    }
    let pick = |file: u8| usize::from(file) % count;
    match *edit {
        Edit::Xor { file, at, mask } => {
            let bytes = &mut image.files[pick(file)].bytes;
            if !bytes.is_empty() {
                let i = at as usize % bytes.len();
                bytes[i] ^= mask;
            }
        }
        Edit::Word { file, at, value } => {
            if let Some(word) = word_at(&mut image.files[pick(file)].bytes, at) {
                word.copy_from_slice(&value.to_le_bytes());
            }
        }
        Edit::Nudge { file, at, delta } => {
            if let Some(word) = word_at(&mut image.files[pick(file)].bytes, at) {
                let old = u64::from_le_bytes((&*word).try_into().expect("8 bytes"));
                let new = old.wrapping_add(i64::from(delta) as u64);
                word.copy_from_slice(&new.to_le_bytes());
            }
        }
        Edit::Truncate { file, len } => {
            let bytes = &mut image.files[pick(file)].bytes;
            let len = len as usize % (bytes.len() + 1);
            bytes.truncate(len);
        }
        Edit::Remove { file } => {
            image.files.remove(pick(file));
        }
    }
}

/// The whole 8-byte word holding byte `at` (modulo the length), if the
/// file has one.
fn word_at(bytes: &mut [u8], at: u32) -> Option<&mut [u8]> {
    let words = bytes.len() / 8;
    if words == 0 {
        return None;
    }
    let i = (at as usize / 8) % words * 8;
    Some(&mut bytes[i..i + 8])
}

/// Rewrites the checksum of every block of `bytes` whose header carries
/// `magic`, walking the headers' lengths as a reader would (each block is
/// resealed by the storage crate with its own header's version and kind).
fn reseal(bytes: &mut [u8], magic: u32) {
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + BLOCK_HEADER_BYTES) {
        if header[..4] != magic.to_le_bytes() {
            return;
        }
        let version = u16::from_le_bytes([header[4], header[5]]);
        let kind = u16::from_le_bytes([header[6], header[7]]);
        let len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + BLOCK_HEADER_BYTES)
            .checked_add(len)
            .filter(|&end| end <= bytes.len())
        else {
            return;
        };
        seal_block(&mut bytes[at..end], magic, version, kind);
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::ImageFile;
    use epochdb_storage::{decode_block, encode_block};
    use std::path::PathBuf;

    const MAGIC: u32 = 0x5a5a_0001;

    fn framed() -> Image {
        let mut bytes = Vec::new();
        encode_block(&mut bytes, MAGIC, 1, 2, b"first payload");
        encode_block(&mut bytes, MAGIC, 1, 2, b"second");
        Image {
            files: vec![ImageFile {
                path: PathBuf::from("/d/f"),
                bytes,
            }],
        }
    }

    #[test]
    fn a_flip_fails_the_checksum_unless_resealed() {
        let image = framed();
        let flip = Edit::Xor {
            file: 0,
            at: 17,
            mask: 0x40,
        };
        for reseal in [false, true] {
            let damage = Damage {
                image: 0,
                reseal,
                edits: vec![flip.clone()],
            };
            let out = damage.apply(&image);
            let bytes = &out.files[0].bytes;
            let first = decode_block(bytes, 0, MAGIC);
            assert_eq!(first.is_ok(), reseal, "{first:?}");
            if reseal {
                let (block, next) = first.unwrap().unwrap();
                assert_eq!(block.payload[1], b'i' ^ 0x40);
                assert_eq!(block.payload[2..], b"first payload"[2..]);
                assert!(decode_block(bytes, next, MAGIC).unwrap().is_some());
            }
        }
    }

    #[test]
    fn edits_stay_inside_the_files() {
        let image = framed();
        let len = image.files[0].bytes.len();
        let damage = Damage {
            image: 0,
            reseal: true,
            edits: vec![
                Edit::Word {
                    file: 9,
                    at: u32::MAX,
                    value: 7,
                },
                Edit::Nudge {
                    file: 3,
                    at: 8,
                    delta: -1,
                },
                Edit::Truncate {
                    file: 1,
                    len: u32::MAX,
                },
            ],
        };
        let out = damage.apply(&image);
        assert!(out.files[0].bytes.len() <= len);
        let removed = Damage {
            image: 0,
            reseal: false,
            edits: vec![
                Edit::Remove { file: 5 },
                Edit::Xor {
                    file: 0,
                    at: 0,
                    mask: 1,
                },
            ],
        };
        assert!(removed.apply(&image).files.is_empty());
    }
}
