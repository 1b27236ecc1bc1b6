//! Recovery (§2.2): "the most recent consistent checkpoint is read from
//! disk and materialized as the new application state. Then, the logical
//! log is replayed from the time of the last checkpoint".
//!
//! Decision table:
//!
//! | checkpoint slots                  | action                                   |
//! |-----------------------------------|------------------------------------------|
//! | both valid                        | use the higher id (the other is not read) |
//! | one valid, the other torn/bad/none| use the valid one (a crash mid-write)    |
//! | none valid                        | [`Error::NoCheckpoint`]                  |
//!
//! | log block (ticks after the checkpoint's) | action                            |
//! |------------------------------------------|-----------------------------------|
//! | tick ≤ current                           | skip (covered by the checkpoint)  |
//! | tick = current + 1, CRC good             | replay its records, advance       |
//! | tick > current + 1                       | stop: a gap, nothing after counts |
//! | torn or bad CRC                          | end of that segment (torn tail)   |
//!
//! Stand-in: a bad block in the middle of synced data is treated like a
//! torn tail (replay stops there) rather than reported as corruption.

use crate::error::Error;
use crate::format::{
    ckpt_slot_name, decode_checkpoint, decode_log_block, parse_log_segment_name, CkptHeader,
    LogBlock, CKPT_HEADER_BYTES,
};
use crate::io::Storage;
use std::borrow::Cow;
use std::io;

/// The result of [`recover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The recovered application state.
    pub words: Vec<u64>,
    /// The tick the state belongs to (the last one replayed).
    pub tick: u64,
    /// The checkpoint recovery started from.
    pub checkpoint_id: u64,
    /// That checkpoint's tick.
    pub checkpoint_tick: u64,
    /// How many ticks of log were replayed on top of it.
    pub replayed_ticks: u64,
    /// How many checkpoint slots were found unusable (torn by a crash, or
    /// damaged) on the way to the one used; an older slot behind a good
    /// newer one is not read.
    pub rejected_checkpoints: u32,
}

/// Recovers the state from `storage`: the newest complete checkpoint, then
/// every logged action after it, passed to `replay` in the order they were
/// logged. `replay` must redo the action's writes on the state it is given.
pub fn recover(
    storage: &dyn Storage,
    mut replay: impl FnMut(&mut [u64], &[u8]),
) -> Result<Recovered, Error> {
    // Order the slots by the id in their headers, newest first, and read
    // and verify a whole checkpoint only when it is the best one left: a
    // recovery normally reads one checkpoint, not both.
    let mut rejected = 0;
    let mut candidates = Vec::new();
    for slot in 0..2u64 {
        let name = ckpt_slot_name(slot);
        let mut head = [0u8; CKPT_HEADER_BYTES];
        let n = match storage.read_at(&name, 0, &mut head) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        match CkptHeader::decode(&name, &head[..n]) {
            Ok(h) if h.id % 2 == slot => candidates.push((h.id, slot, name)),
            // Wrong slot for its id, or a torn or damaged header.
            Ok(_) | Err(_) => rejected += 1,
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0));
    let mut best = None;
    for (_, slot, name) in candidates {
        let bytes = match storage.read(&name) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        match decode_checkpoint(&name, &bytes) {
            Ok(c) if c.header.id % 2 == slot => {
                best = Some(c);
                break;
            }
            // Torn or damaged body: fall back to the other slot.
            Ok(_) | Err(_) => rejected += 1,
        }
    }
    let checkpoint = best.ok_or(Error::NoCheckpoint)?;
    let mut words = checkpoint.words;

    let mut segments: Vec<(u64, String)> = storage
        .list()?
        .into_iter()
        .filter_map(|n| parse_log_segment_name(&n).map(|t| (t, n)))
        .collect();
    segments.sort();
    let tick = follow_log(
        &segments,
        checkpoint.header.tick,
        |name| storage.read(name).map(Cow::Owned),
        |block| {
            for record in block.records() {
                replay(&mut words, record);
            }
        },
    )?;
    Ok(Recovered {
        words,
        tick,
        checkpoint_id: checkpoint.header.id,
        checkpoint_tick: checkpoint.header.tick,
        replayed_ticks: tick - checkpoint.header.tick,
        rejected_checkpoints: rejected,
    })
}

/// Replays the log as the decision table says: the segments (start tick,
/// name; sorted by tick) in order from `tick`, skipping blocks at or below
/// the current tick and stopping at the first gap; a segment ends at its
/// first block that does not verify. Hands each block to replay to
/// `apply` and returns the last tick reached. `read` gives a segment's
/// bytes; a segment whose successor starts at or before the current tick
/// holds nothing needed and is not read.
pub(crate) fn follow_log<'a, E>(
    segments: &[(u64, String)],
    mut tick: u64,
    mut read: impl FnMut(&str) -> Result<Cow<'a, [u8]>, E>,
    mut apply: impl FnMut(&LogBlock<'_>),
) -> Result<u64, E> {
    'segments: for (i, (_, name)) in segments.iter().enumerate() {
        if segments.get(i + 1).is_some_and(|(next, _)| *next <= tick) {
            continue;
        }
        let bytes = read(name)?;
        let mut at = 0;
        while let Some((block, used)) = decode_log_block(&bytes[at..]) {
            at += used;
            if block.tick <= tick {
                continue;
            }
            if block.tick != tick + 1 {
                break 'segments;
            }
            apply(&block);
            tick += 1;
        }
    }
    Ok(tick)
}
