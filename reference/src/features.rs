//! FlashAttention's features beyond plain attention, in the f64 oracle: a sliding window,
//! ALiBi, logit softcapping, dropout with a counter-based random mask, and the merge of partial
//! results over split keys. They are what FlashAttention-2's `flash_attn_func` takes
//! (`window_size`, `alibi_slopes`, `softcap`, `dropout_p`) and what flash-decoding does, with
//! the same conventions, so that an implementation checked here computes what those do.
//!
//! For query row `i` and key `j` of head `h`, with `offset = Nkv - Nq` (the bottom-right
//! alignment of the causal mask, [`crate::contract`]):
//!
//! $$ s_{ij} = \mathrm{scale}\; q_i \cdot k_j, \qquad
//!    s_{ij} \leftarrow c \tanh(s_{ij} / c) \ \text{(softcap } c\text{)}, $$
//! $$ s_{ij} \leftarrow s_{ij} - m_h \,|i + \mathrm{offset} - j|
//!    \ \text{(ALiBi slope } m_h\text{)} $$
//!
//! Key `j` is visible to row `i` when the causal mask allows it (`j <= i + offset`) and the
//! window does (`i + offset - left <= j <= i + offset + right`): the visible keys of a row are
//! one contiguous band, [`visible_band`]. Then, over the visible keys,
//!
//! $$ L_i = \log \sum_j e^{s_{ij}}, \qquad P_{ij} = e^{s_{ij} - L_i}, \qquad
//!    O_i = \sum_j P_{ij} \frac{Z_{ij}}{1 - p} V_j $$
//!
//! with `Z_ij` 1 where dropout keeps the weight and 0 where it drops it ([`Dropout::keeps`]),
//! all 1 without dropout. `L` is the logsumexp *before* dropout, as FlashAttention-2 returns
//! it: the backward pass recomputes `P` from it and regenerates `Z` from the seed.

use std::ops::Range;

use ndarray::{Array2, Array3, Array4, Axis, s};

use crate::Gradients;
use crate::contract::{
    LARGEST_LOGIT, check_finite, check_inputs, check_lse_shape, check_same_shape,
};
use crate::oracle::{Expected, ExpectedGradients};
use crate::{AttentionError, AttentionOptions, AttentionOutput, AttentionShape};

/// A sliding window, FlashAttention-2's `window_size = (left, right)`: row `i` sees keys
/// `i + offset - left ..= i + offset + right` (`offset = Nkv - Nq`); `None` is unbounded on that
/// side (FlashAttention-2's `-1`). With the causal mask as well, `right` is in effect 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// Keys visible before the diagonal; `None`: all of them.
    pub left: Option<usize>,
    /// Keys visible after the diagonal; `None`: all of them.
    pub right: Option<usize>,
}

impl Window {
    /// No window: every key (that the causal mask allows).
    pub const FULL: Window = Window { left: None, right: None };

    /// The window `(left, right)`.
    pub fn new(left: Option<usize>, right: Option<usize>) -> Self {
        Self { left, right }
    }
}

/// The keys row `row` sees under the causal mask (if `causal`) and `window`: one contiguous
/// band, empty when the row sees nothing. Without a window and without the mask, `0..Nkv`;
/// with the causal mask alone, the prefix of [`AttentionShape::visible_keys`].
pub fn visible_band(
    shape: &AttentionShape,
    row: usize,
    causal: bool,
    window: Window,
) -> Range<usize> {
    // The diagonal of row i is key i + Nkv - Nq, which can lie outside 0..Nkv: work in i64.
    let diagonal = row as i64 + shape.kv_len as i64 - shape.q_len as i64;
    let mut last = shape.kv_len as i64 - 1; // inclusive
    if causal {
        last = last.min(diagonal);
    }
    if let Some(right) = window.right {
        last = last.min(diagonal + right as i64);
    }
    let first = match window.left {
        Some(left) => (diagonal - left as i64).max(0),
        None => 0,
    };
    if last < first { 0..0 } else { first as usize..last as usize + 1 }
}

/// Dropout on the attention weights: each weight is dropped with probability `p` and the kept
/// ones are divided by `1 - p`, so that `O` keeps its expected value. Whether weight `(b, h, i,
/// j)` is kept is a pure function of the seed and those four numbers ([`Dropout::keeps`]), so
/// the backward pass regenerates the same mask instead of storing `Nq x Nkv` bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of dropping a weight, in `[0, 1)`.
    pub p: f32,
    /// The seed of the random mask.
    pub seed: u64,
}

impl Dropout {
    /// The smallest 32-bit random number that keeps a weight: `floor(p 2^32)`, so a uniform
    /// 32-bit number drops with probability `p` (to within `2^-32`).
    pub fn threshold(&self) -> u32 {
        (f64::from(self.p) * 4_294_967_296.0) as u32
    }

    /// Whether the weight of batch `b`, head `h`, query row `i`, key `j` is kept: the first
    /// word of Philox-4x32-10 with the counter `(j, i, h, b)` and the seed as the key is at
    /// least [`Dropout::threshold`].
    pub fn keeps(&self, b: usize, h: usize, i: usize, j: usize) -> bool {
        let counter = [j as u32, i as u32, h as u32, b as u32];
        let key = [self.seed as u32, (self.seed >> 32) as u32];
        philox4x32_10(counter, key)[0] >= self.threshold()
    }

    /// The factor a kept weight is multiplied by, `1 / (1 - p)`.
    pub fn keep_scale(&self) -> f64 {
        1.0 / (1.0 - f64::from(self.p))
    }
}

/// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
/// counter-based generator of cuRAND, PyTorch and FlashAttention: four 32-bit words of
/// `counter` scrambled by ten rounds keyed by `key`. The same counter and key always give the
/// same words, and different counters give independent-looking ones, so any thread can draw
/// the random number of any element without a shared state.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    const MULTIPLIERS: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
    const KEY_STEPS: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85]; // golden ratio, sqrt(3) - 1
    let (mut c, mut k) = (counter, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(KEY_STEPS[0]), k[1].wrapping_add(KEY_STEPS[1])];
        }
        let product0 = u64::from(MULTIPLIERS[0]) * u64::from(c[0]);
        let product1 = u64::from(MULTIPLIERS[1]) * u64::from(c[2]);
        let (hi0, lo0) = ((product0 >> 32) as u32, product0 as u32);
        let (hi1, lo1) = ((product1 >> 32) as u32, product1 as u32);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// One of the features of [`Features`], for saying which ones an implementation computes
/// ([`Features::check_supported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// A sliding window ([`Window`]).
    Window,
    /// ALiBi slopes.
    Alibi,
    /// A logit softcap.
    Softcap,
    /// Dropout ([`Dropout`]).
    Dropout,
}

impl Feature {
    /// Every feature, in the order [`Features::score`] and the softmax apply them.
    pub const ALL: [Feature; 4] =
        [Feature::Window, Feature::Softcap, Feature::Alibi, Feature::Dropout];

