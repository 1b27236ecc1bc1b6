//! `--pin-threads` for the benches that run a store's own threads beside
//! the measured ones (`bench wal`, `bench hybridlog`): the measured
//! threads get a CPU each, the store's background threads the CPUs left
//! over, as the papers gave their pipelines and checkpointers cores of
//! their own (eleda §6.1, silor §6).

/// The CPUs of the measured threads and of the store's own.
pub(crate) struct Placement {
    /// One per measured thread (round robin past the last).
    measured: Vec<usize>,
    /// The store's background threads share these.
    background: Vec<usize>,
}

impl Placement {
    /// The first `threads` allowed CPUs for measured threads, the rest for
    /// the background; nothing pinned without `pin` or when the CPUs cannot
    /// be read.
    pub(crate) fn new(pin: bool, threads: usize) -> Self {
        let cpus: Vec<usize> = match rustix::thread::sched_getaffinity(None) {
            Ok(set) if pin => (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect(),
            _ => Vec::new(),
        };
        let split = threads.min(cpus.len());
        Self {
            measured: cpus[..split].to_vec(),
            background: cpus[split..].to_vec(),
        }
    }

    /// Runs `open` with the calling thread pinned to the background CPUs,
    /// so that the threads it spawns start there; restores the affinity.
    pub(crate) fn for_background<T>(&self, open: impl FnOnce() -> T) -> T {
        let before = rustix::thread::sched_getaffinity(None).ok();
        if self.background.is_empty() || before.is_none() {
            return open();
        }
        pin(&self.background);
        let result = open();
        if let Some(set) = before {
            // Placement is a hint: a failure leaves the thread where it is.
            let _ = rustix::thread::sched_setaffinity(None, &set);
        }
        result
    }

    /// Pins measured thread `t` to its CPU (round robin).
    pub(crate) fn pin_measured_thread(&self, t: usize) {
        if !self.measured.is_empty() {
            pin(&[self.measured[t % self.measured.len()]]);
        }
    }
}

/// Pins the calling thread to `cpus`; a failure leaves it where it is.
fn pin(cpus: &[usize]) {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}
