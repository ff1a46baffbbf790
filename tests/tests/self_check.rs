//! The hidden checks pass on every lesson and catch every planted-bug mutant.
//! (One test in this binary: the quiet panic hook is process-wide.)

#[test]
fn lessons_pass_and_every_mutant_is_caught() {
    grader::check::quiet_panics();
    let reports = grader::self_check::run();
    let table = grader::self_check::table(&reports);
    println!("{table}");
    assert!(reports.iter().all(|r| r.ok()), "self-check failed:\n{table}");
}
