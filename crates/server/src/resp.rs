//! RESP2 request parsing and reply encoding (the Redis serialization
//! protocol, <https://redis.io/docs/reference/protocol-spec/>).
//!
//! Requests come as multibulk arrays of bulk strings (`*2\r\n$3\r\nGET\r\n
//! $1\r\nk\r\n`) or as inline commands (`GET k\r\n`, what `telnet` sends).
//! The parser is incremental and defensive, as Redis learned to be:
//!
//! * it never allocates for a declared length, only for bytes that have
//!   arrived (CVE-2021-32675: a client declaring a 512 MiB bulk and sending
//!   nothing costs nothing);
//! * every count and length is bounded by [`Limits`], tighter before a
//!   client has authenticated;
//! * malformed input is a [`ProtocolError`] (with Redis's own wording); the
//!   connection answers it and closes. Nothing here panics on any input
//!   (a proptest and a cargo-fuzz target check that).

use bytes::{Buf, BytesMut};
use smallvec::SmallVec;

/// Bounds on what one request may declare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string, in bytes (Redis's `proto-max-bulk-len`).
    pub bulk_bytes_max: usize,
    /// Most arguments in one request.
    pub args_max: usize,
    /// Longest inline request line, in bytes.
    pub inline_bytes_max: usize,
}

impl Limits {
    /// Redis's limits for an unauthenticated client on a server with a
    /// password: ten arguments of at most 16 KiB.
    pub const UNAUTHENTICATED: Limits = Limits {
        bulk_bytes_max: 16 * 1024,
        args_max: 10,
        inline_bytes_max: 16 * 1024,
    };

    /// The limits for an authenticated client, with `bulk_bytes_max` as
    /// configured.
    pub fn authenticated(bulk_bytes_max: usize) -> Limits {
        Limits {
            bulk_bytes_max,
            args_max: 1024 * 1024,
            inline_bytes_max: 64 * 1024,
        }
    }
}

/// A request the client got wrong. The text is Redis's reply, without the
/// leading `-`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(text: impl Into<String>) -> Self {
        ProtocolError(format!("ERR Protocol error: {}", text.into()))
    }
}

/// The arguments of one request, the first the command name, borrowed
/// from the connection's read buffer (see [`Request::args`]): no
/// allocation and no reference count per argument on the common path.
pub type Args<'a> = SmallVec<[&'a [u8]; 8]>;

/// Spans a [`Request`] keeps between requests; more are freed.
const SPANS_KEPT_MAX: usize = 1024;

/// Where the last parsed request's arguments lie. Reused from request to
/// request, so parsing allocates only when a request has more arguments
/// than any before it on the connection.
#[derive(Debug, Default)]
pub struct Request {
    spans: Vec<Span>,
}

impl Request {
    /// The arguments, read from `buf`, the buffer [`Parser::next`] just
    /// parsed this request from (and has not been changed since).
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        self.spans
            .iter()
            .map(|span| match span {
                Span::Range(start, end) => &buf[*start..*end],
                Span::Owned(bytes) => bytes.as_slice(),
            })
            .collect()
    }
}

/// An incremental request parser over a connection's read buffer.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes the buffer must hold before parsing can make progress; lets a
    /// large bulk arrive in many reads without re-parsing its header each
    /// time.
    needed_bytes: usize,
    /// Length of the request handed out last, still at the front of the
    /// buffer; the next call removes it.
    handed_out: usize,
}

impl Parser {
    /// Parses the next complete request at the front of `buf` into
    /// `request` and returns `true`; `false` means more bytes are needed.
    /// The request stays at the front of `buf` until the next call, which
    /// removes it first, so its arguments ([`Request::args`]) borrow `buf`
    /// instead of being copied or reference-counted. An empty request (a
    /// blank inline line) is skipped.
    pub fn next(
        &mut self,
        buf: &mut BytesMut,
        limits: &Limits,
        request: &mut Request,
    ) -> Result<bool, ProtocolError> {
        buf.advance(std::mem::take(&mut self.handed_out));
        loop {
            if buf.is_empty() || buf.len() < self.needed_bytes {
                return Ok(false);
            }
            if request.spans.capacity() > SPANS_KEPT_MAX {
                // One huge request must not pin its spans for the life of
                // the connection.
                request.spans = Vec::new();
            }
            request.spans.clear();
            let parsed = if buf[0] == b'*' {
                parse_multibulk(buf, limits, &mut request.spans)?
            } else {
                parse_inline(buf, limits, &mut request.spans)?
            };
            match parsed {
                Parsed::Incomplete { needed_bytes } => {
                    self.needed_bytes = needed_bytes;
                    return Ok(false);
                }
                Parsed::Complete { consumed } => {
                    self.needed_bytes = 0;
                    if request.spans.is_empty() {
                        buf.advance(consumed);
                        continue;
                    }
                    self.handed_out = consumed;
                    return Ok(true);
                }
            }
        }
    }
}

