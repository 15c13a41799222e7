//! The grouped bar chart every workload writes as SVG.
//!
//! Laid out from estimated text widths rather than fixed coordinates, so a
//! long title or label widens the image instead of running off it. The
//! estimate is deliberately generous (wider than DejaVu Sans, the usual
//! `sans-serif`); `tests/chart_render.rs` renders every chart with
//! `rsvg-convert` and checks that no text leaves the image or overlaps
//! another. `plotters`' SVG backend was weighed: it has no text metrics
//! either (its estimate is narrower than the fonts it names) and no
//! grouped bars, so it would save no layout code.
//!
//! Values that span orders of magnitude (prune: uvfs next to FreeBSD)
//! get a log axis, so the small bars stay visible.

/// One group of bars: a label, `(series, value)` pairs, and the targets
/// that apply in the group.
#[derive(Clone, Debug, Default)]
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<(String, f64)>,
    pub targets: Vec<Target>,
}

/// A target drawn as a red line: over one series' bar, or across the whole
/// group when `series` is `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub series: Option<String>,
    pub value: f64,
}

impl BarGroup {
    pub fn new(label: impl Into<String>) -> Self {
        BarGroup {
            label: label.into(),
            ..Default::default()
        }
    }

    /// Adds a target over `series`'s bar (`None`: the whole group), if the
    /// value is a finite positive number.
    pub fn target(&mut self, series: Option<&str>, value: f64) {
        if value.is_finite() && value > 0.0 {
            self.targets.push(Target {
                series: series.map(String::from),
                value,
            });
        }
    }

    /// The bar of `series`, if there is one.
    pub fn value(&self, series: &str) -> Option<f64> {
        self.bars.iter().find(|b| b.0 == series).map(|b| b.1)
    }
}

/// Bars are added to the group named `label`, made on first use.
pub fn push_bar(groups: &mut Vec<BarGroup>, label: String, series: String, value: f64) {
    match groups.iter_mut().find(|g| g.label == label) {
        Some(g) => g.bars.push((series, value)),
        None => groups.push(BarGroup {
            label,
            bars: vec![(series, value)],
            targets: Vec::new(),
        }),
    }
}

/// Twelve distinguishable colours (fuse-stat draws ten series).
const PALETTE: [&str; 12] = [
    "#2b6cb0", "#c53030", "#dd6b20", "#2f855a", "#6b46c1", "#718096", "#b7791f", "#00838f",
    "#d53f8c", "#1a202c", "#90cdf4", "#9ae6b4",
];
const TARGET_COLOUR: &str = "#e53e3e";
const FONT: f64 = 12.0;
const TITLE_FONT: f64 = 14.0;
const VALUE_FONT: f64 = 9.0;
const BAR_W: f64 = 16.0;
const PAD: f64 = 12.0;
const PLOT_H: f64 = 280.0;
/// Widest title line before it wraps.
const TITLE_WRAP: f64 = 640.0;
/// Values spanning more than this factor get a log axis.
const LOG_SPAN: f64 = 30.0;

/// Width of `text` at `size` px: 0.64 em a character, more than DejaVu
/// Sans's widest digits and lower case need, so estimates err wide.
fn text_w(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.64
}

/// The y axis: a value to its height above the axis, and its ticks.
enum Scale {
    Linear { max: f64 },
    Log { lo: f64, hi: f64 },
}

impl Scale {
    fn for_values(values: &[f64]) -> Scale {
        let pos: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let max = pos.iter().copied().fold(0.0f64, f64::max);
        let min = pos.iter().copied().fold(f64::INFINITY, f64::min);
        if max > 0.0 && max / min >= LOG_SPAN {
            Scale::Log {
                // A decade or so below the smallest value, so its bar
                // stands clear of the axis.
                lo: 10f64.powf((min / 2.0).log10().floor()),
                hi: nice_ceiling(max),
            }
        } else {
            Scale::Linear {
                max: nice_ceiling(max.max(1e-9)),
            }
        }
    }

