//! Hidden checks of exercise 06, run by `cargo grade ex06`.

use ex06::Fp8Tensor;
use grader::ex06::{Fp8, Functions, checks};

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        attention_f16: Box::new(ex06::attention),
        attention_bf16: Box::new(ex06::attention),
        dispatch: Box::new(ex06::dispatch),
        e4m3_to_f32: Box::new(ex06::e4m3_to_f32),
        f32_to_e4m3: Box::new(ex06::f32_to_e4m3),
        quantize: Box::new(|x, tensor| {
            ex06::quantize(x, tensor).map(|t| Fp8 { codes: t.codes, descale: t.descale })
        }),
        attention_fp8: Box::new(|q, k, v, options| {
            let yours = |t: &Fp8| Fp8Tensor { codes: t.codes.clone(), descale: t.descale.clone() };
            ex06::attention_fp8(&yours(q), &yours(k), &yours(v), options)
        }),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
