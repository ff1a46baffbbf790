//! # Lesson 05 — the backward pass, with recomputation
//!
//! Training needs the gradients `dQ`, `dK`, `dV` of a loss, given `dO`. Naively they need the
//! `N x N` matrix `P` of the forward pass. FlashAttention never stored `P`, so it
//! **recomputes** it, tile by tile, from `Q`, `K` and the logsumexp `L` that the forward pass
//! saved: `P_ij = e^(S_ij - L_i)`. One number per query row replaces `N` of them.
//!
//! For one tile pair, with `D_i = dO_i . O_i` computed once per row beforehand:
//!
//! $$ P = e^{S - L},\quad dV_j \mathrel{+}= P^\top dO_i,\quad dP = dO_i V_j^\top,\quad
//!    dS = P \circ (dP - D_i), $$
//! $$ dQ_i \mathrel{+}= \mathrm{scale}\cdot dS\,K_j,\qquad
//!    dK_j \mathrel{+}= \mathrm{scale}\cdot dS^\top Q_i . $$
//!
//! The outer loop runs over K/V tiles, so `dK_j` and `dV_j` are accumulated locally and
//! written once; `dQ_i` receives a contribution from every K/V tile. Working memory: two
//! `Br x Bc` tiles (`P` and `dP`, then `dS`) and the `N` numbers of `D`; never `N x N`.

use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array4, ArrayView1, ArrayView2, ArrayViewMut2, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Gradients,
    check_backward_inputs,
};

// ANCHOR: backward
/// FlashAttention-2 backward: `q [B,H,Nq,D]`, `k`, `v [B,H,Nkv,D]`, the forward pass's output
/// `O [B,H,Nq,D]` and logsumexp `L [B,H,Nq]`, and `dO [B,H,Nq,D]` -> `dQ`, `dK`, `dV`.
pub fn backward(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
    tiles: TileSizes,
) -> Result<Gradients<f32>, AttentionError> {
    // Bad data is an error here too: the forward's checks, dO and O finite and of Q's shape,
    // and L finite exactly where a row sees keys (`check_logsumexp`: an L of -inf there would
    // silently zero the row's gradients).
    let CheckedInputs { shape, scale, .. } = check_backward_inputs(q, k, v, options, forward, d_o)?;
    let tiles = tiles.fitted_to(&shape);
    let mut grads = Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };

    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let head = Head {
                q: q.slice(s![b, h, .., ..]),
                k: k.slice(s![b, h, .., ..]),
                v: v.slice(s![b, h, .., ..]),
                d_o: d_o.slice(s![b, h, .., ..]),
                lse: forward.lse.slice(s![b, h, ..]),
            };
            // D_i = dO_i . O_i: one number per query row, computed once (row by row, so no
            // N x D temporary is made).
            let o = forward.o.slice(s![b, h, .., ..]);
            let d: Array1<f32> = head
                .d_o
                .outer_iter()
                .zip(o.outer_iter())
                .map(|(d_o_i, o_i)| d_o_i.dot(&o_i))
                .collect();
            let (mut dq, mut dk, mut dv) = (
                grads.dq.slice_mut(s![b, h, .., ..]),
                grads.dk.slice_mut(s![b, h, .., ..]),
                grads.dv.slice_mut(s![b, h, .., ..]),
            );
            for first_key in (0..shape.kv_len).step_by(tiles.key_cols()) {
                let keys = first_key..(first_key + tiles.key_cols()).min(shape.kv_len);
                let (dk_tile, dv_tile) = key_tile_gradients(
                    &head,
                    d.view(),
                    &mut dq,
                    keys.clone(),
                    &shape,
                    scale,
                    options.causal,
                    tiles,
                );
                dk.slice_mut(s![keys.clone(), ..]).assign(&dk_tile);
                dv.slice_mut(s![keys, ..]).assign(&dv_tile);
            }
        }
    }
    Ok(grads)
}
// ANCHOR_END: backward

/// The inputs of one batch and head.
struct Head<'a> {
    q: ArrayView2<'a, f32>,
    k: ArrayView2<'a, f32>,
    v: ArrayView2<'a, f32>,
    d_o: ArrayView2<'a, f32>,
    lse: ArrayView1<'a, f32>,
}

