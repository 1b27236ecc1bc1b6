//! Why this file exists: `Store::wait_state_change` lets a monitor (the
//! crash test, the benchmark) follow the CPR phases without polling; it
//! must wake at every phase change, PREPARE included, which only the
//! checkpoint driver sets. A session that refreshes only every few
//! milliseconds holds each phase that waits for it, so a monitor that
//! missed a wake-up would see the next phase instead.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_hybridlog::{AddU64, Config, Phase, SimStorage, Store};

#[test]
fn a_monitor_sees_every_phase_the_sessions_hold() {
    let config = Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 16 << 12,
        mutable_fraction: 0.5,
        max_sessions: 4,
        ..Config::default()
    };
    let store = Arc::new(
        Store::open(
            Arc::new(SimStorage::new(3)),
            Path::new("/m"),
            config,
            AddU64,
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut session = store.start_session().unwrap();
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                session.rmw(&(n % 16).to_le_bytes(), 1).unwrap();
                n += 1;
                session.refresh();
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    let first = store.system_state();
    assert_eq!(first.phase, Phase::Rest);
    let checkpointer = {
        let store = store.clone();
        std::thread::spawn(move || store.checkpoint(true).unwrap())
    };
    let mut seen = vec![first];
    while seen.last().unwrap().phase != Phase::Rest || seen.len() == 1 {
        let last = *seen.last().unwrap();
        let now = store.wait_state_change(last, Duration::from_secs(10));
        assert_ne!(now, last, "no phase change within 10 s");
        seen.push(now);
    }
    let info = checkpointer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let phases: Vec<Phase> = seen.iter().map(|s| s.phase).collect();
    // PREPARE and IN_PROGRESS each wait for the session's next refresh.
    assert!(phases.contains(&Phase::Prepare), "{seen:?}");
    assert!(phases.contains(&Phase::InProgress), "{seen:?}");
    assert_eq!(seen.last().unwrap().version, info.version + 1);
    // A timeout with no change returns the same state.
    let rest = store.system_state();
    assert_eq!(
        store.wait_state_change(rest, Duration::from_millis(20)),
        rest
    );
}
