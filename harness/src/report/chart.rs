//! SVG pictures (plotters' SVG backend): a benchmark's trend over the history on main with its
//! change points and levels (`harness trend --charts`), and one row's per-round values of base
//! and head side by side (the distribution picture of a PR report, `harness report --charts`).
//!
//! Every string drawn comes from results or a history, so from code a pull request may have
//! changed: titles go through [`label`] (printable ASCII, capped) and plotters escapes `<`, `>`
//! and `&` in SVG text; file names come from [`file_name`], never from a benchmark id as is.

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;
use sha2::{Digest, Sha256};

use crate::report::format::short_sha;

/// A series to draw (built from a `history::Trend` by the caller: `report` stays below
/// `history` in the module order).
#[derive(Clone, Debug)]
pub struct Series<'a> {
    pub host: &'a str,
    pub id: &'a str,
    /// Commits in order, and the median ns/iteration at each.
    pub shas: &'a [String],
    pub median_ns: &'a [f64],
    /// Change points: index of the first commit at the new level, `after / before`.
    pub changes: Vec<(usize, f64)>,
}

const WIDTH: u32 = 960;
const HEIGHT: u32 = 400;
const SERIES: RGBColor = RGBColor(31, 119, 180);
const LEVEL: RGBColor = RGBColor(44, 160, 44);
const CHANGE: RGBColor = RGBColor(214, 39, 40);
const BASE: RGBColor = RGBColor(127, 127, 127);

/// A string fit for a chart: printable ASCII only (others become `?`), at most `max` chars.
pub fn label(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if s.chars().count() > max {
        out.push_str("...");
    }
    out
}

/// The file name of a picture for `parts` (e.g. host and benchmark id): the id's safe
/// characters for reading (at most 80), then 12 hex digits of a hash of all parts, so two ids
/// that differ only in unsafe characters never share a file. Never a path: no `/`, no leading
/// dot.
pub fn file_name(parts: &[&str], ext: &str) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let hash: String = h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let last = parts.last().copied().unwrap_or("");
    let readable: String = last
        .chars()
        .filter(|c| c.is_ascii())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    let readable = readable.trim_matches('_');
    if readable.is_empty() {
        format!("{hash}.{ext}")
    } else {
        format!("{readable}-{hash}.{ext}")
    }
}

/// ns values in a unit that keeps them readable: (divisor, unit name).
fn unit_of(max_ns: f64) -> (f64, &'static str) {
    if max_ns >= 1e9 {
        (1e9, "s")
    } else if max_ns >= 1e6 {
        (1e6, "ms")
    } else if max_ns >= 1e3 {
        (1e3, "us")
    } else {
        (1.0, "ns")
    }
}

fn draw_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

/// The y range around `values` with a margin, never empty.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.15).max(hi.abs() * 0.01).max(1e-12);
    (lo - pad, hi + pad)
}