    /// The feature's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Window => "sliding window",
            Feature::Alibi => "ALiBi slopes",
            Feature::Softcap => "softcap",
            Feature::Dropout => "dropout",
        }
    }
}

/// Which of FlashAttention's features an attention call uses, beside [`AttentionOptions`]'s
/// scale and causal mask. [`Features::default`] uses none: plain attention.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    /// The sliding window.
    pub window: Window,
    /// One ALiBi slope per head (FlashAttention-2's `alibi_slopes` of shape `[H]`).
    pub alibi_slopes: Option<Vec<f32>>,
    /// The softcap `c > 0`: scores become `c tanh(s / c)`.
    pub softcap: Option<f32>,
    /// Dropout on the weights.
    pub dropout: Option<Dropout>,
}

impl Features {
    /// The same features with a sliding window of `left` and `right` keys.
    pub fn window(self, left: Option<usize>, right: Option<usize>) -> Self {
        Self { window: Window::new(left, right), ..self }
    }

    /// The same features with ALiBi slopes, one per head.
    pub fn alibi(self, slopes: Vec<f32>) -> Self {
        Self { alibi_slopes: Some(slopes), ..self }
    }

    /// The same features with the softcap `c`.
    pub fn softcap(self, c: f32) -> Self {
        Self { softcap: Some(c), ..self }
    }

    /// The same features with dropout of probability `p` drawn from `seed`.
    pub fn dropout(self, p: f32, seed: u64) -> Self {
        Self { dropout: Some(Dropout { p, seed }), ..self }
    }

    /// Whether the features fit `shape`, or the error that says what is wrong: one finite
    /// slope per head whose biases cannot overflow f32, a positive finite softcap, a dropout
    /// probability in `[0, 1)`.
    pub fn check(&self, shape: &AttentionShape) -> Result<(), AttentionError> {
        let invalid = |feature, found: String, expected: String| {
            Err(AttentionError::InvalidFeature { feature, found, expected })
        };
        if let Some(slopes) = &self.alibi_slopes {
            if slopes.len() != shape.heads {
                let found = format!("{} slopes", slopes.len());
                return invalid("ALiBi slopes", found, format!("one per head ({})", shape.heads));
            }
            let distance = shape.q_len.max(shape.kv_len) as f64;
            if let Some(&m) = slopes
                .iter()
                .find(|m| !m.is_finite() || f64::from(m.abs()) * distance > LARGEST_LOGIT)
            {
                let expected = format!("finite slopes whose bias |m| {distance} fits in f32");
                return invalid("ALiBi slopes", format!("a slope of {m}"), expected);
            }
        }
        if let Some(c) = self.softcap
            && !(c.is_finite() && c > 0.0)
        {
            let expected = "a positive finite number such as 50 (no softcap: None)".to_string();
            return invalid("softcap", format!("{c}"), expected);
        }
        if let Some(dropout) = self.dropout
            && !(0.0..1.0).contains(&dropout.p)
        {
            let expected = "a probability in [0, 1) (no dropout: None or 0)".to_string();
            return invalid(Feature::Dropout.name(), format!("p = {}", dropout.p), expected);
        }
        Ok(())
    }

    /// Whether `feature` is in use: a window bounded on some side, slopes, a softcap, dropout
    /// with `p > 0`.
    pub fn uses(&self, feature: Feature) -> bool {
        match feature {
            Feature::Window => self.window != Window::FULL,
            Feature::Alibi => self.alibi_slopes.is_some(),
            Feature::Softcap => self.softcap.is_some(),
            Feature::Dropout => self.dropout.is_some_and(|d| d.p != 0.0),
        }
    }

    /// [`Features::check`], then an error for the first feature in use that `supported` does
    /// not list: an implementation that computes only some features refuses the others
    /// instead of silently leaving them out.
    pub fn check_supported(
        &self,
        shape: &AttentionShape,
        supported: &[Feature],
    ) -> Result<(), AttentionError> {
        self.check(shape)?;
        let Some(missing) =
            Feature::ALL.into_iter().find(|&f| self.uses(f) && !supported.contains(&f))
        else {
            return Ok(());
        };
        let names: Vec<&str> = supported.iter().map(|f| f.name()).collect();
        let expected = if names.is_empty() {
            "no features here (plain attention)".to_string()
        } else {
            format!("only the features this implementation computes: {}", names.join(", "))
        };
        Err(AttentionError::InvalidFeature {
            feature: missing.name(),
            found: "in use".into(),
            expected,
        })
    }

    /// The score of query row `i` and key `j` of head `h` from `dot = q_i . k_j`: scaled,
    /// softcapped, then biased by ALiBi, in that order (FlashAttention-2's).
    pub fn score(
        &self,
        dot: f64,
        scale: f64,
        shape: &AttentionShape,
        h: usize,
        i: usize,
        j: usize,
    ) -> f64 {
        let mut s = scale * dot;
        if let Some(c) = self.softcap {
            let c = f64::from(c);
            s = c * (s / c).tanh();
        }
        if let Some(slopes) = &self.alibi_slopes {
            let diagonal = i as i64 + shape.kv_len as i64 - shape.q_len as i64;
            s -= f64::from(slopes[h]) * (diagonal - j as i64).abs() as f64;
        }
        s
    }
}

/// What one call knows once its inputs and features are checked.
struct Call<'a> {
    shape: AttentionShape,
    scale: f64,
    causal: bool,
    features: &'a Features,
}

impl<'a> Call<'a> {
    /// [`check_inputs`] and [`Features::check`]: the checks every function here starts with.
    fn checked(
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &'a Features,
    ) -> Result<Self, AttentionError> {
        let checked = check_inputs(q, k, v, options)?;
        features.check(&checked.shape)?;
        let (shape, scale) = (checked.shape, f64::from(checked.scale));
        Ok(Self { shape, scale, causal: options.causal, features })
    }

    /// Head `h` of batch `b` of `x`, in f64.
    fn head(&self, x: &Array4<f32>, b: usize, h: usize) -> Array2<f64> {
        x.slice(s![b, h, .., ..]).mapv(f64::from)
    }

    /// The error model's logit terms of head `h` (`q`, `k` its `[Nq, D]` and `[Nkv, D]`), one
    /// per row: the largest `|scale| sum_d |q_id| |k_jd|` plus the ALiBi bias over the keys of
    /// `keys` the row sees (0 if none). An f32 bias carries a rounding error relative to its
    /// size; a softcap only shrinks errors, its slope being at most 1.
    fn logit_terms(
        &self,
        q: &Array2<f64>,
        k: &Array2<f64>,
        h: usize,
        keys: &Range<usize>,
    ) -> ndarray::Array1<f64> {
        let shape = &self.shape;
        let terms = q.mapv(f64::abs).dot(&k.mapv(f64::abs).t()) * self.scale.abs();
        (0..shape.q_len)
            .map(|i| {
                let band = visible_band(shape, i, self.causal, self.features.window);
                (band.start.max(keys.start)..band.end.min(keys.end))
                    .map(|j| terms[[i, j]] + self.features.score(0.0, 0.0, shape, h, i, j).abs())
                    .fold(0.0f64, f64::max)
            })
            .collect()
    }
}

