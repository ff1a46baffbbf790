//! Diagrams of the algorithm, the same on any hardware: tiles, the rescale, the loop orders,
//! the masks, the backward pass and the split-KV merge.

use lesson02::SoftmaxState;
use lesson03::{TileKind, TileSizes, classify_tile};
use reference::AttentionShape;
use reference::features::{Window, visible_band};

use crate::svg::{Svg, Text, colour, legend};

/// A matrix of `rows x cols` cells of `cell` pixels at `(x, y)`, each filled by `fill(r, c)`.
fn grid(
    svg: &mut Svg,
    (x, y): (f64, f64),
    (rows, cols): (usize, usize),
    cell: f64,
    fill: impl Fn(usize, usize) -> &'static str,
) {
    for r in 0..rows {
        for c in 0..cols {
            svg.rect(x + c as f64 * cell, y + r as f64 * cell, cell, cell, fill(r, c));
        }
    }
}

/// Whether `index` lies in tile `tile` of tiles `size` wide.
fn in_tile(index: usize, tile: usize, size: usize) -> bool {
    index / size == tile
}

/// Q, K, V, S and O at one step of FlashAttention-2's loop (lesson 03): the query tile `i`
/// against the key tile `j`, the tiles before `j` already folded into the running state.
pub fn tiles_one_step() -> String {
    let (q_len, kv_len, head_dim) = (12, 16, 4);
    let tiles = TileSizes::new(4, 4).expect("non-zero tiles");
    let (br, bc) = (tiles.query_rows(), tiles.key_cols());
    let (i, j) = (1, 2);
    let cell = 18.0;
    let mut svg =
        Svg::titled(760.0, 610.0, "One step of the loop: query tile i = 1 against key tile j = 2");

    let s_at = (200.0, 150.0);
    let q_at = (s_at.0 - head_dim as f64 * cell - 30.0, s_at.1);
    let kt_at = (s_at.0, s_at.1 - head_dim as f64 * cell - 30.0);
    let vt_at = (s_at.0, s_at.1 + q_len as f64 * cell + 30.0);
    let o_at = (s_at.0 + kv_len as f64 * cell + 30.0, s_at.1);

    let rows_of_tile = |r: usize| in_tile(r, i, br);
    grid(&mut svg, q_at, (q_len, head_dim), cell, |r, _| {
        if rows_of_tile(r) { colour::LOADED } else { colour::PLAIN }
    });
    grid(&mut svg, kt_at, (head_dim, kv_len), cell, |_, c| {
        if in_tile(c, j, bc) { colour::LOADED } else { colour::PLAIN }
    });
    grid(&mut svg, vt_at, (head_dim, kv_len), cell, |_, c| {
        if in_tile(c, j, bc) { colour::LOADED } else { colour::PLAIN }
    });
    grid(&mut svg, o_at, (q_len, head_dim), cell, |r, _| {
        if rows_of_tile(r) { colour::DONE } else { colour::PLAIN }
    });
    grid(&mut svg, s_at, (q_len, kv_len), cell, |r, c| {
        if !rows_of_tile(r) {
            colour::PLAIN
        } else if in_tile(c, j, bc) {
            colour::CURRENT
        } else if c / bc < j {
            colour::DONE
        } else {
            colour::PLAIN
        }
    });

    let label_above = |svg: &mut Svg, (x, y): (f64, f64), width: usize, text: &str| {
        svg.text(x + width as f64 * cell / 2.0, y - 8.0, text, Text::CENTRED);
    };
    label_above(&mut svg, q_at, head_dim, "Q (Nq x d)");
    label_above(&mut svg, kt_at, kv_len, "K transposed (d x Nkv)");
    label_above(&mut svg, o_at, head_dim, "O (Nq x d)");
    svg.text(
        s_at.0 + kv_len as f64 * cell / 2.0,
        vt_at.1 + head_dim as f64 * cell + 18.0,
        "V, drawn transposed so that each key lines up with its column of S",
        Text::CENTRED,
    );
    svg.text(
        s_at.0 + kv_len as f64 * cell / 2.0,
        vt_at.1 + head_dim as f64 * cell + 38.0,
        "In the middle, S = Q Kᵀ (Nq x Nkv): never stored whole",
        Text::CENTRED,
    );
    svg.text(
        s_at.0 + (j * bc) as f64 * cell + bc as f64 * cell / 2.0,
        s_at.1 + (i * br) as f64 * cell + br as f64 * cell / 2.0 + 4.0,
        "S_ij",
        Text::SMALL,
    );
    svg.text(
        o_at.0 + head_dim as f64 * cell + 8.0,
        o_at.1 + (i * br) as f64 * cell + br as f64 * cell / 2.0 + 4.0,
        format!("O_i, m_i, l_i ({br} rows)").as_str(),
        Text::LEFT,
    );

    let notes = [
        format!("Br = {br} query rows, Bc = {bc} keys per tile (lesson 03's TileSizes)."),
        "This step: S_ij = Q_i K_jᵀ, then m_i, l_i and O_i are rescaled and updated;".to_string(),
        "S_ij is then discarded. Tiles j' < j of this row are already folded into O_i.".to_string(),
    ];
    svg.lines(20.0, 540.0, &notes, Text::LEFT);
    legend(&mut svg, 560.0, 534.0, colour::LOADED, "loaded for this step");
    legend(&mut svg, 560.0, 556.0, colour::CURRENT, "computed at this step");
    legend(&mut svg, 560.0, 578.0, colour::DONE, "running state / done");
    svg.finish("Tiles of Q, K, V, S and O at one step of FlashAttention's loop")
}

