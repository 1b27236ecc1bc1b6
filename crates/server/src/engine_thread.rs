//! One engine [`Worker`] per runtime thread. A transaction runs to
//! completion inside one poll of a connection's task (it never awaits), so
//! the thread's worker is never used by two transactions at once. When the
//! runtime parks a thread (it has no task to run) the worker quiesces, so an
//! idle thread holds back neither the epoch nor the durability mode
//! (silor-osdi14 §2: idle workers must not stall epoch advancement).

use std::cell::RefCell;

use epochdb_engine::{Database, OpenError, Worker};

struct Local {
    /// Which server's database the worker belongs to.
    server_id: u64,
    worker: Worker,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's worker for `db`, registering it on first use.
pub(crate) fn with_worker<R>(
    server_id: u64,
    db: &Database,
    f: impl FnOnce(&mut Worker) -> R,
) -> Result<R, OpenError> {
    LOCAL.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|l| l.server_id != server_id) {
            *slot = Some(Local {
                server_id,
                worker: db.worker()?,
            });
        }
        let local = slot.as_mut().expect("just registered");
        Ok(f(&mut local.worker))
    })
}

/// Quiesces this thread's worker, if it has one (the runtime's park hook).
pub(crate) fn quiesce() {
    LOCAL.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            if let Some(local) = slot.as_mut() {
                local.worker.quiesce();
            }
        }
    });
}

/// Drops this thread's worker (the runtime's thread-stop hook).
pub(crate) fn release() {
    LOCAL.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            slot.take();
        }
    });
}
