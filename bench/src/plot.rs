//! Figures for the book: a small SVG line plot with linear, base-10 or base-2 axes whose
//! ticks fit the data (powers of two for sequence lengths, round decimal labels).
//!
//! Why not the `plotters` crate: plotters 0.3.7 with only its `svg_backend` and `line_series`
//! features built from scratch in 1.5 s on the course's 2-core machine (2026-11-22), so its
//! cost is no reason. But the course draws a few lines on log axes, which this file does in
//! about 300 tested lines, power-of-two ticks included, where plotters would need its key
//! points set for each plot. Either would serve; this one stays, with no dependency.

use std::fmt::Write as _;

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values from zero, ticks at round steps.
    Linear,
    /// Logarithmic, ticks at powers of ten.
    Log10,
    /// Logarithmic, ticks at powers of two (sequence lengths, batch sizes).
    Log2,
}

impl Scale {
    fn is_log(self) -> bool {
        self != Scale::Linear
    }
}

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
    /// The x axis's scale.
    pub x_scale: Scale,
    /// The y axis's scale.
    pub y_scale: Scale,
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
    /// A plot with no lines yet.
    pub fn new(title: &str, x_label: &str, y_label: &str, x_scale: Scale, y_scale: Scale) -> Self {
        let (title, x_label, y_label) = (title.into(), x_label.into(), y_label.into());
        Self { title, x_label, y_label, x_scale, y_scale, series: Vec::new() }
    }

    /// Adds a line through the points whose coordinates are finite (a size a kernel could not
    /// run leaves a gap, not a zero); a line with no such point is left out.
    pub fn line(mut self, name: &str, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        let points: Vec<(f64, f64)> =
            points.into_iter().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        if !points.is_empty() {
            self.series.push(Series { name: name.to_string(), points });
        }
        self
    }

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
                || (self.x_scale.is_log() && x <= 0.0)
                || (self.y_scale.is_log() && y <= 0.0);
            if bad {
                return Err(format!(
                    "plot `{}`: point ({x}, {y}) cannot be drawn on these axes",
                    self.title
                ));
            }
        }
        let x_axis = Axis::new(points.iter().map(|p| p.0), self.x_scale, LEFT, WIDTH - RIGHT);
        let y_axis = Axis::new(points.iter().map(|p| p.1), self.y_scale, HEIGHT - BOTTOM, TOP);

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
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Maps data values to pixels along one axis.
struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
    from: f64,
    to: f64,
}

impl Axis {
    /// An axis over `values`, widened to whole powers (log scales) or to a round step from zero
    /// (linear), so that the first and last ticks frame the data.
    fn new(values: impl Iterator<Item = f64>, scale: Scale, from: f64, to: f64) -> Self {
        let (lo, hi) =
            values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let (lo, hi) = match scale {
            Scale::Log10 | Scale::Log2 => {
                let base = if scale == Scale::Log10 { 10f64 } else { 2.0 };
                let (a, b) = (lo.log(base).floor(), hi.log(base).ceil());
                let b = if a == b { b + 1.0 } else { b };
                (base.powf(a), base.powf(b))
            }
            Scale::Linear => {
                // Linear axes start at zero (or end there, for negative data), so heights
                // compare honestly.
                let (lo, hi) = (lo.min(0.0), hi.max(0.0));
                let step = round_step((hi - lo).max(f64::MIN_POSITIVE) / 5.0);
                ((lo / step).floor() * step, ((hi / step).ceil() * step).max(lo + step))
            }
        };
        Self { lo, hi, scale, from, to }
    }

    fn unit(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            _ => (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln()),
        }
    }

    fn map(&self, v: f64) -> f64 {
        self.from + (self.to - self.from) * self.unit(v)
    }

    /// The ticks and their labels: every power (every second or third one when there would be
    /// more than ten) on a log axis, round steps on a linear one.
    fn ticks(&self) -> Vec<(f64, String)> {
        let values: Vec<f64> = match self.scale {
            Scale::Linear => {
                let step = round_step((self.hi - self.lo) / 5.0);
                let count = ((self.hi - self.lo) / step).round() as i32;
                (0..=count).map(|i| self.lo + step * f64::from(i)).collect()
            }
            Scale::Log10 | Scale::Log2 => {
                let base = if self.scale == Scale::Log10 { 10f64 } else { 2.0 };
                let (a, b) = (self.lo.log(base).round() as i32, self.hi.log(base).round() as i32);
                let every = ((b - a) as usize).div_ceil(10).max(1);
                (a..=b).step_by(every).map(|e| base.powi(e)).collect()
            }
        };
        values.into_iter().map(|v| (v, label(v))).collect()
    }
}

