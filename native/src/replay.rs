//! The replay loop of `traceanalyzer.analyses.replay` (`_replay` there is the same loop in
//! Python, the fallback): every node starts at the latest of its start edges' ready times and
//! ends after its duration, or, for a sync, at the later of its own time and its `to_end` edges.
//!
//! The graph comes flattened into arrays: times int64, lags and durations int64 or int32 (`lag32`,
//! `dur32`: where every one fits, as the model holds them; 4 MB fewer a replay at 311 MB), every index (the order's items, the edges' sources, the CSR
//! adjacency: per node an offset into the edge indexes of its start edges and of its `to_end`
//! edges) int32, half the memory of the model held for the what-ifs.
//! The schedule is written into two int64 arrays the caller made, and the binding edges into two
//! int32 arrays when asked for (the critical path's walk reads them; a what-if does not). Everything
//! is checked before the loop, which runs with the GIL released and cannot index out of bounds.
//!
//! Two arrays a model holds through every what-if may be left out: the start edges' indexes
//! (`start_idx` None) where the start edges are the first edges, in destination order (then edge
//! j is the j-th start edge), and the captured starts of every node (`ts_nodes`: the nodes whose
//! captured start `ts` holds, sorted) where a node's captured start is read only when none of its
//! start edges is live: the nodes without start edges (a handful), checked before the loop; and
//! the end offsets of every node (`end_nodes`: the syncs, sorted, whose offsets `end_off` holds).

use crate::buffer::{self, View};
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

fn i32s_mut<'a>(b: &'a mut [u8], what: &str) -> PyResult<&'a mut [i32]> {
    buffer::i32s_mut(b, "replay", what)
}

/// Offsets `off` (n + 1, from 0, non-decreasing) into edge indexes `idx` (each < m; None: the
/// identity, the first off[n] edges).
fn check_csr(off: &[i32], idx: Option<&[i32]>, n: usize, m: usize, what: &str) -> PyResult<()> {
    let count = idx.map_or(m, |i| i.len());
    let fits = idx.is_some() && off.len() == n + 1 && off[n] as usize == count;
    let fits = fits || (idx.is_none() && off.len() == n + 1 && off[n] >= 0 && off[n] as usize <= count);
    if !fits || off[0] != 0 || off.windows(2).any(|w| w[1] < w[0]) {
        return Err(err(&format!("{what}: offsets do not index the edges")));
    }
    if idx.is_some_and(|i| i.iter().any(|&k| k < 0 || k as usize >= m)) {
        return Err(err(&format!("{what}: an edge index out of range")));
    }
    Ok(())
}

/// The graph and the changes, borrowed from the arrays; lags of type `L` (i64 or i32).
struct Graph<'a, L> {
    order: &'a [i32],
    ts: &'a [i64],
    ts_nodes: Option<&'a [i32]>,
    src: &'a [i32],
    lag: &'a [L],
    from_start: &'a [u8],
    start_off: &'a [i32],
    start_idx: Option<&'a [i32]>,
    end_off: &'a [i32],
    end_nodes: Option<&'a [i32]>,
    end_idx: &'a [i32],
    dur: Durs<'a>,
    own: &'a [i64],
    cut: Option<&'a [u8]>,
    zero_lag: Option<&'a [u8]>,
}

/// The durations per node, int64 or int32 (`dur32`).
enum Durs<'a> {
    Wide(&'a [i64]),
    Narrow(&'a [i32]),
}

impl Durs<'_> {
    fn len(&self) -> usize {
        match self {
            Durs::Wide(d) => d.len(),
            Durs::Narrow(d) => d.len(),
        }
    }

    #[inline]
    fn at(&self, x: usize) -> i64 {
        match self {
            Durs::Wide(d) => d[x],
            Durs::Narrow(d) => d[x] as i64,
        }
    }
}

/// The schedule: start, end, and when asked for the edge that set each start and the edge that
/// set a sync's end (-1: none).
struct Out<'a> {
    start: &'a mut [i64],
    end: &'a mut [i64],
    binds: Option<(&'a mut [i32], &'a mut [i32])>,
}

