//! # Lesson 01 — naive attention
//!
//! Attention exactly as the formula reads, one matrix at a time:
//!
//! $$ S = \mathrm{scale}\cdot QK^\top \in \mathbb{R}^{N_q\times N_{kv}},\qquad
//!    P = \mathrm{softmax}_{\text{row}}(S),\qquad O = PV . $$
//!
//! Both `S` and `P` are materialised for every batch and head: `2·B·H·Nq·Nkv` numbers. That
//! is what makes standard attention memory-bound, and what FlashAttention removes.
//! [`score_matrices_bytes`] says how big they get.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array3, Array4, Axis, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

// ANCHOR: attention
/// Naive attention: `q [B,H,Nq,D]`, `k [B,H,Nkv,D]`, `v [B,H,Nkv,D]` -> `O [B,H,Nq,D]`,
/// `L [B,H,Nq]`, materialising `S` and `P` of shape `[B,H,Nq,Nkv]`.
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;

    let mut scores = scaled_scores(q, k, scale); // S: [B, H, Nq, Nkv]
    if options.causal {
        mask_future_keys(&mut scores, &shape);
    }
    let (probs, lse) = softmax_rows(&scores); // P: [B, H, Nq, Nkv], L: [B, H, Nq]
    let o = weighted_values(&probs, v); // O = P V: [B, H, Nq, D]
    Ok(AttentionOutput { o, lse })
}
// ANCHOR_END: attention

// ANCHOR: scores
/// `S = scale · Q Kᵀ` for every batch and head: `[B, H, Nq, Nkv]`.
fn scaled_scores(q: &Array4<f32>, k: &Array4<f32>, scale: f32) -> Array4<f32> {
    let (batch, heads, q_len, _) = q.dim();
    let kv_len = k.dim().2;
    let mut scores = Array4::zeros((batch, heads, q_len, kv_len));
    for b in 0..batch {
        for h in 0..heads {
            let k_transposed = k.slice(s![b, h, .., ..]).reversed_axes(); // [D, Nkv]
            let mut s_bh = scores.slice_mut(s![b, h, .., ..]);
            general_mat_mul(scale, &q.slice(s![b, h, .., ..]), &k_transposed, 0.0, &mut s_bh);
        }
    }
    scores
}

/// Sets `S_ij = -inf` wherever query `i` may not see key `j` (bottom-right aligned:
/// key `j` is visible iff `j < visible_keys(i)`).
fn mask_future_keys(scores: &mut Array4<f32>, shape: &AttentionShape) {
    for i in 0..shape.q_len {
        let visible = shape.visible_keys(i, true);
        scores.slice_mut(s![.., .., i, visible..]).fill(f32::NEG_INFINITY);
    }
}
// ANCHOR_END: scores

// ANCHOR: softmax
/// Row-wise softmax of `S`, and each row's logsumexp `L = m + ln(sum_j e^(S_ij - m))`.
///
/// The row maximum `m` is subtracted before `exp` so that nothing overflows (lesson 02 shows
/// why). A row whose scores are all `-inf` (it sees no key) gets `P = 0` and `L = -inf`.
fn softmax_rows(scores: &Array4<f32>) -> (Array4<f32>, Array3<f32>) {
    let mut probs = scores.clone();
    let (batch, heads, q_len, _) = scores.dim();
    let mut lse = Array3::from_elem((batch, heads, q_len), f32::NEG_INFINITY);
    for (mut row, l) in probs.lanes_mut(Axis(3)).into_iter().zip(lse.iter_mut()) {
        let max = row.fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            continue;
        }
        row.mapv_inplace(|x| (x - max).exp());
        let sum = row.sum();
        row /= sum;
        *l = max + sum.ln();
    }
    (probs, lse)
}
// ANCHOR_END: softmax

/// `O = P V` for every batch and head: `[B, H, Nq, D]`.
fn weighted_values(probs: &Array4<f32>, v: &Array4<f32>) -> Array4<f32> {
    let (batch, heads, q_len, _) = probs.dim();
    let head_dim = v.dim().3;
    let mut o = Array4::zeros((batch, heads, q_len, head_dim));
    for b in 0..batch {
        for h in 0..heads {
            let mut o_bh = o.slice_mut(s![b, h, .., ..]);
            general_mat_mul(
                1.0,
                &probs.slice(s![b, h, .., ..]),
                &v.slice(s![b, h, .., ..]),
                0.0,
                &mut o_bh,
            );
        }
    }
    o
}

