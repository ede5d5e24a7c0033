//! Column builders: a value's span -> the loader's typed column, by the rules of
//! `traceanalyzer/load/normalize.py` (`to_int`, `to_float`, `to_str`, `checked_ns`, raw texts).
//! A value those rules read in a way not written here (floats or booleans where ids belong,
//! exponents in times, escaped or non-ASCII digits) rejects the chunk: Python reads it.

use crate::scan::{unescape, Reject, Span, K, R};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash: the std SipHash costs more than the scan on short keys.
#[derive(Default)]
pub struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            h = (h.rotate_left(5) ^ u64::from_le_bytes(c.try_into().unwrap())).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        for &c in chunks.remainder() {
            h = (h.rotate_left(5) ^ c as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        self.0 = h;
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// Which load counts a column's loose values go to (`to_int`'s `what`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Label {
    None,
    Id,
    PidTid,
}

/// Strings as a dictionary: `values[0]` is null, `codes` index `values`. The map from a
/// value's raw text to its code lives beside it while a piece is decoded (`Seen`: it borrows
/// the chunk's bytes), so that the column itself outlives the chunk.
#[derive(Default)]
pub struct DictCol {
    pub values: Vec<Option<String>>,
    pub codes: Vec<u32>,
}

/// A dictionary column's raw texts seen so far in a piece -> their codes.
pub type Seen<'a> = FxMap<&'a [u8], u32>;

impl DictCol {
    fn new() -> Self {
        DictCol { values: vec![None], codes: Vec::new() }
    }

    /// A string value (`to_str`): strings and null only.
    fn push_str<'a>(&mut self, seen: &mut Seen<'a>, b: &'a [u8], v: Span) -> R<()> {
        let code = match v.k {
            K::Absent | K::Null => 0,
            K::Str | K::StrEsc => self.intern(seen, b, v, |raw| unescape(raw, v.k == K::StrEsc))?,
            _ => return Err(Reject),
        };
        self.codes.push(code);
        Ok(())
    }

    /// The raw JSON text of any value (msgspec's `Raw`); absent is null.
    fn push_raw<'a>(&mut self, seen: &mut Seen<'a>, b: &'a [u8], v: Span) -> R<()> {
        let code = match v.k {
            K::Absent => 0,
            _ => self.intern(seen, b, v, |raw| std::str::from_utf8(raw).map(str::to_owned).map_err(|_| Reject))?,
        };
        self.codes.push(code);
        Ok(())
    }

    #[inline]
    fn intern<'a, F: FnOnce(&[u8]) -> R<String>>(
        &mut self,
        seen: &mut Seen<'a>,
        b: &'a [u8],
        v: Span,
        make: F,
    ) -> R<u32> {
        let raw = &b[v.s as usize..v.e as usize];
        if let Some(&c) = seen.get(raw) {
            return Ok(c);
        }
        let c = self.values.len() as u32;
        self.values.push(Some(make(raw)?));
        seen.insert(raw, c);
        Ok(c)
    }
}

/// int64 values with the rows that are null.
#[derive(Default)]
pub struct IntCol {
    pub values: Vec<i64>,
    pub nulls: Vec<u32>,
    pub big: u64,
    pub strings: u64,
}

impl IntCol {
    #[inline]
    fn null(&mut self) {
        self.nulls.push(self.values.len() as u32);
        self.values.push(0);
    }

    /// `to_int`: integers (beyond int64: null, counted), strings holding a number ("stream 7":
    /// the first `-?\d+`, null from 19 characters on), null.
    fn push(&mut self, b: &[u8], v: Span) -> R<()> {
        let t = &b[v.s as usize..v.e as usize];
        match v.k {
            K::Absent | K::Null => self.null(),
            K::Int => match parse_i64(t) {
                Some(x) => self.values.push(x),
                None => {
                    self.big += 1;
                    self.null();
                }
            },
            K::Str => {
                let inner = &t[1..t.len() - 1];
                if !inner.is_ascii() {
                    return Err(Reject); // Python's \d matches other digits too
                }
                self.strings += 1;
                match first_int(inner) {
                    Some(m) if m.len() < 19 => self.values.push(parse_i64(m).ok_or(Reject)?),
                    _ => self.null(),
                }
            }
            _ => return Err(Reject),
        }
        Ok(())
    }
}

/// The first match of `-?\d+` in `s`.
fn first_int(s: &[u8]) -> Option<&[u8]> {
    let mut i = 0;
    while i < s.len() {
        let start = i;
        if s[i] == b'-' && i + 1 < s.len() && s[i + 1].is_ascii_digit() {
            i += 1;
        }
        if s[i].is_ascii_digit() {
            let mut j = i;
            while j < s.len() && s[j].is_ascii_digit() {
                j += 1;
            }
            return Some(&s[start..j]);
        }
        i = start + 1;
    }
    None
}

