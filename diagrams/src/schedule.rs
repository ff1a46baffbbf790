//! The grid's schedule in lesson 10's versions 8 to 10: the order in which each workgroup reads
//! the tiles of K and V (`KeyOrder::Rotated`, the shaders' `kv_tile` and `rotation`), and with
//! the causal mask which query tile each workgroup takes (`QueryOrder::LongestFirst`, the
//! shaders' `assignment`). The orders are not copied: they are what version 10's own WGSL,
//! specialised by the lesson for the tiles it prefers, computes when [`crate::shader`] runs its
//! functions on a small example.

use lesson10::{LeaveOut, PairTiles, QueryOrder, TileShape, V10, Version};

use crate::shader::{Shader, Value, anchored};
use crate::svg::{Svg, Text, colour, legend};

/// The head dimension of the example: where version 10 is the lesson's fastest.
pub const HEAD_DIM: usize = 128;

/// Query tiles (workgroups) of a slice in the example.
pub const QUERY_TILES: usize = 8;

/// Slices (batch x heads) in the example of the launch order.
pub const SLICES: usize = 4;

/// Version 10's tiles for the example: of the shapes it prefers at [`HEAD_DIM`], the one whose
/// query and key tiles are the same size (so that 8 query tiles meet 8 key tiles), with the
/// order of query tiles it prefers but in groups of `group` workgroups instead.
pub fn example_tiles(group: usize) -> Result<PairTiles, String> {
    let preferred = V10::preferred(HEAD_DIM);
    let square = preferred.iter().find(|t| t.block_q() == t.block_kv).ok_or_else(|| {
        format!("version 10 prefers no shape with as many query rows as keys: {preferred:?}")
    })?;
    let query_order = match square.query_order {
        QueryOrder::LongestFirst { .. } => QueryOrder::LongestFirst { workgroups: group },
        QueryOrder::AsLaunched => QueryOrder::AsLaunched,
    };
    Ok(PairTiles { query_order, ..*square })
}

/// The group of workgroups version 10 takes with its first preferred tiles (0: as launched).
pub fn preferred_group() -> usize {
    match V10::preferred(HEAD_DIM)[0].query_order {
        QueryOrder::LongestFirst { workgroups } => workgroups,
        QueryOrder::AsLaunched => 0,
    }
}

/// Version 10's WGSL for `tiles` at [`HEAD_DIM`], as the lesson specialises it, with a
/// function added around its `rotation` lines (which lie inside the kernel) so that they can
/// be run alone.
pub fn source(tiles: &PairTiles) -> Result<String, String> {
    let source = V10::shader(tiles, HEAD_DIM, LeaveOut::NOTHING).map_err(|e| e.to_string())?;
    let rotation = anchored(&source.source, "rotation")?;
    Ok(format!(
        "{}\nfn diagram_rotation(work: vec2<u32>, tiles: u32, query_tiles: u32) -> u32 {{\n{rotation}    return rotation;\n}}\n",
        source.source
    ))
}