/// Three blocks of one row's scores folded into the running (m, l) one block at a time, with
/// the numbers lesson 02's `SoftmaxState` computes.
pub fn online_rescale() -> String {
    let scores: [f32; 12] = [0.5, 1.2, -0.3, 0.8, 2.9, 0.1, 1.5, -1.0, 0.4, 3.6, 1.1, 0.2];
    let block = 4;
    let mut svg =
        Svg::titled(780.0, 350.0, "Online softmax: the running state when a block raises the max");
    let cell = (52.0, 30.0);
    let gap = 30.0;
    let block_x = |b: usize| 40.0 + b as f64 * (block as f64 * cell.0 + gap);

    let mut state = SoftmaxState::EMPTY;
    for (b, chunk) in scores.chunks(block).enumerate() {
        let x0 = block_x(b);
        let own = SoftmaxState::of(chunk);
        for (c, &x) in chunk.iter().enumerate() {
            let fill = if x == own.max { colour::CURRENT } else { colour::LOADED };
            svg.rect(x0 + c as f64 * cell.0, 50.0, cell.0, cell.1, fill);
            svg.text(
                x0 + c as f64 * cell.0 + cell.0 / 2.0,
                70.0,
                &format!("{x:.1}"),
                Text::CENTRED,
            );
        }
        let width = block as f64 * cell.0;
        svg.text(
            x0 + width / 2.0,
            100.0,
            &format!("block {}: its max {:.1}", b + 1, own.max),
            Text::CENTRED,
        );

        let after = state.merge(own);
        let factor =
            if state.max == f32::NEG_INFINITY { 0.0 } else { (state.max - after.max).exp() };
        let added = own.sum * (own.max - after.max).exp();
        let lines = if state.max == f32::NEG_INFINITY {
            vec![
                format!("m = {:.1}", after.max),
                format!("l = {:.3}", after.sum),
                "(nothing to rescale yet)".to_string(),
            ]
        } else {
            vec![
                format!("m: {:.1} → {:.1}", state.max, after.max),
                format!("factor e^(m_old − m) = {factor:.3}"),
                format!("l = {:.3} × {factor:.3} + {added:.3}", state.sum),
                format!("  = {:.3}", after.sum),
                format!("O rows × {factor:.3}, then + P V"),
            ]
        };
        svg.labelled_box(x0, 120.0, width, 120.0, colour::DONE, &lines);
        if b > 0 {
            svg.arrow((x0 - gap + 2.0, 180.0), (x0 - 2.0, 180.0));
        }
        state = after;
    }
    let exact = scores.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln();
    let notes = [
        format!(
            "After the last block: logsumexp = m + ln l = {:.4}; computed directly, ln Σ e^x = {exact:.4}.",
            state.logsumexp()
        ),
        "A block whose max is no larger (factor 1) changes nothing already summed; a larger one"
            .to_string(),
        "multiplies l, and every row of O, by e^(m_old − m) before its own terms are added."
            .to_string(),
        "Numbers from lesson 02's SoftmaxState::merge, in f32.".to_string(),
    ];
    svg.lines(40.0, 285.0, &notes, Text::LEFT);
    svg.finish("The online softmax's running max and sum, rescaled block by block")
}

