//! Hidden checks of exercise 05, run by `cargo grade ex05`.

use grader::ex05::{Functions, checks};
use lesson03::TileSizes;

// The memory check measures the learner's working memory with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        backward: Box::new(|q, k, v, options, forward, d_o, query_rows, key_cols| {
            let tiles = TileSizes::new(query_rows, key_cols)?;
            ex05::backward(q, k, v, options, forward, d_o, tiles)
        }),
        backward_with_features: Box::new(
            |q, k, v, options, features, forward, d_o, query_rows, key_cols| {
                let tiles = TileSizes::new(query_rows, key_cols)?;
                ex05::backward_with_features(q, k, v, options, features, forward, d_o, tiles)
            },
        ),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
