//! Asynchronous reads of records below head (FASTER §5: "if l is less than
//! the head offset, it issues an asynchronous I/O request"): a session sends
//! a request and goes on; an I/O thread reads the record from the log file
//! and sends it back on the session's own channel, where
//! `complete_pending` picks it up.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use epochdb_storage::StorageFile;

use crate::record::{Layout, RECORD_HEADER_BYTES};

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

/// Reads one whole record at `address` from the log file: its header and
/// lengths first (a variable layout), then the rest; a fixed layout's
/// record in one read.
pub(crate) fn read_record(
    file: &dyn StorageFile,
    address: u64,
    layout: Layout,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let ends_inside = || format!("log ends inside the record at {address}");
    if let Some(size) = layout.fixed_record_bytes() {
        let mut bytes = vec![0u8; size];
        let n = file
            .read_at(address, &mut bytes)
            .map_err(|e| e.to_string())?;
        if n < bytes.len() {
            return Err(ends_inside());
        }
        return Ok(bytes);
    }
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
    let mut bytes = vec![0u8; total];
    bytes[..RECORD_HEADER_BYTES].copy_from_slice(&head);
    let n = file
        .read_at(
            address + RECORD_HEADER_BYTES as u64,
            &mut bytes[RECORD_HEADER_BYTES..],
        )
        .map_err(|e| e.to_string())?;
    if n < total - RECORD_HEADER_BYTES {
        return Err(ends_inside());
    }
    Ok(bytes)
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
    begin: Arc<crate::log::Log>,
    requests: Receiver<IoMessage>,
    layout: Layout,
    limit: usize,
) {
    for message in requests {
        let IoMessage::Read(request) = message else {
            return;
        };
        let below_begin = |log: &crate::log::Log| request.address < log.begin.load(SeqCst);
        let bytes = if below_begin(&begin) {
            Ok(Vec::new())
        } else {
            match read_record(file.as_ref(), request.address, layout, limit) {
                Err(_) if below_begin(&begin) => Ok(Vec::new()),
                other => other,
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
