//! Why this exists: TPC-C's consistency conditions (spec §3.3.2.1–§3.3.2.4)
//! are the workload's own end-to-end check of serializability — a lost
//! update of D_NEXT_O_ID, a phantom in Delivery's NEW-ORDER scan or a torn
//! New-Order would break them. This runs the full mix on a few threads over
//! freshly loaded databases and checks them, and proves the checker can
//! fail by corrupting single rows.

use std::ops::Bound;
use std::time::{Duration, Instant};

use epochdb_engine::{Config, Database};
use epochdb_workloads::{check_consistency, Outcome, Tpcc, TpccConfig, Workload};

fn loaded(config: TpccConfig) -> (Database, Tpcc) {
    let db = Database::open(Config::default()).expect("open");
    let mut tpcc = Tpcc::new(config);
    tpcc.load(&db, 2, &|_| {}).expect("load");
    (db, tpcc)
}

/// Runs the mix on `threads` threads for `duration`; returns (committed,
/// rolled back).
fn run_mix(db: &Database, tpcc: &Tpcc, threads: usize, duration: Duration) -> (u64, u64) {
    let deadline = Instant::now() + duration;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let mut client = tpcc.client(thread, threads, 42);
                scope.spawn(move || {
                    let mut worker = db.worker().expect("worker");
                    let (mut committed, mut rolled_back) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        match client.step(&mut worker).expect("step") {
                            Outcome::Committed(_) => committed += 1,
                            Outcome::RolledBack => rolled_back += 1,
                        }
                    }
                    (committed, rolled_back)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client panicked"))
            .fold((0, 0), |(c, r), (c2, r2)| (c + c2, r + r2))
    })
}

fn mix_keeps_consistency(warehouses: u32, threads: usize) {
    let (db, tpcc) = loaded(TpccConfig::small(warehouses));
    check_consistency(&db, warehouses).expect("consistent after load");
    let (committed, rolled_back) = run_mix(&db, &tpcc, threads, Duration::from_secs(2));
    assert!(committed > 100, "only {committed} transactions committed");
    // 45% of transactions are New-Orders and 1% of those roll back.
    assert!(rolled_back > 0, "no New-Order rolled back in {committed}");
    check_consistency(&db, warehouses).expect("consistent after the mix");
}

#[test]
fn one_warehouse_three_threads_stays_consistent() {
    mix_keeps_consistency(1, 3);
}

#[test]
fn two_warehouses_three_threads_stay_consistent() {
    mix_keeps_consistency(2, 3);
}

/// Deletes the `nth` key of `table` (in key order).
fn delete_nth(db: &Database, table: &str, nth: usize) {
    let table = db.table(table).expect("table exists");
    let mut worker = db.worker().expect("worker");
    let (deleted, _) = worker
        .run(|tx| {
            let keys = tx.scan_collect(table, Bound::Unbounded, Bound::Unbounded, nth + 1)?;
            let key = keys[nth].0.clone();
            tx.delete(table, &key)
        })
        .expect("delete");
    assert!(deleted);
}

#[test]
fn checker_fails_on_a_corrupted_row() {
    // Each corruption on a fresh database, each caught by its condition.
    let cases = [
        ("new_order", 5, "condition 3"),
        ("order_line", 100, "condition 4"),
        ("oorder", 2, "condition 4"),
        ("order_customer", 7, "order-by-customer"),
        ("customer_name", 11, "customer-by-name"),
    ];
    for (table, nth, expected) in cases {
        let (db, _tpcc) = loaded(TpccConfig::small(1));
        check_consistency(&db, 1).expect("consistent after load");
        delete_nth(&db, table, nth);
        let error = check_consistency(&db, 1).expect_err("corruption must be caught");
        assert!(
            error.contains(expected),
            "deleting {table}[{nth}]: expected {expected}, got: {error}"
        );
    }
}

/// `TpccConfig::mix` picks the transaction types: only New-Order rolls
/// back (1% of them), so a mix without it never does, and a mix of only
/// Delivery and Stock-Level keeps the database consistent too.
#[test]
fn the_mix_chooses_the_transactions() {
    let mut config = TpccConfig::small(1);
    config.mix = [0, 40, 20, 20, 20];
    let (db, tpcc) = loaded(config.clone());
    let (committed, rolled_back) = run_mix(&db, &tpcc, 2, Duration::from_millis(500));
    assert!(committed > 100, "only {committed} transactions committed");
    assert_eq!(rolled_back, 0, "no New-Order ran, yet a rollback");
    check_consistency(&db, 1).expect("consistent after the mix");

    config.mix = [100, 0, 0, 0, 0];
    let (db, tpcc) = loaded(config.clone());
    let (committed, rolled_back) = run_mix(&db, &tpcc, 2, Duration::from_millis(500));
    assert!(rolled_back > 0, "no rollback in {committed} New-Orders");
    check_consistency(&db, 1).expect("consistent after the mix");

    config.mix = [50, 40, 5, 5, 5];
    assert!(config.validate().is_err(), "a mix of 105% was accepted");
}
