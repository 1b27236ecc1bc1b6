//! `epochdb inspect` for the `wal` mode's files (DESIGN.md: "`epochdb
//! inspect` prints any file"): the central log's files (`wal/wal-<start
//! LSN>.log`) entry by entry, with the mode's records decoded (`format.rs`),
//! and the two slots of the SDL file (`wal/wal.sdl`). The listing has the
//! columns of the `silor` mode's (`silor/inspect.rs`):
//!
//! ```text
//! /db/wal/wal-00000000000000000000.log: wal log file, 4433 bytes
//!     offset     length  ver  kind  contents
//!          0       4096    2     1  file header: starts at LSN 0
//!       4096         57    1     2  LSN 0..57: table 0 "accounts"
//!       4153        140    1     2  LSN 57..197: commit 0x… (epoch 2, seq 1), worker 0 txn 1, 2 writes
//! summary: 3 blocks, 4433 bytes, intact
//! ```
//!
//! A bad block is judged as recovery judges it (`epochdb_wal::inspect`):
//! a torn tail, which recovery discards, only at or above the persisted SDL
//! and in the last log file; anything else is corruption. Without the SDL
//! file beside it (a copied file) the file counts as the last one with
//! nothing persisted, so only damage decides. A record inside an intact
//! entry that does not decode is corruption, as in recovery.

use std::fmt::{self, Write};
use std::ops::ControlFlow;

use std::path::Path;

use epochdb_storage::Storage;
use epochdb_wal::inspect::{is_torn_tail, scan_log_path, sdl_slots, BlockPlace, LogBlock};
use epochdb_wal::Lsn;

use super::format::{decode, DecodeError, Record, KIND_TABLE, RECORD_VERSION};
use crate::durability::silor::inspect::{
    count, key_hex, tid_text, Damage, FileFormat, InspectSummary,
};
use crate::error::DurabilityError;

/// What recovery knows about a log file beyond its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogContext {
    /// The start LSN the file's name gives, if it is a log file's name.
    pub(crate) start: Option<Lsn>,
    /// The SDL the SDL file beside it holds (`None`: no such file).
    pub(crate) persisted_sdl: Option<Lsn>,
    /// Whether no later log file sits beside it.
    pub(crate) last: bool,
    /// Where replay starts: the installed checkpoint's start LSN. Recovery
    /// decodes the records below it only for table creations.
    pub(crate) replay_from: Option<Lsn>,
}

/// The bytes of the block header before a block's version and kind.
const VERSION_AT: usize = 4;