/// Where an argument lies in the buffer, or an owned argument (an inline
/// argument with escapes).
#[derive(Debug)]
enum Span {
    Range(usize, usize),
    Owned(Vec<u8>),
}

enum Parsed {
    Incomplete {
        needed_bytes: usize,
    },
    /// The request is `consumed` bytes long; its arguments are in the
    /// spans the parser was given.
    Complete {
        consumed: usize,
    },
}

/// Finds `\r\n` at or after `from`; returns the index of `\r`.
fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(offset) = buf.get(at..)?.iter().position(|&b| b == b'\r') {
        let cr = at + offset;
        match buf.get(cr + 1) {
            Some(b'\n') => return Some(cr),
            Some(_) => at = cr + 1,
            None => return None,
        }
    }
    None
}

/// Parses a decimal integer the way Redis's `string2ll` does: optional `-`,
/// digits, no spaces or `+`, no leading zeros except `0` itself.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || negative) {
        return None;
    }
    let mut value: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(d - b'0');
        value = if negative {
            value.checked_mul(10)?.checked_sub(digit)?
        } else {
            value.checked_mul(10)?.checked_add(digit)?
        };
    }
    Some(value)
}

fn parse_multibulk(
    buf: &[u8],
    limits: &Limits,
    spans: &mut Vec<Span>,
) -> Result<Parsed, ProtocolError> {
    let Some(cr) = find_crlf(buf, 1) else {
        if buf.len() > limits.inline_bytes_max {
            return Err(ProtocolError::new("too big mbulk count string"));
        }
        return Ok(Parsed::Incomplete {
            needed_bytes: buf.len() + 1,
        });
    };
    let count =
        parse_i64(&buf[1..cr]).ok_or_else(|| ProtocolError::new("invalid multibulk length"))?;
    if count > limits.args_max as i64 {
        return Err(ProtocolError::new("invalid multibulk length"));
    }
    let mut at = cr + 2;
    if count <= 0 {
        return Ok(Parsed::Complete { consumed: at });
    }
    // Nothing is reserved for the declared count: the spans grow only with
    // arguments that have arrived.
    for _ in 0..count as usize {
        match buf.get(at) {
            None => {
                return Ok(Parsed::Incomplete {
                    needed_bytes: at + 1,
                })
            }
            Some(b'$') => {}
            Some(&other) => {
                return Err(ProtocolError::new(format!(
                    "expected '$', got '{}'",
                    char::from(other).escape_default()
                )))
            }
        }
        let Some(cr) = find_crlf(buf, at + 1) else {
            if buf.len() - at > 32 {
                return Err(ProtocolError::new("invalid bulk length"));
            }
            return Ok(Parsed::Incomplete {
                needed_bytes: buf.len() + 1,
            });
        };
        let len =
            parse_i64(&buf[at + 1..cr]).ok_or_else(|| ProtocolError::new("invalid bulk length"))?;
        if len < 0 || len as u64 > limits.bulk_bytes_max as u64 {
            return Err(ProtocolError::new("invalid bulk length"));
        }
        let start = cr + 2;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(Parsed::Incomplete {
                needed_bytes: end + 2,
            });
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ProtocolError::new("bulk string not terminated by CRLF"));
        }
        spans.push(Span::Range(start, end));
        at = end + 2;
    }
    Ok(Parsed::Complete { consumed: at })
}

fn parse_inline(
    buf: &[u8],
    limits: &Limits,
    spans: &mut Vec<Span>,
) -> Result<Parsed, ProtocolError> {
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.inline_bytes_max {
            return Err(ProtocolError::new("too big inline request"));
        }
        return Ok(Parsed::Incomplete {
            needed_bytes: buf.len() + 1,
        });
    };
    if newline > limits.inline_bytes_max {
        return Err(ProtocolError::new("too big inline request"));
    }
    let line = match buf[..newline].strip_suffix(b"\r") {
        Some(line) => line,
        None => &buf[..newline],
    };
    let args =
        split_inline(line).ok_or_else(|| ProtocolError::new("unbalanced quotes in request"))?;
    if args.len() > limits.args_max {
        return Err(ProtocolError::new("invalid multibulk length"));
    }
    spans.extend(args.into_iter().map(Span::Owned));
    Ok(Parsed::Complete {
        consumed: newline + 1,
    })
}

