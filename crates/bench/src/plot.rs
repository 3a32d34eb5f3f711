//! PNG plots of benchmark results (plotters, with the DejaVu Sans font from Debian's
//! fonts-dejavu-core, which `scripts/setup` installs).

use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

pub(crate) fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT)
            .map_err(|e| format!("{FONT}: {e} (apt-get install fonts-dejavu-core)"))?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT}: not a usable font"))
    })
    .clone()
}

type Case = (u64, u64, String);

/// One plot per case (table size, frame size, flows): forwarded versus offered load of
/// every contender, the ideal line, and the generator's ceiling. Returns the file names.
pub fn forward_plots(out: &Path, rows: &[Value]) -> Result<Vec<String>, String> {
    register_font()?;
    let mut cases: BTreeMap<Case, BTreeMap<String, Vec<(f64, f64)>>> = BTreeMap::new();
    let mut ceilings: BTreeMap<Case, f64> = BTreeMap::new();
    let mut zero: BTreeMap<(Case, String), f64> = BTreeMap::new();
    for r in rows {
        let case = (
            r["table_prefixes"].as_u64().unwrap_or(0),
            r["frame_bytes"].as_u64().unwrap_or(0),
            r["flows"].as_str().unwrap_or("").to_string(),
        );
        let who = r["contender"].as_str().unwrap_or("").to_string();
        ceilings.insert(
            case.clone(),
            r["generator_ceiling_pps"].as_f64().unwrap_or(0.0),
        );
        match r["kind"].as_str() {
            Some("step") => cases
                .entry(case)
                .or_default()
                .entry(who)
                .or_default()
                .push((
                    r["offered_pps"].as_f64().unwrap_or(0.0) / 1e3,
                    r["forwarded_pps"].as_f64().unwrap_or(0.0) / 1e3,
                )),
            Some("zero_loss_pps") => {
                zero.insert(
                    (case, who),
                    r["zero_loss_pps"].as_f64().unwrap_or(0.0) / 1e3,
                );
            }
            _ => {}
        }
    }
    // As many colours as `bench forward` has built-in contenders (a run with every flag
    // draws seven), told apart in print as on screen; more contenders reuse them.
    let colors = [
        RGBColor(0, 90, 180),
        RGBColor(210, 80, 0),
        RGBColor(0, 140, 70),
        RGBColor(140, 0, 140),
        RGBColor(20, 20, 20),
        RGBColor(200, 160, 0),
        RGBColor(0, 170, 200),
        RGBColor(200, 0, 60),
    ];
    let mut files = Vec::new();
    for (case, series) in &cases {
        let (tsize, size, flows) = case;
        let name = format!("forward-{size}B-{flows}-flow-{tsize}-prefixes.png");
        let path = out.join(&name);
        // Two-flow cases have two generators: together they can offer up to twice one's
        // ceiling (on two cores shared with everything else, usually less).
        let gens = if flows == "two" { 2.0 } else { 1.0 };
        let ceil = ceilings.get(case).copied().unwrap_or(0.0) / 1e3 * gens;
        let max = series
            .values()
            .flatten()
            .map(|p| p.0.max(p.1))
            .fold(ceil, f64::max)
            * 1.08
            + 1.0;
        let root = BitMapBackend::new(&path, (900, 600)).into_drawing_area();
        let e = |e: String| format!("{name}: {e}");
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{size}-byte frames, {}, {tsize} prefixes",
                    match flows.as_str() {
                        "one" => "one flow",
                        "two" => "two flows",
                        _ => "many flows",
                    }
                ),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max, 0f64..max)
            .map_err(|x| e(x.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("offered load (kpps)")
            .y_desc("forwarded (kpps)")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (max, max)],
                RGBColor(180, 180, 180),
            ))
            .map_err(|x| e(x.to_string()))?
            .label("forwarded = offered")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RGBColor(180, 180, 180)));
        let grey = RGBColor(60, 60, 60);
        let dashes = (0..40).step_by(2).map(|i| {
            let y0 = max * i as f64 / 40.0;
            PathElement::new([(ceil, y0), (ceil, y0 + max / 40.0)], grey.stroke_width(2))
        });
        chart
            .draw_series(dashes)
            .map_err(|x| e(x.to_string()))?
            .label(if gens > 1.0 {
                format!("two generators' ceiling, at most {ceil:.0} kpps (2 x one's): beyond it the sources limit")
            } else {
                format!("generator ceiling {ceil:.0} kpps: beyond it the source is the limit")
            })
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(2)));
        for (i, (who, pts)) in series.iter().enumerate() {
            let c = colors[i % colors.len()];
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let z = zero.get(&(case.clone(), who.clone())).copied();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|x| e(x.to_string()))?
                .label(match z {
                    Some(z) => format!("{who} (zero-loss {z:.0} kpps)"),
                    None => who.clone(),
                })
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
                .map_err(|x| e(x.to_string()))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(e)?;
        root.present().map_err(|x| e(x.to_string()))?;
        files.push(name);
    }
    Ok(files)
}