/// One head's softmax with the features, over the keys `keys` (each `[Nq, Nkv]`, `L` `[Nq]`):
/// what the forward pass, the backward pass and the error terms share.
struct HeadSoftmax {
    /// The scores with every feature but dropout applied, `-inf` where a key is not visible.
    scores: Array2<f64>,
    /// `dS/d(scale q.k)`: the softcap's `1 - tanh^2`, else 1.
    slope_of_softcap: Array2<f64>,
    /// `P`, 0 where a key is not visible, and `L` (`-inf` for a row that sees no key).
    p: Array2<f64>,
    lse: ndarray::Array1<f64>,
    /// The dropout factors `Z / (1 - p)`: all 1 without dropout.
    factors: Array2<f64>,
}

impl HeadSoftmax {
    /// From the head's dot products `q_i . k_j`.
    fn of(call: &Call, dots: &Array2<f64>, b: usize, h: usize, keys: &Range<usize>) -> Self {
        let (shape, scale, features) = (&call.shape, call.scale, call.features);
        let mut scores = Array2::from_elem(dots.dim(), f64::NEG_INFINITY);
        let mut slope_of_softcap = Array2::zeros(dots.dim());
        for i in 0..shape.q_len {
            let band = visible_band(shape, i, call.causal, features.window);
            for j in band.start.max(keys.start)..band.end.min(keys.end) {
                scores[[i, j]] = features.score(dots[[i, j]], scale, shape, h, i, j);
                slope_of_softcap[[i, j]] = match features.softcap {
                    Some(c) => 1.0 - (scale * dots[[i, j]] / f64::from(c)).tanh().powi(2),
                    None => 1.0,
                };
            }
        }
        let (p, lse) = softmax_rows(&scores);
        let factors = Array2::from_shape_fn(dots.dim(), |(i, j)| match features.dropout {
            Some(d) if d.keeps(b, h, i, j) => d.keep_scale(),
            Some(_) => 0.0,
            None => 1.0,
        });
        Self { scores, slope_of_softcap, p, lse, factors }
    }

    /// The weights after dropout, `P o Z / (1 - p)`: `O = weights V`.
    fn weights(&self) -> Array2<f64> {
        &self.p * &self.factors
    }
}

/// `P` (0 where not visible) and `L` of one head from its scores.
fn softmax_rows(scores: &Array2<f64>) -> (Array2<f64>, ndarray::Array1<f64>) {
    let mut p = scores.clone();
    let mut lse = ndarray::Array1::from_elem(scores.nrows(), f64::NEG_INFINITY);
    for (mut row, l) in p.outer_iter_mut().zip(lse.iter_mut()) {
        let max = row.fold(f64::NEG_INFINITY, |m, &x| m.max(x));
        if max == f64::NEG_INFINITY {
            row.fill(0.0); // sees no key: O = 0, L = -inf
            continue;
        }
        row.mapv_inplace(|x| (x - max).exp()); // exp(-inf) = 0 for the keys it does not see
        let sum = row.sum();
        row /= sum;
        *l = max + sum.ln();
    }
    (p, lse)
}

/// Attention with `features`, in f64: `O [B,H,Nq,D]` and `L [B,H,Nq]` as in this module's
/// formulas. With [`Features::default`] it equals [`crate::oracle::attention`].
pub fn attention(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
) -> Result<AttentionOutput<f64>, AttentionError> {
    partial(q, k, v, options, features, 0..k.dim().2)
}

/// The partial result of attention over the keys `keys` only (the part of a split-key,
/// flash-decoding computation that sees them): `O` normalised over those keys and their
/// logsumexp `L`; `O = 0`, `L = -inf` for a row that sees none of them. [`merge`] combines the
/// partials of keys that cover `0..Nkv` into [`attention`]'s answer. A range that does not lie
/// within `0..Nkv` is an error.
pub fn partial(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    keys: Range<usize>,
) -> Result<AttentionOutput<f64>, AttentionError> {
    let call = Call::checked(q, k, v, options, features)?;
    let shape = call.shape;
    check_key_range(&shape, &keys)?;
    let mut o = Array4::<f64>::zeros(shape.q_dims());
    let mut lse = Array3::<f64>::from_elem(shape.lse_dims(), f64::NEG_INFINITY);
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let (q, k, v) = (call.head(q, b, h), call.head(k, b, h), call.head(v, b, h));
            let softmax = HeadSoftmax::of(&call, &q.dot(&k.t()), b, h, &keys);
            o.slice_mut(s![b, h, .., ..]).assign(&softmax.weights().dot(&v));
            lse.slice_mut(s![b, h, ..]).assign(&softmax.lse);
        }
    }
    Ok(AttentionOutput { o, lse })
}

/// Whether `keys` lies within the keys `0..Nkv` of `shape` (it may be empty), or the error
/// that names the range and `Nkv`.
pub fn check_key_range(shape: &AttentionShape, keys: &Range<usize>) -> Result<(), AttentionError> {
    if keys.start <= keys.end && keys.end <= shape.kv_len {
        return Ok(());
    }
    Err(AttentionError::InvalidFeature {
        feature: "split keys",
        found: format!("{keys:?}"),
        expected: format!("a range of keys within 0..{} (Nkv)", shape.kv_len),
    })
}

/// Whether `parts` can be merged: at least one, every `O` of the first one's shape and every
/// `L` of the matching `[B, H, Nq]`; or the error that says what is wrong.
pub fn check_parts<X>(parts: &[AttentionOutput<X>]) -> Result<(), AttentionError> {
    let Some(first) = parts.first() else {
        let expected = "at least one partial result".to_string();
        return Err(AttentionError::InvalidFeature {
            feature: "merge",
            found: "none".into(),
            expected,
        });
    };
    for part in &parts[1..] {
        check_same_shape("O of a part", &part.o, "O of the first part", &first.o)?;
    }
    parts.iter().try_for_each(|part| check_lse_shape(&part.lse, &part.o))
}

/// Combines partial results over disjoint sets of keys into the result over all of them, the
/// logsumexp merge of lesson 02 applied to whole rows:
///
/// $$ L = \log \sum_s e^{L^{(s)}}, \qquad O = \sum_s e^{L^{(s)} - L}\, O^{(s)} . $$
///
/// A part whose row saw no key (`L = -inf`) weighs 0; a row that no part saw stays `O = 0`,
/// `L = -inf`. Every part must have the same shape.
pub fn merge(parts: &[AttentionOutput<f64>]) -> Result<AttentionOutput<f64>, AttentionError> {
    check_parts(parts)?;
    let first = &parts[0];
    let mut lse = first.lse.clone();
    for part in &parts[1..] {
        lse.zip_mut_with(&part.lse, |l, &other| *l = log_add_exp(*l, other));
    }
    let mut o = Array4::<f64>::zeros(first.o.dim());
    for part in parts {
        // e^(L_s - L): 0 where the part saw nothing, or where no part saw anything.
        let weight = ndarray::Zip::from(&part.lse)
            .and(&lse)
            .map_collect(|&ls, &l| if ls == f64::NEG_INFINITY { 0.0 } else { (ls - l).exp() });
        o += &(&part.o * &weight.insert_axis(Axis(3)));
    }
    Ok(AttentionOutput { o, lse })
}

