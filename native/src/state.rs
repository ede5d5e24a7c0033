//! The decoder's state across a whole trace (`Columns`, held by `RawTables`): every chunk's
//! pieces are appended to one column per kind and field, and the finished columns are handed
//! to Python once, at the end, as Arrow arrays (arrow.rs), without copies.
//!
//! A string column keeps one dictionary of distinct values for the whole trace (so a kernel's
//! name becomes a string once per trace, not once per chunk) and a uint32 code per row; a
//! chunk's own little dictionary is merged into it (a lookup per distinct value of the chunk,
//! then a remap of its codes). Numbers are appended as they are, with a validity bitmap made
//! only once a column has a null.

use crate::arrow::{ArrowColumn, Buf};
use crate::columns::{Col, Fx, FxMap, Label};
use crate::events::{OwnedPiece, KINDS};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::hash::Hasher;

const NONE: u32 = u32::MAX;

/// (cat, ph) -> events, for the load's counts.
type Counts = FxMap<(Option<String>, Option<String>), u64>;

/// Distinct strings, stored once in an Arrow large-string layout: entry 0 is null.
struct Dict {
    offsets: Vec<i64>,
    data: Vec<u8>,
    /// hash -> the last entry with that hash; `next` chains the earlier ones.
    heads: FxMap<u64, u32>,
    next: Vec<u32>,
}

fn hash(b: &[u8]) -> u64 {
    let mut h = Fx::default();
    h.write(b);
    h.write_u8(0xff); // lengths apart
    h.finish()
}

impl Dict {
    fn new() -> Self {
        Dict { offsets: vec![0, 0], data: Vec::new(), heads: FxMap::default(), next: vec![NONE] }
    }

    fn get(&self, c: u32) -> &[u8] {
        &self.data[self.offsets[c as usize] as usize..self.offsets[c as usize + 1] as usize]
    }

    fn intern(&mut self, s: &str) -> u32 {
        let h = hash(s.as_bytes());
        let head = self.heads.get(&h).copied().unwrap_or(NONE);
        let mut c = head;
        while c != NONE {
            if self.get(c) == s.as_bytes() {
                return c;
            }
            c = self.next[c as usize];
        }
        let code = self.next.len() as u32;
        self.data.extend_from_slice(s.as_bytes());
        self.offsets.push(self.data.len() as i64);
        self.next.push(head);
        self.heads.insert(h, code);
        code
    }

    fn export(self, name: &str) -> ArrowColumn {
        // Entry 0 is the null: bit 0 cleared, every other bit set.
        let n = self.offsets.len() - 1;
        let mut bits = vec![0xffu8; n.div_ceil(8)];
        bits[0] &= !1;
        ArrowColumn::strings(name, self.offsets, self.data, Some(bits), 1)
    }
}

/// Which rows are valid, kept only once there is a null (bits past `len` are set).
#[derive(Default)]
struct Validity {
    bits: Option<Vec<u8>>,
    len: usize,
    nulls: usize,
}

impl Validity {
    /// `n` more rows, of which those at `nulls` (indices within the n) are null.
    fn extend(&mut self, n: usize, nulls: &[u32]) {
        if nulls.is_empty() && self.bits.is_none() {
            self.len += n;
            return;
        }
        let bits = self.bits.get_or_insert_with(|| vec![0xff; self.len.div_ceil(8)]);
        let end = self.len + n;
        bits.resize(end.div_ceil(8), 0xff);
        for &i in nulls {
            let r = self.len + i as usize;
            bits[r >> 3] &= !(1u8 << (r & 7));
        }
        self.len = end;
        self.nulls += nulls.len();
    }
}

enum Acc {
    Str { dict: Dict, codes: Vec<u32> },
    Int { values: Vec<i64>, valid: Validity },
    Float { values: Vec<f64>, valid: Validity },
}

impl Acc {
    fn for_col(c: &Col) -> Acc {
        match c {
            Col::Str(_) => Acc::Str { dict: Dict::new(), codes: Vec::new() },
            Col::Int(..) | Col::Ns(_) => Acc::Int { values: Vec::new(), valid: Validity::default() },
            Col::Float(_) => Acc::Float { values: Vec::new(), valid: Validity::default() },
        }
    }

    fn append(&mut self, col: Col) {
        match (self, col) {
            (Acc::Str { dict, codes }, Col::Str(d)) => {
                let remap: Vec<u32> =
                    d.values.iter().map(|v| v.as_deref().map_or(0, |s| dict.intern(s))).collect();
                codes.extend(d.codes.iter().map(|&c| remap[c as usize]));
            }
            (Acc::Int { values, valid }, Col::Int(c, _)) => {
                valid.extend(c.values.len(), &c.nulls);
                values.extend_from_slice(&c.values);
            }
            (Acc::Int { values, valid }, Col::Ns(c)) => {
                valid.extend(c.values.len(), &c.nulls);
                values.extend_from_slice(&c.values);
            }
            (Acc::Float { values, valid }, Col::Float(c)) => {
                valid.extend(c.values.len(), &c.nulls);
                values.extend_from_slice(&c.values);
            }
            _ => unreachable!("a column's type is fixed by its spec"),
        }
    }
}

