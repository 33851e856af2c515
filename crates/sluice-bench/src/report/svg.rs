//! A small SVG writer and the axis arithmetic the charts share.

use super::text::{num, truncate, xml};

/// Chart size, pixels.
pub(super) const WIDTH: f64 = 640.0;
pub(super) const HEIGHT: f64 = 360.0;

/// Series colours, by target index in the document (Okabe–Ito, plus two).
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#666666", "#B8860B",
];

/// The colour of the target at `index`.
pub(super) fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// A coordinate or length as written in the SVG (one decimal; 0 if not finite).
fn f(v: f64) -> String {
    if v.is_finite() {
        let s = format!("{v:.1}");
        if s == "-0.0" { "0.0".to_string() } else { s }
    } else {
        "0.0".to_string()
    }
}

/// Where a text is anchored.
#[derive(Debug, Clone, Copy)]
pub(super) enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// An SVG document being written.
pub(super) struct Svg {
    out: String,
}

impl Svg {
    /// A chart of [`WIDTH`] × [`HEIGHT`] on a white background; `title` is its
    /// accessible name.
    pub fn new(title: &str) -> Svg {
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\" \
             role=\"img\" aria-label=\"{t}\">\n<title>{t}</title>\n",
            w = WIDTH,
            h = HEIGHT,
            t = xml(&truncate(title, 200))
        );
        out.push_str(&format!(
            "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
            WIDTH, HEIGHT
        ));
        Svg { out }
    }

    /// A text at (x, y) (its baseline), `size` pixels, bold if asked, turned a quarter
    /// anticlockwise if `vertical`.
    pub fn text(&mut self, x: f64, y: f64, anchor: Anchor, size: u32, bold: bool, s: &str) {
        self.text_with(x, y, anchor, size, bold, false, s);
    }

    /// As [`Svg::text`], turned a quarter anticlockwise around (x, y).
    pub fn vertical_text(&mut self, x: f64, y: f64, s: &str) {
        self.text_with(x, y, Anchor::Middle, 12, false, true, s);
    }

    #[allow(clippy::too_many_arguments)]
    fn text_with(
        &mut self,
        x: f64,
        y: f64,
        anchor: Anchor,
        size: u32,
        bold: bool,
        vertical: bool,
        s: &str,
    ) {
        let (x, y) = (f(x), f(y));
        let mut attrs = format!(
            "x=\"{x}\" y=\"{y}\" text-anchor=\"{}\" fill=\"#222222\"",
            anchor.name()
        );
        if size != 12 {
            attrs.push_str(&format!(" font-size=\"{size}\""));
        }
        if bold {
            attrs.push_str(" font-weight=\"bold\"");
        }
        if vertical {
            attrs.push_str(&format!(" transform=\"rotate(-90 {x} {y})\""));
        }
        self.out
            .push_str(&format!("<text {attrs}>{}</text>\n", xml(s)));
    }

    /// A straight line; `light` draws a grid line instead of an axis.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, light: bool) {
        let (stroke, width) = if light {
            ("#e3e3e3", 1)
        } else {
            ("#444444", 1)
        };
        self.out.push_str(&format!(
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{stroke}\" \
             stroke-width=\"{width}\"/>\n",
            f(x1),
            f(y1),
            f(x2),
            f(y2)
        ));
    }

    /// A filled rectangle with an optional hover text.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, tip: Option<&str>) {
        let attrs = format!(
            "x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\"",
            f(x),
            f(y),
            f(w.max(0.0)),
            f(h.max(0.0))
        );
        self.shape("rect", &attrs, tip);
    }

    /// A circle marker with an optional hover text.
    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, fill: &str, tip: Option<&str>) {
        let attrs = format!(
            "cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{fill}\" stroke=\"#ffffff\" \
             stroke-width=\"1\"",
            f(cx),
            f(cy),
            f(r)
        );
        self.shape("circle", &attrs, tip);
    }

    /// A line through `points`.
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{},{}", f(x), f(y)))
            .collect();
        self.out.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"2\" \
             stroke-linejoin=\"round\"/>\n",
            pts.join(" ")
        ));
    }

    fn shape(&mut self, name: &str, attrs: &str, tip: Option<&str>) {
        match tip {
            Some(t) => self.out.push_str(&format!(
                "<{name} {attrs}><title>{}</title></{name}>\n",
                xml(t)
            )),
            None => self.out.push_str(&format!("<{name} {attrs}/>\n")),
        }
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// The plot area of a chart, pixels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plot {
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
}

impl Plot {
    pub fn width(&self) -> f64 {
        self.right - self.left
    }

    pub fn height(&self) -> f64 {
        self.bottom - self.top
    }
}

/// Estimated width of a 12-pixel label, pixels.
fn label_width(s: &str) -> f64 {
    s.chars().count() as f64 * 7.0
}

/// Longest legend label, characters.
const MAX_LEGEND_CHARS: usize = 40;

