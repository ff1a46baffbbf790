//! Timing: warm up, then the median of several runs, alternating between input sets.
//!
//! Why alternate: a kernel timed on the same input again and again finds it in cache, which
//! it never would in a model; two input sets taken in turn keep each run honest. Why the
//! median: on a shared machine some runs are slowed by other work, and the median ignores
//! them where the mean would not.

use std::time::Instant;

/// The sorted times of one measurement, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timings {
    sorted: Vec<f64>,
}

impl Timings {
    /// Times in any order; `None` when there are none or one is not a finite, non-negative
    /// number of seconds.
    pub fn from_seconds(mut seconds: Vec<f64>) -> Option<Self> {
        if seconds.is_empty() || seconds.iter().any(|s| !s.is_finite() || *s < 0.0) {
            return None;
        }
        seconds.sort_by(f64::total_cmp);
        Some(Self { sorted: seconds })
    }

    /// The middle run (the upper middle of an even count).
    pub fn median(&self) -> f64 {
        self.sorted[self.sorted.len() / 2]
    }

    /// The fastest run.
    pub fn fastest(&self) -> f64 {
        self.sorted[0]
    }

    /// The slowest run.
    pub fn slowest(&self) -> f64 {
        self.sorted[self.sorted.len() - 1]
    }

    /// How many runs were timed.
    pub fn runs(&self) -> usize {
        self.sorted.len()
    }
}

/// How many untimed and timed runs a measurement takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repeats {
    /// Runs before timing starts (caches, thread pools, shader compilation).
    pub warmups: usize,
    /// Timed runs; at least 1.
    pub timed: usize,
}

impl Repeats {
    /// `warmups` untimed runs, then `timed` timed ones (at least 1).
    pub fn new(warmups: usize, timed: usize) -> Self {
        Self { warmups, timed: timed.max(1) }
    }
}

// ANCHOR: time_cpu
/// Wall-clock times of `run` on the CPU: `repeats.warmups` untimed runs, then
/// `repeats.timed` timed ones, taking `inputs` in turn. The result of each run goes through
/// `black_box`, so the compiler cannot drop the work.
///
/// # Panics
/// If `inputs` is empty.
pub fn time_cpu<I, R>(inputs: &[I], repeats: Repeats, mut run: impl FnMut(&I) -> R) -> Timings {
    assert!(!inputs.is_empty(), "time_cpu needs at least one input");
    let mut turns = inputs.iter().cycle();
    for input in turns.by_ref().take(repeats.warmups) {
        std::hint::black_box(run(input));
    }
    let seconds = turns
        .take(repeats.timed)
        .map(|input| {
            let start = Instant::now();
            std::hint::black_box(run(input));
            start.elapsed().as_secs_f64()
        })
        .collect();
    Timings::from_seconds(seconds).expect("elapsed times are finite and at least one was taken")
}
// ANCHOR_END: time_cpu

/// The shortest GPU time of one timed sample: shorter launches are repeated back to back.
pub const SAMPLE_SECONDS: f64 = 0.005;

/// The least GPU time spent warming up before anything is timed.
pub const WARM_UP_SECONDS: f64 = 0.2;

/// The least wall-clock time the warm-ups keep the GPU busy. After a second or more idle (the
/// host making the next problem), an H100 was seen to run at its idle clock, 345 MHz, for up
/// to a second of full load before it rose to 1980 MHz (`nvidia-smi` sampled every 200 ms
/// during a tuning run, 2026-11-26); [`WARM_UP_SECONDS`] of GPU time pass well inside that
/// second, and a kernel timed there measured up to 5 times too slow.
pub const WARM_UP_WALL_SECONDS: f64 = 1.0;

/// GPU time after which no more samples are taken, once [`FEWEST_SAMPLES`] are: a kernel that
/// takes seconds (lesson 10's version 1 at D = 128) varies by far less than a short one, and
/// ten samples of it would hold a lent GPU for minutes.
pub const SAMPLING_BUDGET_SECONDS: f64 = 3.0;

/// The fewest timed samples, however long they take.
pub const FEWEST_SAMPLES: usize = 3;

