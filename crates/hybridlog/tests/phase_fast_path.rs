//! Why this file exists: `Session::upsert` and `Session::rmw` update a
//! record in place without `execute` in every CPR phase where
//! cpr-sigmod19 Algorithms 3–4 allow it. A session past its CPR point
//! (IN_PROGRESS, WAIT_PENDING, WAIT_FLUSH; version v+1) must not update a
//! version-v record in place, or checkpoint v's image holds an update
//! after the CPR point; a session still in PREPARE (version v) must not
//! update a version-(v+1) record in place, or an update the checkpoint
//! counts as committed lives only in a record recovery drops. Here two
//! sessions on one thread are held apart: one crosses into IN_PROGRESS
//! (the other, in PREPARE, holds the state machine there), both update
//! keys whose version-v records are in the mutable region, the checkpoint
//! ends, the disk loses its unsynced writes, and the recovered store must
//! hold exactly the effects up to each session's CPR point. Run for both
//! shifts (Appendix B) and for fold-over and snapshot checkpoints (a
//! snapshot leaves version-v records mutable through WAIT_FLUSH).

use std::path::Path;
use std::sync::Arc;

use epochdb_hybridlog::{
    AddU64, CheckpointKind, Config, CrashMode, Phase, Session, ShiftMode, SimStorage, Status, Store,
};

const K1: u64 = 1;
const K2: u64 = 2;
const K3: u64 = 3;

#[derive(Clone, Copy, Debug)]
enum Effect {
    Set(u64),
    Add(u64),
}

/// An operation issued: session (0 or 1), its serial, key, effect.
type Issued = (usize, u64, u64, Effect);

fn config(shift_mode: ShiftMode) -> Config {
    Config {
        index_buckets: 64,
        page_bits: 12,
        memory_bytes: 16 << 12,
        mutable_fraction: 0.9,
        max_sessions: 4,
        shift_mode,
        ..Config::default()
    }
}

fn upsert(
    session: &mut Session<AddU64>,
    log: &mut Vec<Issued>,
    who: usize,
    key: u64,
    value: u64,
) -> Status {
    let status = session
        .upsert(&key.to_le_bytes(), &value.to_le_bytes())
        .unwrap();
    assert_ne!(status, Status::NotFound);
    log.push((who, session.serial(), key, Effect::Set(value)));
    status
}

fn rmw(
    session: &mut Session<AddU64>,
    log: &mut Vec<Issued>,
    who: usize,
    key: u64,
    add: u64,
) -> Status {
    let status = session.rmw(&key.to_le_bytes(), add).unwrap();
    assert_ne!(status, Status::NotFound);
    log.push((who, session.serial(), key, Effect::Add(add)));
    status
}

fn read(session: &mut Session<AddU64>, key: u64) -> Option<u64> {
    let mut value = Vec::new();
    let bytes = match session.read(&key.to_le_bytes(), &mut value).unwrap() {
        Status::Ok => Some(value),
        Status::NotFound => None,
        Status::Pending => session.complete_pending(true).unwrap().remove(0).value,
    };
    bytes.map(|v| u64::from_le_bytes(v[..8].try_into().unwrap()))
}

/// The value of `key` after the issued operations that `included` keeps,
/// in the order issued.
fn expected(log: &[Issued], key: u64, included: impl Fn(usize, u64) -> bool) -> Option<u64> {
    let mut value = None;
    for &(who, serial, k, effect) in log {
        if k != key || !included(who, serial) {
            continue;
        }
        value = Some(match effect {
            Effect::Set(v) => v,
            Effect::Add(a) => value.unwrap_or(0) + a,
        });
    }
    value
}

