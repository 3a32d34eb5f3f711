//! Route files: one `PREFIX NEXTHOP [NEXTHOP...]` per line (several next hops make an ECMP
//! route; `#` comments and blank lines allowed).

use fib::Prefix;
use std::net::Ipv4Addr;
use std::path::Path;

/// A line that is not a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteFileError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for RouteFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for RouteFileError {}

/// Parses route-file text, calling `each(prefix, next_hops, line)` per route.
pub fn parse(
    file: &str,
    text: &str,
    mut each: impl FnMut(Prefix, &[Ipv4Addr], usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    let mut hops = Vec::with_capacity(4);
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let err = |message: String| RouteFileError {
            file: file.to_string(),
            line: i + 1,
            message,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let p = words.next().unwrap_or("");
        hops.clear();
        for h in words {
            hops.push(
                h.parse::<Ipv4Addr>()
                    .map_err(|_| err(format!("next hop {h:?} is not an IPv4 address")))?,
            );
        }
        if hops.is_empty() {
            return Err(err(format!(
                "expected \"PREFIX NEXTHOP [NEXTHOP...]\", got {line:?}"
            )));
        }
        let prefix = Prefix::parse_strict(p).map_err(|e| err(format!("prefix {p:?}: {e}")))?;
        each(prefix, &hops, i + 1).map_err(err)?;
        n += 1;
    }
    Ok(n)
}

/// Reads a route file from disk.
pub fn load(
    path: &Path,
    each: impl FnMut(Prefix, &[Ipv4Addr], usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| RouteFileError {
        file: name.clone(),
        line: 0,
        message: format!("cannot read: {e}"),
    })?;
    parse(&name, &text, each)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_lines() {
        let mut got = Vec::new();
        let text = "# table\n198.51.100.0/24 10.2.0.2\n\n10.0.0.0/8   10.2.0.3 10.2.0.4 # x\n";
        let n = parse("r.txt", text, |p, h, l| {
            got.push((p.to_string(), h.to_vec(), l));
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        let ecmp = vec![Ipv4Addr::new(10, 2, 0, 3), Ipv4Addr::new(10, 2, 0, 4)];
        assert_eq!(got[1], ("10.0.0.0/8".to_string(), ecmp, 4));
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2\n10.0.0.0/8\n", |_, _, _| {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            (e.line, e.to_string().starts_with("r.txt:2: expected")),
            (2, true)
        );
        let e = parse("r.txt", "10.0.0.1/8 10.2.0.2\n", |_, _, _| Ok(())).unwrap_err();
        assert!(e.message.contains("host bits"), "{e}");
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2 x\n", |_, _, _| Ok(())).unwrap_err();
        assert!(e.message.contains("\"x\" is not an IPv4"), "{e}");
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2\n", |_, _, _| Err("no".into())).unwrap_err();
        assert_eq!(e.to_string(), "r.txt:1: no");
    }
}
