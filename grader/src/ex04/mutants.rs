//! The planted-bug implementation of exercise 04: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array1, Array2, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

use crate::mutants::{Planted, planted_bugs, row_max, weighted_sum};
use crate::{ex04, forward};

planted_bugs! {
    /// Classic mistakes in causal tile classification and FlashAttention-1's loop order
    /// (exercise 04).
    pub enum Flash1Bug {
        /// Tiles skipped when the tile's *first* row sees none of the keys.
        SkipTooEager => ex04::CLASSIFY,
        /// Tiles on the diagonal classified as full: never masked.
        DiagonalNotMasked => ex04::CLASSIFY,
        /// The old output not rescaled by `e^(m - m')` before the new tile is added.
        OutputNotRescaled => forward::RANDOM,
        /// `m` and `l` never written back: each K/V tile starts the statistics afresh.
        StatsNotWrittenBack => forward::RANDOM,
        /// `Q`, `O`, `m`, `l` loaded before the skip test: skipped tiles still cost IO.
        SkippedTilesLoaded => ex04::CAUSAL_TILES,
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
        /// Window IO: every key tile counted, as if nothing were skipped.
        WindowSkipsNothing => ex04::WINDOW_BY_HAND,
        /// Window IO: `K` counted, `V` forgotten.
        WindowKeysOnly => ex04::WINDOW_BY_HAND,
        /// Window IO: `L`'s bytes not counted.
        WindowLseNotCounted => ex04::WINDOW_BY_HAND,
        /// Window IO: a tail key tile counted as a whole `Bc` keys.
        WindowTailCountedWhole => ex04::WINDOW_TRAFFIC,
        /// Window IO: the key tiles of the query tile's first row only.
        WindowFirstRowOnly => ex04::WINDOW_TRAFFIC,
        /// Window IO: a query tile that sees no key counted as moving nothing.
        WindowEmptyQueryTileFree => ex04::WINDOW_TRAFFIC,
    }
}

impl crate::ex04::Exercise04 for Planted<Flash1Bug> {
    fn window_traffic(
        &self,
        shape: &AttentionShape,
        causal: bool,
        window: reference::Window,
        query_rows: usize,
        key_cols: usize,
    ) -> lesson04::Traffic {
        use lesson04::tile_ranges;
        use reference::features::visible_band;
        let (br, bc, d) = (query_rows.min(shape.q_len), key_cols.min(shape.kv_len), shape.head_dim);
        let (mut read, mut written) = (0, 0);
        for rows in tile_ranges(shape.q_len, br) {
            let last_row =
                if self.has(Flash1Bug::WindowFirstRowOnly) { rows.start } else { rows.end - 1 };
            let bands: Vec<_> = (rows.start..=last_row)
                .map(|i| visible_band(shape, i, causal, window))
                .filter(|b| !b.is_empty())
                .collect();
            if bands.is_empty() && self.has(Flash1Bug::WindowEmptyQueryTileFree) {
                continue;
            }
            let first = bands.iter().map(|b| b.start).min().unwrap_or(0);
            let end = bands.iter().map(|b| b.end).max().unwrap_or(0);
            for keys in tile_ranges(shape.kv_len, bc) {
                let seen = keys.start < end && first < keys.end;
                if seen || self.has(Flash1Bug::WindowSkipsNothing) {
                    let len =
                        if self.has(Flash1Bug::WindowTailCountedWhole) { bc } else { keys.len() };
                    let tensors = if self.has(Flash1Bug::WindowKeysOnly) { 1 } else { 2 };
                    read += tensors * len * d;
                }
            }
            read += rows.len() * d;
            written += rows.len() * d;
            if !self.has(Flash1Bug::WindowLseNotCounted) {
                written += rows.len();
            }
        }
        let heads = shape.batch * shape.heads * size_of::<f32>();
        lesson04::Traffic { bytes_read: read * heads, bytes_written: written * heads }
    }

