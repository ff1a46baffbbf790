//! Cross-stage equivalence: oracle ≡ lesson01 ≡ lesson02 ≡ … on the same random problems, each
//! stage within its own tolerance (f32, or its 16-bit format's). Each stage is checked against
//! the oracle, and each against the first stage, so a stage that drifts from the rest is named
//! even where the oracle tolerance is generous.

use proptest::prelude::*;
use reference::{AttentionOutput, ForwardVersion, check_agreement, check_output, oracle};
use testkit::checks::run;
use testkit::strategies::{ShapeLimits, cases, config};

/// Every registered CPU forward, and the GPU kernels unless the machine has no GPU adapter and
/// `FLASH_SKIP_GPU_TESTS` is set (without it, no adapter fails the test with the error that
/// says how to install lavapipe).
fn every_stage() -> Vec<ForwardVersion> {
    let mut stages = registry::cpu_forwards();
    if gpu::for_tests().is_some() {
        stages.extend(registry::gpu_forwards().expect("the adapter was found"));
    }
    stages
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn every_stage_computes_the_same_attention(case in cases(ShapeLimits::CPU)) {
        let p = case.problem();
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        let mut first: Option<(&str, AttentionOutput<f32>)> = None;
        for stage in every_stage() {
            let fail = |e: String| TestCaseError::fail(format!("{}: {case:?}\n{e}", stage.about.name));
            let out = run(&stage.forward, &p).map_err(|e| fail(e.to_string()))?;
            check_output(&out, &expected, stage.about.tolerance).map_err(|e| fail(format!("vs the oracle: {e}")))?;
            // Two results may each be off the oracle by their bound, in opposite directions. The
            // first stage is f32, whose bound is the tightest, so twice this stage's bound covers
            // both.
            match &first {
                None => first = Some((stage.about.name, out)),
                Some((name, reference)) => {
                    check_agreement(&out, reference, &expected, stage.about.tolerance).map_err(|e| fail(format!("vs {name}: {e}")))?;
                }
            }
        }
    }
}

#[test]
fn every_registered_stage_is_checked() {
    let names =
        |stages: Vec<ForwardVersion>| stages.iter().map(|s| s.about.name).collect::<Vec<_>>();
    let mut registered = names(registry::cpu_forwards());
    if let Some(gpu) = gpu::for_tests() {
        // Every GPU version, less those the device cannot run (tensor cores on lavapipe),
        // which must say why.
        let cannot = registry::gpu_kernels_not_runnable(gpu);
        for (about, why) in &cannot {
            eprintln!("not run on this GPU: {} ({why})", about.name);
        }
        let runs = registry::gpu_kernels().into_iter().map(|k| k.about.name);
        registered.extend(runs.filter(|name| cannot.iter().all(|(about, _)| about.name != *name)));
        assert!(registered.len() > registry::cpu_forwards().len(), "no GPU kernel is registered");
    }
    assert_eq!(names(every_stage()), registered);
}