/// Splits an inline request line into arguments like Redis's
/// `sdssplitargs`: whitespace separates, `"…"` takes C escapes (`\n`,
/// `\xHH`, …), `'…'` takes only `\'`. `None` for unbalanced quotes.
pub fn split_inline(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    let &b = line.get(i)?;
                    i += 1;
                    match b {
                        b'"' => break,
                        b'\\' => {
                            let &e = line.get(i)?;
                            i += 1;
                            match e {
                                b'n' => arg.push(b'\n'),
                                b'r' => arg.push(b'\r'),
                                b't' => arg.push(b'\t'),
                                b'b' => arg.push(8),
                                b'a' => arg.push(7),
                                b'x' if line.len() >= i + 2
                                    && line[i].is_ascii_hexdigit()
                                    && line[i + 1].is_ascii_hexdigit() =>
                                {
                                    let hex = std::str::from_utf8(&line[i..i + 2]).ok()?;
                                    arg.push(u8::from_str_radix(hex, 16).ok()?);
                                    i += 2;
                                }
                                other => arg.push(other),
                            }
                        }
                        other => arg.push(other),
                    }
                }
                // A closing quote must be followed by a space or the end.
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return None;
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    let &b = line.get(i)?;
                    i += 1;
                    match b {
                        b'\'' => break,
                        b'\\' if line.get(i) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 1;
                        }
                        other => arg.push(other),
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return None;
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
    Some(args)
}

/// Appends replies to an output buffer, in RESP2 or (after `HELLO 3`)
/// RESP3 — they differ, for the commands epochdb has, only in nulls and
/// maps.
#[derive(Debug)]
pub struct Out<'a> {
    buf: &'a mut Vec<u8>,
    resp3: bool,
}

impl<'a> Out<'a> {
    /// Writes to `buf`, in RESP3 if `resp3`.
    pub fn new(buf: &'a mut Vec<u8>, resp3: bool) -> Self {
        Out { buf, resp3 }
    }

    /// Switches the protocol for what is written next (`HELLO`).
    pub fn set_resp3(&mut self, resp3: bool) {
        self.resp3 = resp3;
    }
}

