//! The planted-bug implementation of exercise 03: one classic mistake per switch (see
//! [`crate::mutants`]).

use std::sync::atomic::Ordering;

use std::ops::Range;

use ndarray::{Array2, Array4, s};
use reference::features::visible_band;
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, Window,
    check_inputs,
};

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
        /// The window reaches one key too far to the left.
        WindowLeftOffByOne => ex03::WINDOW_RANDOM,
        /// The window's right side ignored: unbounded unless causal.
        WindowRightIgnored => ex03::WINDOW_RANDOM,
        /// The window centred on key `i` instead of the diagonal `i + Nkv - Nq`.
        WindowTopLeft => ex03::WINDOW_EDGES,
        /// A row that sees no key of a tile before its window starts computes
        /// `e^(-inf - -inf)` = NaN, which wipes out its later keys.
        NotYetVisibleRowNaN => ex03::WINDOW_RANDOM,
        /// Every key tile left of the window computed and masked.
        NoLeftSkip => ex03::WINDOW_SKIP,
        /// Every key tile right of the window computed and masked.
        NoRightSkip => ex03::WINDOW_SKIP,
        /// Key tiles skipped from the last row's window start, not the first row's.
        LeftSkipTooEager => ex03::WINDOW_SKIP,
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
        self.tiled(q, k, v, options, Window::FULL, query_rows, key_cols)
    }

    fn attention_window(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        window: Window,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        self.tiled(q, k, v, options, window, query_rows, key_cols)
    }

    fn tiles_computed(&self) -> usize {
        self.tiles.load(Ordering::Relaxed)
    }
}

impl Planted<TiledBug> {
    /// The keys row `i` sees, with the window and mask bugs.
    fn band(&self, shape: &AttentionShape, i: usize, causal: bool, window: Window) -> Range<usize> {
        let mut window = window;
        if self.has(TiledBug::WindowRightIgnored) {
            window.right = None;
        }
        let row = match self.bug {
            Some(TiledBug::MaskOffByOne) => i + 1,
            // Centred on key i: shift the row so that its diagonal i + Nkv - Nq lands on i.
            Some(TiledBug::WindowTopLeft) if window != Window::FULL => {
                (i + shape.q_len).saturating_sub(shape.kv_len)
            }
            _ => i,
        };
        let band = visible_band(shape, row, causal, window);
        match (self.bug, window.left) {
            (Some(TiledBug::WindowLeftOffByOne), Some(_)) if !band.is_empty() => {
                band.start.saturating_sub(1)..band.end
            }
            _ => band,
        }
    }

    /// The key tiles to compute for query rows `rows`: from the tile holding the first key
    /// any row sees to the one holding the last, with the skipping bugs.
    fn key_tiles(
        &self,
        shape: &AttentionShape,
        rows: Range<usize>,
        causal: bool,
        window: Window,
    ) -> Range<usize> {
        let bands: Vec<Range<usize>> = rows
            .clone()
            .map(|i| self.band(shape, i, causal, window))
            .filter(|b| !b.is_empty())
            .collect();
        let first = match self.bug {
            Some(TiledBug::NoLeftSkip) => 0,
            Some(TiledBug::LeftSkipTooEager) => bands.last().map_or(0, |b| b.start),
            _ => bands.iter().map(|b| b.start).min().unwrap_or(0),
        };
        let last_row = if self.has(TiledBug::SkipTooEager) { rows.start } else { rows.end - 1 };
        let end = match self.bug {
            Some(TiledBug::NoCausalSkip) => shape.kv_len,
            Some(TiledBug::NoRightSkip) if window != Window::FULL => shape.kv_len,
            _ if window == Window::FULL => visible_band(shape, last_row, causal, window).end,
            _ => bands.iter().map(|b| b.end).max().unwrap_or(0),
        };
        first..end
    }

    #[allow(clippy::too_many_arguments)]
    fn tiled(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        window: Window,
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
                let wanted = self.key_tiles(&shape, rows.clone(), options.causal, window);
                let first_tile = wanted.start / key_cols * key_cols;
                for c0 in (first_tile..k_end).step_by(key_cols).take_while(|&c0| c0 < wanted.end) {
                    let keys = c0..(c0 + key_cols).min(shape.kv_len);
                    self.tiles.fetch_add(1, Ordering::Relaxed); // one tile of scores computed
                    for (r, i) in rows.clone().enumerate() {
                        let visible = self.band(&shape, i, options.causal, window);
                        let query = q.slice(s![b, h, i, ..]);
                        let score = |j: usize| match &whole_scores {
                            Some(scores) => scores[[i, j]],
                            None => scale * query.dot(&k.slice(s![b, h, j, ..])),
                        };
                        let scores: Vec<f32> = keys
                            .clone()
                            .map(
                                |j| if visible.contains(&j) { score(j) } else { f32::NEG_INFINITY },
                            )
                            .collect();
                        let new_max = m[r].max(row_max(&scores));
                        if new_max == f32::NEG_INFINITY
                            && bug != Some(TiledBug::NotYetVisibleRowNaN)
                        {
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
}
