//! The machine a number was measured on, and when: every published number names both.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The CPU, its threads and the date.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// The CPU's model name, where the system says it (Linux's /proc/cpuinfo).
    pub cpu: String,
    /// Threads available to this process.
    pub threads: usize,
    /// Today, `YYYY-MM-DD` in UTC.
    pub date: String,
}

impl Machine {
    /// This machine, now.
    pub fn this() -> Self {
        Self {
            cpu: cpu_name().unwrap_or_else(|| "an unknown CPU".to_string()),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            date: today(),
        }
    }

    /// `Intel Xeon ..., 2 threads, 2026-11-22`.
    pub fn describe(&self) -> String {
        format!("{}, {} threads, {}", self.cpu, self.threads, self.date)
    }
}

/// The CPU's model name, where the system says it (Linux).
pub fn cpu_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// Today's date in UTC, `YYYY-MM-DD`, from the system clock.
pub fn today() -> String {
    let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((seconds / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // March = 0
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The measured peak of fused multiply-adds on this CPU, in GFLOP/s, and the instructions
/// used: every thread runs independent FMAs on the widest vectors the CPU has, the best of
/// seven short runs (a peak is the fastest the machine can go; on a shared machine some runs
/// are slowed by other work). `NaN` where it is not measured (no AVX2+FMA, or not x86-64).
pub fn fma_peak(threads: usize) -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        let iters = 5_000_000;
        let (lanes, kind): (usize, &str) = if std::arch::is_x86_feature_detected!("avx512f") {
            (16, "AVX-512")
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            (8, "AVX2+FMA")
        } else {
            return (f64::NAN, "no FMA");
        };
        let seconds = (0..7)
            .map(|_| {
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(move || {
                            // SAFETY: the feature was detected above.
                            std::hint::black_box(unsafe {
                                if lanes == 16 { fma_avx512(iters) } else { fma_avx2(iters) }
                            })
                        });
                    }
                });
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        (threads as f64 * iters as f64 * (ACCUMULATORS * lanes * 2) as f64 / seconds / 1e9, kind)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (threads, Instant::now());
        (f64::NAN, "not measured on this architecture")
    }
}

/// Independent accumulators, enough to hide the latency of the FMA units.
const ACCUMULATORS: usize = 12;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
fn fma_avx512(iters: usize) -> f32 {
    fma_body::<16>(iters)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_avx2(iters: usize) -> f32 {
    fma_body::<8>(iters)
}

#[inline(always)]
fn fma_body<const LANES: usize>(iters: usize) -> f32 {
    // ACCUMULATORS vectors on the stack, walked as one flat, contiguous array, so that each
    // vector is one register.
    let mut acc = [[1.0f32; LANES]; ACCUMULATORS];
    let (a, b) = (std::hint::black_box(0.999_999f32), std::hint::black_box(1e-7f32));
    for _ in 0..iters {
        for x in acc.as_flattened_mut() {
            *x = x.mul_add(a, b);
        }
    }
    acc.as_flattened().iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_since_1970_become_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(59), (1970, 3, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_414), (2025, 11, 22));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn today_is_a_date() {
        let date = today();
        assert_eq!(date.len(), 10, "{date}");
        assert_eq!((&date[4..5], &date[7..8]), ("-", "-"), "{date}");
    }
}
