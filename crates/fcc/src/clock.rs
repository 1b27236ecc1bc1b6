//! The benchmark's per-interval clock: wall time and the mutator thread's
//! own CPU time, read together.
//!
//! The paper's figures (§5.3, Figures 8–9) time the mutator per 0.1 s
//! interval on a dedicated machine, where the two agree. On a shared
//! machine the wall clock also counts the time the mutator spent
//! preempted by other processes, which no checkpointing algorithm causes;
//! the thread's CPU time (user and system, page faults included) does not.
//! Reporting both lets a latency spike be told apart: one in both clocks is
//! the algorithm's work, one in wall time only is a preemption.

use rustix::time::{clock_gettime, ClockId};
use std::time::{Duration, Instant};

/// The calling thread's CPU time so far.
fn thread_cpu_time() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Started on the mutator's thread; read on the same thread.
pub(crate) struct IntervalClock {
    wall: Instant,
    cpu: Duration,
}

/// One interval's duration by both clocks, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct IntervalTime {
    /// Wall-clock time.
    pub(crate) wall_ms: f64,
    /// The thread's CPU time.
    pub(crate) cpu_ms: f64,
}

impl IntervalClock {
    /// Starts both clocks now.
    pub(crate) fn start() -> Self {
        Self {
            cpu: thread_cpu_time(),
            wall: Instant::now(),
        }
    }

    /// Time since [`IntervalClock::start`] by both clocks.
    pub(crate) fn elapsed(&self) -> IntervalTime {
        let wall = self.wall.elapsed();
        let cpu = thread_cpu_time().saturating_sub(self.cpu);
        IntervalTime {
            wall_ms: wall.as_secs_f64() * 1e3,
            cpu_ms: cpu.as_secs_f64() * 1e3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_counts_work_but_not_sleep() {
        let clock = IntervalClock::start();
        std::thread::sleep(Duration::from_millis(30));
        let slept = clock.elapsed();
        assert!(slept.wall_ms >= 30.0, "{slept:?}");
        assert!(slept.cpu_ms < 10.0, "sleeping is not CPU time: {slept:?}");

        let clock = IntervalClock::start();
        let mut x = 1u64;
        while clock.elapsed().wall_ms < 20.0 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spun = clock.elapsed();
        assert!(
            spun.cpu_ms > 0.0 && spun.cpu_ms <= spun.wall_ms + 1.0,
            "{spun:?}"
        );
    }
}