/// `bench scale`: per frame size and table, each router's aggregate peak (solid) and
/// zero-loss rate (hollow) against the cores its elements use, with the ideal line (the
/// single forwarder's peak per core, times the cores) and the model's prediction for the
/// multistage routers (crosses). Returns the file names.
pub fn scale_plot(out: &Path, v: &Value) -> Result<Vec<String>, String> {
    register_font()?;
    type Series = BTreeMap<String, Vec<(f64, f64, f64, f64)>>;
    let mut cases: BTreeMap<(u64, u64), Series> = BTreeMap::new();
    for r in v["results"].as_array().into_iter().flatten() {
        let case = (
            r["table_prefixes"].as_u64().unwrap_or(0),
            r["frame_bytes"].as_u64().unwrap_or(0),
        );
        let who = r["contender"].as_str().unwrap_or("").to_string();
        cases
            .entry(case)
            .or_default()
            .entry(who)
            .or_default()
            .push((
                r["cores"].as_f64().unwrap_or(0.0),
                r["peak_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["zero_loss_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["model_pps"].as_f64().unwrap_or(0.0) / 1e6,
            ));
    }
    let colors = [
        RGBColor(0, 90, 180),
        RGBColor(210, 80, 0),
        RGBColor(0, 140, 70),
        RGBColor(140, 0, 140),
        RGBColor(120, 120, 0),
    ];
    let mut files = Vec::new();
    for ((tsize, size), series) in &cases {
        let name = format!("scale-{size}B-{tsize}-prefixes.png");
        let path = out.join(&name);
        let e = |e: String| format!("{name}: {e}");
        let max_x = series.values().flatten().map(|p| p.0).fold(1.0, f64::max) + 1.0;
        let per_core = series.get("forwarder").and_then(|s| s.first()).map(|p| p.1);
        let max_y = series
            .values()
            .flatten()
            .map(|p| p.1.max(p.3))
            .fold(0.0, f64::max)
            .max(per_core.unwrap_or(0.0) * 2.0)
            * 1.15
            + 0.01;
        let root = BitMapBackend::new(&path, (900, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{size}-byte frames, {tsize} prefixes, {} ports, machine of {} cores",
                    v["ports"], v["cores"]
                ),
                ("sans-serif", 22),
            )
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..max_x, 0f64..max_y)
            .map_err(|x| e(x.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("cores used by the router's elements")
            .y_desc("aggregate forwarded (Mpps)")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(x.to_string()))?;
        if let Some(pc) = per_core {
            let grey = RGBColor(160, 160, 160);
            chart
                // Ended where it leaves the chart (plotters does not clip a line).
                .draw_series(LineSeries::new(
                    [(0.0, 0.0), {
                        let x = if pc > 0.0 {
                            max_x.min(max_y / pc)
                        } else {
                            max_x
                        };
                        (x, pc * x)
                    }],
                    grey,
                ))
                .map_err(|x| e(x.to_string()))?
                .label("ideal: one forwarder's peak per core")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey));
        }
        for (i, (who, pts)) in series.iter().enumerate() {
            let c = colors[i % colors.len()];
            let mut pts = pts.clone();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(
                    pts.iter().map(|p| (p.0, p.1)),
                    c.stroke_width(2),
                ))
                .map_err(|x| e(x.to_string()))?
                .label(format!("{who}: peak (filled), zero-loss (hollow)"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
            chart
                .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 5, c.filled())))
                .map_err(|x| e(x.to_string()))?;
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| Circle::new((p.0, p.2), 5, c.stroke_width(2))),
                )
                .map_err(|x| e(x.to_string()))?;
            if who == "multistage" || who == "star" {
                chart
                    .draw_series(
                        pts.iter()
                            .map(|p| Cross::new((p.0, p.3), 6, c.stroke_width(2))),
                    )
                    .map_err(|x| e(x.to_string()))?
                    .label(format!("{who}: model, a core per element (cross)"))
                    .legend(move |(x, y)| Cross::new((x + 10, y), 6, c.stroke_width(2)));
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(e)?;
        root.present().map_err(|x| e(x.to_string()))?;
        files.push(name);
    }
    Ok(files)
}

