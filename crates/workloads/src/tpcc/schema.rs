//! TPC-C's tables (spec §1.3) and their keys. Keys are big-endian so that
//! byte order is numeric order: a district's orders, a customer's orders and
//! an order's lines are contiguous ranges.

use epochdb_engine::{Database, DurabilityError, TableId};

use super::random::LAST_NAME_MAX;

/// Districts per warehouse (spec §1.2).
pub(crate) const DISTRICTS: u8 = 10;

/// Table names, in creation order.
pub(crate) const TABLE_NAMES: [&str; 11] = [
    "warehouse",
    "district",
    "customer",
    "customer_name",
    "history",
    "new_order",
    "oorder",
    "order_customer",
    "order_line",
    "item",
    "stock",
];

/// The ids of TPC-C's nine tables and its two secondary indexes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tables {
    pub(crate) warehouse: TableId,
    pub(crate) district: TableId,
    pub(crate) customer: TableId,
    /// CUSTOMER by (w, d, c_last, c_first, c_id); empty values.
    pub(crate) customer_name: TableId,
    pub(crate) history: TableId,
    pub(crate) new_order: TableId,
    pub(crate) oorder: TableId,
    /// ORDER by (w, d, c_id, newest first); empty values.
    pub(crate) order_customer: TableId,
    pub(crate) order_line: TableId,
    pub(crate) item: TableId,
    pub(crate) stock: TableId,
}

impl Tables {
    /// Creates the tables (or finds them if they exist).
    pub(crate) fn create(db: &Database) -> Result<Self, DurabilityError> {
        let mut failure = None;
        let tables = Self::from_fn(|name| match db.create_table(name) {
            Ok(id) => Some(id),
            Err(error) => {
                failure.get_or_insert(error);
                None
            }
        });
        match (tables, failure) {
            (Some(tables), None) => Ok(tables),
            (_, Some(error)) => Err(error),
            (None, None) => unreachable!("every table was created"),
        }
    }

    /// Finds the tables of a loaded database.
    pub(crate) fn find(db: &Database) -> Option<Self> {
        Self::from_fn(|name| db.table(name))
    }

    fn from_fn(mut id: impl FnMut(&str) -> Option<TableId>) -> Option<Self> {
        let [warehouse, district, customer, customer_name, history, new_order, oorder, order_customer, order_line, item, stock] =
            TABLE_NAMES;
        Some(Self {
            warehouse: id(warehouse)?,
            district: id(district)?,
            customer: id(customer)?,
            customer_name: id(customer_name)?,
            history: id(history)?,
            new_order: id(new_order)?,
            oorder: id(oorder)?,
            order_customer: id(order_customer)?,
            order_line: id(order_line)?,
            item: id(item)?,
            stock: id(stock)?,
        })
    }
}

/// WAREHOUSE: (w).
#[inline]
pub(crate) fn warehouse_key(w: u16) -> [u8; 2] {
    w.to_be_bytes()
}

/// DISTRICT: (w, d).
#[inline]
pub(crate) fn district_key(w: u16, d: u8) -> [u8; 3] {
    let w = w.to_be_bytes();
    [w[0], w[1], d]
}

/// Writes `w, d` then `tail` into `out`'s prefix; returns `out`.
#[inline]
fn wd_key<const N: usize>(w: u16, d: u8, tail: &[&[u8]]) -> [u8; N] {
    let mut out = [0u8; N];
    out[..2].copy_from_slice(&w.to_be_bytes());
    out[2] = d;
    let mut at = 3;
    for part in tail {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    debug_assert_eq!(at, N);
    out
}

/// CUSTOMER: (w, d, c).
#[inline]
pub(crate) fn customer_key(w: u16, d: u8, c: u32) -> [u8; 7] {
    wd_key(w, d, &[&c.to_be_bytes()])
}

/// Width of a name field in the customer-by-name index: zero-padded, so
/// that byte order is name order.
const NAME_WIDTH: usize = 16;
const _: () = assert!(LAST_NAME_MAX <= NAME_WIDTH);

/// Length of a customer-by-name key.
pub(crate) const CUSTOMER_NAME_KEY_LEN: usize = 3 + 2 * NAME_WIDTH + 4;

fn padded(name: &[u8]) -> [u8; NAME_WIDTH] {
    let mut out = [0u8; NAME_WIDTH];
    let len = name.len().min(NAME_WIDTH);
    out[..len].copy_from_slice(&name[..len]);
    out
}

/// Customer-by-name index: (w, d, c_last, c_first, c). Names are at most
/// 16 bytes (spec §1.3: C_LAST varchar(16), C_FIRST varchar(16)).
#[inline]
pub(crate) fn customer_name_key(
    w: u16,
    d: u8,
    last: &[u8],
    first: &[u8],
    c: u32,
) -> [u8; CUSTOMER_NAME_KEY_LEN] {
    wd_key(w, d, &[&padded(last), &padded(first), &c.to_be_bytes()])
}

/// The inclusive range of customer-by-name keys with last name `last`.
#[inline]
pub(crate) fn customer_name_range(
    w: u16,
    d: u8,
    last: &[u8],
) -> ([u8; CUSTOMER_NAME_KEY_LEN], [u8; CUSTOMER_NAME_KEY_LEN]) {
    let last = padded(last);
    let lo = wd_key(w, d, &[&last, &[0; NAME_WIDTH], &[0; 4]]);
    let hi = wd_key(w, d, &[&last, &[0xff; NAME_WIDTH], &[0xff; 4]]);
    (lo, hi)
}

/// The customer id at the end of a customer-by-name key.
#[inline]
pub(crate) fn customer_name_key_c_id(key: &[u8]) -> Option<u32> {
    let tail = key.get(CUSTOMER_NAME_KEY_LEN - 4..CUSTOMER_NAME_KEY_LEN)?;
    Some(u32::from_be_bytes(tail.try_into().ok()?))
}

/// ORDER and NEW-ORDER: (w, d, o).
#[inline]
pub(crate) fn order_key(w: u16, d: u8, o: u32) -> [u8; 7] {
    wd_key(w, d, &[&o.to_be_bytes()])
}

/// The order id of an ORDER, NEW-ORDER or ORDER-LINE key.
#[inline]
pub(crate) fn order_key_o_id(key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(key.get(3..7)?.try_into().ok()?))
}

