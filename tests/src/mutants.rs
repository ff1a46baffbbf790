//! Planted-bug implementations ("mutants") of every exercise: each carries exactly one classic
//! mistake. The self-check proves that the hidden checks catch every one of them.
//!
//! Each exercise has one small implementation with a switch per bug, written plainly (loops
//! over rows and keys) so that the mistake is easy to see.

use ndarray::{Array1, Array2, Array4, ArrayView1, s};
use reference::layout::{bhsd_to_bshd, bshd_to_bhsd};
use reference::{AttentionError, AttentionOptions, AttentionOutput, AttentionShape};

use crate::ex01::Exercise01;
use crate::ex02::{Exercise02, State};
use crate::ex03::Exercise03;

/// Classic mistakes in naive attention (exercise 01).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NaiveBug {
    /// Scores not multiplied by `1/sqrt(D)`.
    NoScale,
    /// The causal flag is ignored.
    CausalIgnored,
    /// Each query sees one key too many (the mask is shifted by one).
    MaskOffByOne,
    /// `e^S` without subtracting the row maximum: overflows on large logits.
    MaxNotSubtracted,
    /// The logsumexp stored as `ln(l)` instead of `m + ln(l)`.
    LseWithoutMax,
    /// Inputs read as `[B, N, H, D]`: attention over heads instead of positions.
    HeadsAsSequence,
}

impl NaiveBug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::NoScale,
        Self::CausalIgnored,
        Self::MaskOffByOne,
        Self::MaxNotSubtracted,
        Self::LseWithoutMax,
        Self::HeadsAsSequence,
    ];
}

impl Exercise01 for NaiveBug {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        if *self == Self::HeadsAsSequence {
            let out = naive(&bshd_to_bhsd(q), &bshd_to_bhsd(k), &bshd_to_bhsd(v), options, None)?;
            let lse = out.lse.permuted_axes([0, 2, 1]).as_standard_layout().into_owned();
            return Ok(AttentionOutput { o: bhsd_to_bshd(&out.o), lse });
        }
        naive(q, k, v, options, Some(*self))
    }
}

fn naive(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    bug: Option<NaiveBug>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let shape = AttentionShape::of(q, k, v)?;
    let mut scale = options.scale_for(shape.head_dim)?;
    if bug == Some(NaiveBug::NoScale) {
        scale = 1.0;
    }
    let mut out = AttentionOutput::empty(&shape);
    for (b, h, i) in rows(&shape) {
        let visible = match bug {
            Some(NaiveBug::CausalIgnored) => shape.kv_len,
            Some(NaiveBug::MaskOffByOne) => shape.visible_keys(i + 1, options.causal),
            _ => shape.visible_keys(i, options.causal),
        };
        if visible == 0 {
            continue;
        }
        let query = q.slice(s![b, h, i, ..]);
        let scores: Vec<f32> =
            (0..visible).map(|j| scale * query.dot(&k.slice(s![b, h, j, ..]))).collect();
        let max = if bug == Some(NaiveBug::MaxNotSubtracted) { 0.0 } else { row_max(&scores) };
        let weights: Vec<f32> = scores.iter().map(|&x| (x - max).exp()).collect();
        let sum: f32 = weights.iter().sum();
        let o = weighted_sum(&weights, |j| v.slice(s![b, h, j, ..])) / sum;
        out.o.slice_mut(s![b, h, i, ..]).assign(&o);
        out.lse[[b, h, i]] =
            if bug == Some(NaiveBug::LseWithoutMax) { sum.ln() } else { max + sum.ln() };
    }
    Ok(out)
}

