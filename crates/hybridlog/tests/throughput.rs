//! Why this file exists: a quick, honest number for the in-memory fast path
//! until `epochdb bench hybridlog` exists. Ignored by default (a measurement,
//! not a test); run with
//! `cargo test --release -p epochdb-hybridlog --test throughput -- --ignored --nocapture`.
//! Workload: 8-byte keys and values, uniform keys, 50:50 read:upsert and
//! 0:100 RMW, 1 and 2 threads, 1 s each, no checkpoint; then the same with a
//! memory budget a quarter of the data.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use epochdb_hybridlog::{AddU64, Config, SimStorage, Status, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn run(keys: u64, threads: usize, rmw: bool, memory_bytes: u64) -> f64 {
    let config = Config {
        index_buckets: (keys as usize / 4).next_power_of_two(),
        page_bits: 20,
        memory_bytes,
        mutable_fraction: 0.9,
        max_sessions: 8,
        ..Config::default()
    };
    let store = Arc::new(
        Store::open(
            Arc::new(SimStorage::new(1)),
            Path::new("/t"),
            config,
            AddU64,
        )
        .unwrap(),
    );
    {
        let mut session = store.start_session().unwrap();
        for k in 0..keys {
            session.upsert(&k.to_le_bytes(), &k.to_le_bytes()).unwrap();
        }
        session.complete_pending(true).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (store, stop, done) = (store.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut session = store.start_session().unwrap();
                let mut rng = SmallRng::seed_from_u64(t as u64);
                let mut value = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let k = rng.gen_range(0..keys).to_le_bytes();
                        let status = if rmw {
                            session.rmw(&k, 1).unwrap()
                        } else if rng.gen_bool(0.5) {
                            session.read(&k, &mut value).unwrap()
                        } else {
                            session.upsert(&k, &k).unwrap()
                        };
                        if status == Status::Pending {
                            session.complete_pending(false).unwrap();
                        }
                    }
                    n += 256;
                }
                session.complete_pending(true).unwrap();
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

#[test]
#[ignore = "a measurement; run by hand"]
fn in_memory_and_quarter_memory_throughput() {
    let keys = 1 << 20;
    for threads in [1, 2] {
        for rmw in [false, true] {
            let ops = run(keys, threads, rmw, 1 << 30);
            println!(
                "in memory, {keys} keys, {threads} thread(s), {}: {:.2} M ops/s",
                if rmw { "0:100 RMW" } else { "50:50" },
                ops / 1e6
            );
        }
    }
    // 1 Mi keys × 32-byte records = 32 MiB of data; 8 MiB of frames.
    for rmw in [false, true] {
        let ops = run(keys, 1, rmw, 8 << 20);
        println!(
            "quarter memory, {keys} keys, 1 thread, {}: {:.2} M ops/s",
            if rmw { "0:100 RMW" } else { "50:50" },
            ops / 1e6
        );
    }
}
