//! Writes every diagram of the book to `book/src/figures/diagrams/`.
//!
//! ```text
//! cargo run -p diagrams
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let root = diagrams::workspace_root();
    let folder = root.join(diagrams::FOLDER);
    let written = diagrams::all(&root.join("book/src/generated")).and_then(|all| {
        std::fs::create_dir_all(&folder).map_err(|e| format!("{}: {e}", folder.display()))?;
        for diagram in &all {
            let path = folder.join(format!("{}.svg", diagram.name));
            std::fs::write(&path, &diagram.svg).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(all.len())
    });
    match written {
        Ok(count) => {
            println!("wrote {count} diagrams to {}", diagrams::FOLDER);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