/// A benchmark's series on one host: the median per commit (dots and line), the level of each
/// segment between change points (its median, a flat line) and each change point (a dashed
/// vertical line between the last commit at the old level and the first at the new, labelled
/// with the change in percent). The x axis is the commit order, labelled with short shas.
pub fn trend_svg(t: &Series) -> anyhow::Result<String> {
    let n = t.median_ns.len();
    let (div, unit) = unit_of(t.median_ns.iter().copied().fold(0.0, f64::max));
    let ys: Vec<f64> = t.median_ns.iter().map(|v| v / div).collect();
    let (lo, hi) = y_range(ys.iter().copied());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title = format!("{} on {}", label(t.id, 90), label(t.host, 24));
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n.max(1) as f64 - 0.5), lo..hi)
            .map_err(draw_err)?;
        let shas = t.shas.to_vec();
        let step = n.div_ceil(12).max(1);
        chart
            .configure_mesh()
            .x_desc(format!("commit on main (oldest left; {n} commits)"))
            .y_desc(format!("median per iteration ({unit})"))
            .x_labels(n.clamp(2, 60))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 || i as usize >= shas.len() {
                    return String::new();
                }
                let i = i as usize;
                if i.is_multiple_of(step) || i + 1 == shas.len() {
                    short_sha(&shas[i]).to_string()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| {
                if hi - lo >= 10.0 {
                    format!("{y:.0}")
                } else if hi - lo >= 1.0 {
                    format!("{y:.1}")
                } else {
                    format!("{y:.3}")
                }
            })
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_err)?;
        chart
            .draw_series(LineSeries::new(
                ys.iter().enumerate().map(|(i, y)| (i as f64, *y)),
                SERIES.stroke_width(1),
            ))
            .map_err(draw_err)?
            .label("median of the commit's rounds")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], SERIES));
        chart
            .draw_series(
                ys.iter()
                    .enumerate()
                    .map(|(i, y)| Circle::new((i as f64, *y), 3, SERIES.filled())),
            )
            .map_err(draw_err)?;
        // Levels: the segments between change points at their medians.
        let mut bounds: Vec<usize> = vec![0];
        bounds.extend(t.changes.iter().map(|c| c.0));
        bounds.push(n);
        for (k, w) in bounds.windows(2).enumerate() {
            let (a, b) = (w[0], w[1]);
            if a >= b {
                continue;
            }
            let mut seg = ys[a..b].to_vec();
            seg.sort_by(f64::total_cmp);
            let med = seg[seg.len() / 2];
            let s = chart
                .draw_series(LineSeries::new(
                    vec![(a as f64 - 0.4, med), (b as f64 - 0.6, med)],
                    LEVEL.stroke_width(2),
                ))
                .map_err(draw_err)?;
            if k == 0 {
                s.label("level between change points")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], LEVEL));
            }
        }
        for (k, &(index, ratio)) in t.changes.iter().enumerate() {
            let x = index as f64 - 0.5;
            let dashes = (0..24).map(|j| {
                let y0 = lo + (hi - lo) * (j as f64 / 24.0);
                let y1 = lo + (hi - lo) * ((j as f64 + 0.5) / 24.0);
                PathElement::new(vec![(x, y0), (x, y1)], CHANGE.stroke_width(2))
            });
            let s = chart.draw_series(dashes).map_err(draw_err)?;
            if k == 0 {
                s.label("change point (E-divisive, p <= 0.01)")
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], CHANGE));
            }
            let text = format!(
                "{:+.1} % at {}",
                (ratio - 1.0) * 100.0,
                t.shas.get(index).map_or("?", |s| short_sha(s))
            );
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x + 0.15, hi - (hi - lo) * (0.06 + 0.07 * (k % 3) as f64)),
                    ("sans-serif", 13).into_font().color(&CHANGE),
                )))
                .map_err(draw_err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// One row of a comparison: every round's value of base (left, grey) and head (right, blue),
/// each round's pair joined by a line, with each side's median as a bar. `values` are ns per
/// iteration (benchmarks) or ms (end-to-end rows, `unit_ms`).
pub fn rounds_svg(
    id: &str,
    base: &[f64],
    head: &[f64],
    unit_ms: bool,
    verdict: &str,
) -> anyhow::Result<String> {
    let all = base.iter().chain(head).copied().filter(|v| v.is_finite());
    let max = all.clone().fold(0.0, f64::max);
    let (div, unit) = if unit_ms { (1.0, "ms") } else { unit_of(max) };
    let b: Vec<f64> = base.iter().map(|v| v / div).collect();
    let h: Vec<f64> = head.iter().map(|v| v / div).collect();
    let (lo, hi) = y_range(b.iter().chain(&h).copied());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (480, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(label(id, 60), ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.6f64..1.6f64, lo..hi)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            // Ticks every 0.1, so 0 and 1 are among them; only those two are labelled.
            .x_labels(23)
            .disable_x_mesh()
            .x_label_formatter(&|x| match x.round() as i64 {
                0 if (x - 0.0).abs() < 1e-6 => "base".into(),
                1 if (x - 1.0).abs() < 1e-6 => "head".into(),
                _ => String::new(),
            })
            .x_desc(label(verdict, 60))
            .y_desc(format!("per round ({unit})"))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_err)?;
        let rounds = b.len().min(h.len());
        chart
            .draw_series((0..rounds).map(|r| {
                PathElement::new(
                    vec![(0.0, b[r]), (1.0, h[r])],
                    BLACK.mix(0.2).stroke_width(1),
                )
            }))
            .map_err(draw_err)?;
        for (x, vals, color) in [(0.0, &b, BASE), (1.0, &h, SERIES)] {
            // A little spread so equal values stay visible.
            let k = vals.len().max(1) as f64;
            chart
                .draw_series(vals.iter().enumerate().map(|(i, y)| {
                    let dx = (i as f64 / k - 0.5) * 0.12;
                    Circle::new((x + dx, *y), 4, color.filled())
                }))
                .map_err(draw_err)?;
            if !vals.is_empty() {
                let mut s = vals.to_vec();
                s.sort_by(f64::total_cmp);
                let med = s[s.len() / 2];
                chart
                    .draw_series(LineSeries::new(
                        vec![(x - 0.25, med), (x + 0.25, med)],
                        color.stroke_width(3),
                    ))
                    .map_err(draw_err)?;
            }
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// Writes `svg` to `dir/name` (created), atomically: a reader never sees half a chart.
pub fn write(dir: &std::path::Path, name: &str, svg: &str) -> anyhow::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, svg).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ChangePointConfig, e_divisive};

    fn series<'a>(shas: &'a [String], values: &'a [f64]) -> Series<'a> {
        Series {
            host: "host-1",
            id: "matmul/f32_t1/<script>&x",
            shas,
            median_ns: values,
            changes: e_divisive(values, &ChangePointConfig::default())
                .into_iter()
                .map(|c| (c.index, c.ratio))
                .collect(),
        }
    }

    #[test]
    fn a_trend_chart_marks_its_change_point_and_escapes_the_id() {
        let v: Vec<f64> = (0..30)
            .map(|i| {
                let noise = ((i * 7919) % 13) as f64 / 13.0 - 0.5;
                (if i < 18 { 1000.0 } else { 1030.0 }) * (1.0 + 0.004 * noise)
            })
            .collect();
        let shas: Vec<String> = (0..v.len()).map(|i| format!("{i:040x}")).collect();
        let t = series(&shas, &v);
        assert_eq!(t.changes.len(), 1, "{:?}", t.changes);
        let svg = trend_svg(&t).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(
            svg.contains("+3.0 % at 0000000"),
            "the change point's label"
        );
        assert!(!svg.contains("<script>"), "ids are escaped");
        assert!(svg.contains("&lt;script&gt;"), "the id is shown, escaped");
        // 30 dots, one per commit.
        assert_eq!(svg.matches("<circle").count(), 30);
    }

    #[test]
    fn file_names_are_plain_and_distinct() {
        let a = file_name(&["h", "../../etc/passwd"], "svg");
        assert!(!a.contains('/') && !a.starts_with('.'), "{a}");
        assert!(a.ends_with(".svg"));
        assert_ne!(
            file_name(&["h", "a/b"], "svg"),
            file_name(&["h", "a_b"], "svg")
        );
        assert_ne!(
            file_name(&["h1", "x"], "svg"),
            file_name(&["h2", "x"], "svg")
        );
        assert!(file_name(&["h", "\u{202e}"], "svg").len() == 16);
    }

    #[test]
    fn a_rounds_picture_has_both_sides() {
        let svg = rounds_svg(
            "add/f32/large",
            &[10.0, 11.0, 10.5],
            &[12.0, 12.5, 12.2],
            false,
            "slower +15 %",
        )
        .unwrap();
        assert_eq!(svg.matches("<circle").count(), 6);
        let texts: Vec<&str> = svg.split("<text").skip(1).collect();
        for side in ["base", "head"] {
            assert!(
                texts.iter().any(|t| t
                    .split('>')
                    .nth(1)
                    .is_some_and(|c| c.trim().starts_with(side))),
                "{side} label"
            );
        }
    }
}
