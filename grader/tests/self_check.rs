//! The hidden checks pass on every lesson and on every bug-free control, and catch every
//! planted-bug mutant with the check meant to catch it.
//! (One test in this binary: the quiet panic hook is process-wide, and the memory checks need
//! no other test allocating beside them.)

// The memory checks of exercises 03 and 05 measure with the counting allocator.
#[global_allocator]
static ALLOC: reference::memory::CountingAllocator = reference::memory::CountingAllocator;

#[test]
fn lessons_pass_and_every_mutant_is_caught() {
    grader::check::quiet_panics();
    let reports = grader::self_check::run();
    let table = grader::self_check::table(&reports);
    println!("{table}");
    assert!(reports.iter().all(|r| r.ok()), "self-check failed:\n{table}");
    let checked: Vec<&str> = reports.iter().map(|r| r.exercise).collect();
    let listed: Vec<String> =
        course::lessons().into_iter().filter_map(|l| l.exercise).map(|e| e.package).collect();
    assert_eq!(checked, listed, "the self-check's exercises vs course.toml");
}
