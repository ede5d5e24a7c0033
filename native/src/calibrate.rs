//! The calibration of `traceanalyzer.analyses.replay.calibrate` (its numpy body, `_calibrate_np`,
//! is the fallback and the reference): the lags and own times that make a replay with nothing
//! changed give the captured times, and the edges' order by (destination, source).
//!
//! numpy takes a dozen passes over the edges and a stable sort of them by binding group; here it
//! is one pass over the edges (each edge's reference, lag and readiness computed where it is, the
//! binding edge of each node's start and of a sync's end kept as the latest ready, the first of
//! equal ones by index), one over the nodes, and a counting sort of the edges by destination.
//! Arithmetic wraps as numpy's does. Everything is checked before the loops, which run with the GIL
//! released and cannot index out of bounds.

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("calibrate: {what}"))
}

struct Graph<'a> {
    ts: &'a [i64],
    end: &'a [i64],
    dur: &'a [i64],
    src: &'a [i32],
    dst: &'a [i32],
    from_start: &'a [u8],
    to_end: &'a [u8],
}

impl Graph<'_> {
    /// Edge k's reference time (its source's start, or its modelled end) and target (its
    /// destination's start, or a sync's captured end); `is_sync`: per node, has a `to_end` edge.
    #[inline]
    fn ref_target(&self, k: usize, is_sync: &[bool]) -> (i64, i64) {
        let (u, v) = (self.src[k] as usize, self.dst[k] as usize);
        let reference = if self.from_start[k] != 0 {
            self.ts[u]
        } else if is_sync[u] {
            self.end[u]
        } else {
            self.ts[u].wrapping_add(self.dur[u])
        };
        let target = if self.to_end[k] != 0 { self.end[v] } else { self.ts[v] };
        (reference, target)
    }
}

/// lag0 = min(target - ref, 0); ready = ref + lag0 (numpy's wrapping arithmetic).
#[inline]
fn lag_ready(reference: i64, target: i64) -> (i64, i64) {
    let lag0 = target.wrapping_sub(reference).min(0);
    (lag0, reference.wrapping_add(lag0))
}

fn run(g: &Graph, own: &mut [i64], lag: &mut [i64], order: &mut [i32]) {
    let (n, m) = (g.ts.len(), g.src.len());
    let mut is_sync = vec![false; n];
    for k in 0..m {
        if g.to_end[k] != 0 {
            is_sync[g.dst[k] as usize] = true;
        }
    }
    let ready = |k: usize| {
        let (reference, target) = g.ref_target(k, &is_sync);
        lag_ready(reference, target).1
    };
    // per node: the latest reference of its to_end edges (in `own` until the own times replace
    // it), the binding start edge and end edge (-1: none; n + 1 long, for the counting sort
    // after); a binding edge's readiness is computed again when needed rather than kept (a node
    // has one edge of each kind but for a few): fewer fresh pages than numbers per node
    own.fill(i64::MIN);
    // edge indexes and offsets (below 2^31, checked): i32, half the pages of i64
    let mut bind_start = vec![-1i32; n + 1];
    let mut bind_end = vec![-1i32; n + 1];
    for (k, lag_k) in lag.iter_mut().enumerate().take(m) {
        let (reference, target) = g.ref_target(k, &is_sync);
        let (lag0, r) = lag_ready(reference, target);
        *lag_k = lag0;
        let v = g.dst[k] as usize;
        let bind = if g.to_end[k] != 0 {
            own[v] = own[v].max(reference);
            &mut bind_end[v]
        } else {
            &mut bind_start[v]
        };
        if *bind < 0 || r > ready(*bind as usize) {
            *bind = k as i32;
        }
    }
    for v in 0..n {
        let (t, e) = (g.ts[v], g.end[v]);
        own[v] = if is_sync[v] {
            // what the call took after the latest work it waited for ended, as polars'
            // clip(0, e - t) of e - max(t, maxref)
            let x = e.wrapping_sub(t.max(own[v]));
            let hi = e.wrapping_sub(t);
            if x < 0 {
                0
            } else if x > hi {
                hi
            } else {
                x
            }
        } else {
            g.dur[v]
        };
        // the binding edge carries the rest; for a sync whose own time binds, the own time does
        let b = bind_start[v];
        if b >= 0 {
            let b = b as usize;
            lag[b] = lag[b].wrapping_add(t.wrapping_sub(ready(b)).max(0));
        }
        let b = bind_end[v];
        if b >= 0 {
            let b = b as usize;
            let (own_ready, r) = (t.wrapping_add(own[v]), ready(b));
            if own_ready >= r {
                own[v] = own[v].wrapping_add(e.wrapping_sub(own_ready).max(0));
            } else {
                lag[b] = lag[b].wrapping_add(e.wrapping_sub(r).max(0));
            }
        }
    }
    // the edges by destination (a counting sort keeps each destination's edges in index order,
    // its offsets in the binding arrays, done with), then each destination's few edges by
    // source, stably
    let (off, at) = (&mut bind_start, &mut bind_end);
    off.fill(0);
    for &v in g.dst {
        off[v as usize + 1] += 1;
    }
    for v in 0..n {
        off[v + 1] += off[v];
    }
    at.copy_from_slice(off);
    for k in 0..m {
        let v = g.dst[k] as usize;
        order[at[v] as usize] = k as i32;
        at[v] += 1;
    }
    for v in 0..n {
        let group = &mut order[off[v] as usize..off[v + 1] as usize];
        if group.len() > 1 {
            group.sort_by_key(|&k| g.src[k as usize]); // stable: equal sources stay in index order
        }
    }
    drop(is_sync);
}

