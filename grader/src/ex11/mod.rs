//! Exercise 11: the paged KV cache and decoding with grouped heads (the warm-up), then prefix
//! sharing: `fork` gives a sequence another's tokens by sharing its blocks, copied only when
//! written (the main task).

pub mod mutants;
mod scenarios;
mod solution;

use std::rc::Rc;

use ndarray::{Array4, ArrayView3};
use proptest::prelude::*;

use lesson11::KeyValues;
use lesson11::problem::{DecodeProblem, DecodeSpec};
use reference::{AttentionError, AttentionOptions, AttentionOutput, Tolerance};

use crate::check::{Check, for_all, main_task};
use crate::forward::CASES;
use scenarios::{Model, layouts};

pub use solution::SharedPagedCache;

// The names of this exercise's checks (the planted-bug mutants name the check meant to catch
// them).
/// Check name.
pub const APPEND_READ: &str =
    "tokens appended in pieces read back in order, across blocks, taking only the blocks needed";
/// Check name.
pub const RELEASE: &str =
    "a released sequence holds nothing, its table is empty, its blocks serve other sequences";
/// Check name.
pub const CACHE_ERRORS: &str =
    "bad sizes, shapes, values and a full pool are errors that change nothing";
/// Check name.
pub const ONE_PASS: &str = "decoding in one pass: grouped heads, several sequences, the oracle";
/// Check name.
pub const HEAD_MAPPING: &str = "query head h reads K/V head h / G (GQA and MQA)";
/// Check name.
pub const CAUSAL_PREFILL: &str =
    "prefill with the causal mask: query row i of Nq sees keys 0 ..= i + len - Nq";
/// Check name.
pub const SPLITS: &str = "any number of splits gives the oracle's answer";
/// Check name.
pub const DECODE_ERRORS: &str =
    "zero splits, heads the K/V heads do not divide, too few tokens: errors";
/// Check name.
pub const FORK_SHARES: &str = "fork shares the parent's blocks: no block taken, the same tokens";
/// Check name.
pub const FORK_DIVERGE: &str = "after a fork each sequence appends its own tokens; only a shared, partly filled block is copied";
/// Check name.
pub const FORK_RELEASE: &str =
    "a block goes back to the pool when the last table naming it is released";
/// Check name.
pub const FORK_ERRORS: &str = "forking into a busy sequence or itself, or a copy with no free block: errors that change nothing";
/// Check name.
pub const FORK_RANDOM: &str = "random appends, forks and releases (beam search): every sequence \
     reads its own tokens, decodes to the oracle's answer, and the free blocks are those no table names";

/// The calls the checks make on a solution's paged cache: the lesson's, and the main task's
/// `fork`; the reads go through [`SharedCache::reads`].
pub trait SharedCache: Send {
    /// The cache as decoding reads it.
    fn reads(&self) -> &dyn KeyValues;
    /// Appends `n` tokens, `[Hkv, n, D]` keys and values, to sequence `seq`.
    fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError>;
    /// Ends sequence `seq`.
    fn release(&mut self, seq: usize) -> Result<(), AttentionError>;
    /// Gives the empty sequence `child` the tokens of `parent`, sharing its blocks.
    fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError>;
    /// Blocks no sequence holds.
    fn free_blocks(&self) -> usize;
    /// The blocks of `seq` in token order; `None` if there is no such sequence.
    fn block_table(&self, seq: usize) -> Option<&[usize]>;
}

/// A new cache, as [`SharedPagedCache::new`] takes its sizes.
pub type NewCache = Result<Box<dyn SharedCache>, AttentionError>;

crate::adapter::exercise_trait! {
    /// What a solution of exercise 11 provides.
    pub trait Exercise11;
    /// An empty paged cache: `batch` sequences, `kv_heads` heads of `head_dim`, a pool of
    /// `blocks` blocks of `block_size` tokens.
    fn new_cache(
        batch: usize,
        kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        blocks: usize,
    ) -> NewCache;
    /// The new tokens' attention over any cache, each sequence's keys in `splits` chunks.
    fn decode(
        cache: &dyn KeyValues,
        q: &Array4<f32>,
        options: &AttentionOptions,
        splits: usize,
    ) -> Result<AttentionOutput<f32>, AttentionError>;
}

