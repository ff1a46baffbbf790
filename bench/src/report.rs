//! Reports: a table of typed cells printed as text and written as CSV from the same rows, and
//! the one folder every figure goes to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plot::Plot;

/// One cell of a table.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A label (a kernel's name, a size written as text).
    Text(String),
    /// A number shown with `decimals` places in the text table, written in full in the CSV.
    Number {
        /// The value.
        value: f64,
        /// Places after the point in the text table.
        decimals: usize,
    },
    /// No number, and why (`exceeds a device limit`): shown in the text table, an empty field
    /// in the CSV.
    Missing(String),
}

impl Cell {
    /// A whole number.
    pub fn int(value: usize) -> Self {
        Cell::Number { value: value as f64, decimals: 0 }
    }

    /// `value` with `decimals` places, or `Missing("-")` when it is not finite.
    pub fn number(value: f64, decimals: usize) -> Self {
        if value.is_finite() { Cell::Number { value, decimals } } else { Cell::Missing("-".into()) }
    }

    /// `Some(value)` with `decimals` places, or `Missing(why)`.
    pub fn or_missing(value: Option<f64>, decimals: usize, why: &str) -> Self {
        value.map_or_else(|| Cell::Missing(why.to_string()), |v| Cell::number(v, decimals))
    }

    fn text(&self) -> String {
        match self {
            Cell::Text(text) | Cell::Missing(text) => text.clone(),
            Cell::Number { value, decimals } => format!("{value:.decimals$}"),
        }
    }

    fn csv(&self) -> String {
        match self {
            // RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes
            // doubled.
            Cell::Text(text) if text.contains([',', '"', '\n']) => {
                format!("\"{}\"", text.replace('"', "\"\""))
            }
            Cell::Text(text) => text.clone(),
            Cell::Number { value, .. } => value.to_string(),
            Cell::Missing(_) => String::new(),
        }
    }
}

/// Numbers measured against one variable (N, a batch size): named columns, each with its places
/// in the text table, from which the table (text and CSV) and the plotted lines both come.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurements {
    x_name: String,
    columns: Vec<(String, usize)>,
    rows: Vec<(usize, Vec<f64>)>,
}

impl Measurements {
    /// No rows yet; `columns` are `(name, decimals)`.
    pub fn new(x_name: &str, columns: &[(&str, usize)]) -> Self {
        let columns = columns.iter().map(|&(name, places)| (name.to_string(), places)).collect();
        Self { x_name: x_name.to_string(), columns, rows: Vec::new() }
    }

    /// Adds the values measured at `x` (NaN where nothing was measured).
    ///
    /// # Panics
    /// If there is not one value per column (a bug in the benchmark, not in its input).
    pub fn push(&mut self, x: usize, values: &[f64]) {
        assert_eq!(values.len(), self.columns.len(), "values for {:?}", self.columns);
        self.rows.push((x, values.to_vec()));
    }

    /// The `(x, value)` points of one column.
    ///
    /// # Panics
    /// If there is no such column (a bug in the benchmark).
    pub fn column(&self, name: &str) -> Vec<(f64, f64)> {
        let i = self.columns.iter().position(|(c, _)| c == name);
        let i = i.unwrap_or_else(|| panic!("no column {name:?} in {:?}", self.columns));
        self.rows.iter().map(|(x, values)| (*x as f64, values[i])).collect()
    }

    /// The measurements as a table: `x` first, then every column.
    pub fn table(&self) -> Table {
        let names = self.columns.iter().map(|(name, _)| name.as_str());
        let mut table =
            Table::new(&std::iter::once(self.x_name.as_str()).chain(names).collect::<Vec<_>>());
        for (x, values) in &self.rows {
            let cells =
                values.iter().zip(&self.columns).map(|(&v, (_, places))| Cell::number(v, *places));
            table.push(std::iter::once(Cell::int(*x)).chain(cells).collect());
        }
        table
    }

    /// `plot` with a line for each column named, labelled by the legend at the same place.
    pub fn plot(&self, plot: Plot, legends: &[&str], columns: &[&str]) -> Plot {
        let lines = legends.iter().zip(columns);
        lines.fold(plot, |plot, (legend, column)| plot.line(legend, self.column(column)))
    }
}

