//! The synthetic MMO workload of §5.1/§5.4: every player is an object of
//! about 100 KB; five semi-independent probabilistic state machines per
//! player (movement, combat, buffs, social, economy) produce its updates,
//! one step per 0.1 s tick. The paper does not publish its transition
//! probabilities, only the result — 2,000 players, 531,530 updates per
//! second — and that about 80% of the attributes change only on human
//! actions; the probabilities below are tuned to both (the unit test checks
//! the rate within 2%).
//!
//! The model emits *events* (a player, a kind, an argument); [`expand`]
//! turns an event into the words it writes, a pure function, so an event is
//! also a logical log record: replaying it redoes its writes (§2.2).

use rand::rngs::SmallRng;
use rand::Rng;

/// Words in one player object (12,800 × 8 B = 100 KiB).
pub(crate) const PLAYER_WORDS: usize = 12_800;

// Attribute regions of a player object, in words.
const MOVE: usize = 0; // position, velocity, heading, animation, stamina
const COMBAT: usize = 16; // vitals, target, threat table, cooldowns
const COOLDOWNS: usize = 48;
const BUFFS: usize = 80; // 32 buff slots of 6 words
const BUFF_SLOTS: u32 = 32;
const BUFF_WORDS: usize = 6;
const SOCIAL: usize = 272; // chat ring of 256 lines of 8 words
const CHAT_LINES: u32 = 256;
/// The cold 80%: inventory, bank, quests, achievements, in 8-word slots,
/// written only by the economy machine (human-initiated actions).
const COLD: usize = 2560;
const COLD_SLOTS: u32 = ((PLAYER_WORDS - COLD) / 8) as u32;
const _: () = assert!(COLD * 5 == PLAYER_WORDS); // 80% of words are cold
const _: () = assert!(BUFFS + BUFF_SLOTS as usize * BUFF_WORDS <= SOCIAL);
const _: () = assert!(SOCIAL + CHAT_LINES as usize * 8 <= COLD);

/// What happened to a player in one tick; see [`expand`] for its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) player: u32,
    pub(crate) kind: Kind,
    /// A slot, ability or line number, depending on `kind`.
    pub(crate) arg: u32,
}

/// Event kinds, one or more per state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Walk = 0,
    Run = 1,
    CombatTick = 2,
    Respawn = 3,
    BuffTick = 4,
    BuffAdd = 5,
    BuffExpire = 6,
    Chat = 7,
    Loot = 8,
    Trade = 9,
    Quest = 10,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Self> {
        use Kind::*;
        [
            Walk, Run, CombatTick, Respawn, BuffTick, BuffAdd, BuffExpire, Chat, Loot, Trade, Quest,
        ]
        .get(usize::from(b))
        .copied()
    }
}

impl Event {
    /// Bytes of an encoded event (a logical log record).
    pub(crate) const BYTES: usize = 9;

    /// Little-endian: player (4), kind (1), arg (4).
    pub(crate) fn encode(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..4].copy_from_slice(&self.player.to_le_bytes());
        b[4] = self.kind as u8;
        b[5..].copy_from_slice(&self.arg.to_le_bytes());
        b
    }

    /// Inverse of [`Event::encode`].
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != Self::BYTES {
            return None;
        }
        Some(Self {
            player: u32::from_le_bytes(b[..4].try_into().ok()?),
            kind: Kind::from_u8(b[4])?,
            arg: u32::from_le_bytes(b[5..].try_into().ok()?),
        })
    }
}