fn run(shift_mode: ShiftMode, kind: CheckpointKind) {
    let what = format!("{shift_mode:?}, {kind:?}");
    let disk = SimStorage::new(5);
    let dir = Path::new("/fp");
    let store =
        Arc::new(Store::open(Arc::new(disk.clone()), dir, config(shift_mode), AddU64).unwrap());
    let mut sessions = [
        store.start_session().unwrap(),
        store.start_session().unwrap(),
    ];
    let mut log = Vec::new();
    // Version-v records of both keys, in the mutable region.
    upsert(&mut sessions[0], &mut log, 0, K1, 100);
    upsert(&mut sessions[0], &mut log, 0, K2, 200);
    upsert(&mut sessions[0], &mut log, 0, K3, 300);
    let v = store.system_state().version;
    let checkpointer = {
        let store = store.clone();
        std::thread::spawn(move || store.checkpoint_with(true, kind).unwrap())
    };
    // Refresh both sessions until one crosses its CPR point. The other
    // has published PREPARE but not IN_PROGRESS, so the global state stays
    // at IN_PROGRESS until it refreshes again.
    let ahead = 'crossed: loop {
        for (i, session) in sessions.iter_mut().enumerate() {
            session.refresh();
            if session.state().phase == Phase::InProgress {
                break 'crossed i;
            }
        }
        assert!(!checkpointer.is_finished(), "{what}: the checkpoint ended");
        std::thread::yield_now();
    };
    let behind = 1 - ahead;
    assert_eq!(sessions[ahead].state().version, v + 1, "{what}");
    assert_eq!(sessions[behind].state().phase, Phase::Prepare, "{what}");
    assert_eq!(store.system_state().phase, Phase::InProgress, "{what}");
    let mutable = store.addresses().read_only;
    // Past its CPR point: both version-v records are still in the mutable
    // region, but must be copied (fine shift) or wait (coarse shift), not
    // updated in place.
    let crossed_at = log.len();
    let mut statuses = vec![
        upsert(&mut sessions[ahead], &mut log, ahead, K1, 111),
        rmw(&mut sessions[ahead], &mut log, ahead, K2, 5),
        upsert(&mut sessions[ahead], &mut log, ahead, K3, 333),
    ];
    assert_eq!(
        store.addresses().read_only,
        mutable,
        "{what}: read-only moved"
    );
    // Still in PREPARE (version v): K1's first record may now be of
    // version v+1, which shifts this session instead of being updated in
    // place as version v.
    statuses.push(upsert(&mut sessions[behind], &mut log, behind, K1, 222));
    // Let the checkpoint end.
    while !checkpointer.is_finished() {
        for session in sessions.iter_mut() {
            session.complete_pending(false).unwrap();
        }
        std::thread::yield_now();
    }
    let info = checkpointer.join().unwrap();
    assert_eq!(info.version, v, "{what}");
    for session in sessions.iter_mut() {
        session.complete_pending(true).unwrap();
    }
    // The live store holds every update, in the order issued when none
    // went pending (a pending one takes effect when it completes).
    let everything = |_, _| true;
    let none_pending = statuses.iter().all(|s| *s == Status::Ok);
    assert!(
        none_pending || shift_mode == ShiftMode::Coarse,
        "{what}: {statuses:?}"
    );
    for key in [K1, K2, K3].into_iter().filter(|_| none_pending) {
        assert_eq!(
            read(&mut sessions[0], key),
            expected(&log, key, everything),
            "{what}: live key {key}"
        );
    }
    let ids = [sessions[0].id(), sessions[1].id()];
    drop(sessions);
    drop(store);

    let store = Store::open(
        Arc::new(disk.crash(CrashMode::DropUnsynced)),
        dir,
        config(shift_mode),
        AddU64,
    )
    .unwrap();
    assert_eq!(store.recovered().unwrap().version, v, "{what}");
    let mut points = [0; 2];
    for (who, id) in ids.iter().enumerate() {
        let committed = info.sessions.iter().find(|(s, _)| s == id).unwrap().1;
        let (_, recovered) = store.continue_session(*id).unwrap();
        assert_eq!(recovered, committed, "{what}: session {who}");
        points[who] = recovered;
    }
    // The ahead session's three updates came after its CPR point.
    let ahead_first = log[crossed_at].1;
    assert!(points[ahead] < ahead_first, "{what}: {points:?} {log:?}");
    let mut session = store.start_session().unwrap();
    for key in [K1, K2, K3] {
        assert_eq!(
            read(&mut session, key),
            expected(&log, key, |who, serial| serial <= points[who]),
            "{what}: key {key} after recovery; CPR points {points:?}, ahead {ahead}, issued {log:?}"
        );
    }
    let invalidated = store.recovered().unwrap().invalidated;
    if shift_mode == ShiftMode::Fine {
        assert!(invalidated > 0, "{what}: the v+1 records were not dropped");
    }
    let values = [K1, K2, K3].map(|key| read(&mut session, key));
    drop(session);
    drop(store);
    recover_again(&disk, dir, shift_mode, v, invalidated, values, &what);
}

/// Recovers the same checkpoint again (the invalid marks the first
/// recovery wrote into the log were not synced: the log's checksums must
/// hold either way, `log.sums`), then takes a log-only checkpoint, whose
/// replay covers the marked records, and recovers that.
fn recover_again(
    disk: &SimStorage,
    dir: &Path,
    shift_mode: ShiftMode,
    v: u32,
    invalidated: usize,
    values: [Option<u64>; 3],
    what: &str,
) {
    let reopen = |when: &str| {
        Store::open(
            Arc::new(disk.crash(CrashMode::DropUnsynced)),
            dir,
            config(shift_mode),
            AddU64,
        )
        .unwrap_or_else(|e| panic!("{what}: {when}: {e}"))
    };
    let store = reopen("second recovery");
    let info = store.recovered().unwrap();
    assert_eq!((info.version, info.invalidated), (v, invalidated), "{what}");
    let mut session = store.start_session().unwrap();
    assert_eq!([K1, K2, K3].map(|key| read(&mut session, key)), values);
    drop(session);
    store
        .checkpoint_with(false, CheckpointKind::FoldOver)
        .unwrap();
    drop(store);
    let store = reopen("recovery of the log-only checkpoint");
    assert_eq!(store.recovered().unwrap().version, v + 1, "{what}");
    let mut session = store.start_session().unwrap();
    assert_eq!([K1, K2, K3].map(|key| read(&mut session, key)), values);
}

#[test]
fn fine_shift_fold_over() {
    run(ShiftMode::Fine, CheckpointKind::FoldOver);
}

#[test]
fn fine_shift_snapshot() {
    run(ShiftMode::Fine, CheckpointKind::Snapshot);
}

#[test]
fn coarse_shift_fold_over() {
    run(ShiftMode::Coarse, CheckpointKind::FoldOver);
}

#[test]
fn coarse_shift_snapshot() {
    run(ShiftMode::Coarse, CheckpointKind::Snapshot);
}
