//! A strict JSON scanner over one piece of the `traceEvents` array.
//!
//! It validates as strictly as msgspec (or more: anything unusual is an error), because an
//! error only sends the chunk to the Python loader, which decodes it, salvages damage and
//! words the warnings. A value is kept as a `Span` of its text, so numbers keep every digit.

/// Any reason not to read a chunk natively (the Python path reads it instead).
#[derive(Debug)]
pub struct Reject;
pub type R<T> = Result<T, Reject>;

/// What a value is, as far as the columns care.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum K {
    Absent,
    Null,
    True,
    False,
    /// An integer: no fraction, no exponent.
    Int,
    /// A number with a fraction and no exponent.
    Frac,
    /// A number with an exponent.
    Exp,
    /// A string without escapes.
    Str,
    /// A string with escapes.
    StrEsc,
    Arr,
    Obj,
}

/// A value's kind and its text `b[s..e]` (strings with their quotes).
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub k: K,
    pub s: u32,
    pub e: u32,
}

pub const ABSENT: Span = Span { k: K::Absent, s: 0, e: 0 };
const MAX_DEPTH: u32 = 512;

pub struct Parser<'a> {
    pub b: &'a [u8],
    pub p: usize,
    /// Every string byte looked at, OR-ed: its high bit says whether any string held a byte
    /// that is not ASCII (outside strings the grammar admits ASCII only), so that a piece in
    /// ASCII, nearly all of them, needs no UTF-8 validation (`is_ascii`).
    seen: u64,
}

