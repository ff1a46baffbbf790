//! The machine code the NVIDIA driver made of each kernel, as text, and a count of its
//! instructions by kind.
//!
//! Vulkan gives no way to ask for a pipeline's machine code, but it lets a program read back
//! a pipeline cache, and the NVIDIA driver (580) keeps the compiled code in it.
//! `shader_stats --out DIR` writes each kernel's cache, for that kernel alone, to
//! `DIR/<kernel>.cache`. This example takes those files apart: a zstd-compressed container
//! (read with `ruzstd`) whose header gives the size and place of the code, written out raw as
//! `DIR/<kernel>.code` and disassembled by NVIDIA's `nvdisasm` (in the CUDA toolkit, or
//! `pip install nvidia-cuda-nvdisasm`) into `DIR/<kernel>.sass`. The layout of the container
//! was read off blobs of driver 580.159.04 (2026-11-25): another driver may lay it out
//! differently, which this example reports rather than guesses.
//!
//! It needs NVIDIA's driver and `nvdisasm`, though no GPU where it runs: the cache files come
//! from `shader_stats --out` on an NVIDIA GPU (no other driver keeps this code in its cache),
//! and can be brought back from the machine that made them.
//!
//! ```text
//! cargo run --release -p lab --bin shader_stats -- --only v8 --out stats   # on the GPU
//! cargo run --release -p lab --bin sass -- stats            # anywhere
//! cargo run --release -p lab --bin sass -- stats --arch SM90 --nvdisasm /path/nvdisasm
//! cargo run --release -p lab --bin sass -- stats --only d64_v8_8x1   # files starting so
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use bench::report::{Cell, Table};

/// The start of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The container's first bytes once decompressed (driver 580).
const CONTAINER_MAGIC: &[u8] = b"NVDANVVMNVuc";

/// The kinds of instruction counted, by the start of their names in the disassembly: the
/// tensor cores, the loads of fragments, workgroup-memory loads and stores, global loads and
/// stores, the exponential unit, barriers, shuffles, branches.
const KINDS: [&str; 11] =
    ["HMMA", "LDSM", "LDS", "STS", "LDG", "STG", "MUFU", "BAR", "SHFL", "BRA", "F2FP"];

/// The machine code inside one pipeline-cache blob: the bytes of the code section.
fn machine_code(blob: &[u8]) -> Result<Vec<u8>, String> {
    let start = blob
        .windows(4)
        .position(|w| w == ZSTD_MAGIC)
        .ok_or("no zstd frame in the cache data (not an NVIDIA driver's cache?)")?;
    let mut decoder = ruzstd::decoding::StreamingDecoder::new(&blob[start..])
        .map_err(|e| format!("zstd: {e}"))?;
    let mut container = Vec::new();
    decoder.read_to_end(&mut container).map_err(|e| format!("zstd: {e}"))?;
    if !container.starts_with(CONTAINER_MAGIC) {
        return Err(format!(
            "the container starts with {:?}, not {:?}: a driver whose layout this example \
             does not know",
            &container[..container.len().min(12)],
            String::from_utf8_lossy(CONTAINER_MAGIC)
        ));
    }
    // Driver 580: the code's size at byte 0x4c, the offset of its section at 0x50; the code
    // starts 8 bytes into that section.
    let word = |at: usize| -> Result<usize, String> {
        let bytes = container.get(at..at + 4).ok_or("the container is too short")?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
    };
    let (size, offset) = (word(0x4c)?, word(0x50)? + 8);
    let code = container.get(offset..offset + size).ok_or_else(|| {
        format!("the header gives code at {offset:#x}..+{size:#x}, past the container's end")
    })?;
    if size == 0 || !size.is_multiple_of(16) {
        return Err(format!("the header gives {size} bytes of code, not whole instructions"));
    }
    Ok(code.to_vec())
}

