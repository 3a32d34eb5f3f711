//! The layout rules of the README ("Layout"): no source file over 1,200 lines outside its
//! tests, no function over 150 lines outside tests (but the ones still listed), no import
//! circle between the files of a crate, and `unsafe` only where the README says. Reads the
//! sources only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 1200;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// A crate's source files (under src/), each with its module path (`a::b` for
/// src/a/b.rs or src/a/b/mod.rs; empty for lib.rs and main.rs).
fn crate_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut m: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(m.last().map(String::as_str), Some("lib" | "main" | "mod")) {
                m.pop();
            }
            (m, f)
        })
        .collect()
}

/// The file's code outside its test module (a top-level `#[cfg(test)]` ends it) with
/// comment lines left out.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

fn is_test_file(m: &[String], f: &Path) -> bool {
    m.last().is_some_and(|l| l == "tests") || f.components().any(|c| c.as_os_str() == "tests")
}

/// Paths (as segments) a line names through `crate::` or `super::`, groups opened one
/// level: `crate::{a, b::c}` names `a` and `b::c`.
fn named_paths(line: &str, anchor: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(anchor) {
        let before = rest[..i].chars().last();
        rest = &rest[i + anchor.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let seg = |s: &str| -> Vec<String> {
            let end = s
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(s.len());
            s[..end]
                .split("::")
                .map(|p| {
                    p.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|p| !p.is_empty() && p.starts_with(|c: char| c.is_ascii_lowercase()))
                .collect()
        };
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.push(seg(item.trim()));
            }
        } else {
            out.push(seg(rest));
        }
    }
    out
}

/// The files each file of a crate imports from (by `crate::` and `super::` paths), not
/// counting its own ancestors (a module's parent is where it is declared).
fn imports(files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut graph = BTreeMap::new();
    for (m, f) in files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut to = BTreeSet::new();
        for line in code(&text) {
            let mut targets: Vec<Vec<String>> = named_paths(line, "crate::");
            // `super::x` from a file is relative to its parent module.
            let parent = &m[..m.len().saturating_sub(1)];
            for p in named_paths(line, "super::") {
                let mut full = parent.to_vec();
                full.extend(p);
                targets.push(full);
            }
            for t in targets {
                let hit = (1..=t.len())
                    .rev()
                    .map(|k| t[..k].to_vec())
                    .find(|k| files.contains_key(k));
                if let Some(k) = hit {
                    if k != *m && !m.starts_with(&k) {
                        to.insert(k);
                    }
                }
            }
        }
        graph.insert(m.clone(), to);
    }
    graph
}

/// Circles in `graph`: the strongly connected components with more than one file.
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    // Files that reach each other both ways.
    let reach = |from: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(v) = stack.pop() {
            for w in graph.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    stack.push(w.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<_, _> = graph.keys().map(|v| (v.clone(), reach(v))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for v in graph.keys() {
        if done.contains(v) {
            continue;
        }
        let comp: Vec<String> = graph
            .keys()
            .filter(|w| *w == v || (reached[v].contains(*w) && reached[*w].contains(v)))
            .inspect(|w| {
                done.insert((*w).clone());
            })
            .map(|w| w.join("::"))
            .collect();
        if comp.len() > 1 {
            out.push(comp);
        }
    }
    out
}

fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<_> = std::fs::read_dir(crates_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("src").is_dir())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                p.join("src"),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 8,
        "crates not found under {}",
        crates_dir().display()
    );
    out
}

