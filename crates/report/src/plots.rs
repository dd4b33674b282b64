//! Plots, each written as PNG and SVG: line charts (with error bars), labelled scatter plots
//! and horizontal bar charts. Text uses DejaVu Sans, embedded, so no system fonts are needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{Error, Result};

const FONT: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 600);
/// Matplotlib's tab10 colours: distinguishable, and the reference's plots use them.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

fn register_font() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_err() {
            result = Err(Error::Plot("the embedded font could not be read".into()));
        }
    });
    result
}

/// A 95% interval `(low, high)` drawn as an error bar.
pub type Interval = Option<(f64, f64)>;

/// One line of a line chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// `(x, y, interval)`; the interval `(low, high)` is drawn as an error bar.
    pub points: Vec<(f64, f64, Interval)>,
    /// Draw dashed and grey, beneath the other lines (a reference line, e.g. the golden run).
    pub reference: bool,
    /// Palette index, so that one option keeps its colour in every plot of a report (`None`:
    /// the series' position among the chart's non-reference lines).
    pub color: Option<usize>,
}

/// A chart of lines over x.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X on a log10 scale (all x must be positive).
    pub log_x: bool,
    /// Fixed y range.
    pub y_range: Option<(f64, f64)>,
    /// Fixed x range (after the log transform), so that facets compare.
    pub x_range: Option<(f64, f64)>,
    /// Categories: when given, each x is an index into these names, points are not joined by
    /// lines, and the x axis is labelled with the names.
    pub categories: Vec<String>,
    /// The lines.
    pub series: Vec<Series>,
}

/// Line charts side by side, `columns` to a row, under one title: one panel per series rather
/// than lines and intervals drawn over each other.
#[derive(Clone, Debug, Default)]
pub struct LineFacets {
    /// Title.
    pub title: String,
    /// The panels, row by row.
    pub panels: Vec<LineChart>,
    /// Panels per row.
    pub columns: usize,
}

impl Plot for LineFacets {
    fn size(&self) -> (u32, u32) {
        grid_size(self.panels.len(), self.columns, 2.0 / 3.0)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        draw_grid(area, &self.title, &self.panels, self.columns)
    }
}

/// The pixel size of `n` panels, `columns` to a row, each `scale` of a single plot's size,
/// under a title.
fn grid_size(n: usize, columns: usize, scale: f64) -> (u32, u32) {
    let cols = columns.clamp(1, n.max(1));
    let rows = n.div_ceil(cols).max(1);
    let side = |px: u32, k: usize| (f64::from(px) * k as f64 * scale).round() as u32;
    (side(SIZE.0, cols), 40 + side(SIZE.1, rows))
}

/// Draws `panels`, `columns` to a row, under `title`.
fn draw_grid<DB: DrawingBackend, P: Plot>(area: &DrawingArea<DB, Shift>, title: &str, panels: &[P], columns: usize) -> DrawResult<DB> {
    area.fill(&WHITE)?;
    let inner = area.titled(title, (FONT, 26))?;
    let cols = columns.clamp(1, panels.len().max(1));
    let rows = panels.len().div_ceil(cols).max(1);
    for (panel, cell) in panels.iter().zip(inner.split_evenly((rows, cols))) {
        panel.draw(&cell)?;
    }
    area.present()
}

/// Labelled points.
#[derive(Clone, Debug, Default)]
pub struct Scatter {
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// `(label, x, y)`; each point in its own colour, listed in the legend.
    pub points: Vec<(String, f64, f64)>,
    /// Palette index of each point, so that an option keeps its colour across a report's plots
    /// (empty: the point's position).
    pub colors: Vec<usize>,
}

/// A value and its interval's ends, where known.
pub type Valued = (f64, (Option<f64>, Option<f64>));

/// One option of a [`Pareto`] plot.
#[derive(Clone, Debug, Default)]
pub struct ParetoPoint {
    /// The option's label.
    pub label: String,
    /// Overhead, %, with its interval.
    pub overhead: Option<Valued>,
    /// Accuracy loss, points, with its interval.
    pub loss: Option<Valued>,
}

