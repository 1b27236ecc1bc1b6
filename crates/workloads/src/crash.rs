//! The crash-test workload (DESIGN.md "How we know it works"): write-heavy
//! transactions whose recovered state can be checked for two properties
//! without knowing where the crash fell:
//!
//! (a) every commit acknowledged durable is present, and
//! (b) the state is exactly the state after some prefix of the serial
//!     order restricted to whole epochs — checked through its consequences:
//!     atomicity, per-worker prefixes, closure under reads-from, and no lost
//!     overwrite.
//!
//! Worker `w`'s transaction number `s` (1, 2, … per worker, continuing
//! across crashes from the recovered counter) picks a group `g`, reads the
//! group's current writer `(w', s')`, and writes:
//!
//! * every key of group `g` ← `(w, s)` (atomicity: all equal after recovery);
//! * history `h(w, s)` ← `(g, w', s')`, a new key (reads-from edge);
//! * counter `c(w)` ← `s` (the worker's prefix);
//! * toggle `x(g)`: present iff `s` is odd (exercises tombstones).

use std::collections::{HashMap, HashSet};
use std::ops::Bound::Unbounded;

use epochdb_engine::{Abort, Database, DurabilityError, TableId, Ticket, Worker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Keys per group, all written together.
pub const KEYS_PER_GROUP: u32 = 4;

/// The crash workload's tables.
#[derive(Clone, Copy, Debug)]
pub struct CrashTables {
    groups: TableId,
    history: TableId,
    counters: TableId,
    toggles: TableId,
}

impl CrashTables {
    /// Creates (or finds, after recovery) the tables.
    pub fn create(db: &Database) -> Result<Self, DurabilityError> {
        Ok(Self {
            groups: db.create_table("crash_groups")?,
            history: db.create_table("crash_history")?,
            counters: db.create_table("crash_counters")?,
            toggles: db.create_table("crash_toggles")?,
        })
    }
}

fn group_key(group: u32, index: u32) -> [u8; 8] {
    let mut key = [0u8; 8];
    key[..4].copy_from_slice(&group.to_be_bytes());
    key[4..].copy_from_slice(&index.to_be_bytes());
    key
}

fn writer_key(worker: u32, seq: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(&worker.to_be_bytes());
    key[4..].copy_from_slice(&seq.to_be_bytes());
    key
}

fn parse_writer(bytes: &[u8]) -> Option<(u32, u64)> {
    if bytes.len() != 12 {
        return None;
    }
    let worker = u32::from_be_bytes(bytes[..4].try_into().ok()?);
    let seq = u64::from_be_bytes(bytes[4..].try_into().ok()?);
    Some((worker, seq))
}

/// One worker's client.
pub struct CrashClient {
    tables: CrashTables,
    worker_id: u32,
    groups: u32,
    next_seq: u64,
    rng: SmallRng,
}

impl CrashClient {
    /// A client for worker slot `worker_id`, continuing after whatever the
    /// database holds for it.
    pub fn new(
        worker: &mut Worker,
        tables: CrashTables,
        worker_id: u32,
        groups: u32,
        seed: u64,
    ) -> Result<Self, String> {
        let counter = read_counter(worker, tables, worker_id)?;
        Ok(Self {
            tables,
            worker_id,
            groups: groups.max(1),
            next_seq: counter + 1,
            rng: SmallRng::seed_from_u64(seed ^ (u64::from(worker_id) << 32) ^ counter),
        })
    }

    /// Runs one transaction; returns its sequence number and ticket.
    pub fn step(&mut self, worker: &mut Worker) -> Result<(u64, Ticket), String> {
        let seq = self.next_seq;
        let group = self.rng.gen_range(0..self.groups);
        let (w, t) = (self.worker_id, self.tables);
        let ((), ticket) = worker
            .run(|tx| {
                let previous = tx.get(t.groups, &group_key(group, 0))?.map(<[u8]>::to_vec);
                let me = writer_key(w, seq);
                for index in 0..KEYS_PER_GROUP {
                    tx.put(t.groups, &group_key(group, index), &me)?;
                }
                let mut edge = group.to_be_bytes().to_vec();
                edge.extend_from_slice(previous.as_deref().unwrap_or(&[]));
                if !tx.insert(t.history, &me, &edge)? {
                    return Err(Abort::User); // a history key exists: a bug
                }
                tx.put(t.counters, &w.to_be_bytes(), &seq.to_be_bytes())?;
                let toggle = group.to_be_bytes();
                if seq % 2 == 1 {
                    tx.put(t.toggles, &toggle, &me)?;
                } else {
                    tx.delete(t.toggles, &toggle)?;
                }
                Ok(())
            })
            .map_err(|e| format!("crash workload transaction: {e}"))?;
        self.next_seq += 1;
        Ok((seq, ticket))
    }
}

fn read_counter(worker: &mut Worker, tables: CrashTables, worker_id: u32) -> Result<u64, String> {
    let (value, _) = worker
        .run(|tx| {
            Ok(tx
                .get(tables.counters, &worker_id.to_be_bytes())?
                .map(<[u8]>::to_vec))
        })
        .map_err(|e| e.to_string())?;
    Ok(match value {
        Some(bytes) => u64::from_be_bytes(bytes.try_into().map_err(|_| "bad counter")?),
        None => 0,
    })
}

/// What a check found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// Transactions recovered, all workers.
    pub transactions: u64,
    /// Per worker slot: the recovered counter.
    pub counters: HashMap<u32, u64>,
    /// Every violation, readable.
    pub violations: Vec<String>,
}

