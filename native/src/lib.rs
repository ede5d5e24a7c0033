//! `traceanalyzer._native`: one chunk of `traceEvents` (the text `[ev, ev, ...]`) -> the
//! loader's per-kind columns, decoded on several threads with the GIL released (`decode_chunk`),
//! appended to the trace's columns (`Columns`, state.rs) and handed to polars once at the end as
//! Arrow arrays without copies (arrow.rs).
//!
//! `decode_chunk` returns None when any part of the chunk is not read here (damage, odd types):
//! the caller then reads the chunk with the Python loader, which salvages and words the warnings.
//!
//! Also the replay loop of the what-if model (`replay`, see replay.rs): a dependency chain is
//! sequential, so it is the one loop over nodes that polars cannot express; and the critical
//! path's walk back along that chain (`walk`, see walk.rs), sequential for the same reason; and
//! the innermost interval around each slice of the dependency graph (`innermost`, walk.rs: a
//! merge of two sorted key arrays, then a climb up the parents), and the time a layer covers up to
//! each slice boundary (`covered_until`, walk.rs: the same merge), inside each slice
//! (`covered_in`, layers.rs) and folded into the slices' kinds (`fold_slices`, fold.rs: every layer in one pass); the
//! calibration of the graph's lags and own times (`calibrate`, calibrate.rs: one pass over the edges, one over the
//! nodes); and the replay's order and adjacency (`prepare_order`, prepare.rs).

mod alloc;
mod arrow;
mod buffer;
mod calibrate;
mod crossing;
mod columns;
mod contain;
mod events;
mod fold;
mod layers;
mod nest;
mod prepare;
mod replay;
mod scan;
mod state;
mod threads;
mod ties;
mod walk;

use events::{decode_piece, Piece};
use pyo3::prelude::*;
use state::{Columns, Decoded};

#[global_allocator]
static ALLOC: alloc::BigMaps = alloc::BigMaps;

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

/// Decode a chunk `[ev, ...]` (any contiguous buffer: bytes, bytearray, memoryview) on up to
/// `threads` threads: its pieces in file order, to append to a `Columns`, or None when the
/// chunk is not read here.
#[pyfunction]
#[pyo3(signature = (data, threads=1))]
fn decode_chunk(py: Python<'_>, data: &Bound<'_, PyAny>, threads: usize) -> PyResult<Option<Decoded>> {
    let view = buffer::View::new(data)?;
    let bytes: &[u8] = view.bytes();
    let decoded =
        py.allow_threads(|| decode_all(bytes, threads).map(|p| p.into_iter().map(Piece::into_owned).collect()));
    Ok(decoded.map(|pieces| Decoded { pieces }))
}

/// The native decoder, replay loop and critical-path walk.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(decode_chunk, m)?)?;
    m.add_class::<Columns>()?;
    m.add_class::<Decoded>()?;
    m.add_class::<arrow::ArrowColumn>()?;
    m.add_function(wrap_pyfunction!(replay::replay, m)?)?;
    m.add_function(wrap_pyfunction!(replay::window_ends, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate::calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(walk::walk, m)?)?;
    m.add_function(wrap_pyfunction!(walk::innermost, m)?)?;
    m.add_function(wrap_pyfunction!(walk::covered_until, m)?)?;
    m.add_function(wrap_pyfunction!(layers::covered_in, m)?)?;
    m.add_function(wrap_pyfunction!(fold::fold_slices, m)?)?;
    m.add_function(wrap_pyfunction!(fold::fold_bands, m)?)?;
    m.add_function(wrap_pyfunction!(ties::innermost_ties, m)?)?;
    m.add_function(wrap_pyfunction!(prepare::prepare_order, m)?)?;
    m.add_function(wrap_pyfunction!(crossing::crossing_events, m)?)?;
    m.add_function(wrap_pyfunction!(nest::nest, m)?)?;
    m.add_function(wrap_pyfunction!(contain::innermost_containing, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