/// `log(e^a + e^b)` without overflow, `-inf` when both are.
fn log_add_exp(a: f64, b: f64) -> f64 {
    let max = a.max(b);
    if max == f64::NEG_INFINITY { max } else { max + ((a - max).exp() + (b - max).exp()).ln() }
}

/// The backward pass with `features`, in f64. With `Y = P o Z / (1 - p)` the weights after
/// dropout (so `O = Y V`) and `t_ij` the softcap's `1 - tanh^2(scale q_i . k_j / c)` (1 without
/// a softcap):
///
/// $$ dV = Y^\top dO,\quad dP = (dO\,V^\top) \circ \tfrac{Z}{1-p},\quad
///    D_i = \textstyle\sum_j P_{ij}\, dP_{ij} = dO_i \cdot O_i, $$
/// $$ dS = P \circ (dP - D) \circ t,\quad dQ = \mathrm{scale}\; dS\, K,\quad
///    dK = \mathrm{scale}\; dS^\top Q . $$
///
/// ALiBi's bias depends on positions only, so it adds nothing to the gradients (it is in `P`).
pub fn attention_backward(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    d_o: &Array4<f32>,
) -> Result<Gradients<f64>, AttentionError> {
    let call = Call::checked(q, k, v, options, features)?;
    let (shape, scale) = (call.shape, call.scale);
    check_same_shape("dO", d_o, "Q", q)?;
    check_finite("dO", d_o)?;
    let mut grads = Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    let all_keys = 0..shape.kv_len;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let (q, k, v) = (call.head(q, b, h), call.head(k, b, h), call.head(v, b, h));
            let d_o = call.head(d_o, b, h);
            let softmax = HeadSoftmax::of(&call, &q.dot(&k.t()), b, h, &all_keys);
            let p = &softmax.p;
            let d_v = softmax.weights().t().dot(&d_o);
            let d_p = d_o.dot(&v.t()) * &softmax.factors;
            let d = (p * &d_p).sum_axis(Axis(1)).insert_axis(Axis(1));
            let d_s = p * &(&d_p - &d) * &softmax.slope_of_softcap;
            grads.dq.slice_mut(s![b, h, .., ..]).assign(&(d_s.dot(&k) * scale));
            grads.dk.slice_mut(s![b, h, .., ..]).assign(&(d_s.t().dot(&q) * scale));
            grads.dv.slice_mut(s![b, h, .., ..]).assign(&d_v);
        }
    }
    Ok(grads)
}

/// [`attention`] with the term sizes the error model ([`crate::Tolerance`]) judges each element
/// by, as [`crate::oracle::expected`] gives them for plain attention: the value terms weighted
/// after dropout, the visible values over each row's band, and each row's logit terms grown by
/// its largest ALiBi bias (an f32 bias carries a rounding error relative to its size; a softcap
/// only shrinks errors, its slope being at most 1).
pub fn expected(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
) -> Result<Expected, AttentionError> {
    expected_partial(q, k, v, options, features, 0..k.dim().2)
}

/// [`expected`] for [`partial`]: the partial result over the keys `keys` and the error model's
/// terms over those keys only.
pub fn expected_partial(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    keys: Range<usize>,
) -> Result<Expected, AttentionError> {
    let call = Call::checked(q, k, v, options, features)?;
    let shape = call.shape;
    check_key_range(&shape, &keys)?;
    let mut output = AttentionOutput {
        o: Array4::<f64>::zeros(shape.q_dims()),
        lse: Array3::<f64>::from_elem(shape.lse_dims(), f64::NEG_INFINITY),
    };
    let mut value_terms = Array4::<f64>::zeros(shape.q_dims());
    let mut visible_values = Array4::<f64>::zeros(shape.q_dims());
    let mut logit_terms = Array3::<f64>::zeros(shape.lse_dims());
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let (q, k, v) = (call.head(q, b, h), call.head(k, b, h), call.head(v, b, h));
            let softmax = HeadSoftmax::of(&call, &q.dot(&k.t()), b, h, &keys);
            let weights = softmax.weights();
            output.o.slice_mut(s![b, h, .., ..]).assign(&weights.dot(&v));
            output.lse.slice_mut(s![b, h, ..]).assign(&softmax.lse);
            let v_size = v.mapv(f64::abs);
            value_terms.slice_mut(s![b, h, .., ..]).assign(&weights.dot(&v_size));
            let seen = softmax.scores.mapv(|x| if x == f64::NEG_INFINITY { 0.0 } else { 1.0 });
            let kept = &seen * &softmax.factors;
            visible_values.slice_mut(s![b, h, .., ..]).assign(&kept.dot(&v_size));
            logit_terms.slice_mut(s![b, h, ..]).assign(&call.logit_terms(&q, &k, h, &keys));
        }
    }
    let (head_dim, kv_len) = (shape.head_dim, shape.kv_len);
    Ok(Expected { output, value_terms, visible_values, logit_terms, head_dim, kv_len })
}

