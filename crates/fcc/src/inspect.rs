//! The library's files one at a time, in human-readable form, for
//! `epochdb inspect` (DESIGN.md: "`epochdb inspect` prints any file"): a
//! checkpoint slot (`ckpt.0`, `ckpt.1`) and a log segment (`log.<tick>`),
//! decoded with recovery's own checks (`format.rs`), each with the verdict
//! recovery would give it (`recovery.rs`'s decision table): a slot that
//! does not verify is not used (the other one is), and a log block that
//! does not verify ends the replay of its segment, as does a gap in the
//! ticks.

use std::borrow::Cow;
use std::fmt::{self, Write};

use crate::format::{
    decode_checkpoint, decode_log_block, parse_log_segment_name, CKPT_MAGIC, LOG_MAGIC,
};
use crate::recovery::follow_log;

/// The kinds of file the library writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FccFile {
    /// `ckpt.0` / `ckpt.1`: the double-backup checkpoint slots (§2.2).
    Checkpoint,
    /// `log.<tick, 16 hex digits>`: logical-log blocks after that tick.
    LogSegment,
}

impl FccFile {
    /// The kind a file called `name` is, by the library's naming.
    pub fn of_name(name: &str) -> Option<FccFile> {
        match name {
            "ckpt.0" | "ckpt.1" => Some(FccFile::Checkpoint),
            _ if parse_log_segment_name(name).is_some() => Some(FccFile::LogSegment),
            _ => None,
        }
    }

    /// The kind `bytes` are, by their magic.
    pub fn of_bytes(bytes: &[u8]) -> Option<FccFile> {
        if bytes.starts_with(&CKPT_MAGIC) {
            Some(FccFile::Checkpoint)
        } else if bytes.starts_with(&LOG_MAGIC) {
            Some(FccFile::LogSegment)
        } else {
            None
        }
    }

    /// A short human name.
    pub fn name(self) -> &'static str {
        match self {
            FccFile::Checkpoint => "fcc checkpoint",
            FccFile::LogSegment => "fcc log segment",
        }
    }
}

impl fmt::Display for FccFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a directory holding `names` holds the library's files.
pub fn is_fcc_dir(names: &[String]) -> bool {
    names.iter().any(|name| FccFile::of_name(name).is_some())
}

/// What inspecting one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FccSummary {
    /// The file's kind.
    pub kind: FccFile,
    /// Its length in bytes.
    pub bytes: u64,
    /// A one-line description of its contents.
    pub detail: String,
    /// For a checkpoint: its id and tick, when it verifies.
    pub checkpoint: Option<(u64, u64)>,
    /// What recovery would not use, and why: a slot that does not verify,
    /// or where a segment's replay stops early. `None`: all of it is used.
    pub unused: Option<String>,
}

/// Decodes the file called `name` holding `bytes` (its kind by its magic,
/// else its name) and lists it to `out`: a checkpoint's header fields, or a
/// segment's blocks (with `verbose`, every block; otherwise the first and
/// last), then a summary line. `None` if it is not one of the library's
/// files.
pub fn inspect_bytes(
    name: &str,
    bytes: &[u8],
    verbose: bool,
    out: &mut dyn Write,
) -> Result<Option<FccSummary>, fmt::Error> {
    let Some(kind) = FccFile::of_bytes(bytes).or_else(|| FccFile::of_name(name)) else {
        return Ok(None);
    };
    writeln!(out, "{name}: {kind} file, {} bytes", bytes.len())?;
    let summary = match kind {
        FccFile::Checkpoint => checkpoint(name, bytes, out)?,
        FccFile::LogSegment => segment(name, bytes, verbose, out)?,
    };
    let verdict = match &summary.unused {
        Some(why) => why.clone(),
        None => "intact".into(),
    };
    writeln!(out, "summary: {}; {verdict}", summary.detail)?;
    Ok(Some(summary))
}

fn checkpoint(name: &str, bytes: &[u8], out: &mut dyn Write) -> Result<FccSummary, fmt::Error> {
    let slot = slot_of(name);
    let (detail, checkpoint, unused) = match decode_checkpoint(name, bytes) {
        Ok(ckpt) if slot.is_some_and(|slot| ckpt.header.id % 2 != slot) => (
            format!("checkpoint {} in the wrong slot", ckpt.header.id),
            None,
            Some("not usable (in the wrong slot: checkpoint k belongs in ckpt.(k % 2)): recovery takes the other slot".to_string()),
        ),
        Ok(ckpt) => {
            writeln!(
                out,
                "checkpoint {}: tick {}, {} words of state",
                ckpt.header.id, ckpt.header.tick, ckpt.header.words
            )?;
            (
                format!(
                    "checkpoint {}, tick {}, {} words",
                    ckpt.header.id, ckpt.header.tick, ckpt.header.words
                ),
                Some((ckpt.header.id, ckpt.header.tick)),
                None,
            )
        }
        Err(error) => (
            "does not verify".to_string(),
            None,
            Some(format!(
                "not usable ({error}): recovery takes the other slot"
            )),
        ),
    };
    Ok(FccSummary {
        kind: FccFile::Checkpoint,
        bytes: bytes.len() as u64,
        detail,
        checkpoint,
        unused,
    })
}

