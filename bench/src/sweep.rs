//! A sweep: attention kernels and peer backends timed over sequence lengths, with and without
//! the causal mask, and the tables, CSV and plot made from those measurements (never from
//! each other's text).

use reference::{AttentionError, ProblemSpec};

use crate::peer::{PeerProblem, PeerReport};
use crate::plot::{Plot, Scale};
use crate::report::{Cell, Table};
use crate::timing::Repeats;

/// B, H and D of every problem, the sequence lengths (`Nq = Nkv = N`), and the runs per
/// measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizes {
    /// `B`
    pub batch: usize,
    /// `H`
    pub heads: usize,
    /// `D`
    pub head_dim: usize,
    /// Every `N`.
    pub seqs: Vec<usize>,
    /// Warm-ups and timed runs.
    pub repeats: Repeats,
}

impl Sizes {
    /// The problem of length `n`.
    pub fn spec(&self, n: usize, causal: bool) -> ProblemSpec {
        ProblemSpec::new(self.batch, self.heads, n, n, self.head_dim).causal(causal)
    }

    /// `4 B H N^2 D` (two matrix products of `2 N^2 D` per head), half of it with the mask.
    pub fn flops(&self, n: usize, causal: bool) -> f64 {
        let full = 4.0 * (self.batch * self.heads * n * n * self.head_dim) as f64;
        if causal { full / 2.0 } else { full }
    }

    /// The same problems, as a peer script takes them.
    pub fn peer_problems(&self) -> Vec<PeerProblem> {
        let problem = |seq: usize, causal: bool| PeerProblem {
            batch: self.batch,
            heads: self.heads,
            seq,
            head_dim: self.head_dim,
            causal,
        };
        [false, true].iter().flat_map(|&c| self.seqs.iter().map(move |&n| problem(n, c))).collect()
    }
}

/// Why a measurement has no time.
#[derive(Clone, Debug, PartialEq)]
pub enum Missing {
    /// The kernel refused the problem: it exceeds a limit of the device (memory, a binding's
    /// size). Expected for the naive kernels at large N.
    Refused,
    /// It failed: an error, a wrong output, a peer that could not run it.
    Failed(String),
}

impl From<AttentionError> for Missing {
    fn from(e: AttentionError) -> Self {
        #[cfg(feature = "gpu")]
        if gpu::GpuError::of(&e).is_some_and(gpu::GpuError::is_refusal) {
            return Missing::Refused;
        }
        Missing::Failed(e.to_string())
    }
}

/// One kernel or peer backend on one problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// The kernel's or backend's name.
    pub name: String,
    /// `N`
    pub n: usize,
    /// The causal mask.
    pub causal: bool,
    /// Median seconds and MiB of device memory (`NaN` where unknown), or why there are none.
    pub result: Result<(f64, f64), Missing>,
}

/// Every measurement of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    /// The problems.
    pub sizes: Sizes,
    /// The measurements, in the order they were taken.
    pub measured: Vec<Measured>,
}

impl Sweep {
    /// A sweep over `sizes` with nothing measured yet.
    pub fn new(sizes: Sizes) -> Self {
        Self { sizes, measured: Vec::new() }
    }

    /// Times every kernel (with its card: name and tolerance) at every size, without and with the mask, each
    /// output's first and last rows checked against the oracle first; a failure is printed as
    /// it happens. At each size the kernels take turns, as they did in the runs this was
    /// written from: a kernel timed right after the GPU sat idle (a previous kernel refusing a
    /// size) otherwise meets a GPU still lowering its clocks. The two input sets of a size are
    /// made and uploaded once for all the kernels that read them in the same format.
    #[cfg(feature = "gpu")]
    pub fn time_kernels(
        &mut self,
        gpu: &gpu::Gpu,
        timer: &gpu::GpuTimer,
        kernels: &[(reference::About, &dyn gpu::attention::AttentionKernel)],
    ) {
        use reference::Problem;
        for causal in [false, true] {
            for n in self.sizes.seqs.clone() {
                let problems =
                    [1, 2].map(|seed| Problem::random(&self.sizes.spec(n, causal), seed));
                let mut uploads = Vec::new();
                for &(about, kernel) in kernels {
                    let name = about.name;
                    let result = self.time_once(
                        gpu,
                        timer,
                        kernel,
                        about.tolerance,
                        &problems,
                        &mut uploads,
                    );
                    if let Err(Missing::Failed(why)) = &result {
                        eprintln!("{name}, N={n}, causal={causal}: {why}");
                    }
                    self.measured.push(Measured { name: name.to_string(), n, causal, result });
                }
            }
        }
    }

