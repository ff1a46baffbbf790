//! Figures for the book: a small SVG line plot (linear or log axes) and CSV files, so every
//! benchmark writes its numbers and its picture from the same data.

use std::fmt::Write as _;
use std::path::Path;

/// One line of a plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

/// A line plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Plot {
    /// Title above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

impl Plot {
    /// The plot as a standalone SVG document. Errors if there is nothing to draw or if a log
    /// axis is given a value that is not positive.
    pub fn to_svg(&self) -> Result<String, String> {
        let points: Vec<(f64, f64)> =
            self.series.iter().flat_map(|s| s.points.iter().copied()).collect();
        if points.is_empty() {
            return Err(format!("plot `{}` has no points", self.title));
        }
        for &(x, y) in &points {
            let bad = !x.is_finite()
                || !y.is_finite()
                || (self.log_x && x <= 0.0)
                || (self.log_y && y <= 0.0);
            if bad {
                return Err(format!(
                    "plot `{}`: point ({x}, {y}) cannot be drawn on these axes",
                    self.title
                ));
            }
        }
        let x_axis = Axis::new(points.iter().map(|p| p.0), self.log_x, LEFT, WIDTH - RIGHT);
        let y_axis = Axis::new(points.iter().map(|p| p.1), self.log_y, HEIGHT - BOTTOM, TOP);

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
            (LEFT + WIDTH - RIGHT) / 2.0,
            escape(&self.title)
        );
        // Frame, ticks and grid.
        let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
        let _ = writeln!(
            svg,
            r#"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            x1 - x0,
            y0 - y1
        );
        for (value, label) in x_axis.ticks() {
            let x = x_axis.map(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{y1}" x2="{x:.1}" y2="{y0}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{label}</text>"##,
                y0 + 18.0
            );
        }
        for (value, label) in y_axis.ticks() {
            let y = y_axis.map(value);
            let _ = writeln!(
                svg,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
                x0 - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            (x0 + x1) / 2.0,
            HEIGHT - 15.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (y0 + y1) / 2.0,
            escape(&self.y_label)
        );
        // Lines, markers and the legend.
        for (i, series) in self.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let coords: Vec<String> = series
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", x_axis.map(x), y_axis.map(y)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                coords.join(" ")
            );
            for c in &coords {
                let (cx, cy) = c.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(svg, r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{color}"/>"#);
            }
            let ly = TOP + 10.0 + 20.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<line x1="{}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                x1 + 12.0,
                x1 + 36.0,
                x1 + 42.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>\n");
        Ok(svg)
    }

    /// Writes the SVG to `path`, creating its folder.
    pub fn write_svg(&self, path: &Path) -> Result<(), String> {
        let svg = self.to_svg()?;
        write_file(path, &svg)
    }
}

/// Writes `rows` under `header` as CSV to `path`, creating its folder.
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), String> {
    let mut text = header.join(",") + "\n";
    for row in rows {
        text += &(row.join(",") + "\n");
    }
    write_file(path, &text)
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Maps data values to pixels along one axis.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, from: f64, to: f64) -> Self {
        let (mut lo, mut hi) =
            values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if log {
            (lo, hi) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil()));
        }
        if lo == hi {
            (lo, hi) = if log { (lo / 10.0, hi * 10.0) } else { (lo - 1.0, hi + 1.0) };
        }
        if !log && lo > 0.0 {
            lo = 0.0; // linear axes start at zero, so heights compare honestly
        }
        Self { lo, hi, log, from, to }
    }

    fn unit(&self, v: f64) -> f64 {
        if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn map(&self, v: f64) -> f64 {
        self.from + (self.to - self.from) * self.unit(v)
    }

    /// Powers of ten on a log axis, five even steps on a linear one.
    fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let (a, b) = (self.lo.log10().round() as i32, self.hi.log10().round() as i32);
            (a..=b).map(|e| (10f64.powi(e), format!("1e{e}"))).collect()
        } else {
            (0..=5)
                .map(|i| self.lo + (self.hi - self.lo) * f64::from(i) / 5.0)
                .map(|v| {
                    (v, format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_string())
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(log: bool, points: Vec<(f64, f64)>) -> Plot {
        Plot {
            title: "t <1>".into(),
            x_label: "N".into(),
            y_label: "bytes".into(),
            log_x: log,
            log_y: log,
            series: vec![
                Series { name: "a".into(), points },
                Series { name: "b".into(), points: vec![(1.0, 5.0)] },
            ],
        }
    }

    #[test]
    fn draws_one_polyline_per_series_inside_the_frame() {
        let svg = plot(true, vec![(10.0, 100.0), (1000.0, 1e6)]).to_svg().unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;1&gt;"), "titles are escaped");
        // On log axes 1e1..1e3 and 1e0..1e6 the first point sits a third of the way across.
        let x = LEFT + (WIDTH - RIGHT - LEFT) / 3.0;
        assert!(svg.contains(&format!("points=\"{x:.1},")), "{svg}");
        assert!(svg.contains(">1e6<") && svg.contains(">1e0<"));
    }

    #[test]
    fn log_axes_reject_values_that_are_not_positive() {
        let err = plot(true, vec![(1.0, 0.0)]).to_svg().unwrap_err();
        assert!(err.contains("cannot be drawn"), "{err}");
        assert!(plot(false, vec![(1.0, 0.0)]).to_svg().is_ok());
    }

    #[test]
    fn an_empty_plot_is_an_error() {
        let empty = Plot { series: vec![], ..plot(false, vec![]) };
        assert!(empty.to_svg().unwrap_err().contains("no points"));
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_row() {
        let dir = std::env::temp_dir().join(format!("plot-test-{}", std::process::id()));
        let path = dir.join("x.csv");
        write_csv(&path, &["n", "bytes"], &[vec!["1".into(), "2".into()]]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "n,bytes\n1,2\n");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
