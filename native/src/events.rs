//! One piece of the `traceEvents` array -> per-kind columns, by the rules of
//! `traceanalyzer/load/decode.py` (which event goes to which table, which field to which column).

use crate::columns::{Col, FxMap, Label, Seen, Ty};
use crate::scan::{unescape, Parser, Reject, Span, ABSENT, K, R};

// Top-level fields of an event.
const PH: usize = 0;
const CAT: usize = 1;
const NAME: usize = 2;
const PID: usize = 3;
const TID: usize = 4;
const TS: usize = 5;
const DUR: usize = 6;
const ID: usize = 7;
const ARGS: usize = 8;
const N_TOP: usize = 9;

fn top_index(k: &[u8]) -> Option<usize> {
    Some(match k {
        b"ph" => PH,
        b"cat" => CAT,
        b"name" => NAME,
        b"pid" => PID,
        b"tid" => TID,
        b"ts" => TS,
        b"dur" => DUR,
        b"id" => ID,
        b"args" => ARGS,
        _ => return None,
    })
}

/// The args the loader reads (decode.Args), by their JSON key.
const ARG_KEYS: [&[u8]; 31] = [
    b"correlation",
    b"External id",
    b"external id",
    b"device",
    b"stream",
    b"bytes",
    b"memory bandwidth (GB/s)",
    b"grid",
    b"block",
    b"graph id",
    b"cbid",
    b"Sequence number",
    b"Fwd thread id",
    b"Input Dims",
    b"Input type",
    b"Call stack",
    b"Python id",
    b"Python parent id",
    b"Device Type",
    b"Device Id",
    b"Addr",
    b"Bytes",
    b"Total Allocated",
    b"Total Reserved",
    b"wait_on_stream",
    b"wait_on_cuda_event_id",
    b"cuda_sync_kind",
    b"name",
    b"labels",
    b"sort_index",
    b"Concrete Inputs",
];
const N_ARGS: usize = ARG_KEYS.len();

const fn arg_index(k: &[u8]) -> Option<usize> {
    // A match on the bytes (by length, then the bytes): an event has ~10 args, most not read,
    // and a linear scan of the 31 keys cost ~4 % of the decode.
    Some(match k {
        b"correlation" => 0,
        b"External id" => 1,
        b"external id" => 2,
        b"device" => 3,
        b"stream" => 4,
        b"bytes" => 5,
        b"memory bandwidth (GB/s)" => 6,
        b"grid" => 7,
        b"block" => 8,
        b"graph id" => 9,
        b"cbid" => 10,
        b"Sequence number" => 11,
        b"Fwd thread id" => 12,
        b"Input Dims" => 13,
        b"Input type" => 14,
        b"Call stack" => 15,
        b"Python id" => 16,
        b"Python parent id" => 17,
        b"Device Type" => 18,
        b"Device Id" => 19,
        b"Addr" => 20,
        b"Bytes" => 21,
        b"Total Allocated" => 22,
        b"Total Reserved" => 23,
        b"wait_on_stream" => 24,
        b"wait_on_cuda_event_id" => 25,
        b"cuda_sync_kind" => 26,
        b"name" => 27,
        b"labels" => 28,
        b"sort_index" => 29,
        b"Concrete Inputs" => 30,
        _ => return None,
    })
}

// Every key of ARG_KEYS is found at its own index (checked when compiling).
const _: () = {
    let mut i = 0;
    while i < N_ARGS {
        assert!(matches!(arg_index(ARG_KEYS[i]), Some(j) if j == i));
        i += 1;
    }
};

/// Where a column's value comes from.
#[derive(Clone, Copy)]
pub enum Src {
    Top(usize),
    Arg(usize),
    /// "External id", else 2021's "external id".
    Ext,
    /// A metadata event's args name, else labels.
    MetaValue,
}

const fn a(key: usize) -> Src {
    Src::Arg(key)
}

pub type Spec = &'static [(&'static str, Src, Ty)];

const ID_: Ty = Ty::Int(Label::Id);
const INT: Ty = Ty::Int(Label::None);
const PT: Ty = Ty::Int(Label::PidTid);

macro_rules! timed {
    ($ids:expr; $($extra:expr),* $(,)?) => {
        &[
            ("name", Src::Top(NAME), Ty::Str),
            ("cat", Src::Top(CAT), Ty::Str),
            ("pid", Src::Top(PID), $ids),
            ("tid", Src::Top(TID), $ids),
            $($extra,)*
            ("ts_ns", Src::Top(TS), Ty::Ns),
            ("dur_ns", Src::Top(DUR), Ty::Ns),
        ]
    };
}

