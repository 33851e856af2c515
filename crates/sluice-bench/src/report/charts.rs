//! The two charts of a table: throughput against connection count, and latency
//! percentiles at the largest connection count with data.

use super::group::Percentiles;
use super::svg::{
    Anchor, HEIGHT, LEGEND_ROW, LinearAxis, LogAxis, Plot, Svg, WIDTH, colour, draw_legend,
    legend_layout, legend_rows, micros_label,
};
use super::text::{int, num, plural, truncate};
use super::{DocView, TableView};

/// Longest chart title, characters (what fits across the chart in bold 15 px).
const MAX_TITLE_CHARS: usize = 68;
/// Baseline of the title; top of the legend.
const TITLE_Y: f64 = 24.0;
const LEGEND_TOP: f64 = 36.0;
/// Margins of the plot area.
const LEFT: f64 = 88.0;
const RIGHT: f64 = WIDTH - 24.0;
const BOTTOM: f64 = HEIGHT - 48.0;

/// Title, legend and frame common to both charts; returns the plot area.
fn frame(svg: &mut Svg, title: &str, legend: &[(String, &str)], line_swatch: bool) -> Plot {
    svg.text(WIDTH / 2.0, TITLE_Y, Anchor::Middle, 15, true, title);
    let labels: Vec<String> = legend.iter().map(|(l, _)| l.clone()).collect();
    let layout = legend_layout(&labels, LEFT, RIGHT);
    draw_legend(svg, legend, &layout, LEGEND_TOP, line_swatch);
    let rows = legend_rows(&layout).max(1);
    Plot {
        left: LEFT,
        top: LEGEND_TOP + rows as f64 * LEGEND_ROW + 12.0,
        right: RIGHT,
        bottom: BOTTOM,
    }
}

/// A chart title: the table's title, cut if need be, then `suffix`.
fn chart_title(table_title: &str, suffix: &str) -> String {
    let room = MAX_TITLE_CHARS
        .saturating_sub(suffix.chars().count())
        .max(12);
    format!("{}{suffix}", truncate(table_title, room))
}

/// Axis titles below the x axis and left of the y axis.
fn axis_titles(svg: &mut Svg, plot: &Plot, x_title: &str, y_title: &str) {
    svg.text(
        (plot.left + plot.right) / 2.0,
        HEIGHT - 10.0,
        Anchor::Middle,
        12,
        false,
        x_title,
    );
    svg.vertical_text(18.0, (plot.top + plot.bottom) / 2.0, y_title);
}

/// "no data" in the middle of the plot area.
fn no_data(svg: &mut Svg, plot: &Plot) {
    svg.text(
        (plot.left + plot.right) / 2.0,
        (plot.top + plot.bottom) / 2.0,
        Anchor::Middle,
        14,
        false,
        "no data",
    );
}

/// Median throughput per connection count, one line per target.
pub(super) fn throughput(view: &DocView<'_>, t: &TableView<'_>) -> String {
    let title = chart_title(&t.info.title, ": throughput");
    let mut svg = Svg::new(&format!("{}: throughput", t.info.title));
    let n = t.connections.len();

    // (target index, points as (connection index, ops/s)).
    let mut series: Vec<(usize, Vec<(usize, f64)>)> = Vec::new();
    for ti in 0..view.targets.len() {
        let points: Vec<(usize, f64)> = (0..n)
            .filter_map(|ci| {
                let v = t.group(ci, ti)?.stats.ops_per_sec?;
                (v.is_finite() && v >= 0.0).then_some((ci, v))
            })
            .collect();
        if !points.is_empty() {
            series.push((ti, points));
        }
    }
    let legend = legend(view, series.iter().map(|(ti, _)| *ti));
    let plot = frame(&mut svg, &title, &legend, true);

    let max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, v)| v))
        .fold(0.0, f64::max);
    let axis = LinearAxis::new(max);
    let y = |v: f64| plot.bottom - v / axis.top * plot.height();
    for tick in axis.ticks() {
        let ty = y(tick);
        svg.line(plot.left, ty, plot.right, ty, tick != 0.0);
        svg.text(
            plot.left - 6.0,
            ty + 4.0,
            Anchor::End,
            12,
            false,
            &axis.label(tick),
        );
    }
    let slot = plot.width() / n.max(1) as f64;
    let x = |ci: usize| plot.left + (ci as f64 + 0.5) * slot;
    for (ci, &c) in t.connections.iter().enumerate() {
        svg.line(x(ci), plot.bottom, x(ci), plot.bottom + 4.0, false);
        svg.text(
            x(ci),
            plot.bottom + 18.0,
            Anchor::Middle,
            12,
            false,
            &int(c as u64),
        );
    }
    svg.line(plot.left, plot.top, plot.left, plot.bottom, false);

    for (ti, points) in &series {
        let c = colour(*ti);
        let xy: Vec<(f64, f64)> = points.iter().map(|&(ci, v)| (x(ci), y(v))).collect();
        if xy.len() > 1 {
            svg.polyline(&xy, c);
        }
        for (&(ci, v), &(px, py)) in points.iter().zip(&xy) {
            let tip = format!(
                "{}, {}: {} ops/s",
                view.targets[*ti],
                plural(t.connections[ci], "connection", "connections"),
                num(v, 0)
            );
            svg.circle(px, py, 3.5, c, Some(&tip));
        }
    }
    if series.is_empty() {
        no_data(&mut svg, &plot);
    }
    axis_titles(
        &mut svg,
        &plot,
        "client connections",
        "operations per second",
    );
    svg.finish()
}

