//! The critical path's walk of `traceanalyzer.analyses.critical_path` (`_walk_py` there is the
//! same loop in Python, the fallback and the reference): from the node that ends each step
//! window, back through the edge that bound each node's start (or a sync's end) in a replay,
//! appending one segment per stretch of the chain.
//!
//! Everything is checked before the loop (every node and edge index in range), which runs with
//! the GIL released and cannot index out of bounds. The segments come back as six int64 arrays
//! (native-endian bytes): window, kind code (-1: the node's own kind), the node it is named after
//! (-1: none), the lane's node, start, end; appended walking back, so reversed per window.
//!
//! Also `innermost`: the innermost call or op around each slice of the graph (see
//! `traceanalyzer.analyses.thread_clock.ThreadClock.innermost`), and `covered_until`: the time a
//! layer covers up to each slice boundary (`ThreadClock.until`); each a merge of two sorted key
//! arrays.

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("walk: {what}"))
}

fn i64s<'a>(b: &'a [u8], what: &str) -> PyResult<&'a [i64]> {
    buffer::i64s(b, "walk", what)
}

// Segment kinds (critical_path.SEG_KINDS) and the wait an edge stands for (critical_path.WAIT_KINDS).
const SYNC: i64 = 0;
const COLLECTIVE: i64 = 1;
const PEER_WAIT: i64 = 2;
const LAUNCH: i64 = 3;
const GPU_WAIT: i64 = 4;
const THREAD_WAIT: i64 = 5;
const UNTRACED: i64 = 6;
const WAIT_LAUNCH: u8 = 1;
const WAIT_GPU: u8 = 2;
const WAIT_THREAD: u8 = 3;

struct Segments {
    w: Vec<i64>,
    kind: Vec<i64>,
    named: Vec<i64>,
    lane: Vec<i64>,
    a: Vec<i64>,
    b: Vec<i64>,
}

impl Segments {
    /// Append [a, c] (clipped to the window) walking back; the new cursor.
    #[allow(clippy::too_many_arguments)]
    fn emit(&mut self, window: i64, c: i64, ws: i64, kind: i64, name: i64, lane: i64, a: i64) -> i64 {
        let a = a.min(c).max(ws);
        if a < c {
            self.w.push(window);
            self.kind.push(kind);
            self.named.push(name);
            self.lane.push(lane);
            self.a.push(a);
            self.b.push(c);
        }
        a
    }
}

struct Walk<'a> {
    ws: &'a [i64],
    we: &'a [i64],
    end_nodes: &'a [i64],
    coll_wait: &'a [u8],
    wait: &'a [i64],
    wait_code: &'a [u8],
    start: &'a [i64],
    end: &'a [i64],
    bind: &'a [i32],
    end_bind: &'a [i32],
    src: &'a [i32],
    from_start: &'a [u8],
    end_off: Option<&'a [i32]>,
}

fn run(g: &Walk) -> Segments {
    let n = g.start.len();
    let guard_max = 2 * n + 2;
    let mut out = Segments { w: vec![], kind: vec![], named: vec![], lane: vec![], a: vec![], b: vec![] };
    for (w, ((&ws, &we), &v0)) in g.ws.iter().zip(g.we).zip(g.end_nodes).enumerate() {
        let w = w as i64;
        let mut c = we;
        let mut v = v0;
        let mut guard = 0usize;
        let mut at_start = false; // arrived at v's start (through a launch), not at its end
        while v >= 0 && c > ws && guard < guard_max {
            guard += 1;
            let x = v as usize;
            // (without `end_off`, `end_bind` alone says it: -1 but at a sync set by an edge)
            let is_sync = g.end_off.is_none_or(|off| off[x + 1] > off[x]);
            let eb = if !at_start && is_sync { g.end_bind[x] } else { -1 };
            if eb >= 0 {
                // the call returned after the GPU work it waited for: its wait is the GPU's time
                let u = g.src[eb as usize] as i64;
                c = out.emit(w, c, ws, SYNC, v, v, g.end[u as usize]);
                v = u;
                at_start = false;
                continue;
            }
            if g.coll_wait[x] != 0 {
                c = out.emit(w, c, ws, COLLECTIVE, v, v, g.start[x].wrapping_add(g.wait[x]));
                c = out.emit(w, c, ws, PEER_WAIT, v, v, g.start[x]);
            } else {
                c = out.emit(w, c, ws, -1, v, v, g.start[x]);
            }
            let b = g.bind[x];
            if b < 0 {
                break;
            }
            let b = b as usize;
            let u = g.src[b] as i64;
            let fs = g.from_start[b] != 0;
            let reference = if fs { g.start[u as usize] } else { g.end[u as usize] };
            match g.wait_code[b] {
                WAIT_LAUNCH => c = out.emit(w, c, ws, LAUNCH, u, u, reference),
                WAIT_GPU => c = out.emit(w, c, ws, GPU_WAIT, v, v, reference),
                WAIT_THREAD => c = out.emit(w, c, ws, THREAD_WAIT, u, v, reference),
                _ => {}
            }
            v = u;
            at_start = fs;
        }
        if c > ws {
            // nothing recorded before: the thread's time before its first event
            out.emit(w, c, ws, UNTRACED, -1, -1, ws);
        }
    }
    out
}