// ANCHOR: time_gpu
/// GPU times of prepared kernels from timestamp queries (the time the GPU spent in the
/// compute pass, not the host's wait): `repeats.warmups` untimed samples (more if they take
/// under [`WARM_UP_SECONDS`] of GPU time or [`WARM_UP_WALL_SECONDS`] of wall-clock time
/// together; none with 0; fewer, but at least one, once they took
/// [`SAMPLING_BUDGET_SECONDS`]), then `repeats.timed` timed samples (fewer, but at least
/// [`FEWEST_SAMPLES`], once they took [`SAMPLING_BUDGET_SECONDS`]), taking the prepared input
/// sets in turn. A sample is one launch, or on a problem that takes under [`SAMPLE_SECONDS`]
/// several launches back to back in one pass (their mean): a GPU left idle between launches
/// lowers its clock within a millisecond, and a short kernel timed alone then measures the
/// idle clock (seen on an H100: the same kernel at N = 4096 timed 3x slower alone than back to
/// back).
#[cfg(feature = "gpu")]
pub fn time_gpu(
    gpu: &gpu::Gpu,
    timer: &gpu::GpuTimer,
    prepared: &[gpu::attention::Prepared],
    repeats: Repeats,
) -> Result<Timings, reference::AttentionError> {
    use gpu::GpuError;
    if prepared.is_empty() {
        return Err(
            GpuError::KernelMisuse("time_gpu needs at least one prepared input".into()).into()
        );
    }
    let (device, queue) = (&gpu.device, &gpu.queue);
    let mut turns = prepared.iter().cycle();
    let no_time = || GpuError::Lost("a timed launch returned no time".into());
    let once = prepared[0].run(device, queue, Some(timer))?.ok_or_else(no_time)?;
    let launches_for = |seconds: f64| (SAMPLE_SECONDS / seconds.max(1e-9)).ceil().clamp(1.0, 100.0);
    let mut launches = launches_for(once) as usize;
    // Warm-ups: the number asked for, each of `launches` back to back, and (unless none is
    // asked for) as many more as keep the GPU busy for WARM_UP_SECONDS of its own time and
    // WARM_UP_WALL_SECONDS of ours: after an idle spell its clock rises only after up to a
    // second under load.
    let mut busy = 0.0;
    let mut fastest_launch = once;
    let warm_up_start = Instant::now();
    for warmed in 0.. {
        let warm = busy >= WARM_UP_SECONDS
            && warm_up_start.elapsed().as_secs_f64() >= WARM_UP_WALL_SECONDS;
        let asked_for_done = warmed >= repeats.warmups && (repeats.warmups == 0 || warm);
        let over_budget = warmed >= 1 && busy >= SAMPLING_BUDGET_SECONDS;
        if asked_for_done || over_budget {
            break;
        }
        let run = turns.next().expect("cycling over a non-empty list");
        let time = run.run_repeated(device, queue, Some(timer), launches)?.ok_or_else(no_time)?;
        busy += time;
        fastest_launch = fastest_launch.min(time / launches as f64);
    }
    // The first launch can run at an idle clock, several times slower than a warm one; sized
    // from it, every sample would be a few launches too short to keep the clock up. The
    // samples are sized from the fastest warm launch instead.
    launches = launches_for(fastest_launch) as usize;
    let mut seconds = Vec::with_capacity(repeats.timed);
    let mut timed = 0.0;
    for run in turns.take(repeats.timed) {
        if seconds.len() >= FEWEST_SAMPLES && timed >= SAMPLING_BUDGET_SECONDS {
            break;
        }
        let time = run.run_repeated(device, queue, Some(timer), launches)?.ok_or_else(no_time)?;
        timed += time;
        seconds.push(time / launches as f64);
    }
    Timings::from_seconds(seconds).ok_or_else(|| {
        GpuError::Lost("the GPU timer returned a time that is not finite".into()).into()
    })
}
// ANCHOR_END: time_gpu

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_of_the_sorted_times() {
        let t = Timings::from_seconds(vec![3.0, 1.0, 2.0, 10.0, 0.5]).unwrap();
        assert_eq!((t.median(), t.fastest(), t.slowest(), t.runs()), (2.0, 0.5, 10.0, 5));
        assert_eq!(Timings::from_seconds(vec![4.0, 1.0]).unwrap().median(), 4.0);
    }

    #[test]
    fn no_times_or_bad_times_are_refused() {
        assert_eq!(Timings::from_seconds(vec![]), None);
        assert_eq!(Timings::from_seconds(vec![1.0, f64::NAN]), None);
        assert_eq!(Timings::from_seconds(vec![-1.0]), None);
    }

    #[test]
    fn inputs_are_taken_in_turn_after_the_warmups() {
        let mut seen = Vec::new();
        let t = time_cpu(&[1, 2], Repeats::new(3, 4), |&i| seen.push(i));
        assert_eq!(seen, [1, 2, 1, 2, 1, 2, 1]);
        assert_eq!(t.runs(), 4);
        assert_eq!(Repeats::new(0, 0).timed, 1);
    }
}
