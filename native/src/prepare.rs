//! The replay's arrays in one native pass (`traceanalyzer.analyses.replay.prepare`, whose numpy
//! steps are the fallback and the reference): each node's start and `to_end` edges grouped by
//! destination (CSR, in edge order: a counting sort), the events in captured time order (a
//! node's start, a sync's end; by time, then ends first, CPU before GPU, then item), and that
//! order checked against every edge. At 311 MB numpy's two dozen passes and temporaries over a
//! million nodes and edges cost ~80 ms.

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("prepare_order: {what}"))
}

/// Offsets (n + 1) and edge indexes of the start edges (`off[0]`, `idx[0]`) and of the
/// `to_end` edges (`off[1]`, `idx[1]`), each grouped by destination, each group in edge order:
/// one counting sort of both (each offset moved on as its edges are placed, then back).
fn csr(dst: &[i32], to_end: &[u8], mut off: [&mut [i32]; 2], idx: [&mut [i32]; 2]) {
    for o in off.iter_mut() {
        o.fill(0);
    }
    for (&d, &e) in dst.iter().zip(to_end) {
        off[(e != 0) as usize][d as usize] += 1;
    }
    for o in off.iter_mut() {
        let mut sum = 0;
        for x in o.iter_mut() {
            let c = *x;
            *x = sum;
            sum += c;
        }
    }
    for (k, (&d, &e)) in dst.iter().zip(to_end).enumerate() {
        let w = (e != 0) as usize;
        let at = &mut off[w][d as usize];
        idx[w][*at as usize] = k as i32;
        *at += 1;
    }
    // each offset is now its group's end: the next group's start
    for o in off.iter_mut() {
        let n = o.len() - 1;
        o.copy_within(0..n, 1);
        o[0] = 0;
    }
}

/// The items (v: node v's start at ts[v]; n + v: sync v's end at end[v]) by time, then tie
/// (ends first, CPU before GPU, then the item: numpy's prepare's order). A stable merge sort,
/// as the nodes come in long sorted runs (each thread's); on one u64 per item where the times'
/// range and the ties fit it together (a trace of minutes: 36 bits of ns), else on pairs.
fn time_order(ts: &[i64], end: &[i64], gpu: &[u8], sync: &[usize], out: &mut [i32]) {
    let n = ts.len();
    let big = 2 * n as i64;
    let tie = |v: usize, is_end: bool| -> i64 {
        if is_end { gpu[v] as i64 * big + (n + v) as i64 } else { 2 * big + gpu[v] as i64 * big + v as i64 }
    };
    let times = ts.iter().copied().chain(sync.iter().map(|&v| end[v]));
    let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let range = (hi as i128 - lo as i128).max(0) as u128;
    let tie_bits = 64 - ((4 * big) as u64).leading_zeros(); // every tie is below 7n
    let t_bits = 128 - range.leading_zeros();
    if t_bits + tie_bits <= 64 {
        let pack = |t: i64, v: usize, e: bool| (((t - lo) as u64) << tie_bits) | tie(v, e) as u64;
        let mut keys: Vec<u64> = (0..n).map(|v| pack(ts[v], v, false)).collect();
        keys.extend(sync.iter().map(|&v| pack(end[v], v, true)));
        keys.sort();
        let mask = (1u64 << tie_bits) - 1;
        for (o, &k) in out.iter_mut().zip(&keys) {
            *o = ((k & mask) as i64 % big) as i32;
        }
        return;
    }
    let mut keys: Vec<(i64, i64)> = (0..n).map(|v| (ts[v], tie(v, false))).collect();
    keys.extend(sync.iter().map(|&v| (end[v], tie(v, true))));
    keys.sort();
    for (o, &(_, t)) in out.iter_mut().zip(&keys) {
        *o = (t % big) as i32;
    }
}

/// The outputs of `prepare_order`, written in place.
struct Out<'a> {
    order: &'a mut [i32],
    start_off: &'a mut [i32],
    start_idx: &'a mut [i32],
    end_off: &'a mut [i32],
    end_idx: &'a mut [i32],
}