impl<'a> Parser<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Parser { b, p: 0, seen: 0 }
    }

    /// Every byte the parser went over is ASCII (valid only once the whole text is parsed).
    pub fn is_ascii(&self) -> bool {
        self.seen & 0x8080_8080_8080_8080 == 0
    }

    #[inline]
    pub fn ws(&mut self) {
        while self.p < self.b.len() && matches!(self.b[self.p], b' ' | b'\t' | b'\n' | b'\r') {
            self.p += 1;
        }
    }

    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    #[inline]
    pub fn expect(&mut self, c: u8) -> R<()> {
        if self.peek() == Some(c) {
            self.p += 1;
            Ok(())
        } else {
            Err(Reject)
        }
    }

    /// A string starting at `"`; true when it holds escapes. Control characters, bad escapes
    /// and lone surrogates are rejected (msgspec rejects the first two; the third is rare).
    pub fn string(&mut self) -> R<bool> {
        self.expect(b'"')?;
        let b = self.b;
        let mut esc = false;
        loop {
            self.skip_plain();
            let c = *b.get(self.p).ok_or(Reject)?;
            self.p += 1;
            self.seen |= c as u64;
            match c {
                b'"' => return Ok(esc),
                b'\\' => {
                    esc = true;
                    let e = *b.get(self.p).ok_or(Reject)?;
                    self.p += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            let u = self.hex4()?;
                            if (0xDC00..0xE000).contains(&u) {
                                return Err(Reject);
                            }
                            if (0xD800..0xDC00).contains(&u) {
                                if b.get(self.p) != Some(&b'\\') || b.get(self.p + 1) != Some(&b'u') {
                                    return Err(Reject);
                                }
                                self.p += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(Reject);
                                }
                            }
                        }
                        _ => return Err(Reject),
                    }
                }
                0..=0x1f => return Err(Reject),
                _ => {}
            }
        }
    }

    /// Skip string bytes that need no look (not `"`, `\\` or a control character), 8 at a time,
    /// up to the first one that does.
    #[inline]
    fn skip_plain(&mut self) {
        const LO: u64 = 0x0101_0101_0101_0101;
        const HI: u64 = 0x8080_8080_8080_8080;
        let b = self.b;
        while self.p + 8 <= b.len() {
            let x = u64::from_le_bytes(b[self.p..self.p + 8].try_into().unwrap());
            self.seen |= x; // bytes past the string too: at worst a needless validation
            let quote = x ^ (LO * b'"' as u64);
            let slash = x ^ (LO * b'\\' as u64);
            // A zero byte in quote/slash, or a byte below 0x20 (bytes >= 0x80 are never flagged).
            // A borrow can flag a byte above a flagged one, never below: the lowest is exact.
            let special = ((quote.wrapping_sub(LO) & !quote)
                | (slash.wrapping_sub(LO) & !slash)
                | (x.wrapping_sub(LO * 0x20) & !x))
                & HI;
            if special != 0 {
                self.p += (special.trailing_zeros() / 8) as usize;
                return;
            }
            self.p += 8;
        }
    }

    fn hex4(&mut self) -> R<u32> {
        let h = self.b.get(self.p..self.p + 4).ok_or(Reject)?;
        let mut v = 0u32;
        for &c in h {
            let d = (c as char).to_digit(16).ok_or(Reject)?;
            v = v * 16 + d;
        }
        self.p += 4;
        Ok(v)
    }

    fn digits(&mut self) -> usize {
        let start = self.p;
        while self.p < self.b.len() && self.b[self.p].is_ascii_digit() {
            self.p += 1;
        }
        self.p - start
    }

    /// A number in strict JSON grammar.
    fn number(&mut self) -> R<K> {
        if self.peek() == Some(b'-') {
            self.p += 1;
        }
        match self.peek() {
            Some(b'0') => self.p += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(Reject),
        }
        let mut k = K::Int;
        if self.peek() == Some(b'.') {
            self.p += 1;
            if self.digits() == 0 {
                return Err(Reject);
            }
            k = K::Frac;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.p += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.p += 1;
            }
            if self.digits() == 0 {
                return Err(Reject);
            }
            k = K::Exp;
        }
        Ok(k)
    }

    fn literal(&mut self, lit: &[u8], k: K) -> R<K> {
        if self.b.get(self.p..self.p + lit.len()) == Some(lit) {
            self.p += lit.len();
            Ok(k)
        } else {
            Err(Reject)
        }
    }

    /// Any value (the parser stands on its first byte); its span.
    pub fn value(&mut self, depth: u32) -> R<Span> {
        let s = self.p;
        let k = match self.peek().ok_or(Reject)? {
            b'"' => {
                if self.string()? {
                    K::StrEsc
                } else {
                    K::Str
                }
            }
            b'{' => {
                self.container(b'}', true, depth)?;
                K::Obj
            }
            b'[' => {
                self.container(b']', false, depth)?;
                K::Arr
            }
            b't' => self.literal(b"true", K::True)?,
            b'f' => self.literal(b"false", K::False)?,
            b'n' => self.literal(b"null", K::Null)?,
            _ => self.number()?,
        };
        Ok(Span { k, s: s as u32, e: self.p as u32 })
    }

    fn container(&mut self, close: u8, object: bool, depth: u32) -> R<()> {
        if depth >= MAX_DEPTH {
            return Err(Reject);
        }
        self.p += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.p += 1;
            return Ok(());
        }
        loop {
            if object {
                self.string()?;
                self.ws();
                self.expect(b':')?;
                self.ws();
            }
            self.value(depth + 1)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.p += 1;
                    self.ws();
                }
                Some(c) if c == close => {
                    self.p += 1;
                    return Ok(());
                }
                _ => return Err(Reject),
            }
        }
    }

    /// An object whose keys are looked up with `index` and whose known values land in `out`;
    /// `nested(self, i)` parses the value of key `i` itself when it returns Some. A repeated known
    /// key is rejected (msgspec keeps the last; rare enough to leave to it).
    #[inline]
    pub fn object<F: Fn(&[u8]) -> Option<usize>>(&mut self, index: F, out: &mut [Span]) -> R<()> {
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.p += 1;
            return Ok(());
        }
        loop {
            let ks = self.p;
            if self.string()? {
                return Err(Reject); // an escaped key might spell a known one
            }
            let key = &self.b[ks + 1..self.p - 1];
            self.ws();
            self.expect(b':')?;
            self.ws();
            match index(key) {
                Some(i) => {
                    if out[i].k != K::Absent {
                        return Err(Reject);
                    }
                    out[i] = self.value(1)?;
                }
                None => {
                    self.value(1)?;
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.p += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.p += 1;
                    return Ok(());
                }
                _ => return Err(Reject),
            }
        }
    }
}

/// The decoded text of a string span (quotes included in `raw`).
pub fn unescape(raw: &[u8], esc: bool) -> R<String> {
    let inner = &raw[1..raw.len() - 1];
    if !esc {
        return std::str::from_utf8(inner).map(str::to_owned).map_err(|_| Reject);
    }
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = inner[i + 1];
        i += 2;
        let ch = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hex = |j: usize| u32::from_str_radix(std::str::from_utf8(&inner[j..j + 4]).unwrap_or("x"), 16);
                let mut u = hex(i).map_err(|_| Reject)?;
                i += 4;
                if (0xD800..0xDC00).contains(&u) {
                    let lo = hex(i + 2).map_err(|_| Reject)?;
                    i += 6;
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                char::from_u32(u).ok_or(Reject)?
            }
            _ => return Err(Reject),
        };
        let mut tmp = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
    }
    String::from_utf8(out).map_err(|_| Reject)
}
