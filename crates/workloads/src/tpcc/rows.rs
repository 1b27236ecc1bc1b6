//! Compact binary rows for TPC-C's tables (spec §1.3). Numbers are
//! fixed-width little-endian and come first; strings follow, each prefixed
//! by its length. Money is in cents (`i64`); rates (W_TAX, D_TAX,
//! C_DISCOUNT) are in units of 1/10000 (`u16`); dates are milliseconds since
//! the Unix epoch, 0 meaning null. Decoding borrows the strings from the
//! value and returns `None` on a malformed value, which a transaction body
//! treats as an inconsistent read (a conflict), never a panic.

/// Appends fields to a row buffer.
pub(crate) struct Writer<'a>(pub(crate) &'a mut Vec<u8>);

impl Writer<'_> {
    #[inline]
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    #[inline]
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    #[inline]
    fn fixed(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    /// A string of at most 255 bytes.
    #[inline]
    fn str(&mut self, v: &[u8]) -> &mut Self {
        let len = u8::try_from(v.len()).expect("short string over 255 bytes");
        self.0.push(len);
        self.0.extend_from_slice(v);
        self
    }
    /// A string of at most 65535 bytes (C_DATA).
    #[inline]
    fn long_str(&mut self, v: &[u8]) -> &mut Self {
        let len = u16::try_from(v.len()).expect("long string over 65535 bytes");
        self.0.extend_from_slice(&len.to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }
}

/// Reads fields from a row.
pub(crate) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    #[inline]
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    #[inline]
    fn u8(&mut self) -> Option<u8> {
        Some(self.array::<1>()?[0])
    }
    #[inline]
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.array()?))
    }
    #[inline]
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_le_bytes(self.array()?))
    }
    #[inline]
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.array()?))
    }
    #[inline]
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.array()?))
    }
    #[inline]
    fn str(&mut self) -> Option<&'a [u8]> {
        let len = self.u8()?;
        self.take(usize::from(len))
    }
    #[inline]
    fn long_str(&mut self) -> Option<&'a [u8]> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }
    /// Succeeds only if the whole value was consumed.
    #[inline]
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

/// Street, city, state and zip, shared by WAREHOUSE, DISTRICT and CUSTOMER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Address<'a> {
    pub(crate) street_1: &'a [u8],
    pub(crate) street_2: &'a [u8],
    pub(crate) city: &'a [u8],
    pub(crate) state: &'a [u8],
    pub(crate) zip: &'a [u8],
}

impl<'a> Address<'a> {
    fn write(&self, w: &mut Writer<'_>) {
        w.str(self.street_1)
            .str(self.street_2)
            .str(self.city)
            .str(self.state)
            .str(self.zip);
    }
    fn read(r: &mut Reader<'a>) -> Option<Self> {
        Some(Self {
            street_1: r.str()?,
            street_2: r.str()?,
            city: r.str()?,
            state: r.str()?,
            zip: r.str()?,
        })
    }
}

/// A WAREHOUSE row (without W_ID, which is its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Warehouse<'a> {
    pub(crate) ytd: i64,
    pub(crate) tax: u16,
    pub(crate) name: &'a [u8],
    pub(crate) address: Address<'a>,
}

impl<'a> Warehouse<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        w.i64(self.ytd).u16(self.tax).str(self.name);
        self.address.write(&mut w);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            ytd: r.i64()?,
            tax: r.u16()?,
            name: r.str()?,
            address: Address::read(&mut r)?,
        };
        r.end().map(|()| row)
    }
}

/// A DISTRICT row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct District<'a> {
    pub(crate) ytd: i64,
    pub(crate) tax: u16,
    pub(crate) next_o_id: u32,
    pub(crate) name: &'a [u8],
    pub(crate) address: Address<'a>,
}

impl<'a> District<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        w.i64(self.ytd)
            .u16(self.tax)
            .u32(self.next_o_id)
            .str(self.name);
        self.address.write(&mut w);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            ytd: r.i64()?,
            tax: r.u16()?,
            next_o_id: r.u32()?,
            name: r.str()?,
            address: Address::read(&mut r)?,
        };
        r.end().map(|()| row)
    }
}

/// A CUSTOMER row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Customer<'a> {
    pub(crate) balance: i64,
    pub(crate) ytd_payment: i64,
    pub(crate) payment_cnt: u32,
    pub(crate) delivery_cnt: u32,
    pub(crate) credit_lim: i64,
    pub(crate) discount: u16,
    /// "GC" or "BC".
    pub(crate) credit: [u8; 2],
    pub(crate) since: u64,
    pub(crate) first: &'a [u8],
    pub(crate) middle: [u8; 2],
    pub(crate) last: &'a [u8],
    pub(crate) address: Address<'a>,
    pub(crate) phone: &'a [u8],
    pub(crate) data: &'a [u8],
}