// ANCHOR: memory
/// Bytes that naive attention holds in `S` and `P` for `shape`, with elements of
/// `bytes_per_element` bytes: `2 · B · H · Nq · Nkv · bytes_per_element`.
///
/// This grows as N²; `Q`, `K`, `V` and `O` together grow only as `N · D`.
pub fn score_matrices_bytes(shape: &AttentionShape, bytes_per_element: usize) -> usize {
    2 * shape.batch * shape.heads * shape.q_len * shape.kv_len * bytes_per_element
}
// ANCHOR_END: memory

/// The N x N memory table: one row per sequence length, bytes of `S` alone and of `S` and `P`
/// for one head, in f32 and f16.
pub fn memory_table(seq_lens: &[usize]) -> Vec<MemoryRow> {
    seq_lens
        .iter()
        .map(|&n| {
            let head = AttentionShape { batch: 1, heads: 1, q_len: n, kv_len: n, head_dim: 64 };
            let both_f32 = score_matrices_bytes(&head, size_of::<f32>());
            let both_f16 = score_matrices_bytes(&head, size_of::<half::f16>());
            MemoryRow {
                seq_len: n,
                s_f32: both_f32 / 2,
                s_and_p_f32: both_f32,
                s_and_p_f16: both_f16,
            }
        })
        .collect()
}

/// One row of [`memory_table`] (bytes, for one head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRow {
    /// N (= Nq = Nkv).
    pub seq_len: usize,
    /// `S` alone, f32.
    pub s_f32: usize,
    /// `S` and `P`, f32.
    pub s_and_p_f32: usize,
    /// `S` and `P`, f16.
    pub s_and_p_f16: usize,
}

/// This lesson's implementation, for the course's registry.
pub fn versions() -> Vec<reference::ForwardVersion> {
    use reference::{About, Device, ForwardVersion};
    let about = About::forward(
        "naive (S and P in memory)",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "the definition: S = scale Q K^T and P = softmax(S) stored whole, then O = P V",
    );
    vec![ForwardVersion::new(about, attention)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn score_matrices_grow_quadratically() {
        let shape = |n| AttentionShape { batch: 2, heads: 3, q_len: n, kv_len: n, head_dim: 64 };
        assert_eq!(score_matrices_bytes(&shape(1024), 4), 2 * 2 * 3 * 1024 * 1024 * 4);
        assert_eq!(
            score_matrices_bytes(&shape(2048), 4),
            4 * score_matrices_bytes(&shape(1024), 4)
        );
    }

    #[test]
    fn memory_table_matches_hand_numbers() {
        let rows = memory_table(&[1024, 16384]);
        // 1024^2 f32 = 4 MiB; 16384^2 f32 = 1 GiB, so S and P take 2 GiB (1 GiB in f16).
        assert_eq!(rows[0].s_f32, 4 << 20);
        assert_eq!(rows[1].s_f32, 1 << 30);
        assert_eq!(rows[1].s_and_p_f32, 2 << 30);
        assert_eq!(rows[1].s_and_p_f16, 1 << 30);
    }

    #[test]
    fn softmax_rows_sum_to_one_and_masked_rows_are_zero() {
        let scores =
            array![[1.0f32, 2.0, 3.0], [f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY]]
                .into_shape_with_order((1, 1, 2, 3))
                .unwrap();
        let (p, lse) = softmax_rows(&scores);
        assert!((p.slice(s![0, 0, 0, ..]).sum() - 1.0).abs() < 1e-6);
        assert!(p[[0, 0, 0, 2]] > p[[0, 0, 0, 1]] && p[[0, 0, 0, 1]] > p[[0, 0, 0, 0]]);
        assert_eq!(p.slice(s![0, 0, 1, ..]).to_vec(), vec![0.0; 3]);
        let expected = (1f32.exp() + 2f32.exp() + 3f32.exp()).ln();
        assert!((lse[[0, 0, 0]] - expected).abs() < 1e-6);
        assert_eq!(lse[[0, 0, 1]], f32::NEG_INFINITY);
    }

    #[test]
    fn causal_mask_hides_exactly_the_future_keys() {
        // Nq = 2, Nkv = 3: row 0 sees keys 0..=1, row 1 sees all.
        let shape = AttentionShape { batch: 1, heads: 1, q_len: 2, kv_len: 3, head_dim: 1 };
        let mut scores = Array4::zeros((1, 1, 2, 3));
        mask_future_keys(&mut scores, &shape);
        let inf = f32::NEG_INFINITY;
        assert_eq!(scores.into_raw_vec_and_offset().0, vec![0.0, 0.0, inf, 0.0, 0.0, 0.0]);
    }
}