/// The uniform `params` of a slice of `n` queries and `n` keys.
fn params(n: usize, slices: usize, causal: bool) -> [(&'static str, u32); 4] {
    [
        ("q_len", n as u32),
        ("kv_len", n as u32),
        ("slices", slices as u32),
        ("causal", u32::from(causal)),
    ]
}

/// For each workgroup of a slice (query tile `x` of [`QUERY_TILES`], of `block_q` rows), the
/// tiles of K and V it reads, in the order it reads them: `kv_tile(u, tiles, rotation) /
/// BLOCK_KV` for each step `u` of its loop, as the shader `source` ([`source`]) computes them.
pub fn key_tiles(source: &str, block_q: usize, causal: bool) -> Result<Vec<Vec<usize>>, String> {
    let shader = Shader::parse(source)?;
    let block_kv = shader.count("BLOCK_KV")?;
    let n = QUERY_TILES * block_q;
    let params = params(n, 1, causal);
    let u32_of = |x: usize| Value::U32(x as u32);
    let mut all = Vec::new();
    for x in 0..QUERY_TILES {
        // As the kernel counts them: the keys its last row sees, in tiles.
        let last_row = ((x + 1) * block_q).min(n) - 1;
        let seen = shader.call("visible_keys", &[u32_of(last_row)], &params)?.u32()? as usize;
        let count = seen.div_ceil(block_kv);
        let work = Value::Vector(vec![u32_of(x), Value::U32(0)]);
        let arguments = [work, u32_of(count), u32_of(QUERY_TILES)];
        let rotation = shader.call("diagram_rotation", &arguments, &params)?;
        let mut order = Vec::new();
        for u in 0..count {
            let arguments = [u32_of(u), u32_of(count), rotation.clone()];
            let first_key = shader.call("kv_tile", &arguments, &params)?.u32()? as usize;
            order.push(first_key / block_kv);
        }
        all.push(order);
    }
    Ok(all)
}

/// For each of [`SLICES`] slices and each of its query tiles (of `block_q` rows), the place in
/// launch order (the grid's x first, as the lesson assumes the GPU launches it) of the
/// workgroup that takes it: `assignment` of the shader `source` ([`source`]), with the causal
/// mask.
pub fn launch_order(source: &str, block_q: usize) -> Result<Vec<Vec<usize>>, String> {
    let shader = Shader::parse(source)?;
    let params = params(QUERY_TILES * block_q, SLICES, true);
    let mut order = vec![vec![None; QUERY_TILES]; SLICES];
    for launched in 0..QUERY_TILES * SLICES {
        let id = [launched % QUERY_TILES, launched / QUERY_TILES];
        let id = Value::Vector(id.iter().map(|&i| Value::U32(i as u32)).collect());
        let work = shader.call("assignment", &[id, Value::U32(QUERY_TILES as u32)], &params)?;
        let (x, slice) = match work {
            Value::Vector(v) if v.len() == 2 => (v[0].u32()? as usize, v[1].u32()? as usize),
            other => return Err(format!("`assignment` returned {other:?}, not a vec2<u32>")),
        };
        let cell = order.get_mut(slice).and_then(|row| row.get_mut(x)).ok_or_else(|| {
            format!("workgroup {launched} takes query tile {x} of slice {slice}: outside the grid")
        })?;
        if let Some(other) = cell.replace(launched) {
            return Err(format!("workgroups {other} and {launched} take the same query tile"));
        }
    }
    Ok(order
        .into_iter()
        .map(|row| row.into_iter().map(|c| c.expect("a permutation")).collect())
        .collect())
}

/// The schedule of version 10's grid on 8 query tiles and 8 key tiles: the key tiles each
/// workgroup reads, step by step, without and with the causal mask; and with the mask, the
/// launch order of the query tiles of 4 slices as launched and longest first in groups.
pub fn grid_schedule() -> Result<String, String> {
    let group = 2 * QUERY_TILES;
    let tiles = example_tiles(group)?;
    let as_launched = PairTiles { query_order: QueryOrder::AsLaunched, ..tiles };
    let (block_q, block_kv) = (tiles.block_q(), tiles.block_kv);
    let wgsl = source(&tiles)?;
    let panels_keys = [key_tiles(&wgsl, block_q, false)?, key_tiles(&wgsl, block_q, true)?];
    let panels_launch =
        [launch_order(&source(&as_launched)?, block_q)?, launch_order(&wgsl, block_q)?];
    let spread = Shader::parse(&wgsl)?.count("SPREAD_TILES")?;
    let n = QUERY_TILES * block_q;

    let mut svg = Svg::titled(
        780.0,
        680.0,
        "The grid's schedule: keys rotated, and with the causal mask the longest query tiles first",
    );
    svg.text(
        390.0,
        46.0,
        &format!(
            "Version 10's WGSL at D = {HEAD_DIM} with its {block_q}-row, {block_kv}-key shape (its fastest takes {} rows); one slice of N = {n}: {QUERY_TILES} query tiles, {} key tiles",
            V10::preferred(HEAD_DIM)[0].block_q(),
            n / block_kv
        ),
        Text::CENTRED,
    );
    let cell = 24.0;
    let small = Text::SMALL;
    let right = Text { anchor: "end", ..Text::SMALL };
    let titles = ["No mask: keys rotated", "Causal mask: keys rotated"];
    for (panel, (rows, title)) in panels_keys.iter().zip(titles).enumerate() {
        let (x0, y0) = (100.0 + panel as f64 * 380.0, 110.0);
        svg.text(x0 + 4.0 * cell, 74.0, title, Text { bold: true, ..Text::CENTRED });
        svg.text(x0 + 4.0 * cell, 92.0, "step u of the key loop →", small);
        for (x, order) in rows.iter().enumerate() {
            let y = y0 + x as f64 * cell;
            svg.text(x0 - 6.0, y + 16.0, &format!("Q{x}"), right);
            for u in 0..QUERY_TILES {
                let cx = x0 + u as f64 * cell;
                match order.get(u) {
                    Some(&key) => {
                        let fill = if key == 0 { colour::CURRENT } else { colour::LOADED };
                        svg.rect(cx, y, cell, cell, fill);
                        svg.text(cx + cell / 2.0, y + 16.0, &key.to_string(), small);
                    }
                    None => svg.rect(cx, y, cell, cell, colour::SKIPPED),
                }
            }
        }
        svg.text(x0 - 30.0, y0 - 6.0, "workgroup", Text { anchor: "start", ..small });
        let note = if panel == 0 {
            [
                "workgroup x starts at tile x · T / 8 of its T = 8".to_string(),
                "and wraps around: no two read one tile together".to_string(),
            ]
        } else {
            [
                "query tile x reads only its T = x + 1 tiles,".to_string(),
                "starting at tile x · T / 8 (rounded down)".to_string(),
            ]
        };
        svg.lines(x0 + 4.0 * cell, y0 + 8.0 * cell + 20.0, &note, small);
    }

    let y1 = 370.0;
    let titles = [
        "Causal, as launched (QUERY_GROUP = 0)".to_string(),
        format!("Causal, longest first in groups of {group} workgroups"),
    ];
    let slices_per_group = (group / QUERY_TILES).max(1);
    for (panel, (order, title)) in panels_launch.iter().zip(&titles).enumerate() {
        let x0 = 100.0 + panel as f64 * 380.0;
        svg.text(x0 + 4.0 * cell, y1, title, Text { bold: true, ..Text::CENTRED });
        svg.text(x0 - 6.0, y1 + 22.0, "T:", right);
        for (x, causal_keys) in panels_keys[1].iter().enumerate() {
            let cx = x0 + x as f64 * cell + cell / 2.0;
            svg.text(cx, y1 + 22.0, &causal_keys.len().to_string(), small);
            svg.text(cx, y1 + 40.0, &format!("Q{x}"), small);
        }
        for (slice, row) in order.iter().enumerate() {
            let y = y1 + 48.0 + slice as f64 * cell;
            svg.text(x0 - 6.0, y + 16.0, &format!("slice {slice}"), right);
            for (x, &launched) in row.iter().enumerate() {
                let fill = match (panel, (slice / slices_per_group) % 2) {
                    (0, _) => colour::PLAIN,
                    (_, 0) => colour::DONE,
                    _ => colour::FULL,
                };
                let cx = x0 + x as f64 * cell;
                svg.rect(cx, y, cell, cell, fill);
                svg.text(cx + cell / 2.0, y + 16.0, &launched.to_string(), small);
            }
        }
    }
    let captions = [
        [
            "x first: each slice ends with its longest tile,".to_string(),
            format!("and the dispatch with slice {}'s Q{}", SLICES - 1, QUERY_TILES - 1),
        ],
        [
            format!(
                "{slices_per_group} slices a group, their Q{} first, in turn:",
                QUERY_TILES - 1
            ),
            "each group ends with its shortest".to_string(),
        ],
    ];
    for (panel, caption) in captions.iter().enumerate() {
        let x0 = 100.0 + panel as f64 * 380.0;
        let y = y1 + 48.0 + SLICES as f64 * cell + 20.0;
        svg.lines(x0 + 4.0 * cell, y, caption, small);
    }
    let notes = [
        "Top, each cell: the key tile a workgroup reads at that step (the shader's kv_tile and rotation). In order".to_string(),
        format!(
            "(KEY_ORDER = 0) all read tile 0 first. Without the mask the starts spread over at most SPREAD_TILES = {spread} tiles."
        ),
        "Bottom, each cell: the place in launch order of the workgroup that takes that query tile of that slice (the".to_string(),
        format!(
            "shader's assignment; T: the key tiles it reads). The kernel takes groups of {} workgroups, not {group}.",
            preferred_group()
        ),
    ];
    svg.lines(20.0, 584.0, &notes, Text { size: 12.0, ..Text::LEFT });
    legend(&mut svg, 20.0, 666.0, colour::CURRENT, "key tile 0");
    legend(&mut svg, 150.0, 666.0, colour::SKIPPED, "not read (causal mask)");
    legend(&mut svg, 370.0, 666.0, colour::DONE, "first group of slices");
    legend(&mut svg, 570.0, 666.0, colour::FULL, "second group");
    Ok(svg.finish(
        "The schedule of lesson 10's grid: key tiles rotated, query tiles longest first in groups",
    ))
}
