//! Every chart `uvfs bench` writes, rendered by `rsvg-convert` (Debian's
//! librsvg2-bin, installed by scripts/install-deps.sh): no text may reach
//! past the image, and no two texts may overlap.
//!
//! The check works on pixels, so it holds whatever font the renderer
//! picks for `sans-serif`: the chart is rendered on a canvas enlarged by
//! a margin on every side, with a transparent background, and any painted
//! pixel in the margin lies outside the image. Then each `<text>` element
//! is rendered alone the same way; its painted pixels give its true box,
//! and boxes must not intersect.
//!
//! The charts come from the workloads' own `chart` functions fed the rows
//! of the latest full run (docs/results/*.json), plus a prune run shaped
//! like seed 001's (uvfs hundreds of times below FreeBSD).

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use uvfs_bench::report::{bar_chart_svg, BarGroup, Report};

/// Margin around the image, px: wide enough for any stray label.
const MARGIN: u32 = 160;

/// A pixel box: x0, y0, x1, y1 (exclusive), in image coordinates.
type BoxPx = (i64, i64, i64, i64);

fn attr(tag: &str, name: &str) -> Option<f64> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let end = tag[at..].find('"')? + at;
    tag[at..end].trim_end_matches("px").parse().ok()
}

/// The SVG's root tag rewritten to show a margin around the image, and
/// its size.
fn widened_root(svg: &str) -> (String, u32, u32) {
    let root = svg.lines().next().expect("an empty SVG");
    assert!(root.starts_with("<svg"), "root on the first line: {root}");
    let w = attr(root, "width").expect("root width") as u32;
    let h = attr(root, "height").expect("root height") as u32;
    let mut keep = String::from("<svg");
    // Keep the root's presentation attributes (font family and size).
    for a in ["xmlns", "font-family", "font-size"] {
        let key = format!(" {a}=\"");
        if let Some(at) = root.find(&key) {
            let end = root[at + key.len()..].find('"').unwrap() + at + key.len();
            keep += &root[at..=end];
        }
    }
    let m = MARGIN as i64;
    keep += &format!(
        " width=\"{}\" height=\"{}\" viewBox=\"{} {} {} {}\">",
        w + 2 * MARGIN,
        h + 2 * MARGIN,
        -m,
        -m,
        w + 2 * MARGIN,
        h + 2 * MARGIN
    );
    (keep, w, h)
}