/// [`attention_backward`] with the error model's terms ([`crate::oracle::ExpectedGradients`],
/// as [`crate::oracle::expected_gradients`] gives them for plain attention): the recomputed
/// weights' relative error grows with each row's logit terms (ALiBi's bias included), and
/// dropout's factors `Z / (1 - p)` scale the weights in `dV` and `dP` as they do in the exact
/// gradients. The softcap's slope, at most 1, only shrinks the terms it multiplies, so they
/// are left at their size without it; its rounding is an absolute error of a few units in
/// each weight's `dS`, which the terms' margin covers.
pub fn expected_gradients(
    q: &Array4<f32>,
    k: &Array4<f32>,
    v: &Array4<f32>,
    options: &AttentionOptions,
    features: &Features,
    d_o: &Array4<f32>,
) -> Result<ExpectedGradients, AttentionError> {
    let gradients = attention_backward(q, k, v, options, features, d_o)?;
    let call = Call::checked(q, k, v, options, features)?;
    let (shape, scale) = (call.shape, call.scale);
    let zeros = || Gradients {
        dq: Array4::zeros(q.dim()),
        dk: Array4::zeros(k.dim()),
        dv: Array4::zeros(v.dim()),
    };
    let (mut error_terms, mut visible_terms) = (zeros(), zeros());
    let lengths = [shape.head_dim, shape.q_len, shape.kv_len].map(|n| (n as f64).sqrt());
    let sum_lengths: f64 = lengths.iter().sum();
    let dot_growth = lengths[0] + 2.0;
    let all_keys = 0..shape.kv_len;
    for b in 0..shape.batch {
        for h in 0..shape.heads {
            let (q, k, v) = (call.head(q, b, h), call.head(k, b, h), call.head(v, b, h));
            let d_o = call.head(d_o, b, h);
            let softmax = HeadSoftmax::of(&call, &q.dot(&k.t()), b, h, &all_keys);
            let logit_terms = call.logit_terms(&q, &k, h, &all_keys);
            // w_i, the relative error of row i's recomputed weights (0 for a row that sees none).
            let w = ndarray::Zip::from(&logit_terms).and(&softmax.lse).map_collect(|&terms, &l| {
                if l.is_finite() { dot_growth * terms + l.abs() + sum_lengths + 2.0 } else { 0.0 }
            });
            let p = &softmax.p;
            let a = d_o.mapv(f64::abs).dot(&v.mapv(f64::abs).t()) * &softmax.factors; // A_ij
            let a_plus_b = &a + &(p * &a).sum_axis(Axis(1)).insert_axis(Axis(1)); // A_ij + B_i
            let (k_size, q_size, d_o_size) =
                (k.mapv(f64::abs), q.mapv(f64::abs), d_o.mapv(f64::abs));
            let size = scale.abs();
            // Rounding: weights P_ij w_i, dS errors E_ij.
            let weighted = p * &w.insert_axis(Axis(1));
            let e = &weighted * &a_plus_b;
            error_terms.dq.slice_mut(s![b, h, .., ..]).assign(&(e.dot(&k_size) * size));
            error_terms.dk.slice_mut(s![b, h, .., ..]).assign(&(e.t().dot(&q_size) * size));
            let kept = &weighted * &softmax.factors;
            error_terms.dv.slice_mut(s![b, h, .., ..]).assign(&kept.t().dot(&d_o_size));
            // Underflow: every visible weight off by an absolute 1.
            let seen = softmax.scores.mapv(|x| if x == f64::NEG_INFINITY { 0.0 } else { 1.0 });
            let e = &seen * &a_plus_b;
            visible_terms.dq.slice_mut(s![b, h, .., ..]).assign(&(e.dot(&k_size) * size));
            visible_terms.dk.slice_mut(s![b, h, .., ..]).assign(&(e.t().dot(&q_size) * size));
            let kept = &seen * &softmax.factors;
            visible_terms.dv.slice_mut(s![b, h, .., ..]).assign(&kept.t().dot(&d_o_size));
        }
    }
    Ok(ExpectedGradients { gradients, error_terms, visible_terms })
}

#[cfg(test)]
mod tests {
    //! Known answers worked out by hand, Philox's published test vectors, and identities that
    //! tie the features to each other and to the plain oracle, on seeded problems (no random
    //! draw at test time: every run checks the same cases).
    use super::*;
    use crate::oracle;
    use crate::{Problem, ProblemSpec};
    use ndarray::{Array, array};

    fn head(rows: Array2<f32>) -> Array4<f32> {
        let (n, d) = rows.dim();
        rows.into_shape_with_order((1, 1, n, d)).unwrap()
    }

    fn shape(q_len: usize, kv_len: usize) -> AttentionShape {
        AttentionShape { batch: 1, heads: 1, q_len, kv_len, head_dim: 1 }
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * (1.0 + b.abs())
    }

    fn assert_outputs_close(a: &AttentionOutput<f64>, b: &AttentionOutput<f64>, what: &str) {
        for (x, y) in a.o.iter().zip(&b.o) {
            assert!(close(*x, *y, 1e-12), "{what}: O {x} against {y}");
        }
        for (x, y) in a.lse.iter().zip(&b.lse) {
            assert!(x == y || close(*x, *y, 1e-12), "{what}: L {x} against {y}");
        }
    }