impl Out<'_> {
    /// `+OK`
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string, `+text`. `text` must not contain CR or LF.
    pub fn simple(&mut self, text: &str) {
        debug_assert!(!text.contains(['\r', '\n']));
        self.buf.push(b'+');
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error, `-TEXT`. Line breaks in `text` become spaces.
    pub fn error(&mut self, text: &str) {
        self.buf.push(b'-');
        self.buf.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer, `:n`.
    pub fn int(&mut self, n: i64) {
        self.buf.push(b':');
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string, `$len\r\nbytes\r\n`.
    pub fn bulk(&mut self, bytes: &[u8]) {
        self.buf.push(b'$');
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string or the null bulk string (`$-1`).
    pub fn bulk_or_nil(&mut self, bytes: Option<&[u8]>) {
        match bytes {
            Some(bytes) => self.bulk(bytes),
            None => self.nil(),
        }
    }

    /// The null bulk string: `$-1` (RESP2), `_` (RESP3).
    pub fn nil(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// The null array (EXEC after a failed WATCH): `*-1` (RESP2), `_`
    /// (RESP3).
    pub fn nil_array(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    /// A map header of `len` pairs: `%len` (RESP3), or an array of `2·len`
    /// elements (RESP2); the caller writes the keys and values next.
    pub fn map(&mut self, len: usize) {
        if self.resp3 {
            self.buf.push(b'%');
            self.buf
                .extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.array(2 * len);
        }
    }

    /// An array header, `*len`; the caller writes `len` elements next.
    pub fn array(&mut self, len: usize) {
        self.buf.push(b'*');
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
}

/// Feeds `data` to a parser the way a hostile client could: the first byte
/// picks the read size, the rest arrives in reads of that size; parsed
/// requests are drained as they come. Runs once with the unauthenticated
/// limits and once with the authenticated ones. For the fuzzer
/// (`crates/server/fuzz`) and the corpus replay test; panics only on a
/// broken invariant (the buffer must never hold more than what arrived,
/// plus one read's worth of spare capacity at most doubling).
pub fn exercise_parser(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first).max(1);
    for limits in [Limits::UNAUTHENTICATED, Limits::authenticated(512 << 20)] {
        let mut parser = Parser::default();
        let mut request = Request::default();
        let mut buf = BytesMut::new();
        let mut arrived = 0usize;
        'reads: for piece in rest.chunks(chunk) {
            buf.extend_from_slice(piece);
            arrived += piece.len();
            loop {
                match parser.next(&mut buf, &limits, &mut request) {
                    Ok(true) => {
                        let args = request.args(&buf);
                        assert!(!args.is_empty());
                        let total: usize = args.iter().map(|a| a.len()).sum();
                        assert!(total <= arrived, "arguments longer than the input");
                    }
                    Ok(false) => break,
                    Err(e) => {
                        assert!(e.0.starts_with("ERR Protocol error: "));
                        break 'reads;
                    }
                }
            }
            assert!(
                buf.capacity() <= 2 * arrived + 64,
                "buffer capacity {} for {arrived} bytes arrived",
                buf.capacity()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(input: &[u8], limits: &Limits) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut parser = Parser::default();
        let mut request = Request::default();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while parser.next(&mut buf, limits, &mut request)? {
            out.push(request.args(&buf).iter().map(|a| a.to_vec()).collect());
        }
        Ok(out)
    }

    const BIG: Limits = Limits {
        bulk_bytes_max: 512 << 20,
        args_max: 1 << 20,
        inline_bytes_max: 64 << 10,
    };

    #[test]
    fn parses_pipelined_multibulk_and_inline_requests() {
        let got = parse_all(
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n\r\nSET a \"b\\x41\\n\" 'c\\'d'\r\n",
            &BIG,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"PING".to_vec()],
                vec![
                    b"SET".to_vec(),
                    b"a".to_vec(),
                    b"bA\n".to_vec(),
                    b"c'd".to_vec()
                ],
            ]
        );
    }

    #[test]
    fn a_request_split_at_every_byte_parses_the_same() {
        let input: &[u8] = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\n";
        for cut in 0..input.len() {
            let mut parser = Parser::default();
            let mut request = Request::default();
            let mut buf = BytesMut::from(&input[..cut]);
            assert!(
                !parser.next(&mut buf, &BIG, &mut request).unwrap(),
                "cut at {cut}"
            );
            buf.extend_from_slice(&input[cut..]);
            assert!(parser.next(&mut buf, &BIG, &mut request).unwrap());
            assert_eq!(request.args(&buf).as_slice(), [&b"SET"[..], b"hello", b""]);
            assert!(!parser.next(&mut buf, &BIG, &mut request).unwrap());
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn declared_lengths_allocate_nothing_until_bytes_arrive() {
        let mut parser = Parser::default();
        let mut buf = BytesMut::from(&b"*1\r\n$536870912\r\nabc"[..]);
        let mut request = Request::default();
        assert!(!parser.next(&mut buf, &BIG, &mut request).unwrap());
        assert!(buf.capacity() < 4096, "capacity {}", buf.capacity());
        assert_eq!(parser.needed_bytes, 16 + 536870912 + 2);
    }

    #[test]
    fn malformed_and_oversized_requests_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "invalid multibulk length"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n+foo\r\n", "expected '$', got '+'"),
            (b"*1\r\n$3\r\nfooXY", "bulk string not terminated by CRLF"),
            (b"*11\r\n", "invalid multibulk length"),
            (b"*1\r\n$16385\r\n", "invalid bulk length"),
            (b"SET \"a\r\n", "unbalanced quotes in request"),
        ];
        for (input, text) in cases {
            let err = parse_all(input, &Limits::UNAUTHENTICATED).unwrap_err();
            assert_eq!(err.0, format!("ERR Protocol error: {text}"), "{input:?}");
        }
        let long_line = vec![b'a'; 70 * 1024];
        assert!(parse_all(&long_line, &BIG).is_err());
    }

    #[test]
    fn integers_parse_like_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1a",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(input in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_all(&input, &Limits::UNAUTHENTICATED);
            let _ = parse_all(&input, &BIG);
        }

        #[test]
        fn round_trips_encoded_requests(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8)) {
            let mut wire = Vec::new();
            let mut out = Out::new(&mut wire, false);
            out.array(args.len());
            for a in &args {
                out.bulk(a);
            }
            prop_assert_eq!(parse_all(&wire, &BIG).unwrap(), vec![args]);
        }
    }
}