/// Sync v's `to_end` edges (their positions in `end_idx`).
fn end_range<L>(g: &Graph<L>, v: usize) -> std::ops::Range<usize> {
    let j = match g.end_nodes {
        None => v,
        Some(ids) => match ids.binary_search(&(v as i32)) {
            Ok(j) => j,
            Err(_) => return 0..0,
        },
    };
    g.end_off[j] as usize..g.end_off[j + 1] as usize
}

/// `sync_ids`: the syncs' nodes in order when `own` has one value per sync (None: per node);
/// `is_sync`: per node whether it is one.
fn run<L: Copy + Into<i64>>(g: &Graph<L>, sync_ids: Option<&[i32]>, is_sync: &[bool], o: &mut Out) {
    let n = g.dur.len();
    let live = |k: usize| g.cut.is_none_or(|c| c[k] == 0);
    let lag = |k: usize| if g.zero_lag.is_some_and(|z| z[k] != 0) { 0 } else { g.lag[k].into() };
    let own = |v: usize| match sync_ids {
        None => g.own[v],
        Some(ids) => ids.binary_search(&(v as i32)).map_or(0, |j| g.own[j]),
    };
    for &x in g.order {
        let x = x as usize;
        if x >= n {
            // a sync's end: its own time, or the GPU work it waits for and its return
            let v = x - n;
            let mut e = o.start[v].wrapping_add(own(v));
            let mut eb = -1i32;
            for &k in &g.end_idx[end_range(g, v)] {
                let k = k as usize;
                if !live(k) {
                    continue;
                }
                let r = o.end[g.src[k] as usize].wrapping_add(lag(k));
                if r > e {
                    e = r;
                    eb = k as i32;
                }
            }
            o.end[v] = e;
            if let Some((_, end_bind)) = o.binds.as_mut() {
                end_bind[v] = eb;
            }
            continue;
        }
        let mut s = 0i64;
        let mut b = -1i32;
        for j in g.start_off[x] as usize..g.start_off[x + 1] as usize {
            let k = g.start_idx.map_or(j, |i| i[j] as usize);
            if !live(k) {
                continue;
            }
            let u = g.src[k] as usize;
            let r = (if g.from_start[k] != 0 { o.start[u] } else { o.end[u] }).wrapping_add(lag(k));
            if b < 0 || r > s {
                s = r;
                b = k as i32;
            }
        }
        if b < 0 {
            // no live start edge: the captured start (checked to be held, `ts_nodes`)
            s = captured(g, x);
        }
        o.start[x] = s;
        if let Some((bind, _)) = o.binds.as_mut() {
            bind[x] = b;
        }
        if !is_sync[x] {
            o.end[x] = s.wrapping_add(g.dur.at(x));
        }
    }
}

/// Node x's captured start: `ts[x]`, or where `ts` holds only the nodes `ts_nodes` its entry
/// there (0 if none: the checks before the loop leave none).
fn captured<L>(g: &Graph<L>, x: usize) -> i64 {
    match g.ts_nodes {
        None => g.ts[x],
        Some(ids) => ids.binary_search(&(x as i32)).map_or(0, |j| g.ts[j]),
    }
}