#[allow(clippy::too_many_arguments)]
fn run(ts: &[i64], end: &[i64], gpu: &[u8], src: &[i32], dst: &[i32], fs: &[u8], to_end: &[u8], o: Out) -> Option<usize> {
    let n = ts.len();
    csr(dst, to_end, [&mut *o.start_off, &mut *o.end_off], [o.start_idx, o.end_idx]);
    let end_off = &*o.end_off;
    let sync: Vec<usize> = (0..n).filter(|&v| end_off[v + 1] > end_off[v]).collect();
    let items = n + sync.len();
    let order = &mut o.order[..items];
    time_order(ts, end, gpu, &sync, order);
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
    Some(items)
}

/// The replay's order and adjacency of a graph of n nodes (`ts`, `end`: captured start and end,
/// int64; `gpu`: uint8, a GPU node) and its edges (`src`, `dst`: int32; `from_start`, `to_end`:
/// uint8), as `replay.prepare` makes them with int32 indexes, written into `order` (n + the
/// number of `to_end` edges: at least n + the syncs), `start_off`, `end_off` (n + 1 each),
/// `start_idx` and `end_idx` (one per start and per `to_end` edge). Returns the number of items
/// in `order`; None where captured time order breaks an edge (a damaged trace: `prepare` then
/// orders the events by Kahn's algorithm).
#[pyfunction]
#[pyo3(signature = (ts, end, gpu, src, dst, from_start, to_end, order, start_off, start_idx, end_off, end_idx))]
#[allow(clippy::too_many_arguments)]
pub fn prepare_order(
    py: Python<'_>,
    ts: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    gpu: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    from_start: &Bound<'_, PyAny>,
    to_end: &Bound<'_, PyAny>,
    order: &Bound<'_, PyAny>,
    start_off: &Bound<'_, PyAny>,
    start_idx: &Bound<'_, PyAny>,
    end_off: &Bound<'_, PyAny>,
    end_idx: &Bound<'_, PyAny>,
) -> PyResult<Option<usize>> {
    let v = [ts, end, gpu, src, dst, from_start, to_end].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let mut w = [order, start_off, start_idx, end_off, end_idx].iter().map(|o| View::writable(o)).collect::<PyResult<Vec<View>>>()?;
    if !buffer::outputs_apart(&w, v.iter()) {
        return Err(err("an output shares memory with another array"));
    }
    let who = "prepare_order";
    let (ts, end) = (buffer::i64s(v[0].bytes(), who, "ts")?, buffer::i64s(v[1].bytes(), who, "end")?);
    let (src, dst) = (buffer::i32s(v[3].bytes(), who, "src")?, buffer::i32s(v[4].bytes(), who, "dst")?);
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
    let ends = to_end.iter().filter(|&&e| e != 0).count();
    let [o, so, si, eo, ei] = &mut w[..] else { unreachable!() };
    let out = Out {
        order: buffer::i32s_mut(o.bytes_mut(), who, "order")?,
        start_off: buffer::i32s_mut(so.bytes_mut(), who, "start_off")?,
        start_idx: buffer::i32s_mut(si.bytes_mut(), who, "start_idx")?,
        end_off: buffer::i32s_mut(eo.bytes_mut(), who, "end_off")?,
        end_idx: buffer::i32s_mut(ei.bytes_mut(), who, "end_idx")?,
    };
    if out.start_off.len() != n + 1 || out.end_off.len() != n + 1 || out.order.len() != n + ends {
        return Err(err("start_off and end_off need n + 1 values, order n + one per to_end edge"));
    }
    if out.start_idx.len() != m - ends || out.end_idx.len() != ends {
        return Err(err("start_idx and end_idx need one value per start and per to_end edge"));
    }
    Ok(py.allow_threads(|| run(ts, end, gpu, src, dst, fs, to_end, out)))
}