/// The slot a checkpoint file's name says it is (`None` for other names).
fn slot_of(name: &str) -> Option<u64> {
    let base = name.rsplit('/').next().unwrap_or(name);
    match base {
        "ckpt.0" => Some(0),
        "ckpt.1" => Some(1),
        _ => None,
    }
}

/// What recovery would do with a directory's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The checkpoint it starts from.
    pub checkpoint_id: u64,
    /// That checkpoint's tick.
    pub checkpoint_tick: u64,
    /// The last tick the log replay reaches.
    pub last_tick: u64,
}

/// What `recover` would do with the files of one directory, following its
/// decision table: the verified slot with the highest id (from each file's
/// name and its summary by [`inspect_bytes`]), then the log as recovery
/// follows it (`follow_log`), reading each segment with `read` when the
/// replay reaches it, one at a time. `Ok(None)`: no slot verifies, and
/// recovery fails.
///
/// # Errors
///
/// What `read` returns.
pub fn recovery_plan<E>(
    files: &[(String, FccSummary)],
    mut read: impl FnMut(&str) -> Result<Vec<u8>, E>,
) -> Result<Option<RecoveryPlan>, E> {
    let Some((checkpoint_id, checkpoint_tick)) = files
        .iter()
        .filter(|(name, _)| slot_of(name).is_some())
        .filter_map(|(_, summary)| summary.checkpoint)
        .max()
    else {
        return Ok(None);
    };
    let mut segments: Vec<(u64, String)> = files
        .iter()
        .filter_map(|(name, _)| {
            let base = name.rsplit('/').next().unwrap_or(name);
            parse_log_segment_name(base).map(|tick| (tick, name.clone()))
        })
        .collect();
    segments.sort_unstable();
    let tick = follow_log(
        &segments,
        checkpoint_tick,
        |name| read(name).map(Cow::Owned),
        |_| {},
    )?;
    Ok(Some(RecoveryPlan {
        checkpoint_id,
        checkpoint_tick,
        last_tick: tick,
    }))
}

