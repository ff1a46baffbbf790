//! The course map of the learning path: every lesson of course.toml in its part, arrows from
//! the lessons it builds on (`needs`), and its exercise.

use crate::svg::{Svg, Text, colour, legend};

/// The map, drawn from the course manifest.
pub fn course_map() -> String {
    let lessons = course::lessons();
    let mut parts: Vec<&str> = Vec::new();
    for lesson in &lessons {
        if !parts.contains(&lesson.part.as_str()) {
            parts.push(&lesson.part);
        }
    }
    let (box_w, box_h, column_gap, row_gap) = (250.0, 44.0, 60.0, 14.0);
    let column_x = |part: &str| {
        let column = parts.iter().position(|p| *p == part).expect("a listed part");
        40.0 + column as f64 * (box_w + column_gap)
    };
    let mut rows = vec![0usize; parts.len()];
    let mut placed = Vec::new(); // (number, x, y)
    for lesson in &lessons {
        let column = parts.iter().position(|p| *p == lesson.part).expect("a listed part");
        let (x, y) = (column_x(&lesson.part), 70.0 + rows[column] as f64 * (box_h + row_gap));
        rows[column] += 1;
        placed.push((lesson.number.clone(), x, y));
    }
    let tallest = rows.iter().copied().max().unwrap_or(0) as f64;
    let width = 80.0 + parts.len() as f64 * box_w + (parts.len() - 1) as f64 * column_gap;
    let height = 70.0 + tallest * (box_h + row_gap) + 60.0;
    let mut svg =
        Svg::titled(width, height, "The course: each lesson, what it builds on, and its exercise");
    for part in &parts {
        svg.text(column_x(part) + box_w / 2.0, 56.0, part, Text { bold: true, ..Text::CENTRED });
    }
    let at = |number: &str| placed.iter().find(|(n, _, _)| n == number).map(|&(_, x, y)| (x, y));
    for lesson in &lessons {
        let (x, y) = at(&lesson.number).expect("placed above");
        for need in &lesson.needs {
            let (nx, ny) = at(need).expect("needs are earlier lessons (checked by course)");
            let rows_apart = ((y - ny) / (box_h + row_gap)).round();
            if (nx - x).abs() > 1.0 {
                svg.arrow((nx + box_w, ny + box_h / 2.0), (x, y + box_h / 2.0));
            } else if rows_apart == 1.0 {
                svg.arrow((x + box_w / 2.0, ny + box_h), (x + box_w / 2.0, y));
            } else {
                // Past the lessons in between: out of the left side, down, and back in.
                let side = x - 6.0 * rows_apart;
                let (from_y, to_y) = (ny + box_h * 0.7, y + box_h * 0.3);
                svg.line((x, from_y), (side, from_y), colour::INK, 1.5, false);
                svg.line((side, from_y), (side, to_y), colour::INK, 1.5, false);
                svg.arrow((side, to_y), (x, to_y));
            }
        }
    }
    for lesson in &lessons {
        let (x, y) = at(&lesson.number).expect("placed above");
        let fill = if lesson.gpu { colour::LOADED } else { colour::FULL };
        let exercise = lesson.exercise.as_ref().map_or("no exercise yet".to_string(), |e| {
            format!("exercise: cargo grade {}", e.package)
        });
        let title = format!("{}. {}", lesson.number.trim_start_matches('0'), lesson.title);
        svg.labelled_box(x, y, box_w, box_h, fill, &[title, exercise]);
    }
    legend(&mut svg, 20.0, height - 20.0, colour::FULL, "runs on the CPU");
    legend(
        &mut svg,
        200.0,
        height - 20.0,
        colour::LOADED,
        "needs a GPU adapter (lavapipe will do)",
    );
    svg.finish("Map of the course: lessons, prerequisites and exercises")
}
