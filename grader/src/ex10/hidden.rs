//! Hidden checks of exercise 10, run by `cargo grade ex10`.

use grader::ex10::Exercise10;

/// The learner's shader, seen through the exercise's adapter trait: `src/micro_tiles.wgsl`,
/// run by lesson 10's host code as the exercise's `attention` runs it.
struct Learner;

impl Exercise10 for Learner {
    fn source(&self) -> String {
        ex10::shader().to_string()
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main(env!("CARGO_PKG_NAME"), grader::ex10::checks(Learner))
}
