//! A hand-written SVG chart: one panel per mode with emitted, acknowledged and received
//! (cumulative, left axis) and the unpublished backlog (right axis) over time; the fault is
//! shaded.

use std::fmt::Write;

use crate::report::{title, DrillResult, ModeResult, Sample};

const WIDTH: f64 = 960.0;
const PANEL: f64 = 320.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// A line: name, colour, value of a sample, on the right axis.
type Series = (&'static str, &'static str, fn(&Sample) -> u64, bool);

/// The SVG document.
pub fn chart(d: &DrillResult) -> String {
    let modes: Vec<&ModeResult> = [d.baseline.as_ref(), d.ours.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let height = PANEL * modes.len().max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let t_max = modes
        .iter()
        .filter_map(|m| m.samples.last().map(|x| x.t))
        .fold(1.0_f64, f64::max);
    let count_max = modes
        .iter()
        .flat_map(|m| m.samples.iter())
        .map(|x| x.emitted.max(x.acked).max(x.received))
        .max()
        .unwrap_or(1);
    let count_max = nice(count_max);
    for (i, m) in modes.iter().enumerate() {
        panel(&mut s, d, m, i as f64 * PANEL, t_max, count_max);
    }
    s.push_str("</svg>\n");
    s
}

/// The smallest 1, 2 or 5 × 10^k (k ≥ 0) at or above `v`, so that fifths are round numbers.
fn nice(v: u64) -> f64 {
    let mut step = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            if m.saturating_mul(step) >= v {
                return m.saturating_mul(step).max(5) as f64;
            }
        }
        step = step.saturating_mul(10);
    }
}

fn panel(s: &mut String, d: &DrillResult, m: &ModeResult, y0: f64, t_max: f64, count_max: f64) {
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let (top, bottom) = (y0 + TOP, y0 + PANEL - BOTTOM);
    let backlog_max = nice(m.samples.iter().map(|x| x.backlog).max().unwrap_or(0));
    let x = |t: f64| x0 + (x1 - x0) * t / t_max;
    let yl = |v: f64| bottom - (bottom - top) * v / count_max;
    let yr = |v: f64| bottom - (bottom - top) * v / backlog_max;
    let _ = writeln!(
        s,
        r#"<text x="{x0}" y="{}" font-size="14" font-weight="bold">{} — {} {} s: lost {}, peak backlog {}</text>"#,
        y0 + 22.0,
        title(m),
        d.fault.name(),
        d.duration_s,
        m.lost,
        m.peak_backlog
    );
    // A degraded phase before the outage proper (cluster-kill: one node down; net-partition:
    // loss and slow link) is lighter.
    let outage_start = m.outage_start_s.max(m.fault_start_s);
    if outage_start > m.fault_start_s {
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#fce5cd" opacity="0.6"/>"##,
            x(m.fault_start_s),
            (x(outage_start) - x(m.fault_start_s)).max(1.0),
            bottom - top
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" fill="#b45f06">1 node down</text>"##,
            x(m.fault_start_s) + 4.0,
            top + 14.0
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#f4cccc" opacity="0.6"/>"##,
        x(outage_start),
        (x(m.fault_end_s) - x(outage_start)).max(1.0),
        bottom - top
    );
    let label = if outage_start > m.fault_start_s {
        "no quorum"
    } else {
        "fault"
    };
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{}" fill="#990000">{label}</text>"##,
        x(outage_start) + 4.0,
        top + if outage_start > m.fault_start_s {
            28.0
        } else {
            14.0
        }
    );
    let _ = writeln!(
        s,
        r##"<line x1="{:.1}" y1="{top}" x2="{:.1}" y2="{bottom}" stroke="#666" stroke-dasharray="4 3"/>"##,
        x(m.stop_s),
        x(m.stop_s)
    );
    // Axes, ticks and grid.
    let _ = writeln!(
        s,
        r##"<path d="M{x0},{top} V{bottom} H{x1} V{top}" fill="none" stroke="#333"/>"##
    );
    for k in 0..=5 {
        let f = f64::from(k) / 5.0;
        let y = bottom - (bottom - top) * f;
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{:.0}</text><text x="{}" y="{:.1}" fill="#b45f06">{:.0}</text>"##,
            x0 - 6.0,
            y + 4.0,
            count_max * f,
            x1 + 6.0,
            y + 4.0,
            backlog_max * f
        );
        let t = t_max * f;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{t:.0} s</text>"#,
            x(t),
            bottom + 16.0
        );
    }
    let series: [Series; 4] = [
        ("emit calls", "#3c78d8", |p| p.emitted, false),
        ("acknowledged", "#6aa84f", |p| p.acked, false),
        (
            "items received (subscriber)",
            "#674ea7",
            |p| p.received,
            false,
        ),
        (
            "unpublished backlog (right axis)",
            "#e69138",
            |p| p.backlog,
            true,
        ),
    ];
    for (i, (name, color, value, right)) in series.iter().enumerate() {
        let mut d = String::new();
        for (j, p) in m.samples.iter().enumerate() {
            let v = value(p) as f64;
            let y = if *right { yr(v) } else { yl(v) };
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if j == 0 { 'M' } else { 'L' },
                x(p.t),
                y
            );
        }
        let dash = if *right {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#
        );
        let lx = x0 + 10.0 + 200.0 * i as f64;
        let ly = bottom + 34.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"{dash}/><text x="{}" y="{}">{name}</text>"#,
            lx + 20.0,
            lx + 25.0,
            ly + 4.0
        );
    }
}