/// Accuracy loss against overhead, one point per option with both intervals as bars; the
/// colour follows the option's position, so an option keeps its colour in every plot of a
/// study. Options without one of the values are named in the title.
#[derive(Clone, Debug, Default)]
pub struct Pareto {
    /// Title (the condition).
    pub title: String,
    /// The options, in the study's order.
    pub points: Vec<ParetoPoint>,
    /// The axes' descriptions (`None`: simulated overhead against accuracy loss), for other
    /// pairs drawn the same way.
    pub axes: Option<(String, String)>,
    /// Fixed `(x, y)` ranges (`None`: fitted to the points), so that facets compare.
    pub bounds: Option<((f64, f64), (f64, f64))>,
}

/// Plots of the same kind side by side, `columns` to a row, under one title.
#[derive(Clone, Debug, Default)]
pub struct Facets {
    /// Title.
    pub title: String,
    /// The panels, row by row.
    pub panels: Vec<Pareto>,
    /// Panels per row.
    pub columns: usize,
}

impl Facets {
    /// `panels` on shared axes, `columns` to a row: the span of every panel's points and
    /// intervals (0 included on x), padded by a tenth and at least half a unit on each side.
    pub fn shared(title: String, panels: Vec<Pareto>, columns: usize) -> Self {
        let (mut xs, mut ys) = (vec![0.0], Vec::new());
        for (x, y) in panels.iter().map(Pareto::extent) {
            xs.extend(x);
            ys.extend(y);
        }
        let padded = |v: Vec<f64>| {
            span(v.into_iter()).map_or((0.0, 1.0), |(lo, hi)| {
                let pad = ((hi - lo) * 0.1).max(0.5);
                (lo - pad, hi + pad)
            })
        };
        let bounds = Some((padded(xs), padded(ys)));
        Self { title, panels: panels.into_iter().map(|p| Pareto { bounds, ..p }).collect(), columns }
    }
}

impl Pareto {
    /// The ends of the intervals of the points drawn, `(x, y)`.
    fn extent(&self) -> (Vec<f64>, Vec<f64>) {
        let ends = |v: &Valued| [v.0, v.1.0.unwrap_or(v.0), v.1.1.unwrap_or(v.0)];
        let shown = self.points.iter().filter_map(|p| Some((p.overhead?, p.loss?)));
        shown.fold((Vec::new(), Vec::new()), |(mut xs, mut ys), (x, y)| {
            xs.extend(ends(&x));
            ys.extend(ends(&y));
            (xs, ys)
        })
    }
}

/// Horizontal bars, one per label.
#[derive(Clone, Debug, Default)]
pub struct Bars {
    /// Title.
    pub title: String,
    /// Value axis label.
    pub x_label: String,
    /// `(label, value, interval (low, high))`.
    pub bars: Vec<(String, f64, Interval)>,
}

type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// A titled chart with room for axis labels on the left and below.
fn frame<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    title: &str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> std::result::Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
    let size = caption_size(area, title, 24);
    ChartBuilder::on(area).caption(title, (FONT, size)).margin(16).x_label_area_size(50).y_label_area_size(70).build_cartesian_2d(x, y)
}

/// The largest font size up to `max` at which `title` fits the width of `area` (a facet's
/// title naming several coordinates would otherwise run into its neighbours); at least 10.
fn caption_size<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, max: u32) -> u32 {
    let room = area.dim_in_pixel().0.saturating_sub(32);
    (10..=max)
        .rev()
        .find(|&size| area.estimate_text_size(title, &TextStyle::from((FONT, size).into_font())).is_ok_and(|(w, _)| w <= room))
        .unwrap_or(10)
}

/// Something that can draw itself on any backend.
pub trait Plot {
    /// Draws on `area`.
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32) {
        SIZE
    }
}

/// The smallest and largest finite values, if any.
pub(crate) fn span(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (lo, hi) = values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
    lo.is_finite().then_some((lo, hi))
}

fn range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let Some((lo, hi)) = span(values) else { return (0.0, 1.0) };
    if hi - lo < 1e-12 {
        return (lo - 1.0, hi + 1.0);
    }
    let p = (hi - lo) * pad;
    (lo - p, hi + p)
}

impl LineChart {
    /// Each series with its colour: references grey, the others their palette colour.
    fn colored(&self) -> Vec<(&Series, RGBColor)> {
        let mut k = 0;
        self.series
            .iter()
            .map(|s| {
                let c = if s.reference { RGBColor(110, 110, 110) } else { color(s.color.unwrap_or(k)) };
                k += usize::from(!s.reference);
                (s, c)
            })
            .collect()
    }

