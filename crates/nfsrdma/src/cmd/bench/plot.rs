//! PNG plots in the manner of the paper's figures: throughput by read size
//! (Figures 15 and 16, one line per transport and reads in flight) and
//! CPU seconds per GiB by read size (Figure 18), with `plotters`' bitmap
//! backend. Text is drawn with a TrueType font found on the system (DejaVu
//! or Liberation); without one the plots are drawn without text.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::anyhow;
use plotters::prelude::*;

use super::report::{side_label, size_label, Agg, Op, Transport, Vers};

/// Fonts tried for labels, in order.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Registers the first readable font as "sans-serif"; false when none is.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        FONT_PATHS.iter().any(|p| {
            let Ok(bytes) = std::fs::read(p) else {
                return false;
            };
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
        })
    })
}

/// The in-flight counts drawn: all when few, else the smallest, the
/// middle one and the largest.
pub(crate) fn subset(in_flight: &[usize]) -> Vec<usize> {
    let mut v = in_flight.to_vec();
    v.sort_unstable();
    v.dedup();
    if v.len() <= 3 {
        return v;
    }
    let (first, mid, last) = (v[0], v[v.len() / 2], v[v.len() - 1]);
    vec![first, mid, last]
}

/// One line of a plot: label, colour, points (x index, y).
struct Line {
    label: String,
    color: RGBColor,
    filled: bool,
    points: Vec<(f64, f64)>,
}

fn color(t: Transport, i: usize) -> RGBColor {
    const RDMA: [RGBColor; 4] = [
        RGBColor(214, 39, 40),
        RGBColor(255, 127, 14),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
    ];
    const TCP: [RGBColor; 4] = [
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(23, 190, 207),
        RGBColor(148, 103, 189),
    ];
    match t {
        Transport::Rdma => RDMA[i % RDMA.len()],
        Transport::Tcp => TCP[i % TCP.len()],
    }
}

/// Draws `{op}-throughput.png` and `{op}-cpu.png` in `dir`; returns their
/// paths (none when `points` has no point of `op`).
pub(crate) fn draw(
    dir: &Path,
    op: Op,
    points: &[Agg],
    in_flight: &[usize],
) -> anyhow::Result<Vec<PathBuf>> {
    let pts: Vec<&Agg> = points.iter().filter(|p| p.op == op).collect();
    if pts.is_empty() {
        return Ok(Vec::new());
    }
    let mut sizes: Vec<u32> = pts.iter().map(|p| p.io_size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let x_of = |s: u32| sizes.iter().position(|&v| v == s).unwrap_or(0) as f64;
    let flights = subset(in_flight);
    let mut transports: Vec<(Transport, Vers)> =
        pts.iter().map(|p| (p.transport, p.vers)).collect();
    transports.sort_unstable();
    transports.dedup();

    let mut tput = Vec::new();
    let mut cpu = Vec::new();
    for (k, &(tr, v)) in transports.iter().enumerate() {
        let t = side_label(tr, v);
        // Each version of a transport gets the next shades of its colours.
        let shade = transports[..k].iter().filter(|o| o.0 == tr).count() * flights.len();
        for (i, &nf) in flights.iter().enumerate() {
            let mine: Vec<&&Agg> = pts
                .iter()
                .filter(|p| p.transport == tr && p.vers == v && p.in_flight == nf)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let c = color(tr, shade + i);
            tput.push(Line {
                label: format!("{t} x{nf}"),
                color: c,
                filled: true,
                points: mine.iter().map(|p| (x_of(p.io_size), p.mib_s())).collect(),
            });
            cpu.push(Line {
                label: format!("{t} x{nf} client"),
                color: c,
                filled: true,
                points: mine
                    .iter()
                    .map(|p| (x_of(p.io_size), p.client_per_gib()))
                    .collect(),
            });
            let server: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|p| p.server_per_gib().map(|s| (x_of(p.io_size), s)))
                .collect();
            if !server.is_empty() {
                cpu.push(Line {
                    label: format!("{t} x{nf} server"),
                    color: c,
                    filled: false,
                    points: server,
                });
            }
        }
    }
    let labels: Vec<String> = sizes.iter().map(|&s| size_label(s)).collect();
    let a = dir.join(format!("{op}-throughput.png"));
    chart(
        &a,
        &format!("sequential {op}: throughput by {op} size"),
        "MiB/s",
        &labels,
        &tput,
    )?;
    let b = dir.join(format!("{op}-cpu.png"));
    chart(
        &b,
        &format!("sequential {op}: CPU seconds per GiB (filled: client, open: server)"),
        "CPU s/GiB",
        &labels,
        &cpu,
    )?;
    Ok(vec![a, b])
}

fn chart(
    path: &Path,
    title: &str,
    y_desc: &str,
    labels: &[String],
    lines: &[Line],
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let text = font_ready();
    let root = BitMapBackend::new(path, (1000, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let n = labels.len().max(1) as f64;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(16);
    if text {
        builder
            .caption(title, ("sans-serif", 22))
            .x_label_area_size(44)
            .y_label_area_size(64);
    } else {
        builder.x_label_area_size(8).y_label_area_size(8);
    }
    let mut chart = builder
        .build_cartesian_2d(-0.25f64..(n - 0.75), 0.0f64..y_max)
        .map_err(|e| err(&e))?;
    let fmt_x = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_labels(labels.len() * 4 + 1)
            .x_label_formatter(&fmt_x)
            .x_desc("READ/WRITE size")
            .y_desc(y_desc);
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| err(&e))?;
    for l in lines {
        let c = l.color;
        let series = chart
            .draw_series(LineSeries::new(l.points.iter().copied(), c.stroke_width(2)))
            .map_err(|e| err(&e))?;
        if text {
            series.label(l.label.as_str()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
            });
        }
        let style = if l.filled {
            c.filled()
        } else {
            c.stroke_width(2)
        };
        chart
            .draw_series(l.points.iter().map(|&p| Circle::new(p, 4, style)))
            .map_err(|e| err(&e))?;
    }
    if text && !lines.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_keeps_few_and_thins_many() {
        assert_eq!(subset(&[4, 1]), vec![1, 4]);
        assert_eq!(subset(&[1, 2, 4, 8, 16]), vec![1, 4, 16]);
        assert_eq!(subset(&[2, 2, 2]), vec![2]);
    }
}
