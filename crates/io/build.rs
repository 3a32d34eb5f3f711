//! Compiles the BPF programs written in C (`bpf/*.bpf.c`) with clang into BPF objects with
//! BTF, which the crate embeds and loads with libbpf (`io::bpfobj`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under the multiarch
    // directory that a `-target bpf` build does not search by itself.
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    println!("cargo:rerun-if-changed=bpf");
    let mut sources: Vec<PathBuf> = std::fs::read_dir("bpf")
        .expect("crates/io/bpf: the BPF programs' sources")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    // The headers the programs share.
    for h in std::fs::read_dir("bpf").into_iter().flatten().flatten() {
        if h.path().extension().is_some_and(|e| e == "h") {
            println!("cargo:rerun-if-changed={}", h.path().display());
        }
    }
    for src in sources {
        println!("cargo:rerun-if-changed={}", src.display());
        let name = src.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let obj = out.join(name.replace(".bpf.c", ".bpf.o"));
        let run = Command::new("clang")
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg(format!("-I{multiarch}"))
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status();
        match run {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("clang could not compile {} ({s}): see its errors above", src.display()),
            Err(e) => panic!(
                "the BPF programs are C, compiled with clang, which this machine lacks ({e}): install clang and libbpf-dev (`apt-get install clang libbpf-dev`, or `bash scripts/setup`)"
            ),
        }
    }
}
