//! Commit tickets: a position in some durability order (an epoch, an LSN, a
//! session serial number) and the watermark that says how far that order is
//! durable. A ticket resolves when the watermark reaches its position.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::DurabilityError;

/// A callback run once a position is durable (or durability failed).
pub type DurableCallback = Box<dyn FnOnce(Result<(), DurabilityError>) + Send>;

/// How far one durability order is durable, published by a durability mode.
///
/// Only grows. A mode that hits an I/O error calls [`Watermark::fail`]: from
/// then on no ticket that is not already durable resolves successfully
/// (fail-stop; nothing is reported durable that is not).
pub struct Watermark {
    durable: AtomicU64,
    /// Set once `failed` holds an error: polls need not take the lock.
    has_failed: AtomicBool,
    failed: Mutex<Option<DurabilityError>>,
    changed: Condvar,
    waiters: Mutex<Vec<(u64, DurableCallback)>>,
}

impl std::fmt::Debug for Watermark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watermark")
            .field("durable", &self.durable())
            .finish()
    }
}

impl Watermark {
    /// A watermark at `initial`.
    pub fn new(initial: u64) -> Arc<Self> {
        Arc::new(Self {
            durable: AtomicU64::new(initial),
            has_failed: AtomicBool::new(false),
            failed: Mutex::new(None),
            changed: Condvar::new(),
            waiters: Mutex::new(Vec::new()),
        })
    }

    /// Every position ≤ this is durable.
    #[inline]
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// The latched failure, if any.
    pub fn failure(&self) -> Option<DurabilityError> {
        self.failed.lock().clone()
    }

    /// Publishes that every position ≤ `position` is durable, wakes waiters
    /// and runs the callbacks that became due (on this thread).
    pub fn advance(&self, position: u64) {
        let previous = self.durable.fetch_max(position, Ordering::AcqRel);
        if position <= previous {
            return;
        }
        {
            // Taking the lock orders this wake-up after any waiter's check.
            let _guard = self.failed.lock();
            self.changed.notify_all();
        }
        let due: Vec<DurableCallback> = {
            let mut waiters = self.waiters.lock();
            let mut due = Vec::new();
            let mut index = 0;
            while index < waiters.len() {
                if waiters[index].0 <= position {
                    due.push(waiters.swap_remove(index).1);
                } else {
                    index += 1;
                }
            }
            due
        };
        for callback in due {
            callback(Ok(()));
        }
    }

    /// Latches a failure: pending and future tickets past the watermark fail.
    pub fn fail(&self, error: DurabilityError) {
        {
            let mut failed = self.failed.lock();
            if failed.is_none() {
                *failed = Some(error.clone());
            }
            self.has_failed.store(true, Ordering::Release);
            self.changed.notify_all();
        }
        let pending = std::mem::take(&mut *self.waiters.lock());
        for (_, callback) in pending {
            callback(Err(error.clone()));
        }
    }

    fn check(&self, position: u64) -> Result<bool, DurabilityError> {
        if self.durable() >= position {
            return Ok(true);
        }
        if !self.has_failed.load(Ordering::Acquire) {
            return Ok(false);
        }
        match &*self.failed.lock() {
            Some(error) => Err(error.clone()),
            None => Ok(false),
        }
    }

    fn wait(&self, position: u64, deadline: Option<Instant>) -> Result<bool, DurabilityError> {
        let mut failed = self.failed.lock();
        loop {
            if self.durable() >= position {
                return Ok(true);
            }
            if let Some(error) = &*failed {
                return Err(error.clone());
            }
            match deadline {
                None => self.changed.wait(&mut failed),
                Some(deadline) => {
                    if self.changed.wait_until(&mut failed, deadline).timed_out() {
                        return Ok(self.durable() >= position);
                    }
                }
            }
        }
    }

    fn on_durable(&self, position: u64, callback: DurableCallback) {
        {
            let mut waiters = self.waiters.lock();
            if self.durable() < position && self.failed.lock().is_none() {
                waiters.push((position, callback));
                return;
            }
        }
        // Already resolved (or failed): run now, outside the lock.
        callback(self.check(position).map(|_| ()));
    }
}