/// Replay a prepared graph (see `traceanalyzer.analyses.replay`): `order` the items (int32:
/// node v's start, or n + v a sync's end), `ts` captured starts (int64), per edge `src` (int32),
/// `lag` (int64, or int32 with `lag32`), `from_start` (bool), CSR `start_off`/`start_idx` and `end_off`/`end_idx`
/// (int32; `start_idx` None: the start edges are the first edges, edge j the j-th), per node `dur`
/// (int64, or int32 with `dur32`), `own` (int64: per node, or per sync in node order), per edge
/// `cut` (bool) or None, `zero_lag` (bool: the edge's lag taken as 0) or None; writes `start`,
/// `end` (int64 arrays of n) and, unless None, `bind`, `end_bind` (int32 arrays of n).
/// `ts_nodes` (int32, sorted): the nodes whose captured start `ts` holds, in that order (None:
/// `ts` has one per node); every node that has no live start edge must be among them.
/// `end_nodes` (int32, sorted): the syncs, whose `to_end` edges `end_off` gives in that order
/// (each at least one; None: `end_off` has n + 1 offsets, a node with edges is a sync).
#[pyfunction]
#[pyo3(signature = (order, ts, src, lag, from_start, start_off, start_idx, end_off, end_idx, dur, own, cut, start, end, bind, end_bind, zero_lag=None, lag32=false, ts_nodes=None, dur32=false, end_nodes=None))]
#[allow(clippy::too_many_arguments)]
pub fn replay(
    py: Python<'_>,
    order: &Bound<'_, PyAny>,
    ts: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    lag: &Bound<'_, PyAny>,
    from_start: &Bound<'_, PyAny>,
    start_off: &Bound<'_, PyAny>,
    start_idx: Option<&Bound<'_, PyAny>>,
    end_off: &Bound<'_, PyAny>,
    end_idx: &Bound<'_, PyAny>,
    dur: &Bound<'_, PyAny>,
    own: &Bound<'_, PyAny>,
    cut: Option<&Bound<'_, PyAny>>,
    start: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    bind: Option<&Bound<'_, PyAny>>,
    end_bind: Option<&Bound<'_, PyAny>>,
    zero_lag: Option<&Bound<'_, PyAny>>,
    lag32: bool,
    ts_nodes: Option<&Bound<'_, PyAny>>,
    dur32: bool,
    end_nodes: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    // (the optional arrays: an empty array stands in for each left out, so the indexes stay)
    let ins = [order, ts, src, lag, from_start, start_off, start_off, end_off, end_idx, dur, own]
        .iter()
        .map(|o| View::new(o))
        .collect::<PyResult<Vec<View>>>()?;
    let mut ins = ins;
    let start_view = start_idx.map(View::new).transpose()?;
    let ts_view = ts_nodes.map(View::new).transpose()?;
    let syncs_view = end_nodes.map(View::new).transpose()?;
    if let Some(v) = start_view {
        ins[6] = v;
    }
    let cut_view = cut.map(View::new).transpose()?;
    let zero_view = zero_lag.map(View::new).transpose()?;
    let extra = ts_view.iter().chain(syncs_view.iter()).chain(cut_view.iter()).chain(zero_view.iter());
    if bind.is_some() != end_bind.is_some() {
        return Err(err("bind and end_bind are both arrays or both None"));
    }
    let mut outs = [Some(start), Some(end), bind, end_bind]
        .iter()
        .flatten()
        .map(|o| View::writable(o))
        .collect::<PyResult<Vec<View>>>()?;
    if !buffer::outputs_apart(&outs, ins.iter().chain(extra)) {
        return Err(err("an output array shares memory with another array"));
    }
    let opt = Opt { start_idx: start_idx.is_some(), ts_nodes: ts_view.as_ref(), dur32, end_nodes: syncs_view.as_ref() };
    let wide = |i: usize, name: &str| i64s(ins[i].bytes(), name);
    let narrow = |i: usize, name: &str| buffer::i32s(ins[i].bytes(), "replay", name);
    if lag32 {
        let lag = narrow(3, "lag")?;
        return replay_with(py, &ins, lag, &opt, cut_view.as_ref(), zero_view.as_ref(), &mut outs);
    }
    let lag = wide(3, "lag")?;
    replay_with(py, &ins, lag, &opt, cut_view.as_ref(), zero_view.as_ref(), &mut outs)
}

/// What the optional arrays are: whether `start_idx` was given (else its place in `ins` holds
/// `start_off` again, unread), and `ts_nodes`.
struct Opt<'a> {
    start_idx: bool,
    ts_nodes: Option<&'a View>,
    dur32: bool,
    end_nodes: Option<&'a View>,
}

