//! Measures the f32 error of the GPU kernels (lessons 08 and 09) against the f64 oracle on
//! random problems, as a multiple of each problem's logit bound: the numbers behind
//! `Tolerance::F32_GPU`.
//!
//!     cargo run --release -p lesson09 --example measure_error -- 300

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use reference::checks::logit_bound;
use reference::strategies::{ShapeLimits, cases};
use reference::{AttentionOutput, oracle};

/// Worst relative Frobenius error and worst element error `|a - e| / (1 + |e|)`, both divided
/// by the logit bound, over O and L.
fn errors(
    actual: &AttentionOutput<f32>,
    expected: &AttentionOutput<f64>,
    bound: f64,
) -> (f64, f64) {
    let mut worst = (0.0f64, 0.0f64);
    let pairs = [
        (
            actual.o.iter().copied().collect::<Vec<_>>(),
            expected.o.iter().copied().collect::<Vec<_>>(),
        ),
        (actual.lse.iter().copied().collect(), expected.lse.iter().copied().collect()),
    ];
    for (a, e) in pairs {
        let (mut diff2, mut ref2) = (0.0, 0.0);
        for (&a, &e) in a.iter().zip(&e) {
            if !e.is_finite() {
                continue;
            }
            let d = f64::from(a) - e;
            diff2 += d * d;
            ref2 += e * e;
            worst.1 = worst.1.max(d.abs() / (1.0 + e.abs()) / bound);
        }
        if ref2 > 0.0 {
            worst.0 = worst.0.max((diff2 / ref2).sqrt() / bound);
        }
    }
    worst
}

fn main() {
    let count: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(300);
    let gpu = gpu::Gpu::shared().expect("a GPU adapter");
    let mut runner = TestRunner::deterministic();
    let strategy = (cases(ShapeLimits::GPU), 1..=64usize, 1..=32usize);
    let (mut naive, mut flash) = ((0.0f64, 0.0f64), (0.0f64, 0.0f64));
    for _ in 0..count {
        let (case, br, bc) = strategy.new_tree(&mut runner).expect("a case").current();
        let p = case.problem();
        let bound = logit_bound(&p).max(1.0);
        let expected = oracle::attention(&p.q, &p.k, &p.v, &p.options).expect("valid");
        let tiles = lesson09::TileSizes::new(br, bc).expect("at least 1");
        let run9 =
            lesson09::attention_on(&gpu.device, &gpu.queue, &p.q, &p.k, &p.v, &p.options, tiles);
        let run8 = lesson08::attention_on(&gpu.device, &gpu.queue, &p.q, &p.k, &p.v, &p.options);
        for (worst, run) in [(&mut flash, run9), (&mut naive, run8)] {
            let e = errors(&run.expect("the kernel runs"), &expected, bound);
            *worst = (worst.0.max(e.0), worst.1.max(e.1));
        }
    }
    println!("{} on {count} random problems (B <= 2, H <= 3, N <= 200, D <= 128):", gpu.describe());
    println!("worst error / logit bound: relative Frobenius, per element / (1 + |ref|)");
    println!("lesson 08 naive: {:.2e}  {:.2e}", naive.0, naive.1);
    println!("lesson 09 flash: {:.2e}  {:.2e}", flash.0, flash.1);
}
