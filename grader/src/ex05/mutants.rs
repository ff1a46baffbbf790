//! The planted-bug implementation of exercise 05: one classic mistake per switch (see
//! [`crate::mutants`]).

use ndarray::{Array1, Array2, Array4, s};
use reference::{
    AttentionError, AttentionOptions, AttentionOutput, CheckedInputs, Feature, Features,
    check_inputs,
};

use crate::ex05;
use crate::mutants::{Planted, planted_bugs, rows};

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
        /// The softcap's slope `1 - tanh²(s / c)` left out of `dS`.
        SoftcapSlopeMissing => ex05::SOFTCAP_GRADIENTS,
        /// The slope taken at the capped score, `1 - tanh²(c tanh(s / c) / c)`.
        SoftcapSlopeOfCappedScore => ex05::SOFTCAP_GRADIENTS,
        /// The dropout mask drawn with row and key swapped: not the forward's mask.
        DropoutMaskNotRegenerated => ex05::DROPOUT_GRADIENTS,
        /// Dropout applied to `dV` but not to `dP`.
        DropoutOnlyInDv => ex05::DROPOUT_GRADIENTS,
        /// Kept weights not divided by `1 - p`.
        DropoutNotRescaled => ex05::DROPOUT_GRADIENTS,
        /// The features not checked: a window is silently left out.
        FeaturesNotChecked => ex05::FEATURE_ERRORS,
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

    fn backward_with_features(
        &self,
        q: &Array4<f32>,
        k: &Array4<f32>,
        v: &Array4<f32>,
        options: &AttentionOptions,
        features: &Features,
        forward: &AttentionOutput<f32>,
        d_o: &Array4<f32>,
        query_rows: usize,
        key_cols: usize,
    ) -> Result<reference::Gradients<f32>, AttentionError> {
        let CheckedInputs { shape, scale, .. } = check_inputs(q, k, v, options)?;
        reference::check_same_shape("dO", d_o, "Q", q)?;
        reference::check_same_shape("O", &forward.o, "Q", q)?;
        reference::check_lse_shape(&forward.lse, q)?;
        reference::check_finite("dO", d_o)?;
        reference::check_finite("O", &forward.o)?;
        reference::check_logsumexp(&forward.lse, &shape, options.causal)?;
        if !self.has(BackwardBug::FeaturesNotChecked) {
            features.check_supported(&shape, &[Feature::Softcap, Feature::Dropout])?;
        }
        lesson03::TileSizes::new(query_rows, key_cols)?;
        // Row by row and key by key: the bugs are in the factors.
        let mut grads = reference::Gradients {
            dq: Array4::zeros(q.dim()),
            dk: Array4::zeros(k.dim()),
            dv: Array4::zeros(v.dim()),
        };
        for (b, h, i) in rows(&shape) {
            let l = forward.lse[[b, h, i]];
            if l == f32::NEG_INFINITY {
                continue;
            }
            let (q_i, d_o_i) = (q.slice(s![b, h, i, ..]), d_o.slice(s![b, h, i, ..]));
            let d_i = d_o_i.dot(&forward.o.slice(s![b, h, i, ..]));
            for j in 0..shape.visible_keys(i, options.causal) {
                let (k_j, v_j) = (k.slice(s![b, h, j, ..]), v.slice(s![b, h, j, ..]));
                let score = scale * q_i.dot(&k_j);
                let capped = features.softcap.map_or(score, |c| c * (score / c).tanh());
                let p = (capped - l).exp();
                let slope = match features.softcap {
                    None => 1.0,
                    Some(_) if self.has(BackwardBug::SoftcapSlopeMissing) => 1.0,
                    Some(c) if self.has(BackwardBug::SoftcapSlopeOfCappedScore) => {
                        1.0 - (capped / c).tanh().powi(2)
                    }
                    Some(c) => 1.0 - (score / c).tanh().powi(2),
                };
                let factor = match features.dropout {
                    None => 1.0,
                    Some(d) => {
                        let (row, key) = if self.has(BackwardBug::DropoutMaskNotRegenerated) {
                            (j, i)
                        } else {
                            (i, j)
                        };
                        let keep = if self.has(BackwardBug::DropoutNotRescaled) {
                            1.0
                        } else {
                            d.keep_scale() as f32
                        };
                        if d.keeps(b, h, row, key) { keep } else { 0.0 }
                    }
                };
                let dp_factor = if self.has(BackwardBug::DropoutOnlyInDv) { 1.0 } else { factor };
                grads.dv.slice_mut(s![b, h, j, ..]).scaled_add(p * factor, &d_o_i);
                let d_s = p * (d_o_i.dot(&v_j) * dp_factor - d_i) * slope;
                grads.dq.slice_mut(s![b, h, i, ..]).scaled_add(scale * d_s, &k_j);
                grads.dk.slice_mut(s![b, h, j, ..]).scaled_add(scale * d_s, &q_i);
            }
        }
        Ok(grads)
    }
}