fn as_bytes<'py>(py: Python<'py>, v: &[i64]) -> Bound<'py, PyBytes> {
    // SAFETY: an i64 slice is plain bytes, 8 per value.
    let b = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) };
    PyBytes::new(py, b)
}

/// Walk the critical path of each window (see `traceanalyzer.analyses.critical_path`): windows
/// `ws`/`we` and the node that ends each (`end_nodes`, -1: none); per node `coll_wait` (bool: a
/// collective that waited for peers), `wait` (its wait), the schedule's `start`, `end`, `bind`,
/// `end_bind`, and `end_off` (n + 1: a node with `to_end` edges is a sync; None: a node whose
/// `end_bind` is an edge, as the replay writes it for a sync alone); per edge
/// `wait_code` (uint8: 0 none, 1 launch, 2 gpu_wait, 3 thread_wait), `src`, `from_start`
/// (bool); the indexes (`bind`, `end_bind`, `src`, `end_off`) int32, as the replay keeps them,
/// the rest int64 (`coll_wait`, `wait_code`, `from_start` bytes). Returns the six segment arrays as bytes (w, kind, named, lane, a, b).
#[pyfunction]
#[pyo3(signature = (ws, we, end_nodes, coll_wait, wait, wait_code, start, end, bind, end_bind, src, from_start, end_off))]
#[allow(clippy::too_many_arguments)]
pub fn walk<'py>(
    py: Python<'py>,
    ws: &Bound<'py, PyAny>,
    we: &Bound<'py, PyAny>,
    end_nodes: &Bound<'py, PyAny>,
    coll_wait: &Bound<'py, PyAny>,
    wait: &Bound<'py, PyAny>,
    wait_code: &Bound<'py, PyAny>,
    start: &Bound<'py, PyAny>,
    end: &Bound<'py, PyAny>,
    bind: &Bound<'py, PyAny>,
    end_bind: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    from_start: &Bound<'py, PyAny>,
    end_off: Option<&Bound<'py, PyAny>>,
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let off_view = end_off.map(View::new).transpose()?;
    let views = [ws, we, end_nodes, coll_wait, wait, wait_code, start, end, bind, end_bind, src, from_start]
        .iter()
        .map(|o| View::new(o))
        .collect::<PyResult<Vec<View>>>()?;
    let wide = |i: usize, name: &str| i64s(views[i].bytes(), name);
    let narrow = |i: usize, name: &str| buffer::i32s(views[i].bytes(), "walk", name);
    let g = Walk {
        ws: wide(0, "ws")?,
        we: wide(1, "we")?,
        end_nodes: wide(2, "end_nodes")?,
        coll_wait: views[3].bytes(),
        wait: wide(4, "wait")?,
        wait_code: views[5].bytes(),
        start: wide(6, "start")?,
        end: wide(7, "end")?,
        bind: narrow(8, "bind")?,
        end_bind: narrow(9, "end_bind")?,
        src: narrow(10, "src")?,
        from_start: views[11].bytes(),
        end_off: off_view.as_ref().map(|v| buffer::i32s(v.bytes(), "walk", "end_off")).transpose()?,
    };
    let (n, m) = (g.start.len(), g.src.len());
    if g.we.len() != g.ws.len() || g.end_nodes.len() != g.ws.len() {
        return Err(err("ws, we and end_nodes need one value per window"));
    }
    if [g.coll_wait.len(), g.wait.len(), g.end.len(), g.bind.len(), g.end_bind.len()].iter().any(|&l| l != n)
        || g.end_off.is_some_and(|off| off.len() != n + 1)
    {
        return Err(err("coll_wait, wait, end, bind, end_bind need one value per node, end_off n + 1"));
    }
    if g.wait_code.len() != m || g.from_start.len() != m {
        return Err(err("wait_code and from_start need one value per edge"));
    }
    let node = |x: i64| x >= 0 && (x as usize) < n;
    let edge = |k: i32| k < 0 || (k as usize) < m; // -1: none
    if !g.end_nodes.iter().all(|&x| x < 0 || node(x)) || !g.src.iter().all(|&u| node(u as i64)) {
        return Err(err("a window's end node or an edge's source is not a node"));
    }
    if !g.bind.iter().chain(g.end_bind).all(|&k| edge(k)) {
        return Err(err("a binding edge is not an edge"));
    }
    let out = py.allow_threads(|| run(&g));
    Ok([&out.w, &out.kind, &out.named, &out.lane, &out.a, &out.b].iter().map(|v| as_bytes(py, v)).collect())
}

