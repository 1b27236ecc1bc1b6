//! TPC-C's consistency conditions 1–4 (spec §3.3.2.1–§3.3.2.4), and the
//! agreement of the two secondary indexes with their tables. Run it on a
//! quiescent database: each warehouse and each district is checked in its
//! own (read-only) transaction.

use std::ops::Bound::Included;

use epochdb_engine::{Database, TableId, Transaction, Worker};

use super::rows::{Customer, District, Order, Warehouse};
use super::schema::{
    customer_key, customer_name_key, district_key, order_customer_key, order_customer_key_ids,
    order_key, order_key_o_id, order_line_key, warehouse_key, Tables, CUSTOMER_NAME_KEY_LEN,
    DISTRICTS,
};

/// Checks TPC-C consistency conditions 1–4 (spec §3.3.2.1–§3.3.2.4) for
/// warehouses `1..=warehouses` of a loaded database, and that the
/// customer-by-last-name and order-by-customer indexes hold exactly one
/// entry per customer and per order. Returns a description of the first
/// violation found. Run it while no transactions are running.
pub fn check_consistency(db: &Database, warehouses: u32) -> Result<(), String> {
    let t = Tables::find(db).ok_or("the TPC-C tables do not exist")?;
    let mut worker = db.worker().map_err(|e| format!("no worker: {e}"))?;
    let warehouses =
        u16::try_from(warehouses).map_err(|_| format!("{warehouses} warehouses is too many"))?;
    for w in 1..=warehouses {
        check_warehouse(&mut worker, t, w)?;
        for d in 1..=DISTRICTS {
            check_district(&mut worker, t, w, d)?;
        }
    }
    Ok(())
}

