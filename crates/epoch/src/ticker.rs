//! The designated thread that advances the global epoch periodically
//! (silor-osdi14 §2.1: every 40 ms), and, when asked, early.
//!
//! An epoch-based durability mode acknowledges a commit once its epoch is
//! durable, so a commit waits on average half an epoch before its group
//! commit can even start. With [`EpochTicker::start_adaptive`] a caller
//! that is waiting for durability may [`EpochKick::kick`] the ticker: the
//! current epoch then ends as soon as `min_gap` has passed since the last
//! advance, instead of at the period. Under load the period still bounds
//! epochs from above; when nobody waits nothing changes. This is our
//! addition to SiloR, for latency-sensitive callers such as the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::EpochManager;

/// Asks the ticker to end the current epoch early (see the module doc).
/// Cheap to call often: only the first call per epoch wakes the thread.
#[derive(Debug)]
pub struct EpochKick {
    kicked: AtomicBool,
    thread: Thread,
}

impl EpochKick {
    /// Requests an early epoch boundary.
    #[inline]
    pub fn kick(&self) {
        if !self.kicked.load(Ordering::Relaxed) && !self.kicked.swap(true, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }
}

/// Advances the global epoch every `period` until dropped.
#[derive(Debug)]
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    kick: Arc<EpochKick>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    /// Starts the ticker thread for `manager`.
    pub fn start(manager: EpochManager, period: Duration) -> std::io::Result<Self> {
        Self::start_adaptive(manager, period, None)
    }

    /// Starts the ticker thread for `manager`; with `min_gap`, a kick ends
    /// the current epoch once `min_gap` has passed since the last advance.
    pub fn start_adaptive(
        manager: EpochManager,
        period: Duration,
        min_gap: Option<Duration>,
    ) -> std::io::Result<Self> {
        assert!(!period.is_zero(), "epoch period must be positive");
        let stop = Arc::new(AtomicBool::new(false));
        let (kick_tx, kick_rx) = std::sync::mpsc::channel::<Arc<EpochKick>>();
        let thread = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    let Ok(kick) = kick_rx.recv() else { return };
                    let mut last = Instant::now();
                    let mut deadline = last + period;
                    while !stop.load(Ordering::Acquire) {
                        let now = Instant::now();
                        let early = min_gap.filter(|_| kick.kicked.load(Ordering::Acquire));
                        let due = match early {
                            Some(gap) => deadline.min(last + gap),
                            None => deadline,
                        };
                        if now < due {
                            // Parking may wake early (a kick); loop to recheck.
                            std::thread::park_timeout(due - now);
                            continue;
                        }
                        // Clear the request before advancing: a kick that
                        // comes after this wants the next boundary.
                        kick.kicked.store(false, Ordering::Release);
                        last = now;
                        deadline = if now >= deadline {
                            deadline + period
                        } else {
                            now + period
                        };
                        if deadline < now {
                            deadline = now + period;
                        }
                        manager.bump();
                        manager.compute_safe();
                        manager.try_drain();
                    }
                }
            })?;
        let kick = Arc::new(EpochKick {
            kicked: AtomicBool::new(false),
            thread: thread.thread().clone(),
        });
        let _ = kick_tx.send(kick.clone());
        Ok(Self {
            stop,
            kick,
            thread: Some(thread),
        })
    }

    /// The handle that asks for an early epoch boundary.
    pub fn kick_handle(&self) -> Arc<EpochKick> {
        self.kick.clone()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kicks_end_epochs_early_only_when_adaptive() {
        let manager = EpochManager::new(4);
        let period = Duration::from_secs(3600);
        let ticker =
            EpochTicker::start_adaptive(manager.clone(), period, Some(Duration::from_millis(1)))
                .unwrap();
        let first = manager.current();
        ticker.kick_handle().kick();
        let deadline = Instant::now() + Duration::from_secs(10);
        while manager.current() == first && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            manager.current() > first,
            "a kick must end the epoch long before the hour"
        );
        drop(ticker);

        let fixed = EpochTicker::start(manager.clone(), period).unwrap();
        let now = manager.current();
        fixed.kick_handle().kick();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(manager.current(), now, "a fixed ticker ignores kicks");
    }
}