/// Per point (sorted keys `skey`, ends `send`), the innermost interval containing it, as
/// `links.innermost_containing` and `ThreadClock.innermost` find it: the last interval (sorted
/// keys `ikey` with their ids `icand`, innermost last among equal keys) starting at or before the
/// point on its thread (`key / span` is the thread), then up its parents (`ids` sorted, with
/// `end` and `parent`, -1: none) while it ended before the point, at most `levels` times; -1:
/// none. One pass over both sorted key arrays (a merge, not a binary search per point). `out`
/// int64, or int32 where the ids are (every id must fit: the graph holds them so, and a cast of
/// the int64 result was a pass more per table).
#[pyfunction]
#[pyo3(signature = (skey, send, ikey, icand, span, ids, end, parent, levels, out))]
#[allow(clippy::too_many_arguments)]
pub fn innermost(
    py: Python<'_>,
    skey: &Bound<'_, PyAny>,
    send: &Bound<'_, PyAny>,
    ikey: &Bound<'_, PyAny>,
    icand: &Bound<'_, PyAny>,
    span: i64,
    ids: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    parent: &Bound<'_, PyAny>,
    levels: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let views = [skey, send, ikey, icand, ids, end, parent].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let names = ["skey", "send", "ikey", "icand", "ids", "end", "parent"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(views.len());
    for (view, name) in views.iter().zip(names) {
        v.push(i64s(view.bytes(), name)?);
    }
    let (skey, send, ikey, icand, ids, end, parent) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    let mut out_view = View::writable(out)?;
    if !buffer::outputs_apart(std::slice::from_ref(&out_view), views.iter()) {
        return Err(err("out shares memory with an input"));
    }
    let n = skey.len();
    let narrow = n > 0 && out_view.bytes().len() == n * 4;
    let mut out = if narrow {
        Out::I32(buffer::i32s_mut(out_view.bytes_mut(), "walk", "out")?)
    } else {
        Out::I64(i64s_mut(out_view.bytes_mut(), "out")?)
    };
    let out_len = match &out {
        Out::I32(o) => o.len(),
        Out::I64(o) => o.len(),
    };
    if send.len() != n || out_len != n || icand.len() != ikey.len() {
        return Err(err("skey, send and out need one value per point, icand one per interval key"));
    }
    let fits = |x: &i64| i32::try_from(*x).is_ok();
    if narrow && !(ids.first().is_none_or(fits) && ids.last().is_none_or(fits)) {
        return Err(err("an int32 out needs every id to fit in int32"));
    }
    if end.len() != ids.len() || parent.len() != ids.len() || span <= 0 {
        return Err(err("ids, end and parent need one value per interval, span > 0"));
    }
    let sorted = |a: &[i64]| ascending(a, false);
    if !sorted(skey) || !sorted(ikey) || !ascending(ids, true) {
        return Err(err("skey and ikey must be sorted, ids sorted and distinct"));
    }
    py.allow_threads(|| {
        // ids 0..m-1 are their own positions: no search
        let rownum = ids.first().is_none_or(|&f| f == 0) && ids.last().is_none_or(|&l| l == ids.len() as i64 - 1);
        let find = |c: i64| -> Option<usize> {
            if rownum {
                (c >= 0 && (c as usize) < ids.len()).then_some(c as usize)
            } else {
                ids.binary_search(&c).ok()
            }
        };
        let mut j = 0usize;
        for i in 0..n {
            while j < ikey.len() && ikey[j] <= skey[i] {
                j += 1;
            }
            let mut found = -1;
            // (j == 0 or another thread's key: nothing starts before the point on its thread)
            if j > 0 && ikey[j - 1].div_euclid(span) == skey[i].div_euclid(span) {
                let mut c = icand[j - 1];
                for _ in 0..levels {
                    let Some(p) = find(c) else { break };
                    if end[p] >= send[i] {
                        found = c;
                        break;
                    }
                    c = parent[p];
                    if c < 0 {
                        break;
                    }
                }
            }
            match &mut out {
                Out::I32(o) => o[i] = found as i32, // (an id: checked to fit above)
                Out::I64(o) => o[i] = found,
            }
        }
    });
    Ok(())
}

/// `innermost`'s output, of either width.
enum Out<'a> {
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
}