    #[test]
    fn philox_matches_the_published_test_vectors() {
        // Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key, result.
        let vectors = [
            ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (counter, key, result) in vectors {
            assert_eq!(philox4x32_10(counter, key), result, "counter {counter:x?}");
        }
    }

    #[test]
    fn windows_by_hand() {
        // Nq = 3, Nkv = 5: the diagonal of row i is key i + 2.
        let s = shape(3, 5);
        let bands = |causal, window| {
            (0..3).map(|i| visible_band(&s, i, causal, window)).collect::<Vec<_>>()
        };
        assert_eq!(bands(false, Window::FULL), [0..5, 0..5, 0..5]);
        assert_eq!(bands(true, Window::FULL), [0..3, 0..4, 0..5]);
        assert_eq!(bands(true, Window::new(Some(1), None)), [1..3, 2..4, 3..5]);
        assert_eq!(bands(false, Window::new(Some(1), Some(1))), [1..4, 2..5, 3..5]);
        assert_eq!(bands(false, Window::new(Some(0), Some(0))), [2..3, 3..4, 4..5]);
        assert_eq!(bands(false, Window::new(None, Some(0))), bands(true, Window::FULL));
        // The causal mask wins over a right window: (left, right) with causal is (left, 0).
        assert_eq!(bands(true, Window::new(Some(1), Some(3))), [1..3, 2..4, 3..5]);
        // Nq = 5, Nkv = 2: the diagonal of row i is key i - 3, before the first key for i < 3.
        let s = shape(5, 2);
        let bands = |causal, window| {
            (0..5).map(|i| visible_band(&s, i, causal, window)).collect::<Vec<_>>()
        };
        assert_eq!(bands(true, Window::FULL), [0..0, 0..0, 0..0, 0..1, 0..2]);
        assert_eq!(bands(false, Window::new(Some(0), Some(0))), [0..0, 0..0, 0..0, 0..1, 1..2]);
        assert_eq!(bands(false, Window::new(Some(1), Some(1))), [0..0, 0..0, 0..1, 0..2, 0..2]);
    }

    #[test]
    fn a_full_window_is_the_causal_prefix_or_every_key() {
        for (q_len, kv_len) in [(1, 1), (4, 9), (9, 4), (7, 7)] {
            let s = shape(q_len, kv_len);
            for row in 0..q_len {
                for causal in [false, true] {
                    let band = visible_band(&s, row, causal, Window::FULL);
                    assert_eq!(
                        band,
                        0..s.visible_keys(row, causal),
                        "row {row} of {q_len}x{kv_len}"
                    );
                }
            }
        }
    }

    #[test]
    fn alibi_by_hand() {
        // One query, two keys with zero dot products: Nkv - Nq = 1, so key 0 is one step from
        // the diagonal (bias -m) and key 1 on it (bias 0). With m = ln 3 the weights are 1/4, 3/4.
        let (q, k) = (head(array![[1.0]]), head(array![[0.0], [0.0]]));
        let v = head(array![[4.0], [8.0]]);
        let features = Features::default().alibi(vec![3f32.ln()]);
        let out = attention(&q, &k, &v, &AttentionOptions::new(), &features).unwrap();
        assert!(close(out.o[[0, 0, 0, 0]], 7.0, 1e-6), "{}", out.o);
        assert!(close(out.lse[[0, 0, 0]], (4.0f64 / 3.0).ln(), 1e-6), "{}", out.lse);
    }

    #[test]
    fn softcap_by_hand() {
        // Raw scores 0 and x with 2 tanh(x / 2) = ln 3: capped scores 0 and ln 3, weights 1/4, 3/4.
        let x = 2.0 * (3f64.ln() / 2.0).atanh();
        let (q, k) = (head(array![[1.0]]), head(array![[0.0], [x as f32]]));
        let v = head(array![[4.0], [8.0]]);
        let options = AttentionOptions::new().with_scale(1.0);
        let out = attention(&q, &k, &v, &options, &Features::default().softcap(2.0)).unwrap();
        assert!(close(out.o[[0, 0, 0, 0]], 7.0, 1e-6), "{}", out.o);
        // A score of 1000 capped at 5 is 5 tanh(200) = 5 (in f64), so L = ln(e^0 + e^5).
        let k = head(array![[0.0], [1000.0]]);
        let out = attention(&q, &k, &v, &options, &Features::default().softcap(5.0)).unwrap();
        assert!(close(out.lse[[0, 0, 0]], (1.0 + 5f64.exp()).ln(), 1e-12), "{}", out.lse);
    }

    #[test]
    fn softcap_applies_to_the_scaled_scores() {
        // scale 0.5, q.k = 4: the scaled score 2 is capped, 3 tanh(2 / 3); capping the unscaled
        // 4 first would give 0.5 * 3 tanh(4 / 3).
        let (q, k, v) =
            (head(array![[2.0]]), head(array![[2.0], [0.0]]), head(array![[1.0], [0.0]]));
        let options = AttentionOptions::new().with_scale(0.5);
        let out = attention(&q, &k, &v, &options, &Features::default().softcap(3.0)).unwrap();
        let capped = 3.0 * (2.0f64 / 3.0).tanh();
        assert!(close(out.lse[[0, 0, 0]], (capped.exp() + 1.0).ln(), 1e-12), "{}", out.lse);
    }

    #[test]
    fn dropout_by_hand() {
        let d = Dropout { p: 0.25, seed: 7 };
        assert_eq!(d.threshold(), 1 << 30);
        assert_eq!(Dropout { p: 0.0, seed: 7 }.threshold(), 0);
        // One key: O is V / (1 - p) where the weight is kept, 0 where it is dropped; L is the
        // logsumexp before dropout either way.
        let (q, k, v) = (head(array![[1.0]]), head(array![[2.0]]), head(array![[3.0]]));
        let options = AttentionOptions::new().with_scale(1.0);
        let out = attention(&q, &k, &v, &options, &Features::default().dropout(0.25, 7)).unwrap();
        let expected = if d.keeps(0, 0, 0, 0) { 4.0 } else { 0.0 };
        assert_eq!(out.o[[0, 0, 0, 0]], expected);
        assert_eq!(out.lse[[0, 0, 0]], 2.0);
    }

    #[test]
    fn dropout_drops_about_p_and_depends_on_every_coordinate() {
        let d = Dropout { p: 0.3, seed: 0x5eed };
        let mut dropped = 0;
        let n = 2 * 3 * 40 * 40;
        for (b, h, i, j) in itertools_free_grid(2, 3, 40, 40) {
            dropped += usize::from(!d.keeps(b, h, i, j));
        }
        // 9600 draws: the standard deviation of the count is 45; the seed is fixed, so this is
        // one fixed outcome (2883 dropped), checked to lie within 4 deviations of p n.
        let expected = 0.3 * n as f64;
        assert!(
            (dropped as f64 - expected).abs() < 4.0 * (n as f64 * 0.3 * 0.7).sqrt(),
            "{dropped}"
        );
        // Moving any one coordinate changes the mask somewhere.
        let mask =
            |f: &dyn Fn(usize, usize) -> bool| (0..16).map(|x| f(x, x / 4)).collect::<Vec<_>>();
        let base = mask(&|a, c| d.keeps(0, 0, a, c));
        assert_ne!(base, mask(&|a, c| d.keeps(1, 0, a, c)), "batch");
        assert_ne!(base, mask(&|a, c| d.keeps(0, 1, a, c)), "head");
        assert_ne!(base, mask(&|a, c| d.keeps(0, 0, a + 1, c)), "row");
        assert_ne!(base, mask(&|a, c| d.keeps(0, 0, a, c + 1)), "column");
        let other_seed = Dropout { seed: 0x5eee, ..d };
        assert_ne!(base, mask(&|a, c| other_seed.keeps(0, 0, a, c)), "seed");
    }

    fn itertools_free_grid(
        b: usize,
        h: usize,
        n: usize,
        m: usize,
    ) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        (0..b).flat_map(move |b| {
            (0..h).flat_map(move |h| (0..n).flat_map(move |i| (0..m).map(move |j| (b, h, i, j))))
        })
    }

    /// Seeded problems of several shapes, each with several sets of features.
    fn cases() -> Vec<(Problem, Features)> {
        let specs = [
            ProblemSpec::new(1, 2, 7, 7, 4),
            ProblemSpec::new(2, 2, 5, 11, 3).causal(true),
            ProblemSpec::new(1, 3, 11, 4, 5).causal(true),
            ProblemSpec::new(1, 2, 9, 6, 8).logit_scale(6.0),
        ];
        let mut all = Vec::new();
        for (n, spec) in specs.iter().enumerate() {
            let problem = Problem::random(spec, 40 + n as u64);
            let slopes: Vec<f32> = (0..spec.heads).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
            for features in [
                Features::default(),
                Features::default().window(Some(2), Some(1)),
                Features::default().window(Some(0), None),
                Features::default().alibi(slopes.clone()),
                Features::default().softcap(1.5),
                Features::default().dropout(0.4, 99),
                Features::default()
                    .window(Some(3), Some(0))
                    .alibi(slopes)
                    .softcap(4.0)
                    .dropout(0.1, 5),
            ] {
                all.push((problem.clone(), features));
            }
        }
        all
    }

    #[test]
    fn no_features_is_the_plain_oracle() {
        for (p, _) in cases() {
            let plain = oracle::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
            let with = attention(&p.q, &p.k, &p.v, &p.options, &Features::default()).unwrap();
            assert_outputs_close(&with, &plain, "no features");
        }
    }

    #[test]
    fn partials_over_split_keys_merge_into_the_whole() {
        for (p, features) in cases() {
            let whole = attention(&p.q, &p.k, &p.v, &p.options, &features).unwrap();
            let kv_len = p.k.dim().2;
            for splits in [
                vec![0, kv_len],
                vec![0, 1, kv_len],
                vec![0, kv_len / 2, kv_len, kv_len],
                vec![0, 2, 3, kv_len],
            ] {
                let parts: Vec<_> = splits
                    .windows(2)
                    .map(|w| partial(&p.q, &p.k, &p.v, &p.options, &features, w[0]..w[1]).unwrap())
                    .collect();
                assert_outputs_close(
                    &merge(&parts).unwrap(),
                    &whole,
                    &format!("{splits:?} {features:?}"),
                );
            }
        }
    }

