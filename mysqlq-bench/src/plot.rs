//! The scaling scenario's plot: panels side by side in one SVG, each with its lines of jobs/s
//! against a log-scale x axis (plotters' SVG backend; text is left to the SVG viewer's fonts).

use std::path::Path;

use plotters::prelude::*;

/// One line of a panel: its label and its points `(x, jobs/s)`.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) label: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One panel: jobs/s against `x_label`, ticks at `xs` on a log scale.
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) xs: Vec<f64>,
    pub(crate) lines: Vec<Line>,
}

/// The colours of the lines, in order (framework, raw loop, …).
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Panel width and height, in pixels.
const PANEL: (u32, u32) = (520, 420);

/// Writes `panels` side by side under `caption` to `path` (an SVG file).
pub(crate) fn write_svg(path: &Path, caption: &str, panels: &[Panel]) -> Result<(), String> {
    let width = PANEL.0 * u32::try_from(panels.len().max(1)).unwrap_or(1);
    let root = SVGBackend::new(path, (width, PANEL.1 + 30)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(caption, ("sans-serif", 16))
        .map_err(|e| e.to_string())?;
    for (area, panel) in root
        .split_evenly((1, panels.len().max(1)))
        .iter()
        .zip(panels)
    {
        draw_panel(area, panel).map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| {
        format!(
            "cannot write the plot to {}: {e}; pass --plot with a path in an existing, writable directory",
            path.display()
        )
    })
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(area: &Area<'_>, panel: &Panel) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let lo = panel.xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = panel.xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo > 0.0 {
        (lo / 1.25, hi * 1.25)
    } else {
        (0.5, 2.0)
    };
    let top = panel
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    // Headroom for the legend, above the highest point.
    let top = if top > 0.0 { top * 1.3 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 14))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (lo..hi).log_scale().with_key_points(panel.xs.clone()),
            0f64..top,
        )?;
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc("jobs/s")
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, line) in panel.lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                line.points.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(line.label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
        chart.draw_series(
            line.points
                .iter()
                .map(|&p| Circle::new(p, 3, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_is_an_svg_with_every_label() {
        let dir = std::env::temp_dir().join(format!("mysqlq-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scaling.svg");
        let line = |label: &str, f: f64| Line {
            label: label.to_owned(),
            points: vec![(1.0, f), (4.0, 2.0 * f), (16.0, 3.0 * f)],
        };
        let panel = Panel {
            title: "one worker process".to_owned(),
            x_label: "concurrency".to_owned(),
            xs: vec![1.0, 4.0, 16.0],
            lines: vec![line("framework", 1000.0), line("raw loop", 900.0)],
        };
        write_svg(&path, "drain, 300 jobs", &[panel.clone(), panel]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        for text in [
            "framework",
            "raw loop",
            "concurrency",
            "jobs/s",
            "drain, 300 jobs",
        ] {
            assert!(svg.contains(text), "no {text} in the plot");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