fn i64s_mut<'a>(b: &'a mut [u8], what: &str) -> PyResult<&'a mut [i64]> {
    buffer::i64s_mut(b, "walk", what)
}

/// Per query (sorted keys `q` on the graph's clock, `t` its instant), the time a coverage index
/// covers up to it, as `ThreadClock.until` counts it: the last interval starting at or before
/// the query (sorted start keys `ikey`) on its thread (`ith`, the query's is `q / span`) gives
/// `before + min(t, end) - start`, else 0. One merge of the two sorted key arrays.
#[pyfunction]
#[pyo3(signature = (q, t, ikey, ith, istart, iend, ibefore, span, out))]
#[allow(clippy::too_many_arguments)]
pub fn covered_until(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    t: &Bound<'_, PyAny>,
    ikey: &Bound<'_, PyAny>,
    ith: &Bound<'_, PyAny>,
    istart: &Bound<'_, PyAny>,
    iend: &Bound<'_, PyAny>,
    ibefore: &Bound<'_, PyAny>,
    span: i64,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let views = [q, t, ikey, ith, istart, iend, ibefore].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let names = ["q", "t", "ikey", "ith", "istart", "iend", "ibefore"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(views.len());
    for (view, name) in views.iter().zip(names) {
        v.push(i64s(view.bytes(), name)?);
    }
    let (q, t, ikey, ith, istart, iend, ibefore) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    let mut out_view = View::writable(out)?;
    if !buffer::outputs_apart(std::slice::from_ref(&out_view), views.iter()) {
        return Err(err("out shares memory with an input"));
    }
    let out = i64s_mut(out_view.bytes_mut(), "out")?;
    if t.len() != q.len() || out.len() != q.len() {
        return Err(err("q, t and out need one value per query"));
    }
    let m = ikey.len();
    if ith.len() != m || istart.len() != m || iend.len() != m || ibefore.len() != m || span <= 0 {
        return Err(err("ikey, ith, istart, iend and ibefore need one value per interval, span > 0"));
    }
    let sorted = |a: &[i64]| ascending(a, false);
    if !sorted(q) || !sorted(ikey) {
        return Err(err("q and ikey must be sorted"));
    }
    py.allow_threads(|| {
        let mut j = 0usize;
        for i in 0..q.len() {
            while j < m && ikey[j] <= q[i] {
                j += 1;
            }
            out[i] = if j > 0 && ith[j - 1] == q[i].div_euclid(span) {
                let p = j - 1;
                ibefore[p].wrapping_add(t[i].min(iend[p])).wrapping_sub(istart[p])
            } else {
                0
            };
        }
    });
    Ok(())
}

/// Whether `a` never decreases (`strict`: always increases). Every pair is compared, without an
/// early exit, so that the loop vectorises (`windows(2).all` went pair by pair: ~30 M
/// instructions for the checks of `innermost`'s keys at 311 MB).
pub(crate) fn ascending(a: &[i64], strict: bool) -> bool {
    if a.len() < 2 {
        return true;
    }
    let pairs = a[..a.len() - 1].iter().zip(&a[1..]);
    let bad = if strict {
        pairs.fold(0u8, |bad, (p, q)| bad | u8::from(q <= p))
    } else {
        pairs.fold(0u8, |bad, (p, q)| bad | u8::from(q < p))
    };
    bad == 0
}
