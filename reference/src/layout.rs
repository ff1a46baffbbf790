//! Converting between the course's `[batch, heads, seq, head_dim]` layout and the
//! `[batch, seq, heads, head_dim]` layout of `flash_attn_func` and many model codes.
//!
//! Mixing the two up is a classic bug: the shapes even agree when `seq == heads`, and the
//! result is then silently wrong. Convert at the boundary, once.

use ndarray::Array4;

// ANCHOR: bshd_to_bhsd
/// `[B, N, H, D]` -> `[B, H, N, D]`, as a new row-major array.
pub fn bshd_to_bhsd<T: Clone>(x: &Array4<T>) -> Array4<T> {
    x.view().permuted_axes([0, 2, 1, 3]).as_standard_layout().into_owned()
}
// ANCHOR_END: bshd_to_bhsd

/// `[B, H, N, D]` -> `[B, N, H, D]`, as a new row-major array.
pub fn bhsd_to_bshd<T: Clone>(x: &Array4<T>) -> Array4<T> {
    // Swapping axes 1 and 2 is its own inverse.
    bshd_to_bhsd(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttentionOptions, Problem, ProblemSpec, oracle};

    #[test]
    fn moves_each_element_to_the_swapped_index() {
        let x = Array4::from_shape_fn((2, 3, 4, 5), |(b, n, h, d)| {
            (b * 1000 + n * 100 + h * 10 + d) as f32
        });
        let y = bshd_to_bhsd(&x);
        assert_eq!(y.dim(), (2, 4, 3, 5));
        assert!(y.is_standard_layout());
        assert_eq!(y[[1, 3, 2, 4]], x[[1, 2, 3, 4]]);
        assert_eq!(bhsd_to_bshd(&y), x);
    }

    #[test]
    fn forgetting_the_conversion_is_silently_wrong_when_seq_equals_heads() {
        // Inputs laid out [B, N, H, D] with N == H: the shapes look right to every check.
        let p = Problem::random(&ProblemSpec::new(1, 4, 4, 4, 8), 11);
        let (q, k, v) = (bhsd_to_bshd(&p.q), bhsd_to_bshd(&p.k), bhsd_to_bshd(&p.v));
        let opts = AttentionOptions::new();
        let right =
            oracle::attention(&bshd_to_bhsd(&q), &bshd_to_bhsd(&k), &bshd_to_bhsd(&v), &opts);
        let wrong = oracle::attention(&q, &k, &v, &opts);
        assert_eq!(right, oracle::attention(&p.q, &p.k, &p.v, &opts));
        assert!(wrong.is_ok(), "no error: the mistake is silent");
        // What the caller expected: the right output, in its own [B, N, H, D] layout.
        assert_ne!(wrong.unwrap().o, bhsd_to_bshd(&right.unwrap().o));
    }
}
