//! Naive, safe and online softmax side by side, and the online state step by step.
//!
//! `cargo run -p lesson02 --example overflow`

use lesson02::{SoftmaxState, naive_softmax, online_softmax, safe_softmax};

fn main() {
    for x in [[1.0f32, 2.0, 3.0], [1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1002.0]] {
        println!("x = {x:?}");
        println!("  naive  {:?}", naive_softmax(&x));
        println!("  safe   {:?}", safe_softmax(&x));
        println!("  online {:?}", online_softmax(&x));
    }

    let x = [1.0f32, 3.0, 2.0, 5.0];
    println!("\nonline state (m, l) after each score of {x:?}:");
    let mut state = SoftmaxState::EMPTY;
    for xi in x {
        let next = state.push(xi);
        let rescale = if next.max > state.max {
            "  <- new max: old l rescaled by e^(m_old - m_new)"
        } else {
            ""
        };
        println!("  push {xi}: m = {}, l = {:.6}{rescale}", next.max, next.sum);
        state = next;
    }
    println!("  logsumexp = m + ln l = {:.6}", state.logsumexp());

    let (left, right) = (SoftmaxState::of(&x[..2]), SoftmaxState::of(&x[2..]));
    let merged = left.merge(right);
    println!("\nmerge of the halves {:?} and {:?}:", &x[..2], &x[2..]);
    println!("  left  m = {}, l = {:.6}", left.max, left.sum);
    println!("  right m = {}, l = {:.6}", right.max, right.sum);
    println!("  merged m = {}, l = {:.6}  (the same state as one pass)", merged.max, merged.sum);
}
