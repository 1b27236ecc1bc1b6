//! A connection's outgoing replies, in request order.
//!
//! A reply is either ready or held until its commit is durable (the ticket's
//! callback completes a oneshot channel). Ready replies go straight into the
//! write buffer while nothing is held; once one reply is held, everything
//! after it queues behind it, so the client always sees replies in request
//! order while the connection goes on reading and executing its pipeline
//! (ELEDA §3.3's latency hiding, per connection).

use std::collections::VecDeque;

use epochdb_engine::DurabilityError;
use tokio::sync::oneshot;

use crate::resp::Out;

/// Completed with the commit's durability outcome.
pub(crate) type DurableSignal = oneshot::Receiver<Result<(), DurabilityError>>;

/// What a queued reply costs besides its bytes, for the output limit.
const HELD_OVERHEAD_BYTES: usize = 64;

struct Held {
    bytes: Vec<u8>,
    wait: Wait,
}

/// What a held reply waits for.
enum Wait {
    /// Nothing: ready, behind the replies before it.
    Nothing,
    /// Its commit's durability signal.
    Signal(DurableSignal),
    /// Its signal was taken to be awaited (see [`Output::take_head_signal`]).
    Taken,
    /// Its commit's outcome, known.
    Resolved(Result<(), DurabilityError>),
}

/// The replies of one connection that have not reached the socket yet.
#[derive(Default)]
pub(crate) struct Output {
    /// Bytes ready to write; `written` of them are on the socket already.
    ready: Vec<u8>,
    written: usize,
    /// Replies waiting for durability, and the ready ones queued behind.
    held: VecDeque<Held>,
    held_bytes: usize,
}

impl Output {
    /// Queues a reply that may go out as soon as those before it have.
    pub(crate) fn push_ready(&mut self, bytes: &[u8]) {
        if self.held.is_empty() {
            self.ready.extend_from_slice(bytes);
        } else {
            self.hold(bytes.to_vec(), Wait::Nothing);
        }
    }

    /// Queues a reply that must wait for `durable`.
    pub(crate) fn push_durable(&mut self, bytes: Vec<u8>, durable: DurableSignal) {
        self.hold(bytes, Wait::Signal(durable));
    }

    fn hold(&mut self, bytes: Vec<u8>, wait: Wait) {
        self.held_bytes += bytes.len() + HELD_OVERHEAD_BYTES;
        self.held.push_back(Held { bytes, wait });
    }

    /// Moves held replies whose commits are durable (and the ready ones
    /// behind them) into the write buffer.
    pub(crate) fn release(&mut self) {
        while let Some(head) = self.held.front_mut() {
            match &mut head.wait {
                Wait::Nothing | Wait::Resolved(_) => {}
                Wait::Taken => return,
                Wait::Signal(signal) => match signal.try_recv() {
                    Ok(outcome) => head.wait = Wait::Resolved(outcome),
                    Err(oneshot::error::TryRecvError::Empty) => return,
                    Err(oneshot::error::TryRecvError::Closed) => {
                        head.wait = Wait::Resolved(Err(stopped()))
                    }
                },
            }
            let head = self.held.pop_front().expect("front exists");
            let outcome = match head.wait {
                Wait::Resolved(outcome) => outcome,
                _ => Ok(()),
            };
            self.held_bytes -= head.bytes.len() + HELD_OVERHEAD_BYTES;
            match outcome {
                Ok(()) => self.ready.extend_from_slice(&head.bytes),
                // Never acknowledge a commit whose durability failed.
                Err(e) => {
                    Out::new(&mut self.ready, false).error(&format!("ERR commit not durable: {e}"))
                }
            }
        }
    }

    /// Takes the signal the first held reply waits on, if it waits on one
    /// (to await it without borrowing the output); give it back with
    /// [`Output::restore_signal`] unless it completed.
    pub(crate) fn take_head_signal(&mut self) -> Option<DurableSignal> {
        let head = self.held.front_mut()?;
        match std::mem::replace(&mut head.wait, Wait::Taken) {
            Wait::Signal(signal) => Some(signal),
            other => {
                head.wait = other;
                None
            }
        }
    }

    /// Puts back a signal taken with [`Output::take_head_signal`], or
    /// records its outcome if it completed.
    pub(crate) fn restore_signal(
        &mut self,
        signal: Option<DurableSignal>,
        outcome: Option<Result<(), DurabilityError>>,
    ) {
        let Some(head) = self.held.front_mut() else {
            return;
        };
        if !matches!(head.wait, Wait::Taken) {
            return;
        }
        head.wait = match (signal, outcome) {
            (_, Some(outcome)) => Wait::Resolved(outcome),
            (Some(signal), None) => Wait::Signal(signal),
            (None, None) => Wait::Resolved(Err(stopped())),
        };
    }

    /// The bytes that are ready and not yet written.
    pub(crate) fn unwritten(&self) -> &[u8] {
        &self.ready[self.written..]
    }

    /// Records that `n` more bytes reached the socket.
    pub(crate) fn advance(&mut self, n: usize) {
        self.written += n;
        if self.written == self.ready.len() {
            self.ready.clear();
            self.written = 0;
        } else if self.written > 64 * 1024 && self.written * 2 > self.ready.len() {
            self.ready.drain(..self.written);
            self.written = 0;
        }
    }

    /// Whether any reply has not reached the socket.
    pub(crate) fn is_empty(&self) -> bool {
        self.held.is_empty() && self.unwritten().is_empty()
    }

    /// Bytes queued for the client, for the output-buffer limit.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.ready.len() - self.written + self.held_bytes
    }
}

fn stopped() -> DurabilityError {
    DurabilityError::Stopped("the durability mode stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_request_order_behind_a_held_one() {
        let mut out = Output::default();
        out.push_ready(b"1");
        let (done, signal) = oneshot::channel();
        out.push_durable(b"2".to_vec(), signal);
        out.push_ready(b"3");
        out.release();
        assert_eq!(out.unwritten(), b"1");
        done.send(Ok(())).unwrap();
        out.release();
        assert_eq!(out.unwritten(), b"123");
        out.advance(3);
        assert!(out.is_empty());
        assert_eq!(out.queued_bytes(), 0);
    }

    #[test]
    fn a_failed_commit_is_answered_with_an_error_not_its_reply() {
        let mut out = Output::default();
        let (done, signal) = oneshot::channel();
        out.push_durable(b"+OK\r\n".to_vec(), signal);
        done.send(Err(DurabilityError::Stopped("disk gone".into())))
            .unwrap();
        out.release();
        let text = String::from_utf8(out.unwritten().to_vec()).unwrap();
        assert!(text.starts_with("-ERR commit not durable"), "{text}");
    }

    #[test]
    fn a_taken_signal_can_be_restored_or_resolved() {
        let mut out = Output::default();
        let (done, signal) = oneshot::channel();
        out.push_durable(b"x".to_vec(), signal);
        let taken = out.take_head_signal();
        assert!(taken.is_some());
        out.restore_signal(taken, None);
        out.release();
        assert!(out.unwritten().is_empty());
        drop(done);
        let taken = out.take_head_signal();
        out.restore_signal(taken, Some(Ok(())));
        out.release();
        assert_eq!(out.unwritten(), b"x");
    }
}
