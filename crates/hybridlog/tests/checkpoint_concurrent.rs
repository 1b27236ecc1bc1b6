//! Why this file exists: a checkpoint must complete while sessions keep
//! operating on other threads (the phases advance in their refreshes), and
//! a recovery from it must give every session back its CPR point with
//! exactly the effects up to it (cpr-sigmod19 §6.2–6.4).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use epochdb_hybridlog::{AddU64, Config, CrashMode, SimStorage, Status, Store};

fn config() -> Config {
    Config {
        index_buckets: 256,
        page_bits: 12,
        memory_bytes: 16 << 12,
        mutable_fraction: 0.5,
        max_sessions: 8,
        ..Config::default()
    }
}

#[test]
fn checkpoints_complete_under_load_and_recover_each_prefix() {
    let disk = SimStorage::new(11);
    let dir = Path::new("/cp");
    let store = Arc::new(Store::open(Arc::new(disk.clone()), dir, config(), AddU64).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    // Both sessions exist before the first checkpoint starts.
    let started = Arc::new(std::sync::Barrier::new(3));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let store = store.clone();
            let stop = stop.clone();
            let started = started.clone();
            std::thread::spawn(move || {
                let mut session = store.start_session().unwrap();
                let commits = Arc::new(std::sync::Mutex::new(Vec::new()));
                let seen = commits.clone();
                session.on_commit(move |serial| seen.lock().unwrap().push(serial));
                started.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Thread t increments key t by 1 and key 100 by 1.
                    session.rmw(&t.to_le_bytes(), 1).unwrap();
                    session.rmw(&100u64.to_le_bytes(), 1).unwrap();
                    n += 2;
                    if n.is_multiple_of(64) {
                        session.complete_pending(false).unwrap();
                    }
                }
                session.complete_pending(true).unwrap();
                let id = session.id();
                let commits = commits.lock().unwrap().clone();
                drop(session);
                (id, commits)
            })
        })
        .collect();
    started.wait();
    let mut infos = Vec::new();
    for i in 0..4 {
        let info = store.checkpoint(i % 2 == 0).unwrap();
        assert!(info.l_s <= info.l_e);
        infos.push(info);
    }
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for (_, commits) in &results {
        assert!(commits.len() >= 3, "callbacks: {commits:?}");
        assert!(commits.windows(2).all(|w| w[0] <= w[1]));
    }
    let last = infos.last().unwrap().clone();
    drop(store);

    let store = Store::open(
        Arc::new(disk.crash(CrashMode::DropUnsynced)),
        dir,
        config(),
        AddU64,
    )
    .unwrap();
    assert_eq!(store.recovered().unwrap().version, last.version);
    let mut total = 0;
    let mut session = store.start_session().unwrap();
    let mut value = Vec::new();
    for (t, (id, _)) in results.iter().enumerate() {
        let serial = last.sessions.iter().find(|(s, _)| s == id).unwrap().1;
        let (_, continued) = store.continue_session(*id).unwrap();
        assert_eq!(continued, serial);
        // Odd serials increment key t, even ones key 100.
        let expect_t = serial.div_ceil(2);
        total += serial / 2;
        let status = session.read(&(t as u64).to_le_bytes(), &mut value).unwrap();
        let got = match status {
            Status::Ok => u64::from_le_bytes(value[..8].try_into().unwrap()),
            Status::NotFound => 0,
            Status::Pending => {
                let done = session.complete_pending(true).unwrap();
                done[0]
                    .value
                    .as_ref()
                    .map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()))
            }
        };
        assert_eq!(got, expect_t, "thread {t}");
    }
    let status = session.read(&100u64.to_le_bytes(), &mut value).unwrap();
    let got = match status {
        Status::Ok => u64::from_le_bytes(value[..8].try_into().unwrap()),
        Status::Pending => {
            let done = session.complete_pending(true).unwrap();
            u64::from_le_bytes(done[0].value.as_ref().unwrap()[..8].try_into().unwrap())
        }
        Status::NotFound => 0,
    };
    assert_eq!(got, total);
}
