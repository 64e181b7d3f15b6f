//! The queues and workers pages' charts and figures: stacked per-minute bars of the last hour
//! as inline SVG (colours from CSS classes `series-<name>`, never inline fills), each with an
//! `aria-label` summary and the same numbers as a table in `<details>`; durations and ages as
//! people read them.

use maud::{Markup, html};
use mysqlq::admin::Timestamp;

/// One series of a stacked chart: its CSS class suffix (`series-<class>`) and its label.
pub(super) struct Series<'a> {
    pub(super) class: &'a str,
    pub(super) label: &'a str,
}

/// One minute of a stacked chart: how long ago (0 = the current minute, up to 59), its start,
/// and a value per series.
pub(super) struct Column {
    pub(super) minutes_ago: u32,
    pub(super) minute: Timestamp,
    pub(super) values: Vec<u64>,
}

/// One rectangle of a stacked chart.
struct Bar<'a> {
    class: &'a str,
    x: u64,
    y: u64,
    h: u64,
    minutes_ago: u32,
    n: u64,
    title: String,
}

/// Width, height and the left margin (axis labels) of a chart, in SVG units.
const W: u64 = 600;
const H: u64 = 120;
const LEFT: u64 = 40;
const TOP: u64 = 10;

/// A stacked bar per minute of the last hour (minutes without a column are left empty), the
/// series stacked in the order given. `id` names the figure; `what` says what is counted, for
/// the label and the table's caption.
pub(super) fn stacked(id: &str, what: &str, series: &[Series<'_>], columns: &[Column]) -> Markup {
    let max = columns
        .iter()
        .map(|c| c.values.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let bar = (W - LEFT) / 60;
    let latest = columns.iter().min_by_key(|c| c.minutes_ago);
    let summary = latest.map_or_else(
        || "no minute counted yet".to_owned(),
        |c| {
            let parts: Vec<String> = series
                .iter()
                .zip(&c.values)
                .map(|(s, v)| format!("{} {v}", s.label))
                .collect();
            format!("latest minute: {}", parts.join(", "))
        },
    );
    let mut bars = Vec::new();
    for c in columns {
        let x = LEFT + u64::from(59 - c.minutes_ago.min(59)) * bar;
        let mut base = H;
        for (s, &n) in series.iter().zip(&c.values) {
            if n == 0 {
                continue;
            }
            // At least a pixel, within what is left above the stack.
            let h = ((H - TOP) * n / max).max(1).min(base - TOP);
            if h == 0 {
                continue;
            }
            base -= h;
            bars.push(Bar {
                class: s.class,
                x,
                y: base,
                h,
                minutes_ago: c.minutes_ago,
                n,
                title: format!("{} {} {n}", hhmm(&c.minute), s.label),
            });
        }
    }
    let label = format!(
        "{what} per minute over the last hour, {} minutes with data; {summary}",
        columns.len()
    );
    html! {
        figure.chart.stacked id=(id) data-live {
            svg viewBox=(format!("0 0 {} {}", W + 5, H + 20)) role="img" aria-label=(label) {
                line.axis x1=(LEFT) y1=(H) x2=(W) y2=(H) {}
                line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(H) {}
                text.axis-label x="2" y=(TOP + 8) { (max) }
                text.axis-label x="2" y=(H) { "0" }
                text.axis-label x=(LEFT) y=(H + 14) { "-60 min" }
                text.axis-label x=(W - 20) y=(H + 14) { "now" }
                // A tick under the axis for each minute with data, so that a minute counted
                // as all zeros reads apart from a minute not counted.
                @for c in columns {
                    rect.counted x=(LEFT + u64::from(59 - c.minutes_ago.min(59)) * bar) y=(H + 1)
                        width=(bar - 1) height="2" data-minutes-ago=(c.minutes_ago) {}
                }
                @for b in &bars {
                    rect class=(format!("series-{}", b.class)) x=(b.x) y=(b.y) width=(bar - 1) height=(b.h)
                        data-minutes-ago=(b.minutes_ago) data-n=(b.n) {
                        title { (b.title) }
                    }
                }
            }
            figcaption {
                (legend(series))
                " — per minute, last hour (UTC)"
            }
            details {
                summary { "Show as a table" }
                table {
                    caption { (what) " per minute (UTC)" }
                    thead { tr {
                        th scope="col" { "minute" }
                        @for s in series { th.num scope="col" { (s.label) } }
                    } }
                    tbody {
                        @if columns.is_empty() { tr { td colspan=(series.len() + 1) .muted { "no data in the last hour" } } }
                        @for c in columns {
                            tr {
                                th scope="row" { (hhmm(&c.minute)) }
                                @for v in &c.values { td.num { (v) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The series' colour swatches and names.
pub(super) fn legend(series: &[Series<'_>]) -> Markup {
    html! {
        span.legend {
            @for s in series {
                span.legend-item {
                    svg.swatch width="10" height="10" viewBox="0 0 10 10" aria-hidden="true" {
                        rect class=(format!("series-{}", s.class)) width="10" height="10" {}
                    }
                    " " (s.label) " "
                }
            }
        }
    }
}

/// `10:03` of a minute (UTC).
fn hhmm(t: &Timestamp) -> String {
    t.format("%H:%M").to_string()
}

/// A duration in microseconds as people read it: `850 µs`, `20.1 ms`, `1.25 s`, `3m 4s`,
/// `2h 5m`.
pub(super) fn duration_us(us: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let f = us as f64;
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => format!("{:.1} ms", f / 1e3),
        1_000_000..60_000_000 => format!("{:.2} s", f / 1e6),
        _ => {
            let s = us / 1_000_000;
            if s < 3600 {
                format!("{}m {}s", s / 60, s % 60)
            } else {
                format!("{}h {}m", s / 3600, (s % 3600) / 60)
            }
        }
    }
}

/// `4 s ago`, `3 min ago`, `2 h 5 min ago` of an age in microseconds.
pub(super) fn ago_us(us: u64) -> String {
    let s = us / 1_000_000;
    match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        _ => format!("{} h {} min ago", s / 3600, (s % 3600) / 60),
    }
}

/// `2024-05-01 10:00:01 UTC`.
pub(super) fn utc(t: &Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ages_read_as_people_write_them() {
        assert_eq!(duration_us(850), "850 µs");
        assert_eq!(duration_us(20_100), "20.1 ms");
        assert_eq!(duration_us(1_250_000), "1.25 s");
        assert_eq!(duration_us(184_000_000), "3m 4s");
        assert_eq!(duration_us(7_500_000_000), "2h 5m");
        assert_eq!(ago_us(4_200_000), "4 s ago");
        assert_eq!(ago_us(200_000_000), "3 min ago");
        assert_eq!(ago_us(7_500_000_000), "2 h 5 min ago");
    }

    #[test]
    fn bars_stack_with_css_classes_and_a_table_alternative() {
        let minute = Timestamp::from_timestamp(600, 0).unwrap();
        let series = [
            Series {
                class: "ready",
                label: "ready",
            },
            Series {
                class: "running",
                label: "running",
            },
        ];
        let columns = [Column {
            minutes_ago: 0,
            minute,
            values: vec![3, 1],
        }];
        let html = stacked("depth", "Jobs by state", &series, &columns).into_string();
        assert!(html.contains(r#"role="img""#), "{html}");
        assert!(html.contains("latest minute: ready 3, running 1"), "{html}");
        assert_eq!(
            html.matches(r#"<rect class="series-ready""#).count(),
            2,
            "bar and swatch"
        );
        assert!(html.contains(r#"<rect class="series-running""#));
        assert!(!html.contains("fill="), "colours come from CSS: {html}");
        assert!(html.contains("<details>") && html.contains("<th scope=\"row\">00:10</th>"));
    }
}
