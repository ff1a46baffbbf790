//! Planted-bug implementations ("mutants") of every exercise: each carries exactly one classic
//! mistake. The self-check proves that the hidden checks catch every one of them, each with
//! the check meant to catch it (so that the hint a learner sees fits the mistake), and that the
//! same implementation with no bug switched on, the control, passes every check.
//!
//! Each exercise has one small implementation with a switch per bug, written plainly (loops
//! over rows and keys) so that the mistake is easy to see.

use std::sync::atomic::{AtomicUsize, Ordering};

use ndarray::{Array1, Array2, Array4, ArrayView1, s};
use reference::layout::{bhsd_to_bshd, bshd_to_bhsd};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, AttentionShape, CheckedInputs, check_inputs,
};

use crate::ex01::Exercise01;
use crate::ex02::{Exercise02, State};
use crate::ex03::Exercise03;
use crate::{ex02, ex03, ex04, ex05, ex06, ex07, forward};

// ANCHOR: planted_bugs
/// Declares a set of planted bugs: the enum, [`ALL`](NaiveBug::ALL) (every variant, listed by
/// the macro itself, so none can be left out of the self-check) and `caught_by`, the check
/// meant to catch each one (an exhaustive match).
macro_rules! planted_bugs {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$doc:meta])* $bug:ident => $check:expr, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$doc])* $bug, )+
        }

        impl $name {
            /// Every planted bug of this set.
            pub const ALL: &'static [Self] = &[$(Self::$bug,)+];

            /// The name of the check meant to catch this bug.
            pub fn caught_by(self) -> &'static str {
                match self {
                    $( Self::$bug => $check, )+
                }
            }
        }
    };
}
// ANCHOR_END: planted_bugs

/// An exercise's planted-bug implementation with one bug switched on, or none (the control,
/// which must pass every check: a mutant is only caught if the control is not).
#[derive(Debug)]
pub struct Planted<B> {
    /// The bug, or `None` for the control.
    pub bug: Option<B>,
    /// Tiles of scores computed so far (exercise 03 reports them; atomic because exercise 07's
    /// checks share the implementation with rayon's threads).
    tiles: AtomicUsize,
}

impl<B: Copy + PartialEq> Planted<B> {
    /// The implementation with `bug`.
    pub fn with(bug: B) -> Self {
        Self { bug: Some(bug), tiles: AtomicUsize::new(0) }
    }

    /// The implementation with no bug.
    pub fn control() -> Self {
        Self { bug: None, tiles: AtomicUsize::new(0) }
    }

    fn has(&self, bug: B) -> bool {
        self.bug == Some(bug)
    }
}

planted_bugs! {
    /// Classic mistakes in naive attention (exercise 01).
    pub enum NaiveBug {
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
        /// The causal flag is ignored.
        CausalIgnored => forward::CAUSAL_SQUARE,
        /// Each query sees one key too many (the mask is shifted by one).
        MaskOffByOne => forward::CAUSAL_SQUARE,
        /// `e^S` without subtracting the row maximum: overflows on large logits.
        MaxNotSubtracted => forward::LARGE_LOGITS,
        /// The logsumexp stored as `ln(l)` instead of `m + ln(l)`.
        LseWithoutMax => forward::ONE_KEY,
        /// Inputs read as `[B, N, H, D]`: attention over heads instead of positions.
        HeadsAsSequence => forward::INDEPENDENT,
    }
}

impl Exercise01 for Planted<NaiveBug> {
    fn attention(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
    ) -> Result<AttentionOutput<f32>, AttentionError> {
        if self.has(NaiveBug::HeadsAsSequence) {
            let out = naive(&bshd_to_bhsd(q), &bshd_to_bhsd(k), &bshd_to_bhsd(v), options, None)?;
            let lse = out.lse.permuted_axes([0, 2, 1]).as_standard_layout().into_owned();
            return Ok(AttentionOutput { o: bhsd_to_bshd(&out.o), lse });
        }
        naive(q, k, v, options, self.bug)
    }
}

