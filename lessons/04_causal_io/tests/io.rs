//! The bytes each algorithm moves, counted by the simulated memory, equal the closed-form
//! expressions derived in the book (chapter 4). Counts are in f32 elements here; the memory
//! counts bytes, 4 per element.

use lesson03::TileSizes;
use lesson04::{Run, TileCounts, Traffic, flash1, flash2, naive};
use ndarray::Array4;
use proptest::prelude::*;
use reference::{AttentionError, AttentionOptions, Problem, ProblemSpec};
use testkit::strategies::config;

const AMPLE: usize = 1 << 30;

/// Problem sizes: batch, heads, Nq, Nkv, D, Br, Bc.
fn sizes() -> impl Strategy<Value = (usize, usize, usize, usize, usize, usize, usize)> {
    (1..=2usize, 1..=2usize, 1..=40usize, 1..=40usize, 1..=16usize, 1..=12usize, 1..=12usize)
}

/// The signature the three algorithms share.
type Algorithm = fn(
    &Array4<f32>,
    &Array4<f32>,
    &Array4<f32>,
    &AttentionOptions,
    TileSizes,
    usize,
) -> Result<Run, AttentionError>;

fn run(algorithm: Algorithm, spec: ProblemSpec, br: usize, bc: usize) -> Run {
    let p = Problem::random(&spec, 3);
    algorithm(&p.q, &p.k, &p.v, &p.options, TileSizes::new(br, bc).unwrap(), AMPLE).unwrap()
}

fn bytes(read: usize, written: usize) -> Traffic {
    Traffic { bytes_read: 4 * read, bytes_written: 4 * written }
}

proptest! {
    #![proptest_config(config(128))]

    /// FA2: Q read once; K and V read once per Q tile; O and L written once.
    #[test]
    fn flash2_traffic_matches_its_closed_form((b, h, nq, nkv, d, br, bc) in sizes()) {
        let tq = nq.div_ceil(br);
        let heads = b * h;
        let got = run(flash2::attention, ProblemSpec::new(b, h, nq, nkv, d), br, bc).traffic;
        prop_assert_eq!(got, bytes(heads * (nq * d + 2 * tq * nkv * d), heads * (nq * d + nq)));
    }

    /// FA1: K and V read once; Q, O, m and l read, and O, m, l written, once per K/V tile;
    /// then m and l read once more to write L.
    #[test]
    fn flash1_traffic_matches_its_closed_form((b, h, nq, nkv, d, br, bc) in sizes()) {
        let tk = nkv.div_ceil(bc);
        let heads = b * h;
        let got = run(flash1::attention, ProblemSpec::new(b, h, nq, nkv, d), br, bc).traffic;
        let read = 2 * nkv * d + tk * (2 * nq * d + 2 * nq) + 2 * nq;
        let written = tk * (nq * d + 2 * nq) + nq;
        prop_assert_eq!(got, bytes(heads * read, heads * written));
    }

    /// Naive: kernel 1 reads Q once and K once per Q tile and writes S; kernel 2 reads S twice
    /// and writes P and L; kernel 3 reads P and V once per Q tile and writes O.
    #[test]
    fn naive_traffic_matches_its_closed_form((b, h, nq, nkv, d, br, bc) in sizes()) {
        let tq = nq.div_ceil(br);
        let heads = b * h;
        let got = run(naive::attention, ProblemSpec::new(b, h, nq, nkv, d), br, bc).traffic;
        let read = nq * d + 2 * tq * nkv * d + 3 * nq * nkv;
        let written = 2 * nq * nkv + nq + nq * d;
        prop_assert_eq!(got, bytes(heads * read, heads * written));
    }

    /// For Nq = Nkv and square tiles, FA2's loop order never moves more than FA1's:
    /// 2Nd + 2TNd + N <= 2Nd + 3TNd + 4TN + 3N elements for T tiles per sequence.
    /// (When Nkv is much shorter than Nq it can: FA1 reads the few K/V tiles once, FA2 once per
    /// Q tile. Proptest found B=H=1, Nq=4, Nkv=1, D=13, tiles of 1: 848 bytes against 840.)
    #[test]
    fn flash2_moves_no_more_than_flash1_when_nq_equals_nkv((b, h, n, _, d, tile, _) in sizes()) {
        let spec = ProblemSpec::new(b, h, n, n, d);
        let f1 = run(flash1::attention, spec, tile, tile).traffic;
        let f2 = run(flash2::attention, spec, tile, tile).traffic;
        prop_assert!(f2.total() <= f1.total(), "FA2 {:?} vs FA1 {:?}", f2, f1);
    }
}

/// A square causal problem of `t x t` tiles of `tile` rows: on each head, the `t` diagonal
/// tiles are masked, the `t(t-1)/2` below are full, the `t(t-1)/2` above are skipped.
#[test]
fn causal_tile_counts_match_the_closed_form() {
    for (t, tile, heads) in [(1, 4, 1), (3, 4, 2), (8, 5, 3)] {
        let n = t * tile;
        let spec = ProblemSpec::new(1, heads, n, n, 8).causal(true);
        let expected = TileCounts {
            full: heads * t * (t - 1) / 2,
            masked: heads * t,
            skipped: heads * t * (t - 1) / 2,
        };
        assert_eq!(run(flash2::attention, spec, tile, tile).tiles, expected);
        assert_eq!(run(flash1::attention, spec, tile, tile).tiles, expected);
        // Standard attention skips nothing: the tiles above the diagonal are computed, all -inf.
        let naive_expected = TileCounts {
            full: expected.full,
            masked: expected.masked + expected.skipped,
            skipped: 0,
        };
        assert_eq!(run(naive::attention, spec, tile, tile).tiles, naive_expected);
    }
}

/// Causal FA2 on `t x t` square tiles reads K and V only for the `t(t+1)/2` tiles it visits.
#[test]
fn causal_flash2_reads_only_the_tiles_it_visits() {
    let (t, tile, d) = (6, 4, 8);
    let n = t * tile;
    let got =
        run(flash2::attention, ProblemSpec::new(1, 1, n, n, d).causal(true), tile, tile).traffic;
    let visited = t * (t + 1) / 2;
    assert_eq!(got, bytes(n * d + visited * 2 * tile * d, n * d + n));
    let full = run(flash2::attention, ProblemSpec::new(1, 1, n, n, d), tile, tile).traffic;
    assert!(got.bytes_read < full.bytes_read);
}
