//! Rows bucketed by their thread: the numbering and counting sort `crossing` and `nest` share.

use std::collections::HashMap;

/// The rows' positions grouped by thread ((`g0`, `g1`) pairs, numbered by first sight), each
/// thread's in row order, and where each thread's run starts (one more entry than threads):
/// thread t's rows are `order[start[t]..start[t + 1]]`. 8 bytes a row while it runs, 4 kept.
pub fn by_thread(g0: &[i64], g1: &[i64]) -> (Vec<u32>, Vec<usize>) {
    let mut number: HashMap<(i64, i64), u32> = HashMap::new();
    let thread: Vec<u32> = g0
        .iter()
        .zip(g1)
        .map(|(&a, &b)| {
            let next = number.len() as u32;
            *number.entry((a, b)).or_insert(next)
        })
        .collect();
    let threads = number.len();
    drop(number);
    let mut start = vec![0usize; threads + 1];
    for &t in &thread {
        start[t as usize + 1] += 1;
    }
    for t in 0..threads {
        start[t + 1] += start[t];
    }
    let mut fill = start.clone();
    let mut order = vec![0u32; thread.len()];
    for (i, &t) in thread.iter().enumerate() {
        order[fill[t as usize]] = i as u32;
        fill[t as usize] += 1;
    }
    (order, start)
}
