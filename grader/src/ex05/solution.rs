//! The reference solution of exercise 05's main task: the tiled backward pass with a logit
//! softcap and dropout, the dropout mask regenerated from its seed. It lives here, not in a
//! lesson, because the book only explains the idea: the learner writes this part.

use std::ops::Range;

use lesson03::{TileKind, TileSizes, classify_tile};
use lesson04::tile_ranges;
use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, Feature, Features, Gradients,
    check_finite, check_inputs, check_logsumexp, check_lse_shape, check_same_shape,
};

/// Lesson 05's backward pass with the softcap `c` and dropout of `features`:
///
/// `P = e^(c tanh(s / c) - L)`, `Y = P o Z / (1 - p)`; `dV = Yᵀ dO`,
/// `dP = (dO Vᵀ) o Z / (1 - p)`, `dS = P o (dP - D) o (1 - tanh²(s / c))` with `s = scale q.k`
/// and `D_i = dO_i . O_i`; `dQ = scale dS K`, `dK = scale dSᵀ Q`.
///
/// Shapes as in `lesson05::backward`.
#[allow(clippy::too_many_arguments)]
pub fn backward_with_features(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    forward: &AttentionOutput<f32>,
    d_o: &Array4<f32>,
    tiles: TileSizes,
) -> Result<Gradients<f32>, AttentionError> {
    let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
    check_same_shape("dO", d_o, "Q", q)?;
    check_same_shape("O", &forward.o, "Q", q)?;
    check_lse_shape(&forward.lse, q)?;
    check_finite("dO", d_o)?;
    check_finite("O", &forward.o)?;
    check_logsumexp(&forward.lse, &shape, options.causal)?;
    features.check_supported(&shape, &[Feature::Softcap, Feature::Dropout])?;
    let tiles = tiles.fitted_to(&shape);
    let mut grads = Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let d: Array1<f32> = (0..shape.q_len)
                .map(|i| d_o.slice(s![b, h, i, ..]).dot(&forward.o.slice(s![b, h, i, ..])))
                .collect();
            for keys in tile_ranges(shape.kv_len, tiles.key_cols()) {
                let (k_j, v_j) =
                    (k.slice(s![b, h, keys.clone(), ..]), v.slice(s![b, h, keys.clone(), ..]));
                let (mut dk_j, mut dv_j) = (Array2::zeros(k_j.dim()), Array2::zeros(v_j.dim()));
                for rows in tile_ranges(shape.q_len, tiles.query_rows()) {
                    if classify_tile(&shape, options.causal, rows.clone(), keys.clone())
                        == TileKind::Skipped
                    {
                        continue;
                    }
                    let (q_i, d_o_i) = (
                        q.slice(s![b, h, rows.clone(), ..]),
                        d_o.slice(s![b, h, rows.clone(), ..]),
                    );
                    let scores = q_i.dot(&k_j.t()) * scale; // s, before the cap
                    let tile = Tile { b, h, rows: rows.clone(), keys: keys.clone() };
                    let p = weights(&tile, &scores, features, &shape, options.causal, forward);
                    let factors = dropout_factors(&tile, features);
                    // dV_j += (P o Z / (1 - p))ᵀ dO_i
                    general_mat_mul(1.0, &(&p * &factors).t(), &d_o_i, 1.0, &mut dv_j);
                    // dP = (dO_i V_jᵀ) o Z / (1 - p); dS = P o (dP - D_i) o the softcap's slope.
                    let d_p = d_o_i.dot(&v_j.t()) * &factors;
                    let slope = softcap_slope(&scores, features.softcap);
                    let d_i = d.slice(s![rows.clone()]).insert_axis(ndarray::Axis(1));
                    let d_s = &p * &(&d_p - &d_i) * &slope;
                    general_mat_mul(
                        scale,
                        &d_s,
                        &k_j,
                        1.0,
                        &mut grads.dq.slice_mut(s![b, h, rows, ..]),
                    );
                    general_mat_mul(scale, &d_s.t(), &q_i, 1.0, &mut dk_j);
                }
                grads.dk.slice_mut(s![b, h, keys.clone(), ..]).assign(&dk_j);
                grads.dv.slice_mut(s![b, h, keys, ..]).assign(&dv_j);
            }
        }
    }
    Ok(grads)
}

/// Where a tile pair lies in the whole problem: the dropout mask is drawn from these indices.
struct Tile {
    b: usize,
    h: usize,
    rows: Range<usize>,
    keys: Range<usize>,
}

/// `P = e^(c tanh(s / c) - L)` for the tile, 0 where the causal mask hides a key and in a row
/// that sees no key (`L = -inf`).
fn weights(
    tile: &Tile,
    scores: &Array2<f32>,
    features: &Features,
    shape: &reference::AttentionShape,
    causal: bool,
    forward: &AttentionOutput<f32>,
) -> Array2<f32> {
    Array2::from_shape_fn(scores.dim(), |(r, c)| {
        let (i, j) = (tile.rows.start + r, tile.keys.start + c);
        let l = forward.lse[[tile.b, tile.h, i]];
        if l == f32::NEG_INFINITY || j >= shape.visible_keys(i, causal) {
            return 0.0;
        }
        let s = scores[[r, c]];
        let capped = features.softcap.map_or(s, |c| c * (s / c).tanh());
        (capped - l).exp()
    })
}

/// `Z / (1 - p)` for the tile, from the same counter-based random numbers as the forward pass
/// (all 1 without dropout).
fn dropout_factors(tile: &Tile, features: &Features) -> Array2<f32> {
    let (rows, keys) = (tile.rows.len(), tile.keys.len());
    Array2::from_shape_fn((rows, keys), |(r, c)| match features.dropout {
        Some(d) if d.keeps(tile.b, tile.h, tile.rows.start + r, tile.keys.start + c) => {
            d.keep_scale() as f32
        }
        Some(_) => 0.0,
        None => 1.0,
    })
}

/// `d(c tanh(s / c)) / ds = 1 - tanh²(s / c)` for each score (all 1 without a softcap).
fn softcap_slope(scores: &Array2<f32>, softcap: Option<f32>) -> Array2<f32> {
    scores.mapv(|s| softcap.map_or(1.0, |c| 1.0 - (s / c).tanh().powi(2)))
}
