//! Active expiry. Expiry is lazy on reads (an expired key reads as
//! missing), but an expired key that nobody touches would hold its memory
//! forever; this background task walks the ordered keyspace in small
//! transactions and deletes the keys whose time has passed, as Redis's
//! active expire cycle does (Redis samples random keys of its hash table;
//! an ordered index makes a resumable walk the natural equivalent).

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::engine_thread;
use crate::server::State;
use crate::value::{now_ms, Stored};

/// Keys examined per sweep transaction.
const SWEEP_KEYS: usize = 1_000;
/// Pause between sweep transactions: a 1 M-key keyspace is walked every
/// 100 s, at 10,000 keys per second.
const SWEEP_PERIOD: Duration = Duration::from_millis(100);

/// Runs until the server stops.
pub(crate) async fn sweep(state: Arc<State>) {
    let shutdown = state.shutdown.notified();
    tokio::pin!(shutdown);
    let mut ticks = tokio::time::interval(SWEEP_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut resume_after: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        if state.stopping.load(Ordering::Relaxed) {
            return;
        }
        let table = state.keyspace.keys;
        let now = now_ms();
        let from = resume_after.clone();
        let outcome = engine_thread::with_worker(state.id, &state.db, |w| {
            w.run(|tx| {
                let mut expired = Vec::new();
                let mut last = None;
                let mut visited = 0usize;
                let lo = from.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                tx.scan(table, lo, Bound::Unbounded, SWEEP_KEYS, |key, value| {
                    visited += 1;
                    if Stored::decode(value).is_some_and(|s| s.is_expired(now)) {
                        expired.push(key.to_vec());
                    }
                    last = Some(key.to_vec());
                    true
                })?;
                // The values were read in this transaction: a concurrent
                // rewrite of one of these keys aborts and retries us.
                for key in &expired {
                    tx.delete(table, key)?;
                }
                Ok((expired.len(), last, visited < SWEEP_KEYS))
            })
        });
        // A conflict storm or a failed durability mode leaves the position
        // as it was: the next tick tries again (a failed mode fails every
        // write anyway).
        if let Ok(Ok(((deleted, last, exhausted), _ticket))) = outcome {
            state
                .stats
                .expired_keys
                .fetch_add(deleted as u64, Ordering::Relaxed);
            resume_after = if exhausted { None } else { last };
        }
    }
}