/// Calls `write(word)` for every word of the state `event` writes, in order.
#[inline]
pub(crate) fn expand(event: Event, mut write: impl FnMut(usize)) {
    let base = event.player as usize * PLAYER_WORDS;
    let arg = event.arg as usize;
    let mut range = |from: usize, n: usize| (from..from + n).for_each(|w| write(base + w));
    match event.kind {
        // Position, velocity, heading, animation.
        Kind::Walk => range(MOVE, 8),
        // The same plus stamina and the run timer.
        Kind::Run => range(MOVE, 10),
        // Vitals (health, mana, energy and their regeneration), target,
        // combo, a 16-entry threat table, the combat timer and log counter,
        // and one ability's cooldown pair.
        Kind::CombatTick => {
            range(COMBAT, 28);
            range(COOLDOWNS + 2 * (arg % 16), 2);
        }
        // Every vital and cooldown reset.
        Kind::Respawn => range(COMBAT, 64),
        // The buff's remaining time.
        Kind::BuffTick => range(BUFFS + arg % BUFF_SLOTS as usize * BUFF_WORDS, 1),
        Kind::BuffAdd => range(BUFFS + arg % BUFF_SLOTS as usize * BUFF_WORDS, BUFF_WORDS),
        Kind::BuffExpire => range(BUFFS + arg % BUFF_SLOTS as usize * BUFF_WORDS, 2),
        Kind::Chat => range(SOCIAL + arg % CHAT_LINES as usize * 8, 8),
        Kind::Loot => range(COLD + arg % COLD_SLOTS as usize * 8, 4),
        Kind::Trade => range(COLD + arg % COLD_SLOTS as usize * 8, 8),
        Kind::Quest => range(COLD + arg % COLD_SLOTS as usize * 8, 2),
    }
}

/// One player's five state machines.
#[derive(Debug, Clone, Default)]
struct Player {
    /// 0 idle, 1 walking, 2 running.
    movement: u8,
    /// 0 at peace, 1 in combat, 2 dead.
    combat: u8,
    /// Bit `s`: buff slot `s` is active.
    buffs: u32,
    /// Chatting (the next lines come quickly) or quiet.
    chatting: bool,
    chat_line: u32,
    /// 0 exploring, 1 looting a fight's spoils, 2 at a vendor or trading.
    economy: u8,
}

/// The players and their machines.
pub(crate) struct MmoModel {
    players: Vec<Player>,
}

/// Stays in state `s` with probability 1 − Σ `moves`; otherwise moves.
#[inline]
fn step(rng: &mut SmallRng, s: u8, moves: &[(u8, f64)]) -> u8 {
    let mut u: f64 = rng.gen();
    for &(to, p) in moves {
        if u < p {
            return to;
        }
        u -= p;
    }
    s
}

impl MmoModel {
    /// `players` players, all idle, at peace, unbuffed.
    pub(crate) fn new(players: usize) -> Self {
        Self {
            players: vec![Player::default(); players],
        }
    }

    /// Words of state.
    pub(crate) fn state_words(&self) -> usize {
        self.players.len() * PLAYER_WORDS
    }

