//! Every tile shape of the specialised versions (4 to 11) at every head dimension they accept
//! compiles: naga validates the source with its constants written in, translates it to
//! SPIR-V, and every barrier is in uniform control flow. No GPU needed, so a shape that would
//! only fail on a lent GPU with tensor cores fails here, in CI, first.

use gpu::kernel::{Checks, spirv, workgroup_memory_bytes};
use gpu::wgsl::specialise;
use lesson10::tuning::load_choices;
use lesson10::{
    ArenaTiles, LeaveOut, LoadAt, PairTiles, PipelinedTiles, QueryOrder, SplitTiles, V5, V6, V8,
    V10, V11, Variant, Version,
};

/// `variant`'s shader at `head_dim` translates to SPIR-V, and every barrier is in uniform
/// control flow.
fn compiles(variant: &Variant, head_dim: usize) -> Result<(), String> {
    let label = format!("{} D={head_dim}", variant.describe());
    let shader = variant.shader(head_dim).map_err(|e| format!("{label}: {e}"))?;
    spirv(&shader.source, "flash_forward", &shader.overrides, shader.checks)
        .map_err(|e| format!("{label}: {e}"))?;
    gpu::uniformity::check_barriers(&shader.source).map_err(|e| format!("{label}: {e}"))
}

/// Every version's tile shapes, and version 8's and 9's other load timings, at `head_dim` if
/// it is one the version's rows are padded to (the f32 versions take any multiple of 4, the
/// tensor-core ones of 16, version 10 of 32).
fn variants_at(head_dim: usize) -> Vec<Variant> {
    let mut all = lesson10::every_variant(head_dim);
    all.extend(load_choices(head_dim));
    all.retain(|v| head_dim.is_multiple_of(v.row_alignment));
    all
}

#[test]
fn every_tile_shape_compiles_at_every_head_dim() {
    let mut failures = Vec::new();
    for head_dim in (4..=256).step_by(4) {
        for variant in variants_at(head_dim) {
            failures.extend(compiles(&variant, head_dim).err());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The hosts pick tiles by the workgroup memory they compute from the tiles' sizes: that
/// number must be what the shader declares, or a shape that does not fit would be launched
/// (versions 1 to 3 size their arrays with overrides, which naga cannot weigh unset).
#[test]
fn the_workgroup_memory_of_every_shape_is_what_its_shader_declares() {
    for head_dim in (4..=256).step_by(4) {
        for variant in variants_at(head_dim).into_iter().filter(|v| v.number >= 4) {
            let shader = variant.shader(head_dim).unwrap();
            let declared = workgroup_memory_bytes(&shader.source).unwrap();
            let computed = variant.workgroup_bytes(head_dim);
            assert_eq!(computed, declared, "{} at D={head_dim}", variant.describe());
        }
    }
}

/// Most versions run without bounds checks: the tiles each picks for a device must be among
/// those the tests run.
#[test]
fn every_version_prefers_only_tested_shapes() {
    for head_dim in (4..=256).step_by(4) {
        let tried: Vec<(u32, String)> =
            lesson10::every_variant(head_dim).iter().map(|v| (v.number, v.describe())).collect();
        for preferred in lesson10::every_preferred(head_dim) {
            let key = (preferred.number, preferred.describe());
            assert!(tried.contains(&key), "{} at D={head_dim} is not tested", key.1);
        }
    }
}

#[test]
fn every_measurement_variant_compiles() {
    let tiles = V5::tried(64)[0];
    for bits in 0..512 {
        if bits < 32 {
            let variant = Variant::of::<V5>(tiles).leaving_out(LeaveOut(bits));
            compiles(&variant, 64).unwrap();
        }
        let v6 = PipelinedTiles { transpose_v: false, ..tiles };
        compiles(&Variant::of::<V6>(v6).leaving_out(LeaveOut(bits)), 64).unwrap();
    }
}

#[test]
fn every_measurement_variant_of_version_10_compiles() {
    for head_dim in [64, 128] {
        let tiles = V10::preferred(head_dim)[0];
        for bits in (0..256).filter(|b| b & !LeaveOut::IN_VERSION_10.0 == 0) {
            let variant = Variant::of::<V10>(tiles).leaving_out(LeaveOut(bits));
            compiles(&variant, head_dim).unwrap();
        }
    }
}

#[test]
fn version_10_refuses_parts_it_cannot_leave_out() {
    let tiles = V10::preferred(128)[0];
    for part in [LeaveOut::STAGING, LeaveOut::RESCALE, LeaveOut::OUTPUT, LeaveOut::STASH] {
        let variant = Variant::of::<V10>(tiles).leaving_out(LeaveOut::SOFTMAX.and(part));
        let message = variant.shader(128).unwrap_err().to_string();
        assert!(message.contains(&format!("bits {:#b}", part.0)), "{message}");
        assert!(message.contains("can leave out only"), "{message}");
    }
    let v8 = Variant::of::<V8>(V8::preferred(64)[0]).leaving_out(LeaveOut::SOFTMAX);
    let message = v8.shader(64).unwrap_err().to_string();
    assert!(message.contains("v8 arena") && message.contains("only nothing"), "{message}");
}

#[test]
fn a_constant_the_shader_lacks_is_an_error() {
    let err = specialise(lesson10::v5_pipelined::SOURCE, &[("NO_SUCH_CONSTANT", 1)]).unwrap_err();
    assert!(err.to_string().contains("NO_SUCH_CONSTANT"), "{err}");
}

/// Tiles the tensor-core versions do not accept are refused with what was expected, before
/// any shader is built (no GPU needed).
#[test]
fn unsupported_subgroup_tiles_are_refused_with_what_is_expected() {
    let good = V8::preferred(64)[0];
    assert!(good.check("v8 arena", 64).is_ok());
    let three_row_tiles = ArenaTiles { row_tiles: 3, ..good };
    let eight_keys = ArenaTiles { block_kv: 8, ..good };
    let sixteen_subgroups = ArenaTiles { subgroups: 16, ..good };
    for bad in [three_row_tiles, eight_keys, sixteen_subgroups] {
        let err = bad.check("v8 arena", 64).unwrap_err().to_string();
        assert!(err.contains("v8 arena") && err.contains("expected 1 or 2 row tiles"), "{err}");
    }
    let err = good.check("v8 arena", 40).unwrap_err().to_string();
    assert!(err.contains("a head_dim that is a multiple of 16"), "{err}");
    let pairs = V10::preferred(64)[0];
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
        ArenaTiles { query_order: no_group, ..good }.check("v8 arena", 64).unwrap_err(),
        PairTiles { query_order: no_group, ..pairs }.check(64).unwrap_err(),
    ];
    for err in errors.map(|e| e.to_string()) {
        assert!(err.contains("groups of 0 workgroups; expected groups of 1 or more"), "{err}");
    }
    let split = V11::preferred(64)[0];
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
    let v6 = V6::tried(64)[0];
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