/// `replay` once its lags are read as `L`: the rest of the arrays checked, then the loop.
fn replay_with<L: Copy + Into<i64> + Sync>(
    py: Python<'_>,
    ins: &[View],
    lag: &[L],
    opt: &Opt,
    cut_view: Option<&View>,
    zero_view: Option<&View>,
    outs: &mut [View],
) -> PyResult<()> {
    let wide = |i: usize, name: &str| i64s(ins[i].bytes(), name);
    let narrow = |i: usize, name: &str| buffer::i32s(ins[i].bytes(), "replay", name);
    let g = Graph {
        order: narrow(0, "order")?,
        ts: wide(1, "ts")?,
        ts_nodes: opt.ts_nodes.map(|v| buffer::i32s(v.bytes(), "replay", "ts_nodes")).transpose()?,
        src: narrow(2, "src")?,
        lag,
        from_start: ins[4].bytes(),
        start_off: narrow(5, "start_off")?,
        start_idx: if opt.start_idx { Some(narrow(6, "start_idx")?) } else { None },
        end_off: narrow(7, "end_off")?,
        end_nodes: opt.end_nodes.map(|v| buffer::i32s(v.bytes(), "replay", "end_nodes")).transpose()?,
        end_idx: narrow(8, "end_idx")?,
        dur: if opt.dur32 { Durs::Narrow(narrow(9, "dur")?) } else { Durs::Wide(wide(9, "dur")?) },
        own: wide(10, "own")?,
        cut: cut_view.map(|c| c.bytes()),
        zero_lag: zero_view.map(|z| z.bytes()),
    };
    let (n, m) = (g.start_off.len().saturating_sub(1), g.src.len());
    if g.dur.len() != n {
        return Err(err("dur needs one value per node"));
    }
    match g.ts_nodes {
        None if g.ts.len() != n => return Err(err("ts needs one value per node")),
        Some(ids) if ids.len() != g.ts.len() || ids.windows(2).any(|w| w[1] <= w[0]) => {
            return Err(err("ts_nodes needs one sorted, distinct node per value of ts"));
        }
        Some(ids) if ids.iter().any(|&v| v < 0 || v as usize >= n) => {
            return Err(err("ts_nodes: a node out of range"));
        }
        _ => {}
    }
    let per_edge = |a: Option<&[u8]>| a.is_some_and(|a| a.len() != m);
    if g.lag.len() != m || g.from_start.len() != m || per_edge(g.cut) || per_edge(g.zero_lag) {
        return Err(err("lag, from_start, cut and zero_lag need one value per edge"));
    }
    if 2 * n > i32::MAX as usize || m > i32::MAX as usize {
        return Err(err("the graph has too many nodes or edges for int32 indexes"));
    }
    if g.src.iter().any(|&u| u < 0 || u as usize >= n) {
        return Err(err("an edge's source is not a node"));
    }
    if g.order.iter().any(|&x| x < 0 || x as usize >= 2 * n) {
        return Err(err("an item of the order is not a node's start or end"));
    }
    check_csr(g.start_off, g.start_idx, n, m, "start edges")?;
    match g.end_nodes {
        None => check_csr(g.end_off, Some(g.end_idx), n, m, "end edges")?,
        Some(ids) => {
            check_csr(g.end_off, Some(g.end_idx), ids.len(), m, "end edges")?;
            let sorted = ids.windows(2).all(|w| w[1] > w[0]) && ids.iter().all(|&v| v >= 0 && (v as usize) < n);
            if !sorted || g.end_off.windows(2).any(|w| w[1] <= w[0]) {
                return Err(err("end_nodes needs sorted, distinct nodes, each with an end edge"));
            }
        }
    }
    if let Some(ids) = g.ts_nodes {
        // a node whose start no live edge sets keeps its captured start: it must be held
        let live = |k: usize| g.cut.is_none_or(|c| c[k] == 0);
        let edge = |j: usize| g.start_idx.map_or(j, |i| i[j] as usize);
        let unset = (0..n).find(|&v| {
            !(g.start_off[v] as usize..g.start_off[v + 1] as usize).any(|j| live(edge(j)))
                && ids.binary_search(&(v as i32)).is_err()
        });
        if let Some(v) = unset {
            return Err(err(&format!("node {v} has no live start edge and no captured start in ts")));
        }
    }
    // every node's start once and every sync's end once (the buffers carry no dtype: an int64
    // array where an int32 one belongs fails this or another length check)
    let syncs: Vec<i32> = match g.end_nodes {
        Some(ids) => ids.to_vec(),
        None => (0..n).filter(|&v| g.end_off[v + 1] > g.end_off[v]).map(|v| v as i32).collect(),
    };
    let mut is_sync = vec![false; n];
    for &v in &syncs {
        is_sync[v as usize] = true;
    }
    if g.order.len() != n + syncs.len() || g.order.iter().any(|&x| x as usize >= n && !is_sync[x as usize - n]) {
        return Err(err("the order needs one item per node and one per sync"));
    }
    // own: a sync's own time, read only at a sync's end: one value per node, or one per sync
    let sync_ids: Option<Vec<i32>> = if g.own.len() == n {
        None
    } else if g.own.len() == syncs.len() {
        Some(syncs)
    } else {
        return Err(err("own needs one value per node or one per sync"));
    };
    let (times, binds) = outs.split_at_mut(2);
    let [a, b] = times else { unreachable!() };
    let (start, end) = (i64s_mut(a.bytes_mut(), "start")?, i64s_mut(b.bytes_mut(), "end")?);
    if start.len() != n || end.len() != n {
        return Err(err("start and end need one writable value per node"));
    }
    let binds = match binds {
        [c, d] => {
            let (bind, end_bind) = (i32s_mut(c.bytes_mut(), "bind")?, i32s_mut(d.bytes_mut(), "end_bind")?);
            if bind.len() != n || end_bind.len() != n {
                return Err(err("bind and end_bind need one writable value per node"));
            }
            Some((bind, end_bind))
        }
        _ => None,
    };
    let mut o = Out { start, end, binds };
    py.allow_threads(|| run(&g, sync_ids.as_deref(), &is_sync, &mut o));
    Ok(())
}