/// ORDER-LINE: (w, d, o, ol_number).
#[inline]
pub(crate) fn order_line_key(w: u16, d: u8, o: u32, number: u8) -> [u8; 8] {
    wd_key(w, d, &[&o.to_be_bytes(), &[number]])
}

/// Order-by-customer index: (w, d, c, u32::MAX − o), so a customer's newest
/// order sorts first and a forward scan with limit 1 finds it (spec
/// §2.6.2.2 wants the order with the largest O_ID).
#[inline]
pub(crate) fn order_customer_key(w: u16, d: u8, c: u32, o: u32) -> [u8; 11] {
    wd_key(w, d, &[&c.to_be_bytes(), &(u32::MAX - o).to_be_bytes()])
}

/// The `(c, o)` of an order-by-customer key.
#[inline]
pub(crate) fn order_customer_key_ids(key: &[u8]) -> Option<(u32, u32)> {
    let c = u32::from_be_bytes(key.get(3..7)?.try_into().ok()?);
    let o = u32::MAX - u32::from_be_bytes(key.get(7..11)?.try_into().ok()?);
    Some((c, o))
}

/// ITEM: (i).
#[inline]
pub(crate) fn item_key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

/// STOCK: (w, i).
#[inline]
pub(crate) fn stock_key(w: u16, i: u32) -> [u8; 6] {
    let w = w.to_be_bytes();
    let i = i.to_be_bytes();
    [w[0], w[1], i[0], i[1], i[2], i[3]]
}

/// HISTORY has no primary key (spec §1.3); rows are keyed by who wrote them
/// (0 for the loader, a distinct number per client) and a sequence number,
/// so inserts never collide and each client appends in its own key range.
#[inline]
pub(crate) fn history_key(origin: u32, sequence: u64) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..4].copy_from_slice(&origin.to_be_bytes());
    out[4..].copy_from_slice(&sequence.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_is_numeric_order() {
        assert!(order_key(1, 2, 255) < order_key(1, 2, 256));
        assert!(order_key(1, 9, u32::MAX) < order_key(1, 10, 0));
        assert!(order_line_key(1, 1, 7, 15) < order_line_key(1, 1, 8, 1));
        assert!(stock_key(1, 100_000) < stock_key(2, 1));
    }

    #[test]
    fn newest_order_of_a_customer_sorts_first() {
        assert!(order_customer_key(1, 1, 5, 3001) < order_customer_key(1, 1, 5, 3000));
        assert!(order_customer_key(1, 1, 5, 1) < order_customer_key(1, 1, 6, 9999));
        assert_eq!(
            order_customer_key_ids(&order_customer_key(3, 4, 5, 6)),
            Some((5, 6))
        );
    }

    #[test]
    fn name_range_covers_exactly_one_last_name() {
        let (lo, hi) = customer_name_range(1, 1, b"BARBAR");
        let inside = customer_name_key(1, 1, b"BARBAR", b"zzzz", u32::MAX);
        let longer = customer_name_key(1, 1, b"BARBARA", b"A", 1);
        assert!(lo <= inside && inside <= hi);
        assert!(longer > hi);
        assert_eq!(customer_name_key_c_id(&inside), Some(u32::MAX));
    }
}
