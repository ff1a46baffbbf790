use reference::{Problem, ProblemSpec, Tolerance, check_output, oracle};
#[test]
fn smoke() {
    let gpu = gpu::for_tests().unwrap();
    eprintln!("{}", gpu.describe());
    for causal in [false, true] {
        let p = Problem::random(&ProblemSpec::new(2, 3, 77, 50, 64).causal(causal), 1);
        let e = oracle::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
        let t = std::time::Instant::now();
        let a = lesson09::attention(&p.q, &p.k, &p.v, &p.options, lesson09::default_tiles()).unwrap();
        eprintln!("flash {:?}", t.elapsed());
        eprintln!("{:?}", check_output(&a, &e, Tolerance::F32_CPU.for_logits(10.0)));
        let t = std::time::Instant::now();
        let a = lesson08::attention(&p.q, &p.k, &p.v, &p.options).unwrap();
        eprintln!("naive {:?}", t.elapsed());
        eprintln!("{:?}", check_output(&a, &e, Tolerance::F32_CPU.for_logits(10.0)));
    }
}