/// `bench flood`'s plot: per contender, the transit forwarded (the median of the repeats,
/// filled, and every repeat, hollow) against the rate of the flood to the router.
pub fn flood_plot(out: &Path, v: &Value) -> Result<Vec<String>, String> {
    register_font()?;
    let mut series: BTreeMap<String, Vec<(f64, f64, bool)>> = BTreeMap::new();
    for r in v["summary"].as_array().into_iter().flatten() {
        series
            .entry(r["contender"].as_str().unwrap_or("").to_string())
            .or_default()
            .push((
                r["flood_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["transit_forwarded_pps"].as_f64().unwrap_or(0.0) / 1e6,
                true,
            ));
    }
    for r in v["points"].as_array().into_iter().flatten() {
        series
            .entry(r["contender"].as_str().unwrap_or("").to_string())
            .or_default()
            .push((
                r["flood_pps"].as_f64().unwrap_or(0.0) / 1e6,
                r["transit_forwarded_pps"].as_f64().unwrap_or(0.0) / 1e6,
                false,
            ));
    }
    let name = "flood.png".to_string();
    let path = out.join(&name);
    let e = |e: String| format!("{name}: {e}");
    let max_x = series.values().flatten().map(|p| p.0).fold(0.0, f64::max) * 1.05 + 0.01;
    let max_y = series.values().flatten().map(|p| p.1).fold(0.0, f64::max) * 1.3 + 0.01;
    let root = BitMapBackend::new(&path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "transit at {:.0} kpps beside a flood to the router, 64-byte frames",
                v["transit_pps"].as_f64().unwrap_or(0.0) / 1e3
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("flood to the router's address, offered (Mpps)")
        .y_desc("transit forwarded (Mpps)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let colors = [
        RGBColor(0, 90, 180),
        RGBColor(210, 80, 0),
        RGBColor(0, 140, 70),
    ];
    for (i, (who, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mut med: Vec<(f64, f64)> = pts.iter().filter(|p| p.2).map(|p| (p.0, p.1)).collect();
        med.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(med.iter().copied(), c.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(format!("{who}: median (filled), each run (hollow)"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(med.iter().map(|p| Circle::new(*p, 5, c.filled())))
            .map_err(|x| e(x.to_string()))?;
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| !p.2)
                    .map(|p| Circle::new((p.0, p.1), 4, c.stroke_width(1))),
            )
            .map_err(|x| e(x.to_string()))?;
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(e)?;
    root.present().map_err(|x| e(x.to_string()))?;
    Ok(vec![name])
}

/// Round trips as `scripts/plain-hosts` writes them (`rtt.csv`: a header, then
/// `router,round,ms` per request): per router, all rounds together.
pub fn parse_rtt_csv(text: &str) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if i == 0 || line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let ms = match f.as_slice() {
            [_, _, ms] => ms.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0),
            _ => None,
        };
        let Some(ms) = ms else {
            return Err(format!(
                "line {}: expected router,round,ms with ms a positive number, got {line:?}",
                i + 1
            ));
        };
        by.entry(f[0].to_string()).or_default().push(ms);
    }
    if by.is_empty() {
        return Err("no round trips in it".into());
    }
    for v in by.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    Ok(by)
}

/// `tessera bench rtt-plot`: per router, the share of requests whose round trip took
/// longer than a time (both axes logarithmic, so that the tail reads as well as the
/// middle), with the p99 line (a share of 1%) and a mark at `target_ms`.
pub fn rtt_plot(
    path: &Path,
    rtts: &BTreeMap<String, Vec<f64>>,
    title: &str,
    target_ms: f64,
) -> Result<(), String> {
    register_font()?;
    let e = |x: String| format!("{}: {x}", path.display());
    let all = rtts.values().flatten();
    let lo = all.clone().copied().fold(f64::MAX, f64::min).min(target_ms) * 0.8;
    let hi = all.copied().fold(0.0, f64::max).max(target_ms) * 1.25;
    let n_max = rtts.values().map(Vec::len).max().unwrap_or(1).max(1) as f64;
    let floor = (0.5 / n_max).min(0.005);
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(x.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), (floor..1.0).log_scale())
        .map_err(|x| e(x.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("round trip (ms)")
        .y_desc("share of requests slower")
        .x_label_formatter(&|x| short(*x))
        .y_label_formatter(&|y| short(*y))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|x| e(x.to_string()))?;
    let colors = [
        RGBColor(0, 90, 180),
        RGBColor(210, 80, 0),
        RGBColor(0, 140, 70),
        RGBColor(120, 120, 120),
        RGBColor(140, 0, 140),
    ];
    for (i, (who, v)) in rtts.iter().enumerate() {
        let c = colors[i % colors.len()];
        let n = v.len() as f64;
        let pts = v
            .iter()
            .enumerate()
            .map(|(k, t)| (*t, ((n - k as f64) / n).max(floor)));
        let q = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|x| e(x.to_string()))?
            .label(format!(
                "{who}: p50 {:.4} ms, p99 {:.4} ms ({} requests)",
                q(0.5),
                q(0.99),
                v.len()
            ))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    let grey = RGBColor(90, 90, 90);
    chart
        .draw_series(DashedLineSeries::new(
            [(lo, 0.01), (hi, 0.01)],
            6,
            4,
            grey.stroke_width(2),
        ))
        .map_err(|x| e(x.to_string()))?
        .label("1% of requests (p99)")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], grey.stroke_width(1)));
    chart
        .draw_series(LineSeries::new(
            [(target_ms, floor), (target_ms, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(|x| e(x.to_string()))?
        .label(format!("{target_ms} ms"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    legend(&mut chart, SeriesLabelPosition::LowerLeft).map_err(e)?;
    root.present().map_err(|x| e(x.to_string()))
}

/// The legend every plot here draws: the series' labels at `pos` on a white box with a
/// black border.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(pos)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| x.to_string())
}

/// A log axis' label: at most three significant digits, no trailing zeros.
fn short(v: f64) -> String {
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_csv_groups_by_router_and_names_a_bad_line() {
        let by = parse_rtt_csv("router,round,ms\nlinux,1,0.02\nforwarder,1,0.03\nlinux,2,0.01\n")
            .unwrap();
        assert_eq!(by["linux"], vec![0.01, 0.02]);
        assert_eq!(by["forwarder"], vec![0.03]);
        let err = parse_rtt_csv("router,round,ms\nlinux,1,0.02\nlinux,1,x\n").unwrap_err();
        assert!(err.starts_with("line 3:"), "{err}");
        assert!(parse_rtt_csv("router,round,ms\nlinux,1,-1\n").is_err());
        assert!(parse_rtt_csv("router,round,ms\n").is_err());
    }

    #[test]
    fn rtt_plot_draws_a_png() {
        let dir = std::env::temp_dir().join(format!("tessera-rtt-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let by =
            parse_rtt_csv("router,round,ms\nlinux,1,0.02\nlinux,1,0.2\nfloor,1,0.01\n").unwrap();
        let png = dir.join("rtt.png");
        rtt_plot(&png, &by, "test", 0.1).unwrap();
        let head = std::fs::read(&png).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(&head[1..4], b"PNG");
    }
}