    /// Median GPU seconds and MiB of GPU buffers of `kernel` on `problems`, reusing an upload
    /// of them in `uploads` that the kernel can read, or adding one.
    #[cfg(feature = "gpu")]
    fn time_once(
        &self,
        gpu: &gpu::Gpu,
        timer: &gpu::GpuTimer,
        kernel: &dyn gpu::attention::AttentionKernel,
        tolerance: reference::Tolerance,
        problems: &[reference::Problem; 2],
        uploads: &mut Vec<[gpu::attention::AttentionBuffers; 2]>,
    ) -> Result<(f64, f64), Missing> {
        use gpu::attention::{AttentionBuffers, Prepared};
        let (device, queue) = (&gpu.device, &gpu.queue);
        let reuse = |io: &[AttentionBuffers; 2]| -> Option<Vec<Prepared>> {
            io.iter().map(|io| Prepared::reusing(device, kernel, io).ok()).collect()
        };
        let prepared = match uploads.iter().find_map(reuse) {
            Some(prepared) => prepared,
            None => {
                let upload = |p: &reference::Problem| {
                    AttentionBuffers::upload(device, kernel, &p.q, &p.k, &p.v, &p.options)
                };
                let io = [upload(&problems[0])?, upload(&problems[1])?];
                let prepared = io
                    .iter()
                    .map(|io| Prepared::reusing(device, kernel, io))
                    .collect::<Result<Vec<_>, _>>()?;
                uploads.push(io);
                prepared
            }
        };
        prepared[0].io.poison_output(queue);
        prepared[0].run(device, queue, None)?;
        let out = prepared[0].read_output(device, queue)?;
        crate::validate_rows(&out, &problems[0], tolerance).map_err(Missing::Failed)?;
        let timings = crate::timing::time_gpu(gpu, timer, &prepared, self.sizes.repeats)?;
        let bytes = prepared[0].io.bytes() + kernel.scratch_bytes(&prepared[0].io.shape);
        Ok((timings.median(), bytes as f64 / f64::from(1 << 20)))
    }

    /// Adds every backend of a peer's report, named `PyTorch <backend>`.
    pub fn add_peer(&mut self, report: &PeerReport) {
        for backend in report.backends() {
            for p in self.sizes.peer_problems() {
                let result = report.seconds(&p, backend).map(|t| (t, f64::NAN));
                let result = result.ok_or_else(|| Missing::Failed("did not run".into()));
                let name = format!("PyTorch {backend}");
                self.measured.push(Measured { name, n: p.seq, causal: p.causal, result });
            }
        }
    }