    /// Fraction of the plot height (0 at the axis, 1 at the top).
    fn frac(&self, v: f64) -> f64 {
        let f = match self {
            Scale::Linear { max } => v / max,
            Scale::Log { lo, hi } => {
                if v <= 0.0 {
                    0.0
                } else {
                    (v / lo).log10() / (hi / lo).log10()
                }
            }
        };
        f.clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<f64> {
        match self {
            Scale::Linear { max } => {
                let step = nice_ceiling(max / 5.0);
                let n = (max / step).round() as usize;
                (0..=n).map(|i| step * i as f64).collect()
            }
            Scale::Log { lo, hi } => {
                // Powers of ten, and 2 and 5 times them where the axis
                // spans few decades; always both ends.
                let few = (hi / lo).log10() <= 2.5;
                let mut t = vec![*lo];
                let mut p = 10f64.powf(lo.log10().floor());
                while p <= *hi * (1.0 + 1e-9) {
                    let ms: &[f64] = if few { &[1.0, 2.0, 5.0] } else { &[1.0] };
                    for m in ms {
                        let v = m * p;
                        if v > lo * (1.0 + 1e-9) && v < hi * (1.0 - 1e-9) {
                            t.push(v);
                        }
                    }
                    p *= 10.0;
                }
                t.push(*hi);
                t
            }
        }
    }

    fn is_log(&self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

/// The smallest of 1, 2, 2.5, 5 times a power of ten at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|x| *x >= v * (1.0 - 1e-12))
        .unwrap_or(10.0 * p)
}

/// Splits `title` into lines no wider than [`TITLE_WRAP`], at spaces.
fn wrap(title: &str, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in title.split_whitespace() {
        let candidate = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if !cur.is_empty() && text_w(&candidate, size) > TITLE_WRAP {
            lines.push(std::mem::replace(&mut cur, word.to_string()));
        } else {
            cur = candidate;
        }
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// A grouped bar chart as a standalone SVG document: one group per
/// configuration, one coloured bar per series with its value above it
/// (written upwards, so neighbours never collide), targets as red lines.
/// One element per line, which the render test relies on.
pub fn bar_chart_svg(title: &str, y_label: &str, groups: &[BarGroup]) -> String {
    let mut series: Vec<&str> = Vec::new();
    for g in groups {
        for (s, _) in &g.bars {
            if !series.contains(&s.as_str()) {
                series.push(s);
            }
        }
    }
    let has_targets = groups.iter().any(|g| !g.targets.is_empty());
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|g| {
            g.bars
                .iter()
                .map(|b| b.1)
                .chain(g.targets.iter().map(|t| t.value))
        })
        .collect();
    let scale = Scale::for_values(&values);
    let ticks = scale.ticks();

    let title_lines = wrap(title, TITLE_FONT);
    let title_h = title_lines.len() as f64 * (TITLE_FONT + 4.0);
    let axis_note = if scale.is_log() {
        format!("{y_label} (log scale)")
    } else {
        y_label.to_string()
    };
    let tick_w = ticks
        .iter()
        .map(|t| text_w(&human(*t), FONT))
        .fold(0.0, f64::max);
    // Room above the tallest bar for its value, written upwards.
    let value_room = groups
        .iter()
        .flat_map(|g| g.bars.iter().map(|b| text_w(&human(b.1), VALUE_FONT)))
        .fold(0.0, f64::max)
        + 9.0;
    let group_w = groups
        .iter()
        .map(|g| (BAR_W * g.bars.len().max(1) as f64 + 14.0).max(text_w(&g.label, FONT) + 10.0))
        .collect::<Vec<f64>>();
    let legend_items: Vec<String> = series
        .iter()
        .map(|s| s.to_string())
        .chain(has_targets.then(|| "target".to_string()))
        .collect();
    let legend_w = legend_items
        .iter()
        .map(|s| text_w(s, FONT))
        .fold(0.0, f64::max)
        + 22.0;

    let left = PAD + FONT + 8.0 + tick_w + 8.0;
    let top = PAD + title_h + 8.0;
    let plot_top = top + value_room;
    let axis_y = plot_top + PLOT_H;
    let plot_w: f64 = group_w.iter().sum::<f64>().max(60.0);
    let legend_x = left + plot_w + 20.0;
    let title_w = title_lines
        .iter()
        .map(|l| text_w(l, TITLE_FONT))
        .fold(0.0, f64::max);
    let width = (legend_x + legend_w + PAD).max(PAD + title_w + PAD).ceil();
    let legend_h = 18.0 * legend_items.len() as f64;
    let y_label_w = text_w(&axis_note, FONT);
    let height = (axis_y + FONT + 14.0 + PAD)
        .max(top + legend_h + PAD)
        .max(plot_top + PLOT_H / 2.0 + y_label_w / 2.0 + PAD)
        .ceil();

    let y_of = |v: f64| axis_y - PLOT_H * scale.frac(v);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"{FONT}\">\n\
         <rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{height:.0}\" fill=\"white\"/>\n"
    );
    for (i, line) in title_lines.iter().enumerate() {
        s += &format!(
            "<text x=\"{PAD}\" y=\"{:.0}\" font-size=\"{TITLE_FONT}\" font-weight=\"bold\">{}</text>\n",
            PAD + TITLE_FONT + i as f64 * (TITLE_FONT + 4.0),
            esc(line)
        );
    }
    let mid = plot_top + PLOT_H / 2.0;
    let yl_x = PAD + FONT;
    s += &format!(
        "<text x=\"{yl_x:.0}\" y=\"{mid:.0}\" text-anchor=\"middle\" transform=\"rotate(-90 {yl_x:.0} {mid:.0})\">{}</text>\n",
        esc(&axis_note)
    );
    for t in &ticks {
        let y = y_of(*t);
        s += &format!(
            "<line x1=\"{left:.0}\" y1=\"{y:.1}\" x2=\"{:.0}\" y2=\"{y:.1}\" stroke=\"#e2e8f0\"/>\n\
             <text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            left + plot_w,
            left - 5.0,
            y + 4.0,
            human(*t)
        );
    }
    s += &format!(
        "<line x1=\"{left:.0}\" y1=\"{top:.0}\" x2=\"{left:.0}\" y2=\"{axis_y:.0}\" stroke=\"black\"/>\n\
         <line x1=\"{left:.0}\" y1=\"{axis_y:.0}\" x2=\"{:.0}\" y2=\"{axis_y:.0}\" stroke=\"black\"/>\n",
        left + plot_w
    );
    let mut gx = left;
    for (g, gw) in groups.iter().zip(&group_w) {
        let bars_w = BAR_W * g.bars.len() as f64;
        let x0 = gx + (gw - bars_w) / 2.0;
        for (bi, (name, v)) in g.bars.iter().enumerate() {
            let si = series.iter().position(|x| x == name).unwrap_or(0);
            let x = x0 + BAR_W * bi as f64;
            let y = y_of(*v);
            // Above the bar and above any target line over it.
            let label_y = g
                .targets
                .iter()
                .filter(|t| t.series.as_deref().is_none_or(|s| s == name))
                .map(|t| y_of(t.value) - 2.0)
                .fold(y, f64::min)
                - 3.0;
            let cx = x + BAR_W / 2.0;
            s += &format!(
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {}</title></rect>\n\
                 <text x=\"{cx:.1}\" y=\"{:.1}\" font-size=\"{VALUE_FONT}\" transform=\"rotate(-90 {cx:.1} {:.1})\" dy=\"3\">{}</text>\n",
                x + 1.0,
                BAR_W - 2.0,
                axis_y - y,
                PALETTE[si % PALETTE.len()],
                esc(name),
                human(*v),
                label_y,
                label_y,
                human(*v)
            );
        }
        for t in &g.targets {
            let (x1, x2) = match t
                .series
                .as_deref()
                .and_then(|n| g.bars.iter().position(|b| b.0 == n))
            {
                Some(bi) => (
                    x0 + BAR_W * bi as f64 - 2.0,
                    x0 + BAR_W * (bi + 1) as f64 + 2.0,
                ),
                None => (gx + 3.0, gx + gw - 3.0),
            };
            let y = y_of(t.value);
            s += &format!(
                "<line x1=\"{x1:.1}\" y1=\"{y:.1}\" x2=\"{x2:.1}\" y2=\"{y:.1}\" stroke=\"{TARGET_COLOUR}\" stroke-width=\"2.5\" stroke-dasharray=\"4 2\"><title>target: {}</title></line>\n",
                human(t.value)
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{}</text>\n",
            gx + gw / 2.0,
            axis_y + FONT + 6.0,
            esc(&g.label)
        );
        gx += gw;
    }
    for (i, name) in legend_items.iter().enumerate() {
        let y = top + 18.0 * i as f64;
        if has_targets && i == series.len() {
            s += &format!(
                "<line x1=\"{legend_x:.0}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"{TARGET_COLOUR}\" stroke-width=\"2.5\" stroke-dasharray=\"4 2\"/>\n",
                y + 6.0,
                legend_x + 14.0,
                y + 6.0
            );
        } else {
            s += &format!(
                "<rect x=\"{legend_x:.0}\" y=\"{y:.0}\" width=\"12\" height=\"12\" fill=\"{}\"/>\n",
                PALETTE[i % PALETTE.len()]
            );
        }
        s += &format!(
            "<text x=\"{:.0}\" y=\"{:.0}\">{}</text>\n",
            legend_x + 18.0,
            y + 10.0,
            esc(name)
        );
    }
    s += "</svg>\n";
    s
}

/// A value in at most five characters or so: 1.23M, 81.4k, 250, 0.50.
pub fn human(v: f64) -> String {
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e3 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else if a == 0.0 {
        "0".into()
    } else {
        // Two significant digits at least, however small.
        let decimals = (1.0 - a.log10().floor()).max(2.0) as usize;
        trim(format!("{v:.decimals$}"))
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(label: &str, bars: &[(&str, f64)]) -> BarGroup {
        BarGroup {
            label: label.into(),
            bars: bars.iter().map(|(s, v)| (s.to_string(), *v)).collect(),
            targets: Vec::new(),
        }
    }

    #[test]
    fn names_every_series_and_group() {
        let svg = bar_chart_svg(
            "t",
            "ops/s",
            &[group("T=2", &[("uvfs", 10.0), ("freebsd", 5.0)])],
        );
        assert!(svg.starts_with("<svg"));
        for needle in ["uvfs", "freebsd", "T=2", "</svg>"] {
            assert!(svg.contains(needle), "{needle} missing");
        }
        assert!(!svg.contains("log scale"), "{svg}");
        let ticks = Scale::for_values(&[438.0, 201.0]).ticks();
        assert_eq!(ticks, [0.0, 100.0, 200.0, 300.0, 400.0, 500.0]);
    }

    #[test]
    fn orders_of_magnitude_get_a_log_axis() {
        let g = [group(
            "1000 vnodes",
            &[("uvfs", 250.0), ("freebsd", 81_400.0)],
        )];
        let svg = bar_chart_svg("prune", "ns", &g);
        assert!(svg.contains("ns (log scale)"), "{svg}");
        // Ticks at powers of ten around the data.
        for t in [">100<", ">1k<", ">10k<", ">100k<"] {
            assert!(svg.contains(t), "{t} missing: {svg}");
        }
    }

    #[test]
    fn log_scale_keeps_small_bars_visible() {
        let s = Scale::for_values(&[250.0, 81_400.0]);
        assert!(s.is_log());
        assert!(s.frac(250.0) > 0.1, "{}", s.frac(250.0));
        assert_eq!(s.frac(100_000.0), 1.0);
    }

    #[test]
    fn targets_are_drawn_and_named_in_the_legend() {
        let mut g = group("write", &[("uvfs", 900.0), ("peer", 400.0)]);
        g.target(Some("uvfs"), 360.0);
        g.target(None, f64::NAN);
        assert_eq!(g.targets.len(), 1, "a NaN target is dropped");
        let svg = bar_chart_svg("seqio", "MiB/s", &[g]);
        assert!(svg.contains("<title>target: 360</title>"), "{svg}");
        assert!(svg.contains(">target</text>"), "{svg}");
    }

    #[test]
    fn long_titles_wrap_and_widen_the_image() {
        let title = "coherence: p99 time until a host-side change shows through the mount (lower is better; never = the wait)";
        let lines = wrap(title, TITLE_FONT);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().all(|l| text_w(l, TITLE_FONT) <= TITLE_WRAP));
        assert_eq!(lines.join(" "), title);
    }

    #[test]
    fn nice_ceilings_and_human_values() {
        assert_eq!(nice_ceiling(78_600.0), 100_000.0);
        assert_eq!(nice_ceiling(2.1), 2.5);
        assert_eq!(nice_ceiling(5.0), 5.0);
        assert_eq!(human(81_400.0), "81.4k");
        assert_eq!(human(1000.0), "1k");
        assert_eq!(human(0.5), "0.5");
        assert_eq!(human(1_250_000.0), "1.25M");
        assert_eq!(human(0.0), "0");
        assert_eq!(human(0.001), "0.001");
        assert_eq!(human(0.0172), "0.017");
    }

    #[test]
    fn escapes_markup_in_labels() {
        let svg = bar_chart_svg("a <b> & c", "y", &[group("x<y", &[("s&t", 1.0)])]);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains("x&lt;y"));
        assert!(!svg.contains("s&t"));
    }
}
