//! Helpers shared by the engine's integration tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use epochdb_storage::{CrashMode, SimStorage};
use rand::rngs::SmallRng;
use rand::Rng;

/// Waits a random time in `micros` (µs), then cuts the power (dropping or
/// tearing unsynced data, at random) and tells the writers to stop.
/// Returns the disk as the crash left it.
pub(crate) fn power_loss_after(
    storage: &SimStorage,
    rng: &mut SmallRng,
    micros: std::ops::Range<u64>,
    stop: &AtomicBool,
) -> SimStorage {
    std::thread::sleep(Duration::from_micros(rng.gen_range(micros)));
    let crashed = storage.crash(if rng.gen_bool(0.5) {
        CrashMode::DropUnsynced
    } else {
        CrashMode::TearUnsynced
    });
    stop.store(true, Ordering::Relaxed);
    crashed
}