/// Lists the stored log file `path` to `out` (if given) and sums it up,
/// reading it a chunk at a time (`scan_log_path`).
pub(crate) fn inspect_log(
    storage: &dyn Storage,
    path: &Path,
    context: LogContext,
    verbose: bool,
    mut out: Option<&mut dyn Write>,
) -> Result<InspectSummary, DurabilityError> {
    let listing_failed = |_| DurabilityError::Io("writing the inspect listing failed".into());
    if let Some(out) = out.as_deref_mut() {
        write_columns(out).map_err(listing_failed)?;
    }
    let mut tally = Tally::default();
    let mut listing_error = Ok(());
    let mut damage = None;
    let (bad, len) =
        scan_log_path(storage, path, context.start, &mut |place, block| {
            let mut text = String::new();
            let BlockPlace {
                offset,
                len: length,
                version,
                kind,
            } = *place;
            let result = write!(text, "{offset:>10} {length:>10} {version:>4} {kind:>5}  ")
                .and_then(|()| match &block {
                    LogBlock::Header { start } => {
                        tally.first = Some(*start);
                        writeln!(text, "file header: starts at LSN {start}")
                    }
                    LogBlock::Entry(entry) => {
                        tally.entries += 1;
                        tally.end = Some(entry.lsn.end);
                        write!(text, "LSN {}..{}: ", entry.lsn.start, entry.lsn.end)?;
                        let mut first = true;
                        for record in entry.records() {
                            if !first {
                                write!(text, "; ")?;
                            }
                            first = false;
                            if let Err(reason) = tally.record(record, verbose, &mut text) {
                                let from = context.replay_from.unwrap_or(0);
                                if entry.lsn.start < from && record.get(1) != Some(&KIND_TABLE) {
                                    // Recovery does not read it: the
                                    // checkpoint holds what it wrote.
                                    write!(text, "{reason} (below the checkpoint's start LSN {from}: not replayed)")?;
                                    continue;
                                }
                                damage = Some(Damage::Corrupt { offset, reason });
                                break;
                            }
                        }
                        if !text.ends_with('\n') {
                            text.push('\n');
                        }
                        Ok(())
                    }
                });
            if damage.is_none() {
                tally.blocks += 1;
            }
            listing_error = result.and_then(|()| match out.as_deref_mut() {
                Some(out) => out.write_str(&text),
                None => Ok(()),
            });
            if listing_error.is_err() || damage.is_some() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .map_err(|e| DurabilityError::from_storage(&e))?;
    listing_error.map_err(listing_failed)?;
    if let Some(bad) = bad {
        let persisted = context.persisted_sdl.unwrap_or(0);
        let found = match bad.lsn {
            Some(lsn) if is_torn_tail(lsn, persisted, context.last) => Damage::TornTail {
                offset: bad.offset,
                bytes: len - bad.offset,
            },
            Some(lsn) => Damage::Corrupt {
                offset: bad.offset,
                reason: if context.last {
                    format!(
                        "{} (LSN {lsn}, below the persisted SDL {persisted})",
                        bad.reason
                    )
                } else {
                    format!(
                        "{} (LSN {lsn}, in a file a later log file follows)",
                        bad.reason
                    )
                },
            },
            // A torn header: recovery drops the last file when it was being
            // created (its name at or above the persisted SDL).
            None if context.last && context.start.is_some_and(|s| s >= persisted) => {
                Damage::TornTail {
                    offset: 0,
                    bytes: len,
                }
            }
            None => Damage::Corrupt {
                offset: bad.offset,
                reason: bad.reason,
            },
        };
        if let Some(out) = out {
            writeln!(
                out,
                "{:>10} {:>10} {:>4} {:>5}  {found}",
                bad.offset,
                len - bad.offset,
                "-",
                "-"
            )
            .map_err(listing_failed)?;
        }
        damage = Some(found);
    }
    Ok(InspectSummary::new(
        FileFormat::WalLog,
        tally.blocks,
        len,
        tally.commits,
        tally.detail(),
        damage,
    ))
}

/// Lists the SDL file `data`'s two slots to `out` (if given) and sums it
/// up. Recovery refuses a file with bytes but no valid slot; one still
/// being created (all zeros) counts as no SDL.
pub(crate) fn inspect_sdl(
    data: &[u8],
    mut out: Option<&mut dyn Write>,
) -> Result<InspectSummary, fmt::Error> {
    if let Some(out) = out.as_deref_mut() {
        write_columns(out)?;
    }
    let slot_bytes = epochdb_wal::inspect::SDL_SLOT_BYTES as usize;
    let mut newest: Option<(u64, Lsn)> = None;
    let mut valid = 0;
    for (slot, decoded) in sdl_slots(data).into_iter().enumerate() {
        let offset = slot * slot_bytes;
        if let Ok((seq, sdl)) = decoded {
            valid += 1;
            newest = newest.max(Some((seq, sdl)));
        }
        if let Some(out) = out.as_deref_mut() {
            let (version, kind) = version_and_kind(data, offset as u64);
            let text = match decoded {
                Ok((seq, sdl)) => format!("slot {slot}: seq {seq}, SDL {sdl}"),
                Err(why) => format!("slot {slot}: {why}"),
            };
            let length = slot_bytes.min(data.len().saturating_sub(offset));
            writeln!(
                out,
                "{offset:>10} {length:>10} {version:>4} {kind:>5}  {text}"
            )?;
        }
    }
    let zeroed = data.iter().all(|&b| b == 0);
    let (detail, damage) = match newest {
        Some((seq, sdl)) => (format!("SDL {sdl} (seq {seq})"), None),
        None if zeroed => ("no SDL yet (file being created)".to_string(), None),
        None => (
            "no valid slot".to_string(),
            Some(Damage::Corrupt {
                offset: 0,
                reason: "no valid SDL slot".to_string(),
            }),
        ),
    };
    Ok(InspectSummary::new(
        FileFormat::WalSdl,
        valid,
        data.len() as u64,
        0,
        detail,
        damage,
    ))
}

fn write_columns(out: &mut dyn Write) -> fmt::Result {
    writeln!(
        out,
        "{:>10} {:>10} {:>4} {:>5}  contents",
        "offset", "length", "ver", "kind"
    )
}

/// The version and kind fields of the block header at `offset`, as text.
fn version_and_kind(data: &[u8], offset: u64) -> (String, String) {
    let at = offset as usize + VERSION_AT;
    match data.get(at..at + 4) {
        Some(b) => (
            u16::from_le_bytes([b[0], b[1]]).to_string(),
            u16::from_le_bytes([b[2], b[3]]).to_string(),
        ),
        None => ("-".into(), "-".into()),
    }
}

/// What a log file's intact entries hold.
#[derive(Debug, Default)]
struct Tally {
    blocks: u64,
    entries: u64,
    commits: u64,
    parts: u64,
    writes: u64,
    tables: u64,
    first: Option<Lsn>,
    end: Option<Lsn>,
}

impl Tally {
    /// Describes one record in `text` (each write on a line of its own
    /// with `verbose`); a record that does not decode is the reason.
    fn record(&mut self, bytes: &[u8], verbose: bool, text: &mut String) -> Result<(), String> {
        let record = decode(bytes).map_err(|e| match e {
            DecodeError::Version(v) => {
                format!("record format version {v}; this build reads version {RECORD_VERSION}")
            }
            DecodeError::Malformed(why) => format!("malformed record: {why}"),
        })?;
        let listed = match record {
            Record::Table { id, name } => {
                self.tables += 1;
                write!(text, "table {id} {name:?}")
            }
            Record::Commit {
                last,
                txn_tag,
                tid,
                writes,
            } => {
                if last {
                    self.commits += 1;
                } else {
                    self.parts += 1;
                }
                self.writes += writes.len() as u64;
                write!(
                    text,
                    "{} {}, worker {} txn {}, {}",
                    if last { "commit" } else { "part of" },
                    tid_text(tid),
                    txn_tag >> 48,
                    txn_tag & ((1 << 48) - 1),
                    count(writes.len() as u64, "write", "writes")
                )
                .and_then(|()| {
                    if !verbose {
                        return Ok(());
                    }
                    for write in &writes {
                        write!(
                            text,
                            "\n{:>12}table {} key {} ",
                            "",
                            write.table,
                            key_hex(write.key)
                        )?;
                        match write.value {
                            Some(value) => write!(text, "value {} bytes", value.len())?,
                            None => write!(text, "delete")?,
                        }
                    }
                    Ok(())
                })
            }
        };
        listed.map_err(|_| "writing the listing failed".to_string())
    }

    fn detail(&self) -> String {
        let span = match (self.first, self.end) {
            (Some(first), Some(end)) => format!("LSN {first}..{end}"),
            (Some(first), None) => format!("LSN {first}.., empty"),
            _ => "no header".to_string(),
        };
        let mut detail = format!(
            "{span}: {}, {}",
            count(self.entries, "entry", "entries"),
            count(self.commits, "commit", "commits"),
        );
        if self.parts > 0 {
            detail += &format!(", {}", count(self.parts, "part", "parts"));
        }
        detail += &format!(", {}", count(self.writes, "write", "writes"));
        if self.tables > 0 {
            detail += &format!(", {}", count(self.tables, "table", "tables"));
        }
        detail
    }
}