#[test]
fn no_source_file_is_over_1200_lines_outside_its_tests() {
    let mut over = Vec::new();
    for (_, src) in crates() {
        for (m, f) in crate_files(&src) {
            if is_test_file(&m, &f) {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let n = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
            if n > MAX_LINES {
                over.push(format!("{} ({n} lines)", f.display()));
            }
        }
    }
    assert!(over.is_empty(), "over {MAX_LINES} lines: {over:#?}");
}

#[test]
fn no_import_circle_between_the_files_of_a_crate() {
    let mut found = Vec::new();
    for (name, src) in crates() {
        let files = crate_files(&src);
        for c in circles(&imports(&files)) {
            found.push(format!("{name}: {}", c.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn the_circle_finder_finds_a_circle() {
    // Two files naming each other, and a third that only names one of them.
    let g: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (
            vec!["a".to_string()],
            BTreeSet::from([vec!["b".to_string()]]),
        ),
        (
            vec!["b".to_string()],
            BTreeSet::from([vec!["a".to_string()]]),
        ),
        (
            vec!["c".to_string()],
            BTreeSet::from([vec!["a".to_string()]]),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".to_string()]]);
    assert_eq!(
        named_paths("use crate::{ipv4, tcp::CHECKSUM_AT, MacAddr};", "crate::"),
        vec![vec!["ipv4".to_string()], vec!["tcp".to_string()], vec![]]
    );
    assert_eq!(
        named_paths(
            "let x = crate::routes::flow_hash(a); y::crate::z",
            "crate::"
        ),
        vec![vec!["routes".to_string(), "flow_hash".to_string()]]
    );
}

/// The README's paths under "Where `unsafe` lives" (backticked, starting `crates/`).
fn unsafe_places() -> Vec<String> {
    let readme = std::fs::read_to_string(crates_dir().join("../README.md")).unwrap();
    let start = readme
        .find("Where `unsafe` lives")
        .expect("README: no \"Where `unsafe` lives\"");
    let section = &readme[start..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|p| p.starts_with("crates/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn unsafe_lives_where_the_readme_says() {
    let places = unsafe_places();
    assert!(places.len() >= 5, "{places:?}");
    let root = crates_dir().join("..");
    let mut elsewhere = Vec::new();
    for (_, src) in crates() {
        for (m, f) in crate_files(&src) {
            if is_test_file(&m, &f) {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let has = code(&text).iter().any(|l| {
                l.contains("unsafe {")
                    || l.contains("unsafe fn ")
                    || l.contains("unsafe impl ")
                    || l.contains("unsafe extern")
            });
            let rel = f
                .canonicalize()
                .unwrap()
                .strip_prefix(root.canonicalize().unwrap())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if has && !places.iter().any(|p| rel.starts_with(p.as_str())) {
                elsewhere.push(rel);
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "`unsafe` in files the README does not name: {elsewhere:#?}"
    );
}

/// The check finds what it looks for: a crate's `unsafe` outside the README's list.
#[test]
fn the_unsafe_check_reads_the_readme_list() {
    let places = unsafe_places();
    assert!(places.iter().any(|p| p == "crates/io/"), "{places:?}");
    assert!(
        !places.iter().any(|p| p.starts_with("crates/wire")),
        "{places:?}"
    );
}

/// Lines a function may take outside tests (issue 59).
const MAX_FN_LINES: usize = 150;

/// Functions still over [`MAX_FN_LINES`], each to be split (the list only shrinks): file
/// under `crates/`, function name.
const LONG_FNS: [(&str, &str); 0] = [];

/// The functions of a file's code (outside its test module) and their lengths in lines,
/// from the `fn` line to the closing brace at the same indentation.
fn fn_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let after = [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "unsafe ",
            "const ",
        ]
        .iter()
        .fold(t, |t, p| t.strip_prefix(p).unwrap_or(t));
        let Some(rest) = after.strip_prefix("fn ") else {
            i += 1;
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // Its body's opening line (a declaration without a body ends in ';').
        let mut j = i;
        while j < lines.len() && !lines[j].trim_end().ends_with('{') {
            if lines[j].trim_end().ends_with(';') {
                break;
            }
            j += 1;
        }
        if j >= lines.len() || lines[j].trim_end().ends_with(';') {
            i = j + 1;
            continue;
        }
        let close = format!("{indent}}}");
        let mut k = j + 1;
        while k < lines.len() && lines[k].trim_end() != close {
            k += 1;
        }
        out.push((name, k - i + 1));
        i = k + 1;
    }
    out
}

#[test]
fn no_function_is_over_150_lines_but_the_listed() {
    let mut over = Vec::new();
    let mut listed_now_short = Vec::new();
    let root = crates_dir();
    for (_, src) in crates() {
        for (m, f) in crate_files(&src) {
            if is_test_file(&m, &f) {
                continue;
            }
            let rel = f
                .canonicalize()
                .unwrap()
                .strip_prefix(root.canonicalize().unwrap())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            for (name, n) in fn_lengths(&text) {
                let listed = LONG_FNS.contains(&(rel.as_str(), name.as_str()));
                if n > MAX_FN_LINES && !listed {
                    over.push(format!("{rel}: {name} ({n} lines)"));
                }
                if n <= MAX_FN_LINES && listed {
                    listed_now_short.push(format!("{rel}: {name} ({n} lines)"));
                }
            }
        }
    }
    assert!(over.is_empty(), "over {MAX_FN_LINES} lines: {over:#?}");
    assert!(
        listed_now_short.is_empty(),
        "split: take these off LONG_FNS: {listed_now_short:#?}"
    );
}

#[test]
fn the_function_lengths_are_counted_from_fn_to_its_brace() {
    let text = "fn a() {\n    x;\n}\n\n    pub(crate) fn b(\n        y: u8,\n    ) -> u8 {\n        y\n    }\nfn c();\n";
    assert_eq!(
        fn_lengths(text),
        vec![("a".to_string(), 3), ("b".to_string(), 5)]
    );
}
