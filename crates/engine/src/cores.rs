//! Thread placement (silor-osdi14 §2 and §6): with [`Config::pin_threads`],
//! each worker thread runs pinned to a core of its own, and the loggers and
//! checkpointers run on the cores left over — SiloR reserved 4 of its 32
//! cores for them, so that logging never preempts a worker. Recovery is not
//! placed: it uses every core.
//!
//! [`Config::pin_threads`]: crate::Config::pin_threads

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which CPUs the workers and the background threads (loggers,
/// checkpointers) of one database get. Empty lists mean "not pinned".
#[derive(Debug, Default)]
pub(crate) struct CorePlan {
    worker_cpus: Vec<usize>,
    background_cpus: Vec<usize>,
    next_worker: AtomicUsize,
}

impl CorePlan {
    /// The plan for `workers` workers over the CPUs this process may run
    /// on: the first `workers` CPUs for workers (all of them, shared, when
    /// there are more workers than CPUs), the rest for background threads
    /// (none left: background threads are not pinned). Without `pin`, or
    /// where the CPUs cannot be read, nothing is pinned.
    pub(crate) fn new(pin: bool, workers: usize) -> Self {
        let cpus = if pin { allowed_cpus() } else { Vec::new() };
        Self::over(&cpus, workers)
    }

    fn over(cpus: &[usize], workers: usize) -> Self {
        let split = workers.clamp(1, cpus.len().max(1)).min(cpus.len());
        Self {
            worker_cpus: cpus[..split].to_vec(),
            background_cpus: cpus[split..].to_vec(),
            next_worker: AtomicUsize::new(0),
        }
    }

    /// Pins the calling thread to the next worker CPU (round robin).
    /// Returns the CPU, or `None` when the plan pins nothing.
    pub(crate) fn pin_worker(&self) -> io::Result<Option<usize>> {
        if self.worker_cpus.is_empty() {
            return Ok(None);
        }
        let turn = self.next_worker.fetch_add(1, Ordering::Relaxed);
        let cpu = self.worker_cpus[turn % self.worker_cpus.len()];
        pin_to(&[cpu])?;
        Ok(Some(cpu))
    }

    /// The CPUs background threads are pinned to (empty: not pinned).
    pub(crate) fn background_cpus(&self) -> &[usize] {
        &self.background_cpus
    }
}

/// Pins the calling thread to `cpus` (any of them); does nothing for an
/// empty list. Placement is a performance hint: callers that cannot act
/// on an error may ignore it.
pub(crate) fn pin_to(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: cpu_set_t is plain data for which all-zero is the empty
        // set; CPU_SET writes within it (indices are checked below), and
        // sched_setaffinity(0, …) reads it for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus {
                if cpu >= libc::CPU_SETSIZE as usize {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("CPU {cpu} is beyond the affinity mask"),
                    ));
                }
                libc::CPU_SET(cpu, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Pins the calling background thread (a logger, checkpointer or acker)
/// to `cpus`. Placement is a hint: a thread that cannot be pinned still
/// does its work, so a failure is ignored.
pub(crate) fn place_background(cpus: &[usize]) {
    let _ = pin_to(cpus);
}

/// An I/O scheduling class for the calling thread (Linux `ioprio_set`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoClass {
    /// Served only when no other class waits (as the scheduler allows:
    /// mq-deadline lets a starved request through after its aging time).
    Idle,
    /// The kernel's default, derived from the thread's nice value.
    Default,
}

/// Sets the calling thread's I/O class. A hint like placement: where the
/// kernel or its I/O scheduler does not support it, nothing changes, and
/// a failure is ignored.
pub(crate) fn set_io_class(class: IoClass) {
    // Not under miri, which does not model `ioprio_set`.
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // <linux/ioprio.h>: the class sits above a 13-bit level.
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_IDLE: libc::c_long = 3;
        let priority = match class {
            IoClass::Idle => IOPRIO_CLASS_IDLE << 13,
            IoClass::Default => 0,
        };
        // SAFETY: ioprio_set on the calling thread (who = 0) takes integers
        // only and has no memory effects; its result is ignored.
        unsafe {
            let _ = libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, priority);
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = class;
}

/// The I/O class of the calling thread, as `ioprio_get` reports it
/// (`None` where it cannot be read); for tests.
#[cfg(test)]
fn io_class_raw() -> Option<i64> {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        // SAFETY: as in `set_io_class`.
        let value =
            unsafe { libc::syscall(libc::SYS_ioprio_get, 1 as libc::c_long, 0 as libc::c_long) };
        (value >= 0).then_some(value as i64 >> 13)
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    None
}

/// The CPUs the calling thread may run on, in order (empty where they
/// cannot be read).
fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as in `pin_to`; sched_getaffinity fills the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize)
                    .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
                    .collect();
            }
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_lower_its_io_class_and_restore_it() {
        std::thread::spawn(|| {
            let Some(before) = io_class_raw() else {
                return; // no ioprio here
            };
            set_io_class(IoClass::Idle);
            assert_eq!(io_class_raw(), Some(3), "idle class");
            set_io_class(IoClass::Default);
            assert_eq!(io_class_raw(), Some(before));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn workers_get_the_first_cpus_and_background_threads_the_rest() {
        let plan = CorePlan::over(&[0, 1, 2, 3], 1);
        assert_eq!(plan.worker_cpus, [0]);
        assert_eq!(plan.background_cpus(), [1, 2, 3]);
        let plan = CorePlan::over(&[4, 6], 2);
        assert_eq!(plan.worker_cpus, [4, 6]);
        assert!(plan.background_cpus().is_empty());
        let plan = CorePlan::over(&[0, 1], 8);
        assert_eq!(plan.worker_cpus, [0, 1]);
        assert!(plan.background_cpus().is_empty());
        let plan = CorePlan::over(&[], 2);
        assert!(plan.worker_cpus.is_empty() && plan.background_cpus().is_empty());
    }

    #[test]
    fn pinning_confines_the_thread() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "this test runs on Linux");
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            let plan = CorePlan::over(&[last], 1);
            assert_eq!(plan.pin_worker().unwrap(), Some(last));
            assert_eq!(allowed_cpus(), [last]);
        })
        .join()
        .unwrap();
        let plan = CorePlan::new(false, 1);
        assert_eq!(plan.pin_worker().unwrap(), None);
    }
}
