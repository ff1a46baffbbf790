//! Hidden checks of exercise 01, run by `cargo grade ex01`.

use grader::ex01::{Functions, checks};

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        attention: Box::new(ex01::attention),
        attention_with_features: Box::new(ex01::attention_with_features),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