    /// The x range (after the log transform) and the y range, from the points unless fixed.
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let tx = |x: f64| if self.log_x { x.log10() } else { x };
        let xs = self.series.iter().flat_map(|s| s.points.iter().map(|p| tx(p.0)));
        let x = self.x_range.unwrap_or_else(|| if self.categories.is_empty() { range(xs, 0.05) } else { range(xs, 0.0) });
        let x = if self.categories.is_empty() { x } else { (x.0 - 0.5, x.1 + 0.5) };
        let ends = self.series.iter().flat_map(|s| s.points.iter().flat_map(|p| p.2.map_or([p.1, p.1], |(lo, hi)| [lo, hi])));
        (x, self.y_range.unwrap_or_else(|| range(ends, 0.08)))
    }
}

impl Plot for LineChart {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        let colored = self.colored();
        // More than one line: the legend gets a column of its own, right of the data.
        let (plot, side) = with_legend_column(area, colored.len());
        let ((x0, x1), (y0, y1)) = self.ranges();
        let mut chart = frame(&plot, &self.title, x0..x1, y0..y1)?;
        // Many categories: every k-th is named, so that the names do not run into each other.
        let (log_x, cats, every) = (self.log_x, &self.categories, self.categories.len().div_ceil(32).max(1));
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 18))
            .x_labels(if cats.is_empty() { 10 } else { cats.len() * 2 + 1 })
            // On a log axis only the powers of ten are labelled; categories by their names.
            .x_label_formatter(&|v| match (log_x, cats.is_empty()) {
                (_, false) if (v - v.round()).abs() < 1e-6 && *v >= -0.5 && (v.round() as usize).is_multiple_of(every) => {
                    cats.get(v.round() as usize).cloned().unwrap_or_default()
                }
                (_, false) => String::new(),
                (true, _) if (v - v.round()).abs() < 1e-6 => format!("{}", 10f64.powf(v.round())),
                (true, _) => String::new(),
                (false, _) => tick(*v),
            })
            .y_label_formatter(&|v| tick(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        // References first, beneath the lines they are compared with; lines with intervals
        // spread evenly about each x, so that the intervals stay apart.
        let cap = (x1 - x0) * 0.006;
        for (s, c) in colored.iter().filter(|(s, _)| s.reference) {
            self.draw_series(&mut chart, s, (*c, 0), 0.0, cap)?;
        }
        let lines: Vec<&(&Series, RGBColor)> = colored.iter().filter(|(s, _)| !s.reference).collect();
        let intervals = lines.iter().any(|(s, _)| s.points.iter().any(|p| p.2.is_some()));
        let spread = if lines.len() > 1 && intervals { (x1 - x0) * 0.008 } else { 0.0 };
        for (k, (s, c)) in lines.iter().enumerate() {
            let dx = (k as f64 - (lines.len() - 1) as f64 / 2.0) * spread;
            self.draw_series(&mut chart, s, (*c, k), dx, cap)?;
        }
        if let Some(side) = side {
            // A line identical to an earlier one says so: drawn over it, it could not be seen.
            let same = self.identical_lines();
            let labels: Vec<String> = colored
                .iter()
                .map(|(s, _)| match same.iter().find(|(later, _)| *later == s.label) {
                    Some((_, first)) => format!("{} (= {first})", s.label),
                    None => s.label.clone(),
                })
                .collect();
            let mut k = 0;
            let mut entries: Vec<(&str, RGBColor, Mark)> = Vec::new();
            for ((s, c), label) in colored.iter().zip(&labels) {
                entries.push((label.as_str(), *c, if s.reference { Mark::Dashed } else { Mark::Line(k) }));
                k += usize::from(!s.reference);
            }
            side_legend(&side, &entries)?;
        }
        area.present()
    }
}