impl<'a> Customer<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        w.i64(self.balance)
            .i64(self.ytd_payment)
            .u32(self.payment_cnt)
            .u32(self.delivery_cnt)
            .i64(self.credit_lim)
            .u16(self.discount)
            .fixed(&self.credit)
            .u64(self.since)
            .str(self.first)
            .fixed(&self.middle)
            .str(self.last);
        self.address.write(&mut w);
        w.str(self.phone).long_str(self.data);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            balance: r.i64()?,
            ytd_payment: r.i64()?,
            payment_cnt: r.u32()?,
            delivery_cnt: r.u32()?,
            credit_lim: r.i64()?,
            discount: r.u16()?,
            credit: r.array()?,
            since: r.u64()?,
            first: r.str()?,
            middle: r.array()?,
            last: r.str()?,
            address: Address::read(&mut r)?,
            phone: r.str()?,
            data: r.long_str()?,
        };
        r.end().map(|()| row)
    }
}

/// A HISTORY row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct History<'a> {
    pub(crate) c_id: u32,
    pub(crate) c_d_id: u8,
    pub(crate) c_w_id: u16,
    pub(crate) d_id: u8,
    pub(crate) w_id: u16,
    pub(crate) date: u64,
    pub(crate) amount: i64,
    pub(crate) data: &'a [u8],
}

impl<'a> History<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        Writer(out)
            .u32(self.c_id)
            .u8(self.c_d_id)
            .u16(self.c_w_id)
            .u8(self.d_id)
            .u16(self.w_id)
            .u64(self.date)
            .i64(self.amount)
            .str(self.data);
    }
    #[cfg(test)]
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            c_id: r.u32()?,
            c_d_id: r.u8()?,
            c_w_id: r.u16()?,
            d_id: r.u8()?,
            w_id: r.u16()?,
            date: r.u64()?,
            amount: r.i64()?,
            data: r.str()?,
        };
        r.end().map(|()| row)
    }
}

/// An ORDER row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Order {
    pub(crate) c_id: u32,
    pub(crate) entry_d: u64,
    /// 0 is null (not delivered yet).
    pub(crate) carrier_id: u8,
    pub(crate) ol_cnt: u8,
    pub(crate) all_local: bool,
}

impl Order {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        Writer(out)
            .u32(self.c_id)
            .u64(self.entry_d)
            .u8(self.carrier_id)
            .u8(self.ol_cnt)
            .u8(u8::from(self.all_local));
    }
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            c_id: r.u32()?,
            entry_d: r.u64()?,
            carrier_id: r.u8()?,
            ol_cnt: r.u8()?,
            all_local: r.u8()? != 0,
        };
        r.end().map(|()| row)
    }
}

/// Length of S_DIST_xx and OL_DIST_INFO.
pub(crate) const DIST_INFO_LEN: usize = 24;

/// An ORDER-LINE row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OrderLine<'a> {
    pub(crate) i_id: u32,
    pub(crate) supply_w_id: u16,
    /// 0 is null (not delivered yet).
    pub(crate) delivery_d: u64,
    pub(crate) quantity: u8,
    pub(crate) amount: i64,
    pub(crate) dist_info: &'a [u8],
}

impl<'a> OrderLine<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.dist_info.len(), DIST_INFO_LEN);
        Writer(out)
            .u32(self.i_id)
            .u16(self.supply_w_id)
            .u64(self.delivery_d)
            .u8(self.quantity)
            .i64(self.amount)
            .fixed(self.dist_info);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            i_id: r.u32()?,
            supply_w_id: r.u16()?,
            delivery_d: r.u64()?,
            quantity: r.u8()?,
            amount: r.i64()?,
            dist_info: r.take(DIST_INFO_LEN)?,
        };
        r.end().map(|()| row)
    }
    /// OL_I_ID alone (Stock-Level reads nothing else).
    #[inline]
    pub(crate) fn decode_i_id(bytes: &[u8]) -> Option<u32> {
        Reader(bytes).u32()
    }
}

/// An ITEM row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Item<'a> {
    pub(crate) im_id: u32,
    pub(crate) price: i64,
    pub(crate) name: &'a [u8],
    pub(crate) data: &'a [u8],
}

impl<'a> Item<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        Writer(out)
            .u32(self.im_id)
            .i64(self.price)
            .str(self.name)
            .str(self.data);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            im_id: r.u32()?,
            price: r.i64()?,
            name: r.str()?,
            data: r.str()?,
        };
        r.end().map(|()| row)
    }
}