/// 1, 2 or 5 times a power of ten, the smallest at least `raw`.
fn round_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// A tick label in plain decimals (`16384`, `0.25`, `1.5`), in powers of ten beyond a million
/// or below a thousandth (`1e9`, `1e-6`), where digits would crowd the axis.
fn label(v: f64) -> String {
    let size = v.abs();
    if v == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e6).contains(&size) {
        let exponent = size.log10().round() as i32;
        if (v / 10f64.powi(exponent) - v.signum()).abs() < 1e-9 {
            format!("{}1e{exponent}", if v < 0.0 { "-" } else { "" })
        } else {
            format!("{v:e}")
        }
    } else {
        let text = format!("{v:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(scale: Scale, points: Vec<(f64, f64)>) -> Plot {
        Plot {
            title: "t <1>".into(),
            x_label: "N".into(),
            y_label: "bytes".into(),
            x_scale: scale,
            y_scale: scale,
            series: vec![
                Series { name: "a".into(), points },
                Series { name: "b".into(), points: vec![(1.0, 5.0)] },
            ],
        }
    }

    #[test]
    fn draws_one_polyline_per_series_inside_the_frame() {
        let svg = plot(Scale::Log10, vec![(10.0, 100.0), (1000.0, 1e6)]).to_svg().unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("t &lt;1&gt;"), "titles are escaped");
        // On log axes 1..1e3 and 1..1e6 the first point sits a third of the way across.
        let x = LEFT + (WIDTH - RIGHT - LEFT) / 3.0;
        assert!(svg.contains(&format!("points=\"{x:.1},")), "{svg}");
        assert!(svg.contains(">1e6<") && svg.contains(">1<") && svg.contains(">1000<"), "{svg}");
    }

    fn tick_labels(values: &[f64], scale: Scale) -> Vec<String> {
        Axis::new(values.iter().copied(), scale, 0.0, 1.0)
            .ticks()
            .into_iter()
            .map(|t| t.1)
            .collect()
    }

    #[test]
    fn sequence_lengths_get_power_of_two_ticks() {
        let labels = tick_labels(&[256.0, 16384.0], Scale::Log2);
        assert_eq!(labels, ["256", "512", "1024", "2048", "4096", "8192", "16384"]);
        // More than ten powers: every second one.
        assert_eq!(tick_labels(&[1.0, 4096.0], Scale::Log2).len(), 7);
        assert_eq!(tick_labels(&[0.25, 3.0], Scale::Log2), ["0.25", "0.5", "1", "2", "4"]);
    }

    #[test]
    fn linear_axes_start_at_zero_with_round_steps_that_cover_the_data() {
        assert_eq!(tick_labels(&[3.0, 37.0], Scale::Linear), ["0", "10", "20", "30", "40"]);
        assert_eq!(
            tick_labels(&[0.013, 0.9], Scale::Linear),
            ["0", "0.2", "0.4", "0.6", "0.8", "1"]
        );
        assert_eq!(tick_labels(&[5.0, 5.0], Scale::Linear), ["0", "1", "2", "3", "4", "5"]);
    }

    #[test]
    fn labels_are_decimal_except_far_from_one() {
        assert_eq!(label(16384.0), "16384");
        assert_eq!(label(0.001), "0.001");
        assert_eq!(label(1e9), "1e9");
        assert_eq!(label(1e-6), "1e-6");
        assert_eq!(label(2.5e7), "2.5e7");
    }

    #[test]
    fn log_axes_reject_values_that_are_not_positive() {
        let err = plot(Scale::Log2, vec![(1.0, 0.0)]).to_svg().unwrap_err();
        assert!(err.contains("cannot be drawn"), "{err}");
        assert!(plot(Scale::Linear, vec![(1.0, 0.0)]).to_svg().is_ok());
    }

    #[test]
    fn lines_skip_points_that_are_not_finite_and_empty_lines() {
        let p = Plot::new("t", "x", "y", Scale::Log2, Scale::Log10)
            .line("a", [(1.0, 2.0), (2.0, f64::NAN), (4.0, 3.0)])
            .line("b", [(1.0, f64::NAN)]);
        assert_eq!(p.series, [Series { name: "a".into(), points: vec![(1.0, 2.0), (4.0, 3.0)] }]);
    }

    #[test]
    fn an_empty_plot_is_an_error() {
        let empty = Plot { series: vec![], ..plot(Scale::Linear, vec![]) };
        assert!(empty.to_svg().unwrap_err().contains("no points"));
    }
}