impl LineChart {
    /// The lines (not references) whose points equal an earlier line's exactly, each with the
    /// earlier line's label: `(later, earlier)`. Drawn over each other they would look like one.
    pub fn identical_lines(&self) -> Vec<(String, String)> {
        let lines: Vec<&Series> = self.series.iter().filter(|s| !s.reference && !s.points.is_empty()).collect();
        let mut out = Vec::new();
        for (i, s) in lines.iter().enumerate() {
            if let Some(first) = lines[..i].iter().find(|o| o.points == s.points) {
                out.push((s.label.clone(), first.label.clone()));
            }
        }
        out
    }

    /// One series in colour `c` with the `k`-th line's marks ([`LineMark`]), shifted right by
    /// `dx`, its intervals as whiskers with caps `cap` wide on either side.
    fn draw_series<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        s: &Series,
        (c, k): (RGBColor, usize),
        dx: f64,
        cap: f64,
    ) -> DrawResult<DB> {
        let tx = |x: f64| if self.log_x { x.log10() } else { x };
        let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (tx(p.0) + dx, p.1)).filter(|p| p.1.is_finite()).collect();
        if s.reference {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 10, 6, ShapeStyle::from(&c).stroke_width(4)))?;
            return Ok(());
        }
        let mark = LineMark::of(k);
        if self.categories.is_empty() {
            let style = ShapeStyle::from(&c).stroke_width(2);
            match mark.dash {
                Some((on, off)) => chart.draw_series(DashedLineSeries::new(pts.clone(), on, off, style))?,
                None => chart.draw_series(LineSeries::new(pts.clone(), style))?,
            };
        }
        mark.draw_markers(chart, &pts, c)?;
        for p in &s.points {
            if let Some((lo, hi)) = p.2.filter(|(lo, hi)| hi > lo && lo.is_finite() && hi.is_finite()) {
                let x = tx(p.0) + dx;
                let bar = ShapeStyle::from(&c).stroke_width(2);
                for seg in [vec![(x, lo), (x, hi)], vec![(x - cap, lo), (x + cap, lo)], vec![(x - cap, hi), (x + cap, hi)]] {
                    chart.draw_series(std::iter::once(PathElement::new(seg, bar)))?;
                }
            }
        }
        Ok(())
    }
}

/// How a legend entry is drawn: the `k`-th line of a chart ([`LineMark`]), a reference line
/// (dashed, grey) or a dot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    Line(usize),
    Dashed,
    Dot,
}

/// A marker's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Circle,
    Triangle,
    Square,
    Cross,
}

/// How the `k`-th line of a chart is told apart from the others beyond its colour, so that lines
/// drawn over each other stay distinguishable: its marker shape and its dashes (none, long,
/// short), twelve combinations before one repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LineMark {
    shape: Shape,
    /// `(on, off)` pixels; `None`: a solid line.
    dash: Option<(u32, u32)>,
}

impl LineMark {
    fn of(k: usize) -> Self {
        let shape = [Shape::Circle, Shape::Triangle, Shape::Square, Shape::Cross][k % 4];
        let dash = [None, Some((14, 7)), Some((4, 4))][k % 3];
        Self { shape, dash }
    }

    /// The markers at `pts` (data coordinates), in colour `c`.
    fn draw_markers<DB: DrawingBackend>(self, chart: &mut Chart<'_, DB>, pts: &[(f64, f64)], c: RGBColor) -> DrawResult<DB> {
        match self.shape {
            Shape::Circle => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))?,
            Shape::Triangle => chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 6, c.filled())))?,
            Shape::Square => {
                chart.draw_series(pts.iter().map(|&p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], c.filled())))?
            }
            Shape::Cross => chart.draw_series(pts.iter().map(|&p| Cross::new(p, 5, ShapeStyle::from(&c).stroke_width(2))))?,
        };
        Ok(())
    }

    /// The legend's sample of this line at pixel row `y`: the line (dashed as drawn) with its
    /// marker in the middle.
    fn draw_sample<DB: DrawingBackend>(self, area: &DrawingArea<DB, Shift>, y: i32, c: RGBColor) -> DrawResult<DB> {
        let style = ShapeStyle::from(&c).stroke_width(3);
        let segments: Vec<(i32, i32)> = match self.dash {
            None => vec![(4, 32)],
            Some((on, _)) if on > 8 => vec![(4, 14), (22, 32)],
            Some(_) => vec![(4, 8), (12, 16), (20, 24), (28, 32)],
        };
        for (a, b) in segments {
            area.draw(&PathElement::new(vec![(a, y), (b, y)], style))?;
        }
        match self.shape {
            Shape::Circle => area.draw(&Circle::new((18, y), 5, c.filled()))?,
            Shape::Triangle => area.draw(&TriangleMarker::new((18, y), 7, c.filled()))?,
            Shape::Square => area.draw(&Rectangle::new([(14, y - 4), (22, y + 4)], c.filled()))?,
            Shape::Cross => area.draw(&Cross::new((18, y), 6, ShapeStyle::from(&c).stroke_width(2)))?,
        }
        Ok(())
    }
}