/// Height of one legend row, pixels.
pub(super) const LEGEND_ROW: f64 = 18.0;

/// Lays a legend of `labels` out in rows from `left` to `right`: per entry the x of its
/// swatch and its row.
pub(super) fn legend_layout(labels: &[String], left: f64, right: f64) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(labels.len());
    let (mut x, mut row) = (left, 0);
    for l in labels {
        let w = 22.0 + label_width(&truncate(l, MAX_LEGEND_CHARS)) + 18.0;
        if x > left && x + w > right {
            x = left;
            row += 1;
        }
        out.push((x, row));
        x += w;
    }
    out
}

/// Rows a legend laid out by [`legend_layout`] takes.
pub(super) fn legend_rows(layout: &[(f64, usize)]) -> usize {
    layout.iter().map(|&(_, r)| r + 1).max().unwrap_or(0)
}

/// Draws a legend: entries (label, colour) at their laid-out places, rows starting at
/// `top`; `line` draws a line-and-dot swatch, else a square.
pub(super) fn draw_legend(
    svg: &mut Svg,
    entries: &[(String, &str)],
    layout: &[(f64, usize)],
    top: f64,
    line: bool,
) {
    for ((label, colour), &(x, row)) in entries.iter().zip(layout) {
        let y = top + row as f64 * LEGEND_ROW + LEGEND_ROW / 2.0;
        if line {
            svg.polyline(&[(x, y), (x + 16.0, y)], colour);
            svg.circle(x + 8.0, y, 3.5, colour, None);
        } else {
            svg.rect(x + 2.0, y - 6.0, 12.0, 12.0, colour, None);
        }
        svg.text(
            x + 22.0,
            y + 4.0,
            Anchor::Start,
            12,
            false,
            &truncate(label, MAX_LEGEND_CHARS),
        );
    }
}

/// A linear axis from 0: the tick step, the axis top and the decimals its labels need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LinearAxis {
    pub step: f64,
    pub top: f64,
    pub decimals: usize,
}

impl LinearAxis {
    /// About five "nice" steps (1, 2 or 5 × 10^k) from 0 to at least `max`.
    pub fn new(max: f64) -> LinearAxis {
        let max = if max.is_finite() && max > 0.0 {
            max
        } else {
            1.0
        };
        let raw = max / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        let norm = raw / mag;
        let nice = if norm <= 1.0 {
            1.0
        } else if norm <= 2.0 {
            2.0
        } else if norm <= 5.0 {
            5.0
        } else {
            10.0
        };
        let step = nice * mag;
        let mut top = (max / step).ceil() * step;
        if top < max {
            top += step;
        }
        let decimals = if step >= 1.0 {
            0
        } else {
            (-step.log10() - 1e-9).ceil().max(0.0) as usize
        };
        LinearAxis {
            step,
            top,
            decimals,
        }
    }

    /// The tick values from 0 to the top.
    pub fn ticks(&self) -> Vec<f64> {
        let n = (self.top / self.step).round() as usize;
        (0..=n).map(|i| i as f64 * self.step).collect()
    }

    /// The label of tick `v`.
    pub fn label(&self, v: f64) -> String {
        num(v, self.decimals)
    }
}

/// A logarithmic axis over whole decades: 10^lo to 10^hi.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LogAxis {
    pub lo: i32,
    pub hi: i32,
}

impl LogAxis {
    /// Decades around `min`..=`max` (values under 1 count as 1), with room below the
    /// smallest so that its bar shows.
    pub fn new(min: f64, max: f64) -> LogAxis {
        let clean = |v: f64| if v.is_finite() && v >= 1.0 { v } else { 1.0 };
        let (min, max) = (clean(min), clean(max));
        let max = max.max(min);
        let mut lo = min.log10().floor() as i32;
        if 10f64.powi(lo) >= min && lo > 0 {
            lo -= 1;
        }
        let mut hi = max.log10().ceil() as i32;
        if hi <= lo {
            hi = lo + 1;
        }
        LogAxis {
            lo: lo.clamp(0, 15),
            hi: hi.clamp(1, 16),
        }
    }

    /// Where `v` sits between the bottom (0) and the top (1) of the axis.
    pub fn fraction(&self, v: f64) -> f64 {
        let v = if v.is_finite() && v > 0.0 { v } else { 1.0 };
        let span = f64::from(self.hi - self.lo);
        ((v.log10() - f64::from(self.lo)) / span).clamp(0.0, 1.0)
    }
}

/// The label of a decade of microseconds: "100 µs", "1 ms", "10 s".
pub(super) fn micros_label(decade: i32) -> String {
    match decade {
        d if d < 3 => format!("{} µs", num(10f64.powi(d), 0)),
        d if d < 6 => format!("{} ms", num(10f64.powi(d - 3), 0)),
        d => format!("{} s", num(10f64.powi(d - 6), 0)),
    }
}