/// The columns of one kind.
struct Kind {
    rows: usize,
    accs: Option<Vec<Acc>>,
}

/// A chunk decoded (`decode_chunk`), not yet appended to the trace's columns.
#[pyclass(module = "traceanalyzer._native")]
pub struct Decoded {
    pub pieces: Vec<OwnedPiece>,
}

/// The trace's columns so far: `append` each chunk in file order, `finish` once.
#[pyclass(module = "traceanalyzer._native")]
pub struct Columns {
    kinds: Vec<Kind>,
}

impl Columns {
    /// Append the pieces; (events, ids beyond int64, string pids/tids, counts) of them.
    fn append_all(&mut self, pieces: Vec<OwnedPiece>) -> (u64, u64, u64, Counts) {
        let (mut events, mut big, mut strings) = (0u64, 0u64, 0u64);
        let mut counts = Counts::default();
        for piece in pieces {
            events += piece.events;
            for (cat, ph, n) in piece.counts {
                *counts.entry((cat, ph)).or_insert(0) += n;
            }
            for (t, kind) in piece.tables.into_iter().zip(self.kinds.iter_mut()) {
                if t.rows == 0 {
                    continue;
                }
                let accs = kind.accs.get_or_insert_with(|| t.cols.iter().map(Acc::for_col).collect());
                for (col, acc) in t.cols.into_iter().zip(accs.iter_mut()) {
                    if let Col::Int(c, label) = &col {
                        if *label != Label::None {
                            big += c.big;
                        }
                        if *label == Label::PidTid {
                            strings += c.strings;
                        }
                    }
                    acc.append(col);
                }
                kind.rows += t.rows;
            }
        }
        (events, big, strings, counts)
    }
}

#[pymethods]
impl Columns {
    #[new]
    fn new() -> Self {
        Columns { kinds: KINDS.iter().map(|_| Kind { rows: 0, accs: None }).collect() }
    }

    /// Append a decoded chunk (consumed); (events, [(cat, ph, n)], ids beyond int64, string
    /// pids/tids) of it, for the load's counts.
    fn append<'py>(&mut self, py: Python<'py>, decoded: &Bound<'py, Decoded>) -> PyResult<Bound<'py, PyTuple>> {
        let pieces = std::mem::take(&mut decoded.borrow_mut().pieces);
        let (events, big, strings, counts) = py.allow_threads(|| self.append_all(pieces));
        let list = PyList::empty(py);
        for ((cat, ph), n) in counts {
            list.append((cat, ph, n))?;
        }
        (events, list, big, strings).into_pyobject(py)
    }

    /// Rows appended so far, per kind (in `KINDS` order).
    fn rows(&self) -> Vec<usize> {
        self.kinds.iter().map(|k| k.rows).collect()
    }

    /// The finished columns, handed over once: [(kind, rows, [(name, tag, arrays...)])] for the
    /// kinds with rows. A number column is ("i" or "f", values); a string column ("s",
    /// dictionary, codes): its distinct values (entry 0 null) and a code per row.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (kind, (kname, spec)) in self.kinds.iter_mut().zip(KINDS.iter()) {
            let Some(accs) = kind.accs.take() else { continue };
            let rows = std::mem::take(&mut kind.rows);
            let cols = PyList::empty(py);
            for (acc, (name, _, _)) in accs.into_iter().zip(spec.iter()) {
                let item = match acc {
                    Acc::Str { dict, codes } => {
                        let n = codes.len();
                        let dict = Py::new(py, dict.export(name))?;
                        let codes = Py::new(py, ArrowColumn::primitive(name, Buf::U32(codes), n, None, 0))?;
                        (*name, "s", dict.into_any(), Some(codes.into_any())).into_pyobject(py)?
                    }
                    Acc::Int { values, valid } => {
                        let n = values.len();
                        let col = ArrowColumn::primitive(name, Buf::I64(values), n, valid.bits, valid.nulls);
                        (*name, "i", Py::new(py, col)?.into_any(), None::<PyObject>).into_pyobject(py)?
                    }
                    Acc::Float { values, valid } => {
                        let n = values.len();
                        let col = ArrowColumn::primitive(name, Buf::F64(values), n, valid.bits, valid.nulls);
                        (*name, "f", Py::new(py, col)?.into_any(), None::<PyObject>).into_pyobject(py)?
                    }
                };
                cols.append(item)?;
            }
            out.append((*kname, rows, cols))?;
        }
        Ok(out)
    }
}
