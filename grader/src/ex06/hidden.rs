//! Hidden checks of exercise 06, run by `cargo grade ex06`.

use grader::ex06::{Functions, checks};

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        attention_f16: Box::new(ex06::attention),
        attention_bf16: Box::new(ex06::attention),
        dispatch: Box::new(ex06::dispatch),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
