//! Why this exists: transactions submitted as closures to a pool of worker
//! threads (one per core by default) must commit exactly once each, return
//! their results and tickets, and leave no thread holding back the epoch
//! when idle.

use std::time::{Duration, Instant};

use epochdb_engine::{Config, Database, TxError};

#[test]
fn pool_runs_submitted_transactions() {
    let db = Database::open(Config {
        workers: 3,
        epoch_interval: Duration::from_millis(2),
        ..Config::default()
    })
    .unwrap();
    let counter = db.create_table("counter").unwrap();
    let pool = db.worker_pool().unwrap();
    assert_eq!(pool.threads(), 3);

    let pending: Vec<_> = (0..300)
        .map(|_| {
            pool.submit(move |tx| {
                let n = tx
                    .get(counter, b"n")?
                    .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
                tx.put(counter, b"n", &(n + 1).to_le_bytes())?;
                Ok(n)
            })
        })
        .collect();
    let mut seen: Vec<u64> = pending
        .into_iter()
        .map(|p| {
            let (n, ticket) = p.wait().unwrap();
            ticket.wait().unwrap();
            n
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..300).collect::<Vec<_>>(),
        "each increment saw a distinct value"
    );

    let result = pool.run(move |tx| tx.abort::<()>());
    assert!(matches!(result, Err(TxError::UserAbort)));

    // Idle pool threads quiesce: the safe epoch keeps up with the global
    // one (a thread left protected would pin it where it stopped).
    let stuck_at = db.current_epoch();
    let started = Instant::now();
    while db.safe_epoch() <= stuck_at {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "idle pool threads hold back the epoch"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut worker = db.worker().unwrap();
    let (n, _) = worker
        .run(|tx| {
            Ok(u64::from_le_bytes(
                tx.get(counter, b"n")?.unwrap().try_into().unwrap(),
            ))
        })
        .unwrap();
    assert_eq!(n, 300);
    drop(pool); // joins the threads
}
