//! The replay loop of `traceanalyzer.analyses.replay` (`_replay` there is the same loop in
//! Python, the fallback): every node starts at the latest of its start edges' ready times and
//! ends after its duration, or, for a sync, at the later of its own time and its `to_end` edges.
//!
//! The graph comes flattened into int64 arrays (CSR adjacency: per node an offset into the edge
//! indexes of its start edges and of its `to_end` edges); the schedule is written into four
//! int64 arrays the caller made. Everything is checked before the loop, which runs with the GIL
//! released and cannot index out of bounds.

use crate::buffer::{self, disjoint, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("replay: {what}"))
}

fn i64s<'a>(b: &'a [u8], what: &str) -> PyResult<&'a [i64]> {
    buffer::i64s(b, "replay", what)
}

fn i64s_mut<'a>(b: &'a mut [u8], what: &str) -> PyResult<&'a mut [i64]> {
    buffer::i64s_mut(b, "replay", what)
}

/// Offsets `off` (n + 1, from 0, non-decreasing) into edge indexes `idx` (each < m).
fn check_csr(off: &[i64], idx: &[i64], n: usize, m: usize, what: &str) -> PyResult<()> {
    if off.len() != n + 1 || off[0] != 0 || off[n] as usize != idx.len() || off.windows(2).any(|w| w[1] < w[0]) {
        return Err(err(&format!("{what}: offsets do not index the edges")));
    }
    if idx.iter().any(|&k| k < 0 || k as usize >= m) {
        return Err(err(&format!("{what}: an edge index out of range")));
    }
    Ok(())
}

/// The graph and the changes, borrowed from the arrays.
struct Graph<'a> {
    order: &'a [i64],
    ts: &'a [i64],
    src: &'a [i64],
    lag: &'a [i64],
    from_start: &'a [u8],
    start_off: &'a [i64],
    start_idx: &'a [i64],
    end_off: &'a [i64],
    end_idx: &'a [i64],
    dur: &'a [i64],
    own: &'a [i64],
    cut: Option<&'a [u8]>,
}

/// The schedule: start, end, the edge that set each start, the edge that set a sync's end.
struct Out<'a> {
    start: &'a mut [i64],
    end: &'a mut [i64],
    bind: &'a mut [i64],
    end_bind: &'a mut [i64],
}

fn run(g: &Graph, o: &mut Out) {
    let n = g.ts.len();
    let live = |k: usize| g.cut.is_none_or(|c| c[k] == 0);
    for &x in g.order {
        let x = x as usize;
        if x >= n {
            // a sync's end: its own time, or the GPU work it waits for and its return
            let v = x - n;
            let mut e = o.start[v].wrapping_add(g.own[v]);
            let mut eb = -1i64;
            for &k in &g.end_idx[g.end_off[v] as usize..g.end_off[v + 1] as usize] {
                let k = k as usize;
                if !live(k) {
                    continue;
                }
                let r = o.end[g.src[k] as usize].wrapping_add(g.lag[k]);
                if r > e {
                    e = r;
                    eb = k as i64;
                }
            }
            o.end[v] = e;
            o.end_bind[v] = eb;
            continue;
        }
        let mut s = g.ts[x];
        let mut b = -1i64;
        for &k in &g.start_idx[g.start_off[x] as usize..g.start_off[x + 1] as usize] {
            let k = k as usize;
            if !live(k) {
                continue;
            }
            let u = g.src[k] as usize;
            let r = (if g.from_start[k] != 0 { o.start[u] } else { o.end[u] }).wrapping_add(g.lag[k]);
            if b < 0 || r > s {
                s = r;
                b = k as i64;
            }
        }
        o.start[x] = s;
        o.bind[x] = b;
        if g.end_off[x] == g.end_off[x + 1] {
            o.end[x] = s.wrapping_add(g.dur[x]);
        }
    }
}

