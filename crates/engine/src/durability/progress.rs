//! How far a recovery has got, for a progress line on long recoveries
//! (SiloR's took 106 s for 100 GB, §6): the recovery threads count the
//! bytes they have read; whoever holds the same [`RecoveryProgress`] (the
//! `epochdb recover` command, a server starting up) reads it from another
//! thread while the database opens.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// What a recovery is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryPhase {
    /// Reading metadata, or not begun.
    Starting,
    /// Loading the checkpoint (silor §5.1).
    Checkpoint,
    /// Replaying the log (silor §5.2, or the `wal` mode's log).
    Log,
    /// Finished (successfully or not): the open has returned or is about to.
    Done,
}

/// Bytes read of the bytes a recovery phase will read, shared between the
/// recovery threads and a reader. Pass one in
/// [`Config::recovery_progress`](crate::Config::recovery_progress).
#[derive(Debug, Default)]
pub struct RecoveryProgress {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64,
}

impl RecoveryProgress {
    /// A progress in [`RecoveryPhase::Starting`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The current phase.
    pub fn phase(&self) -> RecoveryPhase {
        match self.phase.load(Relaxed) {
            0 => RecoveryPhase::Starting,
            1 => RecoveryPhase::Checkpoint,
            2 => RecoveryPhase::Log,
            _ => RecoveryPhase::Done,
        }
    }

    /// Bytes read so far in the current phase, and the bytes it will read
    /// in all (its files' sizes when it began; for the `wal` mode's log an
    /// estimate, since its files hold headers and padding that entries do
    /// not count).
    pub fn bytes(&self) -> (u64, u64) {
        (self.done.load(Relaxed), self.total.load(Relaxed))
    }

    pub(crate) fn begin(&self, phase: RecoveryPhase, total: u64) {
        self.done.store(0, Relaxed);
        self.total.store(total, Relaxed);
        self.phase.store(
            match phase {
                RecoveryPhase::Starting => 0,
                RecoveryPhase::Checkpoint => 1,
                RecoveryPhase::Log => 2,
                RecoveryPhase::Done => 3,
            },
            Relaxed,
        );
    }

    pub(crate) fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Relaxed);
    }

    /// Done; [`bytes`](Self::bytes) keeps the last phase's count.
    pub(crate) fn finish(&self) {
        self.phase.store(3, Relaxed);
    }
}

/// Counts one file's progress from the offsets its scan reaches, so each
/// block is counted once as the scan passes it.
pub(crate) struct FileProgress<'a> {
    progress: Option<&'a RecoveryProgress>,
    counted: u64,
}

impl<'a> FileProgress<'a> {
    pub(crate) fn new(progress: Option<&'a RecoveryProgress>) -> Self {
        Self {
            progress,
            counted: 0,
        }
    }

    /// The scan has reached `offset` of the file.
    pub(crate) fn reached(&mut self, offset: u64) {
        if let Some(progress) = self.progress {
            if offset > self.counted {
                progress.advance(offset - self.counted);
                self.counted = offset;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_counts_each_byte_once_and_phases_restart_the_count() {
        let progress = RecoveryProgress::new();
        assert_eq!(progress.phase(), RecoveryPhase::Starting);
        progress.begin(RecoveryPhase::Checkpoint, 100);
        let mut file = FileProgress::new(Some(&progress));
        file.reached(0);
        file.reached(40);
        file.reached(40);
        file.reached(70);
        assert_eq!(progress.bytes(), (70, 100));
        assert_eq!(progress.phase(), RecoveryPhase::Checkpoint);
        progress.begin(RecoveryPhase::Log, 10);
        assert_eq!(progress.bytes(), (0, 10));
        progress.finish();
        assert_eq!(progress.phase(), RecoveryPhase::Done);
        assert_eq!(progress.bytes(), (0, 10), "the last phase's count stays");
        FileProgress::new(None).reached(5); // no progress to count into
    }
}
