//! With the `dpdk` feature, compiles `csrc/dpdk_contenders.c` against the system's DPDK
//! (found by `pkg-config libdpdk`; on Debian `bash scripts/setup --dpdk` installs it).
//! Without the feature it does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk();
}

#[cfg(feature = "dpdk")]
fn dpdk() {
    println!("cargo:rerun-if-changed=csrc/dpdk_contenders.c");
    let out = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output();
    let cflags = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => panic!(
            "the `dpdk` feature needs DPDK's development files, and `pkg-config --cflags \
             libdpdk` did not find them: run `bash scripts/setup --dpdk` (Debian: libdpdk-dev)"
        ),
    };
    let mut b = cc::Build::new();
    b.file("csrc/dpdk_contenders.c").warnings(true);
    let mut args = cflags.split_whitespace();
    while let Some(a) = args.next() {
        if let Some(dir) = a.strip_prefix("-I") {
            b.include(dir);
        } else if a == "-include" {
            if let Some(h) = args.next() {
                b.flag("-include").flag(h);
            }
        } else {
            b.flag(a);
        }
    }
    b.compile("dpdk_contenders");
    for lib in ["rte_lpm", "rte_fib", "rte_eal"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}