/// The learner's cache seen as a [`SharedCache`]: the cache and its methods (the exercise
/// crate cannot implement the grader's trait for its own type, so `hidden.rs` passes the
/// methods as function pointers).
pub struct Adapted<C> {
    /// The cache.
    pub cache: C,
    /// Its methods.
    pub methods: CacheMethods<C>,
}

/// The methods of a cache type `C`, as function pointers.
#[allow(clippy::type_complexity)]
pub struct CacheMethods<C> {
    /// `C::append`
    pub append: fn(&mut C, usize, ArrayView3<f32>, ArrayView3<f32>) -> Result<(), AttentionError>,
    /// `C::release`
    pub release: fn(&mut C, usize) -> Result<(), AttentionError>,
    /// `C::fork`
    pub fork: fn(&mut C, usize, usize) -> Result<(), AttentionError>,
    /// `C::free_blocks`
    pub free_blocks: fn(&C) -> usize,
    /// `C::block_table`
    pub block_table: for<'a> fn(&'a C, usize) -> Option<&'a [usize]>,
}

impl<C: KeyValues + Send> SharedCache for Adapted<C> {
    fn reads(&self) -> &dyn KeyValues {
        &self.cache
    }
    fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        (self.methods.append)(&mut self.cache, seq, keys, values)
    }
    fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        (self.methods.release)(&mut self.cache, seq)
    }
    fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError> {
        (self.methods.fork)(&mut self.cache, parent, child)
    }
    fn free_blocks(&self) -> usize {
        (self.methods.free_blocks)(&self.cache)
    }
    fn block_table(&self, seq: usize) -> Option<&[usize]> {
        (self.methods.block_table)(&self.cache, seq)
    }
}

/// The graded checks of exercise 11: the cache, then decoding, then the main task.
pub fn checks(solution: impl Exercise11 + 'static) -> Vec<Check> {
    let s = Rc::new(solution);
    let mut checks = cache_checks(s.clone());
    checks.extend(decode_checks(s.clone()));
    checks.extend(main_task(fork_checks(s)));
    checks
}

/// The warm-up's checks of the cache.
fn cache_checks(s: Rc<impl Exercise11 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let append = Check::new(
        APPEND_READ,
        "Token j of a sequence lives in block table[j / block_size], slot j % block_size; new \
         tokens start at the sequence's length. A sequence of n tokens holds ceil(n / \
         block_size) blocks: take a block only when the next token has no slot left. If you have \
         begun the main task: copy on write only when MORE than one table names the last block \
         (a block the sequence owns alone is written in place).",
        move || {
            for_all(CASES, layouts(1..=3), |layout| {
                let mut run = Model::new(x.as_ref(), &layout, 0)?;
                run.fill_in_pieces()?;
                run.expect_free(layout.spare, "after the appends (the pool was sized for them)")
            })
        },
    );
    let x = s.clone();
    let release = Check::new(
        RELEASE,
        "release gives every block of the sequence back to the pool, empties its block table \
         and sets its length to 0. A table that keeps its old blocks points at blocks another \
         sequence may write next (a stale block table).",
        move || {
            for_all(CASES, layouts(2..=3), |layout| {
                let mut run = Model::new(x.as_ref(), &layout, 0)?;
                run.fill_in_pieces()?;
                let held = run.blocks_of(0);
                run.release(0)?;
                run.expect_free(layout.spare + held, "after releasing sequence 0")?;
                // Another sequence takes the freed blocks but two, then sequence 0 starts
                // again with two blocks' worth.
                let free_tokens = run.cache.free_blocks().saturating_sub(2) * layout.block_size;
                if free_tokens > 0 {
                    run.append_new(1, free_tokens)?;
                }
                run.append_new(0, layout.block_size + 1)?;
                run.expect_contents("after releasing sequence 0, refilling and appending to it")
            })
        },
    );
    let x = s;
    let errors = Check::new(CACHE_ERRORS, scenarios::CACHE_ERRORS_HINT, move || {
        scenarios::bad_cache_calls(x.as_ref())
    });
    vec![append, release, errors]
}

