//! Hidden checks of exercise 08, run by `cargo grade ex08`.

use grader::ex08::{Functions, checks};

fn main() -> std::process::ExitCode {
    // The learner's kernels, seen through the exercise's adapter.
    let learner = Functions {
        attention: Box::new(ex08::attention),
        attention_dropout: Box::new(ex08::attention_dropout),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
