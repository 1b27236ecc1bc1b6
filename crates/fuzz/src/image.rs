//! A disk image: the files a workload left on the simulated disk, kept in
//! memory, written under `images/` and put back on a fresh simulated disk
//! for every fuzz input.
//!
//! On disk an image is a sequence of the storage crate's framed blocks
//! (magic [`IMAGE_MAGIC`], a version, CRC32C), one per file: a 4-byte path
//! length, the path, the file's bytes.

use std::path::{Path, PathBuf};

use epochdb_storage::{blocks, encode_block, SimStorage, Storage, StorageError};

/// Magic of an image file's blocks ("IMG!").
pub const IMAGE_MAGIC: u32 = 0x2147_4d49;
/// Version of the image file format.
pub const IMAGE_VERSION: u16 = 1;
const KIND_FILE: u16 = 1;

/// One file of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// Its absolute path on the simulated disk.
    pub path: PathBuf,
    /// Its contents.
    pub bytes: Vec<u8>,
}

/// The files of a simulated disk, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// The files.
    pub files: Vec<ImageFile>,
}

impl Image {
    /// Every file under `root` on `disk` (what a reader sees: after a
    /// crash, what was synced).
    pub fn capture(disk: &SimStorage, root: &Path) -> Result<Self, StorageError> {
        let mut files = Vec::new();
        collect(disk, root, &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Image { files })
    }

    /// A fresh simulated disk holding exactly these files, synced (their
    /// directories too).
    pub fn restore(&self) -> Result<SimStorage, StorageError> {
        let disk = SimStorage::new(0);
        for file in &self.files {
            let dir = file.path.parent().unwrap_or(Path::new("/"));
            disk.create_dir_all(dir)?;
            let mut handle = disk.create(&file.path)?;
            handle.append(&file.bytes)?;
            handle.sync()?;
        }
        let mut dirs: Vec<&Path> = self
            .files
            .iter()
            .flat_map(|f| f.path.ancestors().skip(1))
            .collect();
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            disk.sync_dir(dir)?;
        }
        Ok(disk)
    }

    /// The magic of the framed blocks `path` consists of, if its whole
    /// contents decode as blocks of the magic in its first four bytes.
    pub fn framed_magic(&self, path: &Path) -> Option<u32> {
        let file = self.files.iter().find(|f| f.path == path)?;
        let magic = u32::from_le_bytes(file.bytes.get(..4)?.try_into().ok()?);
        if magic == 0 {
            return None;
        }
        blocks(&file.bytes, magic)
            .all(|b| b.is_ok())
            .then_some(magic)
    }

    /// The image as an image file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for file in &self.files {
            let path = file.path.to_string_lossy();
            let mut payload = Vec::with_capacity(4 + path.len() + file.bytes.len());
            payload.extend_from_slice(&(path.len() as u32).to_le_bytes());
            payload.extend_from_slice(path.as_bytes());
            payload.extend_from_slice(&file.bytes);
            encode_block(&mut out, IMAGE_MAGIC, IMAGE_VERSION, KIND_FILE, &payload);
        }
        out
    }

    /// Reads an image file.
    pub fn decode(data: &[u8]) -> Result<Self, String> {
        let mut files = Vec::new();
        for block in blocks(data, IMAGE_MAGIC) {
            let (at, block) = block.map_err(|e| e.to_string())?;
            if block.version != IMAGE_VERSION || block.kind != KIND_FILE {
                return Err(format!("block at {at}: version {}", block.version));
            }
            let bad = || format!("block at {at}: bad path");
            let len = block.payload.get(..4).ok_or_else(bad)?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let path = block.payload.get(4..4 + len).ok_or_else(bad)?;
            let path = std::str::from_utf8(path).map_err(|_| bad())?;
            files.push(ImageFile {
                path: PathBuf::from(path),
                bytes: block.payload[4 + len..].to_vec(),
            });
        }
        Ok(Image { files })
    }

    /// Bytes in all files.
    pub fn bytes(&self) -> usize {
        self.files.iter().map(|f| f.bytes.len()).sum()
    }
}

fn collect(disk: &SimStorage, dir: &Path, out: &mut Vec<ImageFile>) -> Result<(), StorageError> {
    for name in disk.list(dir)? {
        let path = dir.join(&name);
        match disk.read(&path) {
            Ok(bytes) => out.push(ImageFile { path, bytes }),
            // Not a file: a directory.
            Err(_) => collect(disk, &path, out)?,
        }
    }
    Ok(())
}

/// The images directory of this crate.
pub fn images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
}

/// Reads `images/NAME.img`.
///
/// # Panics
///
/// If the file is missing or damaged: the images are part of the source.
pub fn load(name: &str) -> Image {
    let path = images_dir().join(format!("{name}.img"));
    let data = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo run -p epochdb-fuzz --bin make-images)",
            path.display()
        )
    });
    Image::decode(&data).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_survives_the_trip_through_a_disk_and_a_file() {
        let disk = SimStorage::new(1);
        disk.create_dir_all(Path::new("/a/b")).unwrap();
        for (path, bytes) in [("/a/x", &b"one"[..]), ("/a/b/y", b""), ("/a/b/z", b"three")] {
            let mut f = disk.create(Path::new(path)).unwrap();
            f.append(bytes).unwrap();
            f.sync().unwrap();
        }
        let image = Image::capture(&disk, Path::new("/a")).unwrap();
        assert_eq!(image.files.len(), 3);
        let again = Image::capture(&image.restore().unwrap(), Path::new("/a")).unwrap();
        assert_eq!(again, image);
        assert_eq!(Image::decode(&image.encode()).unwrap(), image);
    }
}