/// How many block reads and writes each loop order makes over `blocks x blocks` tiles.
struct Traffic {
    q_reads: usize,
    kv_reads: usize,
    o_reads: usize,
    o_writes: usize,
}

/// The order in which FlashAttention-1 (`keys_outer`) or -2 visits the (query, key) tile
/// pairs, and the block traffic of that order.
fn visits(blocks: usize, keys_outer: bool) -> (Vec<Vec<usize>>, Traffic) {
    let mut order = vec![vec![0; blocks]; blocks];
    let mut traffic = Traffic { q_reads: 0, kv_reads: 0, o_reads: 0, o_writes: 0 };
    let mut step = 0;
    for outer in 0..blocks {
        if keys_outer {
            traffic.kv_reads += 1; // K_j, V_j stay in fast memory for the inner loop
        } else {
            traffic.q_reads += 1; // Q_i, and O_i, m_i, l_i, stay for the inner loop
        }
        for inner in 0..blocks {
            let (i, j) = if keys_outer { (inner, outer) } else { (outer, inner) };
            step += 1;
            order[i][j] = step;
            if keys_outer {
                traffic.q_reads += 1;
                traffic.o_reads += 1; // O_i, m_i, l_i read back and written out every step
                traffic.o_writes += 1;
            } else {
                traffic.kv_reads += 1;
            }
        }
        if !keys_outer {
            traffic.o_writes += 1; // O_i normalised and written once
        }
    }
    (order, traffic)
}

/// FlashAttention-1's loop order (keys outside) beside FlashAttention-2's (queries outside).
pub fn loop_order() -> String {
    let blocks = 4;
    let cell = 40.0;
    let mut svg =
        Svg::titled(760.0, 430.0, "Loop order: FlashAttention-1 against FlashAttention-2");
    for (panel, keys_outer) in [(0, true), (1, false)] {
        let x0 = 90.0 + panel as f64 * 370.0;
        let y0 = 90.0;
        let (order, traffic) = visits(blocks, keys_outer);
        let title = if keys_outer {
            "FA-1: for each K/V block j, for each Q block i"
        } else {
            "FA-2: for each Q block i, for each K/V block j"
        };
        svg.text(x0 + 2.0 * cell, 56.0, title, Text::CENTRED);
        for (i, row) in order.iter().enumerate() {
            for (j, &step) in row.iter().enumerate() {
                let first_pass = if keys_outer { j == 0 } else { i == 0 };
                let fill = if first_pass { colour::CURRENT } else { colour::LOADED };
                svg.rect(x0 + j as f64 * cell, y0 + i as f64 * cell, cell, cell, fill);
                svg.text(
                    x0 + j as f64 * cell + cell / 2.0,
                    y0 + i as f64 * cell + cell / 2.0 + 5.0,
                    &step.to_string(),
                    Text::CENTRED,
                );
            }
            svg.text(
                x0 - 8.0,
                y0 + i as f64 * cell + cell / 2.0 + 5.0,
                &format!("Q{i}"),
                Text { anchor: "end", ..Text::CENTRED },
            );
        }
        for j in 0..blocks {
            svg.text(x0 + j as f64 * cell + cell / 2.0, y0 - 6.0, &format!("K{j}"), Text::CENTRED);
        }
        let lines = [
            format!("blocks read: Q {}, K and V {}", traffic.q_reads, traffic.kv_reads),
            if keys_outer {
                format!("O, m and l read {} times, written {}", traffic.o_reads, traffic.o_writes)
            } else {
                format!("O and L written {} times, never read back", traffic.o_writes)
            },
            if keys_outer {
                "every K/V step reads and rewrites each O_i, m_i, l_i".to_string()
            } else {
                "each Q block is independent: one workgroup each".to_string()
            },
        ];
        svg.lines(x0 - 40.0, y0 + blocks as f64 * cell + 34.0, &lines, Text::LEFT);
    }
    let notes = [
        "Numbers: the order of the steps. Both orders compute the same tiles; FA-2's keeps each"
            .to_string(),
        "query block's O, m and l in fast memory for its whole row, and parallelises over rows."
            .to_string(),
    ];
    svg.lines(40.0, 370.0, &notes, Text::LEFT);
    legend(&mut svg, 40.0, 412.0, colour::CURRENT, "the first pass of the outer loop");
    svg.finish("FlashAttention-1 and FlashAttention-2 loop orders and their block traffic")
}

