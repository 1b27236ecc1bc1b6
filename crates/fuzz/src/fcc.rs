//! The FC checkpoint library's image and harness (fc-checkpoint-sigmod11
//! §2.2: two checkpoint slots and logical-log segments, with their own
//! format and CRC32C, not the storage crate's blocks).
//!
//! The image is a deterministic application: 512 words, 43 ticks of
//! logged "add to word" actions, a checkpoint every 5 ticks, all released
//! (durable). Its files use flat names, kept in an [`Image`] as relative
//! paths.

use std::path::PathBuf;
use std::sync::Arc;

use epochdb_fcc::{recover, Algorithm, Config, Fcc, Recovered, SimStorage, Storage};

use crate::damage::Damage;
use crate::image::{self, Image, ImageFile};

/// The image's name (`images/NAME.img`).
pub const IMAGE: &str = "fcc-zigzag";
const WORDS: usize = 512;
const TICKS: u64 = 43;

/// The application's configuration: Wait-Free Zigzag, a checkpoint every
/// five ticks.
pub fn config() -> Config {
    Config {
        checkpoint_period_ticks: 5,
        ..Config::new(Algorithm::ZigzagPacked)
    }
}

/// Tick `t`'s actions: (word, amount), each logged as 10 bytes.
fn actions(tick: u64) -> impl Iterator<Item = (usize, u64)> {
    (0..7u64).map(move |i| {
        (
            ((tick * 37 + i * 101) % WORDS as u64) as usize,
            tick * 10 + i,
        )
    })
}

fn record(word: usize, add: u64) -> [u8; 10] {
    let mut r = [0; 10];
    r[..2].copy_from_slice(&(word as u16).to_le_bytes());
    r[2..].copy_from_slice(&add.to_le_bytes());
    r
}

/// The application's replay of one logged action; like any application's,
/// it must cope with what a damaged (but checksum-valid) log hands it.
pub fn replay(state: &mut [u64], rec: &[u8]) {
    if let ([a, b, rest @ ..], false) = (rec, state.is_empty()) {
        let word = usize::from(u16::from_le_bytes([*a, *b])) % state.len();
        let add = rest
            .get(..8)
            .map_or(0, |x| u64::from_le_bytes(x.try_into().expect("8 bytes")));
        state[word] = state[word].wrapping_add(add);
    }
}

/// The state after every tick.
pub fn expected() -> Vec<u64> {
    let mut state = vec![0; WORDS];
    for tick in 1..=TICKS {
        for (word, add) in actions(tick) {
            state[word] += add;
        }
    }
    state
}

/// Runs the application and captures its synced files.
pub fn build() -> Image {
    let disk = SimStorage::new();
    let mut app = Fcc::create(Arc::new(disk.clone()), vec![0; WORDS], config()).expect("create");
    for tick in 1..=TICKS {
        for (word, add) in actions(tick) {
            app.log_action(&record(word, add));
            let v = app.handle_read(word);
            app.handle_write(word, v + add);
        }
        app.point_of_consistency().expect("tick");
    }
    drop(app);
    capture(&disk.after_crash(1))
}

fn capture(disk: &SimStorage) -> Image {
    let mut names = disk.list().expect("list");
    names.sort();
    let files = names
        .into_iter()
        .map(|name| ImageFile {
            bytes: disk.read(&name).expect("read"),
            path: PathBuf::from(name),
        })
        .collect();
    Image { files }
}

fn restore(image: &Image) -> std::io::Result<SimStorage> {
    let disk = SimStorage::new();
    for file in &image.files {
        let mut f = disk.create(&file.path.to_string_lossy())?;
        f.append(&file.bytes)?;
        f.sync()?;
    }
    disk.sync_dir()?;
    Ok(disk)
}

/// Recovers the image (undamaged: the state after every tick).
pub fn open(image: &Image) -> Result<Recovered, epochdb_fcc::Error> {
    let disk = restore(image).map_err(epochdb_fcc::Error::from)?;
    recover(&disk, replay)
}

/// Rewrites the CRC32C of a checkpoint file (over all but its 8-byte
/// trailer) or of every log block (walked by its payload lengths), so that
/// damage reaches the decoders behind the checksum.
fn reseal(bytes: &mut [u8]) {
    if bytes.starts_with(b"FCCCKPT1") && bytes.len() >= 48 {
        let at = bytes.len() - 8;
        let crc = crc32c::crc32c(&bytes[..at]);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        return;
    }
    let mut at = 0usize;
    while bytes.get(at..at + 4) == Some(b"FCLG") && at + 24 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 20..at + 24].try_into().expect("4")) as usize;
        let end = at + 24 + len;
        if end + 4 > bytes.len() {
            return;
        }
        let crc = crc32c::crc32c(&bytes[at..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_le_bytes());
        at = end + 4;
    }
}

/// The loaded image.
pub fn loaded() -> &'static Image {
    static LOADED: std::sync::OnceLock<Image> = std::sync::OnceLock::new();
    LOADED.get_or_init(|| image::load(IMAGE))
}

/// The image with `damage` applied, its checksums recomputed if the
/// damage says so (this library's own layout: see `reseal`).
pub fn damaged(damage: &Damage) -> Image {
    let mut image = damage.apply(loaded());
    if damage.reseal {
        for file in &mut image.files {
            reseal(&mut file.bytes);
        }
    }
    image
}

/// The fuzz target: damages the image, recovers it and, if that succeeds,
/// resumes the application for a few ticks. Errors are fine; a panic or
/// a hang is the bug.
pub fn recover_damaged(data: &[u8]) {
    let image = damaged(&Damage::from_bytes(data));
    // `epochdb inspect` of each file: its decoder is separate from
    // recovery's.
    for file in &image.files {
        let name = file.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let mut out = String::new();
        let _ = epochdb_fcc::inspect::inspect_bytes(name, &file.bytes, true, &mut out);
    }
    let Ok(disk) = restore(&image) else { return };
    let Ok(recovered) = recover(&disk, replay) else {
        return;
    };
    let Ok(mut app) = Fcc::resume(Arc::new(disk), recovered, config()) else {
        return;
    };
    for tick in 0..3u64 {
        app.log_action(&record(tick as usize, 1));
        let v = app.handle_read(tick as usize % app.words());
        app.handle_write(tick as usize % app.words(), v + 1);
        if app.point_of_consistency().is_err() {
            return;
        }
    }
}
