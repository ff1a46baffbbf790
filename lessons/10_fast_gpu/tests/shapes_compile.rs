//! Every tile shape of the specialised versions (4 to 11) at every head dimension they accept
//! compiles: naga validates the source with its constants written in, translates it to
//! SPIR-V, and every barrier is in uniform control flow. No GPU needed, so a shape that would
//! only fail on a lent GPU with tensor cores fails here, in CI, first.

use gpu::kernel::{Checks, spirv, workgroup_memory_bytes};
use gpu::wgsl::specialise;
use lesson10::{
    ArenaTiles, F32Tiles, LeaveOut, LoadAt, PairTiles, PipelinedTiles, QueryOrder,
    SpecialisedTiles, SplitTiles, V4_SPECIALISED, V5_PIPELINED, V8_ARENA, V9_OVERLAP,
};

fn compiles(label: &str, source: &str) -> Result<(), String> {
    spirv(source, "flash_forward", &[], Checks::Off).map_err(|e| format!("{label}: {e}"))?;
    gpu::uniformity::check_barriers(source).map_err(|e| format!("{label}: {e}"))
}

#[test]
fn every_tile_shape_compiles_at_every_head_dim() {
    let mut failures = Vec::new();
    for head_dim in (16..=256).step_by(16) {
        for tiles in SpecialisedTiles::tried(head_dim) {
            let source = specialise(V4_SPECIALISED, &tiles.constants(head_dim)).unwrap();
            failures.extend(compiles(&format!("v4 {tiles:?} D={head_dim}"), &source).err());
        }
        for tiles in PipelinedTiles::tried(head_dim) {
            let source =
                specialise(V5_PIPELINED, &tiles.constants(head_dim, LeaveOut::NOTHING)).unwrap();
            failures.extend(compiles(&format!("v5 {tiles:?} D={head_dim}"), &source).err());
        }
        for tiles in PipelinedTiles::tried_in_registers(head_dim) {
            let source = tiles.source_in_registers(head_dim, LeaveOut::NOTHING).unwrap();
            failures.extend(compiles(&format!("v6 {tiles:?} D={head_dim}"), &source).err());
        }
        for tiles in
            ArenaTiles::tried(head_dim).into_iter().chain(ArenaTiles::load_choices(head_dim))
        {
            let source = tiles.source(head_dim).unwrap();
            failures.extend(compiles(&format!("v8 {tiles:?} D={head_dim}"), &source).err());
            let source = tiles.source_from(V9_OVERLAP, head_dim).unwrap();
            failures.extend(compiles(&format!("v9 {tiles:?} D={head_dim}"), &source).err());
        }
        if head_dim % 32 == 0 {
            for tiles in PairTiles::tried(head_dim) {
                let source = tiles.source(head_dim).unwrap();
                failures.extend(compiles(&format!("v10 {tiles:?} D={head_dim}"), &source).err());
            }
        }
        for tiles in SplitTiles::tried(head_dim) {
            let source = tiles.source(head_dim).unwrap();
            failures.extend(compiles(&format!("v11 {tiles:?} D={head_dim}"), &source).err());
        }
    }
    // Version 7 takes any head dimension (rows are padded to a multiple of 4).
    for head_dim in (4..=256).step_by(4) {
        for tiles in F32Tiles::tried(head_dim) {
            let source = tiles.source(head_dim).unwrap();
            failures.extend(compiles(&format!("v7 {tiles:?} D={head_dim}"), &source).err());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Version 8's host (version 9's too) picks tiles by the workgroup memory it computes from
/// their sizes: that number must be what the shader declares, or a shape that does not fit
/// would be launched.
#[test]
fn version_8_workgroup_memory_is_what_the_shader_declares() {
    for head_dim in (16..=256).step_by(16) {
        for tiles in ArenaTiles::tried(head_dim) {
            for template in [V8_ARENA, V9_OVERLAP] {
                let source = tiles.source_from(template, head_dim).unwrap();
                let declared = workgroup_memory_bytes(&source).unwrap();
                assert_eq!(tiles.workgroup_bytes(head_dim), declared, "{tiles:?} at D={head_dim}");
            }
        }
    }
}

/// The same for version 10, at the head dimensions it takes (it pads to a multiple of 32).
#[test]
fn version_10_workgroup_memory_is_what_the_shader_declares() {
    for head_dim in (32..=256).step_by(32) {
        for tiles in PairTiles::tried(head_dim) {
            let declared = workgroup_memory_bytes(&tiles.source(head_dim).unwrap()).unwrap();
            assert_eq!(tiles.workgroup_bytes(head_dim), declared, "{tiles:?} at D={head_dim}");
        }
    }
}

/// The same for version 11, whose arena holds K, V and P twice (hi and lo).
#[test]
fn version_11_workgroup_memory_is_what_the_shader_declares() {
    for head_dim in (16..=256).step_by(16) {
        for tiles in SplitTiles::tried(head_dim) {
            let declared = workgroup_memory_bytes(&tiles.source(head_dim).unwrap()).unwrap();
            assert_eq!(tiles.workgroup_bytes(head_dim), declared, "{tiles:?} at D={head_dim}");
        }
    }
}

#[test]
fn every_measurement_variant_compiles() {
    let tiles = PipelinedTiles::tried(64)[0];
    for bits in 0..512 {
        if bits < 32 {
            let source = specialise(V5_PIPELINED, &tiles.constants(64, LeaveOut(bits))).unwrap();
            compiles(&format!("v5 leaving out {bits:#b}"), &source).unwrap();
        }
        let source = tiles.source_in_registers(64, LeaveOut(bits)).unwrap();
        compiles(&format!("v6 leaving out {bits:#b}"), &source).unwrap();
    }
}

#[test]
fn every_measurement_variant_of_version_10_compiles() {
    for head_dim in [64, 128] {
        let tiles = PairTiles::preferred(head_dim)[0];
        for bits in (0..256).filter(|b| b & !LeaveOut::IN_VERSION_10.0 == 0) {
            let source = tiles.source_leaving_out(head_dim, LeaveOut(bits)).unwrap();
            compiles(&format!("v10 at D={head_dim} leaving out {bits:#b}"), &source).unwrap();
        }
    }
}

#[test]
fn version_10_refuses_parts_it_cannot_leave_out() {
    let tiles = PairTiles::preferred(128)[0];
    for part in [LeaveOut::STAGING, LeaveOut::RESCALE, LeaveOut::OUTPUT, LeaveOut::STASH] {
        let err = tiles.source_leaving_out(128, LeaveOut::SOFTMAX.and(part)).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("bits {:#b}", part.0)), "{message}");
        assert!(message.contains("can leave out only"), "{message}");
    }
}