/// The tables, in the order of `normalize.FRAME_BUILDERS`, with their columns in frame order.
pub const KINDS: [(&str, Spec); 10] = [
    (
        "op",
        timed!(PT; ("external_id", Src::Ext, ID_), ("sequence_number", a(11), ID_), ("fwd_thread_id", a(12), INT),
            ("input_dims", a(13), Ty::Raw), ("input_type", a(14), Ty::Raw), ("concrete_inputs", a(30), Ty::Raw),
            ("call_stack", a(15), Ty::Str)),
    ),
    ("python", timed!(PT; ("python_id", a(16), ID_), ("python_parent_id", a(17), ID_))),
    ("runtime", timed!(PT; ("correlation", a(0), ID_), ("external_id", Src::Ext, ID_), ("cbid", a(10), INT))),
    (
        "gpu",
        timed!(PT; ("device", a(3), INT), ("stream", a(4), INT), ("correlation", a(0), ID_),
            ("external_id", Src::Ext, ID_), ("bytes", a(5), INT), ("bandwidth_gbps", a(6), Ty::Float),
            ("grid", a(7), Ty::Raw), ("block", a(8), Ty::Raw), ("graph_id", a(9), INT)),
    ),
    (
        "sync",
        timed!(PT; ("device", a(3), INT), ("stream", a(4), INT), ("correlation", a(0), ID_),
            ("wait_on_stream", a(24), INT), ("wait_on_event", a(25), INT), ("sync_kind", a(26), Ty::Str)),
    ),
    ("gpu_annotation", timed!(PT; ("device", a(3), INT), ("external_id", Src::Ext, ID_))),
    (
        "memory",
        timed!(PT; ("device_type", a(18), INT), ("device_id", a(19), INT), ("addr", a(20), ID_),
            ("bytes", a(21), INT), ("total_allocated", a(22), INT), ("total_reserved", a(23), INT)),
    ),
    ("flow", timed!(PT; ("ph", Src::Top(PH), Ty::Str), ("id", Src::Top(ID), ID_))),
    (
        "meta",
        &[
            ("name", Src::Top(NAME), Ty::Str),
            ("pid", Src::Top(PID), INT),
            ("tid", Src::Top(TID), INT),
            ("value", Src::MetaValue, Ty::Str),
            ("sort_index", a(29), INT),
        ],
    ),
    ("other", timed!(INT; ("ph", Src::Top(PH), Ty::Str))),
];
const META: usize = 8;
const MEMORY: usize = 6;
const OTHER: usize = 9;
const SKIP: usize = usize::MAX;

/// decode.KIND_OF_CAT (and SKIPPED_FLOW_CATS: counted, no rows).
fn kind_of_cat(cat: &str) -> Option<usize> {
    Some(match cat {
        "cpu_op" | "Operator" | "user_annotation" => 0,
        "python_function" => 1,
        "cuda_runtime" | "Runtime" | "cuda_driver" => 2,
        "kernel" | "Kernel" | "gpu_memcpy" | "Memcpy" | "gpu_memset" | "Memset" => 3,
        "cuda_sync" => 4,
        "gpu_user_annotation" => 5,
        "fwdbwd" => 7,
        "ac2g" | "async" => SKIP,
        _ => return None,
    })
}

/// The rows of one table.
pub struct Table {
    pub rows: usize,
    pub cols: Vec<Col>,
}

/// (cat text, ph text) spans -> (count, the events' table when the pair decides it).
pub type PairCounts<'a> = FxMap<(&'a [u8], &'a [u8]), (u64, Option<usize>)>;

/// What one piece decodes to.
pub struct Piece<'a> {
    pub tables: Vec<Table>,
    pub events: u64,
    pub counts: PairCounts<'a>,
}

/// A piece that no longer borrows the chunk: its (cat, ph) keys as the strings they hold.
pub struct OwnedPiece {
    pub tables: Vec<Table>,
    pub events: u64,
    pub counts: Vec<(Option<String>, Option<String>, u64)>,
}

/// A `(cat, ph)` key's text as the string it holds (None when absent or null).
fn span_str(s: &[u8]) -> Option<String> {
    if s.is_empty() || s == b"null" {
        return None;
    }
    unescape(s, s.contains(&b'\\')).ok()
}

impl Piece<'_> {
    pub fn into_owned(self) -> OwnedPiece {
        let counts = self.counts.iter().map(|((cat, ph), &(n, _))| (span_str(cat), span_str(ph), n)).collect();
        OwnedPiece { tables: self.tables, events: self.events, counts }
    }
}

fn text_of(b: &[u8], v: Span) -> &[u8] {
    &b[v.s as usize..v.e as usize]
}

/// The string a span holds (None for absent / null); other kinds reject (Python hashes them).
fn string_of(b: &[u8], v: Span) -> R<Option<std::borrow::Cow<'_, str>>> {
    let t = text_of(b, v);
    Ok(match v.k {
        K::Absent | K::Null => None,
        K::Str => Some(std::borrow::Cow::Borrowed(std::str::from_utf8(&t[1..t.len() - 1]).map_err(|_| Reject)?)),
        K::StrEsc => Some(std::borrow::Cow::Owned(unescape(t, true)?)),
        _ => return Err(Reject),
    })
}

