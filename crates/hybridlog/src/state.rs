//! CPR's global state machine for the HybridLog (cpr-sigmod19 §6.2,
//! Figure 8a) as a pure next-state function over a packed `(phase, version)`
//! word, FASTER's `SystemState`.
//!
//! ```text
//! REST(v) → PREPARE(v) → IN_PROGRESS(v+1) → WAIT_PENDING(v+1)
//!         → WAIT_FLUSH(v+1) → REST(v+1)
//! ```
//!
//! The version in the state is the version new requests are stamped with:
//! it steps to v+1 at IN_PROGRESS, the thread's CPR point (§6.2.2).
//! Threads adopt the global state one step at a time, so every thread walks
//! exactly this sequence.

/// A phase of the checkpoint state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Normal processing (§6.2 REST).
    Rest = 0,
    /// Requests still belong to version v; pending ones hold bucket latches.
    Prepare = 1,
    /// The thread has passed its CPR point; requests are version v+1.
    InProgress = 2,
    /// Waiting for the version-v pending requests to complete.
    WaitPending = 3,
    /// Waiting for the log up to the checkpoint's end to reach disk.
    WaitFlush = 4,
}

/// `(phase, version)`, packed into one word as `version << 8 | phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemState {
    /// The phase.
    pub phase: Phase,
    /// The version new requests belong to.
    pub version: u32,
}

impl SystemState {
    /// The state a new store starts in.
    pub(crate) const fn rest(version: u32) -> Self {
        SystemState {
            phase: Phase::Rest,
            version,
        }
    }

    /// Packs the state into a word.
    pub(crate) const fn pack(self) -> u64 {
        ((self.version as u64) << 8) | self.phase as u64
    }

    /// Unpacks a word made by [`SystemState::pack`].
    pub(crate) fn unpack(word: u64) -> Self {
        let phase = match word & 0xff {
            0 => Phase::Rest,
            1 => Phase::Prepare,
            2 => Phase::InProgress,
            3 => Phase::WaitPending,
            4 => Phase::WaitFlush,
            other => unreachable!("phase byte {other} is never stored"),
        };
        SystemState {
            phase,
            version: (word >> 8) as u32,
        }
    }

    /// The next state of the machine: a pure function.
    pub(crate) const fn next(self) -> Self {
        let (phase, version) = match self.phase {
            Phase::Rest => (Phase::Prepare, self.version),
            Phase::Prepare => (Phase::InProgress, self.version + 1),
            Phase::InProgress => (Phase::WaitPending, self.version),
            Phase::WaitPending => (Phase::WaitFlush, self.version),
            Phase::WaitFlush => (Phase::Rest, self.version),
        };
        SystemState { phase, version }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cycle_bumps_the_version_once() {
        let mut state = SystemState::rest(7);
        let mut seen = vec![state];
        for _ in 0..5 {
            state = state.next();
            assert_eq!(SystemState::unpack(state.pack()), state);
            seen.push(state);
        }
        assert_eq!(state, SystemState::rest(8));
        assert_eq!(seen[2].phase, Phase::InProgress);
        assert_eq!(seen[2].version, 8);
        assert_eq!(seen[1].version, 7);
    }
}