#[test]
fn a_constant_the_shader_lacks_is_an_error() {
    let err = specialise(V5_PIPELINED, &[("NO_SUCH_CONSTANT", 1)]).unwrap_err();
    assert!(err.to_string().contains("NO_SUCH_CONSTANT"), "{err}");
}

/// Version 8 runs without bounds checks: the tiles it picks for a device must be among those
/// the tests run.
#[test]
fn version_8_prefers_only_tested_shapes() {
    for head_dim in (16..=256).step_by(16) {
        let tried = ArenaTiles::tried(head_dim);
        for tiles in ArenaTiles::preferred(head_dim) {
            assert!(tried.contains(&tiles), "{tiles:?} at D={head_dim} is not tested");
        }
    }
}

/// Tiles the tensor-core versions do not accept are refused with what was expected, before
/// any shader is built (no GPU needed).
#[test]
fn unsupported_subgroup_tiles_are_refused_with_what_is_expected() {
    let good = ArenaTiles::preferred(64)[0];
    assert!(good.check(64).is_ok());
    let three_row_tiles = ArenaTiles { row_tiles: 3, ..good };
    let eight_keys = ArenaTiles { block_kv: 8, ..good };
    let sixteen_subgroups = ArenaTiles { subgroups: 16, ..good };
    for bad in [three_row_tiles, eight_keys, sixteen_subgroups] {
        let err = bad.check(64).unwrap_err().to_string();
        assert!(err.contains("v8 arena") && err.contains("expected 1 or 2 row tiles"), "{err}");
    }
    let err = good.check(40).unwrap_err().to_string();
    assert!(err.contains("a head_dim that is a multiple of 16"), "{err}");
    let pairs = PairTiles::preferred(64)[0];
    assert!(pairs.check(64).is_ok());
    let three_subgroups = PairTiles { subgroups: 3, ..pairs };
    let sixteen_keys = PairTiles { block_kv: 16, ..pairs };
    let a_tile_ahead = PairTiles { load_at: LoadAt::TileAhead, ..pairs };
    for bad in [three_subgroups, sixteen_keys, a_tile_ahead] {
        let err = bad.check(64).unwrap_err().to_string();
        assert!(err.contains("v10 pairs") && err.contains("expected 2, 4 or 8 subgroups"), "{err}");
    }
    let err = pairs.check(48).unwrap_err().to_string();
    assert!(err.contains("a head_dim that is a multiple of 32"), "{err}");
    let no_group = QueryOrder::LongestFirst { workgroups: 0 };
    let errors = [
        ArenaTiles { query_order: no_group, ..good }.check(64).unwrap_err(),
        PairTiles { query_order: no_group, ..pairs }.check(64).unwrap_err(),
    ];
    for err in errors.map(|e| e.to_string()) {
        assert!(err.contains("groups of 0 workgroups; expected groups of 1 or more"), "{err}");
    }
    let split = SplitTiles::preferred(64)[0];
    assert!(split.check(64).is_ok());
    for bad in [SplitTiles { subgroups: 2, ..split }, SplitTiles { block_kv: 64, ..split }] {
        let err = bad.check(64).unwrap_err().to_string();
        assert!(
            err.contains("v11 split f32") && err.contains("expected 4 or 8 subgroups"),
            "{err}"
        );
    }
    let err = split.check(40).unwrap_err().to_string();
    assert!(err.contains("a head_dim that is a multiple of 16"), "{err}");
    let v6 = PipelinedTiles::tried_in_registers(64)[0];
    assert!(v6.check("v6 registers", 64).is_ok());
    let err = PipelinedTiles { row_tiles: 3, ..v6 }.check("v6 registers", 64).unwrap_err();
    assert!(err.to_string().contains("v6 registers"), "{err}");
}

