//! Checks that an exercise's working memory does not grow with the sequence the way a score
//! matrix would, measured with the counting allocator (`reference::memory`). The hidden test
//! binaries of the exercises that state such a rule install it as their global allocator.

use reference::memory::{count_this_thread, peak_bytes_during};

/// The two sequence lengths compared (`Nq = Nkv`): a score matrix is 64 times larger at the
/// second. `SHORT` is one whole tile, so the tiles themselves are the same size at both.
pub const SHORT: usize = 128;
/// See [`SHORT`].
pub const LONG: usize = 1024;
/// Tiles of `TILE x TILE` for both runs.
pub const TILE: usize = 128;
/// The head dimension of both runs.
pub const HEAD_DIM: usize = 8;

/// How much working memory may grow from `SHORT` to `LONG`: four f32 vectors of `D` numbers per
/// query row (room for the backward pass's `D_i`, a separate `dQ` accumulator, a copy of a
/// row of `Q`), plus 4 KiB of slack for small bookkeeping. A slab of scores per query tile
/// (`Br x N`) grows about four times faster, a score matrix (`N x N`) thirty times.
pub fn allowed_growth() -> usize {
    4 * HEAD_DIM * size_of::<f32>() * (LONG - SHORT) + 4096
}

/// Peak heap bytes while `run` runs, beyond the bytes of its result (`output_bytes`): the
/// smallest of three runs, so that what a first call makes once (a thread-local cache, say) is
/// not taken for working memory. The calling thread is counted, and rayon's threads where
/// [`count_rayon_workers`] ran first (what a `par_iter` inside a solution allocates); no other
/// thread of the process (`reference::memory`).
pub fn working_bytes<R>(
    run: impl Fn() -> Result<R, String>,
    output_bytes: impl Fn(&R) -> usize,
) -> Result<usize, String> {
    let mut smallest = usize::MAX;
    for _ in 0..3 {
        let (result, peak) = peak_bytes_during(&run).map_err(|e| e.to_string())?;
        let result = result?;
        smallest = smallest.min(peak.saturating_sub(output_bytes(&result)));
    }
    Ok(smallest)
}

/// Makes rayon's global pool count its threads' allocations, so that a solution that runs its
/// work on them is measured whole. Called first thing by the hidden tests and the self-check:
/// the pool is built once per process, so a later call (the pool already built) changes
/// nothing. The checks run one at a time, so these threads work only for the call measured.
pub fn count_rayon_workers() {
    let counted = rayon::ThreadPoolBuilder::new().start_handler(|_| count_this_thread());
    // An error means the pool exists already; its threads then stay uncounted.
    let _ = counted.build_global();
}

/// `working(n)` (working bytes for sequences of `n`) must not grow by more than
/// [`allowed_growth`] from `SHORT` to `LONG`. `setup` says what was run, for the message.
pub fn check_working_memory(
    setup: &str,
    working: impl Fn(usize) -> Result<usize, String>,
) -> Result<(), String> {
    let (short, long) = (working(SHORT)?, working(LONG)?);
    if long <= short + allowed_growth() {
        Ok(())
    } else {
        Err(format!(
            "{setup}: working memory beyond the output was {short} bytes at N = {SHORT} and {long} \
             bytes at N = {LONG}, {} more, where a few numbers per row allow {} more: a score \
             matrix grows like N x N, a slab of scores per query tile like Br x N",
            long - short,
            allowed_growth()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_counting_allocator_the_check_says_why() {
        let err = working_bytes(|| Ok(vec![0u8; 8]), |_| 0).unwrap_err();
        assert!(err.contains("#[global_allocator]"), "{err}");
    }
}