/// Which tiles the causal mask (lesson 03's `classify_tile`) and a sliding window (the
/// reference's `visible_band`) skip, mask or compute whole, with `Nq < Nkv` so that the
/// bottom-right alignment shows.
pub fn mask_tiles() -> String {
    let shape = AttentionShape { batch: 1, heads: 1, q_len: 12, kv_len: 16, head_dim: 4 };
    let tile = 4;
    let cell = 16.0;
    let window = Window::new(Some(6), Some(0));
    let mut svg = Svg::titled(
        760.0,
        400.0,
        "Which tiles a mask skips, masks or computes whole (Nq = 12, Nkv = 16, 4 x 4 tiles)",
    );
    for (panel, windowed) in [(0, false), (1, true)] {
        let x0 = 60.0 + panel as f64 * 370.0;
        let y0 = 80.0;
        let visible = |row: usize| {
            if windowed {
                visible_band(&shape, row, true, window)
            } else {
                0..shape.visible_keys(row, true)
            }
        };
        let kind_of = |ti: usize, tj: usize| {
            let rows = ti * tile..((ti + 1) * tile).min(shape.q_len);
            let keys = tj * tile..((tj + 1) * tile).min(shape.kv_len);
            if windowed {
                window_tile_kind(rows.map(visible), keys)
            } else {
                classify_tile(&shape, true, rows, keys)
            }
        };
        for r in 0..shape.q_len {
            for c in 0..shape.kv_len {
                let fill = match kind_of(r / tile, c / tile) {
                    TileKind::Full => colour::FULL,
                    TileKind::Masked => colour::MASKED,
                    TileKind::Skipped => colour::SKIPPED,
                };
                let (x, y) = (x0 + c as f64 * cell, y0 + r as f64 * cell);
                svg.fill(x, y, cell, cell, fill);
                if visible(r).contains(&c) {
                    svg.fill(x + 5.0, y + 5.0, cell - 10.0, cell - 10.0, colour::INK);
                }
            }
        }
        let (row_tiles, key_tiles) = (shape.q_len.div_ceil(tile), shape.kv_len.div_ceil(tile));
        for ti in 0..row_tiles {
            for tj in 0..key_tiles {
                let (rows, keys) =
                    (tile.min(shape.q_len - ti * tile), tile.min(shape.kv_len - tj * tile));
                let (x, y) = (x0 + (tj * tile) as f64 * cell, y0 + (ti * tile) as f64 * cell);
                svg.outline(x, y, keys as f64 * cell, rows as f64 * cell, colour::INK, 1.5);
            }
        }
        let title = if windowed {
            "causal, and a window: the diagonal key and 6 before it"
        } else {
            "causal (bottom-right: the last row sees every key)"
        };
        svg.text(x0 + shape.kv_len as f64 * cell / 2.0, y0 - 12.0, title, Text::CENTRED);
        let skipped = (0..row_tiles)
            .flat_map(|ti| (0..key_tiles).map(move |tj| (ti, tj)))
            .filter(|&(ti, tj)| kind_of(ti, tj) == TileKind::Skipped)
            .count();
        let all = row_tiles * key_tiles;
        let caption = format!("{skipped} of {all} tiles never loaded");
        svg.text(x0, y0 + shape.q_len as f64 * cell + 22.0, &caption, Text::LEFT);
    }
    legend(&mut svg, 60.0, 340.0, colour::FULL, "every row sees every key: no mask");
    legend(
        &mut svg,
        60.0,
        362.0,
        colour::MASKED,
        "crossed by the mask's edge: computed, then masked",
    );
    legend(&mut svg, 470.0, 340.0, colour::SKIPPED, "no row sees any key: skipped");
    legend(&mut svg, 470.0, 362.0, colour::INK, "a (row, key) pair the mask keeps");
    svg.finish("Causal and sliding-window masks classify the tiles of S")
}

/// A tile's kind from the band of keys each of its rows sees.
fn window_tile_kind(
    bands: impl Iterator<Item = std::ops::Range<usize>>,
    keys: std::ops::Range<usize>,
) -> TileKind {
    let (mut any, mut all) = (false, true);
    for band in bands {
        let seen = band.start.max(keys.start)..band.end.min(keys.end);
        any |= !seen.is_empty();
        all &= seen == keys;
    }
    match (any, all) {
        (false, _) => TileKind::Skipped,
        (true, true) => TileKind::Full,
        (true, false) => TileKind::Masked,
    }
}