// ANCHOR: key_tile
/// The inner loop for one K/V tile: walk over the query tiles that see it, recompute `P`,
/// accumulate `dK_j` and `dV_j` (returned) and add each query tile's share of `dQ`.
#[allow(clippy::too_many_arguments)]
fn key_tile_gradients(
    head: &Head,
    d: ArrayView1<f32>,
    dq: &mut ArrayViewMut2<f32>,
    keys: std::ops::Range<usize>,
    shape: &AttentionShape,
    scale: f32,
    causal: bool,
    tiles: TileSizes,
) -> (Array2<f32>, Array2<f32>) {
    let (k_j, v_j) = (head.k.slice(s![keys.clone(), ..]), head.v.slice(s![keys.clone(), ..]));
    let (mut dk_j, mut dv_j) = (Array2::zeros(k_j.dim()), Array2::zeros(v_j.dim()));
    let mut p = Array2::<f32>::zeros((tiles.query_rows(), keys.len()));
    let mut d_p = Array2::<f32>::zeros((tiles.query_rows(), keys.len()));

    for first_row in (0..shape.q_len).step_by(tiles.query_rows()) {
        let rows = first_row..(first_row + tiles.query_rows()).min(shape.q_len);
        let kind = classify_tile(shape, causal, rows.clone(), keys.clone());
        if kind == TileKind::Skipped {
            continue;
        }
        let (q_i, d_o_i) =
            (head.q.slice(s![rows.clone(), ..]), head.d_o.slice(s![rows.clone(), ..]));
        let n = rows.len();
        // Recompute P = e^(S - L) for this tile pair.
        let mut p = p.slice_mut(s![..n, ..]);
        general_mat_mul(scale, &q_i, &k_j.t(), 0.0, &mut p);
        if kind == TileKind::Masked {
            mask_future_keys(&mut p, rows.start, keys.start, shape);
        }
        for (mut row, &l) in p.outer_iter_mut().zip(head.lse.slice(s![rows.clone()])) {
            // A row that sees no key has L = -inf and no weights (e^(-inf - -inf) is NaN).
            row.mapv_inplace(|s| if l == f32::NEG_INFINITY { 0.0 } else { (s - l).exp() });
        }
        // dV_j += Pᵀ dO_i
        general_mat_mul(1.0, &p.t(), &d_o_i, 1.0, &mut dv_j);
        // dP = dO_i V_jᵀ, then dS = P ∘ (dP - D_i), in place of dP.
        let mut d_s = d_p.slice_mut(s![..n, ..]);
        general_mat_mul(1.0, &d_o_i, &v_j.t(), 0.0, &mut d_s);
        for ((mut ds_row, p_row), &d_i) in
            d_s.outer_iter_mut().zip(p.outer_iter()).zip(d.slice(s![rows.clone()]))
        {
            ds_row.zip_mut_with(&p_row, |ds, &p| *ds = p * (*ds - d_i));
        }
        // dQ_i += scale dS K_j ;  dK_j += scale dSᵀ Q_i
        general_mat_mul(scale, &d_s, &k_j, 1.0, &mut dq.slice_mut(s![rows, ..]));
        general_mat_mul(scale, &d_s.t(), &q_i, 1.0, &mut dk_j);
    }
    (dk_j, dv_j)
}
// ANCHOR_END: key_tile

/// This lesson's backward pass with lesson 03's default tiles, for the course's registry.
pub fn versions() -> Vec<reference::BackwardVersion> {
    use reference::{About, BackwardVersion, Device};
    let about = About::backward(
        "tiled, recomputes P from L",
        env!("CARGO_PKG_NAME"),
        Device::Cpu,
        "dQ, dK, dV tile by tile, P recomputed from the forward's L instead of stored",
    );
    let tiles = TileSizes::default();
    vec![BackwardVersion::new(
        about,
        move |q: &_, k: &_, v: &_, options: &_, forward: &_, d_o: &_| {
            backward(q, k, v, options, forward, d_o, tiles)
        },
    )]
}