    /// Advances every player by one tick, pushing the tick's events.
    pub(crate) fn tick(&mut self, rng: &mut SmallRng, out: &mut Vec<Event>) {
        for (id, p) in self.players.iter_mut().enumerate() {
            let ev = |kind, arg| Event {
                player: id as u32,
                kind,
                arg,
            };
            // 1. Movement: idle ⇄ walking ⇄ running (about 55% moving).
            p.movement = match p.movement {
                0 => step(rng, 0, &[(1, 0.06), (2, 0.02)]),
                1 => step(rng, 1, &[(0, 0.05), (2, 0.04)]),
                _ => step(rng, 2, &[(1, 0.06), (0, 0.02)]),
            };
            match p.movement {
                1 => out.push(ev(Kind::Walk, 0)),
                2 => out.push(ev(Kind::Run, 0)),
                _ => {}
            }
            // 2. Combat: peace → combat → peace, rarely death and respawn.
            p.combat = match p.combat {
                0 => step(rng, 0, &[(1, 0.025)]),
                1 => step(rng, 1, &[(0, 0.03), (2, 0.002)]),
                _ => step(rng, 2, &[(0, 0.05)]),
            };
            if p.combat == 1 {
                out.push(ev(Kind::CombatTick, rng.gen_range(0..16)));
            }
            if p.combat == 2 && rng.gen_bool(0.05) {
                out.push(ev(Kind::Respawn, 0));
                p.combat = 0;
            }
            // 3. Buffs: each active buff ticks down; some expire; in combat
            // new ones are cast more often.
            let mut active = p.buffs;
            while active != 0 {
                let slot = active.trailing_zeros();
                active &= active - 1;
                if rng.gen_bool(0.02) {
                    p.buffs &= !(1 << slot);
                    out.push(ev(Kind::BuffExpire, slot));
                } else {
                    out.push(ev(Kind::BuffTick, slot));
                }
            }
            let cast = if p.combat == 1 { 0.25 } else { 0.08 };
            if rng.gen_bool(cast) {
                let slot = rng.gen_range(0..BUFF_SLOTS);
                if p.buffs & (1 << slot) == 0 {
                    p.buffs |= 1 << slot;
                    out.push(ev(Kind::BuffAdd, slot));
                }
            }
            // 4. Social: quiet ⇄ chatting; lines come in bursts.
            p.chatting = if p.chatting {
                !rng.gen_bool(0.1)
            } else {
                rng.gen_bool(0.01)
            };
            if p.chatting && rng.gen_bool(0.3) {
                out.push(ev(Kind::Chat, p.chat_line));
                p.chat_line = (p.chat_line + 1) % CHAT_LINES;
            }
            // 5. Economy (human actions, touching the cold 80%): looting
            // after fights, trading at vendors, quest progress.
            p.economy = match p.economy {
                0 => step(rng, 0, &[(1, 0.01), (2, 0.002)]),
                1 => step(rng, 1, &[(0, 0.2)]),
                _ => step(rng, 2, &[(0, 0.05)]),
            };
            match p.economy {
                1 => out.push(ev(Kind::Loot, rng.gen_range(0..COLD_SLOTS))),
                2 if rng.gen_bool(0.2) => out.push(ev(Kind::Trade, rng.gen_range(0..COLD_SLOTS))),
                _ => {}
            }
            if rng.gen_bool(0.01) {
                out.push(ev(Kind::Quest, rng.gen_range(0..COLD_SLOTS)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn events_round_trip_and_stay_in_their_player() {
        let mut model = MmoModel::new(3);
        let mut rng = SmallRng::seed_from_u64(7);
        let mut events = Vec::new();
        for _ in 0..200 {
            model.tick(&mut rng, &mut events);
        }
        assert!(!events.is_empty());
        for e in &events {
            assert_eq!(Event::decode(&e.encode()), Some(*e));
            let base = e.player as usize * PLAYER_WORDS;
            expand(*e, |w| assert!((base..base + PLAYER_WORDS).contains(&w)));
        }
    }

    #[test]
    fn rate_is_the_papers_and_most_words_stay_cold() {
        // 2,000 players at 10 ticks per second: the paper's 531,530
        // updates per second, within 2% after a warm-up.
        let mut model = MmoModel::new(2000);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut events = Vec::new();
        for _ in 0..300 {
            events.clear();
            model.tick(&mut rng, &mut events);
        }
        let (mut words, mut cold) = (0u64, 0u64);
        let ticks = 100;
        for _ in 0..ticks {
            events.clear();
            model.tick(&mut rng, &mut events);
            for e in &events {
                expand(*e, |w| {
                    words += 1;
                    cold += u64::from(w % PLAYER_WORDS >= COLD);
                });
            }
        }
        let per_sec = words as f64 / (ticks as f64 / 10.0);
        assert!(
            (per_sec / 531_530.0 - 1.0).abs() < 0.02,
            "{per_sec} updates/s"
        );
        assert!(cold * 50 < words, "cold writes are rare: {cold} of {words}");
    }
}
