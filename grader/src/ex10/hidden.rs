//! Hidden checks of exercise 10, run by `cargo grade ex10`.

use grader::ex10::Exercise10;

/// The learner's shaders, seen through the exercise's adapter trait: `src/micro_tiles.wgsl` and
/// `src/features.wgsl`, run by lesson 10's host code as the exercise's `attention` and
/// `attention_features` run them.
struct Learner;

impl Exercise10 for Learner {
    fn source(&self) -> String {
        ex10::shader().to_string()
    }

    fn features_source(&self) -> String {
        ex10::features_shader().to_string()
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main(env!("CARGO_PKG_NAME"), grader::ex10::checks(Learner))
}