/// The promise a commit returns: resolves when the transaction is durable
/// under the database's durability mode.
#[derive(Clone, Debug)]
#[must_use = "a ticket says when the commit is durable; drop it only if you do not care"]
pub struct Ticket {
    position: u64,
    watermark: Option<Arc<TicketSource>>,
}

/// What tickets point at: a watermark, behind an allocation of its own.
/// A mode keeps one source per worker, so the reference count every
/// commit bumps lives in that worker's cache, not on one line shared by
/// all cores.
#[derive(Debug)]
pub struct TicketSource {
    watermark: Arc<Watermark>,
}

impl TicketSource {
    /// A source of tickets on `watermark`.
    pub fn new(watermark: Arc<Watermark>) -> Arc<Self> {
        Arc::new(Self { watermark })
    }

    /// The watermark.
    pub fn watermark(&self) -> &Arc<Watermark> {
        &self.watermark
    }
}

impl Ticket {
    /// A ticket that is durable already (the `none` mode, read-only work).
    pub fn resolved() -> Self {
        Self {
            position: 0,
            watermark: None,
        }
    }

    /// A ticket that resolves once `watermark` reaches `position`.
    pub fn at(position: u64, watermark: Arc<Watermark>) -> Self {
        Self::from_source(position, &TicketSource::new(watermark))
    }

    /// A ticket that resolves once `source`'s watermark reaches `position`
    /// (cheap: bumps only the source's own reference count).
    pub fn from_source(position: u64, source: &Arc<TicketSource>) -> Self {
        Self {
            position,
            watermark: Some(source.clone()),
        }
    }

    /// The position this ticket waits for (an epoch, an LSN, …).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Polls: `Ok(true)` once durable, an error if durability failed first.
    pub fn is_durable(&self) -> Result<bool, DurabilityError> {
        match &self.watermark {
            None => Ok(true),
            Some(source) => source.watermark.check(self.position),
        }
    }

    /// Blocks until durable.
    pub fn wait(&self) -> Result<(), DurabilityError> {
        match &self.watermark {
            None => Ok(()),
            Some(source) => source.watermark.wait(self.position, None).map(|_| ()),
        }
    }

    /// Blocks until durable or `timeout` passes; `Ok(false)` on timeout.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool, DurabilityError> {
        match &self.watermark {
            None => Ok(true),
            Some(source) => source
                .watermark
                .wait(self.position, Some(Instant::now() + timeout)),
        }
    }

    /// Runs `callback` once durable (ELEDA-style latency hiding: the worker
    /// goes on). It may run at once on this thread, or later on the thread
    /// that advances the watermark — keep it short.
    pub fn on_durable(self, callback: impl FnOnce(Result<(), DurabilityError>) + Send + 'static) {
        match self.watermark {
            None => callback(Ok(())),
            Some(source) => source
                .watermark
                .on_durable(self.position, Box::new(callback)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn resolves_when_the_watermark_passes() {
        let watermark = Watermark::new(0);
        let ticket = Ticket::at(5, watermark.clone());
        assert!(!ticket.is_durable().unwrap());
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = fired.clone();
        ticket.clone().on_durable(move |r| {
            r.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
        });
        watermark.advance(4);
        assert_eq!(fired.load(Ordering::SeqCst), 0);
        assert!(!ticket.wait_timeout(Duration::from_millis(1)).unwrap());
        let waiter = std::thread::spawn({
            let ticket = ticket.clone();
            move || ticket.wait()
        });
        watermark.advance(5);
        waiter.join().unwrap().unwrap();
        assert_eq!(fired.load(Ordering::SeqCst), 1);
        assert!(ticket.is_durable().unwrap());
    }

    #[test]
    fn failure_is_latched_and_never_reported_durable() {
        let watermark = Watermark::new(3);
        let early = Ticket::at(3, watermark.clone());
        let late = Ticket::at(9, watermark.clone());
        let got = Arc::new(Mutex::new(None));
        let slot = got.clone();
        late.clone()
            .on_durable(move |r| *slot.lock() = Some(r.is_ok()));
        watermark.fail(DurabilityError::Stopped("disk gone".into()));
        assert!(early.is_durable().unwrap(), "durable before the failure");
        assert!(late.is_durable().is_err());
        assert!(late.wait().is_err());
        assert_eq!(*got.lock(), Some(false));
    }
}