/// Classic mistakes in online softmax and online attention (exercise 02).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnlineBug {
    /// "Safe" softmax that does not subtract the maximum.
    SafeWithoutMax,
    /// `push` adds `e^(x - m')` but does not rescale the old sum.
    PushWithoutRescale,
    /// `merge` rescales only the first state.
    MergeRescalesOneSide,
    /// `merge` of two empty states computes `e^(-inf - -inf)` = NaN.
    MergeWithoutEmptyGuard,
    /// Online attention rescales `l` but not the output accumulator.
    AccumulatorNotRescaled,
    /// Online attention forgets `1/sqrt(D)`.
    NoScale,
}

impl OnlineBug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::SafeWithoutMax,
        Self::PushWithoutRescale,
        Self::MergeRescalesOneSide,
        Self::MergeWithoutEmptyGuard,
        Self::AccumulatorNotRescaled,
        Self::NoScale,
    ];
}

impl Exercise02 for OnlineBug {
    fn safe_softmax(&self, x: &[f32]) -> Vec<f32> {
        if *self == Self::SafeWithoutMax {
            lesson02::naive_softmax(x)
        } else {
            lesson02::safe_softmax(x)
        }
    }

    fn push(&self, (max, sum): State, x: f32) -> State {
        let new_max = max.max(x);
        if new_max == f32::NEG_INFINITY {
            return (max, sum);
        }
        let carried =
            if *self == Self::PushWithoutRescale { sum } else { sum * (max - new_max).exp() };
        (new_max, carried + (x - new_max).exp())
    }

    fn merge(&self, a: State, b: State) -> State {
        let max = a.0.max(b.0);
        if max == f32::NEG_INFINITY && *self != Self::MergeWithoutEmptyGuard {
            return (f32::NEG_INFINITY, 0.0);
        }
        let b_part =
            if *self == Self::MergeRescalesOneSide { b.1 } else { b.1 * (b.0 - max).exp() };
        (max, a.1 * (a.0 - max).exp() + b_part)
    }

    fn online_softmax(&self, x: &[f32]) -> Vec<f32> {
        let (max, sum) = x.iter().fold((f32::NEG_INFINITY, 0.0), |st, &xi| self.push(st, xi));
        x.iter().map(|&xi| if sum > 0.0 { (xi - max).exp() / sum } else { 0.0 }).collect()
    }

    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let shape = AttentionShape::of(q, k, v)?;
        let mut scale = options.scale_for(shape.head_dim)?;
        if *self == Self::NoScale {
            scale = 1.0;
        }
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape) {
            let (mut state, mut acc) =
                ((f32::NEG_INFINITY, 0.0), Array1::<f32>::zeros(shape.head_dim));
            for j in 0..shape.visible_keys(i, options.causal) {
                let score = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                let new = self.push(state, score);
                if *self != Self::AccumulatorNotRescaled {
                    acc *= (state.0 - new.0).exp();
                }
                acc.scaled_add((score - new.0).exp(), &v.slice(s![b, h, j, ..]));
                state = new;
            }
            if state.1 > 0.0 {
                out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / state.1));
                out.lse[[b, h, i]] = state.0 + state.1.ln();
            }
        }
        Ok(out)
    }
}

/// Classic mistakes in the tiled forward (exercise 03).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TiledBug {
    /// Scores not multiplied by `1/sqrt(D)`.
    NoScale,
    /// Neither `l` nor `acc` rescaled by `e^(m_old - m_new)` when the maximum grows.
    MissingRescale,
    /// `l` rescaled, the output accumulator not.
    AccumulatorNotRescaled,
    /// Each query sees one key too many on the diagonal tiles.
    MaskOffByOne,
    /// The last, shorter query tile is never computed.
    QueryTailIgnored,
    /// The last, shorter key tile is never read.
    KeyTailIgnored,
    /// The logsumexp stored as `ln(l)` instead of `m + ln(l)`.
    LseWithoutMax,
    /// Key tiles skipped from the first row's last visible key, not the last row's.
    SkipTooEager,
}

