//! Asynchronous reads of records below head (FASTER §5: "if l is less than
//! the head offset, it issues an asynchronous I/O request"): a session sends
//! a request and goes on; an I/O thread reads the record from the log file
//! and sends it back on the session's own channel, where
//! `complete_pending` picks it up. Every record read is checked against the
//! log's checksums first, so a bit flipped on disk fails the read (and the
//! session, as an I/O error does) instead of reaching the caller.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::StorageFile;

use crate::record::{Layout, RECORD_HEADER_BYTES};
use crate::sums::{Check, Sums};

/// A read of the record at `address`.
#[derive(Debug)]
pub(crate) struct IoRequest {
    /// The pending request it belongs to (session-local id).
    pub(crate) token: u64,
    /// The record's logical address (= file offset).
    pub(crate) address: u64,
    /// Where to send the answer.
    pub(crate) reply: Sender<IoDone>,
}

/// The answer to an [`IoRequest`]: the record's bytes, or why not.
#[derive(Debug)]
pub(crate) struct IoDone {
    pub(crate) token: u64,
    pub(crate) address: u64,
    pub(crate) bytes: Result<Vec<u8>, String>,
}

/// The widest span of log bytes read to check one record, beyond the
/// record itself: a few blocks around it (`sums::SUM_BLOCK_BYTES` each). A
/// record covered by wider pieces (a page each, written before the pieces
/// were cut to blocks) is read unchecked rather than with its whole page;
/// [`crate::Store::verify_log`] scrubs those.
const CHECK_SPAN_MAX_BYTES: u64 = 16 << 10;
const _: () = assert!(CHECK_SPAN_MAX_BYTES >= 2 * crate::sums::SUM_BLOCK_BYTES);

/// What the I/O threads have read, for [`crate::Store::disk_reads`].
#[derive(Debug, Default)]
pub(crate) struct IoCounters {
    /// Records read from the log file.
    pub(crate) records: AtomicU64,
    /// Of those, records whose every byte was checked against `log.sums`.
    pub(crate) checked: AtomicU64,
}

/// What an I/O thread reuses from read to read.
#[derive(Default)]
pub(crate) struct ReadScratch {
    /// The bytes read: the record and the pieces around it.
    span: Vec<u8>,
    /// The pieces that cover the record.
    checks: Vec<Check>,
}

/// Reads one whole record at `address` from the log file and, if `sums`
/// is given, checks its bytes against the log's checksums (`sums.rs`): the
/// pieces that cover it are read whole, in one read with the record, and a
/// mismatch is an error naming the file and the piece. Returns the record
/// and whether every byte of it was checked (older stores' pieces are too
/// wide to read per record, and truncation drops pieces).
///
/// A variable layout's header and lengths are read first; a fixed
/// layout's record length is known.
pub(crate) fn read_record(
    file: &dyn StorageFile,
    sums: Option<&Sums>,
    address: u64,
    (layout, limit): (Layout, usize),
    scratch: &mut ReadScratch,
) -> Result<(Vec<u8>, bool), String> {
    let ends_inside = || format!("log ends inside the record at {address}");
    let total = match layout.fixed_record_bytes() {
        Some(size) => size,
        None => {
            let mut head = [0u8; RECORD_HEADER_BYTES];
            let n = file
                .read_at(address, &mut head)
                .map_err(|e| e.to_string())?;
            if n < RECORD_HEADER_BYTES {
                return Err(ends_inside());
            }
            let (key_len, value_len) = layout.lengths_in(&head);
            let total = layout.record_bytes(key_len, value_len);
            if key_len == 0 || total > limit {
                return Err(format!("no valid record at log address {address}"));
            }
            total
        }
    };
    let end = address + total as u64;
    let checks = &mut scratch.checks;
    match sums {
        Some(sums) => sums.checks_into(address, end, checks),
        None => checks.clear(),
    }
    let mut from = checks
        .first()
        .map_or(address, |c| c.piece.from.min(address));
    let mut to = checks.last().map_or(end, |c| c.piece.to.max(end));
    if to - from > CHECK_SPAN_MAX_BYTES + total as u64 {
        checks.clear();
        (from, to) = (address, end);
    }
    let span = &mut scratch.span;
    // Every byte of it is read over below (or the read fails).
    span.resize((to - from) as usize, 0);
    let n = file.read_at(from, span).map_err(|e| e.to_string())?;
    if (n as u64) < end - from {
        return Err(ends_inside());
    }
    let mut covered = address;
    for check in checks.iter() {
        let piece = check.piece;
        if piece.from > covered {
            break; // a gap: the rest is unchecked
        }
        let bytes = &span[(piece.from - from) as usize..(piece.to - from) as usize];
        if (piece.to - from) as usize > n || !check.matches(bytes) {
            let mismatch = crate::recovery::piece_mismatch(file.path(), &piece);
            return Err(format!("{mismatch} (reading the record at {address})"));
        }
        covered = covered.max(piece.to);
    }
    let record = span[(address - from) as usize..(end - from) as usize].to_vec();
    Ok((record, covered >= end))
}

/// What the I/O thread is asked to do.
#[derive(Debug)]
pub(crate) enum IoMessage {
    /// Read a record.
    Read(IoRequest),
    /// End the thread (the store is closing).
    Stop,
}

/// The I/O thread's loop: serves requests until told to stop. A record
/// below `begin` (the log was truncated under the request) is answered
/// with no bytes: the key is not there.
pub(crate) fn io_loop(
    file: Arc<dyn StorageFile>,
    log: Arc<crate::log::Log>,
    requests: Receiver<IoMessage>,
    (layout, limit): (Layout, usize),
    check: bool,
    counters: Arc<IoCounters>,
) {
    let mut scratch = ReadScratch::default();
    for message in requests {
        let IoMessage::Read(request) = message else {
            return;
        };
        let below_begin = |log: &crate::log::Log| request.address < log.begin.load(SeqCst);
        let bytes = if below_begin(&log) {
            Ok(Vec::new())
        } else {
            let sums = check.then_some(&*log.sums);
            match read_record(
                file.as_ref(),
                sums,
                request.address,
                (layout, limit),
                &mut scratch,
            ) {
                // Truncated under the read: its bytes (and checksums) may
                // be gone, and the key is not there anyway.
                Err(_) if below_begin(&log) => Ok(Vec::new()),
                Ok((bytes, checked)) => {
                    counters.records.fetch_add(1, Relaxed);
                    if checked {
                        counters.checked.fetch_add(1, Relaxed);
                    }
                    Ok(bytes)
                }
                Err(e) => Err(e),
            }
        };
        // A session that stopped no longer listens; nothing to do then.
        let _ = request.reply.send(IoDone {
            token: request.token,
            address: request.address,
            bytes,
        });
    }
}
