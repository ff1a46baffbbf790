//! The error table: MSE, MAE, max error and relative error of O against the f64 oracle, for
//! f32 / f16 / bf16 storage and naive attention, FlashAttention rounding only O, and
//! FlashAttention rounding P before P V as tensor-core kernels do ("flash P"), end to end
//! (inputs rounded to the format, as a model in that format holds them). Then the demonstrations of what must stay
//! f32. Writes book/src/figures/06_error_table.csv.
//!
//! `cargo run --release -p lesson06 --example error_table`

use bench::{Cell, Figures, Table};
use half::{bf16, f16};
use lesson06::{Element, demos, flash, flash_rounding_weights, naive, round_to, widen};
use reference::{Problem, ProblemSpec, oracle};

/// Errors of `o` against `expected`: MSE, MAE, max, relative Frobenius.
fn errors(o: &ndarray::Array4<f32>, expected: &ndarray::Array4<f64>) -> [f64; 4] {
    let n = o.len() as f64;
    let (mut se, mut ae, mut max, mut ref_sq) = (0.0, 0.0, 0.0f64, 0.0);
    for (&a, &r) in o.iter().zip(expected) {
        let e = (f64::from(a) - r).abs();
        (se, ae, max, ref_sq) = (se + e * e, ae + e, max.max(e), ref_sq + r * r);
    }
    [se / n, ae / n, max, (se / ref_sq).sqrt()]
}

fn rows_for<T: Element>(
    p: &Problem,
    expected: &ndarray::Array4<f64>,
) -> Vec<(String, &'static str, [f64; 4])> {
    let (q, k, v) = (round_to::<T>(&p.q), round_to::<T>(&p.k), round_to::<T>(&p.v));
    let name = T::DTYPE.name().to_string();
    let naive_o = widen(&naive(&q, &k, &v, &p.options).expect("valid shapes").o);
    let tiles = lesson03::TileSizes::default();
    let flash_o = widen(&flash(&q, &k, &v, &p.options, tiles).expect("valid shapes").o);
    let rounded_p =
        widen(&flash_rounding_weights(&q, &k, &v, &p.options, tiles).expect("valid shapes").o);
    vec![
        (name.clone(), "naive", errors(&naive_o, expected)),
        (name.clone(), "flash", errors(&flash_o, expected)),
        (name, "flash P", errors(&rounded_p, expected)),
    ]
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let figures = Figures::from_args(&args)?;
    let mut csv =
        Table::new(&["logit_scale", "format", "algorithm", "mse", "mae", "max_err", "rel_err"]);
    for logit_scale in [1.0, 8.0] {
        let spec = ProblemSpec::new(1, 4, 512, 512, 64).logit_scale(logit_scale);
        let p = Problem::random(&spec, 7);
        let expected =
            oracle::attention(&p.q, &p.k, &p.v, &p.options).map_err(|e| e.to_string())?.o;
        println!(
            "O against the f64 oracle: B=1 H=4 N=512 D=64, standard normal inputs, logits x{logit_scale}"
        );
        println!(
            "{:<6} {:<7} {:>10} {:>10} {:>10} {:>10}",
            "format", "algo", "MSE", "MAE", "max err", "rel err"
        );
        let rows = [
            rows_for::<f32>(&p, &expected),
            rows_for::<f16>(&p, &expected),
            rows_for::<bf16>(&p, &expected),
        ]
        .concat();
        for (format, algo, [mse, mae, max, rel]) in rows {
            println!("{format:<6} {algo:<7} {mse:>10.2e} {mae:>10.2e} {max:>10.2e} {rel:>10.2e}");
            let errors = [mse, mae, max, rel].map(|e| Cell::number(e, 3));
            let labels = [
                Cell::number(f64::from(logit_scale), 0),
                Cell::Text(format),
                Cell::Text(algo.into()),
            ];
            csv.push(labels.into_iter().chain(errors).collect());
        }
        println!();
    }
    figures.write_csv("06_error_table", &csv)?;

    println!("what must stay f32:");
    println!(
        "  e^x overflows for x above: f16 {:.4}, bf16 {:.2}, f32 {:.2}",
        demos::exp_overflow_threshold::<f16>(),
        demos::exp_overflow_threshold::<bf16>(),
        demos::exp_overflow_threshold::<f32>()
    );
    println!(
        "  softmax of [12, 11, 10] with e^x stored in f16: without the max {:?}, with it {:?}",
        demos::softmax_in::<f16>(&[12.0, 11.0, 10.0], false),
        demos::softmax_in::<f16>(&[12.0, 11.0, 10.0], true)
    );
    println!(
        "  a running sum of 4096 ones: f16 {}, bf16 {}, f32 {}",
        demos::running_sum_of_ones::<f16>(4096),
        demos::running_sum_of_ones::<bf16>(4096),
        demos::running_sum_of_ones::<f32>(4096)
    );
    let mut rng = reference::problem::SplitMix64::new(5);
    let x: Vec<f32> = (0..1024).map(|_| 1000.0 + 100.0 * rng.normal()).collect();
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
    println!(
        "  LayerNorm statistics of 1024 activations 1000 + 100 z (f64: mean {mean:.2}, variance {var:.1}):"
    );
    for (name, (m, v)) in [
        ("f16", demos::layer_norm_stats::<f16>(&x)),
        ("bf16", demos::layer_norm_stats::<bf16>(&x)),
        ("f32", demos::layer_norm_stats::<f32>(&x)),
    ] {
        println!("    sums kept in {name:<4}: mean {m:.2}, variance {v:.1}");
    }
    for (name, (m, v)) in [
        ("f16", demos::layer_norm_stats_welford::<f16>(&x)),
        ("bf16", demos::layer_norm_stats_welford::<bf16>(&x)),
    ] {
        println!("    {name:<4} storage, Welford in f32: mean {m:.2}, variance {v:.1}");
    }
    println!("\nwrote book/src/figures/06_error_table.csv");
    Ok(())
}