fn segment(
    name: &str,
    bytes: &[u8],
    verbose: bool,
    out: &mut dyn Write,
) -> Result<FccSummary, fmt::Error> {
    let after = parse_log_segment_name(name);
    let mut at = 0usize;
    let mut blocks = 0u64;
    let mut records = 0u64;
    let mut ticks: Option<(u64, u64)> = None;
    let mut unused = None;
    let mut last_listed = None;
    while at < bytes.len() {
        let Some((block, len)) = decode_log_block(&bytes[at..]) else {
            unused = Some(format!(
                "replay of this segment stops at offset {at}: the {} bytes from there are a torn or damaged block",
                bytes.len() - at
            ));
            break;
        };
        let expected = match ticks {
            Some((_, last)) => Some(last + 1),
            None => after.map(|tick| tick + 1),
        };
        if expected.is_some_and(|e| block.tick != e) {
            unused = Some(format!(
                "replay of this segment stops at offset {at}: tick {} where {} was due",
                block.tick,
                expected.unwrap_or_default()
            ));
            break;
        }
        let line = format!(
            "{at:>10} {len:>10}  tick {}: {} records, {} bytes",
            block.tick,
            block.records,
            block.payload.len()
        );
        if verbose || blocks == 0 {
            writeln!(out, "{line}")?;
        } else {
            last_listed = Some(line);
        }
        blocks += 1;
        records += u64::from(block.records);
        ticks = Some((ticks.map_or(block.tick, |(first, _)| first), block.tick));
        at += len;
    }
    if let Some(line) = last_listed {
        if blocks > 2 {
            writeln!(out, "{:>10}  …", "")?;
        }
        writeln!(out, "{line}")?;
    }
    let detail = match ticks {
        Some((first, last)) => {
            format!("ticks {first}..={last}, {blocks} blocks, {records} records")
        }
        None => "no blocks".to_string(),
    };
    Ok(FccSummary {
        kind: FccFile::LogSegment,
        bytes: bytes.len() as u64,
        detail,
        checkpoint: None,
        unused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_log_block, log_segment_name, CkptHeader, CKPT_END_MAGIC};

    fn checkpoint_bytes(id: u64, tick: u64, words: &[u64]) -> Vec<u8> {
        let mut out = CkptHeader {
            id,
            tick,
            words: words.len() as u64,
        }
        .encode()
        .to_vec();
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&CKPT_END_MAGIC);
        out
    }

    fn segment_bytes(after: u64, ticks: std::ops::Range<u64>) -> Vec<u8> {
        let mut out = Vec::new();
        for tick in ticks {
            let mut payload = Vec::new();
            payload.extend_from_slice(&3u32.to_le_bytes());
            payload.extend_from_slice(b"abc");
            encode_log_block(&mut out, tick + after, 1, &payload);
        }
        out
    }

    fn run(name: &str, bytes: &[u8]) -> (FccSummary, String) {
        let mut out = String::new();
        let summary = inspect_bytes(name, bytes, true, &mut out).unwrap().unwrap();
        (summary, out)
    }

    #[test]
    fn a_checkpoint_is_listed_and_damage_makes_it_unusable() {
        let mut bytes = checkpoint_bytes(7, 70, &[1, 2, 3]);
        let (summary, out) = run("ckpt.1", &bytes);
        assert_eq!(summary.checkpoint, Some((7, 70)), "{out}");
        assert_eq!(summary.unused, None);
        bytes[45] ^= 1;
        let (summary, out) = run("ckpt.1", &bytes);
        assert_eq!(summary.checkpoint, None);
        assert!(summary.unused.unwrap().contains("other slot"), "{out}");
        let (summary, _) = run("ckpt.0", &bytes[..30]);
        assert!(summary.unused.is_some());
    }

    #[test]
    fn a_segment_stops_where_recovery_stops() {
        let name = log_segment_name(100);
        let bytes = segment_bytes(100, 1..6);
        let (summary, out) = run(&name, &bytes);
        assert_eq!(
            summary.detail, "ticks 101..=105, 5 blocks, 5 records",
            "{out}"
        );
        assert_eq!(summary.unused, None);
        // A torn last block.
        let (summary, out) = run(&name, &bytes[..bytes.len() - 3]);
        assert!(summary.detail.starts_with("ticks 101..=104"), "{out}");
        assert!(summary.unused.unwrap().contains("torn or damaged"));
        // A gap in the ticks.
        let mut gap = segment_bytes(100, 1..3);
        gap.extend(segment_bytes(100, 4..5));
        let (summary, out) = run(&name, &gap);
        assert!(
            summary.unused.unwrap().contains("tick 104 where 103"),
            "{out}"
        );
    }

    /// The plan for `files` (name, bytes), each summarised first.
    fn plan_of(files: &[(String, Vec<u8>)]) -> Option<RecoveryPlan> {
        let summaries: Vec<(String, FccSummary)> = files
            .iter()
            .map(|(name, bytes)| (name.clone(), run(name, bytes).0))
            .collect();
        let read = |name: &str| {
            let found = files.iter().find(|(n, _)| n == name);
            Ok::<_, std::convert::Infallible>(found.map(|(_, b)| b.clone()).unwrap_or_default())
        };
        let Ok(plan) = recovery_plan(&summaries, read);
        plan
    }

    #[test]
    fn the_plan_follows_recoverys_table() {
        let files = vec![
            ("ckpt.0".to_string(), checkpoint_bytes(4, 40, &[1])),
            ("ckpt.1".to_string(), checkpoint_bytes(3, 30, &[1])),
            (log_segment_name(30), segment_bytes(30, 1..15)),
            (log_segment_name(44), segment_bytes(44, 1..3)),
        ];
        let plan = plan_of(&files).unwrap();
        assert_eq!(
            (plan.checkpoint_id, plan.checkpoint_tick, plan.last_tick),
            (4, 40, 46)
        );
        // The newer slot damaged: the older one, and a longer replay.
        let mut damaged = files.clone();
        damaged[0].1[45] ^= 1;
        let plan = plan_of(&damaged).unwrap();
        assert_eq!((plan.checkpoint_id, plan.last_tick), (3, 46));
        // A checkpoint in the wrong slot is not used.
        let mut wrong = files.clone();
        wrong[0].0 = "ckpt.1".into();
        wrong[1].0 = "ckpt.0".into();
        assert_eq!(plan_of(&wrong), None);
        let mut out = String::new();
        let summary = inspect_bytes("ckpt.1", &wrong[0].1, false, &mut out)
            .unwrap()
            .unwrap();
        assert!(summary.unused.unwrap().contains("wrong slot"), "{out}");
        // A gap ends the replay.
        let mut gap = files.clone();
        gap[2].1 = segment_bytes(30, 1..12);
        let plan = plan_of(&gap).unwrap();
        assert_eq!(plan.last_tick, 41);
    }

    proptest::proptest! {
        /// Any bytes under either name are listed or refused, never a panic.
        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), ckpt in proptest::prelude::any::<bool>()) {
            let name = if ckpt { "ckpt.0".to_string() } else { log_segment_name(5) };
            let mut out = String::new();
            let _ = inspect_bytes(&name, &bytes, true, &mut out);
        }
    }
}
