//! Criterion micro-benchmarks of single transactions through the public API:
//! a read-only point lookup, a single-key put and a ten-key
//! read-modify-write, all on one worker over a preloaded table of 8-byte
//! keys and 8-byte values (durability `none`), and the head of a queue
//! whose front has been consumed.
//!
//! Why this exists: the `epochdb bench` harness measures throughput under
//! whole workloads; these isolate the per-transaction cost of the OCC path
//! (begin/refresh, read set, validation, install) so a change to it can be
//! measured before and after.
//!
//! ```text
//! cargo bench -j 1 -p epochdb-engine --bench engine -- --quick   # ~100k keys
//! EPOCHDB_BENCH_KEYS=1000000 cargo bench -j 1 -p epochdb-engine --bench engine
//! ```

use std::hint::black_box;
use std::ops::Bound::Unbounded;

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use epochdb_engine::{Abort, Config, Database, TableId, Transaction, Worker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Keys loaded when `EPOCHDB_BENCH_KEYS` is unset: small enough that
/// `cargo bench -- --quick` stays well under a minute on two cores.
const KEYS_DEFAULT: u64 = 100_000;
/// Puts per loading transaction.
const LOAD_BATCH: u64 = 1_000;
/// Keys read and rewritten by the read-modify-write transaction.
const RMW_KEYS: usize = 10;
/// Fixed seed, so every run draws the same key sequence.
const SEED: u64 = 0x5eed_e90c_0db0;

/// The number of keys to load, from `EPOCHDB_BENCH_KEYS`.
fn keys_count() -> u64 {
    match std::env::var("EPOCHDB_BENCH_KEYS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("EPOCHDB_BENCH_KEYS={text:?} is not a count")),
        Err(_) => KEYS_DEFAULT,
    }
}

/// A database with one table of `keys` 8-byte big-endian keys, each holding
/// its own index as an 8-byte value, and a worker to query it.
struct Loaded {
    // Kept alive for the worker; the ticker thread stops on drop.
    _db: Database,
    table: TableId,
    worker: Worker,
    keys: u64,
}

/// Runs `op` on keys `0..keys`, [`LOAD_BATCH`] keys per transaction,
/// waiting for each batch to be durable.
fn in_batches(
    worker: &mut Worker,
    keys: u64,
    op: impl Fn(&mut Transaction<'_>, u64) -> Result<(), Abort>,
) {
    let mut next = 0u64;
    while next < keys {
        let end = (next + LOAD_BATCH).min(keys);
        let ((), ticket) = worker
            .run(|tx| (next..end).try_for_each(|key| op(tx, key)))
            .expect("batch");
        ticket.wait().expect("durable batch");
        next = end;
    }
}

fn load(keys: u64) -> Loaded {
    let db = Database::open(Config::default()).expect("open database");
    let table = db.create_table("bench").unwrap();
    let mut worker = db.worker().expect("register worker");
    in_batches(&mut worker, keys, |tx, key| {
        tx.put(table, &key.to_be_bytes(), &key.to_le_bytes())
    });
    Loaded {
        _db: db,
        table,
        worker,
        keys,
    }
}

fn point_lookup(c: &mut Criterion, loaded: &mut Loaded) {
    let Loaded {
        table,
        worker,
        keys,
        ..
    } = loaded;
    let (table, keys) = (*table, *keys);
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut group = c.benchmark_group("read_only");
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("get/{keys}_keys"), |b| {
        b.iter(|| {
            let key = rng.gen_range(0..keys).to_be_bytes();
            let (found, _ticket) = worker
                .run(|tx| Ok(tx.get(table, black_box(&key))?.map(|v| v.len())))
                .expect("read-only transaction");
            black_box(found.expect("loaded key"))
        });
    });
    group.finish();
}

fn single_put(c: &mut Criterion, loaded: &mut Loaded) {
    let Loaded {
        table,
        worker,
        keys,
        ..
    } = loaded;
    let (table, keys) = (*table, *keys);
    let mut rng = SmallRng::seed_from_u64(SEED ^ 1);
    let mut group = c.benchmark_group("write");
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("put_1/{keys}_keys"), |b| {
        b.iter_batched(
            || (rng.gen_range(0..keys).to_be_bytes(), rng.gen::<u64>()),
            |(key, value)| {
                worker
                    .run(|tx| tx.put(table, &key, &value.to_le_bytes()))
                    .expect("put transaction")
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn read_modify_write(c: &mut Criterion, loaded: &mut Loaded) {
    let Loaded {
        table,
        worker,
        keys,
        ..
    } = loaded;
    let (table, keys) = (*table, *keys);
    let mut rng = SmallRng::seed_from_u64(SEED ^ 2);
    let mut group = c.benchmark_group("write");
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("rmw_{RMW_KEYS}/{keys}_keys"), |b| {
        b.iter_batched(
            || {
                let mut picked = [[0u8; 8]; RMW_KEYS];
                for key in &mut picked {
                    *key = rng.gen_range(0..keys).to_be_bytes();
                }
                picked
            },
            |picked| {
                worker
                    .run(|tx| {
                        for key in &picked {
                            let old = tx.get(table, key)?.expect("loaded key");
                            let old = u64::from_le_bytes(old.try_into().expect("8-byte value"));
                            tx.put(table, key, &old.wrapping_add(1).to_le_bytes())?;
                        }
                        Ok(())
                    })
                    .expect("read-modify-write transaction")
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

/// A queue: the table is loaded, then all but the last 1% of its keys are
/// deleted from the front; the transaction reads the head (a one-row scan
/// from the start). An index that kept its emptied leaves walks them all.
fn queue_head(c: &mut Criterion, loaded: &mut Loaded) {
    let Loaded {
        table,
        worker,
        keys,
        ..
    } = loaded;
    let (table, keys) = (*table, *keys);
    in_batches(worker, keys - keys / 100, |tx, key| {
        tx.delete(table, &key.to_be_bytes()).map(drop)
    });
    let mut group = c.benchmark_group("index");
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("queue_head/{keys}_keys_99%_consumed"), |b| {
        b.iter(|| {
            let (head, _ticket) = worker
                .run(|tx| {
                    let mut head = None;
                    tx.scan(table, Unbounded, Unbounded, 1, |key, _| {
                        head = Some(key.to_vec());
                        true
                    })?;
                    Ok(head)
                })
                .unwrap();
            black_box(head)
        });
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let mut loaded = load(keys_count());
    point_lookup(c, &mut loaded);
    single_put(c, &mut loaded);
    read_modify_write(c, &mut loaded);
    // Last: it deletes most of the table.
    queue_head(c, &mut loaded);
}

/// The benchmark group `criterion_main!` runs (private, so the function
/// `criterion_group!` generates needs no doc comment).
mod group {
    use criterion::{criterion_group, Criterion};

    criterion_group! {
        name = engine;
        config = Criterion::default()
            .warm_up_time(std::time::Duration::from_millis(500))
            .measurement_time(std::time::Duration::from_secs(2));
        targets = super::benches
    }
}
criterion_main!(group::engine);
