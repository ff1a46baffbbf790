//! Hidden checks of exercise 03, run by `cargo grade ex03`.

use grader::ex03::{Functions, checks};

// The memory check measures the learner's working memory with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        attention: Box::new(|q, k, v, options, query_rows, key_cols| {
            ex03::attention(q, k, v, options, ex03::TileSizes::new(query_rows, key_cols)?)
        }),
        attention_window: Box::new(|q, k, v, options, window, query_rows, key_cols| {
            let tiles = ex03::TileSizes::new(query_rows, key_cols)?;
            ex03::attention_window(q, k, v, options, window, tiles)
        }),
        tiles_computed: Box::new(ex03::tiles_computed),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