    fn classify(
        &self,
        shape: &AttentionShape,
        causal: bool,
        rows: std::ops::Range<usize>,
        keys: std::ops::Range<usize>,
    ) -> lesson03::TileKind {
        use lesson03::TileKind::{Full, Masked, Skipped};
        let skip_row = if self.has(Flash1Bug::SkipTooEager) { rows.start } else { rows.end - 1 };
        if !causal {
            Full
        } else if keys.start >= shape.visible_keys(skip_row, true) {
            Skipped
        } else if keys.end > shape.visible_keys(rows.start, true)
            && !self.has(Flash1Bug::DiagonalNotMasked)
        {
            Masked
        } else {
            Full
        }
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
    ) -> Result<lesson04::Run, AttentionError> {
        use lesson03::{TileKind, TileSizes, mask_future_keys};
        use lesson04::{TileCounts, TwoLevelMemory, tile_ranges, working_set_bytes};
        use ndarray::Array3;
        use ndarray::linalg::general_mat_mul;

        let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
        let tiles = TileSizes::new(query_rows, key_cols)?;
        if self.has(Flash1Bug::NoScale) {
            scale = 1.0;
        }
        let (br, bc, d) = (query_rows, key_cols, shape.head_dim);
        let mut mem = TwoLevelMemory::new(fast_bytes);
        mem.reserve(working_set_bytes(tiles, d))?;
        let (mut q_t, mut o_t) = (Array2::<f32>::zeros((br, d)), Array2::<f32>::zeros((br, d)));
        let (mut k_t, mut v_t) = (Array2::<f32>::zeros((bc, d)), Array2::<f32>::zeros((bc, d)));
        let mut scores = Array2::<f32>::zeros((br, bc));
        let (mut m_t, mut l_t) = (Array1::<f32>::zeros(br), Array1::<f32>::zeros(br));
        let mut out = AttentionOutput::empty(&shape);
        let mut m_slow = Array3::<f32>::from_elem(shape.lse_dims(), f32::NEG_INFINITY);
        let mut l_slow = Array3::<f32>::zeros(shape.lse_dims());
        let mut counts = TileCounts::default();
        for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
            for keys in tile_ranges(shape.kv_len, bc) {
                let c = keys.len();
                mem.load(k.slice(s![b, h, keys.clone(), ..]), k_t.slice_mut(s![..c, ..]));
                mem.load(v.slice(s![b, h, keys.clone(), ..]), v_t.slice_mut(s![..c, ..]));
                for rows in tile_ranges(shape.q_len, br) {
                    let n = rows.len();
                    let kind = self.classify(&shape, options.causal, rows.clone(), keys.clone());
                    counts.add(kind);
                    let load = |mem: &mut TwoLevelMemory,
                                q_t: &mut Array2<f32>,
                                o_t: &mut Array2<f32>,
                                m_t: &mut Array1<f32>,
                                l_t: &mut Array1<f32>,
                                out: &AttentionOutput<f32>,
                                m_slow: &Array3<f32>,
                                l_slow: &Array3<f32>| {
                        mem.load(q.slice(s![b, h, rows.clone(), ..]), q_t.slice_mut(s![..n, ..]));
                        mem.load(
                            out.o.slice(s![b, h, rows.clone(), ..]),
                            o_t.slice_mut(s![..n, ..]),
                        );
                        mem.load(m_slow.slice(s![b, h, rows.clone()]), m_t.slice_mut(s![..n]));
                        mem.load(l_slow.slice(s![b, h, rows.clone()]), l_t.slice_mut(s![..n]));
                    };
                    if self.has(Flash1Bug::SkippedTilesLoaded) {
                        load(
                            &mut mem, &mut q_t, &mut o_t, &mut m_t, &mut l_t, &out, &m_slow,
                            &l_slow,
                        );
                    }
                    if kind == TileKind::Skipped {
                        continue;
                    }
                    if !self.has(Flash1Bug::SkippedTilesLoaded) {
                        load(
                            &mut mem, &mut q_t, &mut o_t, &mut m_t, &mut l_t, &out, &m_slow,
                            &l_slow,
                        );
                    }
                    if self.has(Flash1Bug::StatsNotWrittenBack) {
                        m_t.fill(f32::NEG_INFINITY);
                        l_t.fill(0.0);
                    }
                    let mut st = scores.slice_mut(s![..n, ..c]);
                    general_mat_mul(
                        scale,
                        &q_t.slice(s![..n, ..]),
                        &k_t.slice(s![..c, ..]).t(),
                        0.0,
                        &mut st,
                    );
                    if kind == TileKind::Masked {
                        mask_future_keys(&mut st, rows.start, keys.start, &shape);
                    }
                    for r in 0..n {
                        let p_row: Vec<f32> = st.row(r).to_vec();
                        let tile_max = row_max(&p_row);
                        if tile_max == f32::NEG_INFINITY {
                            continue;
                        }
                        let p: Vec<f32> = p_row.iter().map(|&x| (x - tile_max).exp()).collect();
                        let tile_sum: f32 = p.iter().sum();
                        let new_max = m_t[r].max(tile_max);
                        let old_weight = if self.has(Flash1Bug::OutputNotRescaled) {
                            1.0
                        } else {
                            (m_t[r] - new_max).exp()
                        };
                        let tile_weight = (tile_max - new_max).exp();
                        let new_sum = (m_t[r] - new_max).exp() * l_t[r] + tile_weight * tile_sum;
                        let pv = weighted_sum(&p, |j| v_t.row(j));
                        let updated =
                            (&o_t.row(r) * (l_t[r] * old_weight) + pv * tile_weight) / new_sum;
                        o_t.row_mut(r).assign(&updated);
                        (m_t[r], l_t[r]) = (new_max, new_sum);
                    }
                    mem.store(o_t.slice(s![..n, ..]), out.o.slice_mut(s![b, h, rows.clone(), ..]));
                    if !self.has(Flash1Bug::StatsNotWrittenBack) {
                        mem.store(m_t.slice(s![..n]), m_slow.slice_mut(s![b, h, rows.clone()]));
                        mem.store(l_t.slice(s![..n]), l_slow.slice_mut(s![b, h, rows]));
                    }
                }
            }
            for rows in tile_ranges(shape.q_len, br) {
                let n = rows.len();
                mem.load(m_slow.slice(s![b, h, rows.clone()]), m_t.slice_mut(s![..n]));
                mem.load(l_slow.slice(s![b, h, rows.clone()]), l_t.slice_mut(s![..n]));
                let lse = Array1::from_shape_fn(n, |r| {
                    if l_t[r] > 0.0 { m_t[r] + l_t[r].ln() } else { f32::NEG_INFINITY }
                });
                mem.store(lse.view(), out.lse.slice_mut(s![b, h, rows]));
            }
        }
        Ok(lesson04::Run { output: out, traffic: mem.traffic(), tiles: counts })
    }
}
