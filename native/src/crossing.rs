//! The CPU events that cross an earlier event on their thread (`traceanalyzer.analyses.health.
//! crossing_events`, whose per-thread sorts are the fallback and the reference): each thread's
//! events in (start, end descending) order, an event crossing when it starts inside the furthest
//! reaching earlier event, or inside the one just before, and ends after it. Here the order is
//! a permutation of u32 positions, bucketed by thread and sorted per thread: 8 bytes an event,
//! where the sorted copies of the columns per thread held ~60 (83 MB of a 1 GB trace's 1.4 M
//! runtime calls).

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use crate::threads::by_thread;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("crossing_events: {what}"))
}

/// How many events (pid, tid, ts, end: int64 each, one per event, no null) start inside an
/// earlier event of their thread and end after it.
#[pyfunction]
pub fn crossing_events(
    py: Python<'_>,
    pid: &Bound<'_, PyAny>,
    tid: &Bound<'_, PyAny>,
    ts: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let ins = [pid, tid, ts, end].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let mut v: Vec<&[i64]> = Vec::with_capacity(4);
    for (view, name) in ins.iter().zip(["pid", "tid", "ts", "end"]) {
        v.push(buffer::i64s(view.bytes(), "crossing_events", name)?);
    }
    let (pid, tid, ts, end) = (v[0], v[1], v[2], v[3]);
    let n = ts.len();
    if pid.len() != n || tid.len() != n || end.len() != n {
        return Err(err("pid, tid, ts and end need one value per event"));
    }
    if n >= u32::MAX as usize {
        return Err(err("more events than u32 positions"));
    }
    Ok(py.allow_threads(|| count(pid, tid, ts, end)))
}

fn count(pid: &[i64], tid: &[i64], ts: &[i64], end: &[i64]) -> u64 {
    let (mut order, start) = by_thread(pid, tid);
    let mut crossing = 0u64;
    for t in 0..start.len() - 1 {
        let mine = &mut order[start[t]..start[t + 1]];
        mine.sort_unstable_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            ts[a].cmp(&ts[b]).then(end[b].cmp(&end[a]))
        });
        let mut furthest: Option<i64> = None; // the furthest end of the earlier events
        let mut prev: Option<i64> = None; // the end of the one just before
        for &i in mine.iter() {
            let (s, e) = (ts[i as usize], end[i as usize]);
            let inside = |x: Option<i64>| x.is_some_and(|x| s < x && x < e);
            if inside(furthest) || inside(prev) {
                crossing += 1;
            }
            furthest = Some(furthest.map_or(e, |f| f.max(e)));
            prev = Some(e);
        }
    }
    crossing
}
