//! GPT-2's block (lesson 12): the flow of one block with its KV cache, lesson 11's paged layout
//! of that cache, and where each of lesson 12's precision strategies rounds to 16 bits.

use lesson11::{KeyValues, PagedKvCache};
use lesson12::Config;
use lesson12::precision::{Dtype, Precision};
use ndarray::Array3;

use crate::svg::{Svg, Text, colour, legend};

/// What a strategy may store in 16 bits (a column of lesson 12's table in `precision.rs`).
struct Stored {
    /// Its tag in the drawing.
    tag: &'static str,
    /// What it is.
    meaning: &'static str,
    /// The format a strategy stores it in.
    format: fn(Precision) -> Dtype,
}

const STORED: [Stored; 5] = [
    Stored { tag: "W", meaning: "weights", format: Precision::storage },
    Stored { tag: "A", meaning: "activations between operations", format: Precision::storage },
    Stored { tag: "R", meaning: "residual stream", format: Precision::stream },
    Stored { tag: "LN", meaning: "LayerNorm statistics", format: Precision::stream },
    Stored { tag: "logits", meaning: "logits", format: Precision::stream },
];

/// The fill of a tag: strong where the mixed strategies round it too, light where only the
/// aggressive ones do, white where no strategy does.
fn tag_fill(format: fn(Precision) -> Dtype) -> &'static str {
    let rounds = |p: &Precision| format(*p) != Dtype::F32;
    let mixed = Precision::ALL.iter().filter(|p| matches!(p, Precision::Mixed(_))).any(rounds);
    if mixed {
        colour::CURRENT
    } else if Precision::ALL.iter().any(rounds) {
        colour::DONE
    } else {
        colour::PLAIN
    }
}

/// Tags at `(x, y)` (their top left), left to right.
fn tags(svg: &mut Svg, (x, y): (f64, f64), names: &[&str]) {
    let mut x = x;
    for name in names {
        let stored = STORED.iter().find(|s| s.tag == *name).expect("a known tag");
        let w = 8.0 + 6.6 * name.len() as f64;
        svg.rect(x, y, w, 16.0, tag_fill(stored.format));
        svg.text(x + w / 2.0, y + 12.0, name, Text { bold: true, ..Text::SMALL });
        x += w + 4.0;
    }
}

/// Lesson 11's paged cache, as its pool holds it.
struct Pool {
    /// For each block of the pool, for each slot, `(sequence, token)` or nothing.
    slots: Vec<Vec<Option<(usize, usize)>>>,
    /// Each sequence's block table.
    tables: Vec<Vec<usize>>,
}

/// The pool of lesson 11's paged cache after two sequences grow in turn (its module's own
/// example).
fn paged_pool() -> Result<Pool, String> {
    let (block_size, blocks) = (4, 6);
    let mut cache = PagedKvCache::new(2, 1, 1, block_size, blocks).map_err(|e| e.to_string())?;
    // Each key is 1 + its token + 100 x its sequence, so that the pool shows whose it is.
    for (seq, tokens) in [(0, 0..4), (1, 0..4), (1, 4..7), (0, 4..8), (0, 8..10)] {
        let keys: Vec<f32> = tokens.clone().map(|t| (1 + t + 100 * seq) as f32).collect();
        let keys = Array3::from_shape_vec((1, tokens.len(), 1), keys).map_err(|e| e.to_string())?;
        cache.append(seq, keys.view(), keys.view()).map_err(|e| e.to_string())?;
    }
    let pool = cache.blocks();
    let slots = pool
        .keys
        .chunks(block_size)
        .map(|block| {
            let key = |&k: &f32| (k > 0.0).then(|| (k as usize / 100, (k as usize - 1) % 100));
            block.iter().map(key).collect()
        })
        .collect();
    Ok(Pool { slots, tables: pool.tables })
}