/// Replay a prepared graph (see `traceanalyzer.analyses.replay`): `order` the items (node v's
/// start, or n + v a sync's end), `ts` captured starts, per edge `src`, `lag`, `from_start`
/// (bool), CSR `start_off`/`start_idx` and `end_off`/`end_idx`, per node `dur` and `own`, per
/// edge `cut` (bool) or None; writes `start`, `end`, `bind`, `end_bind` (int64 arrays of n).
#[pyfunction]
#[pyo3(signature = (order, ts, src, lag, from_start, start_off, start_idx, end_off, end_idx, dur, own, cut, start, end, bind, end_bind))]
#[allow(clippy::too_many_arguments)]
pub fn replay(
    py: Python<'_>,
    order: &Bound<'_, PyAny>,
    ts: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    lag: &Bound<'_, PyAny>,
    from_start: &Bound<'_, PyAny>,
    start_off: &Bound<'_, PyAny>,
    start_idx: &Bound<'_, PyAny>,
    end_off: &Bound<'_, PyAny>,
    end_idx: &Bound<'_, PyAny>,
    dur: &Bound<'_, PyAny>,
    own: &Bound<'_, PyAny>,
    cut: Option<&Bound<'_, PyAny>>,
    start: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    bind: &Bound<'_, PyAny>,
    end_bind: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let ins = [order, ts, src, lag, from_start, start_off, start_idx, end_off, end_idx, dur, own]
        .iter()
        .map(|o| View::new(o))
        .collect::<PyResult<Vec<View>>>()?;
    let cut_view = cut.map(View::new).transpose()?;
    let mut outs = [start, end, bind, end_bind].iter().map(|o| View::writable(o)).collect::<PyResult<Vec<View>>>()?;
    // the outputs are written while the inputs are read: no two may share memory
    for (i, a) in outs.iter().enumerate() {
        let others = outs.iter().skip(i + 1).chain(ins.iter()).chain(cut_view.iter());
        if others.into_iter().any(|b| !disjoint(a.bytes(), b.bytes())) {
            return Err(err("an output array shares memory with another array"));
        }
    }
    let names = ["order", "ts", "src", "lag", "", "start_off", "start_idx", "end_off", "end_idx", "dur", "own"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(ins.len());
    for (view, name) in ins.iter().zip(names) {
        v.push(if name.is_empty() { &[] } else { i64s(view.bytes(), name)? });
    }
    let g = Graph {
        order: v[0],
        ts: v[1],
        src: v[2],
        lag: v[3],
        from_start: ins[4].bytes(),
        start_off: v[5],
        start_idx: v[6],
        end_off: v[7],
        end_idx: v[8],
        dur: v[9],
        own: v[10],
        cut: cut_view.as_ref().map(|c| c.bytes()),
    };
    let (n, m) = (g.ts.len(), g.src.len());
    if g.dur.len() != n || g.own.len() != n {
        return Err(err("dur and own need one value per node"));
    }
    if g.lag.len() != m || g.from_start.len() != m || g.cut.is_some_and(|c| c.len() != m) {
        return Err(err("lag, from_start and cut need one value per edge"));
    }
    if g.src.iter().any(|&u| u < 0 || u as usize >= n) {
        return Err(err("an edge's source is not a node"));
    }
    if g.order.iter().any(|&x| x < 0 || x as usize >= 2 * n) {
        return Err(err("an item of the order is not a node's start or end"));
    }
    check_csr(g.start_off, g.start_idx, n, m, "start edges")?;
    check_csr(g.end_off, g.end_idx, n, m, "end edges")?;
    let [a, b, c, d] = &mut outs[..] else { unreachable!() };
    let mut o = Out {
        start: i64s_mut(a.bytes_mut(), "start")?,
        end: i64s_mut(b.bytes_mut(), "end")?,
        bind: i64s_mut(c.bytes_mut(), "bind")?,
        end_bind: i64s_mut(d.bytes_mut(), "end_bind")?,
    };
    if [o.start.len(), o.end.len(), o.bind.len(), o.end_bind.len()].iter().any(|&l| l != n) {
        return Err(err("start, end, bind and end_bind need one writable value per node"));
    }
    py.allow_threads(|| run(&g, &mut o));
    Ok(())
}
