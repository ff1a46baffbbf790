//! What `cargo grade` shows for code with a classic bug: exercise 03's hidden checks run on a
//! tiled forward that forgets to rescale its running state (the mutant `MissingRescale`).
//!
//! `cargo run -p grader --example planted_bug`

use grader::ex03::mutants::TiledBug;
use grader::mutants::Planted;

// Exercise 03's memory check measures with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

fn main() {
    // The report is the point; the failing status is expected.
    let _ = grader::hidden::run(
        "ex03",
        "tiled FlashAttention forward, with a planted bug: no rescale",
        grader::ex03::checks(Planted::with(TiledBug::MissingRescale)),
    );
}