/// One GPT-2 block as lesson 12 computes it: pre-LayerNorm attention with the KV cache, the
/// MLP, the two residual adds; where each stored value is rounded by lesson 12's precision
/// strategies (their names and formats from `Precision`); and lesson 11's paged cache.
pub fn gpt2_block() -> Result<String, String> {
    let config = Config::gpt2_small();
    let (c, h, d) = (config.n_embd, config.n_head, config.head_dim());
    let mut svg =
        Svg::titled(780.0, 740.0, "One GPT-2 block: its KV cache, and where each strategy rounds");
    svg.text(
        390.0,
        46.0,
        &format!(
            "GPT-2 small: C = {c} channels, H = {h} heads of D = {d}, {} blocks; N tokens, n of them new when decoding",
            config.n_layer
        ),
        Text::CENTRED,
    );

    // The residual stream, down the left.
    let stream_x = 46.0;
    let (bx, bw) = (96.0, 234.0);
    let centre = bx + bw / 2.0;
    svg.text(stream_x, 72.0, "x [N, C]", Text { bold: true, ..Text::CENTRED });
    svg.line((stream_x, 78.0), (stream_x, 636.0), colour::INK, 3.0, false);
    tags(&mut svg, (stream_x + 6.0, 80.0), &["R"]);
    let step = 52.0;
    let box_h = 32.0;
    // Each branch: its boxes top to bottom, the stream's add after the last.
    let attention_top = 96.0;
    let mlp_top = attention_top + 5.0 * step + 20.0;
    let boxes: [(f64, &str, &[&str]); 8] = [
        (attention_top, "LayerNorm ln_1", &["W", "LN"]),
        (attention_top + step, "c_attn: x W + b, [C, 3C]", &["W"]),
        (attention_top + 2.0 * step + 8.0, "attention, causal", &[]),
        (attention_top + 3.0 * step + 16.0, "heads side by side; c_proj", &["W"]),
        (mlp_top, "LayerNorm ln_2", &["W", "LN"]),
        (mlp_top + step, "c_fc: [C, 4C]", &["W"]),
        (mlp_top + 2.0 * step, "GELU (tanh)", &[]),
        (mlp_top + 3.0 * step, "mlp.c_proj: [4C, C]", &["W"]),
    ];
    for (k, (y, text, own)) in boxes.iter().enumerate() {
        let height = if k == 2 { box_h + 12.0 } else { box_h };
        if k == 2 {
            let lines = [text.to_string(), "any registered version".to_string()];
            svg.labelled_box(bx, *y, bw, height, colour::PLAIN, &lines);
            svg.outline(bx, *y, bw, height, colour::INK, 2.5);
        } else {
            svg.labelled_box(bx, *y, bw, height, colour::PLAIN, &[text.to_string()]);
        }
        tags(&mut svg, (bx + bw + 6.0, y + 8.0), own);
        let first_of_branch = k % 4 == 0;
        if first_of_branch {
            svg.arrow((stream_x, y + height / 2.0), (bx, y + height / 2.0));
        } else {
            let above = boxes[k - 1].0 + if k == 3 { box_h + 12.0 } else { box_h };
            svg.arrow((centre, above), (centre, *y));
            tags(&mut svg, (centre + 8.0, (above + y) / 2.0 - 8.0), &["A"]);
        }
        if k % 4 == 3 {
            // Back into the stream: x += the branch's output.
            let (bottom, add_y) = (y + height, y + height + 26.0);
            svg.line((centre, bottom), (centre, add_y), colour::INK, 1.5, false);
            tags(&mut svg, (centre + 8.0, bottom + 4.0), &["A"]);
            svg.arrow((centre, add_y), (stream_x + 10.0, add_y));
            svg.rect(stream_x - 10.0, add_y - 10.0, 20.0, 20.0, colour::PLAIN);
            svg.text(stream_x, add_y + 5.0, "+", Text { bold: true, ..Text::CENTRED });
            tags(&mut svg, (stream_x + 14.0, add_y + 6.0), &["R"]);
        }
    }
    let end_y = 646.0;
    svg.labelled_box(
        bx - 76.0,
        end_y,
        bw + 76.0,
        42.0,
        colour::PLAIN,
        &[
            format!("{} blocks, then ln_f and", config.n_layer),
            "logits = ln_f(x) wteᵀ [N, V]".to_string(),
        ],
    );
    tags(&mut svg, (bx + bw + 6.0, end_y + 13.0), &["W", "LN", "A", "logits"]);

    // The cache, beside attention.
    let (cx, cw) = (430.0, 330.0);
    let (qkv_y, attention_y) = (boxes[1].0, boxes[2].0);
    let (cache_y, cache_h) = (qkv_y - 14.0, 78.0);
    svg.labelled_box(
        cx,
        cache_y,
        cw,
        cache_h,
        colour::SLOW,
        &[
            "KV cache, one per layer (lesson 11's KvCache)".to_string(),
            format!("K, V [H, capacity, D]; capacity {}", config.n_positions),
            "Session::feed appends each new token's".to_string(),
            "K and V, then attends over all of them".to_string(),
        ],
    );
    tags(&mut svg, (cx + cw - 22.0, cache_y + cache_h + 4.0), &["A"]);
    svg.arrow((bx + bw + 30.0, qkv_y + box_h / 2.0), (cx, qkv_y + box_h / 2.0));
    svg.text(bx + bw + 60.0, qkv_y + box_h / 2.0 - 6.0, "K, V", Text::SMALL);
    svg.arrow((cx + 40.0, cache_y + cache_h), (bx + bw, attention_y + 30.0));
    svg.text(bx + bw + 8.0, attention_y + 58.0, "every cached K, V [H, len, D]", Text::SMALL_LEFT);
    svg.text(
        centre - 8.0,
        attention_y - 10.0,
        "Q [H, n, D]",
        Text { anchor: "end", ..Text::SMALL },
    );

    // Lesson 11's paged layout of the same cache.
    let Pool { slots, tables } = paged_pool()?;
    let py = 296.0;
    svg.text(cx, py, "Paged (lesson 11's PagedKvCache): blocks of", Text::LEFT);
    svg.text(cx, py + 16.0, "a shared pool, a block table per sequence", Text::LEFT);
    let (slot_w, gap) = (12.0, 4.0);
    let block_w = slots[0].len() as f64 * slot_w;
    let fills = [colour::LOADED, colour::FULL];
    for (b, block) in slots.iter().enumerate() {
        let x = cx + b as f64 * (block_w + gap);
        for (s, slot) in block.iter().enumerate() {
            let sx = x + s as f64 * slot_w;
            match slot {
                Some((seq, token)) => {
                    svg.rect(sx, py + 28.0, slot_w, 20.0, fills[seq % 2]);
                    svg.text(sx + slot_w / 2.0, py + 42.0, &token.to_string(), Text::SMALL);
                }
                None => svg.rect(sx, py + 28.0, slot_w, 20.0, colour::SKIPPED),
            }
        }
        svg.outline(x, py + 28.0, block_w, 20.0, colour::INK, 2.0);
        svg.text(x + block_w / 2.0, py + 62.0, &format!("blk {b}"), Text::SMALL);
    }
    for (seq, table) in tables.iter().enumerate() {
        let y = py + 84.0 + seq as f64 * 18.0;
        let blocks: Vec<String> = table.iter().map(usize::to_string).collect();
        legend(
            &mut svg,
            cx,
            y,
            fills[seq % 2],
            &format!("sequence {seq}: table [{}]", blocks.join(", ")),
        );
    }
    svg.text(
        cx,
        py + 124.0,
        &format!("token j: block table[j / {}], slot j % {}", slots[0].len(), slots[0].len()),
        Text::LEFT,
    );

    // The strategies.
    let ty = 456.0;
    svg.text(cx, ty, "Stored in 16 bits, strategy by strategy", Text { bold: true, ..Text::LEFT });
    let name_w = 104.0;
    let col_w = (cw - name_w) / STORED.len() as f64;
    for (k, stored) in STORED.iter().enumerate() {
        let x = cx + name_w + k as f64 * col_w;
        let width = 8.0 + 6.6 * stored.tag.len() as f64;
        let left = (x + col_w / 2.0 - width / 2.0).min(cx + cw - width);
        tags(&mut svg, (left, ty + 10.0), &[stored.tag]);
    }
    for (r, precision) in Precision::ALL.iter().enumerate() {
        let y = ty + 32.0 + r as f64 * 22.0;
        svg.text(cx, y + 15.0, &precision.name(), Text::LEFT);
        for (k, stored) in STORED.iter().enumerate() {
            let x = cx + name_w + k as f64 * col_w;
            let dtype = (stored.format)(*precision);
            let fill = if dtype == Dtype::F32 { colour::PLAIN } else { tag_fill(stored.format) };
            svg.rect(x, y, col_w, 22.0, fill);
            svg.text(x + col_w / 2.0, y + 15.0, dtype.name(), Text::SMALL);
        }
    }
    let key: Vec<String> = STORED.iter().map(|s| format!("{}: {}", s.tag, s.meaning)).collect();
    let key = [key[..2].join("; "), key[2..4].join("; ")];
    svg.lines(cx, ty + 160.0, &key, Text::SMALL_LEFT);
    legend(&mut svg, cx + 60.0, ty + 204.0, colour::CURRENT, "16-bit in mixed and aggressive");
    legend(&mut svg, cx + 60.0, ty + 224.0, colour::DONE, "16-bit in aggressive only");
    let notes = [
        "Each tag marks values stored in the format its column of the table gives. Arithmetic inside an operation (a product's".to_string(),
        "sums, the softmax, GELU) stays f32 in every strategy, except the aggressive LayerNorm's sums, rounded at every step.".to_string(),
    ];
    svg.lines(20.0, 712.0, &notes, Text { size: 12.0, ..Text::LEFT });
    Ok(svg.finish(
        "One GPT-2 block with its KV cache, and where lesson 12's precision strategies round",
    ))
}