/// An integer's text as int64; None beyond int64.
pub fn parse_i64(t: &[u8]) -> Option<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() {
        return None;
    }
    let mut m: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        m = m.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if m <= 1u64 << 63 {
            Some((m as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(m).ok()
    }
}

/// float64 values (`to_float`, strict=False on numbers).
#[derive(Default)]
pub struct FloatCol {
    pub values: Vec<f64>,
    pub nulls: Vec<u32>,
}

impl FloatCol {
    fn push(&mut self, b: &[u8], v: Span) -> R<()> {
        let t = &b[v.s as usize..v.e as usize];
        match v.k {
            K::Absent | K::Null => {
                self.nulls.push(self.values.len() as u32);
                self.values.push(0.0);
            }
            // Long integers: Python converts the exact int; leave them to it.
            K::Int if t.len() > 15 => return Err(Reject),
            K::Int | K::Frac | K::Exp => {
                let x: f64 = std::str::from_utf8(t).map_err(|_| Reject)?.parse().map_err(|_| Reject)?;
                self.values.push(x);
            }
            _ => return Err(Reject),
        }
        Ok(())
    }
}

/// `checked_ns`: microseconds as text -> int64 ns, exact, the fourth decimal rounding half up.
fn ns_of(t: &[u8], quoted: bool) -> R<Option<i64>> {
    let (neg, body) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') if quoted => (false, &t[1..]),
        _ => (false, t),
    };
    let dot = body.iter().position(|&c| c == b'.');
    let (whole, frac) = match dot {
        Some(d) => (&body[..d], &body[d + 1..]),
        None => (body, &body[body.len()..]),
    };
    if whole.is_empty() || !whole.iter().all(u8::is_ascii_digit) || !frac.iter().all(u8::is_ascii_digit) {
        return Err(Reject);
    }
    let w = parse_i64(whole).ok_or(Reject)?;
    // Past this the Python path decides on a float64 estimate (null or not): leave it to it.
    if w >= 9_100_000_000_000_000 {
        return Err(Reject);
    }
    let digit = |i: usize| frac.get(i).map_or(0, |c| (c - b'0') as i64);
    let mut m = w * 1000 + digit(0) * 100 + digit(1) * 10 + digit(2);
    if digit(3) >= 5 {
        m += 1;
    }
    Ok(Some(if neg { -m } else { m }))
}

/// Times in int64 ns.
#[derive(Default)]
pub struct NsCol {
    pub values: Vec<i64>,
    pub nulls: Vec<u32>,
}

impl NsCol {
    fn push(&mut self, b: &[u8], v: Span) -> R<()> {
        let t = &b[v.s as usize..v.e as usize];
        let ns = match v.k {
            K::Absent | K::Null => None,
            K::Int | K::Frac => ns_of(t, false)?,
            K::Str => ns_of(&t[1..t.len() - 1], true)?,
            _ => return Err(Reject), // exponents (via float64), escapes, junk: Python's rules
        };
        match ns {
            Some(x) => self.values.push(x),
            None => {
                self.nulls.push(self.values.len() as u32);
                self.values.push(0);
            }
        }
        Ok(())
    }
}

/// How a column is made from its value.
#[derive(Clone, Copy)]
pub enum Ty {
    Str,
    Raw,
    Int(Label),
    Float,
    Ns,
}

pub enum Col {
    Str(DictCol),
    Int(IntCol, Label),
    Float(FloatCol),
    Ns(NsCol),
}

impl Col {
    pub fn new(t: Ty) -> Self {
        match t {
            Ty::Str | Ty::Raw => Col::Str(DictCol::new()),
            Ty::Int(l) => Col::Int(IntCol::default(), l),
            Ty::Float => Col::Float(FloatCol::default()),
            Ty::Ns => Col::Ns(NsCol::default()),
        }
    }

    #[inline]
    pub fn push<'a>(&mut self, seen: &mut Seen<'a>, t: Ty, b: &'a [u8], v: Span) -> R<()> {
        match (self, t) {
            (Col::Str(c), Ty::Raw) => c.push_raw(seen, b, v),
            (Col::Str(c), _) => c.push_str(seen, b, v),
            (Col::Int(c, _), _) => c.push(b, v),
            (Col::Float(c), _) => c.push(b, v),
            (Col::Ns(c), _) => c.push(b, v),
        }
    }
}
