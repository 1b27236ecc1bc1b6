//! `none`: in memory only. Every commit is "durable" at once, which is to
//! say the mode promises nothing across a crash (silor-osdi14's MemSilo).

use super::{CommitView, DurabilityMode, WorkerLog};
use crate::ticket::Ticket;

/// The `none` durability mode.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoDurability;

impl DurabilityMode for NoDurability {
    fn name(&self) -> &'static str {
        "none"
    }

    fn attach_worker(&self, _worker: usize) -> Box<dyn WorkerLog> {
        Box::new(NoDurability)
    }
}

impl WorkerLog for NoDurability {
    #[inline]
    fn log_commit(&mut self, _commit: &CommitView<'_>) -> Ticket {
        Ticket::resolved()
    }
}