/// Decoding problems: 1 to 3 sequences of 1 to 200 tokens, MHA to MQA, 1 to 3 query tokens.
fn specs(causal: bool) -> impl Strategy<Value = DecodeSpec> {
    (1usize..=3, 1usize..=3, 1usize..=3, 1usize..=3, 1usize..=24, any::<u64>()).prop_flat_map(
        move |(batch, kv_heads, group, q_len, head_dim, seed)| {
            proptest::collection::vec(q_len..=200usize, batch).prop_map(move |lens| DecodeSpec {
                q_heads: kv_heads * group,
                kv_heads,
                lens,
                q_len,
                head_dim,
                causal,
                seed,
            })
        },
    )
}

/// Decodes `spec`'s problem with `splits` from a contiguous and a paged cache (the lesson's,
/// so that only the decode is graded here) and checks both against the oracle.
fn decode_matches_oracle(
    x: &impl Exercise11,
    spec: &DecodeSpec,
    splits: usize,
) -> Result<(), String> {
    let p = DecodeProblem::random(spec);
    let contiguous = p.contiguous(2).map_err(|e| e.to_string())?;
    let paged = p.paged(1 + spec.seed as usize % 16, 1).map_err(|e| e.to_string())?;
    let caches: [(&dyn KeyValues, &str); 2] = [(&contiguous, "contiguous"), (&paged, "paged")];
    for (cache, layout) in caches {
        let out = x.decode(cache, &p.q, &p.options(), splits).map_err(|e| e.to_string())?;
        p.check(&out, Tolerance::F32)
            .map_err(|e| format!("{layout} cache, {splits} splits: {e}"))?;
    }
    Ok(())
}

/// The warm-up's checks of decoding.
fn decode_checks(s: Rc<impl Exercise11 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let one_pass = Check::new(
        ONE_PASS,
        "Each sequence has its own length: its keys are 0 .. len(seq). Scale the scores, keep \
         the online softmax's (m, l, acc) per query row, and finish with O = acc / l, L = m + \
         ln l.",
        move || for_all(CASES, specs(false), |spec| decode_matches_oracle(x.as_ref(), &spec, 1)),
    );
    let x = s.clone();
    let mapping = Check::new(HEAD_MAPPING, scenarios::HEAD_MAPPING_HINT, move || {
        scenarios::head_mapping(x.as_ref())
    });
    let x = s.clone();
    let causal = Check::new(
        CAUSAL_PREFILL,
        "The queries are the last Nq tokens of the sequence, already in the cache: query row i \
         is token len - Nq + i and sees the keys up to and including itself, j <= i + len - Nq.",
        move || {
            let specs = specs(true).prop_filter("prefill", |s| s.q_len > 1);
            for_all(CASES, specs, |spec| decode_matches_oracle(x.as_ref(), &spec, 1))
        },
    );
    let x = s.clone();
    let splits = Check::new(
        SPLITS,
        "Each chunk's partial (m, l, acc) is under its own maximum: before adding them, rescale \
         each by e^(m_s - m) with m the largest m_s (or merge normalised (O_s, L_s) with weights \
         e^(L_s - L)). A chunk past a row's last visible key weighs nothing.",
        move || {
            let splits = prop_oneof![2..=8usize, 9..=300usize];
            let masks = prop_oneof![specs(false), specs(true)];
            for_all(CASES, (masks, splits), |(spec, splits)| {
                decode_matches_oracle(x.as_ref(), &spec, splits)
            })
        },
    );
    let x = s;
    let errors = Check::new(
        DECODE_ERRORS,
        "Check before computing: lesson11::decode::check_decode checks the queries against the \
         cache's shape (batch, head dim, heads that the K/V heads divide, every sequence holding \
         at least Nq tokens); zero splits is your own check.",
        move || scenarios::bad_decodes(x.as_ref()),
    );
    vec![one_pass, mapping, causal, splits, errors]
}

