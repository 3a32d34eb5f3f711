//! Our table reader against MRT RIB dumps written by Quagga, OpenBGPD and BIRD
//! (TABLE_DUMP, TABLE_DUMP_V2 with RIB_GENERIC and ADD-PATH), each beside the prefix listing
//! a reference parser gives (`NAME.prefixes.txt`, one prefix per RIB entry).
//!
//! The samples live in ../shared/data/mrt-samples, outside the repository; when they are
//! absent the test says so and checks nothing else. The reader takes IPv4 routes (IPv6 is
//! issue 18's work): it must give exactly the listing's IPv4 prefixes, as a multiset, and
//! skip one record entry or more for the listing's IPv6 ones.

use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn mrt_samples_agree_with_the_reference_listings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/mrt-samples");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("MRT SAMPLES ABSENT ({}): nothing checked", dir.display());
        return;
    };
    let mut checked = 0;
    for e in entries.flatten() {
        let path = e.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".prefixes.txt") {
            continue;
        }
        let listing = std::fs::read_to_string(dir.join(format!("{name}.prefixes.txt")))
            .unwrap_or_else(|e| panic!("{name}: its listing: {e}"));
        let mut want: BTreeMap<String, usize> = BTreeMap::new();
        let mut v6 = 0;
        for l in listing.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if l.contains(':') {
                v6 += 1;
            } else {
                *want.entry(l.to_string()).or_default() += 1;
            }
        }
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let st = control::tables::read(&path, |p, _| {
            *got.entry(p.to_string()).or_default() += 1;
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(st.mrt, "{name} was not read as MRT");
        assert_eq!(got, want, "{name}: IPv4 prefixes differ from the listing");
        assert!(
            v6 == 0 || st.skipped > 0,
            "{name}: {v6} IPv6 entries in the listing, none skipped"
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} samples in {}", dir.display());
}
