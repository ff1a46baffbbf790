//! What exercise 11's checks do to a cache: a [`Model`] runs calls on the solution's cache and
//! on plain arrays of each sequence's tokens side by side, and compares them; and the
//! hand-made scenarios (errors, the head mapping, a fork then releases, beam search).

use ndarray::{Array3, Array4, Axis, concatenate};
use proptest::prelude::*;

use lesson11::problem::{DecodeProblem, DecodeSpec};
use reference::problem::SplitMix64;
use reference::{AttentionOptions, Tolerance};

use super::{Exercise11, SharedCache};

/// The sizes of a cache for a check, and the lengths its sequences grow to.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub batch: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    /// Blocks left over once every sequence holds its `lens` tokens.
    pub spare: usize,
    /// The tokens each sequence grows to (1 to 40).
    pub lens: Vec<usize>,
    /// The seed of the tokens and of the pieces they are appended in.
    pub seed: u64,
}

impl Layout {
    /// Blocks for every sequence's `lens` tokens, and the spare ones.
    fn pool_blocks(&self) -> usize {
        self.lens.iter().map(|n| n.div_ceil(self.block_size)).sum::<usize>() + self.spare
    }
}

/// Caches of `batch` sequences, 1 to 3 heads of 1 to 8, blocks of 1 to 8 tokens.
pub(crate) fn layouts(batch: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Layout> {
    (batch, 1usize..=3, 1usize..=8, 1usize..=8, 1usize..=3, any::<u64>()).prop_flat_map(
        |(batch, kv_heads, head_dim, block_size, spare, seed)| {
            proptest::collection::vec(1usize..=40, batch).prop_map(move |lens| Layout {
                batch,
                kv_heads,
                head_dim,
                block_size,
                spare,
                lens,
                seed,
            })
        },
    )
}

/// `[Hkv, n, D]` standard normal values.
pub(crate) fn random_tokens(
    rng: &mut SplitMix64,
    kv_heads: usize,
    n: usize,
    d: usize,
) -> Array3<f32> {
    Array3::from_shape_simple_fn((kv_heads, n, d), || rng.normal())
}

/// A solution's cache and what it should hold: each sequence's keys and values, `[Hkv, len,
/// D]`, kept as plain arrays.
pub(crate) struct Model {
    pub cache: Box<dyn SharedCache>,
    layout: Layout,
    pool: usize,
    keys: Vec<Array3<f32>>,
    values: Vec<Array3<f32>>,
    rng: SplitMix64,
}

impl Model {
    /// An empty cache for `layout`, with a pool of blocks for its `lens` and its spare ones,
    /// and `extra` more.
    pub fn new(x: &impl Exercise11, layout: &Layout, extra: usize) -> Result<Self, String> {
        let pool = layout.pool_blocks() + extra;
        let Layout { batch, kv_heads, head_dim, block_size, .. } = *layout;
        let cache = x.new_cache(batch, kv_heads, head_dim, block_size, pool).map_err(|e| {
            format!("new_cache({batch}, {kv_heads}, {head_dim}, {block_size}, {pool}): {e}")
        })?;
        let empty = Array3::zeros((kv_heads, 0, head_dim));
        Ok(Self {
            cache,
            layout: layout.clone(),
            pool,
            keys: vec![empty.clone(); batch],
            values: vec![empty; batch],
            rng: SplitMix64::new(layout.seed),
        })
    }

    /// The tokens sequence 0 grows to: the length a fork's parent is given.
    pub fn prefix_len(&self) -> usize {
        self.layout.lens[0]
    }

    /// The tokens sequence `seq` should hold.
    fn len(&self, seq: usize) -> usize {
        self.keys[seq].dim().1
    }

    /// Blocks in the table of `seq`.
    pub fn blocks_of(&self, seq: usize) -> usize {
        self.cache.block_table(seq).map_or(0, <[usize]>::len)
    }

    /// Grows every sequence to its `lens` tokens by appending pieces of 1 to `2 * block_size`
    /// tokens to the sequences in turn, so that their blocks interleave in the pool.
    pub fn fill_in_pieces(&mut self) -> Result<(), String> {
        let lens = self.layout.lens.clone();
        while (0..lens.len()).any(|seq| self.len(seq) < lens[seq]) {
            for (seq, &target) in lens.iter().enumerate() {
                let left = target - self.len(seq).min(target);
                if left > 0 {
                    let n = (1 + self.rng.below(2 * self.layout.block_size)).min(left);
                    self.append_new(seq, n)?;
                }
            }
        }
        self.expect_contents("after appending in pieces")
    }

    /// Appends `n` new random tokens to `seq`.
    pub fn append_new(&mut self, seq: usize, n: usize) -> Result<(), String> {
        let (kv, d) = (self.layout.kv_heads, self.layout.head_dim);
        let keys = random_tokens(&mut self.rng, kv, n, d);
        let values = random_tokens(&mut self.rng, kv, n, d);
        let before = self.len(seq);
        self.cache.append(seq, keys.view(), values.view()).map_err(|e| {
            format!("appending {n} tokens to sequence {seq} (holding {before}) failed: {e}")
        })?;
        let grow = |x: &Array3<f32>, new: &Array3<f32>| concatenate![Axis(1), *x, *new];
        self.keys[seq] = grow(&self.keys[seq], &keys);
        self.values[seq] = grow(&self.values[seq], &values);
        Ok(())
    }

    /// Forks `parent` into `child`.
    pub fn fork(&mut self, parent: usize, child: usize) -> Result<(), String> {
        self.cache
            .fork(parent, child)
            .map_err(|e| format!("fork({parent}, {child}) failed: {e}"))?;
        self.keys[child] = self.keys[parent].clone();
        self.values[child] = self.values[parent].clone();
        Ok(())
    }

    /// Releases `seq`, and checks that it holds nothing and names no block.
    pub fn release(&mut self, seq: usize) -> Result<(), String> {
        self.cache.release(seq).map_err(|e| format!("release({seq}) failed: {e}"))?;
        self.keys[seq] = Array3::zeros((self.layout.kv_heads, 0, self.layout.head_dim));
        self.values[seq] = self.keys[seq].clone();
        let (len, table) = (self.cache.reads().len(seq), self.cache.block_table(seq));
        if len != 0 || table.is_none_or(|t| !t.is_empty()) {
            return Err(format!(
                "after release({seq}): length {len} and block table {table:?}; expected 0 and []"
            ));
        }
        Ok(())
    }

    /// Checks that every sequence reads back exactly its tokens, through `key` and `value` and
    /// through `blocks()` (the view a GPU kernel follows), and that the cache's largest key
    /// norm bounds them.
    pub fn expect_contents(&self, when: &str) -> Result<(), String> {
        let blocks = self.cache.reads().blocks();
        let (kv, d) = (self.layout.kv_heads, self.layout.head_dim);
        blocks.check(kv, d).map_err(|e| format!("{when}: blocks(): {e}"))?;
        for seq in 0..self.layout.batch {
            let len = self.len(seq);
            if self.cache.reads().len(seq) != len || blocks.lens[seq] != len {
                return Err(format!(
                    "{when}: sequence {seq} holds {} tokens (blocks() says {}); expected {len}",
                    self.cache.reads().len(seq),
                    blocks.lens[seq]
                ));
            }
            for j in 0..len {
                let block = blocks.tables[seq][j / blocks.block_size];
                for g in 0..kv {
                    let at = ((block * kv + g) * blocks.block_size + j % blocks.block_size) * d;
                    let reads = [
                        ("key", self.cache.reads().key(seq, g, j), &self.keys[seq]),
                        ("value", self.cache.reads().value(seq, g, j), &self.values[seq]),
                        ("key in blocks()", &blocks.keys[at..at + d], &self.keys[seq]),
                        ("value in blocks()", &blocks.values[at..at + d], &self.values[seq]),
                    ];
                    for (what, got, expected) in reads {
                        let expected = expected.slice(ndarray::s![g, j, ..]);
                        if got.iter().ne(expected.iter()) {
                            return Err(format!(
                                "{when}: sequence {seq}, token {j}, head {g}: the {what} reads \
                                 {got:?}; expected {expected}"
                            ));
                        }
                    }
                }
            }
        }
        let largest = self
            .keys
            .iter()
            .flat_map(|k| k.lanes(Axis(2)))
            .map(|row| row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt());
        let largest = largest.fold(0.0, f64::max);
        if self.cache.reads().largest_key_norm() < largest * (1.0 - 1e-6) {
            return Err(format!(
                "{when}: largest_key_norm() = {}, but a key has norm {largest}",
                self.cache.reads().largest_key_norm()
            ));
        }
        Ok(())
    }

    /// Checks the number of free blocks.
    pub fn expect_free(&self, expected: usize, when: &str) -> Result<(), String> {
        match self.cache.free_blocks() {
            free if free == expected => Ok(()),
            free => Err(format!("{when}: {free} free blocks; expected {expected}")),
        }
    }

    /// Checks that every block is free or named by a table, not both: free blocks plus the
    /// blocks the tables name make the pool.
    pub fn expect_free_is_unnamed(&self, when: &str) -> Result<(), String> {
        let mut named: Vec<usize> = (0..self.layout.batch).flat_map(|s| self.table(s)).collect();
        named.sort_unstable();
        named.dedup();
        let free = self.cache.free_blocks();
        if named.len() + free != self.pool {
            return Err(format!(
                "{when}: the tables name {} blocks and {free} are free, in a pool of {}: {}",
                named.len(),
                self.pool,
                if named.len() + free > self.pool {
                    "a block is counted free while a table still names it"
                } else {
                    "a block that no table names was never given back (a leak)"
                }
            ));
        }
        Ok(())
    }

    fn table(&self, seq: usize) -> Vec<usize> {
        self.cache.block_table(seq).map(<[usize]>::to_vec).unwrap_or_default()
    }

    /// Checks that `a` and `b` have the same block table.
    pub fn expect_same_table(&self, a: usize, b: usize) -> Result<(), String> {
        let (ta, tb) = (self.table(a), self.table(b));
        if ta == tb {
            return Ok(());
        }
        Err(format!(
            "after the forks sequence {a}'s table is {ta:?} and sequence {b}'s is {tb:?}; \
             expected the same blocks, shared"
        ))
    }

    /// Checks that the tables of `a` and `b` share their first `shared` blocks (the full
    /// blocks of the prefix) and nothing else, and that neither holds a block it does not need.
    pub fn expect_shared_prefix(&self, a: usize, b: usize, shared: usize) -> Result<(), String> {
        let (ta, tb) = (self.table(a), self.table(b));
        let bs = self.layout.block_size;
        let needed = |seq: usize, t: &[usize]| t.len() == self.len(seq).div_ceil(bs);
        let prefix_shared =
            ta.len() >= shared && tb.len() >= shared && ta[..shared] == tb[..shared];
        let rest_apart = ta[shared.min(ta.len())..].iter().all(|x| !tb.contains(x));
        if needed(a, &ta) && needed(b, &tb) && prefix_shared && rest_apart {
            return Ok(());
        }
        Err(format!(
            "tables {ta:?} ({} tokens) and {tb:?} ({} tokens), blocks of {bs}: expected the \
             {shared} full blocks of the forked prefix shared, every other block apart, and \
             ceil(len / {bs}) blocks each",
            self.len(a),
            self.len(b)
        ))
    }

    /// Every table and the free count, to compare before and after a call that must fail.
    fn snapshot(&self) -> (Vec<Vec<usize>>, usize) {
        ((0..self.layout.batch).map(|s| self.table(s)).collect(), self.cache.free_blocks())
    }
}

/// Runs `call` on the model's cache; it must fail and change nothing (tables, free blocks,
/// every token).
fn refused<T>(
    run: &mut Model,
    what: &str,
    call: impl FnOnce(&mut dyn SharedCache) -> Result<T, reference::AttentionError>,
) -> Result<(), String> {
    let before = run.snapshot();
    if call(run.cache.as_mut()).is_ok() {
        return Err(format!("{what}: expected an error, got Ok"));
    }
    if run.snapshot() != before {
        return Err(format!(
            "{what}: the error is right, but the call changed the cache: tables and free blocks \
             {:?} before, {:?} after",
            before,
            run.snapshot()
        ));
    }
    run.expect_contents(&format!("after {what} was refused"))
}

/// What usually makes [`super::CACHE_ERRORS`] fail.
pub(crate) const CACHE_ERRORS_HINT: &str = "Check everything before changing anything: the \
     sequence exists (lesson11::cache::no_such_sequence builds that error), keys and values are \
     [Hkv, n, D] with the same n >= 1 and finite values (lesson11::cache::check_new_tokens \
     checks these), and the pool has every block the tokens need; only then take blocks and \
     write. new refuses any size of 0.";

/// The cache's bad calls.
pub(crate) fn bad_cache_calls(x: &impl Exercise11) -> Result<(), String> {
    for sizes in
        [[0, 2, 3, 2, 3], [2, 0, 3, 2, 3], [2, 2, 0, 2, 3], [2, 2, 3, 0, 3], [2, 2, 3, 2, 0]]
    {
        let [b, h, d, bs, n] = sizes;
        if x.new_cache(b, h, d, bs, n).is_ok() {
            return Err(format!("new_cache({b}, {h}, {d}, {bs}, {n}): expected an error, got Ok"));
        }
    }
    // Two sequences, 2 heads of 3, blocks of 2, a pool of 3: sequence 0 takes 2 blocks.
    let layout = Layout {
        batch: 2,
        kv_heads: 2,
        head_dim: 3,
        block_size: 2,
        spare: 0,
        lens: vec![3],
        seed: 11,
    };
    let mut run = Model::new(x, &layout, 1)?;
    run.append_new(0, 3)?;
    let mut rng = SplitMix64::new(7);
    let mut tokens = |h, n, d| random_tokens(&mut rng, h, n, d);
    let good = tokens(2, 1, 3);
    let mut nan = tokens(2, 1, 3);
    nan[[1, 0, 2]] = f32::NAN;
    let mut inf = tokens(2, 1, 3);
    inf[[0, 0, 0]] = f32::INFINITY;
    let cases = [
        ("appending to sequence 2 of 2", 2, tokens(2, 1, 3), tokens(2, 1, 3)),
        ("keys with 3 heads for 2", 0, tokens(3, 1, 3), tokens(2, 1, 3)),
        ("keys and values of head dim 4 for 3", 0, tokens(2, 1, 4), tokens(2, 1, 4)),
        ("1 key and 2 values", 0, tokens(2, 1, 3), tokens(2, 2, 3)),
        ("0 tokens", 0, tokens(2, 0, 3), tokens(2, 0, 3)),
        ("a NaN key", 0, nan, good.clone()),
        ("an infinite value", 1, good.clone(), inf),
        ("3 tokens for sequence 1, 2 blocks, with 1 free", 1, tokens(2, 3, 3), tokens(2, 3, 3)),
    ];
    for (what, seq, keys, values) in cases {
        refused(&mut run, what, |c| c.append(seq, keys.view(), values.view()))?;
    }
    refused(&mut run, "release(2) of 2 sequences", |c| c.release(2))
}

/// What usually makes [`super::HEAD_MAPPING`] fail.
pub(crate) const HEAD_MAPPING_HINT: &str = "With G = Hq / Hkv, query heads 0 .. G share K/V \
     head 0, G .. 2G share K/V head 1, and so on: K/V head h / G, as grouped-query models are \
     trained. (h % Hkv would spread neighbouring query heads over different K/V heads.)";

/// Keys all 0 (every score equal) and K/V head `g`'s values all `g + 1`: query head `h`'s
/// output is the number of the K/V head it read, plus one.
pub(crate) fn head_mapping(x: &impl Exercise11) -> Result<(), String> {
    for (q_heads, kv_heads) in [(6, 3), (8, 2), (4, 1), (2, 2)] {
        let spec = DecodeSpec {
            q_heads,
            kv_heads,
            lens: vec![3, 2],
            q_len: 1,
            head_dim: 4,
            causal: false,
            seed: 5,
        };
        let mut p = DecodeProblem::random(&spec);
        p.keys.iter_mut().for_each(|k| k.fill(0.0));
        for v in &mut p.values {
            for (g, mut head) in v.outer_iter_mut().enumerate() {
                head.fill(g as f32 + 1.0);
            }
        }
        let cache = p.contiguous(0).map_err(|e| e.to_string())?;
        let out = x.decode(&cache, &p.q, &p.options(), 1).map_err(|e| e.to_string())?;
        let group = q_heads / kv_heads;
        for ((seq, h, _, _), &o) in out.o.indexed_iter() {
            if (o - (h / group) as f32 - 1.0).abs() > 1e-5 {
                return Err(format!(
                    "Hq = {q_heads}, Hkv = {kv_heads}: query head {h} of sequence {seq} read the \
                     values of K/V head {}; expected K/V head {} = {h} / {group}",
                    o - 1.0,
                    h / group
                ));
            }
        }
    }
    Ok(())
}

/// Decoding's bad calls: each must be an error.
pub(crate) fn bad_decodes(x: &impl Exercise11) -> Result<(), String> {
    let spec = DecodeSpec {
        q_heads: 4,
        kv_heads: 2,
        lens: vec![3, 1],
        q_len: 1,
        head_dim: 4,
        causal: true,
        seed: 3,
    };
    let p = DecodeProblem::random(&spec);
    let cache = p.contiguous(1).map_err(|e| e.to_string())?;
    let mut nan = p.q.clone();
    nan[[1, 2, 0, 3]] = f32::NAN;
    let options = AttentionOptions::causal();
    let cases = [
        ("0 splits", p.q.clone(), 0),
        ("queries for 3 sequences of 2", Array4::zeros((3, 4, 1, 4)), 1),
        ("3 query heads over 2 K/V heads", Array4::zeros((2, 3, 1, 4)), 1),
        ("2 query tokens of a sequence holding 1", Array4::zeros((2, 4, 2, 4)), 1),
        ("queries of head dim 5 for 4", Array4::zeros((2, 4, 1, 5)), 1),
        ("a NaN query", nan, 2),
    ];
    for (what, q, splits) in cases {
        if x.decode(&cache, &q, &options, splits).is_ok() {
            return Err(format!("{what}: expected an error, got a result"));
        }
    }
    Ok(())
}

/// Sequence 0 forked into 1, whose first append copies the shared, partly filled block;
/// sequence 0 released; sequence 2 takes every free block: sequence 1 keeps its tokens, and
/// once all are released every block is free.
pub(crate) fn fork_then_release(x: &impl Exercise11, layout: &Layout) -> Result<(), String> {
    let mut run = Model::new(x, layout, 3)?;
    let bs = layout.block_size;
    let prefix = run.prefix_len() + usize::from(run.prefix_len().is_multiple_of(bs));
    run.append_new(0, prefix)?;
    run.fork(0, 1)?;
    run.append_new(1, 1)?;
    run.release(0)?;
    run.expect_free_is_unnamed("after fork(0, 1), an append to 1 and release(0)")?;
    let free = run.cache.free_blocks();
    if free > 0 {
        run.append_new(2, free * bs)?;
    }
    run.expect_contents("after release(0) and sequence 2 taking every free block")?;
    run.release(1)?;
    run.release(2)?;
    run.expect_free(run.pool, "after every sequence was released")
}

/// What usually makes [`super::FORK_ERRORS`] fail.
pub(crate) const FORK_ERRORS_HINT: &str = "Refuse before changing anything: a fork into a \
     sequence that holds tokens (it would lose them; release it first), into itself, or from \
     or to a sequence the cache does not hold. In append, count the block a copy on write needs \
     with the new blocks before taking any.";

/// Forks the cache must refuse, and a copy on write with no free block.
pub(crate) fn bad_forks(x: &impl Exercise11) -> Result<(), String> {
    let layout = Layout {
        batch: 3,
        kv_heads: 2,
        head_dim: 3,
        block_size: 4,
        spare: 2,
        lens: vec![6, 2],
        seed: 9,
    };
    let mut run = Model::new(x, &layout, 0)?;
    run.append_new(0, 6)?;
    run.append_new(1, 2)?;
    for (parent, child, what) in [
        (3, 2, "fork(3, 2) from a sequence the cache does not hold"),
        (0, 3, "fork(0, 3) into a sequence the cache does not hold"),
        (0, 0, "fork(0, 0) into itself"),
        (2, 2, "fork(2, 2) of an empty sequence into itself"),
        (0, 1, "fork(0, 1) into a sequence holding 2 tokens"),
        (2, 0, "fork(2, 0) of an empty sequence into one holding 6 tokens"),
    ] {
        refused(&mut run, what, |c| c.fork(parent, child))?;
    }
    // One block of 4, holding 3 tokens of sequence 0, shared with sequence 1: an append to 1
    // needs a copy, and there is no free block. Once 0 is released, 1 writes in place.
    let layout = Layout {
        batch: 2,
        kv_heads: 1,
        head_dim: 2,
        block_size: 4,
        spare: 0,
        lens: vec![3],
        seed: 4,
    };
    let mut run = Model::new(x, &layout, 0)?;
    run.append_new(0, 3)?;
    run.fork(0, 1)?;
    let one = Array3::ones((1, 1, 2));
    refused(
        &mut run,
        "an append to sequence 1 whose only block is shared, with no block free",
        |c| c.append(1, one.view(), one.view()),
    )?;
    run.release(0)?;
    run.append_new(1, 1)?;
    run.expect_free(0, "after release(0) and an append to 1, which then owns its block alone")?;
    run.expect_contents("after release(0) and an append to 1")
}

/// Random appends, forks and releases over 4 sequences of at most 24 tokens, compared with the
/// model after every call; then one decoding step of every sequence against the oracle.
pub(crate) fn beam_search(x: &impl Exercise11, layout: &Layout) -> Result<(), String> {
    const LONGEST: usize = 24;
    let bs = layout.block_size;
    let blocks = layout.batch * LONGEST.div_ceil(bs) + 2;
    let layout = Layout { spare: blocks, lens: vec![0; layout.batch], ..layout.clone() };
    let mut run = Model::new(x, &layout, 0)?;
    let mut rng = SplitMix64::new(layout.seed ^ 0xbea3);
    for call in 0..40 {
        let seq = rng.below(layout.batch);
        let what = match rng.below(10) {
            0..=5 => {
                let n = 1 + rng.below(bs + 1);
                if run.len(seq) + n > LONGEST {
                    continue;
                }
                run.append_new(seq, n)?;
                format!("append of {n} tokens to {seq}")
            }
            6..=7 => {
                let child = (seq + 1 + rng.below(layout.batch - 1)) % layout.batch;
                if run.len(child) > 0 {
                    run.release(child)?;
                }
                run.fork(seq, child)?;
                format!("fork({seq}, {child})")
            }
            _ => {
                run.release(seq)?;
                format!("release({seq})")
            }
        };
        let when = format!("after call {call}, {what}");
        run.expect_contents(&when)?;
        run.expect_free_is_unnamed(&when)?;
    }
    for seq in 0..layout.batch {
        if run.len(seq) == 0 {
            run.append_new(seq, 1)?;
        }
    }
    let lens: Vec<usize> = (0..layout.batch).map(|s| run.len(s)).collect();
    let spec = DecodeSpec {
        q_heads: 2 * layout.kv_heads,
        kv_heads: layout.kv_heads,
        lens,
        q_len: 1,
        head_dim: layout.head_dim,
        causal: true,
        seed: layout.seed,
    };
    let mut p = DecodeProblem::random(&spec);
    p.keys = run.keys.clone();
    p.values = run.values.clone();
    let out = lesson11::decode(run.cache.reads(), &p.q, &p.options(), 2)
        .map_err(|e| format!("lesson11::decode on your cache after the calls: {e}"))?;
    p.check(&out, Tolerance::F32)
        .map_err(|e| format!("lesson11::decode on your cache after the calls: {e}"))
}