impl TiledBug {
    /// Every planted bug.
    pub const ALL: [Self; 8] = [
        Self::NoScale,
        Self::MissingRescale,
        Self::AccumulatorNotRescaled,
        Self::MaskOffByOne,
        Self::QueryTailIgnored,
        Self::KeyTailIgnored,
        Self::LseWithoutMax,
        Self::SkipTooEager,
    ];
}

impl Exercise03 for TiledBug {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let shape = AttentionShape::of(q, k, v)?;
        let bug = *self;
        let mut scale = options.scale_for(shape.head_dim)?;
        if bug == Self::NoScale {
            scale = 1.0;
        }
        for (which, value) in [("query rows (Br)", query_rows), ("key columns (Bc)", key_cols)] {
            if value == 0 {
                return Err(AttentionError::InvalidTileSize { which, value });
            }
        }
        let whole = |n: usize, tile: usize| n / tile * tile; // where a tail-ignoring loop stops
        let q_end = if bug == Self::QueryTailIgnored {
            whole(shape.q_len, query_rows)
        } else {
            shape.q_len
        };
        let k_end =
            if bug == Self::KeyTailIgnored { whole(shape.kv_len, key_cols) } else { shape.kv_len };
        let mut out = AttentionOutput::empty(&shape);
        for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
            for r0 in (0..q_end).step_by(query_rows) {
                let rows = r0..(r0 + query_rows).min(shape.q_len);
                let n = rows.len();
                let (mut m, mut l) = (vec![f32::NEG_INFINITY; n], vec![0.0f32; n]);
                let mut acc = Array2::<f32>::zeros((n, shape.head_dim));
                let skip_from_row =
                    if bug == Self::SkipTooEager { rows.start } else { rows.end - 1 };
                let key_limit = shape.visible_keys(skip_from_row, options.causal);
                for c0 in (0..k_end).step_by(key_cols).take_while(|&c0| c0 < key_limit) {
                    let keys = c0..(c0 + key_cols).min(shape.kv_len);
                    for (r, i) in rows.clone().enumerate() {
                        let seen = if bug == Self::MaskOffByOne { i + 1 } else { i };
                        let visible = shape.visible_keys(seen, options.causal);
                        let query = q.slice(s![b, h, i, ..]);
                        let scores: Vec<f32> = keys
                            .clone()
                            .map(|j| {
                                if j < visible {
                                    scale * query.dot(&k.slice(s![b, h, j, ..]))
                                } else {
                                    f32::NEG_INFINITY
                                }
                            })
                            .collect();
                        let new_max = m[r].max(row_max(&scores));
                        if new_max == f32::NEG_INFINITY {
                            continue;
                        }
                        let correction =
                            if bug == Self::MissingRescale { 1.0 } else { (m[r] - new_max).exp() };
                        let p: Vec<f32> = scores.iter().map(|&x| (x - new_max).exp()).collect();
                        l[r] = l[r] * correction + p.iter().sum::<f32>();
                        let acc_correction =
                            if bug == Self::AccumulatorNotRescaled { 1.0 } else { correction };
                        let pv = weighted_sum(&p, |t| v.slice(s![b, h, keys.start + t, ..]));
                        let updated = &acc.row(r) * acc_correction + pv;
                        acc.row_mut(r).assign(&updated);
                        m[r] = new_max;
                    }
                }
                for (r, i) in rows.enumerate() {
                    if l[r] > 0.0 {
                        out.o.slice_mut(s![b, h, i, ..]).assign(&(&acc.row(r) / l[r]));
                        out.lse[[b, h, i]] =
                            if bug == Self::LseWithoutMax { l[r].ln() } else { m[r] + l[r].ln() };
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Every `(batch, head, query row)` of `shape`.
fn rows(shape: &AttentionShape) -> impl Iterator<Item = (usize, usize, usize)> + use<> {
    let (batch, heads, q_len) = (shape.batch, shape.heads, shape.q_len);
    (0..batch).flat_map(move |b| (0..heads).flat_map(move |h| (0..q_len).map(move |i| (b, h, i))))
}

fn row_max(scores: &[f32]) -> f32 {
    scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// `sum_j weights[j] * value(j)`.
fn weighted_sum<'a>(weights: &[f32], value: impl Fn(usize) -> ArrayView1<'a, f32>) -> Array1<f32> {
    let mut sum = Array1::zeros(value(0).len());
    for (j, &w) in weights.iter().enumerate() {
        sum.scaled_add(w, &value(j));
    }
    sum
}

/// Classic mistakes in causal tile classification and FlashAttention-1's loop order
/// (exercise 04).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flash1Bug {
    /// Tiles skipped when the tile's *first* row sees none of the keys.
    SkipTooEager,
    /// Tiles on the diagonal classified as full: never masked.
    DiagonalNotMasked,
    /// The old output not rescaled by `e^(m - m')` before the new tile is added.
    OutputNotRescaled,
    /// `m` and `l` never written back: each K/V tile starts the statistics afresh.
    StatsNotWrittenBack,
    /// `Q`, `O`, `m`, `l` loaded before the skip test: skipped tiles still cost IO.
    SkippedTilesLoaded,
    /// Scores not multiplied by `1/sqrt(D)`.
    NoScale,
}

impl Flash1Bug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::SkipTooEager,
        Self::DiagonalNotMasked,
        Self::OutputNotRescaled,
        Self::StatsNotWrittenBack,
        Self::SkippedTilesLoaded,
        Self::NoScale,
    ];
}

impl crate::ex04::Exercise04 for Flash1Bug {
    fn classify(
        &self,
        shape: &AttentionShape,
        causal: bool,
        rows: std::ops::Range<usize>,
        keys: std::ops::Range<usize>,
    ) -> lesson03::TileKind {
        use lesson03::TileKind::{Full, Masked, Skipped};
        let skip_row = if *self == Self::SkipTooEager { rows.start } else { rows.end - 1 };
        if !causal {
            Full
        } else if keys.start >= shape.visible_keys(skip_row, true) {
            Skipped
        } else if keys.end > shape.visible_keys(rows.start, true)
            && *self != Self::DiagonalNotMasked
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

        let shape = AttentionShape::of(q, k, v)?;
        let tiles = TileSizes::new(query_rows, key_cols)?;
        let mut scale = options.scale_for(shape.head_dim)?;
        if *self == Self::NoScale {
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
                    if *self == Self::SkippedTilesLoaded {
                        load(
                            &mut mem, &mut q_t, &mut o_t, &mut m_t, &mut l_t, &out, &m_slow,
                            &l_slow,
                        );
                    }
                    if kind == TileKind::Skipped {
                        continue;
                    }
                    if *self != Self::SkippedTilesLoaded {
                        load(
                            &mut mem, &mut q_t, &mut o_t, &mut m_t, &mut l_t, &out, &m_slow,
                            &l_slow,
                        );
                    }
                    if *self == Self::StatsNotWrittenBack {
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
                        let old_weight = if *self == Self::OutputNotRescaled {
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
                    if *self != Self::StatsNotWrittenBack {
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

/// Classic mistakes in the backward pass (exercise 05).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackwardBug {
    /// `dS = P ∘ dP`: the `D` term of the softmax Jacobian forgotten.
    NoDTerm,
    /// `P = e^S` recomputed without subtracting the saved logsumexp.
    PWithoutLogsumexp,
    /// The causal mask not applied when `P` is recomputed.
    MaskNotApplied,
    /// Rows that see no key (`L = -inf`) give `e^(-inf - -inf)` = NaN.
    NoGuardForEmptyRows,
    /// `dK_j` overwritten by each query tile instead of accumulated.
    DkOverwritten,
    /// `dQ` without the softmax scale.
    NoScaleInDq,
}

impl BackwardBug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::NoDTerm,
        Self::PWithoutLogsumexp,
        Self::MaskNotApplied,
        Self::NoGuardForEmptyRows,
        Self::DkOverwritten,
        Self::NoScaleInDq,
    ];
}

impl crate::ex05::Exercise05 for BackwardBug {
    fn backward(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<reference::Gradients<f32>, AttentionError> {
        use lesson03::{TileKind, TileSizes, classify_tile, mask_future_keys};
        use lesson04::tile_ranges;
        use ndarray::linalg::general_mat_mul;

        let bug = *self;
        let shape = AttentionShape::of(q, k, v)?;
        reference::check_same_shape("dO", d_o, "Q", q)?;
        reference::check_same_shape("O", &forward.o, "Q", q)?;
        reference::check_lse_shape(&forward.lse, q)?;
        TileSizes::new(query_rows, key_cols)?;
        let scale = options.scale_for(shape.head_dim)?;
        let mut grads = reference::Gradients {
            dq: Array4::zeros(q.dim()),
            dk: Array4::zeros(k.dim()),
            dv: Array4::zeros(v.dim()),
        };
        for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
            let d: Array1<f32> = (0..shape.q_len)
                .map(|i| d_o.slice(s![b, h, i, ..]).dot(&forward.o.slice(s![b, h, i, ..])))
                .collect();
            for keys in tile_ranges(shape.kv_len, key_cols) {
                let (k_j, v_j) =
                    (k.slice(s![b, h, keys.clone(), ..]), v.slice(s![b, h, keys.clone(), ..]));
                let (mut dk_j, mut dv_j) =
                    (Array2::<f32>::zeros(k_j.dim()), Array2::<f32>::zeros(v_j.dim()));
                for rows in tile_ranges(shape.q_len, query_rows) {
                    let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                    if kind == TileKind::Skipped && bug != Self::MaskNotApplied {
                        continue;
                    }
                    let (q_i, d_o_i) = (
                        q.slice(s![b, h, rows.clone(), ..]),
                        d_o.slice(s![b, h, rows.clone(), ..]),
                    );
                    let mut p = q_i.dot(&k_j.t()) * scale;
                    if kind != TileKind::Full && bug != Self::MaskNotApplied {
                        mask_future_keys(&mut p.view_mut(), rows.start, keys.start, &shape);
                    }
                    for (mut row, &l) in
                        p.outer_iter_mut().zip(forward.lse.slice(s![b, h, rows.clone()]))
                    {
                        let empty = l == f32::NEG_INFINITY && bug != Self::NoGuardForEmptyRows;
                        let shift = if bug == Self::PWithoutLogsumexp { 0.0 } else { l };
                        row.mapv_inplace(|x| if empty { 0.0 } else { (x - shift).exp() });
                    }
                    general_mat_mul(1.0, &p.t(), &d_o_i, 1.0, &mut dv_j);
                    let mut d_s = d_o_i.dot(&v_j.t());
                    for ((mut ds_row, p_row), &d_i) in
                        d_s.outer_iter_mut().zip(p.outer_iter()).zip(d.slice(s![rows.clone()]))
                    {
                        let d_i = if bug == Self::NoDTerm { 0.0 } else { d_i };
                        ds_row.zip_mut_with(&p_row, |ds, &p| *ds = p * (*ds - d_i));
                    }
                    let dq_scale = if bug == Self::NoScaleInDq { 1.0 } else { scale };
                    general_mat_mul(
                        dq_scale,
                        &d_s,
                        &k_j,
                        1.0,
                        &mut grads.dq.slice_mut(s![b, h, rows, ..]),
                    );
                    let beta = if bug == Self::DkOverwritten { 0.0 } else { 1.0 };
                    general_mat_mul(scale, &d_s.t(), &q_i, beta, &mut dk_j);
                }
                grads.dk.slice_mut(s![b, h, keys.clone(), ..]).assign(&dk_j);
                grads.dv.slice_mut(s![b, h, keys, ..]).assign(&dv_j);
            }
        }
        Ok(grads)
    }
}

/// Classic mistakes in half-precision attention (exercise 06).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrecisionBug {
    /// The softmax sum `l` kept in the storage format.
    SumInStorageFormat,
    /// The output accumulator rounded to the storage format at every key.
    AccumulatorInStorageFormat,
    /// `e^s` without subtracting the running maximum.
    MaxNotSubtracted,
    /// `L` rounded to the storage format.
    LseRounded,
    /// Mixed formats silently widened to f32 instead of rejected.
    MixedFormatsConverted,
    /// Scores not multiplied by `1/sqrt(D)`.
    NoScale,
}

impl PrecisionBug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::SumInStorageFormat,
        Self::AccumulatorInStorageFormat,
        Self::MaxNotSubtracted,
        Self::LseRounded,
        Self::MixedFormatsConverted,
        Self::NoScale,
    ];

