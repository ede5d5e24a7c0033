//! The innermost interval containing each point on its thread (`traceanalyzer.links.
//! innermost_containing`, whose numpy version `_innermost_small` and polars version are the
//! fallback and the reference): the last interval of the point's thread, in (start, end
//! descending, depth, id) order, starting at or before the point; while it ends before the
//! point does, its parent (an id not among the intervals ends the climb: none). Here the
//! intervals are a permutation sorted per thread and the points binary-search it: 4-8 bytes an
//! interval and 9 a point, where the polars version's sorted copies and as-of join held ~80
//! (a 1 GB trace's 1.3 M runtime calls in its 1 M ops: +117 MB at the load's peak).

use crate::buffer::{self, View};
use crate::threads::by_thread;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("innermost_containing: {what}"))
}

/// For each point (`pg0`, `pg1`: its thread; `pts`, `pend`), fill `out` with the id of its
/// innermost containing interval (`ig0`, `ig1`, `its`, `iend`, `depth` (empty: none), `ids`
/// (distinct), `parent` (an id, where `has_parent` is non-zero)) and `found` (0: none).
/// `climbs`: at most this many steps up. int64 columns but `has_parent` and `found` (uint8).
/// False (nothing decided) where two intervals have one id.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn innermost_containing(
    py: Python<'_>,
    pg0: &Bound<'_, PyAny>,
    pg1: &Bound<'_, PyAny>,
    pts: &Bound<'_, PyAny>,
    pend: &Bound<'_, PyAny>,
    ig0: &Bound<'_, PyAny>,
    ig1: &Bound<'_, PyAny>,
    its: &Bound<'_, PyAny>,
    iend: &Bound<'_, PyAny>,
    depth: &Bound<'_, PyAny>,
    ids: &Bound<'_, PyAny>,
    parent: &Bound<'_, PyAny>,
    has_parent: &Bound<'_, PyAny>,
    climbs: usize,
    out: &Bound<'_, PyAny>,
    found: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let ins = [pg0, pg1, pts, pend, ig0, ig1, its, iend, depth, ids, parent, has_parent]
        .iter()
        .map(|o| View::new(o))
        .collect::<PyResult<Vec<View>>>()?;
    let mut outs = [View::writable(out)?, View::writable(found)?];
    if !buffer::outputs_apart(&outs, ins.iter()) {
        return Err(err("an output shares memory with an input or the other output"));
    }
    let names = ["pg0", "pg1", "pts", "pend", "ig0", "ig1", "its", "iend", "depth", "ids", "parent"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(names.len());
    for (view, name) in ins.iter().zip(names) {
        v.push(buffer::i64s(view.bytes(), "innermost_containing", name)?);
    }
    let has_parent = ins[11].bytes();
    let [out_view, found_view] = &mut outs;
    let out = buffer::i64s_mut(out_view.bytes_mut(), "innermost_containing", "out")?;
    let found = found_view.bytes_mut();
    let (np, ni) = (v[2].len(), v[6].len());
    let point_cols = v[..4].iter().all(|c| c.len() == np) && out.len() == np && found.len() == np;
    let interval_cols = [4, 5, 7, 9, 10].iter().all(|&k| v[k].len() == ni) && has_parent.len() == ni;
    if !point_cols || !interval_cols || !(v[8].is_empty() || v[8].len() == ni) {
        return Err(err("each column needs one value per point or per interval (depth: or none)"));
    }
    if ni >= u32::MAX as usize {
        return Err(err("more intervals than u32 positions"));
    }
    let points = Points { g0: v[0], g1: v[1], ts: v[2], end: v[3] };
    let intervals = Intervals { g0: v[4], g1: v[5], ts: v[6], end: v[7], depth: v[8], ids: v[9], parent: v[10], has_parent };
    Ok(py.allow_threads(|| find(&points, &intervals, climbs, out, found)))
}

struct Points<'a> {
    g0: &'a [i64],
    g1: &'a [i64],
    ts: &'a [i64],
    end: &'a [i64],
}

struct Intervals<'a> {
    g0: &'a [i64],
    g1: &'a [i64],
    ts: &'a [i64],
    end: &'a [i64],
    depth: &'a [i64],
    ids: &'a [i64],
    parent: &'a [i64],
    has_parent: &'a [u8],
}

fn find(p: &Points, iv: &Intervals, climbs: usize, out: &mut [i64], found: &mut [u8]) -> bool {
    // the intervals by id, to climb: in place where the ids are in order (row numbers)
    let sorted_ids = iv.ids.windows(2).all(|w| w[0] < w[1]);
    let by_id: Vec<u32> = if sorted_ids {
        Vec::new()
    } else {
        let mut o: Vec<u32> = (0..iv.ids.len() as u32).collect();
        o.sort_unstable_by_key(|&r| iv.ids[r as usize]);
        if o.windows(2).any(|w| iv.ids[w[0] as usize] == iv.ids[w[1] as usize]) {
            return false;
        }
        o
    };
    let row_of = |id: i64| -> Option<usize> {
        if sorted_ids {
            iv.ids.binary_search(&id).ok()
        } else {
            by_id.binary_search_by_key(&id, |&r| iv.ids[r as usize]).ok().map(|k| by_id[k] as usize)
        }
    };
    // each thread's intervals in (start, end descending, depth, id) order: the innermost of
    // those starting together last
    let (mut order, start) = by_thread(iv.g0, iv.g1);
    let mut thread_of: HashMap<(i64, i64), usize> = HashMap::new();
    for t in 0..start.len() - 1 {
        let mine = &mut order[start[t]..start[t + 1]];
        let deep = |r: usize| if iv.depth.is_empty() { 0 } else { iv.depth[r] };
        mine.sort_unstable_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            iv.ts[a].cmp(&iv.ts[b]).then(iv.end[b].cmp(&iv.end[a])).then(deep(a).cmp(&deep(b))).then(iv.ids[a].cmp(&iv.ids[b]))
        });
        let first = mine[0] as usize;
        thread_of.insert((iv.g0[first], iv.g1[first]), t);
    }
    for i in 0..p.ts.len() {
        found[i] = 0;
        out[i] = 0;
        let Some(&t) = thread_of.get(&(p.g0[i], p.g1[i])) else { continue };
        let mine = &order[start[t]..start[t + 1]];
        let k = mine.partition_point(|&r| iv.ts[r as usize] <= p.ts[i]);
        if k == 0 {
            continue;
        }
        let mut row = mine[k - 1] as usize;
        for _ in 0..climbs {
            if iv.end[row] >= p.end[i] {
                out[i] = iv.ids[row];
                found[i] = 1;
                break;
            }
            if iv.has_parent[row] == 0 {
                break;
            }
            match row_of(iv.parent[row]) {
                Some(r) => row = r,
                None => break, // a dangling parent
            }
        }
    }
    true
}