/// The node that ends each window of a replay (see `traceanalyzer.analyses.whatif.Model
///._end_nodes`, whose numpy body is the fallback and the reference): per window end `known`
/// (sorted, distinct), of the nodes ending last at or before it, the latest to start, then the
/// lowest; -1: none. One pass over the nodes (each counted into the first window end at or after
/// its own, a binary search of the few ends), then a running best over the windows.
#[pyfunction]
pub fn window_ends(
    py: Python<'_>,
    start: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    known: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let ins = [start, end, known].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let mut outs = [View::writable(out)?];
    if !buffer::outputs_apart(&outs, ins.iter()) {
        return Err(err("window_ends: the output shares memory with another array"));
    }
    let (s, e, known) = (i64s(ins[0].bytes(), "start")?, i64s(ins[1].bytes(), "end")?, i64s(ins[2].bytes(), "known")?);
    let out = i64s_mut(outs[0].bytes_mut(), "out")?;
    if s.len() != e.len() || out.len() != known.len() || known.windows(2).any(|w| w[1] <= w[0]) {
        return Err(err("window_ends: start and end need one value per node, known sorted and distinct, out one per end"));
    }
    py.allow_threads(|| {
        // per window: (end, start, node) of its best node, lexicographically: latest end, then
        // latest start, then lowest node (a node never loses to a later one that ties)
        let mut best: Vec<Option<(i64, i64, usize)>> = vec![None; known.len()];
        for v in 0..e.len() {
            let b = known.partition_point(|&x| x < e[v]);
            if b < known.len() {
                let beats = match best[b] {
                    None => true,
                    Some((be, bs, _)) => e[v] > be || (e[v] == be && s[v] > bs),
                };
                if beats {
                    best[b] = Some((e[v], s[v], v));
                }
            }
        }
        // the latest node end at or before each window end: the best of the last window with one
        // (its ends are later than every earlier window's)
        let mut last: Option<(i64, i64, usize)> = None;
        for (b, o) in out.iter_mut().enumerate() {
            if best[b].is_some() {
                last = best[b];
            }
            *o = last.map_or(-1, |(_, _, v)| v as i64);
        }
    });
    Ok(())
}
