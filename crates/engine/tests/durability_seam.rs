//! Why this exists: the durability seam must hand every committed write to
//! the mode, with TIDs that order writes to the same key (silor §3.2: value
//! logging replays "largest TID wins"). A recording mode captures the
//! stream from concurrent workers; replaying it must rebuild exactly the
//! final database, and tickets must resolve through the mode's watermark.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use epochdb_engine::durability::{CommitView, DurabilityMode, WorkerLog};
use epochdb_engine::{Config, Database, Ticket, Tid, Watermark};
use parking_lot::Mutex;
use rand::{rngs::SmallRng, Rng, SeedableRng};

type Entry = (Tid, u32, Vec<u8>, Option<Vec<u8>>);
/// The newest write of a key: its TID and value (None: deleted).
type Replayed = (Tid, Option<Vec<u8>>);

struct Recording {
    log: Arc<Mutex<Vec<Entry>>>,
    watermark: Arc<Watermark>,
}

impl DurabilityMode for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }
    fn attach_worker(&self, _worker: usize) -> Box<dyn WorkerLog> {
        Box::new(RecordingWorker {
            log: self.log.clone(),
            watermark: self.watermark.clone(),
        })
    }
}

struct RecordingWorker {
    log: Arc<Mutex<Vec<Entry>>>,
    watermark: Arc<Watermark>,
}

impl WorkerLog for RecordingWorker {
    fn log_commit(&mut self, commit: &CommitView<'_>) -> Ticket {
        let mut log = self.log.lock();
        for write in commit.writes() {
            log.push((
                commit.tid(),
                write.table.as_u32(),
                write.key.to_vec(),
                write.value.map(<[u8]>::to_vec),
            ));
        }
        Ticket::at(commit.tid().epoch(), self.watermark.clone())
    }
}

#[test]
fn replaying_the_seam_by_largest_tid_rebuilds_the_database() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let watermark = Watermark::new(0);
    let db = Database::open(Config {
        custom_durability: Some(Arc::new(Recording {
            log: log.clone(),
            watermark: watermark.clone(),
        })),
        epoch_interval: Duration::from_millis(3),
        ..Config::default()
    })
    .unwrap();
    let tables = [db.create_table("a").unwrap(), db.create_table("b").unwrap()];

    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..3u64)
        .map(|seed| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut worker = db.worker().unwrap();
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut last_ticket = None;
                while !stop.load(Ordering::Relaxed) {
                    let ops: Vec<(usize, u8, u8)> = (0..rng.gen_range(1..5))
                        .map(|_| (rng.gen_range(0..2), rng.gen_range(0..32), rng.gen()))
                        .collect();
                    let (_, ticket) = worker
                        .run(|tx| {
                            for &(t, k, v) in &ops {
                                let key = [k];
                                match v % 4 {
                                    0 => {
                                        tx.delete(tables[t], &key)?;
                                    }
                                    1 => {
                                        let old = tx.get(tables[t], &key)?.map_or(0, |v| v[0]);
                                        tx.put(tables[t], &key, &[old.wrapping_add(1), v])?;
                                    }
                                    _ => tx.put(tables[t], &key, &[v; 3])?,
                                }
                            }
                            Ok(())
                        })
                        .unwrap();
                    last_ticket = Some(ticket);
                }
                last_ticket.unwrap()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    let tickets: Vec<Ticket> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    // Tickets resolve only through the mode's watermark.
    let newest = tickets.iter().map(Ticket::position).max().unwrap();
    assert!(!tickets.iter().all(|t| t.is_durable().unwrap()));
    watermark.advance(newest);
    for ticket in &tickets {
        ticket.wait().unwrap();
    }

    let mut replayed: BTreeMap<(u32, Vec<u8>), Replayed> = BTreeMap::new();
    for (tid, table, key, value) in log.lock().drain(..) {
        let slot = replayed.entry((table, key)).or_insert((Tid::ZERO, None));
        assert_ne!(slot.0, tid, "two writes of one key share a TID");
        if tid > slot.0 {
            *slot = (tid, value);
        }
    }
    let mut worker = db.worker().unwrap();
    for table in tables {
        let (actual, _) = worker
            .run(|tx| {
                Ok(tx
                    .scan_collect(table, Bound::Unbounded, Bound::Unbounded, usize::MAX)?
                    .into_iter()
                    .map(|(k, v)| (k, v.to_vec()))
                    .collect::<Vec<_>>())
            })
            .unwrap();
        let expected: Vec<_> = replayed
            .iter()
            .filter(|((t, _), (_, v))| *t == table.as_u32() && v.is_some())
            .map(|((_, k), (_, v))| (k.clone(), v.clone().unwrap()))
            .collect();
        assert_eq!(actual, expected, "replay differs for table {table:?}");
    }
}