/// Why no version gives some subgroups the products and others the softmax at the same time
/// (FlashAttention-3's "ping-pong" of warp groups): naga requires cooperative-matrix
/// operations in control flow that is uniform across the whole workgroup, and a branch on
/// the subgroup's index is not. The same product with no branch compiles. If a naga release
/// accepts the branch, this test fails, and that design becomes possible in WGSL.
#[test]
fn cooperative_matrices_cannot_be_given_to_some_subgroups_only() {
    let shader = |condition: &str| {
        format!(
            "enable f16;
enable wgpu_cooperative_matrix;
var<workgroup> tile: array<f16, 256>;
var<workgroup> out: array<f32, 256>;
@compute @workgroup_size(64)
fn flash_forward(@builtin(subgroup_id) sg: u32) {{
    var c = coop_mat16x16<f32, C>();
    if {condition} {{
        let a = coopLoad<coop_mat16x16<f16, A>>(&tile[0], 16u);
        let b = coopLoad<coop_mat16x16<f16, B>>(&tile[0], 16u);
        c = coopMultiplyAdd(a, b, c);
    }}
    coopStore(c, &out[0], 16u);
}}
"
        )
    };
    let uniform = shader("true");
    spirv(&uniform, "flash_forward", &[], Checks::Off).expect("the product compiles unbranched");
    let err = spirv(&shader("sg == 0u"), "flash_forward", &[], Checks::Off).unwrap_err();
    assert!(err.to_string().contains("uniformity"), "{err}");
}