/// The backward pass's data flow (lesson 05): what it reads from the forward, what it
/// recomputes, and the order of its products.
pub fn backward_flow() -> String {
    let mut svg = Svg::titled(
        760.0,
        490.0,
        "The backward pass: recompute P from the logsumexp, then the gradients",
    );
    // The inputs, ordered so that each feeds the boxes below it: Q and K the scores, L the
    // weights, V and dO the weights' gradient, dO and O the row terms D.
    let inputs = ["Q", "K", "L", "V", "dO", "O"];
    let input_x = |k: usize| 60.0 + k as f64 * 115.0;
    for (k, name) in inputs.iter().enumerate() {
        svg.labelled_box(input_x(k), 50.0, 70.0, 34.0, colour::SLOW, &[name.to_string()]);
    }
    let (w, h) = (190.0, 38.0);
    let boxes = [
        ("S = Q Kᵀ · scale", 40.0, 130.0),
        ("D = rowsum(dO ∘ O)", 520.0, 130.0),
        ("P = exp(S − L)", 40.0, 210.0),
        ("dP = dO Vᵀ", 280.0, 210.0),
        ("dV += Pᵀ dO", 40.0, 290.0),
        ("dS = P ∘ (dP − D)", 400.0, 290.0),
        ("dQ += dS K · scale", 280.0, 370.0),
        ("dK += dSᵀ Q · scale", 520.0, 370.0),
    ];
    for (text, x, y) in boxes {
        svg.labelled_box(x, y, w, h, colour::LOADED, &[text.to_string()]);
    }
    let input = |k: usize| (input_x(k) + 35.0, 84.0);
    let top = |b: usize| (boxes[b].1 + w / 2.0, boxes[b].2);
    let bottom = |b: usize| (boxes[b].1 + w / 2.0, boxes[b].2 + h);
    let (q, k, l, v, d_o, o) = (input(0), input(1), input(2), input(3), input(4), input(5));
    let edges = [
        (q, top(0)),
        (k, top(0)),
        (d_o, top(1)),
        (o, top(1)),
        (bottom(0), top(2)),
        (l, (boxes[2].1 + w * 0.8, boxes[2].2)),
        (d_o, top(3)),
        (v, top(3)),
        (bottom(2), top(4)),
        (bottom(2), top(5)),
        (bottom(3), top(5)),
        (bottom(1), top(5)),
        (bottom(5), top(6)),
        (bottom(5), top(7)),
    ];
    for (from, to) in edges {
        svg.arrow(from, to);
    }
    // Inputs read a second time, drawn again beside the product that reads them.
    for (name, consumer) in [("dO", 4), ("K", 6), ("Q", 7)] {
        // On the box's left, or on its right where the left edge of the drawing is too near.
        let (left, y) = (boxes[consumer].1, boxes[consumer].2 + 8.0);
        if left > 60.0 {
            svg.labelled_box(left - 50.0, y, 36.0, 22.0, colour::SLOW, &[name.to_string()]);
            svg.dashed_arrow((left - 14.0, y + 11.0), (left, y + 11.0));
        } else {
            svg.labelled_box(left + w + 14.0, y, 36.0, 22.0, colour::SLOW, &[name.to_string()]);
            svg.dashed_arrow((left + w + 14.0, y + 11.0), (left + w, y + 11.0));
        }
    }
    let notes = [
        "Lavender: what the backward reads: the forward's inputs and outputs O and L, and the incoming"
            .to_string(),
        "gradient dO (the small boxes: read again by that product). L, one number per row, replaces"
            .to_string(),
        "P (Nq x Nkv numbers): P is recomputed tile by tile, exactly, as exp(S − L).".to_string(),
    ];
    svg.lines(40.0, 436.0, &notes, Text::LEFT);
    svg.finish("Data flow of FlashAttention's backward pass")
}

