//! The orders of work of versions 8 to 10, written into their shaders as constants: when each
//! thread reads the next K and V ([`LoadAt`]), the order in which a workgroup reads the tiles
//! of K and V ([`KeyOrder`]), and which query tile each workgroup takes ([`QueryOrder`]).

use gpu::GpuError;
use reference::AttentionError;

/// When version 8 reads each thread's share of the next K and V tiles from global memory.
/// Version 9 reads them where they are staged ([`LoadAt::Staging`]) or, for both other
/// choices, at the start of the phase that stages them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadAt {
    /// Where they are staged, after the softmax: no registers held across the products.
    Staging = 0,
    /// At the start of the products before their staging.
    Products = 1,
    /// A whole tile ahead, as version 6 does.
    TileAhead = 2,
}

impl LoadAt {
    /// How the kernels' names say it ([`crate::Version::describe`]).
    pub(crate) fn phrase(self) -> &'static str {
        match self {
            LoadAt::Staging => "at staging",
            LoadAt::Products => "before products",
            LoadAt::TileAhead => "a tile ahead",
        }
    }
}

/// The order in which a workgroup of versions 8 to 10 reads the tiles of K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// Tile 0, 1, 2, ...: the workgroups of a slice read the same tile at about the same time.
    InOrder = 0,
    /// Workgroup x of a slice, of `query_tiles`, starts at tile `x * spread / query_tiles` of
    /// its `tiles` and wraps around (the shaders' `kv_tile`). Without the causal mask `spread`
    /// is `tiles`, or the tiles in 4 MiB of K and V where a slice's take more (D = 128 at
    /// N = 16384: 178.4 TFLOP/s against 154.3 spread over all 8 MiB, version 10 on an H100,
    /// 2026-11-27); with the mask it is `tiles` (169.4 against 161.4 with the cap there).
    Rotated = 1,
}

impl KeyOrder {
    /// How the kernels' names say it ([`crate::Version::describe`]): nothing for the
    /// original order.
    pub(crate) fn phrase(self) -> &'static str {
        match self {
            KeyOrder::InOrder => "",
            KeyOrder::Rotated => ", keys rotated",
        }
    }
}

/// Which query tile of which slice each workgroup of versions 8 to 10 takes (the shaders'
/// `assignment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryOrder {
    /// Workgroup (x, y) of the grid takes query tile x of slice y: with the causal mask the
    /// longest workgroups of each slice are launched last, and the slice launched last ends
    /// the dispatch with its longest.
    AsLaunched,
    /// With the causal mask, the workgroups take the slices in groups of about `workgroups`
    /// workgroups (at least one slice), and in each group the query tiles longest first, the
    /// group's slices in turn: the shortest workgroups end each group and the dispatch. Without
    /// the mask, as launched. With the keys rotated, groups of about two rounds of the
    /// workgroups the GPU holds at once ran fastest with the mask: version 10 at D = 128 (one
    /// workgroup on each of 132 multiprocessors) with 256 at 149.7 TFLOP/s against 140.4 as
    /// launched at N = 4096 and 170.6 against 163.6 at 16384, version 8 at D = 64 (two) with 512
    /// at 139.3 against 124.2 and 156.1 against 151.4 (the lab's `tune --query-groups`, one run
    /// on an H200, 2026-11-29: the chapter's "Longest first, in groups").
    LongestFirst {
        /// Workgroups in a group: rounded down to whole slices.
        workgroups: usize,
    },
}

impl QueryOrder {
    /// Workgroups in a group, as the shaders' `QUERY_GROUP` takes it: 0 for as launched.
    pub(crate) fn group(self) -> usize {
        match self {
            QueryOrder::AsLaunched => 0,
            QueryOrder::LongestFirst { workgroups } => workgroups,
        }
    }

    /// How the kernels' names say it ([`crate::Version::describe`]): nothing for as
    /// launched.
    pub(crate) fn phrase(self) -> String {
        match self {
            QueryOrder::AsLaunched => String::new(),
            QueryOrder::LongestFirst { workgroups } => {
                format!(", longest first in groups of {workgroups}")
            }
        }
    }

    /// Longest first in groups of about two rounds of the workgroups an H100 holds at once,
    /// the groups measured fastest: 132 multiprocessors with `per_multiprocessor` workgroups
    /// on each, so 256 where one workgroup fits a multiprocessor (version 10 at D = 128) and
    /// 512 where two do (version 8's 16-key tiles at D = 64).
    pub(crate) fn two_rounds(per_multiprocessor: usize) -> Self {
        QueryOrder::LongestFirst { workgroups: 256 * per_multiprocessor }
    }

    /// The order as the tests tell orders apart: any group of query tiles taken longest first
    /// is tested as one, since the group's size changes no index
    /// (`orders_of_work_over_several_query_tiles_and_slices` runs groups that split the grid).
    pub(crate) fn as_tested(self) -> Self {
        match self {
            QueryOrder::LongestFirst { workgroups } if workgroups > 0 => {
                QueryOrder::LongestFirst { workgroups: 1 }
            }
            order => order,
        }
    }

    /// Whether `version` can take this order: groups of at least one workgroup.
    pub(crate) fn check(self, version: &str) -> Result<(), AttentionError> {
        if self == (QueryOrder::LongestFirst { workgroups: 0 }) {
            return Err(GpuError::KernelMisuse(format!(
                "{version}: query tiles longest first in groups of 0 workgroups; expected \
                 groups of 1 or more (or QueryOrder::AsLaunched)"
            ))
            .into());
        }
        Ok(())
    }

    /// Each of `tiles` in the orders tested: keys in order and as launched, keys rotated and
    /// as launched, keys rotated and `longest_first`.
    pub(crate) fn tried<T: Copy>(
        tiles: Vec<T>,
        longest_first: QueryOrder,
        with: impl Fn(T, KeyOrder, QueryOrder) -> T,
    ) -> Vec<T> {
        let orders = [
            (KeyOrder::InOrder, QueryOrder::AsLaunched),
            (KeyOrder::Rotated, QueryOrder::AsLaunched),
            (KeyOrder::Rotated, longest_first),
        ];
        let mut all = Vec::new();
        for (key_order, query_order) in orders {
            all.extend(tiles.iter().map(|&t| with(t, key_order, query_order)));
        }
        all
    }
}
