//! SCAN cursors over the ordered index. Redis cursors are integers that
//! clients hand back verbatim (redis-py parses them as such), but epochdb's
//! position in an ordered index is a key. The server keeps the key for each
//! cursor it handed out, a bounded number of them; the oldest are forgotten
//! first, and a forgotten or unknown cursor is an error rather than a
//! silent restart (which would break SCAN's guarantee).

use std::collections::{HashMap, VecDeque};

/// Most cursors remembered at once.
pub(crate) const CURSORS_MAX: usize = 100_000;

/// Open cursors: id → the last key the scan visited.
#[derive(Debug, Default)]
pub(crate) struct Cursors {
    resume_after: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    next_id: u64,
}

impl Cursors {
    /// Remembers a scan position; returns its cursor (never 0).
    pub(crate) fn open(&mut self, last_key: Vec<u8>) -> u64 {
        if self.order.len() >= CURSORS_MAX {
            if let Some(oldest) = self.order.pop_front() {
                self.resume_after.remove(&oldest);
            }
        }
        self.next_id += 1;
        let id = self.next_id;
        self.resume_after.insert(id, last_key);
        self.order.push_back(id);
        id
    }

    /// The key a cursor resumes after. Cursors may be reused (a client may
    /// retry a SCAN call), so this does not forget it.
    pub(crate) fn resume_after(&self, cursor: u64) -> Option<&[u8]> {
        self.resume_after.get(&cursor).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_bounded_and_oldest_are_forgotten_first() {
        let mut c = Cursors::default();
        let first = c.open(b"a".to_vec());
        assert_ne!(first, 0);
        assert_eq!(c.resume_after(first), Some(&b"a"[..]));
        for i in 0..CURSORS_MAX {
            c.open(i.to_be_bytes().to_vec());
        }
        assert_eq!(c.resume_after(first), None);
        assert!(c.resume_after.len() <= CURSORS_MAX);
    }
}
