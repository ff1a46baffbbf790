//! The planted-bug implementation of exercise 03: one classic mistake per switch (see
//! [`crate::mutants`]).

use std::sync::atomic::Ordering;

use ndarray::{Array2, Array4, s};
use reference::{AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, check_inputs};

use crate::ex03::Exercise03;
use crate::mutants::{Planted, planted_bugs, row_max, weighted_sum};
use crate::{ex03, forward};

planted_bugs! {
    /// Classic mistakes in the tiled forward (exercise 03).
    pub enum TiledBug {
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
        /// Neither `l` nor `acc` rescaled by `e^(m_old - m_new)` when the maximum grows.
        MissingRescale => ex03::TILES_DO_NOT_MATTER,
        /// `l` rescaled, the output accumulator not.
        AccumulatorNotRescaled => ex03::TILES_DO_NOT_MATTER,
        /// Each query sees one key too many on the diagonal tiles.
        MaskOffByOne => forward::CAUSAL_SQUARE,
        /// The last, shorter query tile is never computed.
        QueryTailIgnored => ex03::ANY_TILES,
        /// The last, shorter key tile is never read.
        KeyTailIgnored => ex03::ANY_TILES,
        /// The logsumexp stored as `ln(l)` instead of `m + ln(l)`.
        LseWithoutMax => forward::ONE_KEY,
        /// Key tiles skipped from the first row's last visible key, not the last row's.
        SkipTooEager => ex03::CAUSAL_SKIP,
        /// Every key tile computed and masked: right, but the work FlashAttention skips is done.
        NoCausalSkip => ex03::CAUSAL_SKIP,
        /// The whole `Nq x Nkv` score matrix computed up front, then read tile by tile.
        WholeScoreMatrix => ex03::MEMORY,
    }
}

impl Exercise03 for Planted<TiledBug> {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let bug = self.bug;
        let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
        if bug == Some(TiledBug::NoScale) {
            scale = 1.0;
        }
        for (which, value) in [("query rows (Br)", query_rows), ("key columns (Bc)", key_cols)] {
            if value == 0 {
                return Err(AttentionError::InvalidTileSize { which, value });
            }
        }
        let (query_rows, key_cols) = (query_rows.min(shape.q_len), key_cols.min(shape.kv_len));
        let whole = |n: usize, tile: usize| n / tile * tile; // where a tail-ignoring loop stops
        let q_end = if bug == Some(TiledBug::QueryTailIgnored) {
            whole(shape.q_len, query_rows)
        } else {
            shape.q_len
        };
        let k_end = if bug == Some(TiledBug::KeyTailIgnored) {
            whole(shape.kv_len, key_cols)
        } else {
            shape.kv_len
        };
        let mut out = AttentionOutput::empty(&shape);
        for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
            // The bug: every score of the head at once, Nq x Nkv, kept for the whole loop.
            let whole_scores = (bug == Some(TiledBug::WholeScoreMatrix))
                .then(|| q.slice(s![b, h, .., ..]).dot(&k.slice(s![b, h, .., ..]).t()) * scale);
            for r0 in (0..q_end).step_by(query_rows) {
                let rows = r0..(r0 + query_rows).min(shape.q_len);
                let n = rows.len();
                let (mut m, mut l) = (vec![f32::NEG_INFINITY; n], vec![0.0f32; n]);
                let mut acc = Array2::<f32>::zeros((n, shape.head_dim));
                let skip_from_row =
                    if bug == Some(TiledBug::SkipTooEager) { rows.start } else { rows.end - 1 };
                let key_limit = if bug == Some(TiledBug::NoCausalSkip) {
                    shape.kv_len
                } else {
                    shape.visible_keys(skip_from_row, options.causal)
                };
                for c0 in (0..k_end).step_by(key_cols).take_while(|&c0| c0 < key_limit) {
                    let keys = c0..(c0 + key_cols).min(shape.kv_len);
                    self.tiles.fetch_add(1, Ordering::Relaxed); // one tile of scores computed
                    for (r, i) in rows.clone().enumerate() {
                        let seen = if bug == Some(TiledBug::MaskOffByOne) { i + 1 } else { i };
                        let visible = shape.visible_keys(seen, options.causal);
                        let query = q.slice(s![b, h, i, ..]);
                        let score = |j: usize| match &whole_scores {
                            Some(scores) => scores[[i, j]],
                            None => scale * query.dot(&k.slice(s![b, h, j, ..])),
                        };
                        let scores: Vec<f32> = keys
                            .clone()
                            .map(|j| if j < visible { score(j) } else { f32::NEG_INFINITY })
                            .collect();
                        let new_max = m[r].max(row_max(&scores));
                        if new_max == f32::NEG_INFINITY {
                            continue;
                        }
                        let correction = if bug == Some(TiledBug::MissingRescale) {
                            1.0
                        } else {
                            (m[r] - new_max).exp()
                        };
                        let p: Vec<f32> = scores.iter().map(|&x| (x - new_max).exp()).collect();
                        l[r] = l[r] * correction + p.iter().sum::<f32>();
                        let acc_correction = if bug == Some(TiledBug::AccumulatorNotRescaled) {
                            1.0
                        } else {
                            correction
                        };
                        let pv = weighted_sum(&p, |t| v.slice(s![b, h, keys.start + t, ..]));
                        let updated = &acc.row(r) * acc_correction + pv;
                        acc.row_mut(r).assign(&updated);
                        m[r] = new_max;
                    }
                }
                for (r, i) in rows.enumerate() {
                    if l[r] > 0.0 {
                        out.o.slice_mut(s![b, h, i, ..]).assign(&(&acc.row(r) / l[r]));
                        out.lse[[b, h, i]] = if bug == Some(TiledBug::LseWithoutMax) {
                            l[r].ln()
                        } else {
                            m[r] + l[r].ln()
                        };
                    }
                }
            }
        }
        Ok(out)
    }

    fn tiles_computed(&self) -> usize {
        self.tiles.load(Ordering::Relaxed)
    }
}
