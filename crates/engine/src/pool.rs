//! A pool of worker threads that run transactions submitted as closures
//! (silor-osdi14 §2: one-shot requests dispatched to workers, one per core
//! by default). Each thread owns a [`Worker`]; an idle thread quiesces its
//! worker before it blocks, so it holds back neither epochs nor
//! reclamation.

use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use crate::db::Database;
use crate::error::{Abort, OpenError, TxError};
use crate::ticket::Ticket;
use crate::txn::Transaction;
use crate::worker::Worker;

type Job = Box<dyn FnOnce(&mut Worker) + Send>;

/// A fixed set of worker threads. Dropping the pool finishes the queued
/// transactions and joins the threads.
pub struct WorkerPool {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("threads", &self.threads.len())
            .finish()
    }
}

/// The outcome of a transaction submitted with [`WorkerPool::submit`].
#[derive(Debug)]
pub struct Pending<R> {
    result: Receiver<Result<(R, Ticket), TxError>>,
}

impl<R> Pending<R> {
    /// Blocks until the transaction has committed (or failed). Its ticket
    /// then says when it is durable.
    pub fn wait(self) -> Result<(R, Ticket), TxError> {
        self.result.recv().unwrap_or_else(|_| {
            Err(TxError::Durability(crate::DurabilityError::Stopped(
                "the worker pool stopped before running the transaction".into(),
            )))
        })
    }

    /// The outcome if the transaction has finished.
    pub fn try_wait(&self) -> Option<Result<(R, Ticket), TxError>> {
        self.result.try_recv().ok()
    }
}

impl WorkerPool {
    /// Starts `threads` worker threads on `db`.
    pub fn new(db: &Database, threads: usize) -> Result<Self, OpenError> {
        if threads == 0 {
            return Err(OpenError::Config(
                "a worker pool needs at least one thread".into(),
            ));
        }
        let (sender, receiver) = unbounded::<Job>();
        let mut handles = Vec::with_capacity(threads);
        for index in 0..threads {
            let mut worker = db.worker()?;
            let receiver = receiver.clone();
            let handle = std::thread::Builder::new()
                .name(format!("epochdb-worker-{index}"))
                .spawn(move || {
                    // Placement is a hint: a thread that cannot be pinned
                    // still runs its transactions.
                    let _ = worker.pin_to_core();
                    loop {
                        let job = match receiver.try_recv() {
                            Ok(job) => job,
                            Err(_) => {
                                worker.quiesce();
                                match receiver.recv() {
                                    Ok(job) => job,
                                    Err(_) => return,
                                }
                            }
                        };
                        job(&mut worker);
                    }
                })?;
            handles.push(handle);
        }
        Ok(Self {
            jobs: Some(sender),
            threads: handles,
        })
    }

    /// Number of threads.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Queues `body` as one transaction (retried on conflicts) and returns
    /// at once; [`Pending::wait`] gives its result and ticket.
    pub fn submit<R, F>(&self, mut body: F) -> Pending<R>
    where
        R: Send + 'static,
        F: FnMut(&mut Transaction<'_>) -> Result<R, Abort> + Send + 'static,
    {
        let (reply, result) = bounded(1);
        let job: Job = Box::new(move |worker: &mut Worker| {
            // The submitter may have dropped its `Pending`; that is fine.
            let _ = reply.send(worker.run(&mut body));
        });
        if let Some(jobs) = &self.jobs {
            // Fails only if every thread is gone; `wait` reports that.
            let _ = jobs.send(job);
        }
        Pending { result }
    }

    /// Runs `body` as one transaction on a pool thread and waits for it to
    /// commit.
    pub fn run<R, F>(&self, body: F) -> Result<(R, Ticket), TxError>
    where
        R: Send + 'static,
        F: FnMut(&mut Transaction<'_>) -> Result<R, Abort> + Send + 'static,
    {
        self.submit(body).wait()
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // Closing the queue lets each thread finish what is queued and exit.
        self.jobs.take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