/// A legend in its own column, beside the data it names.
fn side_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[(&str, RGBColor, Mark)]) -> DrawResult<DB> {
    let text = TextStyle::from((FONT, 15).into_font()).color(&BLACK);
    for (i, (label, c, mark)) in entries.iter().enumerate() {
        let y = 70 + 26 * i as i32;
        let style = ShapeStyle::from(c).stroke_width(if *mark == Mark::Dashed { 4 } else { 3 });
        match mark {
            Mark::Dashed => {
                area.draw(&PathElement::new(vec![(4, y), (14, y)], style))?;
                area.draw(&PathElement::new(vec![(22, y), (32, y)], style))?;
            }
            Mark::Line(k) => LineMark::of(*k).draw_sample(area, y, *c)?,
            Mark::Dot => area.draw(&Circle::new((18, y), 6, c.filled()))?,
        }
        area.draw(&Text::new(label.to_string(), (40, y - 9), text.clone()))?;
    }
    Ok(())
}

/// `area` split into the plot and, for more than one entry, a legend column right of it.
fn with_legend_column<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: usize,
) -> (DrawingArea<DB, Shift>, Option<DrawingArea<DB, Shift>>) {
    match entries > 1 {
        true => {
            let (a, b) = area.split_horizontally((area.dim_in_pixel().0 * 3 / 4) as i32);
            (a, Some(b))
        }
        false => (area.clone(), None),
    }
}

/// The axes with their descriptions, in the plots' common style.
fn mesh<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, x: &str, y: &str) -> DrawResult<DB> {
    chart.configure_mesh().x_desc(x).y_desc(y).label_style((FONT, 16)).axis_desc_style((FONT, 18)).light_line_style(WHITE.mix(0.0)).draw()
}

/// One labelled dot in colour `c`, listed in the legend.
fn dot<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, at: (f64, f64), c: RGBColor, label: &str) -> DrawResult<DB> {
    chart
        .draw_series(std::iter::once(Circle::new(at, 7, c.filled())))?
        .label(label)
        .legend(move |(x, y)| Circle::new((x + 8, y), 6, c.filled()));
    Ok(())
}

/// The legend, boxed, at `position`.
fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>, position: SeriesLabelPosition) -> DrawResult<DB> {
    chart
        .configure_series_labels()
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(position)
        .draw()
}

impl Plot for Scatter {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        let (x0, x1) = range(self.points.iter().map(|p| p.1).chain([0.0]), 0.12);
        let (y0, y1) = range(self.points.iter().map(|p| p.2).chain([0.0]), 0.12);
        let (plot, side) = with_legend_column(area, self.points.len());
        let mut chart = frame(&plot, &self.title, x0..x1, y0..y1)?;
        mesh(&mut chart, &self.x_label, &self.y_label)?;
        let colored: Vec<(&str, RGBColor, Mark)> = self
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| (p.0.as_str(), color(self.colors.get(i).copied().unwrap_or(i)), Mark::Dot))
            .collect();
        for ((label, x, y), (_, c, _)) in self.points.iter().zip(&colored) {
            dot(&mut chart, (*x, *y), *c, label)?;
        }
        match side {
            Some(side) => side_legend(&side, &colored)?,
            None => legend(&mut chart, SeriesLabelPosition::UpperRight)?,
        }
        area.present()
    }
}