/// Checks the recovered database: (a) every `acked[w]` (the largest
/// acknowledged sequence number of worker `w`) is present; (b) the state
/// is a prefix closed under reads-from, with atomic groups, no lost
/// overwrite, and toggles matching their last writer.
pub fn check(db: &Database, acked: &HashMap<u32, u64>) -> Result<CheckReport, String> {
    let tables = CrashTables::create(db).map_err(|e| e.to_string())?;
    let mut worker = db.worker().map_err(|e| e.to_string())?;
    type Rows = Vec<(Vec<u8>, Vec<u8>)>;
    let scan = |worker: &mut Worker, table: TableId| -> Result<Rows, String> {
        let (rows, _) = worker
            .run(|tx| {
                Ok(tx
                    .scan_collect(table, Unbounded, Unbounded, usize::MAX)?
                    .into_iter()
                    .map(|(k, v)| (k, v.to_vec()))
                    .collect::<Vec<_>>())
            })
            .map_err(|e| e.to_string())?;
        Ok(rows)
    };
    let groups = scan(&mut worker, tables.groups)?;
    let history = scan(&mut worker, tables.history)?;
    let counters = scan(&mut worker, tables.counters)?;
    let toggles = scan(&mut worker, tables.toggles)?;
    let mut report = CheckReport::default();
    let v = &mut report.violations;

    for (key, value) in &counters {
        let (Ok(w), Ok(s)) = (
            <[u8; 4]>::try_from(key.as_slice()),
            <[u8; 8]>::try_from(value.as_slice()),
        ) else {
            v.push(format!("malformed counter {key:?}"));
            continue;
        };
        report
            .counters
            .insert(u32::from_be_bytes(w), u64::from_be_bytes(s));
    }
    let counter = |w: u32| report.counters.get(&w).copied().unwrap_or(0);

    // (a) acknowledged commits are present.
    for (&w, &s) in acked {
        if s > counter(w) {
            v.push(format!(
                "lost acknowledged commit: worker {w} acked {s}, recovered counter {}",
                counter(w)
            ));
        }
    }

    // History: exactly 1..=c(w) for every worker; edges resolve.
    let mut seen: HashMap<u32, HashSet<u64>> = HashMap::new();
    // Per group: every recovered writer and the writer it overwrote.
    type Writer = (u32, u64);
    let mut edges: HashMap<u32, Vec<(Writer, Option<Writer>)>> = HashMap::new();
    for (key, value) in &history {
        let Some((w, s)) = parse_writer(key) else {
            v.push(format!("malformed history key {key:?}"));
            continue;
        };
        seen.entry(w).or_default().insert(s);
        if value.len() < 4 {
            v.push(format!("malformed history value for ({w}, {s})"));
            continue;
        }
        let group = u32::from_be_bytes(value[..4].try_into().expect("4 bytes"));
        let previous = if value.len() == 4 {
            None
        } else {
            match parse_writer(&value[4..]) {
                Some(p) => Some(p),
                None => {
                    v.push(format!("malformed history edge for ({w}, {s})"));
                    continue;
                }
            }
        };
        if let Some((pw, ps)) = previous {
            if ps > counter(pw) {
                v.push(format!(
                    "({w}, {s}) read ({pw}, {ps}), which was not recovered (counter {})",
                    counter(pw)
                ));
            }
        }
        edges.entry(group).or_default().push(((w, s), previous));
    }
    for (&w, &c) in &report.counters {
        let have = seen.get(&w).map_or(0, HashSet::len) as u64;
        let beyond = seen
            .get(&w)
            .map_or(0, |set| set.iter().filter(|&&s| s > c).count());
        if have != c || beyond > 0 {
            v.push(format!(
                "worker {w}: counter {c} but {have} history entries ({beyond} beyond it)"
            ));
        }
        report.transactions += c;
    }
    for (&w, set) in &seen {
        if !report.counters.contains_key(&w) {
            v.push(format!(
                "worker {w}: {} history entries but no counter",
                set.len()
            ));
        }
    }

    // Groups: atomic, and the current writer heads the group's chain.
    let mut current: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
    for (key, value) in &groups {
        let Ok(key) = <[u8; 8]>::try_from(key.as_slice()) else {
            v.push(format!("malformed group key {key:?}"));
            continue;
        };
        let group = u32::from_be_bytes(key[..4].try_into().expect("4 bytes"));
        current.entry(group).or_default().push(value.clone());
    }
    for (group, values) in &current {
        if values.len() != KEYS_PER_GROUP as usize || values.iter().any(|x| x != &values[0]) {
            v.push(format!("group {group} not atomic: {values:?}"));
            continue;
        }
        let Some(head) = parse_writer(&values[0]) else {
            v.push(format!("group {group}: malformed value"));
            continue;
        };
        let chain = edges.get(group).map(Vec::as_slice).unwrap_or(&[]);
        if !chain.iter().any(|(me, _)| *me == head) {
            v.push(format!(
                "group {group}: writer {head:?} has no history entry"
            ));
        }
        let overwritten: HashSet<(u32, u64)> = chain.iter().filter_map(|(_, p)| *p).collect();
        if overwritten.contains(&head) {
            v.push(format!(
                "group {group}: current writer {head:?} was overwritten by a recovered transaction"
            ));
        }
        if chain.len() != overwritten.len() + 1 {
            v.push(format!(
                "group {group}: {} writers but {} overwrites: a lost update",
                chain.len(),
                overwritten.len()
            ));
        }
        let toggle = toggles
            .iter()
            .find(|(k, _)| k.as_slice() == group.to_be_bytes());
        let should_exist = head.1 % 2 == 1;
        match (toggle, should_exist) {
            (Some((_, value)), true) if parse_writer(value) == Some(head) => {}
            (None, false) => {}
            (found, _) => v.push(format!(
                "group {group}: toggle {:?} does not match writer {head:?}",
                found.map(|(_, value)| parse_writer(value))
            )),
        }
    }
    for group in edges.keys() {
        if !current.contains_key(group) {
            v.push(format!("group {group}: history entries but no group keys"));
        }
    }
    Ok(report)
}
