//! The report's line plots of cells: N-EV against the number of flips (one panel per
//! combination of the other axes) and test accuracy against the step (train campaigns).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use resilab_campaign::{Campaign, Row, Status};

use crate::Result;
use crate::format::{label, num, share_point};
use crate::metrics::Cell;
use crate::plots::{LineChart, LineFacets, Series, save, span};

/// A plot's caption and its files.
pub(crate) type Figure = (String, Vec<PathBuf>);

/// The palette index of a cell's series: the option of the first axis (not in `skip`) with
/// more than one option.
pub(crate) type Palette<'a> = dyn Fn(&BTreeMap<String, String>, &[&str]) -> Option<usize> + 'a;

const FLIPS: &str = "inject.injection_tries";

/// N-EV against flips: one panel per combination of the other varying axes, on shared axes.
pub(crate) fn nev_vs_flips(
    campaign: &Campaign,
    cells: &[Cell],
    fixed: &[&str],
    palette: &Palette<'_>,
    plots: &Path,
) -> Result<Option<Figure>> {
    if !campaign.axes.iter().any(|a| a.key == FLIPS) {
        return Ok(None);
    }
    let skip: Vec<&str> = fixed.iter().copied().chain([FLIPS]).collect();
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    for c in cells {
        let Some(x) = c.coords.get(FLIPS).and_then(|v| num(v)) else { continue };
        let l = label(&c.coords, &skip);
        let s = series.entry(l.clone()).or_insert_with(|| Series { label: l, color: palette(&c.coords, &skip), ..Series::default() });
        let (y, e) = share_point(&c.nev);
        s.points.push((x, y, e));
    }
    let mut series: Vec<Series> = series.into_values().collect();
    series.iter_mut().for_each(|s| s.points.sort_by(|a, b| a.0.total_cmp(&b.0)));
    let x_range = span(series.iter().flat_map(|s| s.points.iter().map(|p| p.0.log10()))).map(|(lo, hi)| (lo - 0.25, hi + 0.25));
    let chart = |title: String, series: Vec<Series>| LineChart {
        title,
        x_label: "bit flips per checkpoint (log scale)".into(),
        y_label: "runs with N-EV (%)".into(),
        log_x: true,
        y_range: Some((-2.0, 102.0)),
        x_range,
        categories: Vec::new(),
        series,
    };
    let caption = "N-EV vs number of flips (error bars: Wilson 95% intervals)".to_string();
    let stem = plots.join("nev_vs_flips");
    let files = match series.len() {
        0 => return Ok(None),
        1 => save(&chart(format!("N-EV vs flips ({})", campaign.name()), series), &stem)?,
        n => {
            let panels = series.into_iter().map(|s| chart(s.label.clone(), vec![s])).collect();
            save(&LineFacets { title: format!("N-EV vs flips ({})", campaign.name()), panels, columns: n.min(3) }, &stem)?
        }
    };
    Ok(Some((caption, files)))
}

/// Mean test accuracy against the step per cell, with the golden run beneath; the caption
/// says how many runs are left out (not `ok`, or without their accuracy record).
pub(crate) fn acc_vs_step(
    campaign: &Campaign,
    dir: &Path,
    rows: &[Row],
    cells: &[Cell],
    fixed: &[&str],
    palette: &Palette<'_>,
    plots: &Path,
) -> Result<Option<Figure>> {
    let (mut series, mut golden, mut left_out) = (Vec::<Series>::new(), BTreeMap::new(), 0usize);
    for c in cells {
        let mut sum: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.coords == c.coords) {
            let p = dir.join("runs").join(&r.id).join("compare.csv");
            let reader = (r.status == Status::Ok).then(|| csv::Reader::from_path(&p).ok()).flatten();
            let Some(mut rd) = reader else {
                left_out += 1;
                continue;
            };
            for rec in rd.records().flatten() {
                let (Some(step), Some(acc)) = (rec.get(0).and_then(|s| s.parse::<u64>().ok()), rec.get(1).and_then(num)) else { continue };
                let e = sum.entry(step).or_insert((0.0, 0));
                e.0 += acc;
                e.1 += 1;
                if let Some(g) = rec.get(2).and_then(num) {
                    golden.insert(step, g);
                }
            }
        }
        if !sum.is_empty() {
            let points = sum.iter().map(|(s, (a, n))| (*s as f64, 100.0 * a / *n as f64, None)).collect();
            series.push(Series { label: label(&c.coords, fixed), points, reference: false, color: palette(&c.coords, fixed) });
        }
    }
    if series.is_empty() {
        return Ok(None);
    }
    let points: Vec<_> = golden.iter().map(|(s, a)| (*s as f64, 100.0 * a, None)).collect();
    let reference = Series { label: "golden (fault-free)".into(), points, reference: true, color: None };
    let mut title = format!("Test accuracy vs step ({})", campaign.name());
    // One axis named in every label: named once, in the title, so that the legend keeps room.
    if let Some(key) = series.first().and_then(|s| s.label.split_once('=')).map(|(k, _)| format!("{k}="))
        && series.iter().all(|s| s.label.starts_with(&key) && !s.label[key.len()..].contains('='))
    {
        title = format!("{title}, by {}", key.trim_end_matches('='));
        series.iter_mut().for_each(|s| s.label = s.label[key.len()..].to_string());
    }
    // At most 8 cells to a panel, each panel with the golden run beneath.
    let panels: Vec<LineChart> = series
        .chunks(8)
        .map(|chunk| LineChart {
            title: if series.len() > 8 { String::new() } else { title.clone() },
            x_label: "training step".into(),
            y_label: "test accuracy (%)".into(),
            series: std::iter::once(reference.clone()).chain(chunk.iter().cloned()).collect(),
            ..LineChart::default()
        })
        .collect();
    let caption = match left_out {
        0 => "Test accuracy vs step, mean over runs, with the golden run (dashed, beneath)".to_string(),
        n => format!(
            "Test accuracy vs step, mean over runs, with the golden run (dashed, beneath); {n} run(s) left out: not ok, or no accuracy record"
        ),
    };
    let stem = plots.join("acc_vs_step");
    let files = match panels.as_slice() {
        [one] => save(one, &stem)?,
        _ => save(&LineFacets { title, panels, columns: 2 }, &stem)?,
    };
    Ok(Some((caption, files)))
}