impl Plot for Pareto {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        let shown: Vec<(usize, &ParetoPoint, Valued, Valued)> =
            self.points.iter().enumerate().filter_map(|(i, p)| Some((i, p, p.overhead?, p.loss?))).collect();
        let ((x0, x1), (y0, y1)) = self.bounds.unwrap_or_else(|| {
            let (xs, ys) = self.extent();
            (range(xs.into_iter().chain([0.0]), 0.1), range(ys.into_iter().chain([0.0]), 0.1))
        });
        let missing: Vec<&str> =
            self.points.iter().filter(|p| p.overhead.is_none() || p.loss.is_none()).map(|p| p.label.as_str()).collect();
        let title = if missing.is_empty() {
            self.title.clone()
        } else {
            format!("{} (not drawn, no overhead: {})", self.title, missing.join(", "))
        };
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, 18))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        let (xd, yd) = self
            .axes
            .clone()
            .unwrap_or_else(|| ("simulated overhead, % (95% interval)".into(), "accuracy loss, points (95% interval)".into()));
        mesh(&mut chart, &xd, &yd)?;
        for &(i, p, (x, xe), (y, ye)) in &shown {
            let c = color(i);
            let bar = ShapeStyle::from(&c).stroke_width(2);
            chart.draw_series(std::iter::once(PathElement::new(vec![(xe.0.unwrap_or(x), y), (xe.1.unwrap_or(x), y)], bar)))?;
            chart.draw_series(std::iter::once(PathElement::new(vec![(x, ye.0.unwrap_or(y)), (x, ye.1.unwrap_or(y))], bar)))?;
            dot(&mut chart, (x, y), c, &p.label)?;
        }
        // The legend goes where it hides the fewest points and interval ends.
        let ends = shown.iter().flat_map(|&(_, _, (x, xe), (y, ye))| {
            [(x, y), (xe.0.unwrap_or(x), y), (xe.1.unwrap_or(x), y), (x, ye.0.unwrap_or(y)), (x, ye.1.unwrap_or(y))]
        });
        legend(&mut chart, emptiest_corner(ends, (x0, x1), (y0, y1)))?;
        area.present()
    }
}

impl Plot for Facets {
    fn size(&self) -> (u32, u32) {
        grid_size(self.panels.len(), self.columns, 0.75)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        draw_grid(area, &self.title, &self.panels, self.columns)
    }
}

impl Plot for Bars {
    fn size(&self) -> (u32, u32) {
        // One row of 24 pixels per bar, so that labels never overlap.
        (SIZE.0, SIZE.1.max(130 + 24 * self.bars.len() as u32))
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        area.fill(&WHITE)?;
        let n = self.bars.len().max(1);
        // Room right of the longest bar or whisker for its label.
        let (_, x1) = range(self.bars.iter().map(|b| b.2.map_or(b.1, |e| e.1.max(b.1))).chain([0.0]), 0.05);
        let x1 = x1 * 1.25;
        let longest = self.bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(0) as u32;
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, (FONT, 24))
            .margin(16)
            .x_label_area_size(50)
            .y_label_area_size((8 * longest + 16).clamp(60, 520))
            .build_cartesian_2d(0f64..x1.max(1e-9), -0.5f64..(n as f64 - 0.5))?;
        // Bar i sits at y = n - 1 - i (the first at the top); its label is the y tick there.
        let labels: Vec<&str> = self.bars.iter().map(|b| b.0.as_str()).collect();
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 18))
            .disable_y_mesh()
            .y_labels(n * 2 + 1)
            .y_label_formatter(&|v| {
                let i = n as f64 - 1.0 - v;
                match (i - i.round()).abs() < 1e-6 && i >= -0.5 {
                    true => labels.get(i.round() as usize).map_or(String::new(), |l| (*l).to_string()),
                    false => String::new(),
                }
            })
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let text = TextStyle::from((FONT, 13).into_font()).color(&BLACK);
        for (i, (_, v, e)) in self.bars.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            // An outlined bar at least a sliver wide, so that a zero reads as a bar of zero.
            let end = v.max(x1 * 0.004);
            chart.draw_series(std::iter::once(Rectangle::new([(0.0, y - 0.3), (end, y + 0.3)], color(0).mix(0.6).filled())))?;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y - 0.3), (end, y + 0.3)],
                ShapeStyle::from(&color(0)).stroke_width(1),
            )))?;
            let mut label = format!("{v:.1}");
            if let Some((lo, hi)) = e.filter(|(lo, hi)| hi > lo) {
                // The interval as a capped whisker, thinner than a bar, and in the label.
                let whisker = ShapeStyle::from(&BLACK).stroke_width(1);
                for seg in [vec![(lo, y), (hi, y)], vec![(lo, y - 0.15), (lo, y + 0.15)], vec![(hi, y - 0.15), (hi, y + 0.15)]] {
                    chart.draw_series(std::iter::once(PathElement::new(seg, whisker)))?;
                }
                label = format!("{v:.1} [{lo:.1}, {hi:.1}]");
            }
            let at = e.map_or(*v, |e| e.1.max(*v)).max(end) + x1 * 0.01;
            chart.draw_series(std::iter::once(Text::new(label, (at, y + 0.3), text.clone())))?;
        }
        area.present()
    }
}

