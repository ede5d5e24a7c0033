//! `traceanalyzer._native`: one chunk of `traceEvents` (the text `[ev, ev, ...]`) -> the
//! loader's per-kind columns, decoded on several threads with the GIL released.
//!
//! Returns None when any part of the chunk is not read here (damage, odd types): the caller then
//! reads the chunk with the Python loader, which salvages and words the warnings.
//!
//! Also the replay loop of the what-if model (`replay`, see replay.rs): a dependency chain is
//! sequential, so it is the one loop over nodes that polars cannot express.

mod buffer;
mod columns;
mod events;
mod replay;
mod scan;

use columns::{Col, Label};
use events::{decode_piece, Piece, KINDS};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use scan::unescape;

/// The events between the outer brackets of `[ ... ]` (white space around allowed).
fn inner(b: &[u8]) -> Option<&[u8]> {
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let lo = b.iter().position(|c| !ws(c))?;
    let hi = b.iter().rposition(|c| !ws(c))?;
    if b[lo] != b'[' || b[hi] != b']' || hi <= lo {
        return None;
    }
    Some(&b[lo + 1..hi])
}

/// Cut `b` into up to `n` pieces at `}` `,` `{` boundaries near equal sizes. A boundary
/// inside a string makes a piece fail to decode, so the whole chunk is left to Python.
fn pieces(b: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..n {
        let target = (b.len() * k / n).max(start);
        let Some(cut) = boundary(b, target) else { break };
        out.push(&b[start..cut.0]);
        start = cut.1;
    }
    out.push(&b[start..]);
    out
}

/// The first `}` ws* `,` ws* `{` at or after `from`: (end of the `}`, start of the `{`).
fn boundary(b: &[u8], from: usize) -> Option<(usize, usize)> {
    let ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let mut i = from;
    while i < b.len() {
        if b[i] == b'}' {
            let mut j = i + 1;
            while j < b.len() && ws(b[j]) {
                j += 1;
            }
            if j < b.len() && b[j] == b',' {
                j += 1;
                while j < b.len() && ws(b[j]) {
                    j += 1;
                }
                if j < b.len() && b[j] == b'{' {
                    return Some((i + 1, j));
                }
            }
        }
        i += 1;
    }
    None
}

fn decode_all(data: &[u8], threads: usize) -> Option<Vec<Piece<'_>>> {
    let body = inner(data)?;
    // A thread needs a few MB of work to pay for itself.
    let n = threads.clamp(1, 64).min(body.len() / (1 << 20) + 1);
    let parts = pieces(body, n);
    if parts.len() == 1 {
        return decode_piece(parts[0]).ok().map(|p| vec![p]);
    }
    let results: Vec<Option<Piece>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts.iter().map(|&p| s.spawn(move || decode_piece(p).ok())).collect();
        handles.into_iter().map(|h| h.join().ok().flatten()).collect()
    });
    results.into_iter().collect()
}

fn le_bytes<'py, T: Copy, const N: usize>(py: Python<'py>, v: &[T], f: fn(T) -> [u8; N]) -> Bound<'py, PyBytes> {
    let mut out = Vec::with_capacity(v.len() * N);
    for &x in v {
        out.extend_from_slice(&f(x));
    }
    PyBytes::new(py, &out)
}

/// A `(cat, ph)` key's text as the string it holds (None when absent or null).
fn span_str(s: &[u8]) -> Option<String> {
    if s.is_empty() || s == b"null" {
        return None;
    }
    unescape(s, s.contains(&b'\\')).ok()
}

/// One piece as (events, [(cat, ph, n)], big ids, string pids/tids, {kind: (rows, [(col, tag, a, b)])}).
fn piece_to_py<'py>(py: Python<'py>, piece: &Piece) -> PyResult<Bound<'py, PyTuple>> {
    let counts = PyList::empty(py);
    for ((cat, ph), n) in &piece.counts {
        counts.append((span_str(cat), span_str(ph), *n))?;
    }
    let (mut big, mut strings) = (0u64, 0u64);
    let tables = PyDict::new(py);
    for (t, (kind, spec)) in piece.tables.iter().zip(KINDS.iter()) {
        if t.rows == 0 {
            continue;
        }
        let cols = PyList::empty(py);
        for (col, (name, _, _)) in t.cols.iter().zip(spec.iter()) {
            let item = match col {
                Col::Str(d) => {
                    let values = PyList::new(py, d.values.iter().map(|v| v.as_deref()))?;
                    (*name, "s", values.into_any(), le_bytes(py, &d.codes, u32::to_le_bytes).into_any())
                }
                Col::Int(c, label) => {
                    if *label != Label::None {
                        big += c.big;
                    }
                    if *label == Label::PidTid {
                        strings += c.strings;
                    }
                    let v = le_bytes(py, &c.values, i64::to_le_bytes);
                    (*name, "i", v.into_any(), le_bytes(py, &c.nulls, u32::to_le_bytes).into_any())
                }
                Col::Float(c) => {
                    let v = le_bytes(py, &c.values, f64::to_le_bytes);
                    (*name, "f", v.into_any(), le_bytes(py, &c.nulls, u32::to_le_bytes).into_any())
                }
                Col::Ns(c) => {
                    let v = le_bytes(py, &c.values, i64::to_le_bytes);
                    (*name, "i", v.into_any(), le_bytes(py, &c.nulls, u32::to_le_bytes).into_any())
                }
            };
            cols.append(item)?;
        }
        tables.set_item(*kind, (t.rows, cols))?;
    }
    PyTuple::new(py, [piece.events.into_pyobject(py)?.into_any(), counts.into_any(), big.into_pyobject(py)?.into_any(), strings.into_pyobject(py)?.into_any(), tables.into_any()])
}

/// Decode a chunk `[ev, ...]` (any contiguous buffer: bytes, bytearray, memoryview) on up to `threads` threads; a list of pieces
/// in file order (see `piece_to_py`), or None when the chunk is not read here.
#[pyfunction]
#[pyo3(signature = (data, threads=1))]
fn decode_chunk<'py>(py: Python<'py>, data: &Bound<'py, PyAny>, threads: usize) -> PyResult<Option<Bound<'py, PyList>>> {
    let view = buffer::View::new(data)?;
    let bytes: &[u8] = view.bytes();
    let decoded = py.allow_threads(|| decode_all(bytes, threads));
    let Some(pieces) = decoded else { return Ok(None) };
    let out = PyList::empty(py);
    for piece in &pieces {
        out.append(piece_to_py(py, piece)?)?;
    }
    Ok(Some(out))
}

/// The native decoder and replay loop.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
