//! Hidden checks of exercise 12, run by `cargo grade ex12`.

use ex12::Batch;
use grader::ex12::{Functions, checks, drive};

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        layer_norm: Box::new(ex12::layer_norm),
        block_forward: Box::new(ex12::block_forward),
        run_batch: Box::new(|model, attention, sequences, steps| {
            let batch = Batch::new(model, attention, sequences)?;
            Ok(drive(batch, Batch::feed, Batch::len, sequences, steps))
        }),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