/// Calibrate a dependency graph (see `traceanalyzer.analyses.calibration.calibrate`): per node
/// `ts`, `end`, `dur` (int64, node v is index v), per edge `src`, `dst` (int32 node indexes, the
/// graph's index type), `from_start`, `to_end` (uint8). Writes per node its own time into `own`
/// and per edge its lag into `lag` (int64), and the edges' order by (destination, source, index)
/// into `order` (int32), arrays the caller made; `start_first`: the start edges so, then the
/// `to_end` edges so (a stable partition in place).
#[pyfunction]
#[pyo3(signature = (ts, end, dur, src, dst, from_start, to_end, own, lag, order, start_first=false))]
#[allow(clippy::too_many_arguments)]
pub fn calibrate(
    py: Python<'_>,
    ts: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    dur: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    dst: &Bound<'_, PyAny>,
    from_start: &Bound<'_, PyAny>,
    to_end: &Bound<'_, PyAny>,
    own: &Bound<'_, PyAny>,
    lag: &Bound<'_, PyAny>,
    order: &Bound<'_, PyAny>,
    start_first: bool,
) -> PyResult<()> {
    let views = [ts, end, dur, src, dst, from_start, to_end].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let names = ["ts", "end", "dur"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(names.len());
    for (view, name) in views.iter().zip(names) {
        v.push(buffer::i64s(view.bytes(), "calibrate", name)?);
    }
    let g = Graph {
        ts: v[0],
        end: v[1],
        dur: v[2],
        src: buffer::i32s(views[3].bytes(), "calibrate", "src")?,
        dst: buffer::i32s(views[4].bytes(), "calibrate", "dst")?,
        from_start: views[5].bytes(),
        to_end: views[6].bytes(),
    };
    let (n, m) = (g.ts.len(), g.src.len());
    if g.end.len() != n || g.dur.len() != n {
        return Err(err("ts, end and dur need one value per node"));
    }
    if g.dst.len() != m || g.from_start.len() != m || g.to_end.len() != m {
        return Err(err("src, dst, from_start and to_end need one value per edge"));
    }
    if m > i32::MAX as usize || !g.src.iter().chain(g.dst).all(|&x| x >= 0 && (x as usize) < n) {
        return Err(err("an edge's source or destination is not a node"));
    }
    let mut outs = [own, lag, order].iter().map(|o| View::writable(o)).collect::<PyResult<Vec<View>>>()?;
    if !buffer::outputs_apart(&outs, views.iter()) {
        return Err(err("an output shares memory with another array"));
    }
    let [own_v, lag_v, order_v] = &mut outs[..] else { unreachable!() };
    let own = buffer::i64s_mut(own_v.bytes_mut(), "calibrate", "own")?;
    let lag = buffer::i64s_mut(lag_v.bytes_mut(), "calibrate", "lag")?;
    let order = buffer::i32s_mut(order_v.bytes_mut(), "calibrate", "order")?;
    if own.len() != n || lag.len() != m || order.len() != m {
        return Err(err("own needs one value per node, lag and order one per edge"));
    }
    py.allow_threads(|| {
        run(&g, own, lag, order);
        if start_first {
            start_edges_first(order, g.to_end);
        }
    });
    Ok(())
}

/// The edges of `order` with the start edges first and the `to_end` edges after them, each in
/// the order they had: the few `to_end` edges set aside, the others moved up in place (no copy
/// of a million edge indexes).
fn start_edges_first(order: &mut [i32], to_end: &[u8]) {
    let mut late = Vec::new();
    let mut w = 0;
    for r in 0..order.len() {
        let k = order[r];
        if to_end[k as usize] != 0 {
            late.push(k);
        } else {
            order[w] = k;
            w += 1;
        }
    }
    order[w..].copy_from_slice(&late);
}
