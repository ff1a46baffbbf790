//! A few SVG shapes, enough for boxes, grids, arrows and labels. Every coordinate is in
//! pixels from the top left corner; numbers are written with at most one decimal, so the same
//! drawing always gives the same bytes.

use std::fmt::Write;

/// Fill colours, shared by every diagram so that a colour means one thing across the book.
pub mod colour {
    /// Data loaded into fast memory at this step.
    pub const LOADED: &str = "#9ecae1";
    /// The tile being computed at this step.
    pub const CURRENT: &str = "#fd8d3c";
    /// Work already done, folded into the running state.
    pub const DONE: &str = "#fdd0a2";
    /// A tile every row of which sees every key (no mask).
    pub const FULL: &str = "#a1d99b";
    /// A tile crossed by the mask's edge: computed, then masked.
    pub const MASKED: &str = "#fdae6b";
    /// A tile no row sees: never loaded.
    pub const SKIPPED: &str = "#f0f0f0";
    /// Something stored in slow memory.
    pub const SLOW: &str = "#dadaeb";
    /// Plain boxes.
    pub const PLAIN: &str = "#ffffff";
    /// Lines and text.
    pub const INK: &str = "#252525";
    /// A barrier.
    pub const BARRIER: &str = "#cb181d";
}

/// How a label is placed and drawn.
#[derive(Clone, Copy)]
pub struct Text {
    /// Font size in pixels.
    pub size: f64,
    /// `start`, `middle` or `end`: which point of the text `x` is.
    pub anchor: &'static str,
    /// Bold or not.
    pub bold: bool,
}

impl Text {
    /// 13-pixel text centred on its point.
    pub const CENTRED: Text = Text { size: 13.0, anchor: "middle", bold: false };
    /// 13-pixel text starting at its point.
    pub const LEFT: Text = Text { size: 13.0, anchor: "start", bold: false };
    /// A 15-pixel bold heading, centred.
    pub const HEADING: Text = Text { size: 15.0, anchor: "middle", bold: true };
    /// 11-pixel text, centred (inside small cells).
    pub const SMALL: Text = Text { size: 11.0, anchor: "middle", bold: false };
    /// 11-pixel text starting at its point.
    pub const SMALL_LEFT: Text = Text { size: 11.0, anchor: "start", bold: false };
}

/// An SVG drawing under construction.
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    /// An empty drawing of `width x height` pixels.
    pub fn new(width: f64, height: f64) -> Self {
        Self { width, height, body: String::new() }
    }

    /// An empty drawing of `width x height` pixels with `heading` centred at its top.
    pub fn titled(width: f64, height: f64, heading: &str) -> Self {
        let mut svg = Self::new(width, height);
        svg.text(width / 2.0, 24.0, heading, Text::HEADING);
        svg
    }

    /// A rectangle with a thin dark outline.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}" stroke="{}" stroke-width="1"/>"#,
            colour::INK
        );
    }

    /// A rectangle with no outline.
    pub fn fill(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"/>"#
        );
    }

    /// A rectangle outline, `width` pixels thick, in `colour`.
    pub fn outline(&mut self, x: f64, y: f64, w: f64, h: f64, colour: &str, width: f64) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="{colour}" stroke-width="{width:.1}"/>"#
        );
    }

    /// One line of text; `text` is escaped.
    pub fn text(&mut self, x: f64, y: f64, text: &str, style: Text) {
        let weight = if style.bold { r#" font-weight="bold""# } else { "" };
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{:.1}" text-anchor="{}"{weight} fill="{}">{}</text>"#,
            style.size,
            style.anchor,
            colour::INK,
            escape(text)
        );
    }

    /// Several lines of text, `style.size * 1.3` apart, the first at `y`.
    pub fn lines(&mut self, x: f64, y: f64, lines: &[String], style: Text) {
        for (i, line) in lines.iter().enumerate() {
            self.text(x, y + i as f64 * style.size * 1.3, line, style);
        }
    }

    /// A straight line in `colour`, `width` pixels thick, dashed if `dashed`.
    pub fn line(
        &mut self,
        from: (f64, f64),
        to: (f64, f64),
        colour: &str,
        width: f64,
        dashed: bool,
    ) {
        let dash = if dashed { r#" stroke-dasharray="5 4""# } else { "" };
        let _ = writeln!(
            self.body,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="{width:.1}"{dash}/>"#,
            from.0, from.1, to.0, to.1
        );
    }

    /// An arrow from `from` to `to`, its head at `to`.
    pub fn arrow(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.arrow_line(from, to, "");
    }

    /// A dashed arrow from `from` to `to`, its head at `to`.
    pub fn dashed_arrow(&mut self, from: (f64, f64), to: (f64, f64)) {
        self.arrow_line(from, to, r#" stroke-dasharray="5 4""#);
    }

    /// An arrow with the extra attributes `style`.
    fn arrow_line(&mut self, from: (f64, f64), to: (f64, f64), style: &str) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="1.5"{style} marker-end="url(#head)"/>"#,
            from.0,
            from.1,
            to.0,
            to.1,
            colour::INK
        );
    }

    /// A box with centred lines of text in it.
    pub fn labelled_box(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, lines: &[String]) {
        self.rect(x, y, w, h, fill);
        let style = Text::CENTRED;
        let first =
            y + h / 2.0 - (lines.len() as f64 - 1.0) * style.size * 0.65 + style.size * 0.35;
        self.lines(x + w / 2.0, first, lines, style);
    }

    /// The finished document: a white background, an arrowhead marker, `title` for screen
    /// readers (and as the tooltip), then the shapes in the order they were drawn.
    pub fn finish(self, title: &str) -> String {
        let (w, h) = (self.width, self.height);
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif">
<title>{}</title>
<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{}"/></marker></defs>
<rect x="0" y="0" width="{w:.0}" height="{h:.0}" fill="white"/>
{}</svg>
"#,
            escape(title),
            colour::INK,
            self.body
        )
    }
}

/// `text` with the characters that XML reserves escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A legend entry: a small square of `fill` and its meaning, at `(x, y)`.
pub fn legend(svg: &mut Svg, x: f64, y: f64, fill: &str, meaning: &str) {
    svg.rect(x, y - 10.0, 12.0, 12.0, fill);
    svg.text(x + 18.0, y, meaning, Text::LEFT);
}
