//! Peers: PyTorch's `scaled_dot_product_attention`, timed by a script in the same run as the
//! course's kernels, so that a ratio compares two numbers measured on one machine in one
//! state.
//!
//! A peer script takes problems as `batch,heads,seq,head_dim,causal` arguments and prints a
//! first line `# <version and device>`, then CSV with the header
//! `batch,heads,seq,head_dim,causal,backend,seconds`. Its output is parsed once, here, into
//! typed [`PeerRow`]s, by column name.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;

/// One problem, as the peer scripts take it (`Nq = Nkv = seq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerProblem {
    /// `B`
    pub batch: usize,
    /// `H`
    pub heads: usize,
    /// `N`
    pub seq: usize,
    /// `D`
    pub head_dim: usize,
    /// The causal mask.
    pub causal: bool,
}

impl PeerProblem {
    /// The script argument: `batch,heads,seq,head_dim,causal`.
    fn argument(&self) -> String {
        let PeerProblem { batch, heads, seq, head_dim, causal } = *self;
        format!("{batch},{heads},{seq},{head_dim},{}", u8::from(causal))
    }
}

/// One line of a peer's output: a problem, a backend and its median time.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerRow {
    /// The problem.
    pub problem: PeerProblem,
    /// The backend, as the script names it (`flash_fp16`, `cpu_fp32`, ...).
    pub backend: String,
    /// Median seconds; `None` where the backend could not run the problem (out of memory,
    /// unsupported).
    pub seconds: Option<f64>,
}

/// What a peer script printed.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerReport {
    /// Its first line: the library version and the device.
    pub version: String,
    /// Every measurement.
    pub rows: Vec<PeerRow>,
}

impl PeerReport {
    /// The median seconds of `backend` on `problem`, where it ran.
    pub fn seconds(&self, problem: &PeerProblem, backend: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.problem == *problem && r.backend == backend)?.seconds
    }

    /// The backends in the order they first appear.
    pub fn backends(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for row in &self.rows {
            if !names.contains(&row.backend.as_str()) {
                names.push(&row.backend);
            }
        }
        names
    }
}

/// Why a peer gave no numbers.
#[derive(Clone, Debug, PartialEq)]
pub enum PeerError {
    /// The Python interpreter could not be started.
    NoPython {
        /// The interpreter tried.
        python: String,
        /// The system's reason.
        reason: String,
    },
    /// The script ran and failed (exit status 3: torch, or CUDA, is missing).
    Failed {
        /// Its exit status, if it exited.
        status: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The script's output is not what peer scripts print.
    Malformed {
        /// The offending line (1-based).
        line: usize,
        /// What was wrong with it.
        why: String,
    },
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::NoPython { python, reason } => write!(
                f,
                "could not start `{python}` ({reason}); set PYTHON to a Python that can import torch"
            ),
            PeerError::Failed { status, stderr } => {
                let status = status.map_or("a signal".to_string(), |s| format!("status {s}"));
                write!(f, "the peer script stopped with {status}: {}", stderr.trim())
            }
            PeerError::Malformed { line, why } => write!(f, "peer output, line {line}: {why}"),
        }
    }
}

impl std::error::Error for PeerError {}

/// A peer script and the Python that runs it.
#[derive(Clone, Debug)]
pub struct Peer {
    python: String,
    script: PathBuf,
    options: Vec<String>,
}

impl Peer {
    /// `script` run by `$PYTHON`, or `python3` when it is not set.
    pub fn new(script: impl Into<PathBuf>) -> Self {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
        Self { python, script: script.into(), options: Vec::new() }
    }

    /// Passes `--name value` to the script.
    pub fn option(mut self, name: &str, value: impl ToString) -> Self {
        self.options.push(format!("--{name}"));
        self.options.push(value.to_string());
        self
    }

    /// The peer's version line, from a run on one small problem: whether the peer can run at
    /// all, asked once before a benchmark starts.
    pub fn version(&self) -> Result<String, PeerError> {
        let tiny = PeerProblem { batch: 1, heads: 1, seq: 16, head_dim: 16, causal: false };
        Ok(self.run(&[tiny])?.version)
    }

    /// The peer, if it runs (see [`Peer::version`]), after printing its version and `note`;
    /// otherwise `None`, after printing why not: a benchmark goes on without its peer.
    pub fn if_it_runs(self, note: &str) -> Option<Self> {
        match self.version() {
            Ok(version) => {
                println!("PyTorch peer: {version}{note}");
                Some(self)
            }
            Err(e) => {
                println!("PyTorch peer not run: {e}");
                None
            }
        }
    }

