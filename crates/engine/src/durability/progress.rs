//! How far a recovery has got, for a progress line on long recoveries
//! (SiloR's took 106 s for 100 GB, §6): the recovery threads count the
//! bytes they have read; whoever holds the same [`RecoveryProgress`] (the
//! `epochdb recover` command, a server starting up) reads it from another
//! thread while the database opens.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::{Duration, Instant};

use epochdb_storage::{Storage, StorageError};

/// What a recovery is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
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
            p if p == RecoveryPhase::Starting as u8 => RecoveryPhase::Starting,
            p if p == RecoveryPhase::Checkpoint as u8 => RecoveryPhase::Checkpoint,
            p if p == RecoveryPhase::Log as u8 => RecoveryPhase::Log,
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

    /// One line on where the recovery is: the phase, its share read, the
    /// bytes, and `elapsed`.
    pub fn describe(&self, elapsed: Duration) -> String {
        let (done, total) = self.bytes();
        let what = match self.phase() {
            RecoveryPhase::Starting => "reading metadata",
            RecoveryPhase::Checkpoint => "loading the checkpoint",
            RecoveryPhase::Log => "replaying the log",
            RecoveryPhase::Done => "done",
        };
        let share = if total > 0 {
            format!("{:.0}% ", (done as f64 * 100.0 / total as f64).min(100.0))
        } else {
            String::new()
        };
        format!(
            "{what}: {share}({:.1} of {:.1} MB, {:.1} s)",
            done as f64 / 1e6,
            total as f64 / 1e6,
            elapsed.as_secs_f64()
        )
    }

    /// Hands `line` a [`describe`](Self::describe) line every second until
    /// the recovery is done (run it on a thread of its own beside
    /// [`Database::open`](crate::Database::open), which marks it done
    /// however it ends). A recovery done within the first second gets no
    /// line.
    pub fn watch(&self, mut line: impl FnMut(&str)) {
        let started = Instant::now();
        let mut next = started + Duration::from_secs(1);
        while self.phase() != RecoveryPhase::Done {
            std::thread::sleep(Duration::from_millis(20));
            if Instant::now() >= next {
                next += Duration::from_secs(1);
                line(&self.describe(started.elapsed()));
            }
        }
    }

    pub(crate) fn begin(&self, phase: RecoveryPhase, total: u64) {
        self.done.store(0, Relaxed);
        self.total.store(total, Relaxed);
        self.phase.store(phase as u8, Relaxed);
    }

    /// Begins `phase`, which will read `files` whole.
    pub(crate) fn begin_files<'p>(
        &self,
        phase: RecoveryPhase,
        storage: &dyn Storage,
        files: impl IntoIterator<Item = &'p Path>,
    ) -> Result<(), StorageError> {
        let mut total = 0;
        for path in files {
            total += storage.len(path)?;
        }
        self.begin(phase, total);
        Ok(())
    }

    /// Adds `bytes` read by one of several threads.
    pub(crate) fn advance(&self, bytes: u64) {
        self.done.fetch_add(bytes, Relaxed);
    }

    /// Sets the bytes read, for a phase one thread reads alone (a plain
    /// store where [`advance`](Self::advance) is a locked add).
    pub(crate) fn set_done(&self, bytes: u64) {
        self.done.store(bytes, Relaxed);
    }

    /// Done; [`bytes`](Self::bytes) keeps the last phase's count.
    pub(crate) fn finish(&self) {
        self.phase.store(RecoveryPhase::Done as u8, Relaxed);
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

    #[test]
    fn a_line_names_the_phase_and_its_share() {
        let progress = RecoveryProgress::new();
        progress.begin(RecoveryPhase::Log, 4_000_000);
        progress.advance(1_000_000);
        assert_eq!(
            progress.describe(Duration::from_millis(1500)),
            "replaying the log: 25% (1.0 of 4.0 MB, 1.5 s)"
        );
        // A watch over a finished recovery returns at once, without a line.
        progress.finish();
        let mut lines = 0;
        progress.watch(|_| lines += 1);
        assert_eq!(lines, 0);
    }
}