    #[test]
    fn merging_without_the_rescale_is_wrong() {
        // The planted bug of the exercises: adding the partial O's (or averaging them) instead
        // of weighting each by e^(L_s - L). The check above must be able to tell.
        let (p, features) = cases().swap_remove(0);
        let whole = attention(&p.q, &p.k, &p.v, &p.options, &features).unwrap();
        let halves = [0..3, 3..7]
            .map(|keys| partial(&p.q, &p.k, &p.v, &p.options, &features, keys).unwrap());
        let summed = &halves[0].o + &halves[1].o;
        let worst = summed.iter().zip(&whole.o).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
        assert!(worst > 0.1, "{worst}");
    }

    #[test]
    fn a_window_equals_masking_the_keys_outside_it() {
        // The window (2, 1) on a 7 x 7 problem: row i sees keys i - 2 ..= i + 1. Dropping the
        // other keys' scores to -inf by hand must give the same answer.
        let p = Problem::random(&ProblemSpec::new(1, 1, 7, 7, 4), 3);
        let features = Features::default().window(Some(2), Some(1));
        let out = attention(&p.q, &p.k, &p.v, &p.options, &features).unwrap();
        for i in 0..7usize {
            let keys = i.saturating_sub(2)..(i + 2).min(7);
            let row = |x: &Array4<f32>, r: Range<usize>| x.slice(s![.., .., r, ..]).to_owned();
            let one = oracle::attention(
                &row(&p.q, i..i + 1),
                &row(&p.k, keys.clone()),
                &row(&p.v, keys),
                &p.options,
            )
            .unwrap();
            assert!(close(out.o[[0, 0, i, 0]], one.o[[0, 0, 0, 0]], 1e-12), "row {i}");
            assert!(close(out.lse[[0, 0, i]], one.lse[[0, 0, 0]], 1e-12), "row {i}");
        }
    }

    #[test]
    fn rows_that_see_nothing_give_zero_and_minus_infinity() {
        // Nq = 6 > Nkv = 3 with the causal mask: rows 0..3 see no key.
        let p = Problem::random(&ProblemSpec::new(1, 1, 6, 3, 2).causal(true), 1);
        let out =
            attention(&p.q, &p.k, &p.v, &p.options, &Features::default().window(Some(0), None))
                .unwrap();
        for i in 0..3 {
            assert_eq!(out.lse[[0, 0, i]], f64::NEG_INFINITY);
            assert!(out.o.slice(s![0, 0, i, ..]).iter().all(|&x| x == 0.0));
        }
        assert!(out.lse[[0, 0, 3]].is_finite());
    }

    /// `sum(O o dO)`, the loss whose gradients the backward pass gives, in f64.
    fn loss(p: &Problem, features: &Features, d_o: &Array4<f32>) -> f64 {
        let out = attention(&p.q, &p.k, &p.v, &p.options, features).unwrap();
        out.o.iter().zip(d_o).map(|(o, g)| o * f64::from(*g)).sum()
    }

    fn input_mut(p: &mut Problem, which: usize) -> &mut Array4<f32> {
        match which {
            0 => &mut p.q,
            1 => &mut p.k,
            _ => &mut p.v,
        }
    }

    #[test]
    fn the_backward_matches_finite_differences() {
        // Central differences of the f64 loss against every input element, for each set of
        // features (the dropout mask is fixed by its seed, so the loss is smooth in the inputs).
        for (n, (p, features)) in cases().into_iter().enumerate().filter(|(n, _)| n % 3 == 0) {
            let mut rng = crate::problem::SplitMix64::new(n as u64);
            let d_o = Array::from_shape_simple_fn(p.q.dim(), || rng.normal());
            let grads = attention_backward(&p.q, &p.k, &p.v, &p.options, &features, &d_o).unwrap();
            for (which, analytic) in [(0, &grads.dq), (1, &grads.dk), (2, &grads.dv)] {
                for (index, &g) in analytic.indexed_iter() {
                    let mut nudged = p.clone();
                    let x = input_mut(&mut nudged, which);
                    let at = [index.0, index.1, index.2, index.3];
                    let x0 = x[at];
                    let h = 1e-2f32 * (1.0 + x0.abs());
                    x[at] = x0 + h;
                    let up = (x[at] - x0) as f64; // the step f32 can hold
                    let plus = loss(&nudged, &features, &d_o);
                    let x = input_mut(&mut nudged, which);
                    x[at] = x0 - h;
                    let down = (x0 - x[at]) as f64;
                    let minus = loss(&nudged, &features, &d_o);
                    let numeric = (plus - minus) / (up + down);
                    assert!(
                        (numeric - g).abs() <= 2e-3 * (1.0 + g.abs()),
                        "case {n} {features:?}: d{}{at:?} {g} against {numeric}",
                        ["Q", "K", "V"][which]
                    );
                }
            }
        }
    }