/// Renders an SVG document to RGBA pixels.
fn render(svg: &str) -> (u32, u32, Vec<u8>) {
    let mut child = Command::new("rsvg-convert")
        .args(["-f", "png"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "rsvg-convert is needed to check the charts: apt-get install librsvg2-bin \
             (scripts/install-deps.sh installs it)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(svg.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "rsvg-convert: {}\n{svg}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut dec = png::Decoder::new(&out.stdout[..]);
    dec.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        info.color_type,
        png::ColorType::Rgba,
        "a transparent canvas"
    );
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// The box of the painted pixels, in image coordinates (the margin
/// removed), or `None` if nothing was painted.
fn painted_box(svg: &str) -> Option<BoxPx> {
    let (w, h, px) = render(svg);
    let mut b: Option<BoxPx> = None;
    for y in 0..h as i64 {
        for x in 0..w as i64 {
            // Faint anti-aliasing fringes do not count.
            if px[((y * w as i64 + x) * 4 + 3) as usize] > 32 {
                let (x, y) = (x - MARGIN as i64, y - MARGIN as i64);
                b = Some(match b {
                    None => (x, y, x + 1, y + 1),
                    Some((x0, y0, x1, y1)) => (x0.min(x), y0.min(y), x1.max(x + 1), y1.max(y + 1)),
                });
            }
        }
    }
    b
}

/// Everything wrong with how `svg`'s texts lie; empty when all is well.
fn text_problems(svg: &str) -> Vec<String> {
    let (root, w, h) = widened_root(svg);
    let body: Vec<&str> = svg
        .lines()
        .skip(1)
        .filter(|l| *l != "</svg>")
        // The background: the canvas must stay transparent.
        .filter(|l| !(l.starts_with("<rect") && l.contains("fill=\"white\"")))
        .collect();
    let mut problems = Vec::new();
    let inside = |b: BoxPx| b.0 >= 0 && b.1 >= 0 && b.2 <= w as i64 && b.3 <= h as i64;
    let whole = format!("{root}\n{}\n</svg>\n", body.join("\n"));
    if let Some(b) = painted_box(&whole) {
        if !inside(b) {
            problems.push(format!("drawing spans {b:?}, image is {w}x{h}"));
        }
    }
    // Rendered four at a time: a chart has up to a hundred texts.
    let lines: Vec<&str> = body
        .iter()
        .copied()
        .filter(|l| l.starts_with("<text"))
        .collect();
    let boxes: Vec<Option<BoxPx>> = std::thread::scope(|scope| {
        let chunks: Vec<_> = lines
            .chunks(lines.len().div_ceil(4).max(1))
            .map(|chunk| {
                let root = &root;
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|l| painted_box(&format!("{root}\n{l}\n</svg>\n")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        chunks.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    let texts: Vec<(&str, BoxPx)> = lines
        .into_iter()
        .zip(boxes)
        .filter_map(|(l, b)| Some((l, b?)))
        .collect();
    for (i, (a, ba)) in texts.iter().enumerate() {
        if !inside(*ba) {
            problems.push(format!("outside the {w}x{h} image at {ba:?}: {a}"));
        }
        for (b, bb) in &texts[i + 1..] {
            // One pixel of slack for anti-aliased edges that touch.
            let overlap =
                ba.0.max(bb.0) < ba.2.min(bb.2) - 1 && ba.1.max(bb.1) < ba.3.min(bb.3) - 1;
            if overlap {
                problems.push(format!("overlap {ba:?} / {bb:?}: {a} / {b}"));
            }
        }
    }
    problems
}

fn assert_readable(name: &str, svg: &str) {
    let p = text_problems(svg);
    assert!(p.is_empty(), "{name}: {}", p.join("\n"));
}

fn report(json: &str) -> Report {
    Report::from_json(&serde_json::from_str::<Value>(json).unwrap()).expect("a report")
}

type ChartFn = fn(&Report) -> (String, String, Vec<BarGroup>);

fn check_workload(name: &str, json: &str, chart: ChartFn) -> String {
    let (title, y, groups) = chart(&report(json));
    assert!(!groups.is_empty(), "{name}: no bars");
    let svg = bar_chart_svg(&title, &y, &groups);
    assert_readable(name, &svg);
    svg
}

macro_rules! results {
    ($f:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/results/",
            $f
        ))
    };
}

#[test]
fn the_published_charts_are_drawn_from_their_json() {
    // What readers see in docs/results/ is what the checks below pass.
    for (name, json, svg, chart) in [
        (
            "statstorm",
            results!("statstorm.json"),
            results!("statstorm.svg"),
            uvfs_bench::statstorm::chart as ChartFn,
        ),
        (
            "prune",
            results!("prune.json"),
            results!("prune.svg"),
            uvfs_bench::prune::chart,
        ),
        (
            "memory",
            results!("memory.json"),
            results!("memory.svg"),
            uvfs_bench::memory::chart,
        ),
        (
            "readseek",
            results!("readseek.json"),
            results!("readseek.svg"),
            uvfs_bench::readseek::chart,
        ),
        (
            "fuse-stat",
            results!("fuse-stat.json"),
            results!("fuse-stat.svg"),
            uvfs_bench::fusestat::chart,
        ),
        (
            "seqio",
            results!("seqio.json"),
            results!("seqio.svg"),
            uvfs_bench::seqio::chart,
        ),
        (
            "coherence",
            results!("coherence.json"),
            results!("coherence.svg"),
            uvfs_bench::coherence::chart,
        ),
        (
            "devwork",
            results!("devwork.json"),
            results!("devwork.svg"),
            uvfs_bench::devwork::chart,
        ),
    ] {
        let (t, y, g) = chart(&report(json));
        assert!(
            bar_chart_svg(&t, &y, &g) == svg,
            "docs/results/{name}.svg is stale: uvfs bench all --redraw --out docs/results"
        );
    }
}

#[test]
fn the_hand_placed_prune_chart_fails_the_check() {
    // The chart as written before the layout was computed: its title
    // runs off the 388-px image and its two x labels overlap.
    let p = text_problems(include_str!("data/prune-hand-placed.svg"));
    assert!(
        p.iter()
            .any(|l| l.contains("outside") && l.contains("prune: CPU")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|l| l.contains("overlap") && l.contains("vnodes")),
        "{p:?}"
    );
}

#[test]
fn prune_chart_is_readable_and_logarithmic() {
    let svg = check_workload("prune", results!("prune.json"), uvfs_bench::prune::chart);
    assert!(svg.contains("(log scale)"), "{svg}");
    assert!(
        svg.contains("<title>target:"),
        "the CPU growth target: {svg}"
    );
    // Seed 001's shape: uvfs a few hundred ns, FreeBSD tens of thousands.
    let seed = r#"{"workload": "prune", "rows": [
        {"impl": "uvfs", "vnodes": 100000, "cpu_ns_per_recycled": 235.0},
        {"impl": "freebsd", "vnodes": 100000, "cpu_ns_per_recycled": 61500.0},
        {"impl": "uvfs", "vnodes": 1000000, "cpu_ns_per_recycled": 265.0},
        {"impl": "freebsd", "vnodes": 1000000, "cpu_ns_per_recycled": 81400.0}]}"#;
    let svg = check_workload("prune (seed 001)", seed, uvfs_bench::prune::chart);
    assert!(svg.contains("(log scale)"), "{svg}");
}

#[test]
fn statstorm_chart_is_readable() {
    let svg = check_workload(
        "statstorm",
        results!("statstorm.json"),
        uvfs_bench::statstorm::chart,
    );
    assert!(svg.contains("<title>target:"), "{svg}");
}

#[test]
fn memory_chart_is_readable() {
    let svg = check_workload("memory", results!("memory.json"), uvfs_bench::memory::chart);
    assert!(svg.contains("<title>target: 256</title>"), "{svg}");
}

#[test]
fn readseek_chart_is_readable() {
    let svg = check_workload(
        "readseek",
        results!("readseek.json"),
        uvfs_bench::readseek::chart,
    );
    assert!(svg.contains("<title>target:"), "{svg}");
}

#[test]
fn fuse_stat_chart_is_readable() {
    let svg = check_workload(
        "fuse-stat",
        results!("fuse-stat.json"),
        uvfs_bench::fusestat::chart,
    );
    assert!(svg.contains("<title>target:"), "{svg}");
}

#[test]
fn seqio_chart_is_readable() {
    let svg = check_workload("seqio", results!("seqio.json"), uvfs_bench::seqio::chart);
    assert!(svg.contains("<title>target:"), "{svg}");
}

#[test]
fn coherence_chart_is_readable() {
    let svg = check_workload(
        "coherence",
        results!("coherence.json"),
        uvfs_bench::coherence::chart,
    );
    assert!(svg.contains("<title>target: 10</title>"), "{svg}");
}

#[test]
fn devwork_chart_is_readable() {
    let svg = check_workload(
        "devwork",
        results!("devwork.json"),
        uvfs_bench::devwork::chart,
    );
    assert!(svg.contains("<title>target:"), "{svg}");
}

#[test]
fn long_labels_and_many_series_stay_readable() {
    let groups: Vec<BarGroup> = (0..3)
        .map(|i| BarGroup {
            label: format!("T={i} a rather long configuration label"),
            bars: (0..8)
                .map(|s| {
                    (
                        format!("series-with-a-long-name-{s}"),
                        10f64.powi(s) * 1.234,
                    )
                })
                .collect(),
            targets: Vec::new(),
        })
        .collect();
    let title = "a title much longer than any chart is wide, which has to wrap onto a second line and perhaps a third to stay inside the image";
    assert_readable(
        "synthetic",
        &bar_chart_svg(title, "units per second", &groups),
    );
}
