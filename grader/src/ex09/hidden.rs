//! Hidden checks of exercise 09, run by `cargo grade ex09`.

use grader::ex09::Exercise09;

/// The learner's kernels, seen through the exercise's adapter trait: `src/flash.wgsl` and
/// `src/window.wgsl`, run by lesson 09's host code as the exercise's `attention` and
/// `attention_window` run them.
struct Learner;

impl Exercise09 for Learner {
    fn source(&self) -> String {
        ex09::shader().to_string()
    }

    fn window_source(&self) -> String {
        ex09::window_shader()
    }
}

fn main() -> std::process::ExitCode {
    grader::hidden::main(env!("CARGO_PKG_NAME"), grader::ex09::checks(Learner))
}