    /// Online attention, one key at a time, on `T` storage, with this bug.
    fn online<T: lesson06::Element>(
        self,
        q: &Array4<T>,
        k: &Array4<T>,
        v: &Array4<T>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<T>, AttentionError> {
        let shape = AttentionShape::of(q, k, v)?;
        let mut scale = options.scale_for(shape.head_dim)?;
        if self == Self::NoScale {
            scale = 1.0;
        }
        let keep = |x: f32, rounded: bool| if rounded { T::from_f32(x).to_f32() } else { x };
        let mut o = Array4::from_elem(q.dim(), T::from_f32(0.0));
        let mut lse = ndarray::Array3::from_elem(shape.lse_dims(), f32::NEG_INFINITY);
        for (b, h, i) in rows(&shape) {
            let (mut m, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, vec![0.0f32; shape.head_dim]);
            for j in 0..shape.visible_keys(i, options.causal) {
                let s: f32 = scale
                    * (0..shape.head_dim)
                        .map(|c| q[[b, h, i, c]].to_f32() * k[[b, h, j, c]].to_f32())
                        .sum::<f32>();
                let new_m = if self == Self::MaxNotSubtracted { 0.0 } else { m.max(s) };
                let correction = if m == f32::NEG_INFINITY { 0.0 } else { (m - new_m).exp() };
                let p = (s - new_m).exp();
                l = keep(l * correction + p, self == Self::SumInStorageFormat);
                for (c, a) in acc.iter_mut().enumerate() {
                    *a = keep(
                        *a * correction + p * v[[b, h, j, c]].to_f32(),
                        self == Self::AccumulatorInStorageFormat,
                    );
                }
                m = new_m;
            }
            if l > 0.0 {
                for (c, a) in acc.iter().enumerate() {
                    o[[b, h, i, c]] = T::from_f32(a / l);
                }
                lse[[b, h, i]] = keep(m + l.ln(), self == Self::LseRounded);
            }
        }
        Ok(lesson06::Output { o, lse })
    }
}

impl crate::ex06::Exercise06 for PrecisionBug {
    fn attention_f16(
        &self,
        q: &Array4<half::f16>,
        k: &Array4<half::f16>,
        v: &Array4<half::f16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::f16>, AttentionError> {
        self.online(q, k, v, options)
    }

    fn attention_bf16(
        &self,
        q: &Array4<half::bf16>,
        k: &Array4<half::bf16>,
        v: &Array4<half::bf16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::bf16>, AttentionError> {
        self.online(q, k, v, options)
    }

    fn dispatch(
        &self,
        q: &lesson06::policy::Tensor,
        k: &lesson06::policy::Tensor,
        v: &lesson06::policy::Tensor,
        options: &AttentionOptions,
    ) -> Result<(lesson06::policy::Tensor, ndarray::Array3<f32>), AttentionError> {
        use lesson06::policy::Tensor;
        match (q, k, v) {
            (Tensor::F16(q), Tensor::F16(k), Tensor::F16(v)) => {
                self.online(q, k, v, options).map(|out| (Tensor::F16(out.o), out.lse))
            }
            (Tensor::BF16(q), Tensor::BF16(k), Tensor::BF16(v)) => {
                self.online(q, k, v, options).map(|out| (Tensor::BF16(out.o), out.lse))
            }
            (Tensor::F32(q), Tensor::F32(k), Tensor::F32(v)) => {
                self.online(q, k, v, options).map(|out| (Tensor::F32(out.o), out.lse))
            }
            _ if *self == Self::MixedFormatsConverted => self
                .online(&q.to_f32(), &k.to_f32(), &v.to_f32(), options)
                .map(|out| (Tensor::F32(out.o), out.lse)),
            _ => Err(AttentionError::MixedDtypes {
                q: q.dtype().name(),
                k: k.dtype().name(),
                v: v.dtype().name(),
            }),
        }
    }
}

/// Classic mistakes in the fast exp2 and the base-2 parallel forward (exercise 07).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParallelBug {
    /// `n = floor(x)`: the fraction reaches 1 and the polynomial loses accuracy.
    Exp2RoundsDown,
    /// No clamp at -127: very negative inputs give garbage exponent bits.
    Exp2NotClamped,
    /// Base-2 exponentials of natural-log scores: `log2(e)` not folded into the scale.
    NoLog2E,
    /// `L` left in base 2.
    LseInBase2,
    /// The accumulator not rescaled when the maximum grows.
    MissingRescale,
    /// The last, shorter query tile never computed.
    TailTileDropped,
}

impl ParallelBug {
    /// Every planted bug.
    pub const ALL: [Self; 6] = [
        Self::Exp2RoundsDown,
        Self::Exp2NotClamped,
        Self::NoLog2E,
        Self::LseInBase2,
        Self::MissingRescale,
        Self::TailTileDropped,
    ];
}

impl crate::ex07::Exercise07 for ParallelBug {
    fn exp2(&self, x: f32) -> f32 {
        let x = if *self == Self::Exp2NotClamped { x } else { x.max(-127.0) };
        let n = if *self == Self::Exp2RoundsDown { x.floor() } else { x.round() };
        let t = (x - n) * std::f32::consts::LN_2;
        let p = 1.0
            + t * (1.0
                + t * (0.5
                    + t * (1.0 / 6.0
                        + t * (1.0 / 24.0
                            + t * (1.0 / 120.0 + t * (1.0 / 720.0 + t * (1.0 / 5040.0)))))));
        p * f32::from_bits(((n as i32).wrapping_add(127) as u32) << 23)
    }

    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        let shape = AttentionShape::of(q, k, v)?;
        lesson03::TileSizes::new(query_rows, key_cols)?;
        let log2e = if *self == Self::NoLog2E { 1.0 } else { std::f32::consts::LOG2_E };
        let scale = options.scale_for(shape.head_dim)? * log2e;
        let computed_rows = if *self == Self::TailTileDropped {
            shape.q_len / query_rows * query_rows
        } else {
            shape.q_len
        };
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape).filter(|&(_, _, i)| i < computed_rows) {
            let (mut m, mut l, mut acc) =
                (f32::NEG_INFINITY, 0.0f32, Array1::<f32>::zeros(shape.head_dim));
            for j in 0..shape.visible_keys(i, options.causal) {
                let s = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                let new_m = m.max(s);
                let correction =
                    if *self == Self::MissingRescale { 1.0 } else { self.exp2(m - new_m) };
                let p = self.exp2(s - new_m);
                l = l * correction + p;
                acc *= correction;
                acc.scaled_add(p, &v.slice(s![b, h, j, ..]));
                m = new_m;
            }
            if l > 0.0 {
                out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / l));
                let base2 = m + l.log2();
                out.lse[[b, h, i]] =
                    if *self == Self::LseInBase2 { base2 } else { std::f32::consts::LN_2 * base2 };
            }
        }
        Ok(out)
    }
}