/// The main task's checks.
fn fork_checks(s: Rc<impl Exercise11 + 'static>) -> Vec<Check> {
    let x = s.clone();
    let shares = Check::new(
        FORK_SHARES,
        "fork copies the parent's block table and length into the child and counts one more \
         owner for each of those blocks; it takes no block and copies no token.",
        move || {
            for_all(CASES, layouts(3..=3), |layout| {
                let mut run = Model::new(x.as_ref(), &layout, 0)?;
                run.append_new(0, run.prefix_len())?;
                let free = run.cache.free_blocks();
                run.fork(0, 1)?;
                run.fork(1, 2)?;
                run.expect_free(free, "after forking sequence 0 into 1 and 1 into 2")?;
                run.expect_same_table(0, 1)?;
                run.expect_same_table(0, 2)?;
                run.expect_contents("after the forks")
            })
        },
    );
    let x = s.clone();
    let diverge = Check::new(
        FORK_DIVERGE,
        "Before writing into a sequence's last block, look at how many tables name it: if more \
         than one, take a free block, copy the whole block into it (every head, keys and values), \
         point this table at the copy and count one owner fewer on the old block. The other \
         sequence then owns the old block alone and writes into it in place.",
        move || {
            for_all(CASES, layouts(2..=2), |layout| {
                let mut run = Model::new(x.as_ref(), &layout, 6)?;
                let prefix = run.prefix_len();
                run.append_new(0, prefix)?;
                run.fork(0, 1)?;
                run.append_new(1, 1 + layout.seed as usize % (2 * layout.block_size))?;
                run.append_new(0, 1 + (layout.seed >> 8) as usize % (2 * layout.block_size))?;
                run.expect_contents("after both sequences appended")?;
                run.expect_shared_prefix(0, 1, prefix / layout.block_size)?;
                run.expect_free_is_unnamed("after both sequences appended")
            })
        },
    );
    let x = s.clone();
    let release = Check::new(
        FORK_RELEASE,
        "release counts one owner fewer on each block of the table, and gives back to the pool \
         only the blocks that no table names any more; a copy on write counts one owner fewer on \
         the block it leaves.",
        move || {
            for_all(
                CASES,
                layouts(3..=3).prop_filter("blocks of 2+", |l| l.block_size > 1),
                |layout| scenarios::fork_then_release(x.as_ref(), &layout),
            )
        },
    );
    let x = s.clone();
    let errors = Check::new(FORK_ERRORS, scenarios::FORK_ERRORS_HINT, move || {
        scenarios::bad_forks(x.as_ref())
    });
    let x = s;
    let random = Check::new(
        FORK_RANDOM,
        "Compare your cache with a plain list of each sequence's tokens after every call: the \
         first call where they differ names the bug. Every block is either free or named by at \
         least one table, never both.",
        move || {
            for_all(CASES, layouts(4..=4), |layout| scenarios::beam_search(x.as_ref(), &layout))
        },
    );
    vec![shares, diverge, release, errors, random]
}

/// The reference solution: the lesson's decode and the main task's cache, which lives in the
/// grader (the book explains the idea without printing it).
pub fn lesson() -> Functions {
    Functions {
        new_cache: Box::new(|batch, kv_heads, head_dim, block_size, blocks| {
            let cache = SharedPagedCache::new(batch, kv_heads, head_dim, block_size, blocks)?;
            Ok(Box::new(cache) as Box<dyn SharedCache>)
        }),
        decode: Box::new(|cache, q, options, splits| lesson11::decode(cache, q, options, splits)),
    }
}

impl SharedCache for SharedPagedCache {
    fn reads(&self) -> &dyn KeyValues {
        self
    }
    fn append(
        &mut self,
        seq: usize,
        keys: ArrayView3<f32>,
        values: ArrayView3<f32>,
    ) -> Result<(), AttentionError> {
        SharedPagedCache::append(self, seq, keys, values)
    }
    fn release(&mut self, seq: usize) -> Result<(), AttentionError> {
        SharedPagedCache::release(self, seq)
    }
    fn fork(&mut self, parent: usize, child: usize) -> Result<(), AttentionError> {
        SharedPagedCache::fork(self, parent, child)
    }
    fn free_blocks(&self) -> usize {
        SharedPagedCache::free_blocks(self)
    }
    fn block_table(&self, seq: usize) -> Option<&[usize]> {
        SharedPagedCache::block_table(self, seq)
    }
}

/// The self-check: the lesson and the bug-free control pass every check, each planted bug
/// ([`mutants::DecodingBug`]) fails the check meant to catch it.
pub fn self_check() -> crate::self_check::SelfCheck {
    crate::self_check::planted::<mutants::DecodingBug>(checks(lesson()), checks)
}
