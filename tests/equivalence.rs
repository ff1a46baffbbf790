//! Cross-version equivalence, operation by operation: every version the registry lists (the
//! GPU ones unless the machine has no GPU adapter and `FLASH_SKIP_GPU_TESTS` is set) computes
//! the same thing as the f64 oracle and as the first version of its operation, on the same
//! random problems, each within its own tolerance. A version that drifts from the rest is
//! named even where the oracle tolerance is generous.

use ndarray::s;
use proptest::prelude::*;
use reference::{
    About, AttentionError, AttentionOutput, Device, Gradients, check_agreement,
    check_gradient_agreement, check_gradients, check_output, oracle,
};
use registry::Runnable;
use testkit::checks::{oracle_forward_in_f32, random_d_o, run};
use testkit::strategies::{ShapeLimits, cases, config};

/// The versions of `runnable` to test: all that run here. Without a GPU adapter the test fails
/// with the advice to install lavapipe, unless `FLASH_SKIP_GPU_TESTS` says to skip the GPU; a
/// GPU version may only be left out for a feature the adapter lacks (tensor cores on
/// lavapipe), which is said on stderr.
fn here<V>(runnable: Runnable<V>) -> Vec<V> {
    let skip_gpu = gpu::for_tests().is_none();
    for (about, why) in &runnable.cannot {
        assert_eq!(about.device, Device::Gpu, "{}: {why}", about.name);
        if !skip_gpu {
            assert!(
                matches!(why, AttentionError::Device(_)) && why.to_string().contains("feature"),
                "{} cannot run on this adapter: {why}",
                about.name
            );
            eprintln!("not run on this GPU: {} ({why})", about.name);
        }
    }
    runnable.runs
}

/// The problem's last query row, one token per sequence, and each sequence's keys and values
/// as a KV cache is filled with them.
fn last_row_and_cache(
    p: &reference::Problem,
) -> (ndarray::Array4<f32>, Vec<ndarray::Array3<f32>>, Vec<ndarray::Array3<f32>>) {
    let q_len = p.q.dim().2;
    let q = p.q.slice(s![.., .., q_len - 1.., ..]).to_owned();
    let per_sequence = |x: &ndarray::Array4<f32>| x.outer_iter().map(|s| s.to_owned()).collect();
    (q, per_sequence(&p.k), per_sequence(&p.v))
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn every_forward_version_computes_the_same_attention(case in cases(ShapeLimits::CPU)) {
        let p = case.problem();
        let expected = oracle::expected(&p.q, &p.k, &p.v, &p.options).unwrap();
        let mut first: Option<(&str, AttentionOutput<f32>)> = None;
        for version in here(registry::runnable_forwards()) {
            let fail = |e: String| TestCaseError::fail(format!("{}: {case:?}\n{e}", version.about.name));
            let out = run(&version.forward, &p).map_err(|e| fail(e.to_string()))?;
            check_output(&out, &expected, version.about.tolerance).map_err(|e| fail(format!("vs the oracle: {e}")))?;
            // Two results may each be off the oracle by their bound, in opposite directions. The
            // first version is f32, whose bound is the tightest, so twice this version's bound
            // covers both.
            match &first {
                None => first = Some((version.about.name, out)),
                Some((name, reference)) => {
                    check_agreement(&out, reference, &expected, version.about.tolerance).map_err(|e| fail(format!("vs {name}: {e}")))?;
                }
            }
        }
    }

    #[test]
    fn every_backward_version_computes_the_same_gradients(case in cases(ShapeLimits::CPU)) {
        let p = case.problem();
        let d_o = random_d_o(&case);
        let expected = oracle::expected_gradients(&p.q, &p.k, &p.v, &p.options, &d_o).unwrap();
        // Every version recomputes P from the same forward output: the oracle's, in f32.
        let forward = oracle_forward_in_f32(&p).map_err(TestCaseError::fail)?;
        let mut first: Option<(&str, Gradients<f32>)> = None;
        for version in here(registry::runnable_backwards()) {
            let fail = |e: String| TestCaseError::fail(format!("{}: {case:?}\n{e}", version.about.name));
            let grads = (version.backward)(&p.q, &p.k, &p.v, &p.options, &forward, &d_o)
                .map_err(|e| fail(e.to_string()))?;
            check_gradients(&grads, &expected, version.about.tolerance).map_err(|e| fail(format!("vs the oracle: {e}")))?;
            match &first {
                None => first = Some((version.about.name, grads)),
                Some((name, reference)) => {
                    check_gradient_agreement(&grads, reference, &expected, version.about.tolerance).map_err(|e| fail(format!("vs {name}: {e}")))?;
                }
            }
        }
    }

    #[test]
    fn every_decoding_version_computes_the_last_row(case in cases(ShapeLimits::GPU)) {
        let p = case.problem();
        let q_len = case.spec.q_len;
        let expected = oracle::expected_rows(&p.q, &p.k, &p.v, &p.options, q_len - 1..q_len).unwrap();
        let (q, keys, values) = last_row_and_cache(&p);
        for version in here(registry::runnable_decodes()) {
            let fail = |e: String| TestCaseError::fail(format!("{}: {case:?}\n{e}", version.about.name));
            let cache = version.decoder.fill(&keys, &values).map_err(|e| fail(e.to_string()))?;
            let out = cache.decode(&q, &p.options).map_err(|e| fail(e.to_string()))?;
            check_output(&out, &expected, version.about.tolerance).map_err(|e| fail(format!("vs the oracle: {e}")))?;
        }
    }
}

/// Every registered version of each operation is among those tested, less the GPU versions
/// the device cannot run (which must say why); with a GPU adapter, some GPU version of each
/// operation that has one runs.
#[test]
fn every_registered_version_is_checked() {
    fn accounted<V>(registered: Vec<About>, runnable: Runnable<V>, card: fn(&V) -> About) {
        let runs: Vec<About> = runnable.runs.iter().map(card).collect();
        let mut seen: Vec<&str> = runs.iter().map(|c| c.name).collect();
        seen.extend(runnable.cannot.iter().map(|(c, _)| c.name));
        seen.sort();
        let mut all: Vec<&str> = registered.iter().map(|c| c.name).collect();
        all.sort();
        assert_eq!(seen, all, "every registered version either runs or says why not");
        let on_gpu = |cards: &[About]| cards.iter().any(|c| c.device == Device::Gpu);
        if gpu::for_tests().is_some() && on_gpu(&registered) {
            assert!(on_gpu(&runs), "no GPU version of {:?} runs", registered[0].operation);
        }
    }
    fn cards<C, G>(entries: Vec<registry::Entry<C, G>>) -> Vec<About> {
        entries.iter().map(|e| e.about).collect()
    }
    accounted(cards(registry::forwards()), registry::runnable_forwards(), |v| v.about);
    accounted(cards(registry::backwards()), registry::runnable_backwards(), |v| v.about);
    accounted(cards(registry::decodes()), registry::runnable_decodes(), |v| v.about);
}