/// The percentiles a latency chart shows: label and value.
type Pick = fn(&Percentiles) -> f64;
const PERCENTILES: [(&str, Pick); 4] = [
    ("p50", |p| p.p50),
    ("p90", |p| p.p90),
    ("p99", |p| p.p99),
    ("p99.9", |p| p.p999),
];

/// The connection index a latency chart shows: the largest connection count at which
/// some target has latencies.
pub(super) fn latency_connections(view: &DocView<'_>, t: &TableView<'_>) -> Option<usize> {
    (0..t.connections.len())
        .filter(|&ci| {
            (0..view.targets.len())
                .any(|ti| t.group(ci, ti).is_some_and(|g| g.stats.latency.is_some()))
        })
        .max_by_key(|&ci| (t.connections[ci], std::cmp::Reverse(ci)))
}

/// Latency percentiles at the largest connection count with data: grouped bars on a
/// logarithmic axis.
pub(super) fn latency(view: &DocView<'_>, t: &TableView<'_>) -> String {
    let Some(ci) = latency_connections(view, t) else {
        let title = chart_title(&t.info.title, ": latency");
        let mut svg = Svg::new(&format!("{}: latency", t.info.title));
        let plot = frame(&mut svg, &title, &[], false);
        no_data(&mut svg, &plot);
        return svg.finish();
    };
    let conns = plural(t.connections[ci], "connection", "connections");
    let title = chart_title(&t.info.title, &format!(": latency at {conns}"));
    let mut svg = Svg::new(&format!("{}: latency at {conns}", t.info.title));

    let bars: Vec<(usize, Percentiles)> = (0..view.targets.len())
        .filter_map(|ti| Some((ti, t.group(ci, ti)?.stats.latency?)))
        .collect();
    let legend = legend(view, bars.iter().map(|(ti, _)| *ti));
    let plot = frame(&mut svg, &title, &legend, false);

    let values = bars
        .iter()
        .flat_map(|(_, p)| PERCENTILES.iter().map(move |(_, f)| f(p)));
    let (min, max) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let axis = LogAxis::new(min, max);
    let y = |v: f64| plot.bottom - axis.fraction(v) * plot.height();
    for d in axis.lo..=axis.hi {
        let decade = 10f64.powi(d);
        let ty = y(decade);
        svg.line(plot.left, ty, plot.right, ty, d != axis.lo);
        svg.text(
            plot.left - 6.0,
            ty + 4.0,
            Anchor::End,
            12,
            false,
            &micros_label(d),
        );
        if d < axis.hi {
            for m in [2.0, 5.0] {
                let my = y(decade * m);
                svg.line(plot.left, my, plot.right, my, true);
            }
        }
    }
    svg.line(plot.left, plot.top, plot.left, plot.bottom, false);

    let group_w = plot.width() / PERCENTILES.len() as f64;
    let bar_w = (group_w * 0.8 / bars.len().max(1) as f64).min(48.0);
    for (gi, (name, value)) in PERCENTILES.iter().enumerate() {
        let gx = plot.left + gi as f64 * group_w;
        let start = gx + (group_w - bar_w * bars.len() as f64) / 2.0;
        for (bi, (ti, p)) in bars.iter().enumerate() {
            let v = value(p);
            let top = y(v);
            let tip = format!("{}, {name}: {} µs", view.targets[*ti], num(v, 0));
            svg.rect(
                start + bi as f64 * bar_w,
                top,
                bar_w - 2.0,
                plot.bottom - top,
                colour(*ti),
                Some(&tip),
            );
        }
        svg.text(
            gx + group_w / 2.0,
            plot.bottom + 18.0,
            Anchor::Middle,
            12,
            false,
            name,
        );
    }
    axis_titles(
        &mut svg,
        &plot,
        "percentile (median over rounds)",
        "latency (log scale)",
    );
    svg.finish()
}

/// Legend entries (name, colour) of the targets with these indices.
fn legend(view: &DocView<'_>, targets: impl Iterator<Item = usize>) -> Vec<(String, &'static str)> {
    targets
        .map(|ti| (view.targets[ti].to_string(), colour(ti)))
        .collect()
}