    #[test]
    fn the_backward_without_features_is_the_plain_oracle() {
        for (p, _) in cases() {
            let d_o = p.q.mapv(|x| 0.5 - x);
            let plain = oracle::attention_backward(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
            let with = attention_backward(&p.q, &p.k, &p.v, &p.options, &Features::default(), &d_o)
                .unwrap();
            for (a, b) in [(&with.dq, &plain.dq), (&with.dk, &plain.dk), (&with.dv, &plain.dv)] {
                assert!(a.iter().zip(b).all(|(x, y)| close(*x, *y, 1e-12)));
            }
        }
    }

    #[test]
    fn bad_features_are_errors_that_say_what_was_expected() {
        let p = Problem::random(&ProblemSpec::new(1, 2, 3, 3, 2), 0);
        let run =
            |f: Features| attention(&p.q, &p.k, &p.v, &p.options, &f).unwrap_err().to_string();
        let wrong_count = run(Features::default().alibi(vec![0.5]));
        assert!(
            wrong_count.contains("1 slopes") && wrong_count.contains("one per head (2)"),
            "{wrong_count}"
        );
        assert!(run(Features::default().alibi(vec![0.5, f32::NAN])).contains("a slope of NaN"));
        assert!(run(Features::default().alibi(vec![0.5, 1e38])).contains("fits in f32"));
        for c in [0.0, -1.0, f32::INFINITY, f32::NAN] {
            assert!(run(Features::default().softcap(c)).contains("positive finite"), "{c}");
        }
        for dropout in [1.0, -0.1, 1.5, f32::NAN] {
            assert!(run(Features::default().dropout(dropout, 1)).contains("[0, 1)"), "{dropout}");
        }
        let d_o = p.q.clone();
        let backward = attention_backward(
            &p.q,
            &p.k,
            &p.v,
            &p.options,
            &Features::default().softcap(0.0),
            &d_o,
        );
        assert!(matches!(backward, Err(AttentionError::InvalidFeature { feature: "softcap", .. })));
        let keys = |r: Range<usize>| partial(&p.q, &p.k, &p.v, &p.options, &Features::default(), r);
        assert!(keys(0..4).unwrap_err().to_string().contains("within 0..3 (Nkv)"));
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = keys(2..1);
        assert!(backwards.unwrap_err().to_string().contains("split keys: 2..1"));
        assert!(keys(3..3).is_ok(), "an empty range is a part that sees nothing");
        // merge: nothing to merge, and parts of different shapes.
        assert!(merge(&[]).unwrap_err().to_string().contains("at least one partial result"));
        let small = oracle::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
        let other = Problem::random(&ProblemSpec::new(1, 2, 4, 3, 2), 0);
        let large = oracle::attention(&other.q, &other.k, &other.v, &other.options).unwrap();
        assert!(matches!(merge(&[small, large]), Err(AttentionError::ShapeMismatch { .. })));
    }

    #[test]
    fn an_implementation_refuses_the_features_it_does_not_compute() {
        let shape = AttentionShape { batch: 1, heads: 2, q_len: 3, kv_len: 3, head_dim: 2 };
        let supported = [Feature::Alibi, Feature::Softcap];
        let both = Features::default().alibi(vec![0.5, 0.25]).softcap(30.0);
        assert!(both.check_supported(&shape, &supported).is_ok());
        // A window, or dropout with p > 0, is refused by name; p = 0 and the full window are
        // no feature at all.
        let window = both.clone().window(Some(2), None).check_supported(&shape, &supported);
        let message = window.unwrap_err().to_string();
        assert!(message.starts_with("sliding window") && message.contains("ALiBi slopes, softcap"));
        let dropout = both.clone().dropout(0.1, 7).check_supported(&shape, &supported);
        assert!(matches!(dropout, Err(AttentionError::InvalidFeature { feature: "dropout", .. })));
        assert!(
            both.clone()
                .dropout(0.0, 7)
                .window(None, None)
                .check_supported(&shape, &supported)
                .is_ok()
        );
        // The features' own checks come first, and plain attention supports nothing.
        let wrong_count = Features::default().alibi(vec![0.5]).check_supported(&shape, &supported);
        assert!(wrong_count.unwrap_err().to_string().contains("one per head (2)"));
        let plain = Features::default().softcap(1.0).check_supported(&shape, &[]);
        assert!(plain.unwrap_err().to_string().contains("no features here"));
    }

    #[test]
    fn expected_partial_gives_the_partial_result_and_terms_over_its_keys() {
        let p = Problem::random(&ProblemSpec::new(1, 2, 5, 7, 3).causal(true), 4);
        let features = Features::default().alibi(vec![0.5, 0.25]);
        let part = partial(&p.q, &p.k, &p.v, &p.options, &features, 2..5).unwrap();
        let e = expected_partial(&p.q, &p.k, &p.v, &p.options, &features, 2..5).unwrap();
        assert_outputs_close(&e.output, &part, "expected_partial against partial");
        let whole = expected(&p.q, &p.k, &p.v, &p.options, &features).unwrap();
        for (b, w) in e.visible_values.iter().zip(&whole.visible_values) {
            assert!(b <= w, "fewer keys, smaller terms: {b} > {w}");
        }
        // Row 0 sees keys 0..=2 under the causal mask (Nkv - Nq = 2): only key 2 is in 2..5.
        let one_key = e.visible_values[[0, 0, 0, 1]];
        assert!(close(one_key, f64::from(p.v[[0, 0, 2, 1]].abs()), 1e-12));
        let outside = expected_partial(&p.q, &p.k, &p.v, &p.options, &features, 5..8);
        assert!(outside.unwrap_err().to_string().contains("within 0..7 (Nkv)"));
    }

    #[test]
    fn expected_gradients_without_features_are_the_plain_oracles() {
        for causal in [false, true] {
            let p = Problem::random(&ProblemSpec::new(2, 2, 5, 7, 3).causal(causal), 11);
            let d_o = Problem::random(&ProblemSpec::new(2, 2, 5, 5, 3), 12).q;
            let plain = oracle::expected_gradients(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
            let none = Features::default();
            let ours = expected_gradients(&p.q, &p.k, &p.v, &p.options, &none, &d_o).unwrap();
            let pairs = [
                (&plain.gradients.dq, &ours.gradients.dq),
                (&plain.error_terms.dq, &ours.error_terms.dq),
                (&plain.error_terms.dk, &ours.error_terms.dk),
                (&plain.error_terms.dv, &ours.error_terms.dv),
                (&plain.visible_terms.dq, &ours.visible_terms.dq),
                (&plain.visible_terms.dv, &ours.visible_terms.dv),
            ];
            for (a, b) in pairs {
                assert!(a.iter().zip(b).all(|(x, y)| close(*x, *y, 1e-12)), "causal {causal}");
            }
        }
    }

    #[test]
    fn dropout_scales_the_gradient_terms_of_the_weights_it_keeps() {
        // One key per row (window (0, 0)): a kept weight's dV term grows by 1 / (1 - p), a
        // dropped one's is 0.
        let p = Problem::random(&ProblemSpec::new(1, 1, 6, 6, 2), 13);
        let d_o = Problem::random(&ProblemSpec::new(1, 1, 6, 6, 2), 14).q;
        let window = Features::default().window(Some(0), Some(0));
        let dropout = Dropout { p: 0.5, seed: 3 };
        let with = window.clone().dropout(dropout.p, dropout.seed);
        let base = expected_gradients(&p.q, &p.k, &p.v, &p.options, &window, &d_o).unwrap();
        let dropped = expected_gradients(&p.q, &p.k, &p.v, &p.options, &with, &d_o).unwrap();
        for j in 0..6 {
            let factor = if dropout.keeps(0, 0, j, j) { 2.0 } else { 0.0 };
            let (a, b) =
                (base.visible_terms.dv[[0, 0, j, 0]], dropped.visible_terms.dv[[0, 0, j, 0]]);
            assert!(close(b, factor * a, 1e-12), "key {j}: {b} against {factor} x {a}");
        }
    }

    #[test]
    fn expected_terms_follow_the_features() {
        // The error model's terms: the value terms weigh the kept weights after dropout, the
        // visible values count only the band, and the logit terms grow by the ALiBi bias.
        let p = Problem::random(&ProblemSpec::new(1, 1, 4, 4, 2), 8);
        let features = Features::default().window(Some(0), Some(0)).alibi(vec![2.0]);
        let e = expected(&p.q, &p.k, &p.v, &p.options, &features).unwrap();
        for i in 0..4 {
            // One key per row, on the diagonal (bias 0): the terms are that key's |V| and |q||k|.
            for d in 0..2 {
                let v = f64::from(p.v[[0, 0, i, d]].abs());
                assert!(close(e.value_terms[[0, 0, i, d]], v, 1e-12));
                assert!(close(e.visible_values[[0, 0, i, d]], v, 1e-12));
            }
        }
        let wide =
            expected(&p.q, &p.k, &p.v, &p.options, &Features::default().alibi(vec![2.0])).unwrap();
        // Row 0 sees key 3 at distance 3: a bias of 6 at least.
        assert!(wide.logit_terms[[0, 0, 0]] >= 6.0);
    }
}