    /// Kernel and backend names in the order they were first measured.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for m in &self.measured {
            if !names.contains(&m.name) {
                names.push(m.name.clone());
            }
        }
        names
    }

    fn tflops(&self, m: &Measured) -> Option<f64> {
        let (seconds, _) = m.result.as_ref().ok()?;
        Some(self.sizes.flops(m.n, m.causal) / seconds / 1e12)
    }

    /// TFLOP/s of every kernel and backend (columns) at every N (rows).
    pub fn tflops_table(&self, causal: bool) -> Table {
        let names = self.names();
        let mut table = Table::new(&[&["N".to_string()][..], &names].concat());
        for &n in &self.sizes.seqs {
            let mut row = vec![Cell::int(n)];
            for name in &names {
                let m = self
                    .measured
                    .iter()
                    .find(|m| m.name == *name && m.n == n && m.causal == causal);
                row.push(match m {
                    Some(m @ Measured { result: Ok(_), .. }) => {
                        // Three significant digits or more: lavapipe's rates are below 0.01.
                        let tflops = self.tflops(m).unwrap_or(f64::NAN);
                        Cell::number(tflops, if tflops >= 1.0 { 2 } else { 4 })
                    }
                    Some(Measured { result: Err(Missing::Refused), .. }) => {
                        Cell::Missing("exceeds a device limit".into())
                    }
                    _ => Cell::Missing("failed".into()),
                });
            }
            table.push(row);
        }
        table
    }

    /// The median seconds of `name` at `n` with or without the mask, if it ran there.
    pub fn seconds(&self, name: &str, n: usize, causal: bool) -> Option<f64> {
        let m = self.measured.iter().find(|m| m.name == name && m.n == n && m.causal == causal);
        m.and_then(|m| m.result.as_ref().ok()).map(|(s, _)| *s)
    }

    /// How many times faster `kernel` is than every other kernel and backend (their seconds
    /// over its seconds; above 1: `kernel` is faster), at every N (rows).
    pub fn speedup_table(&self, kernel: &str, causal: bool) -> Table {
        let others: Vec<String> = self.names().into_iter().filter(|n| n != kernel).collect();
        let columns: Vec<String> = others.iter().map(|n| format!("vs {n}")).collect();
        let mut table = Table::new(&[&["N".to_string()][..], &columns].concat());
        let seconds = |name: &str, n: usize| self.seconds(name, n, causal);
        for &n in &self.sizes.seqs {
            let ours = seconds(kernel, n);
            let ratio = |other: &String| Some(seconds(other, n)? / ours?);
            let cells = others.iter().map(|other| Cell::or_missing(ratio(other), 2, "-"));
            table.push([Cell::int(n)].into_iter().chain(cells).collect());
        }
        table
    }

    /// One row per measurement: `n, causal, kernel, seconds, tflops, device_mib`.
    pub fn csv(&self) -> Table {
        let mut table = Table::new(&["n", "causal", "kernel", "seconds", "tflops", "device_mib"]);
        for m in &self.measured {
            let (seconds, mib) = m.result.as_ref().map_or((f64::NAN, f64::NAN), |r| *r);
            let labels =
                [Cell::int(m.n), Cell::Text(m.causal.to_string()), Cell::Text(m.name.clone())];
            let tflops = self.tflops(m).unwrap_or(f64::NAN);
            let numbers = [Cell::number(seconds, 6), Cell::number(tflops, 3), Cell::number(mib, 1)];
            table.push(labels.into_iter().chain(numbers).collect());
        }
        table
    }

    /// TFLOP/s against N without the mask, one line per kernel and backend.
    pub fn tflops_plot(&self, title: &str) -> Plot {
        let plot = Plot::new(title, "sequence length N", "TFLOP/s", Scale::Log2, Scale::Log10);
        self.names().iter().fold(plot, |plot, name| {
            let not_causal = self.measured.iter().filter(|m| m.name == *name && !m.causal);
            plot.line(name, not_causal.filter_map(|m| Some((m.n as f64, self.tflops(m)?))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::parse;

    fn sweep() -> Sweep {
        let sizes = Sizes {
            batch: 1,
            heads: 2,
            head_dim: 4,
            seqs: vec![8, 16],
            repeats: Repeats::new(0, 1),
        };
        let mut sweep = Sweep::new(sizes);
        let at = |n, causal, result| Measured { name: "k".into(), n, causal, result };
        sweep.measured.push(at(8, false, Ok((1e-12, 1.0))));
        sweep.measured.push(at(16, false, Err(Missing::Refused)));
        sweep.measured.push(at(8, true, Err(Missing::Failed("wrong".into()))));
        let peer = "# torch\nbatch,heads,seq,head_dim,causal,backend,seconds\n1,2,8,4,0,flash,2e-12\n1,2,16,4,0,flash,nan\n";
        sweep.add_peer(&parse(peer).unwrap());
        sweep
    }

    #[test]
    fn the_table_says_why_a_size_has_no_number() {
        let text = sweep().tflops_table(false).to_text();
        // 4 B H N^2 D = 2048 FLOP at N = 8, in 1e-12 s and 2e-12 s.
        let expected = "N                        k  PyTorch flash\n\
                        8                  2048.00        1024.00\n\
                        16  exceeds a device limit         failed\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn speedups_are_the_others_seconds_over_ours() {
        let text = sweep().speedup_table("k", false).to_text();
        assert_eq!(text, "N   vs PyTorch flash\n8               2.00\n16                 -\n");
    }

    #[test]
    fn csv_has_one_row_per_measurement_and_the_plot_skips_gaps() {
        let s = sweep();
        assert_eq!(s.csv().rows.len(), s.measured.len());
        let plot = s.tflops_plot("t");
        let lines: Vec<(&str, usize)> =
            plot.series.iter().map(|l| (l.name.as_str(), l.points.len())).collect();
        assert_eq!(lines, [("k", 1), ("PyTorch flash", 1)]);
    }

    #[cfg(feature = "gpu")]
    #[test]
    fn refusals_are_told_apart_from_errors_by_type() {
        use gpu::GpuError;
        let limit =
            GpuError::ExceedsDeviceLimit { what: "S".into(), needed: 2, limit: 1, limit_name: "x" };
        assert_eq!(Missing::from(AttentionError::from(limit)), Missing::Refused);
        let lost = AttentionError::from(GpuError::Lost("lost".into()));
        assert!(matches!(Missing::from(lost), Missing::Failed(_)));
        assert!(matches!(Missing::from(AttentionError::InvalidScale(0.0)), Missing::Failed(_)));
    }
}