/// Decode `b`: events separated by commas (no brackets), white space anywhere between.
pub fn decode_piece(b: &[u8]) -> R<Piece<'_>> {
    let mut tables: Vec<Table> =
        KINDS.iter().map(|(_, spec)| Table { rows: 0, cols: spec.iter().map(|c| Col::new(c.2)).collect() }).collect();
    let mut seen: Vec<Vec<Seen>> =
        KINDS.iter().map(|(_, spec)| spec.iter().map(|_| Seen::default()).collect()).collect();
    let mut counts = PairCounts::default();
    let mut p = Parser::new(b);
    let mut events = 0u64;
    p.ws();
    if p.peek().is_none() {
        return Ok(Piece { tables, events, counts });
    }
    loop {
        let mut top = [ABSENT; N_TOP];
        let mut args = [ABSENT; N_ARGS];
        event(&mut p, &mut top, &mut args)?;
        events += 1;
        let (cat, ph) = (top[CAT], top[PH]);
        // One lookup per event: the checks and the table a (cat, ph) pair implies are worked
        // out the first time the pair is seen in the piece (a span's kind follows from its text).
        let slot = match counts.entry((text_of(b, cat), text_of(b, ph))) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert((0, kind_of_pair(b, cat, ph)?)),
        };
        slot.0 += 1;
        let kind = match slot.1 {
            Some(k) => k,
            None if matches!(top[NAME].k, K::Str | K::StrEsc)
                && string_of(b, top[NAME])?.as_deref() == Some("[memory]") =>
            {
                MEMORY
            }
            None => OTHER,
        };
        if kind != SKIP {
            let t = &mut tables[kind];
            let maps = &mut seen[kind];
            for ((col, map), &(_, src, ty)) in t.cols.iter_mut().zip(maps.iter_mut()).zip(KINDS[kind].1.iter()) {
                let v = match src {
                    Src::Top(i) => top[i],
                    Src::Arg(i) => args[i],
                    Src::Ext => or_else(args[1], args[2]),
                    Src::MetaValue => or_else(args[27], args[28]),
                };
                col.push(map, ty, b, v)?;
            }
            t.rows += 1;
        }
        p.ws();
        match p.peek() {
            None => break,
            Some(b',') => {
                p.p += 1;
                p.ws();
            }
            _ => return Err(Reject),
        }
    }
    // Validated last, and only when a string held a byte beyond ASCII: every text taken
    // above went through a checked conversion anyway; this rejects what no column read.
    if !p.is_ascii() {
        std::str::from_utf8(b).map_err(|_| Reject)?;
    }
    Ok(Piece { tables, events, counts })
}

/// The table of the events with this cat and ph (decode.KIND_OF_CAT, else "M" -> meta), or
/// None when it is told by the name ("[memory]" -> memory, else other). Both must be strings,
/// null or absent.
fn kind_of_pair(b: &[u8], cat: Span, ph: Span) -> R<Option<usize>> {
    let cat_s = string_of(b, cat)?;
    let ph_s = string_of(b, ph)?;
    if let Some(k) = cat_s.as_deref().and_then(kind_of_cat) {
        return Ok(Some(k));
    }
    Ok(if ph_s.as_deref() == Some("M") { Some(META) } else { None })
}

/// `x if x is not None else y`.
fn or_else(x: Span, y: Span) -> Span {
    if matches!(x.k, K::Absent | K::Null) {
        y
    } else {
        x
    }
}

fn event(p: &mut Parser, top: &mut [Span; N_TOP], args: &mut [Span; N_ARGS]) -> R<()> {
    p.expect(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        p.p += 1;
        return Ok(());
    }
    loop {
        let ks = p.p;
        if p.string()? {
            return Err(Reject);
        }
        let key = &p.b[ks + 1..p.p - 1];
        p.ws();
        p.expect(b':')?;
        p.ws();
        match top_index(key) {
            Some(ARGS) => {
                if top[ARGS].k != K::Absent {
                    return Err(Reject);
                }
                let s = p.p;
                match p.peek() {
                    Some(b'{') => p.object(arg_index, args)?,
                    Some(b'n') => {
                        p.value(1)?; // null: no args (anything else is not an object: Python's)
                    }
                    _ => return Err(Reject),
                }
                top[ARGS] = Span { k: K::Obj, s: s as u32, e: p.p as u32 };
            }
            Some(i) => {
                if top[i].k != K::Absent {
                    return Err(Reject);
                }
                top[i] = p.value(1)?;
            }
            None => {
                p.value(1)?;
            }
        }
        p.ws();
        match p.peek() {
            Some(b',') => {
                p.p += 1;
                p.ws();
            }
            Some(b'}') => {
                p.p += 1;
                return Ok(());
            }
            _ => return Err(Reject),
        }
    }
}
