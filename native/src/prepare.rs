//! The replay's arrays in one native pass (`traceanalyzer.analyses.replay.prepare`, whose numpy
//! steps are the fallback and the reference): each node's start and `to_end` edges grouped by
//! destination (CSR, in edge order: a counting sort), the events in captured time order (a
//! node's start, a sync's end; by time, then ends first, CPU before GPU, then item), and that
//! order checked against every edge. At 311 MB numpy's two dozen passes and temporaries over a
//! million nodes and edges cost ~80 ms.

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("prepare_order: {what}"))
}

fn as_bytes<'py>(py: Python<'py>, v: &[i32]) -> Bound<'py, PyBytes> {
    // SAFETY: an i32 slice is plain bytes, 4 per value.
    let b = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) };
    PyBytes::new(py, b)
}

struct Out {
    order: Vec<i32>,
    start_off: Vec<i32>,
    start_idx: Vec<i32>,
    end_off: Vec<i32>,
    end_idx: Vec<i32>,
}

/// Offsets (n + 1) and edge indexes of the edges `keep` admits, grouped by destination, each
/// group in edge order.
fn csr(dst: &[i32], keep: impl Fn(usize) -> bool, n: usize) -> (Vec<i32>, Vec<i32>) {
    let mut off = vec![0i32; n + 1];
    for (e, &d) in dst.iter().enumerate() {
        if keep(e) {
            off[d as usize + 1] += 1;
        }
    }
    for v in 0..n {
        off[v + 1] += off[v];
    }
    let mut at: Vec<i32> = off[..n].to_vec();
    let mut idx = vec![0i32; off[n] as usize];
    for (e, &d) in dst.iter().enumerate() {
        if keep(e) {
            idx[at[d as usize] as usize] = e as i32;
            at[d as usize] += 1;
        }
    }
    (off, idx)
}

fn run(ts: &[i64], end: &[i64], gpu: &[u8], src: &[i32], dst: &[i32], fs: &[u8], to_end: &[u8]) -> Option<Out> {
    let n = ts.len();
    let (start_off, start_idx) = csr(dst, |e| to_end[e] == 0, n);
    let (end_off, end_idx) = csr(dst, |e| to_end[e] != 0, n);
    let sync: Vec<usize> = (0..n).filter(|&v| end_off[v + 1] > end_off[v]).collect();
    // items: v (node v's start), n + v (sync v's end); the tie after time as numpy's prepare
    // writes it: ends first, then CPU before GPU, then the item (below 2n)
    let big = 2 * n as i64;
    let mut keys: Vec<(i64, i64)> = Vec::with_capacity(n + sync.len());
    for v in 0..n {
        keys.push((ts[v], 2 * big + gpu[v] as i64 * big + v as i64));
    }
    for &v in &sync {
        keys.push((end[v], gpu[v] as i64 * big + (n + v) as i64));
    }
    keys.sort_unstable(); // every tie is distinct: one order
    let order: Vec<i32> = keys.iter().map(|&(_, tie)| (tie % big) as i32).collect();
    drop(keys);
    let mut pos = vec![0i32; 2 * n];
    for (i, &x) in order.iter().enumerate() {
        pos[x as usize] = i as i32;
    }
    // each dependency before what it sets: an edge's source (its start for a launch, else the
    // item at which its end is known) before its destination (a sync's end for a `to_end` edge),
    // and a sync's start before its end
    let is_sync = |v: usize| end_off[v + 1] > end_off[v];
    let end_item = |v: usize| if is_sync(v) { n + v } else { v };
    for e in 0..src.len() {
        let (s, d) = (src[e] as usize, dst[e] as usize);
        let before = if fs[e] != 0 && to_end[e] == 0 { s } else { end_item(s) };
        let after = if to_end[e] != 0 { n + d } else { d };
        if pos[before] >= pos[after] {
            return None;
        }
    }
    if sync.iter().any(|&v| pos[v] >= pos[n + v]) {
        return None;
    }
    Some(Out { order, start_off, start_idx, end_off, end_idx })
}

/// The replay's order and adjacency of a graph of n nodes (`ts`, `end`: captured start and end,
/// int64; `gpu`: uint8, a GPU node) and its edges (`src`, `dst`: int32; `from_start`, `to_end`:
/// uint8), as `replay.prepare` makes them with int32 indexes: (order, start_off, start_idx,
/// end_off, end_idx) as int32 bytes; None where captured time order breaks an edge (a damaged
/// trace: `prepare` then orders the events by Kahn's algorithm).
#[pyfunction]
#[pyo3(signature = (ts, end, gpu, src, dst, from_start, to_end))]
#[allow(clippy::too_many_arguments)]
pub fn prepare_order<'py>(
    py: Python<'py>,
    ts: &Bound<'py, PyAny>,
    end: &Bound<'py, PyAny>,
    gpu: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    dst: &Bound<'py, PyAny>,
    from_start: &Bound<'py, PyAny>,
    to_end: &Bound<'py, PyAny>,
) -> PyResult<Option<Vec<Bound<'py, PyBytes>>>> {
    let v = [ts, end, gpu, src, dst, from_start, to_end].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let (ts, end) = (buffer::i64s(v[0].bytes(), "prepare_order", "ts")?, buffer::i64s(v[1].bytes(), "prepare_order", "end")?);
    let (src, dst) = (buffer::i32s(v[3].bytes(), "prepare_order", "src")?, buffer::i32s(v[4].bytes(), "prepare_order", "dst")?);
    let (gpu, fs, to_end) = (v[2].bytes(), v[5].bytes(), v[6].bytes());
    let (n, m) = (ts.len(), src.len());
    if end.len() != n || gpu.len() != n {
        return Err(err("ts, end and gpu need one value per node"));
    }
    if dst.len() != m || fs.len() != m || to_end.len() != m {
        return Err(err("src, dst, from_start and to_end need one value per edge"));
    }
    if 2 * n >= i32::MAX as usize || m >= i32::MAX as usize {
        return Err(err("too many nodes or edges for int32 indexes"));
    }
    if !src.iter().chain(dst).all(|&x| x >= 0 && (x as usize) < n) {
        return Err(err("an edge's end is not a node"));
    }
    let out = py.allow_threads(|| run(ts, end, gpu, src, dst, fs, to_end));
    Ok(out.map(|o| [&o.order, &o.start_off, &o.start_idx, &o.end_off, &o.end_idx].iter().map(|x| as_bytes(py, x)).collect()))
}