/// Runs a read-only check as one transaction.
fn in_tx<R>(
    worker: &mut Worker,
    mut body: impl FnMut(&mut Transaction<'_>) -> Result<Result<R, String>, epochdb_engine::Abort>,
) -> Result<R, String> {
    match worker.run(|tx| body(tx)) {
        Ok((result, _)) => result,
        Err(e) => Err(format!("check transaction failed: {e}")),
    }
}

fn scan_all(
    tx: &mut Transaction<'_>,
    table: TableId,
    lo: &[u8],
    hi: &[u8],
    mut visit: impl FnMut(&[u8], &[u8]),
) -> Result<(), epochdb_engine::Abort> {
    tx.scan(
        table,
        Included(lo),
        Included(hi),
        usize::MAX,
        |key, value| {
            visit(key, value);
            true
        },
    )
}

/// Condition 1: W_YTD = sum(D_YTD).
fn check_warehouse(worker: &mut Worker, t: Tables, w: u16) -> Result<(), String> {
    in_tx(worker, |tx| {
        let Some(warehouse) = tx
            .get(t.warehouse, &warehouse_key(w))?
            .and_then(Warehouse::decode)
        else {
            return Ok(Err(format!("warehouse {w} is missing or malformed")));
        };
        let mut sum = 0i64;
        for d in 1..=DISTRICTS {
            let Some(district) = tx
                .get(t.district, &district_key(w, d))?
                .and_then(District::decode)
            else {
                return Ok(Err(format!("district ({w}, {d}) is missing or malformed")));
            };
            sum += district.ytd;
        }
        Ok(if warehouse.ytd == sum {
            Ok(())
        } else {
            Err(format!(
                "condition 1: warehouse {w}: W_YTD {} != sum(D_YTD) {sum}",
                warehouse.ytd
            ))
        })
    })
}

/// What one district holds, gathered in one transaction.
#[derive(Default)]
struct DistrictScan {
    next_o_id: u32,
    orders: u64,
    max_o_id: Option<u32>,
    sum_ol_cnt: u64,
    order_lines: u64,
    new_orders: u64,
    min_no_o_id: Option<u32>,
    max_no_o_id: Option<u32>,
    malformed: Option<String>,
    /// `(c_id, o_id)` of every order, and of every order-by-customer entry.
    order_owners: Vec<(u32, u32)>,
    order_index: Vec<(u32, u32)>,
    /// Expected and actual customer-by-name keys.
    name_keys: Vec<[u8; CUSTOMER_NAME_KEY_LEN]>,
    name_index: Vec<Vec<u8>>,
}

/// Conditions 2–4 and the indexes, for district `(w, d)`.
fn check_district(worker: &mut Worker, t: Tables, w: u16, d: u8) -> Result<(), String> {
    let s = in_tx(worker, |tx| {
        let mut s = DistrictScan::default();
        let Some(district) = tx
            .get(t.district, &district_key(w, d))?
            .and_then(District::decode)
        else {
            return Ok(Err(format!("district ({w}, {d}) is missing or malformed")));
        };
        s.next_o_id = district.next_o_id;
        let (lo, hi) = (order_key(w, d, 0), order_key(w, d, u32::MAX));
        scan_all(tx, t.oorder, &lo, &hi, |key, value| {
            match (order_key_o_id(key), Order::decode(value)) {
                (Some(o), Some(order)) => {
                    s.orders += 1;
                    s.max_o_id = s.max_o_id.max(Some(o));
                    s.sum_ol_cnt += u64::from(order.ol_cnt);
                    s.order_owners.push((order.c_id, o));
                }
                _ => s.malformed = Some(format!("malformed order {key:?}")),
            }
        })?;
        scan_all(tx, t.new_order, &lo, &hi, |key, _| {
            match order_key_o_id(key) {
                Some(o) => {
                    s.new_orders += 1;
                    s.min_no_o_id = Some(s.min_no_o_id.map_or(o, |m| m.min(o)));
                    s.max_no_o_id = s.max_no_o_id.max(Some(o));
                }
                None => s.malformed = Some(format!("malformed new-order key {key:?}")),
            }
        })?;
        let (lo, hi) = (
            order_line_key(w, d, 0, 0),
            order_line_key(w, d, u32::MAX, u8::MAX),
        );
        scan_all(tx, t.order_line, &lo, &hi, |_, _| s.order_lines += 1)?;
        let lo = order_customer_key(w, d, 0, u32::MAX);
        let hi = order_customer_key(w, d, u32::MAX, 0);
        scan_all(
            tx,
            t.order_customer,
            &lo,
            &hi,
            |key, _| match order_customer_key_ids(key) {
                Some(ids) => s.order_index.push(ids),
                None => s.malformed = Some(format!("malformed order index key {key:?}")),
            },
        )?;
        let (lo, hi) = (customer_key(w, d, 0), customer_key(w, d, u32::MAX));
        scan_all(tx, t.customer, &lo, &hi, |key, value| {
            let c = key
                .get(3..7)
                .and_then(|c| c.try_into().ok())
                .map(u32::from_be_bytes);
            match (c, Customer::decode(value)) {
                (Some(c), Some(customer)) => {
                    s.name_keys
                        .push(customer_name_key(w, d, customer.last, customer.first, c))
                }
                _ => s.malformed = Some(format!("malformed customer {key:?}")),
            }
        })?;
        let lo = customer_name_key(w, d, b"", b"", 0);
        let hi = customer_name_key(w, d, &[0xff; 16], &[0xff; 16], u32::MAX);
        scan_all(tx, t.customer_name, &lo, &hi, |key, _| {
            s.name_index.push(key.to_vec())
        })?;
        Ok(Ok(s))
    })?;
    let at = format!("district ({w}, {d})");
    if let Some(why) = s.malformed {
        return Err(format!("{at}: {why}"));
    }
    // Condition 2: D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID); NEW-ORDER
    // may be empty once every order is delivered.
    let last = s.next_o_id.checked_sub(1);
    if s.max_o_id != last || (s.new_orders > 0 && s.max_no_o_id != last) {
        return Err(format!(
            "condition 2: {at}: D_NEXT_O_ID − 1 = {last:?}, max(O_ID) = {:?}, max(NO_O_ID) = {:?}",
            s.max_o_id, s.max_no_o_id
        ));
    }
    // Condition 3: max(NO_O_ID) − min(NO_O_ID) + 1 = rows in NEW-ORDER.
    if let (Some(min), Some(max)) = (s.min_no_o_id, s.max_no_o_id) {
        let span = u64::from(max - min) + 1;
        if span != s.new_orders {
            return Err(format!(
                "condition 3: {at}: NO_O_ID spans {min}..={max} ({span}) but NEW-ORDER holds {} rows",
                s.new_orders
            ));
        }
    }
    // Condition 4: sum(O_OL_CNT) = rows in ORDER-LINE.
    if s.sum_ol_cnt != s.order_lines {
        return Err(format!(
            "condition 4: {at}: sum(O_OL_CNT) = {} but ORDER-LINE holds {} rows",
            s.sum_ol_cnt, s.order_lines
        ));
    }
    let (mut owners, mut index) = (s.order_owners, s.order_index);
    owners.sort_unstable();
    index.sort_unstable();
    if owners != index {
        return Err(format!(
            "order-by-customer index: {at}: {} orders but {} index entries, or entries that differ",
            owners.len(),
            index.len()
        ));
    }
    let mut expected = s.name_keys;
    expected.sort_unstable();
    let matches = expected.len() == s.name_index.len()
        && expected
            .iter()
            .zip(&s.name_index)
            .all(|(e, a)| e[..] == a[..]);
    if !matches {
        return Err(format!(
            "customer-by-name index: {at}: {} customers but {} index entries, or entries that differ",
            expected.len(),
            s.name_index.len()
        ));
    }
    Ok(())
}
