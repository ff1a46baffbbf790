//! Hidden checks of exercise 11, run by `cargo grade ex11`.

use ex11::PagedCache;
use grader::ex11::{Adapted, CacheMethods, Functions, SharedCache, checks};

fn main() -> std::process::ExitCode {
    // The learner's code, seen through the exercise's adapter.
    let learner = Functions {
        new_cache: Box::new(|batch, kv_heads, head_dim, block_size, blocks| {
            let cache = PagedCache::new(batch, kv_heads, head_dim, block_size, blocks)?;
            let methods = CacheMethods {
                append: PagedCache::append,
                release: PagedCache::release,
                fork: PagedCache::fork,
                free_blocks: PagedCache::free_blocks,
                block_table: PagedCache::block_table,
            };
            Ok(Box::new(Adapted { cache, methods }) as Box<dyn SharedCache>)
        }),
        decode: Box::new(ex11::decode),
    };
    grader::hidden::main(env!("CARGO_PKG_NAME"), checks(learner))
}
