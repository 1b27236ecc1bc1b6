//! A bank on epochdb: concurrent transfers between accounts, then an audit.
//!
//! Why this exists: it is the smallest complete program against the public
//! API — open a [`Database`], create a table, give each thread its own
//! [`Worker`], run transactions as closures, roll back with
//! `Abort::User` — and it shows serializability at work: however the two
//! threads' transfers interleave, money is neither created nor destroyed.
//!
//! ```text
//! cargo run --release -p epochdb-engine --example bank
//! ```

use std::ops::Bound;
use std::time::Instant;

use epochdb_engine::{Config, Database, TableId, TxError, Worker, WorkerStats};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Number of accounts; few enough that the threads often collide.
const ACCOUNTS: u64 = 1_000;
/// Opening balance of every account, in cents.
const OPENING_BALANCE_CENTS: u64 = 10_000;
/// Transfers each thread attempts.
const TRANSFERS_PER_THREAD: u64 = 200_000;
/// Threads running transfers at once.
const THREADS: u64 = 2;
/// Largest single transfer, in cents.
const TRANSFER_MAX_CENTS: u64 = 5_000;

/// An account's key: its number, big-endian so keys sort numerically.
fn account_key(account: u64) -> [u8; 8] {
    account.to_be_bytes()
}

/// Decodes a balance stored as 8 little-endian bytes.
fn balance(value: &[u8]) -> u64 {
    u64::from_le_bytes(value.try_into().expect("balances are 8 bytes"))
}

/// Moves `amount` from `from` to `to` in one transaction; rolls back
/// (`Abort::User`) when `from` cannot cover it.
fn transfer(
    worker: &mut Worker,
    accounts: TableId,
    from: u64,
    to: u64,
    amount: u64,
) -> Result<(), TxError> {
    let (from_key, to_key) = (account_key(from), account_key(to));
    let ((), ticket) = worker.run(|tx| {
        let from_balance = balance(tx.get(accounts, &from_key)?.expect("account exists"));
        if from_balance < amount {
            return tx.abort();
        }
        let to_balance = balance(tx.get(accounts, &to_key)?.expect("account exists"));
        tx.put(accounts, &from_key, &(from_balance - amount).to_le_bytes())?;
        tx.put(accounts, &to_key, &(to_balance + amount).to_le_bytes())?;
        Ok(())
    })?;
    // Acknowledge only once durable (immediate under durability `none`).
    ticket.wait()?;
    Ok(())
}

/// One teller thread: random transfers between distinct accounts.
fn teller(db: &Database, accounts: TableId, seed: u64) -> (WorkerStats, u64) {
    let mut worker = db.worker().expect("a free worker slot");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut declined = 0;
    for _ in 0..TRANSFERS_PER_THREAD {
        let from = rng.gen_range(0..ACCOUNTS);
        let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
        let amount = rng.gen_range(1..=TRANSFER_MAX_CENTS);
        match transfer(&mut worker, accounts, from, to, amount) {
            Ok(()) => {}
            Err(TxError::UserAbort) => declined += 1,
            Err(other) => panic!("transfer failed: {other}"),
        }
    }
    (worker.stats(), declined)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = Database::open(Config::default())?;
    let accounts = db.create_table("accounts")?;

    let mut worker = db.worker()?;
    let ((), ticket) = worker.run(|tx| {
        for account in 0..ACCOUNTS {
            tx.put(
                accounts,
                &account_key(account),
                &OPENING_BALANCE_CENTS.to_le_bytes(),
            )?;
        }
        Ok(())
    })?;
    ticket.wait()?;
    println!("opened {ACCOUNTS} accounts with {OPENING_BALANCE_CENTS} cents each");

    let start = Instant::now();
    let results: Vec<(WorkerStats, u64)> = std::thread::scope(|scope| {
        let tellers: Vec<_> = (0..THREADS)
            .map(|seed| {
                scope.spawn({
                    let db = &db;
                    move || teller(db, accounts, seed)
                })
            })
            .collect();
        tellers
            .into_iter()
            .map(|teller| teller.join().expect("teller thread panicked"))
            .collect()
    });
    let elapsed = start.elapsed();

    let (mut committed, mut conflicts, mut declined) = (0, 0, 0);
    for (thread, (stats, thread_declined)) in results.iter().enumerate() {
        println!(
            "teller {thread}: {} committed, {} declined (insufficient funds), {} conflict retries",
            stats.commits, thread_declined, stats.conflicts
        );
        committed += stats.commits;
        conflicts += stats.conflicts;
        declined += thread_declined;
    }
    println!(
        "{} transfers in {:.2?}: {committed} committed, {declined} declined, {conflicts} retries ({:.0} transfers/s)",
        THREADS * TRANSFERS_PER_THREAD,
        elapsed,
        (THREADS * TRANSFERS_PER_THREAD) as f64 / elapsed.as_secs_f64()
    );

    // The audit: one serializable read of every account.
    let ((count, total), _) = worker.run(|tx| {
        let mut count = 0u64;
        let mut total = 0u64;
        tx.scan(
            accounts,
            Bound::Unbounded,
            Bound::Unbounded,
            usize::MAX,
            |_, value| {
                count += 1;
                total += balance(value);
                true
            },
        )?;
        Ok((count, total))
    })?;
    let expected = ACCOUNTS * OPENING_BALANCE_CENTS;
    println!("audit: {count} accounts hold {total} cents (expected {expected})");
    if count != ACCOUNTS || total != expected {
        return Err(
            format!("audit failed: {count} accounts, {total} cents, expected {expected}").into(),
        );
    }
    println!("audit passed: no money created or destroyed");
    drop(worker);
    db.shutdown()?;
    Ok(())
}