/// `nvdisasm`'s listing of the raw code in `path` for architecture `arch` (e.g. SM90).
fn disassemble(nvdisasm: &Path, arch: &str, path: &Path) -> Result<String, String> {
    let output = Command::new(nvdisasm).args(["-b", arch]).arg(path).output().map_err(|e| {
        format!(
            "{}: {e}; nvdisasm is in the CUDA toolkit, or `pip install nvidia-cuda-nvdisasm` \
                 (then give --nvdisasm .../nvidia/cu13/bin/nvdisasm)",
            nvdisasm.display()
        )
    })?;
    if !output.status.success() || !output.stderr.is_empty() {
        return Err(format!("nvdisasm: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// How many instructions of the listing start with each of [`KINDS`] (`LDS` does not count
/// `LDSM`), and how many there are in all.
fn count(listing: &str) -> (Vec<usize>, usize) {
    let mut counts = vec![0; KINDS.len()];
    let mut total = 0;
    for line in listing.lines() {
        // "/*0130*/  @!P0 LDG.E.64.CONSTANT R2, [R2.U32+UR10] ;": the opcode follows the
        // address and an optional predicate.
        let Some(rest) = line.trim().strip_prefix("/*").and_then(|l| l.split_once("*/")) else {
            continue;
        };
        let mut words = rest.1.split_whitespace();
        let Some(mut opcode) = words.next() else { continue };
        if opcode.starts_with('@') {
            opcode = words.next().unwrap_or("");
        }
        total += 1;
        let name = opcode.split('.').next().unwrap_or("");
        if let Some(k) = KINDS.iter().position(|kind| *kind == name) {
            counts[k] += 1;
        }
    }
    (counts, total)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let usage = "usage: sass DIR [--arch SM90] [--nvdisasm PATH] [--only PREFIXES]";
    let dir = PathBuf::from(args.first().ok_or(usage)?);
    let arch = value("--arch").map_or("SM90", String::as_str);
    let nvdisasm = PathBuf::from(value("--nvdisasm").map_or("nvdisasm", String::as_str));
    let only = bench::report::names_arg(&args, "--only")?;
    let mut blobs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "cache"))
        .filter(|path| {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            only.is_empty() || only.iter().any(|prefix| stem.starts_with(prefix.as_str()))
        })
        .collect();
    blobs.sort();
    if blobs.is_empty() {
        return Err(format!(
            "no .cache files (of those asked for) in {}: run shader_stats --out first",
            dir.display()
        ));
    }
    let mut header = vec!["kernel".to_string(), "instructions".to_string()];
    header.extend(KINDS.iter().map(|k| k.to_string()));
    let mut table = Table::new(&header);
    for blob_path in blobs {
        let name = blob_path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        let blob =
            std::fs::read(&blob_path).map_err(|e| format!("{}: {e}", blob_path.display()))?;
        let code = match machine_code(&blob) {
            Ok(code) => code,
            Err(e) => {
                println!("{name}: {e}");
                continue;
            }
        };
        let code_path = blob_path.with_extension("code");
        std::fs::write(&code_path, &code).map_err(|e| format!("{}: {e}", code_path.display()))?;
        let listing = disassemble(&nvdisasm, arch, &code_path)?;
        std::fs::write(blob_path.with_extension("sass"), &listing).map_err(|e| e.to_string())?;
        let (counts, total) = count(&listing);
        let mut row = vec![Cell::Text(name), Cell::int(total)];
        row.extend(counts.into_iter().map(Cell::int));
        table.push(row);
    }
    println!("{}", table.to_text());
    println!("wrote a .code and a .sass file beside each .cache file in {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_counted_after_address_and_predicate() {
        let listing = "\t.headerflags\n        /*0000*/   S2R R19, SR_TID.X ;\n\
                       /*0010*/  @!P0 LDG.E.64.CONSTANT R2, [R2.U32+UR10] ;\n\
                       /*0020*/  LDSM.16.M88.4 R4, [R85+0x5220] ;\n\
                       /*0030*/  LDS.128 R8, [R8+0x240] ;\n";
        let (counts, total) = count(listing);
        assert_eq!(total, 4);
        let at = |kind| counts[KINDS.iter().position(|k| *k == kind).unwrap()];
        assert_eq!((at("LDG"), at("LDSM"), at("LDS"), at("HMMA")), (1, 1, 1, 0));
    }

    #[test]
    fn data_without_a_zstd_frame_is_refused() {
        assert!(machine_code(b"no frame here").unwrap_err().contains("no zstd frame"));
    }
}