/// A STOCK row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stock<'a> {
    pub(crate) quantity: i16,
    pub(crate) ytd: u32,
    pub(crate) order_cnt: u32,
    pub(crate) remote_cnt: u32,
    /// S_DIST_01 … S_DIST_10, 24 bytes each.
    pub(crate) dists: &'a [u8],
    pub(crate) data: &'a [u8],
}

/// Bytes of S_DIST_01 … S_DIST_10 together.
pub(crate) const STOCK_DISTS_LEN: usize = DIST_INFO_LEN * 10;

impl<'a> Stock<'a> {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.dists.len(), STOCK_DISTS_LEN);
        Writer(out)
            .i16(self.quantity)
            .u32(self.ytd)
            .u32(self.order_cnt)
            .u32(self.remote_cnt)
            .fixed(self.dists)
            .str(self.data);
    }
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader(bytes);
        let row = Self {
            quantity: r.i16()?,
            ytd: r.u32()?,
            order_cnt: r.u32()?,
            remote_cnt: r.u32()?,
            dists: r.take(STOCK_DISTS_LEN)?,
            data: r.str()?,
        };
        r.end().map(|()| row)
    }
    /// Bytes of S_QUANTITY, the row's first field.
    pub(crate) const QUANTITY_BYTES: usize = 2;

    /// S_QUANTITY alone, from the row or its first
    /// [`Stock::QUANTITY_BYTES`] (Stock-Level reads nothing else).
    #[inline]
    pub(crate) fn decode_quantity(bytes: &[u8]) -> Option<i16> {
        Reader(bytes).i16()
    }
    /// S_DIST_xx for district `d` (1..=10).
    #[inline]
    pub(crate) fn dist_info(&self, d: u8) -> Option<&'a [u8]> {
        let at = usize::from(d.checked_sub(1)?) * DIST_INFO_LEN;
        self.dists.get(at..at + DIST_INFO_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDRESS: Address<'static> = Address {
        street_1: b"street one",
        street_2: b"street two",
        city: b"city",
        state: b"ST",
        zip: b"123411111",
    };

    #[test]
    fn rows_round_trip() {
        let mut buf = Vec::new();
        let customer = Customer {
            balance: -1000,
            ytd_payment: 1000,
            payment_cnt: 1,
            delivery_cnt: 0,
            credit_lim: 5_000_000,
            discount: 4321,
            credit: *b"BC",
            since: 42,
            first: b"FIRSTNAME",
            middle: *b"OE",
            last: b"BARBARBAR",
            address: ADDRESS,
            phone: b"0123456789012345",
            data: &[b'x'; 500],
        };
        customer.encode(&mut buf);
        assert_eq!(Customer::decode(&buf), Some(customer));
        assert_eq!(Customer::decode(&buf[..buf.len() - 1]), None);

        buf.clear();
        let stock = Stock {
            quantity: -3,
            ytd: 7,
            order_cnt: 2,
            remote_cnt: 1,
            dists: &[b'd'; STOCK_DISTS_LEN],
            data: b"ORIGINAL data",
        };
        stock.encode(&mut buf);
        assert_eq!(Stock::decode(&buf), Some(stock));
        assert_eq!(Stock::decode_quantity(&buf), Some(-3));
        assert_eq!(
            Stock::decode_quantity(&buf[..Stock::QUANTITY_BYTES]),
            Some(-3)
        );
        assert_eq!(stock.dist_info(10).map(<[u8]>::len), Some(DIST_INFO_LEN));
        assert_eq!(stock.dist_info(11), None);

        buf.clear();
        let history = History {
            c_id: 1,
            c_d_id: 2,
            c_w_id: 3,
            d_id: 4,
            w_id: 5,
            date: 6,
            amount: 7,
            data: b"w    d",
        };
        history.encode(&mut buf);
        assert_eq!(History::decode(&buf), Some(history));

        buf.clear();
        let order = Order {
            c_id: 9,
            entry_d: 10,
            carrier_id: 0,
            ol_cnt: 15,
            all_local: true,
        };
        order.encode(&mut buf);
        assert_eq!(Order::decode(&buf), Some(order));
        buf.push(0);
        assert_eq!(Order::decode(&buf), None, "trailing bytes are malformed");

        buf.clear();
        let dist_info = [b'x'; DIST_INFO_LEN];
        let line = OrderLine {
            i_id: 100_000,
            supply_w_id: 7,
            delivery_d: u64::MAX,
            quantity: 10,
            amount: -999_999,
            dist_info: &dist_info,
        };
        line.encode(&mut buf);
        assert_eq!(buf.len(), 47);
        assert_eq!(OrderLine::decode(&buf), Some(line));
        assert_eq!(OrderLine::decode_i_id(&buf), Some(100_000));
        buf.pop();
        assert_eq!(OrderLine::decode(&buf), None, "a short row is malformed");
    }
}