    /// Runs the script on `problems` and parses what it printed.
    pub fn run(&self, problems: &[PeerProblem]) -> Result<PeerReport, PeerError> {
        let output = Command::new(&self.python)
            .arg(&self.script)
            .args(&self.options)
            .args(problems.iter().map(PeerProblem::argument))
            .output()
            .map_err(|e| PeerError::NoPython {
                python: self.python.clone(),
                reason: e.to_string(),
            })?;
        if !output.status.success() {
            return Err(PeerError::Failed {
                status: output.status.code(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        parse(&String::from_utf8_lossy(&output.stdout))
    }
}

/// The columns a peer prints, in any order.
const COLUMNS: [&str; 7] = ["batch", "heads", "seq", "head_dim", "causal", "backend", "seconds"];

/// Parses a peer script's output (see the module's documentation).
pub fn parse(text: &str) -> Result<PeerReport, PeerError> {
    let malformed = |line: usize, why: String| PeerError::Malformed { line, why };
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    let version = match lines.next() {
        Some((_, first)) if first.starts_with('#') => {
            first.trim_start_matches('#').trim().to_string()
        }
        _ => return Err(malformed(1, "expected `# <version>` first".into())),
    };
    let (header_line, header) = lines.next().ok_or_else(|| malformed(2, "no header".into()))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let column = |name: &str| {
        names.iter().position(|n| *n == name).ok_or_else(|| {
            malformed(header_line, format!("no column `{name}` in the header `{header}`"))
        })
    };
    // Every column must be there; after this, a field is found by its name.
    for name in COLUMNS {
        column(name)?;
    }
    let mut rows = Vec::new();
    for (number, line) in lines.filter(|(_, l)| !l.is_empty() && !l.starts_with('#')) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != names.len() {
            let why = format!("{} fields, expected {}: `{line}`", fields.len(), names.len());
            return Err(malformed(number, why));
        }
        let field = |name: &str| column(name).map(|i| fields[i]);
        let size = |name: &str| {
            let text = field(name)?;
            text.parse::<usize>()
                .map_err(|_| malformed(number, format!("`{text}` is not a whole number ({name})")))
        };
        let causal = match field("causal")? {
            "0" => false,
            "1" => true,
            other => {
                return Err(malformed(number, format!("causal is `{other}`, expected 0 or 1")));
            }
        };
        let text = field("seconds")?;
        let seconds: f64 = text
            .parse()
            .map_err(|_| malformed(number, format!("`{text}` is not a number of seconds")))?;
        rows.push(PeerRow {
            problem: PeerProblem {
                batch: size("batch")?,
                heads: size("heads")?,
                seq: size("seq")?,
                head_dim: size("head_dim")?,
                causal,
            },
            backend: field("backend")?.to_string(),
            seconds: (seconds.is_finite() && seconds > 0.0).then_some(seconds),
        });
    }
    Ok(PeerReport { version, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "# torch 2.9.0, NVIDIA H200\n\
        batch,heads,seq,head_dim,causal,backend,seconds\n\
        4,16,1024,64,0,math_fp32,0.0021\n\
        4,16,1024,64,0,flash_fp16,nan\n\
        4,16,1024,64,1,flash_fp16,0.0001\n";

    fn problem(causal: bool) -> PeerProblem {
        PeerProblem { batch: 4, heads: 16, seq: 1024, head_dim: 64, causal }
    }

    #[test]
    fn rows_are_read_by_column_name() {
        let report = parse(OUTPUT).unwrap();
        assert_eq!(report.version, "torch 2.9.0, NVIDIA H200");
        assert_eq!(report.seconds(&problem(false), "math_fp32"), Some(0.0021));
        assert_eq!(report.seconds(&problem(false), "flash_fp16"), None, "nan: did not run");
        assert_eq!(report.seconds(&problem(true), "flash_fp16"), Some(0.0001));
        assert_eq!(report.backends(), ["math_fp32", "flash_fp16"]);
        // The same numbers with the columns in another order.
        let shuffled =
            "# v\nseconds,backend,causal,head_dim,seq,heads,batch\n0.5,cpu_fp32,1,64,1024,16,4\n";
        assert_eq!(parse(shuffled).unwrap().seconds(&problem(true), "cpu_fp32"), Some(0.5));
    }

    #[test]
    fn malformed_output_names_its_line() {
        let cases = [
            ("batch,heads\n", 1, "expected `# <version>`"),
            ("# v\nbatch,heads,seq,head_dim,causal,backend\n", 2, "no column `seconds`"),
            (
                "# v\nbatch,heads,seq,head_dim,causal,backend,seconds\n4,16,x,64,0,a,1\n",
                3,
                "`x` is not a whole number (seq)",
            ),
            (
                "# v\nbatch,heads,seq,head_dim,causal,backend,seconds\n4,16,8,64,2,a,1\n",
                3,
                "causal is `2`",
            ),
            (
                "# v\nbatch,heads,seq,head_dim,causal,backend,seconds\n4,16,8,64,0,a\n",
                3,
                "6 fields, expected 7",
            ),
        ];
        for (text, line, message) in cases {
            match parse(text) {
                Err(PeerError::Malformed { line: l, why }) => {
                    assert_eq!(l, line, "{text:?}");
                    assert!(why.contains(message), "{why}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_missing_interpreter_is_an_error_not_a_panic() {
        let peer =
            Peer { python: "/no/such/python".into(), script: "x.py".into(), options: vec![] };
        let err = peer.run(&[problem(false)]).unwrap_err();
        assert!(matches!(err, PeerError::NoPython { .. }), "{err:?}");
        assert!(err.to_string().contains("set PYTHON"), "{err}");
    }

    #[test]
    fn problems_become_script_arguments() {
        assert_eq!(problem(true).argument(), "4,16,1024,64,1");
    }
}