/// The corner of the plot whose quarter holds the fewest points: where the legend hides least.
fn emptiest_corner(points: impl Iterator<Item = (f64, f64)>, (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> SeriesLabelPosition {
    let (xm, ym) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
    let mut n = [0usize; 4]; // upper left, upper right, lower left, lower right
    for (x, y) in points.filter(|p| p.0.is_finite() && p.1.is_finite()) {
        n[usize::from(x > xm) + 2 * usize::from(y < ym)] += 1;
    }
    match (0..4).min_by_key(|&i| n[i]) {
        Some(1) => SeriesLabelPosition::UpperRight,
        Some(2) => SeriesLabelPosition::LowerLeft,
        Some(3) => SeriesLabelPosition::LowerRight,
        _ => SeriesLabelPosition::UpperLeft,
    }
}

/// Writes `plot` to `<stem>.png` and `<stem>.svg`; returns both paths.
pub fn save(plot: &impl Plot, stem: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    let png = stem.with_extension("png");
    let svg = stem.with_extension("svg");
    // A file the backend could not write says so in the operating system's words, not as the
    // backend's nested error values.
    let err = |p: &Path, e: String| {
        Error::Plot(format!(
            "{}: {}",
            p.display(),
            resilab_campaign::infrastructure_text(&e).map_or(e.clone(), |why| format!("could not write it: {why}"))
        ))
    };
    {
        let area = BitMapBackend::new(&png, plot.size()).into_drawing_area();
        plot.draw(&area).map_err(|e| err(&png, e.to_string()))?;
    }
    {
        let area = SVGBackend::new(&svg, plot.size()).into_drawing_area();
        plot.draw(&area).map_err(|e| err(&svg, e.to_string()))?;
    }
    Ok(vec![png, svg])
}

/// An axis tick: at most six decimals, and never "-0" (a tick at zero that float arithmetic put
/// a hair below it).
pub(crate) fn tick(v: f64) -> String {
    let r = (v * 1e6).round() / 1e6;
    if r == 0.0 { "0".into() } else { format!("{r}") }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_are_short_and_never_negative_zero() {
        for (v, want) in [(-0.0, "0"), (-1e-17, "0"), (0.30000000000000004, "0.3"), (-2.5, "-2.5"), (100.0, "100"), (1e-7, "0")] {
            assert_eq!(super::tick(v), want, "{v}");
        }
    }

    #[test]
    fn the_first_eight_lines_each_have_their_own_marks_and_identical_lines_are_named() {
        use super::{LineChart, LineMark, Series};
        let marks: Vec<LineMark> = (0..8).map(LineMark::of).collect();
        for (i, a) in marks.iter().enumerate() {
            assert!(marks[..i].iter().all(|b| b != a), "line {i} is drawn as an earlier one: {marks:?}");
        }
        let line = |label: &str, ys: &[f64]| Series {
            label: label.into(),
            points: ys.iter().enumerate().map(|(x, &y)| (x as f64, y, None)).collect(),
            ..Series::default()
        };
        let chart = LineChart {
            series: vec![line("rollback", &[1.0, 2.0]), line("lossy_forward", &[1.0, 2.0]), line("none", &[1.0, 1.5])],
            ..LineChart::default()
        };
        assert_eq!(chart.identical_lines(), vec![("lossy_forward".to_string(), "rollback".to_string())]);
        let dir = tempfile::tempdir().unwrap();
        let files = super::save(&chart, &dir.path().join("lines")).unwrap();
        assert!(files.iter().all(|f| f.metadata().unwrap().len() > 0));
    }
}
