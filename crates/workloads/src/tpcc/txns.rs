//! TPC-C's clients and its five transactions (spec §2.4–§2.8) in the
//! standard mix (spec §5.2.3: 45% New-Order, 43% Payment, 4% each of
//! Order-Status, Delivery and Stock-Level), with no think time.
//!
//! Each step draws its inputs first, as a terminal would, and then runs the
//! transaction body, which may run several times: bodies only read and
//! write through the transaction, and treat anything impossible they read
//! (a missing row, a malformed value) as a conflict rather than a panic,
//! since an optimistic transaction may see inconsistent state before
//! validation aborts it.

use std::io::Write as _;
use std::ops::Bound::{Excluded, Included};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use epochdb_engine::{Abort, Ticket, Transaction, TxError, Worker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::random::{is_original, last_name, nurand, A_C_ID, A_C_LAST, A_OL_I_ID, LAST_NAME_MAX};
use super::rows::{Customer, District, History, Item, Order, OrderLine, Stock, Warehouse};
use super::schema::{
    customer_key, customer_name_key_c_id, customer_name_range, district_key, history_key, item_key,
    order_customer_key, order_customer_key_ids, order_key, order_key_o_id, order_line_key,
    stock_key, warehouse_key, Tables, DISTRICTS,
};
use super::Shared;
use crate::workload::{Client, Outcome};

/// Milliseconds since the Unix epoch: TPC-C's dates.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64)
}

/// Most order lines of a New-Order (spec §2.4.1.3: 5..=15).
const MAX_LINES: usize = 15;
/// C_DATA is kept to its first 500 characters (spec §2.5.2.2).
const C_DATA_MAX: usize = 500;
/// Stock rows Stock-Level prefetches before reading them: enough misses in
/// flight to overlap, few enough that the first are still cached when read.
const STOCK_LEVEL_BATCH: usize = 16;

/// One order line's inputs (spec §2.4.1.5).
#[derive(Clone, Copy, Default)]
struct LineInput {
    i_id: u32,
    supply_w_id: u16,
    quantity: u8,
}

/// How a Payment or Order-Status picks its customer (spec §2.5.1.2).
#[derive(Clone, Copy)]
enum CustomerBy {
    Id(u32),
    LastName([u8; LAST_NAME_MAX], usize),
}

/// A client: one terminal bound to its home warehouse.
pub(crate) struct TpccClient {
    shared: Arc<Shared>,
    tables: Tables,
    rng: SmallRng,
    /// Home warehouse: thread i → (i mod W) + 1.
    home: u16,
    /// Stock-Level's district, fixed per terminal (spec §2.8.1.2).
    stock_level_d: u8,
    /// This client's HISTORY key prefix and next sequence number.
    origin: u32,
    history_seq: u64,
    /// Row encoding buffer, reused by every step.
    buf: Vec<u8>,
    /// New C_DATA for bad-credit Payments.
    data: Vec<u8>,
    /// Customer ids by name, or Stock-Level's item ids.
    ids: Vec<u32>,
    /// Per district of the home warehouse, a lower bound on the oldest
    /// undelivered order: one past the last order this client delivered.
    /// Delivery's scan starts here instead of at order 0, so it does not
    /// walk the index leaves emptied by earlier deliveries (Silo's TPC-C
    /// keeps the same hint, `last_no_o_ids`). It is only a starting point:
    /// orders are created with increasing ids and a committed Delivery
    /// removed the oldest one, so no undelivered order ever sits below it.
    /// Stale (too low) when other clients share the warehouse, which only
    /// costs a longer scan.
    delivery_from: [u32; DISTRICTS as usize],
}