/// A table: named columns and rows of cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Column names (the CSV header).
    pub columns: Vec<String>,
    /// Rows, each with one cell per column.
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[impl AsRef<str>]) -> Self {
        Self { columns: columns.iter().map(|c| c.as_ref().to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row.
    ///
    /// # Panics
    /// If the row does not have one cell per column (a bug in the benchmark, not in its input).
    pub fn push(&mut self, row: Vec<Cell>) {
        assert_eq!(row.len(), self.columns.len(), "a row of {:?}", self.columns);
        self.rows.push(row);
    }

    /// The table as aligned text: the first column left-aligned, the others right-aligned.
    pub fn to_text(&self) -> String {
        let cells: Vec<Vec<String>> =
            self.rows.iter().map(|row| row.iter().map(Cell::text).collect()).collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|c| {
                cells
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.columns[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |fields: &[String]| {
            let mut out = String::new();
            for (c, (field, width)) in fields.iter().zip(&widths).enumerate() {
                let _ = match c {
                    0 => write!(out, "{field:<width$}"),
                    _ => write!(out, "  {field:>width$}"),
                };
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.columns);
        for row in &cells {
            out += &line(row);
        }
        out
    }

    /// The table as CSV: the column names, then one line per row.
    pub fn to_csv(&self) -> String {
        let mut out = self.columns.join(",") + "\n";
        for row in &self.rows {
            out += &(row.iter().map(Cell::csv).collect::<Vec<_>>().join(",") + "\n");
        }
        out
    }
}

/// The comma-separated list after `flag` in a program's arguments (`--seqs 1024,4096`), or
/// `default` when the flag is absent; each item parsed as a `T`.
pub fn list_arg<T: std::str::FromStr>(
    args: &[String],
    flag: &str,
    default: Vec<T>,
) -> Result<Vec<T>, String> {
    let Some(i) = args.iter().position(|a| a == flag) else { return Ok(default) };
    let value = args.get(i + 1).ok_or(format!("{flag} needs a comma-separated list"))?;
    value.split(',').map(|x| x.parse().map_err(|_| format!("{flag}: cannot read {x:?}"))).collect()
}

/// The names after `flag` in `args` (an example's `--only`): a kernel's name can hold commas
/// (`v8 8x1x16 rows, 16 keys, ...`), so a list that holds a semicolon is split at semicolons,
/// any other at commas; empty names are dropped, so that `"NAME, WITH COMMAS;"` is one name
/// (an empty name would select every kernel). Empty when the flag is absent; no names (an
/// empty value, or only separators) is an error.
pub fn names_arg(args: &[String], flag: &str) -> Result<Vec<String>, String> {
    let Some(i) = args.iter().position(|a| a == flag) else { return Ok(Vec::new()) };
    let value = args.get(i + 1).ok_or(format!("{flag} needs a list of names"))?;
    let separator = if value.contains(';') { ';' } else { ',' };
    let names: Vec<String> =
        value.split(separator).filter(|n| !n.is_empty()).map(str::to_string).collect();
    if names.is_empty() {
        return Err(format!("{flag} {value:?}: expected one or more names"));
    }
    Ok(names)
}

/// The problems a tuning run times, `(Nq, Nkv, causal)`, masks outermost: every Nq of `seqs`
/// against every Nkv of `kv_lens`, or against itself when `kv_lens` is empty. With the mask
/// and Nq != Nkv the visible scores are not N^2 / 2, the FLOP count every other table uses,
/// so other lengths of keys are refused with the mask, and lengths of 0 always.
pub fn problem_columns(
    seqs: &[usize],
    kv_lens: &[usize],
    masks: &[bool],
) -> Result<Vec<(usize, usize, bool)>, String> {
    if seqs.contains(&0) || kv_lens.contains(&0) {
        return Err(format!(
            "--seqs {seqs:?}, --kv-lens {kv_lens:?}: expected lengths of 1 or more"
        ));
    }
    if !kv_lens.is_empty() && masks.contains(&true) {
        return Err("--kv-lens times unmasked problems only: add --causal no".into());
    }
    let kv_for = |n: usize| if kv_lens.is_empty() { vec![n] } else { kv_lens.to_vec() };
    Ok(masks
        .iter()
        .flat_map(|&c| {
            seqs.iter().flat_map(move |&n| kv_for(n).into_iter().map(move |kv| (n, kv, c)))
        })
        .collect())
}

/// The folder a benchmark writes its CSV and SVG files to: `--out DIR` when given, else the
/// book's `book/src/figures` in the workspace the program runs in.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// The folder.
    pub dir: PathBuf,
}

impl Figures {
    /// From the program's arguments (`--out DIR`), else the workspace's figures folder.
    pub fn from_args(args: &[String]) -> Result<Self, String> {
        if let Some(i) = args.iter().position(|a| a == "--out") {
            let dir = args.get(i + 1).ok_or("--out needs a folder")?;
            return Ok(Self { dir: PathBuf::from(dir) });
        }
        let cwd = std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?;
        let root = workspace_root(&cwd).ok_or_else(|| {
            format!(
                "{} is not inside the course's workspace: run from it, or pass --out DIR",
                cwd.display()
            )
        })?;
        Ok(Self { dir: root.join("book/src/figures") })
    }

    /// Where `file` lies in the folder (to read back what an earlier run wrote).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The folder as a reader should see it: relative to the workspace when it is inside the
    /// one the program runs in (`book/src/figures`), as given otherwise.
    pub fn display(&self) -> String {
        let cwd = std::env::current_dir().unwrap_or_default();
        let absolute = if self.dir.is_absolute() { self.dir.clone() } else { cwd.join(&self.dir) };
        let inside = workspace_root(&cwd).and_then(|root| {
            absolute.strip_prefix(root).ok().map(|relative| relative.display().to_string())
        });
        inside.unwrap_or_else(|| self.dir.display().to_string())
    }

    /// Writes `table` as `<stem>.csv`.
    pub fn write_csv(&self, stem: &str, table: &Table) -> Result<PathBuf, String> {
        let path = self.dir.join(format!("{stem}.csv"));
        write_file(&path, &table.to_csv())?;
        Ok(path)
    }

    /// Writes `plot` as `<stem>.svg`.
    pub fn write_svg(&self, stem: &str, plot: &Plot) -> Result<PathBuf, String> {
        let path = self.dir.join(format!("{stem}.svg"));
        write_file(&path, &plot.to_svg()?)?;
        Ok(path)
    }
}

/// `relative` inside the workspace the program runs in (found from the current folder, so a
/// copied or moved checkout uses its own files).
pub fn in_workspace(relative: &str) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no current folder: {e}"))?;
    let root = workspace_root(&cwd).ok_or_else(|| {
        format!("{} is not inside the course's workspace: run from there", cwd.display())
    })?;
    Ok(root.join(relative))
}

/// The nearest folder at or above `start` whose Cargo.toml declares a `[workspace]`.
pub fn workspace_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        manifest.lines().any(|l| l.trim() == "[workspace]").then(|| dir.to_path_buf())
    })
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Least-squares slope of `ln y` against `ln x`: the exponent `k` of `y ~ x^k` (2 for a time
/// that grows like `N^2`).
pub fn log_log_slope(points: &[(f64, f64)]) -> f64 {
    let logs: Vec<(f64, f64)> = points.iter().map(|(x, y)| (x.ln(), y.ln())).collect();
    let n = logs.len() as f64;
    let mean_x = logs.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = logs.iter().map(|p| p.1).sum::<f64>() / n;
    let covariance: f64 = logs.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let variance: f64 = logs.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    covariance / variance
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_split_at_semicolons_when_there_are_any_else_at_commas() {
        let args = |value: &str| vec!["--only".to_string(), value.to_string()];
        let exact = "v8 8x1x16 rows, 16 keys;v10 pairs";
        assert_eq!(
            names_arg(&args(exact), "--only"),
            Ok(vec!["v8 8x1x16 rows, 16 keys".to_string(), "v10 pairs".to_string()])
        );
        assert_eq!(names_arg(&args("v8,v9"), "--only"), Ok(vec!["v8".into(), "v9".into()]));
        assert_eq!(names_arg(&args("v8"), "--else"), Ok(Vec::new()));
        assert!(names_arg(&["--only".to_string()], "--only").unwrap_err().contains("needs"));
        let one = "v10 4 pairs, 32 keys;";
        assert_eq!(names_arg(&args(one), "--only"), Ok(vec!["v10 4 pairs, 32 keys".into()]));
        assert!(names_arg(&args(";"), "--only").unwrap_err().contains("one or more names"));
    }

    #[test]
    fn list_arguments_are_read_or_defaulted_and_bad_items_named() {
        let args: Vec<String> = ["--seqs", "1024,4096", "--only"].map(String::from).into();
        assert_eq!(list_arg(&args, "--seqs", vec![1usize]), Ok(vec![1024, 4096]));
        assert_eq!(list_arg(&args, "--dims", vec![64usize]), Ok(vec![64]));
        assert!(list_arg::<usize>(&args, "--only", vec![]).unwrap_err().contains("needs"));
        let bad: Vec<String> = ["--seqs", "1024,x"].map(String::from).into();
        assert!(list_arg::<usize>(&bad, "--seqs", vec![]).unwrap_err().contains("\"x\""));
    }

    #[test]
    fn problem_columns_pair_every_length_of_queries_with_every_length_of_keys() {
        let square = problem_columns(&[4096, 16384], &[], &[false, true]);
        let expected = vec![
            (4096, 4096, false),
            (16384, 16384, false),
            (4096, 4096, true),
            (16384, 16384, true),
        ];
        assert_eq!(square, Ok(expected));
        let other = problem_columns(&[4096], &[1024, 16384], &[false]);
        assert_eq!(other, Ok(vec![(4096, 1024, false), (4096, 16384, false)]));
        let masked = problem_columns(&[4096], &[1024], &[false, true]).unwrap_err();
        assert!(masked.contains("--causal no"), "{masked}");
        let empty = problem_columns(&[4096], &[0], &[false]).unwrap_err();
        assert!(empty.contains("1 or more"), "{empty}");
        assert!(problem_columns(&[0], &[], &[false]).is_err());
    }

    use crate::plot::Scale;

    fn table() -> Table {
        let mut t = Table::new(&["kernel", "N", "ms"]);
        t.push(vec![Cell::Text("naive".into()), Cell::int(1024), Cell::number(1.23456, 2)]);
        t.push(vec![
            Cell::Text("flash, v2".into()),
            Cell::int(16384),
            Cell::Missing("too big".into()),
        ]);
        t
    }

    #[test]
    fn text_and_csv_come_from_the_same_cells() {
        assert_eq!(
            table().to_text(),
            "kernel         N       ms\nnaive       1024     1.23\nflash, v2  16384  too big\n"
        );
        assert_eq!(table().to_csv(), "kernel,N,ms\nnaive,1024,1.23456\n\"flash, v2\",16384,\n");
    }

    #[test]
    #[should_panic(expected = "a row of")]
    fn a_row_of_the_wrong_width_is_a_bug() {
        table().push(vec![Cell::int(1)]);
    }

    #[test]
    fn not_finite_numbers_are_missing() {
        assert_eq!(Cell::number(f64::NAN, 1), Cell::Missing("-".into()));
        assert_eq!(Cell::or_missing(None, 1, "refused"), Cell::Missing("refused".into()));
    }

    #[test]
    fn the_workspace_is_found_from_any_folder_inside_it() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = workspace_root(&here.join("src")).unwrap();
        assert_eq!(root, here.parent().unwrap());
        assert_eq!(workspace_root(Path::new("/")), None);
        let figures = Figures::from_args(&["--out".into(), "x".into()]).unwrap();
        assert_eq!(figures.dir, PathBuf::from("x"));
        assert_eq!(Figures::from_args(&[]).unwrap().display(), "book/src/figures");
        let outside = Figures { dir: PathBuf::from("/tmp/figures") };
        assert_eq!(outside.display(), "/tmp/figures");
        assert!(Figures::from_args(&["--out".into()]).is_err());
    }

    #[test]
    fn measurements_give_the_table_and_the_lines_from_the_same_numbers() {
        let mut m = Measurements::new("n", &[("naive_s", 2), ("flash_s", 1)]);
        m.push(256, &[0.5, 0.25]);
        m.push(512, &[f64::NAN, 1.0]);
        assert_eq!(
            m.table().to_text(),
            "n    naive_s  flash_s\n256     0.50      0.2\n512        -      1.0\n"
        );
        assert_eq!(m.column("flash_s"), [(256.0, 0.25), (512.0, 1.0)]);
        let plot =
            m.plot(Plot::new("t", "x", "y", Scale::Log2, Scale::Log10), &["naive"], &["naive_s"]);
        assert!(plot.to_svg().unwrap().contains("naive"));
    }

    #[test]
    #[should_panic(expected = "values for")]
    fn measurements_of_the_wrong_width_are_a_bug() {
        Measurements::new("n", &[("a", 1)]).push(1, &[1.0, 2.0]);
    }

    #[test]
    fn slopes_of_powers_are_their_exponents() {
        let square: Vec<(f64, f64)> =
            [1.0, 2.0, 4.0, 8.0].iter().map(|&n| (n, 3.0 * n * n)).collect();
        assert!((log_log_slope(&square) - 2.0).abs() < 1e-12);
    }
}
