//! Our table reader against MRT RIB dumps written by Quagga, OpenBGPD and BIRD
//! (TABLE_DUMP, TABLE_DUMP_V2 with RIB_GENERIC and ADD-PATH), each beside the prefix listing
//! a reference parser gives (`NAME.prefixes.txt`, one prefix per RIB entry).
//!
//! The samples live in ../shared/data/mrt-samples, outside the repository; when they are
//! absent the test says so and checks nothing else. The reader must give exactly the
//! listing's IPv4 prefixes (`tables::read`) and exactly its IPv6 prefixes
//! (`tables::read6`), each as a multiset.

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
        let mut want4: BTreeMap<String, usize> = BTreeMap::new();
        let mut want6: BTreeMap<String, usize> = BTreeMap::new();
        for l in listing.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let want = if l.contains(':') {
                &mut want6
            } else {
                &mut want4
            };
            *want.entry(l.to_string()).or_default() += 1;
        }
        let mut got4: BTreeMap<String, usize> = BTreeMap::new();
        let st = control::tables::read(&path, |p, _| {
            *got4.entry(p.to_string()).or_default() += 1;
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(st.mrt, "{name} was not read as MRT");
        assert_eq!(got4, want4, "{name}: IPv4 prefixes differ from the listing");
        let mut got6: BTreeMap<String, usize> = BTreeMap::new();
        let st6 = control::tables::read6(&path, |p, _| {
            *got6.entry(p.to_string()).or_default() += 1;
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got6, want6, "{name}: IPv6 prefixes differ from the listing");
        assert_eq!(
            st.routes + st.skipped,
            st6.routes + st6.skipped,
            "{name}: both reads see the same records"
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} samples in {}", dir.display());
}