fn naive(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    bug: Option<NaiveBug>,
) -> Result<AttentionOutput<f32>, AttentionError> {
    let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
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

planted_bugs! {
    /// Classic mistakes in online softmax and online attention (exercise 02).
    pub enum OnlineBug {
        /// "Safe" softmax that does not subtract the maximum.
        SafeWithoutMax => ex02::SAFE_NEAR_1000,
        /// `push` adds `e^(x - m')` but does not rescale the old sum.
        PushWithoutRescale => ex02::PUSH,
        /// `merge` rescales only the first state.
        MergeRescalesOneSide => ex02::MERGE,
        /// `merge` of two empty states computes `e^(-inf - -inf)` = NaN.
        MergeWithoutEmptyGuard => ex02::MERGE_IDENTITY,
        /// Online attention rescales `l` but not the output accumulator.
        AccumulatorNotRescaled => forward::RANDOM,
        /// Online attention forgets `1/sqrt(D)`.
        NoScale => forward::TWO_KEYS,
    }
}

impl Exercise02 for Planted<OnlineBug> {
    fn safe_softmax(&self, x: &[f32]) -> Vec<f32> {
        if self.has(OnlineBug::SafeWithoutMax) {
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
            if self.has(OnlineBug::PushWithoutRescale) { sum } else { sum * (max - new_max).exp() };
        (new_max, carried + (x - new_max).exp())
    }

    fn merge(&self, a: State, b: State) -> State {
        let max = a.0.max(b.0);
        if max == f32::NEG_INFINITY && !self.has(OnlineBug::MergeWithoutEmptyGuard) {
            return (f32::NEG_INFINITY, 0.0);
        }
        let b_part =
            if self.has(OnlineBug::MergeRescalesOneSide) { b.1 } else { b.1 * (b.0 - max).exp() };
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
        let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
        if self.has(OnlineBug::NoScale) {
            scale = 1.0;
        }
        let mut out = AttentionOutput::empty(&shape);
        for (b, h, i) in rows(&shape) {
            let (mut state, mut acc) =
                ((f32::NEG_INFINITY, 0.0), Array1::<f32>::zeros(shape.head_dim));
            for j in 0..shape.visible_keys(i, options.causal) {
                let score = scale * q.slice(s![b, h, i, ..]).dot(&k.slice(s![b, h, j, ..]));
                let new = self.push(state, score);
                if !self.has(OnlineBug::AccumulatorNotRescaled) {
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
    }
}

impl crate::ex04::Exercise04 for Planted<Flash1Bug> {
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

planted_bugs! {
    /// Classic mistakes in the backward pass (exercise 05).
    pub enum BackwardBug {
        /// `dS = P ∘ dP`: the `D` term of the softmax Jacobian forgotten.
        NoDTerm => ex05::RANDOM,
        /// `P = e^S` recomputed without subtracting the saved logsumexp.
        PWithoutLogsumexp => ex05::RANDOM,
        /// The causal mask not applied when `P` is recomputed.
        MaskNotApplied => ex05::CAUSAL_SQUARE,
        /// Rows that see no key (`L = -inf`) give `e^(-inf - -inf)` = NaN.
        NoGuardForEmptyRows => ex05::CAUSAL_RECTANGULAR,
        /// `dK_j` overwritten by each query tile instead of accumulated.
        DkOverwritten => ex05::ANY_TILES,
        /// `dQ` without the softmax scale.
        NoScaleInDq => ex05::RANDOM,
        /// The whole `Nq x Nkv` matrix `P` recomputed up front, then read tile by tile.
        WholeProbabilityMatrix => ex05::MEMORY,
        /// `L` not checked against the mask: an `L` of `-inf` everywhere gives zero gradients.
        LogsumexpNotChecked => ex05::BAD_VALUES,
    }
}

impl crate::ex05::Exercise05 for Planted<BackwardBug> {
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

        let bug = self.bug;
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        reference::check_same_shape("dO", d_o, "Q", q)?;
        reference::check_same_shape("O", &forward.o, "Q", q)?;
        reference::check_lse_shape(&forward.lse, q)?;
        reference::check_finite("dO", d_o)?;
        reference::check_finite("O", &forward.o)?;
        if bug != Some(BackwardBug::LogsumexpNotChecked) {
            reference::check_logsumexp(&forward.lse, &shape, options.causal)?;
        }
        TileSizes::new(query_rows, key_cols)?;
        let mut grads = reference::Gradients {
            dq: Array4::zeros(q.dim()),
            dk: Array4::zeros(k.dim()),
            dv: Array4::zeros(v.dim()),
        };
        for (b, h) in (0..shape.batch).flat_map(|b| (0..shape.heads).map(move |h| (b, h))) {
            let d: Array1<f32> = (0..shape.q_len)
                .map(|i| d_o.slice(s![b, h, i, ..]).dot(&forward.o.slice(s![b, h, i, ..])))
                .collect();
            // The bug: every score of the head at once, Nq x Nkv, kept for the whole loop.
            let whole = (bug == Some(BackwardBug::WholeProbabilityMatrix))
                .then(|| q.slice(s![b, h, .., ..]).dot(&k.slice(s![b, h, .., ..]).t()) * scale);
            for keys in tile_ranges(shape.kv_len, key_cols) {
                let (k_j, v_j) =
                    (k.slice(s![b, h, keys.clone(), ..]), v.slice(s![b, h, keys.clone(), ..]));
                let (mut dk_j, mut dv_j) =
                    (Array2::<f32>::zeros(k_j.dim()), Array2::<f32>::zeros(v_j.dim()));
                for rows in tile_ranges(shape.q_len, query_rows) {
                    let kind = classify_tile(&shape, options.causal, rows.clone(), keys.clone());
                    if kind == TileKind::Skipped && bug != Some(BackwardBug::MaskNotApplied) {
                        continue;
                    }
                    let (q_i, d_o_i) = (
                        q.slice(s![b, h, rows.clone(), ..]),
                        d_o.slice(s![b, h, rows.clone(), ..]),
                    );
                    let mut p = match &whole {
                        Some(scores) => scores.slice(s![rows.clone(), keys.clone()]).to_owned(),
                        None => q_i.dot(&k_j.t()) * scale,
                    };
                    if kind != TileKind::Full && bug != Some(BackwardBug::MaskNotApplied) {
                        mask_future_keys(&mut p.view_mut(), rows.start, keys.start, &shape);
                    }
                    for (mut row, &l) in
                        p.outer_iter_mut().zip(forward.lse.slice(s![b, h, rows.clone()]))
                    {
                        let empty =
                            l == f32::NEG_INFINITY && bug != Some(BackwardBug::NoGuardForEmptyRows);
                        let shift =
                            if bug == Some(BackwardBug::PWithoutLogsumexp) { 0.0 } else { l };
                        row.mapv_inplace(|x| if empty { 0.0 } else { (x - shift).exp() });
                    }
                    general_mat_mul(1.0, &p.t(), &d_o_i, 1.0, &mut dv_j);
                    let mut d_s = d_o_i.dot(&v_j.t());
                    for ((mut ds_row, p_row), &d_i) in
                        d_s.outer_iter_mut().zip(p.outer_iter()).zip(d.slice(s![rows.clone()]))
                    {
                        let d_i = if bug == Some(BackwardBug::NoDTerm) { 0.0 } else { d_i };
                        ds_row.zip_mut_with(&p_row, |ds, &p| *ds = p * (*ds - d_i));
                    }
                    let dq_scale = if bug == Some(BackwardBug::NoScaleInDq) { 1.0 } else { scale };
                    general_mat_mul(
                        dq_scale,
                        &d_s,
                        &k_j,
                        1.0,
                        &mut grads.dq.slice_mut(s![b, h, rows, ..]),
                    );
                    let beta = if bug == Some(BackwardBug::DkOverwritten) { 0.0 } else { 1.0 };
                    general_mat_mul(scale, &d_s.t(), &q_i, beta, &mut dk_j);
                }
                grads.dk.slice_mut(s![b, h, keys.clone(), ..]).assign(&dk_j);
                grads.dv.slice_mut(s![b, h, keys, ..]).assign(&dv_j);
            }
        }
        Ok(grads)
    }
}

planted_bugs! {
    /// Classic mistakes in half-precision attention (exercise 06).
    pub enum PrecisionBug {
        /// The softmax sum `l` kept in the storage format.
        SumInStorageFormat => ex06::LONG_ROW,
        /// The output accumulator rounded to the storage format at every key.
        AccumulatorInStorageFormat => ex06::LONG_ROW,
        /// `e^s` without subtracting the running maximum.
        MaxNotSubtracted => ex06::LARGE_LOGITS,
        /// `L` rounded to the storage format.
        LseRounded => ex06::F16,
        /// Mixed formats silently widened to f32 instead of rejected.
        MixedFormatsConverted => ex06::MIXED_FORMATS,
        /// Scores not multiplied by `1/sqrt(D)`.
        NoScale => ex06::F16,
    }
}

/// Online attention, one key at a time, on `T` storage, with `bug`.
fn precision_online<T: lesson06::Element>(
    bug: Option<PrecisionBug>,
    q: &Array4<T>,
    k: &Array4<T>,
    v: &Array4<T>,
    options: &AttentionOptions,
) -> Result<lesson06::Output<T>, AttentionError> {
    let CheckedInputs { shape, mut scale, .. } = check_inputs(q, k, v, options)?;
    if bug == Some(PrecisionBug::NoScale) {
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
            let new_m = if bug == Some(PrecisionBug::MaxNotSubtracted) { 0.0 } else { m.max(s) };
            let correction = if m == f32::NEG_INFINITY { 0.0 } else { (m - new_m).exp() };
            let p = (s - new_m).exp();
            l = keep(l * correction + p, bug == Some(PrecisionBug::SumInStorageFormat));
            for (c, a) in acc.iter_mut().enumerate() {
                *a = keep(
                    *a * correction + p * v[[b, h, j, c]].to_f32(),
                    bug == Some(PrecisionBug::AccumulatorInStorageFormat),
                );
            }
            m = new_m;
        }
        if l > 0.0 {
            for (c, a) in acc.iter().enumerate() {
                o[[b, h, i, c]] = T::from_f32(a / l);
            }
            lse[[b, h, i]] = keep(m + l.ln(), bug == Some(PrecisionBug::LseRounded));
        }
    }
    Ok(lesson06::Output { o, lse })
}

impl crate::ex06::Exercise06 for Planted<PrecisionBug> {
    fn attention_f16(
        &self,
        q: &Array4<half::f16>,
        k: &Array4<half::f16>,
        v: &Array4<half::f16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::f16>, AttentionError> {
        precision_online(self.bug, q, k, v, options)
    }

    fn attention_bf16(
        &self,
        q: &Array4<half::bf16>,
        k: &Array4<half::bf16>,
        v: &Array4<half::bf16>,
        options: &AttentionOptions,
    ) -> Result<lesson06::Output<half::bf16>, AttentionError> {
        precision_online(self.bug, q, k, v, options)
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
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::F16(out.o), out.lse))
            }
            (Tensor::BF16(q), Tensor::BF16(k), Tensor::BF16(v)) => {
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::BF16(out.o), out.lse))
            }
            (Tensor::F32(q), Tensor::F32(k), Tensor::F32(v)) => {
                precision_online(self.bug, q, k, v, options)
                    .map(|out| (Tensor::F32(out.o), out.lse))
            }
            _ if self.has(PrecisionBug::MixedFormatsConverted) => {
                precision_online(self.bug, &q.to_f32(), &k.to_f32(), &v.to_f32(), options)
                    .map(|out| (Tensor::F32(out.o), out.lse))
            }
            _ => Err(AttentionError::MixedDtypes {
                q: q.dtype().name(),
                k: k.dtype().name(),
                v: v.dtype().name(),
            }),
        }
    }
}

