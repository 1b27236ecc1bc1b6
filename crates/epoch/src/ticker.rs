//! The designated thread that advances the global epoch periodically
//! (silor-osdi14 §2.1: every 40 ms).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::EpochManager;

/// Advances the global epoch every `period` until dropped.
#[derive(Debug)]
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts the ticker thread for `manager`.
    pub fn start(manager: EpochManager, period: Duration) -> std::io::Result<Self> {
        assert!(!period.is_zero(), "epoch period must be positive");
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    let mut deadline = Instant::now() + period;
                    while !stop.load(Ordering::Acquire) {
                        let now = Instant::now();
                        if now < deadline {
                            // Parking may wake early; loop until the deadline.
                            std::thread::park_timeout(deadline - now);
                            continue;
                        }
                        deadline += period;
                        manager.bump();
                        manager.compute_safe();
                        manager.try_drain();
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}
