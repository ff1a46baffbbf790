//! The precision strategies and the monitor on the tiny checkpoint.

use lesson12::precision::{Dtype, Monitor, Precision, logit_errors};
use lesson12::{Attention, Gpt2, tiny_checkpoint};
use ndarray::array;

fn tokens() -> Vec<u32> {
    (0..37).map(|i| (i * 61 % 502) as u32).collect()
}

/// The unit roundoff of a format.
fn unit(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F32 => 2f64.powi(-24),
        Dtype::F16 => 2f64.powi(-11),
        Dtype::BF16 => 2f64.powi(-8),
    }
}

/// The tiny model with its last block's MLP output multiplied by `factor`.
fn blown_up(factor: f32) -> Gpt2 {
    let mut model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let last = model.blocks.last_mut().unwrap();
    last.mlp_out.weight *= factor;
    last.mlp_out.bias *= factor;
    model
}

#[test]
fn each_strategy_rounds_and_stays_within_a_few_units_of_its_format() {
    let model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    let naive = Attention::naive();
    let f32_logits = model.logits(&tokens(), &naive).unwrap();
    assert_eq!(model.with_precision(Precision::F32).logits(&tokens(), &naive).unwrap(), f32_logits);
    for precision in Precision::ALL.into_iter().skip(1) {
        let logits = model.with_precision(precision).logits(&tokens(), &naive).unwrap();
        let (_, _, relative) = logit_errors(&logits, &f32_logits);
        let units = relative / unit(precision.storage());
        // The precision example measured 3.3 and 4.2 units for mixed f16 and bf16, 5.3 and
        // 6.5 for aggressive (2026-11-25, its 23 tokens). Below a tenth of a unit, the
        // strategy did not round at all.
        assert!((0.1..=16.0).contains(&units), "{}: {units:.2} units", precision.name());
    }
}

#[test]
fn large_activations_break_f16_layer_norm_statistics_silently_but_not_mixed_precision() {
    // Activations in the thousands: a sum of 64 squares passes f16's 65504, so aggressive
    // f16's LayerNorm divides by infinity and returns its bias; every value stays finite.
    let model = blown_up(1000.0);
    let naive = Attention::naive();
    let f32_logits = model.logits(&tokens(), &naive).unwrap();
    let relative = |precision| {
        let logits = model.with_precision(precision).logits(&tokens(), &naive).unwrap();
        assert!(logits.iter().all(|x| x.is_finite()));
        logit_errors(&logits, &f32_logits).2
    };
    let mixed = relative(Precision::Mixed(Dtype::F16));
    assert!(mixed < 16.0 * unit(Dtype::F16), "mixed f16: {mixed:.2e}");
    let aggressive = relative(Precision::Aggressive(Dtype::F16));
    assert!(aggressive > 0.5, "aggressive f16: {aggressive:.2e}");
}

#[test]
fn the_monitor_names_the_first_layer_that_overflows_f16() {
    let model = blown_up(20000.0);
    for precision in Precision::ALL {
        let mut monitor = Monitor::default();
        let _ = model.with_precision(precision).trace_monitored(
            &tokens(),
            &Attention::naive(),
            &mut monitor,
        );
        let layers: Vec<&str> = monitor.layers.iter().map(|s| s.layer.as_str()).collect();
        let expected = [
            "embeddings",
            "h.0.attn",
            "h.0.mlp",
            "h.0",
            "h.1.attn",
            "h.1.mlp",
            "h.1",
            "ln_f",
            "logits",
        ];
        assert_eq!(layers, expected);
        let first = monitor.first_non_finite().map(|s| s.layer.as_str());
        let overflows = precision.storage() == Dtype::F16; // bf16 has f32's range
        assert_eq!(first, overflows.then_some("h.1.mlp"), "{}", precision.name());
    }
}

#[test]
fn a_session_that_failed_midway_refuses_further_tokens() {
    // The first block's MLP output overflows f16, so layer 1's keys are NaN: its cache
    // refuses them after layer 0's cache took the tokens.
    let mut model = Gpt2::from_folder(&tiny_checkpoint()).unwrap();
    model.blocks[0].mlp_out.weight *= 20000.0;
    let model = model.with_precision(Precision::Mixed(Dtype::F16));
    let naive = Attention::naive();
    let mut session = lesson12::Session::new(&model, &naive).unwrap();
    assert!(session.feed(&tokens()).is_err());
    let message = session.feed(&[1]).unwrap_err().to_string();
    assert!(message.contains("a new Session"), "{message}");
}

#[test]
fn the_monitor_counts_what_it_sees() {
    let mut monitor = Monitor::default();
    monitor.record("x", &array![[1.0, 3.0, f32::NAN], [f32::INFINITY, -2.0, f32::NEG_INFINITY]]);
    let stats = &monitor.layers[0];
    assert_eq!((stats.nan, stats.inf, stats.min, stats.max), (1, 2, -2.0, 3.0));
    assert!((stats.mean - 2.0 / 3.0).abs() < 1e-12);
    assert!((stats.std - (38.0f64 / 9.0).sqrt()).abs() < 1e-12);
    assert_eq!(monitor.first_non_finite().unwrap().layer, "x");
}