planted_bugs! {
    /// Classic mistakes in the fast exp2 and the base-2 parallel forward (exercise 07).
    pub enum ParallelBug {
        /// `n = floor(x)`: the fraction reaches 1 and the polynomial loses accuracy.
        Exp2RoundsDown => ex07::EXP2_ACCURACY,
        /// No clamp at -127: very negative inputs give garbage exponent bits.
        Exp2NotClamped => ex07::EXP2_EXACT,
        /// Base-2 exponentials of natural-log scores: `log2(e)` not folded into the scale.
        NoLog2E => ex07::BASE_TWO,
        /// `L` left in base 2.
        LseInBase2 => ex07::BASE_TWO,
        /// The accumulator not rescaled when the maximum grows.
        MissingRescale => ex07::ANY_TILES,
        /// The last, shorter query tile never computed.
        TailTileDropped => ex07::ANY_TILES,
    }
}

impl crate::ex07::Exercise07 for Planted<ParallelBug> {
    fn exp2(&self, x: f32) -> f32 {
        let x = if self.has(ParallelBug::Exp2NotClamped) { x } else { x.max(-127.0) };
        let n = if self.has(ParallelBug::Exp2RoundsDown) { x.floor() } else { x.round() };
        let p = lesson07::exp2::two_to_the_fraction(x - n);
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
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        lesson03::TileSizes::new(query_rows, key_cols)?;
        let log2e = if self.has(ParallelBug::NoLog2E) { 1.0 } else { std::f32::consts::LOG2_E };
        let scale = scale * log2e;
        let computed_rows = if self.has(ParallelBug::TailTileDropped) {
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
                    if self.has(ParallelBug::MissingRescale) { 1.0 } else { self.exp2(m - new_m) };
                let p = self.exp2(s - new_m);
                l = l * correction + p;
                acc *= correction;
                acc.scaled_add(p, &v.slice(s![b, h, j, ..]));
                m = new_m;
            }
            if l > 0.0 {
                out.o.slice_mut(s![b, h, i, ..]).assign(&(acc / l));
                let base2 = m + l.log2();
                out.lse[[b, h, i]] = if self.has(ParallelBug::LseInBase2) {
                    base2
                } else {
                    std::f32::consts::LN_2 * base2
                };
            }
        }
        Ok(out)
    }
}
