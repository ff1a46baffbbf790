//! Hidden checks of exercise 04, run by `cargo grade ex04`.

use std::ops::Range;

use grader::ex04::Exercise04;
use lesson03::{TileKind, TileSizes};
use lesson04::Run;
use ndarray::Array4;
use reference::{AttentionError, AttentionOptions, AttentionShape};

/// The learner's code, seen through the exercise's adapter trait.
struct Learner;

impl Exercise04 for Learner {
    fn classify(
        &self,
        shape: &AttentionShape,
        causal: bool,
        rows: Range<usize>,
        keys: Range<usize>,
    ) -> TileKind {
        ex04::classify_tile(shape, causal, rows, keys)
    }

    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
        fast_bytes: usize,
    ) -> Result<Run, AttentionError> {
        ex04::attention(q, k, v, options, TileSizes::new(query_rows, key_cols)?, fast_bytes)
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main("ex04", grader::ex04::checks(Learner))
}