impl TpccClient {
    pub(crate) fn new(shared: Arc<Shared>, thread: usize, seed: u64) -> Self {
        let warehouses = shared.config.warehouses as usize;
        let home = (thread % warehouses + 1) as u16;
        let stock_level_d = ((thread / warehouses) % usize::from(DISTRICTS) + 1) as u8;
        let origin = shared.next_origin.fetch_add(1, Ordering::Relaxed);
        let rng =
            SmallRng::seed_from_u64(seed ^ (thread as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Self {
            tables: shared.tables,
            shared,
            rng,
            home,
            stock_level_d,
            origin,
            history_seq: 0,
            buf: Vec::with_capacity(1024),
            data: Vec::with_capacity(C_DATA_MAX + 64),
            ids: Vec::with_capacity(400),
            delivery_from: [0; DISTRICTS as usize],
        }
    }

    fn warehouses(&self) -> u16 {
        self.shared.config.warehouses as u16
    }

    /// A uniformly random warehouse other than the home one (W > 1).
    fn remote_warehouse(&mut self) -> u16 {
        let other = self.rng.gen_range(1..self.warehouses());
        if other >= self.home {
            other + 1
        } else {
            other
        }
    }

    /// 60% by last name, 40% by id (spec §2.5.1.2, §2.6.1.2).
    fn pick_customer(&mut self) -> CustomerBy {
        let config = &self.shared.config;
        if self.rng.gen_range(0..100) < 60 {
            // With fewer than 1,000 customers only the first names exist.
            let max = 999.min(config.customers_per_district - 1);
            let number = nurand(&mut self.rng, A_C_LAST, self.shared.c.c_last_run, 0, max);
            let mut name = [0; LAST_NAME_MAX];
            let len = last_name(number, &mut name);
            CustomerBy::LastName(name, len)
        } else {
            let customers = config.customers_per_district;
            CustomerBy::Id(nurand(
                &mut self.rng,
                A_C_ID,
                self.shared.c.c_id,
                1,
                customers,
            ))
        }
    }

    /// New-Order (spec §2.4).
    fn new_order(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let config = &self.shared.config;
        let (w, items, customers) = (self.home, config.items, config.customers_per_district);
        let d: u8 = self.rng.gen_range(1..=DISTRICTS);
        let c = nurand(&mut self.rng, A_C_ID, self.shared.c.c_id, 1, customers);
        let ol_cnt = self.rng.gen_range(5..=MAX_LINES);
        // 1% roll back on an unused item id in the last line (§2.4.1.4).
        let rollback = self.rng.gen_range(0..100) == 0;
        let mut lines = [LineInput::default(); MAX_LINES];
        let mut all_local = true;
        for (index, line) in lines[..ol_cnt].iter_mut().enumerate() {
            line.i_id = if rollback && index == ol_cnt - 1 {
                items + 1
            } else {
                nurand(&mut self.rng, A_OL_I_ID, self.shared.c.ol_i_id, 1, items)
            };
            // 1% of lines from a remote warehouse (§2.4.1.5).
            line.supply_w_id = if self.warehouses() > 1 && self.rng.gen_range(0..100) == 0 {
                all_local = false;
                self.remote_warehouse()
            } else {
                w
            };
            line.quantity = self.rng.gen_range(1..=10);
        }
        let lines = &lines[..ol_cnt];
        let now = now_ms();
        let (t, buf) = (self.tables, &mut self.buf);
        let result = worker.run(|tx| {
            let warehouse = read(tx, t.warehouse, &warehouse_key(w), Warehouse::decode)?;
            let dk = district_key(w, d);
            let mut district = read(tx, t.district, &dk, District::decode)?;
            let o = district.next_o_id;
            district.next_o_id = o.checked_add(1).ok_or(Abort::Conflict)?;
            write(tx, t.district, &dk, buf, |b| district.encode(b))?;
            let customer = read(tx, t.customer, &customer_key(w, d, c), Customer::decode)?;

            let ok = order_key(w, d, o);
            let order = Order {
                c_id: c,
                entry_d: now,
                carrier_id: 0,
                ol_cnt: ol_cnt as u8,
                all_local,
            };
            insert(tx, t.oorder, &ok, buf, |b| order.encode(b))?;
            insert(tx, t.new_order, &ok, buf, |_| {})?;
            insert(
                tx,
                t.order_customer,
                &order_customer_key(w, d, c, o),
                buf,
                |_| {},
            )?;

            // Start every line's item and stock misses now, together: the
            // index lines first, then (their probes now hitting the cache)
            // the records.
            for line in lines {
                tx.prefetch_index(t.item, &item_key(line.i_id));
                tx.prefetch_index(t.stock, &stock_key(line.supply_w_id, line.i_id));
            }
            for line in lines {
                tx.prefetch(t.item, &item_key(line.i_id));
                tx.prefetch(t.stock, &stock_key(line.supply_w_id, line.i_id));
            }
            let mut total = 0i64;
            let mut brand_generic = 0u32;
            for (number, line) in (1u8..).zip(lines) {
                // An unused item id rolls the whole transaction back
                // (spec §2.4.2.3).
                let Some(item) = tx.get(t.item, &item_key(line.i_id))? else {
                    return tx.abort();
                };
                let item = Item::decode(item).ok_or(Abort::Conflict)?;
                let sk = stock_key(line.supply_w_id, line.i_id);
                let mut stock = read(tx, t.stock, &sk, Stock::decode)?;
                // Spec §2.4.2.2: restock by 91 when fewer than 10 would remain.
                let quantity = i16::from(line.quantity);
                stock.quantity = if stock.quantity >= quantity + 10 {
                    stock.quantity - quantity
                } else {
                    stock.quantity.wrapping_sub(quantity).wrapping_add(91)
                };
                stock.ytd = stock.ytd.wrapping_add(u32::from(line.quantity));
                stock.order_cnt = stock.order_cnt.wrapping_add(1);
                if line.supply_w_id != w {
                    stock.remote_cnt = stock.remote_cnt.wrapping_add(1);
                }
                if is_original(item.data) && is_original(stock.data) {
                    brand_generic += 1; // 'B', else 'G'
                }
                let dist_info = stock.dist_info(d).ok_or(Abort::Conflict)?;
                write(tx, t.stock, &sk, buf, |b| stock.encode(b))?;
                let amount = i64::from(line.quantity) * item.price;
                total += amount;
                let order_line = OrderLine {
                    i_id: line.i_id,
                    supply_w_id: line.supply_w_id,
                    delivery_d: 0,
                    quantity: line.quantity,
                    amount,
                    dist_info,
                };
                let lk = order_line_key(w, d, o, number);
                insert(tx, t.order_line, &lk, buf, |b| order_line.encode(b))?;
            }
            // total × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX), rates in 1/10000.
            let factor = i64::from(10_000 - customer.discount.min(10_000))
                * (10_000 + i64::from(warehouse.tax) + i64::from(district.tax));
            Ok(total.wrapping_mul(factor) / 100_000_000 + i64::from(brand_generic))
        });
        outcome(result)
    }

    /// Payment (spec §2.5).
    fn payment(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let w = self.home;
        let d: u8 = self.rng.gen_range(1..=DISTRICTS);
        // 85% pay through the home warehouse, 15% through a remote one
        // (spec §2.5.1.2).
        let (c_w, c_d) = if self.warehouses() > 1 && self.rng.gen_range(0..100) < 15 {
            let c_w = self.remote_warehouse();
            (c_w, self.rng.gen_range(1..=DISTRICTS))
        } else {
            (w, d)
        };
        let by = self.pick_customer();
        let amount: i64 = self.rng.gen_range(100..=500_000);
        let now = now_ms();
        let hk = history_key(self.origin, self.history_seq);
        self.history_seq += 1;
        let (t, buf, data, ids) = (self.tables, &mut self.buf, &mut self.data, &mut self.ids);
        let result = worker.run(|tx| {
            let wk = warehouse_key(w);
            let mut warehouse = read(tx, t.warehouse, &wk, Warehouse::decode)?;
            warehouse.ytd = warehouse.ytd.wrapping_add(amount);
            write(tx, t.warehouse, &wk, buf, |b| warehouse.encode(b))?;
            let dk = district_key(w, d);
            let mut district = read(tx, t.district, &dk, District::decode)?;
            district.ytd = district.ytd.wrapping_add(amount);
            write(tx, t.district, &dk, buf, |b| district.encode(b))?;

            let c = select_customer(tx, t, c_w, c_d, by, ids)?;
            let ck = customer_key(c_w, c_d, c);
            let mut customer = read(tx, t.customer, &ck, Customer::decode)?;
            customer.balance = customer.balance.wrapping_sub(amount);
            customer.ytd_payment = customer.ytd_payment.wrapping_add(amount);
            customer.payment_cnt = customer.payment_cnt.wrapping_add(1);
            if customer.credit == *b"BC" {
                // Bad credit: prepend the payment to C_DATA, keeping 500
                // characters (spec §2.5.2.2).
                data.clear();
                let _ = write!(
                    data,
                    "{c} {c_d} {c_w} {d} {w} {}.{:02} ",
                    amount / 100,
                    amount % 100
                );
                let keep = C_DATA_MAX
                    .saturating_sub(data.len())
                    .min(customer.data.len());
                data.extend_from_slice(&customer.data[..keep]);
                let customer = Customer {
                    data: data.as_slice(),
                    ..customer
                };
                write(tx, t.customer, &ck, buf, |b| customer.encode(b))?;
            } else {
                write(tx, t.customer, &ck, buf, |b| customer.encode(b))?;
            }

            // H_DATA: W_NAME, four spaces, D_NAME (spec §2.5.2.2).
            let mut h_data = [b' '; 24];
            let w_name = &warehouse.name[..warehouse.name.len().min(10)];
            let d_name = &district.name[..district.name.len().min(10)];
            h_data[..w_name.len()].copy_from_slice(w_name);
            let at = w_name.len() + 4;
            h_data[at..at + d_name.len()].copy_from_slice(d_name);
            let history = History {
                c_id: c,
                c_d_id: c_d,
                c_w_id: c_w,
                d_id: d,
                w_id: w,
                date: now,
                amount,
                data: &h_data[..at + d_name.len()],
            };
            buf.clear();
            history.encode(buf);
            // The key is this client's own and unique: a blind write.
            tx.put(t.history, &hk, buf)?;
            Ok(customer.balance)
        });
        outcome(result)
    }

    /// Order-Status (spec §2.6): read-only.
    fn order_status(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let w = self.home;
        let d: u8 = self.rng.gen_range(1..=DISTRICTS);
        let by = self.pick_customer();
        let (t, ids) = (self.tables, &mut self.ids);
        let result = worker.run(|tx| {
            let c = select_customer(tx, t, w, d, by, ids)?;
            let customer = read(tx, t.customer, &customer_key(w, d, c), Customer::decode)?;
            let mut checksum = customer.balance
                + customer.first.len() as i64
                + i64::from(customer.middle[0])
                + customer.last.len() as i64;
            // The customer's newest order is the first index entry of its
            // range (the index stores u32::MAX − O_ID; spec §2.6.2.2).
            let lo = order_customer_key(w, d, c, u32::MAX);
            let hi = order_customer_key(w, d, c, 0);
            let mut newest = None;
            tx.scan(
                t.order_customer,
                Included(&lo[..]),
                Included(&hi[..]),
                1,
                |key, _| {
                    newest = order_customer_key_ids(key).map(|(_, o)| o);
                    false
                },
            )?;
            // Every customer has an order from the load (§4.3.3.1).
            let o = newest.ok_or(Abort::Conflict)?;
            let order = read(tx, t.oorder, &order_key(w, d, o), Order::decode)?;
            checksum += order.entry_d as i64 + i64::from(order.carrier_id);
            for number in 1..=order.ol_cnt {
                let lk = order_line_key(w, d, o, number);
                let line = read(tx, t.order_line, &lk, OrderLine::decode)?;
                checksum += i64::from(line.i_id)
                    + i64::from(line.supply_w_id)
                    + i64::from(line.quantity)
                    + line.amount
                    + line.delivery_d as i64;
            }
            Ok(checksum)
        });
        outcome(result)
    }

    /// Delivery (spec §2.7), all ten districts in one transaction.
    fn delivery(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let w = self.home;
        let carrier: u8 = self.rng.gen_range(1..=10);
        let now = now_ms();
        let (t, buf, from) = (self.tables, &mut self.buf, self.delivery_from);
        let result = worker.run(|tx| {
            // The order delivered per district (0: none), for the hints.
            let mut delivered = [0u32; DISTRICTS as usize];
            for d in 1..=DISTRICTS {
                // The oldest undelivered order (spec §2.7.4.2).
                let lo = order_key(w, d, from[usize::from(d - 1)]);
                let hi = order_key(w, d, u32::MAX);
                let mut oldest = None;
                tx.scan(
                    t.new_order,
                    Included(&lo[..]),
                    Included(&hi[..]),
                    1,
                    |key, _| {
                        oldest = order_key_o_id(key);
                        false
                    },
                )?;
                // None left: this district's delivery is skipped.
                let Some(o) = oldest else { continue };
                let ok = order_key(w, d, o);
                if !tx.delete(t.new_order, &ok)? {
                    return Err(Abort::Conflict);
                }
                let mut order = read(tx, t.oorder, &ok, Order::decode)?;
                order.carrier_id = carrier;
                write(tx, t.oorder, &ok, buf, |b| order.encode(b))?;
                let mut sum = 0i64;
                for number in 1..=order.ol_cnt {
                    let lk = order_line_key(w, d, o, number);
                    let mut line = read(tx, t.order_line, &lk, OrderLine::decode)?;
                    line.delivery_d = now;
                    sum = sum.wrapping_add(line.amount);
                    write(tx, t.order_line, &lk, buf, |b| line.encode(b))?;
                }
                let ck = customer_key(w, d, order.c_id);
                let mut customer = read(tx, t.customer, &ck, Customer::decode)?;
                customer.balance = customer.balance.wrapping_add(sum);
                customer.delivery_cnt = customer.delivery_cnt.wrapping_add(1);
                write(tx, t.customer, &ck, buf, |b| customer.encode(b))?;
                delivered[usize::from(d - 1)] = o;
            }
            Ok(delivered)
        });
        // Only a committed Delivery moves the hints (see `delivery_from`).
        if let Ok((delivered, _)) = &result {
            for (hint, &o) in self.delivery_from.iter_mut().zip(delivered) {
                if o != 0 {
                    *hint = o + 1;
                }
            }
        }
        outcome(result)
    }

    /// Stock-Level (spec §2.8): read-only.
    fn stock_level(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let (w, d) = (self.home, self.stock_level_d);
        let threshold: i16 = self.rng.gen_range(10..=20);
        let (t, ids) = (self.tables, &mut self.ids);
        let result = worker.run(|tx| {
            let district = read(tx, t.district, &district_key(w, d), District::decode)?;
            // The lines of the district's last 20 orders.
            let next = district.next_o_id;
            let lo = order_line_key(w, d, next.saturating_sub(20), 0);
            let hi = order_line_key(w, d, next, 0);
            ids.clear();
            let mut malformed = false;
            tx.scan(
                t.order_line,
                Included(&lo[..]),
                Excluded(&hi[..]),
                usize::MAX,
                |_, value| {
                    match OrderLine::decode_i_id(value) {
                        Some(i) => ids.push(i),
                        None => malformed = true,
                    }
                    !malformed
                },
            )?;
            if malformed {
                return Err(Abort::Conflict);
            }
            ids.sort_unstable();
            ids.dedup();
            let mut low = 0u32;
            // Up to 300 stock rows: prefetch a batch, then read it.
            for batch in ids.chunks(STOCK_LEVEL_BATCH) {
                for &i in batch {
                    tx.prefetch_index(t.stock, &stock_key(w, i));
                }
                for &i in batch {
                    tx.prefetch(t.stock, &stock_key(w, i));
                }
                for &i in batch {
                    // S_QUANTITY leads the row: copy only its bytes.
                    let quantity = tx
                        .get_prefix(t.stock, &stock_key(w, i), Stock::QUANTITY_BYTES)?
                        .and_then(Stock::decode_quantity)
                        .ok_or(Abort::Conflict)?;
                    if quantity < threshold {
                        low += 1;
                    }
                }
            }
            Ok(low)
        });
        outcome(result)
    }
}

impl Client for TpccClient {
    fn step(&mut self, worker: &mut Worker) -> Result<Outcome, TxError> {
        let [new_order, payment, order_status, delivery, _] = self.shared.config.mix;
        let mut roll = self.rng.gen_range(0..100u8);
        if roll < new_order {
            return self.new_order(worker);
        }
        roll -= new_order;
        if roll < payment {
            return self.payment(worker);
        }
        roll -= payment;
        if roll < order_status {
            return self.order_status(worker);
        }
        roll -= order_status;
        if roll < delivery {
            return self.delivery(worker);
        }
        self.stock_level(worker)
    }
}

/// A transaction's result as a client outcome: a rollback the workload
/// asked for is an outcome, not an error.
fn outcome<R>(result: Result<(R, Ticket), TxError>) -> Result<Outcome, TxError> {
    match result {
        Ok((_, ticket)) => Ok(Outcome::Committed(ticket)),
        Err(TxError::UserAbort) => Ok(Outcome::RolledBack),
        Err(error) => Err(error),
    }
}

/// Reads and decodes a row that must exist.
#[inline]
fn read<'t, T>(
    tx: &mut Transaction<'t>,
    table: epochdb_engine::TableId,
    key: &[u8],
    decode: impl FnOnce(&'t [u8]) -> Option<T>,
) -> Result<T, Abort> {
    tx.get(table, key)?.and_then(decode).ok_or(Abort::Conflict)
}

/// Encodes a row into `buf` and writes it.
#[inline]
fn write(
    tx: &mut Transaction<'_>,
    table: epochdb_engine::TableId,
    key: &[u8],
    buf: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>),
) -> Result<(), Abort> {
    buf.clear();
    encode(buf);
    tx.put(table, key, buf)
}

/// Encodes a row into `buf` and inserts it; the key must be new.
#[inline]
fn insert(
    tx: &mut Transaction<'_>,
    table: epochdb_engine::TableId,
    key: &[u8],
    buf: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>),
) -> Result<(), Abort> {
    buf.clear();
    encode(buf);
    // A taken key means we read a stale D_NEXT_O_ID: validation would fail.
    if tx.insert(table, key, buf)? {
        Ok(())
    } else {
        Err(Abort::Conflict)
    }
}

/// The customer a Payment or Order-Status names: by id, or the middle one
/// (position ⌈n/2⌉ by C_FIRST) of those with the last name, found through
/// the customer-by-name index (spec §2.5.2.2, §2.6.2.2).
fn select_customer(
    tx: &mut Transaction<'_>,
    t: Tables,
    w: u16,
    d: u8,
    by: CustomerBy,
    ids: &mut Vec<u32>,
) -> Result<u32, Abort> {
    let (name, len) = match by {
        CustomerBy::Id(c) => return Ok(c),
        CustomerBy::LastName(name, len) => (name, len),
    };
    let (lo, hi) = customer_name_range(w, d, &name[..len]);
    ids.clear();
    let mut malformed = false;
    tx.scan(
        t.customer_name,
        Included(&lo[..]),
        Included(&hi[..]),
        usize::MAX,
        |key, _| {
            match customer_name_key_c_id(key) {
                Some(c) => ids.push(c),
                None => malformed = true,
            }
            !malformed
        },
    )?;
    if malformed || ids.is_empty() {
        // Every last name we draw was loaded (§4.3.3.1).
        return Err(Abort::Conflict);
    }
    Ok(ids[(ids.len() - 1) / 2])
}