/// A cache of keys split into chunks (lesson 11's `chunk`), each chunk's partial result, and
/// their exact merge by logsumexp (lesson 02's `SoftmaxState`), for one query and values of
/// one dimension.
pub fn split_kv_merge() -> String {
    let (tokens, splits) = (24, 3);
    let score = |t: usize| (t as f32 * 0.7).sin() * 2.0 + (t as f32 * 0.13).cos();
    let value = |t: usize| (t % 5) as f32 - 2.0;
    let mut svg = Svg::titled(
        780.0,
        430.0,
        "Split-KV decoding: partial results per chunk, merged by their logsumexp",
    );
    let cell = 26.0;
    let x0 = 40.0;
    let mut partials = Vec::new();
    for split in 0..splits {
        let keys = lesson11::decode::chunk(tokens, splits, split);
        let gap = split as f64 * 20.0;
        let fill = [colour::LOADED, colour::DONE, colour::FULL][split];
        for t in keys.clone() {
            svg.rect(x0 + gap + t as f64 * cell, 60.0, cell, cell, fill);
            svg.text(x0 + gap + t as f64 * cell + cell / 2.0, 77.0, &t.to_string(), Text::SMALL);
        }
        let scores: Vec<f32> = keys.clone().map(score).collect();
        let state = SoftmaxState::of(&scores);
        let out =
            keys.clone().map(|t| (score(t) - state.max).exp() * value(t)).sum::<f32>() / state.sum;
        let mid = x0 + gap + (keys.start + keys.end) as f64 * cell / 2.0;
        let lines = [
            format!("keys {}..{}", keys.start, keys.end),
            format!("m = {:.2}, l = {:.2}", state.max, state.sum),
            format!("L = m + ln l = {:.3}", state.logsumexp()),
            format!("O = {out:.3}"),
        ];
        svg.labelled_box(mid - 105.0, 120.0, 210.0, 86.0, fill, &lines);
        svg.arrow((mid, 88.0), (mid, 118.0));
        svg.arrow((mid, 208.0), (390.0, 262.0));
        partials.push((state, out));
    }
    let merged = partials.iter().fold(SoftmaxState::EMPTY, |acc, (s, _)| acc.merge(*s));
    let total = merged.logsumexp();
    let weights: Vec<f32> = partials.iter().map(|(s, _)| (s.logsumexp() - total).exp()).collect();
    let o: f32 = partials.iter().zip(&weights).map(|((_, out), w)| w * out).sum();
    let all: Vec<f32> = (0..tokens).map(score).collect();
    let whole = SoftmaxState::of(&all);
    let direct =
        (0..tokens).map(|t| (score(t) - whole.max).exp() * value(t)).sum::<f32>() / whole.sum;
    let lines = [
        format!("L = ln Σ e^(L_s) = {total:.3}"),
        format!(
            "weights e^(L_s − L): {}",
            weights.iter().map(|w| format!("{w:.3}")).collect::<Vec<_>>().join(", ")
        ),
        format!("O = Σ e^(L_s − L) O_s = {o:.4}"),
    ];
    svg.labelled_box(240.0, 264.0, 300.0, 70.0, colour::CURRENT, &lines);
    let notes = [
        format!(
            "{tokens} cached tokens, {splits} chunks (lesson 11's chunk), one query, values of one dimension."
        ),
        format!(
            "One pass over all the keys gives O = {direct:.4}: the merge is exact, not an approximation."
        ),
        "Each chunk runs in its own workgroup: with enough of them (lesson 11 takes 64 at 16K tokens), one query fills the GPU."
            .to_string(),
    ];
    svg.lines(40.0, 368.0, &notes, Text::LEFT);
    svg.finish("Split-KV decoding: chunks, partial results and their merge")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flashattention_1_moves_o_at_every_step_and_2_once_per_row() {
        let (_, fa1) = visits(4, true);
        let (_, fa2) = visits(4, false);
        assert_eq!((fa1.q_reads, fa1.kv_reads, fa1.o_reads, fa1.o_writes), (16, 4, 16, 16));
        assert_eq!((fa2.q_reads, fa2.kv_reads, fa2.o_reads, fa2.o_writes), (4, 16, 0, 4));
    }

    #[test]
    fn both_orders_visit_every_tile_once() {
        for keys_outer in [true, false] {
            let (order, _) = visits(3, keys_outer);
            let mut steps: Vec<usize> = order.concat();
            steps.sort();
            assert_eq!(steps, (1..=9).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_window_tile_is_skipped_full_or_masked_by_its_rows_bands() {
        assert_eq!(window_tile_kind([0..2, 1..3].into_iter(), 4..8), TileKind::Skipped);
        assert_eq!(window_tile_kind([0..8, 4..9].into_iter(), 4..8), TileKind::Full);
        assert_eq!(window_tile_kind([0..8, 5..9].into_iter(), 4..8), TileKind::Masked);
        assert_eq!(window_tile_kind([0..0, 4..8].into_iter(), 4..8), TileKind::Masked);
    }
}
